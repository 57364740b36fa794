"""One-time context injection (the Q&A-cycle design's ``inject_screen_context``).

The first call for a session adds one assistant entry built from ``cache.injection_template``
(default "I can see you're on a specific screen. {prompt_injection}") to the entry log, caches
the proactive tool results, and marks the session (``injection_done``) — all in one
transaction. A second call is refused with ``ALREADY_DONE`` (-32006) and changes nothing.

The proactive results live in the tool cache, so they reach the context through
``ToolCache.context_messages`` while they are cached (and leave it when their duration runs
out), rather than being copied into the log as well and shown twice. The injection entry's
metadata lists their cache keys. The answer returns the messages the Q&A-cycle design returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memman.errors import ALREADY_DONE, MemmanError

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.events import EventBus
    from memman_daemon.sessions import Sessions
    from memman_daemon.tiers.cache import ToolCache


class Injection:
    """``memman_session_inject``: the one-time injection entry and its cached tool results."""

    def __init__(self, config: Config, events: EventBus, sessions: Sessions,
                 cache: ToolCache) -> None:
        self.config = config
        self.events = events
        self.sessions = sessions
        self.cache = cache
        self.injected = 0

    async def inject(self, session_id: str, prompt_injection: str,
                     tool_results: list[Any], client: str = "") -> dict[str, Any]:
        s = self.sessions.get(session_id)
        if s.meta.injection_done:
            raise MemmanError(ALREADY_DONE, f"context injection for session {session_id!r} was "
                              "already done; it happens once per session")
        entries = []
        for tr in tool_results:  # shaped as memman.schemas.INJECTED_RESULT (checked there)
            tool = tr.get("tool") or tr.get("tool_name")
            params = tr.get("params", tr.get("parameters", {}))
            opts = {k: tr[k] for k in ("duration", "ttl_s", "call_id") if k in tr}
            entries.append(self.cache.build(session_id, tool, params, tr["result"], opts))
        text = self.config.cache.injection_template.format(prompt_injection=prompt_injection)
        entry = self.sessions.build_entry(s, {
            "type": "context", "role": "assistant", "content": text,
            "metadata": {"injection": True, "proactive_tools": [e.key for e in entries]}})
        s.meta.injection_done = True
        s.meta.updated_at = entry.created_at
        cache_ops, evicted = self.cache.stage(entries, client)
        try:  # the session's own rollback is the log's; the staged cache entries are ours
            await self.sessions.append(s, [entry], meta=True, extra=cache_ops)
        except Exception:
            self.cache.unstage(entries, evicted)
            raise
        self.injected += 1
        self.cache.published_put(entries, evicted)
        self.events.publish("session", "injected", {"entry_id": entry.id,
                                                    "cached": [e.key for e in entries]},
                            **self.sessions.scope(s))
        messages = [entry.chat_message()]
        if entries:
            messages += self.cache.context_messages_for(entries)
        return {"entry_id": entry.id, "cached": [e.key for e in entries], "messages": messages}
