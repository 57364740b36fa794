"""The TUI's one door to the daemon: the typed client methods plus graceful degradation.

:class:`Backend` is ``memman.methods.AsyncMethods`` (the methods generated from
``memman.api.METHODS``, each returning its shape from ``memman.types``) over a connected
client, with one change: a method the daemon does not offer (absent from
``memman_get_api_info`` or answered with -32601) yields :data:`UNAVAILABLE` instead of raising,
so a panel can say "not available" instead of crashing. Parameter shapes and field names are
the client library's; nothing about the protocol is written here.

This module never imports textual: the backend is usable (and tested) without the app.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from memman import names
from memman.errors import METHOD_NOT_FOUND, MemmanError
from memman.methods import AsyncMethods
from memman.reconnect import GapCallback


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
#: connect(socket_path, on_gap) -> a client with call/subscribe/unsubscribe/close/closed/
#: wait_closed that calls ``on_gap`` when events of a subscription went missing
ClientFactory = Callable[[str | None, GapCallback | None], Awaitable[Any]]


async def default_client_factory(socket_path: str | None, on_gap: GapCallback | None) -> Any:
    from memman.client import Client

    return await Client.connect(socket_path=socket_path, name="memman-tui", on_gap=on_gap)


class Backend(AsyncMethods):
    """A connected client and the daemon's method list; every typed method of the client
    library, answering :data:`UNAVAILABLE` for a method the daemon does not offer."""

    def __init__(self, client: Any, api_info: dict[str, Any] | None = None) -> None:
        self.client = client
        self.api_info = api_info or {}
        self.methods: set[str] = {m["name"] for m in self.api_info.get("methods") or []}
        self.missing: set[str] = set()  #: methods that answered -32601 at run time

    @classmethod
    async def connect(cls, socket_path: str | None = None, factory: ClientFactory | None = None,
                      on_gap: GapCallback | None = None) -> Backend:
        """``on_gap``: events went missing (the client library checks ``seq``, the one check)."""
        client = await (factory or default_client_factory)(socket_path, on_gap)
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
        """Call a method, or return UNAVAILABLE when the daemon does not offer it; other errors
        propagate as MemmanError (ConnectionLost on disconnect)."""
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

    async def sent_view(self, session_id: str) -> Any:
        """The context as sent now (memman_session_context with ``peek``: no side effects),
        read into a :class:`memman_tui.sent.SentView`; UNAVAILABLE on an older daemon."""
        from memman_tui.sent import read_answer

        answer = await self.session_context(session_id, {"peek": True})
        if not isinstance(answer, dict):
            return UNAVAILABLE
        return read_answer(answer)
