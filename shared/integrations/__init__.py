"""Adapters that put memman behind other agent frameworks' memory interfaces.

Each module imports its framework when imported itself (install the matching extra):
``memman.integrations.openai_agents`` (``memman[agents]``) and
``memman.integrations.langchain`` (``memman[langchain]``). The MCP server is ``memman.mcp``
(``memman[mcp]``).
"""
