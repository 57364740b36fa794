"""The TUI's one door to the daemon: ``memman.Client`` plus graceful degradation.

Every call the app makes goes through :class:`Backend`. A method the daemon does not have yet
(absent from ``memman_get_api_info`` or answered with -32601) yields :data:`UNAVAILABLE` from
:meth:`Backend.optional`, so a panel can say "not available" instead of crashing. The parameter
shapes of every method live here, in one place, next to the names from ``memman.names``.

This module never imports textual: the backend is usable (and tested) without the app.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from memman import names
from memman.errors import METHOD_NOT_FOUND, MemmanError


class _Unavailable:
    """Marker: the daemon does not offer this method (yet)."""

    _instance: _Unavailable | None = None

    def __new__(cls) -> _Unavailable:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UNAVAILABLE"


UNAVAILABLE: Any = _Unavailable()

EventCallback = Callable[[str, dict[str, Any]], None]
#: connect(socket_path) -> a client with call/subscribe/unsubscribe/close/closed/wait_closed
ClientFactory = Callable[[str | None], Awaitable[Any]]


async def default_client_factory(socket_path: str | None) -> Any:
    from memman.client import Client

    return await Client.connect(socket_path=socket_path, name="memman-tui")


class Backend:
    """A connected client, the daemon's method list, and typed helpers for each call."""

    def __init__(self, client: Any, api_info: dict[str, Any] | None = None) -> None:
        self.client = client
        self.api_info = api_info or {}
        raw = self.api_info.get("methods") or []
        # methods may be listed as names or as maps with a "name"
        self.methods: set[str] = {m["name"] if isinstance(m, dict) else str(m) for m in raw}
        self.missing: set[str] = set()  #: methods that answered -32601 at run time

    @classmethod
    async def connect(cls, socket_path: str | None = None,
                      factory: ClientFactory | None = None) -> Backend:
        client = await (factory or default_client_factory)(socket_path)
        try:
            info = await client.call(names.GET_API_INFO)
        except MemmanError:
            info = {}
        return cls(client, info if isinstance(info, dict) else {})

    # --- plumbing ----------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return bool(getattr(self.client, "closed", False))

    async def wait_closed(self) -> None:
        await self.client.wait_closed()

    async def close(self) -> None:
        try:
            await self.client.close()
        except Exception:  # closing a dead connection is not an error worth showing
            pass

    def has(self, method: str) -> bool:
        if method in self.missing:
            return False
        return not self.methods or method in self.methods

    async def call(self, method: str, *params: Any) -> Any:
        """Call a method; errors propagate as MemmanError (ConnectionLost on disconnect)."""
        return await self.client.call(method, *params)

    async def optional(self, method: str, *params: Any) -> Any:
        """Call a method, or return UNAVAILABLE when the daemon does not offer it."""
        if not self.has(method):
            return UNAVAILABLE
        try:
            return await self.client.call(method, *params)
        except MemmanError as exc:
            if exc.code == METHOD_NOT_FOUND:
                self.missing.add(method)
                return UNAVAILABLE
            raise

    async def subscribe(self, callback: EventCallback, topics: list[str] | None = None,
                        filter: dict[str, str] | None = None) -> Any:
        return await self.client.subscribe(topics=topics or [], filter=filter or {},
                                           callback=callback)

    # --- spine -------------------------------------------------------------------------
    async def stats(self) -> Any:
        return await self.optional(names.STATS)

    async def session_list(self) -> list[dict[str, Any]]:
        result = await self.call(names.SESSION_LIST)
        if isinstance(result, dict):  # tolerate {"sessions": [...]}
            result = result.get("sessions", [])
        return list(result or [])

    async def session_get(self, session_id: str, opts: dict[str, Any] | None = None) -> Any:
        if opts:
            return await self.optional(names.SESSION_GET, session_id, opts)
        return await self.optional(names.SESSION_GET, session_id)

    # --- session engine ----------------------------------------------------------------
    async def session_context(self, session_id: str) -> Any:
        return await self.optional(names.SESSION_CONTEXT, session_id)

    async def session_preview(self, session_id: str) -> Any:
        return await self.optional(names.SESSION_PREVIEW, session_id)

    async def sent_view(self, session_id: str) -> Any:
        """The context as sent now (memman_session_context with ``peek``: no side effects),
        read into a :class:`memman_tui.sent.SentView`; UNAVAILABLE on an older daemon."""
        from memman_tui.sent import read_answer

        answer = await self.optional(names.SESSION_CONTEXT, session_id, {"peek": True})
        if not isinstance(answer, dict):
            return UNAVAILABLE
        return read_answer(answer)

    async def session_series(self, session_id: str, limit: int | None = None) -> Any:
        return await self.optional(names.SESSION_SERIES, session_id,
                                   {} if limit is None else {"limit": limit})

    async def undo(self, opts: dict[str, Any] | None = None) -> Any:
        return await self.optional(names.UNDO, opts or {})

    async def clients_list(self) -> Any:
        return await self.optional(names.CLIENTS_LIST)

    async def audit_list(self, filt: dict[str, Any]) -> Any:
        return await self.optional(names.AUDIT_LIST, filt)

    async def session_pin(self, session_id: str, entry_id: int, pinned: bool) -> Any:
        return await self.optional(names.SESSION_PIN, session_id, entry_id, pinned)

    async def session_expand(self, session_id: str, summary_id: int) -> Any:
        return await self.optional(names.SESSION_EXPAND, session_id, summary_id)

    async def session_compact(self, session_id: str) -> Any:
        return await self.optional(names.SESSION_COMPACT, session_id)

    # --- tool cache --------------------------------------------------------------------
    async def cache_list(self, session_id: str) -> Any:
        return await self.optional(names.CACHE_LIST, session_id)

    async def cache_evict(self, session_id: str, key: str) -> Any:
        return await self.optional(names.CACHE_EVICT, session_id, key)

    # --- scratchpad --------------------------------------------------------------------
    async def scratchpad_read(self, session_id: str) -> Any:
        return await self.optional(names.SCRATCHPAD_READ, session_id)

    async def scratchpad_candidates(self, session_id: str) -> Any:
        return await self.optional(names.SCRATCHPAD_CANDIDATES, session_id)

    async def scratchpad_evict(self, session_id: str, snippet_id: Any) -> Any:
        return await self.optional(names.SCRATCHPAD_EVICT, session_id, snippet_id)

    async def scratchpad_promote(self, session_id: str, snippet_id: Any, target: str,
                                 opts: dict[str, Any] | None = None) -> Any:
        if opts:
            return await self.optional(names.SCRATCHPAD_PROMOTE, session_id, snippet_id, target, opts)
        return await self.optional(names.SCRATCHPAD_PROMOTE, session_id, snippet_id, target)

    # --- user memory and business context ---------------------------------------------
    async def memory_list(self, user_id: str, memory_type: str) -> Any:
        """{"records": [...]}, newest first; memory_type: semantic, procedural, episodic."""
        return await self.optional(names.MEMORY_LIST, user_id, memory_type)

    async def memory_search(self, user_id: str, memory_type: str, query: str) -> Any:
        return await self.optional(names.MEMORY_SEARCH, user_id, memory_type, query)

    async def memory_stats(self, user_id: str) -> Any:
        return await self.optional(names.MEMORY_STATS, user_id)

    async def docs_list(self, tenant_id: str) -> Any:
        return await self.optional(names.DOCS_LIST, tenant_id)

    async def docs_search(self, tenant_id: str, query: str) -> Any:
        return await self.optional(names.DOCS_SEARCH, tenant_id, query)
