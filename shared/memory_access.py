"""The tiered access pattern over a client (the design's agent-side API):
``memory.scratchpad.write(...)``, ``memory.preferences.update(key, value)``,
``memory.preferences.get(key)``.

    from memman import SyncClient
    from memman.memory_access import Memory

    with SyncClient() as mm:
        memory = Memory(mm, session_id="s1", user_id="ana", tenant_id="acme")
        memory.scratchpad.write("Orders spike on Mondays.")
        memory.preferences.update("analysis depth", "detailed")
        memory.preferences.get("analysis depth")          # -> "detailed"
        memory.docs.search("fiscal year")                 # business context, best first

With the asyncio ``Client`` the same calls return awaitables (``await
memory.preferences.get(key)``). Each method is one protocol call; docs/protocol.md has the
details and errors.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from memman import names


def _then(result: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to a call's result, now (sync client) or when awaited (async client)."""
    if inspect.isawaitable(result):
        async def later() -> Any:
            return fn(await result)
        return later()
    return fn(result)


class _Part:
    def __init__(self, memory: Memory) -> None:
        self._m = memory

    def _call(self, method: str, *params: Any) -> Any:
        return self._m.client.call(method, *params)


class ScratchpadAccess(_Part):
    """The session scratchpad (the L1/L2 cache of the memory tiers): at most 64 snippets, LRU."""

    def write(self, text: str, *, explicit: bool = False, salience: float | None = None,
              surprisal: float | None = None, flow: str | None = None) -> Any:
        """Add a snippet (a repeat raises its frequency); returns the snippet map."""
        opts: dict[str, Any] = {"explicit": explicit} if explicit else {}
        for k, v in (("salience", salience), ("surprisal", surprisal), ("flow", flow)):
            if v is not None:
                opts[k] = v
        return _then(self._call(names.SCRATCHPAD_WRITE, self._m.session_id, text, opts),
                     lambda r: r["snippet"])

    def read(self) -> Any:
        """All snippet texts in writing order (counts as use)."""
        return _then(self._call(names.SCRATCHPAD_READ, self._m.session_id),
                     lambda r: [s["text"] for s in r["snippets"]])

    def snippets(self) -> Any:
        """All snippets as maps (id, frequency, promoted, ...)."""
        return _then(self._call(names.SCRATCHPAD_READ, self._m.session_id),
                     lambda r: r["snippets"])

    def evict(self, snippet_id: int) -> Any:
        return self._call(names.SCRATCHPAD_EVICT, self._m.session_id, snippet_id)

    def candidates(self) -> Any:
        """Promotion scores, best first, with the reason for each part."""
        return _then(self._call(names.SCRATCHPAD_CANDIDATES, self._m.session_id),
                     lambda r: r["candidates"])

    def promote(self, snippet_id: int, target: str, **opts: Any) -> Any:
        """target: preference (key=), rule (condition=), playbook (flow=...) or business."""
        return self._call(names.SCRATCHPAD_PROMOTE, self._m.session_id, snippet_id, target, opts)


class PreferencesAccess(_Part):
    """User preferences (semantic memory): key -> value, for the user across sessions."""

    def update(self, key: str, value: Any) -> Any:
        """Set a preference (overwrites; the previous value is in the result)."""
        return self._call(names.MEMORY_LEARN, self._m.user_id, key, value, {})

    def get(self, key: str, default: Any = None) -> Any:
        """The value, or ``default`` when the user has none."""
        return _then(self._call(names.MEMORY_RECALL, self._m.user_id, key),
                     lambda r: default if r is None else r["value"])


class PlaybooksAccess(_Part):
    """Trajectory playbooks (procedural memory)."""

    def save(self, flow: str, *, user_query: str = "", outcome: str = "",
             slots: dict[str, Any] | None = None, tool_calls: list[Any] | None = None) -> Any:
        return self._call(names.MEMORY_APPEND, self._m.user_id, "procedural", {
            "flow": flow, "user_query": user_query, "outcome": outcome, "slots": slots or {},
            "tool_calls": tool_calls or []})

    def for_flow(self, flow: str) -> Any:
        """Playbooks of this flow id (exact), newest first."""
        return _then(self._call(names.MEMORY_SEARCH, self._m.user_id, "procedural", "",
                                {"flow": flow}), lambda r: r["results"])

    def search(self, query: str, limit: int = 5) -> Any:
        return _then(self._call(names.MEMORY_SEARCH, self._m.user_id, "procedural", query,
                                {"kind": "playbook", "limit": limit}), lambda r: r["results"])


class EpisodicAccess(_Part):
    """Searchable past events of the user."""

    def append(self, content: str, **metadata: Any) -> Any:
        return self._call(names.MEMORY_APPEND, self._m.user_id, "episodic",
                          {"content": content, "metadata": metadata})

    def search(self, query: str, limit: int = 10) -> Any:
        return _then(self._call(names.MEMORY_SEARCH, self._m.user_id, "episodic", query,
                                {"limit": limit}), lambda r: r["results"])


class DocsAccess(_Part):
    """Business context of the tenant (documents and agent.md)."""

    def add(self, content: str, doc_id: str | None = None, title: str | None = None) -> Any:
        doc: dict[str, Any] = {"content": content}
        if doc_id:
            doc["doc_id"] = doc_id
        if title:
            doc["title"] = title
        return self._call(names.DOCS_ADD, self._m.tenant_id, doc)

    def search(self, query: str, limit: int = 10) -> Any:
        return _then(self._call(names.DOCS_SEARCH, self._m.tenant_id, query, {"limit": limit}),
                     lambda r: r["results"])


class Memory:
    """The tiers of one session / user / tenant, as the design's inner classes (scratchpad, preferences, rules, docs)."""

    def __init__(self, client: Any, session_id: str | None = None, user_id: str = "default",
                 tenant_id: str = "default") -> None:
        self.client = client  #: a memman Client or SyncClient (anything with ``call``)
        self.session_id = session_id
        self.user_id = user_id
        self.tenant_id = tenant_id
        self.scratchpad = ScratchpadAccess(self)
        self.preferences = PreferencesAccess(self)
        self.playbooks = PlaybooksAccess(self)
        self.episodic = EpisodicAccess(self)
        self.docs = DocsAccess(self)
