"""Adapters that put memman behind other agent frameworks' interfaces.

Each imports its framework only when used, so ``import memman`` stays light:
``memman.integrations.openai_agents`` (``memman-agent[agents]``),
``memman.integrations.langchain`` (``memman-agent[langchain]``) and
``memman.integrations.langgraph`` (``memman-agent[langgraph]``). The MCP server is
``memman.integrations.mcp_server`` (``memman mcp``; its SDK is a dependency).
"""
