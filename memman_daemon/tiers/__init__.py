"""The tiers beside the session log: tool cache, injection, scratchpad and promotion, user
memory, business documents, agent.md, and the audit log of their changes."""
