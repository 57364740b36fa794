"""The LLM at the edge of the daemon: the summarizer client and its extractive fallback."""
