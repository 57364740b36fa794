"""The asyncio client: many concurrent requests on one connection, matched by msgid.

    client = await Client.connect(name="my-agent")
    await client.session_open("s1", {"user_id": "ana"})      # == call("memman_session_open", ...)
    await client.session_add("s1", {"role": "user", "content": "hi"})
    sub = await client.subscribe(["session"], {"session_id": "s1"}, callback=print)

Every protocol method is a typed method (``memman.methods.AsyncMethods``, generated from
``memman.api.METHODS``); ``call(name, *params)`` reaches any method, including ones newer
than this client (so does ``client.<name>(...)`` at run time).

**Surviving a daemon restart.** A lost connection is re-opened on the next call, and a call
answered -32007 (the daemon is stopping) is sent again, with bounded backoff
(``memman.reconnect.RetryPolicy``; ``retry=False`` turns it off). Subscriptions are re-created
on the new connection, and every possible loss of events is reported as an ``EventGap``
(``on_gap`` callback, ``client.gaps``). A write whose connection dropped in flight is not sent
again (its outcome is unknown): it raises ``ConnectionLost``.

Errors raise the ``MemmanError`` subclass of their code's family (``SessionNotFound``,
``InvalidParams``, ``Conflict``, ``Busy``, ``ConnectionLost``...; see ``memman.errors``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memman import names, paths
from memman.errors import (
    INTERNAL_ERROR,
    ConnectionLost,
    MemmanError,
    error_for,
)
from memman.methods import AsyncMethods
from memman.protocol import (
    FrameDecoder,
    Notification,
    ProtocolError,
    Response,
    pack_request,
    parse,
)
from memman.reconnect import EventGap, GapCallback, RetryPolicy, Subscriptions, next_retry

EventCallback = Callable[[str, dict[str, Any]], Any]



class _Unsent(Exception):
    """The call never left: the connection was down (carries the error to raise)."""

    def __init__(self, error: MemmanError) -> None:
        self.error = error


class _Connection:
    """One open socket: its reader task and the calls waiting for an answer on it."""

    def __init__(self, client: Client, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, max_message_bytes: int) -> None:
        self.client = client
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.decoder = FrameDecoder(max_message_bytes)
        self.closed = asyncio.Event()
        self.error: MemmanError | None = None  #: why it closed (the daemon's error event)
        self.task = asyncio.create_task(self._read_loop(), name=f"memman-client-{client.name}")

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self.reader.read(2**18)
                if not data:
                    break
                self.decoder.feed(data)
                for obj in self.decoder:
                    self.client._handle(self, parse(obj))
        except (ConnectionError, ProtocolError, OSError):
            pass
        finally:
            self.lost()

    def lost(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        err = self.client.error_event  # the daemon's own reason, when it said why it closed
        if err is not None and self.error is None:
            self.error = error_for(err.get("code", INTERNAL_ERROR), str(err.get("message")))
        exc = self.error or ConnectionLost()
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self.pending.clear()
        self.client._subs.connection_lost()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task
        self.error = ConnectionLost("the client was closed")
        self.lost()


class Client(AsyncMethods):
    def __init__(self, socket_path: str | os.PathLike | None = None, *, name: str = "client",
                 info: dict[str, Any] | None = None, retry: RetryPolicy | bool | None = None,
                 on_gap: GapCallback | None = None, timeout: float = 5.0,
                 max_message_bytes: int = 64 * 1024 * 1024) -> None:
        """A client not yet connected: ``await client.open()`` (or use ``Client.connect``)."""
        self.name = name
        self.socket_path: Path = paths.socket_path(socket_path)[0]
        #: sent with memman_set_client_info on every connect (e.g. {"errors": "nvim"})
        self.info: dict[str, Any] = {"library": "memman.Client", **(info or {})}
        self.retry = RetryPolicy.of(retry)
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes
        #: called for every notification (event name, params) — e.g. memman_error_event
        self.notification_handlers: list[Callable[[str, Any], Any]] = []
        #: the last memman_error_event (e.g. why the daemon refused or closed this connection)
        self.error_event: dict[str, Any] | None = None
        self.reconnects = 0  #: connections re-opened after a loss
        self._ids = itertools.count(1)
        self._conn: _Connection | None = None
        self._connecting = asyncio.Lock()
        self._closed_by_caller = False
        self._subs = Subscriptions(on_gap=(lambda gap: _run(on_gap, gap)) if on_gap else None)

    @classmethod
    async def connect(cls, socket_path: str | os.PathLike | None = None, *, name: str = "client",
                      timeout: float = 5.0, info: dict[str, Any] | None = None,
                      retry: RetryPolicy | bool | None = None,
                      on_gap: GapCallback | None = None) -> Client:
        """Connect now; no daemon at the socket raises ``ConnectionLost`` at once."""
        client = cls(socket_path, name=name, info=info, retry=retry, on_gap=on_gap,
                     timeout=timeout)
        await client.open()
        return client

    async def open(self) -> None:
        async with self._connecting:
            if self._conn is None or self._conn.closed.is_set():
                await self._open_connection()

    async def _open_connection(self) -> None:
        """The one place a connection is made: socket, client info, subscriptions again."""
        path = self.socket_path
        paths.check_socket_owner(path)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=2**20), self.timeout)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise ConnectionLost(f"no memman daemon at {path} ({exc.strerror or exc}); "
                                 "start one with `memman daemon`") from None
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to the memman daemon at {path}: {exc}") from None
        was_connected = self._conn is not None
        self.error_event = None
        conn = self._conn = _Connection(self, reader, writer, self.max_message_bytes)
        try:
            await self._request(conn, names.SET_CLIENT_INFO, (self.name, self.info))
            for sub in list(self._subs.by_id.values()):
                result = await self._request(conn, names.SUBSCRIBE, (sub.topics, sub.filter))
                self._subs.resubscribed(sub, result["subscription"])
                self._deliver_early(sub)
        except _Unsent as unsent:
            await conn.close()
            raise unsent.error from None
        except BaseException:
            await conn.close()
            raise
        if was_connected:
            self.reconnects += 1

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- calls ---------------------------------------------------------------------------
    async def call(self, method: str, *params: Any) -> Any:
        """Send one request; retried per ``self.retry`` after -32007 or a lost connection."""
        delays: Iterator[float] | None = None  # made at the first failure: the common path pays nothing for retries
        while True:
            try:
                conn = await self._live_connection()
                return await self._request(conn, method, params)
            except _Unsent as unsent:
                exc, sent = unsent.error, False
            except MemmanError as err:
                exc, sent = err, True
            delay, delays = next_retry(exc, method, sent, self.retry, delays,
                                       self._closed_by_caller)
            await asyncio.sleep(delay)

    async def _live_connection(self) -> _Connection:
        if self._closed_by_caller:
            raise ConnectionLost("the client was closed")
        conn = self._conn
        if conn is not None and not conn.closed.is_set():
            return conn
        if not self.retry.reconnect and conn is not None:
            raise conn.error or ConnectionLost()
        try:
            await self.open()
        except MemmanError as exc:
            raise _Unsent(exc) from None
        assert self._conn is not None
        return self._conn

    async def _request(self, conn: _Connection, method: str, params: tuple[Any, ...]) -> Any:
        if conn.closed.is_set():
            raise _Unsent(conn.error or ConnectionLost())
        msgid = next(self._ids) % 2**32
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        conn.pending[msgid] = fut
        try:
            conn.writer.write(pack_request(msgid, method, params))
            await conn.writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            conn.pending.pop(msgid, None)
            raise _Unsent(ConnectionLost(
                f"connection to the memman daemon was lost: {exc}")) from None
        try:
            return await fut
        finally:
            conn.pending.pop(msgid, None)

    if not TYPE_CHECKING:  # at run time only: mypy flags a misspelled method
        def __getattr__(self, attr: str) -> Callable[..., Any]:
            """``client.foo_bar(...)`` calls ``memman_foo_bar``: methods newer than this client."""
            if attr.startswith("_"):
                raise AttributeError(attr)

            async def method(*params: Any) -> Any:
                return await self.call(f"memman_{attr}", *params)

            method.__name__ = attr
            return method

    def memory(self, session_id: str | None = None, user_id: str = "default",
               tenant_id: str = "default") -> Any:
        """The tiered access pattern (``memory.preferences.get(key)`` ...), see memman.memory_access."""
        from memman.memory_access import Memory

        return Memory(self, session_id=session_id, user_id=user_id, tenant_id=tenant_id)

    async def subscribe(self, topics: list[str] | tuple[str, ...] = (),
                        filter: dict[str, str] | None = None,
                        callback: EventCallback | None = None) -> int:
        """Subscribe; ``callback(event_name, payload)`` runs for each event (may be async).

        The id returned stays valid across reconnects (events carry it as ``subscription``).
        """
        result = await self.call(names.SUBSCRIBE, list(topics), filter or {})
        sub = self._subs.add(result["subscription"], list(topics), filter or {}, callback)
        self._deliver_early(sub)
        return sub.id

    def _deliver_early(self, sub: Any) -> None:
        for name, payload in self._subs.early_events(sub):
            if sub.callback is not None:
                _run(sub.callback, name, payload)

    async def unsubscribe(self, sub_id: int) -> bool:
        sub = self._subs.remove(sub_id)
        if sub is None:
            return False
        return bool((await self.call(names.UNSUBSCRIBE, sub.server_id))["removed"])

    @property
    def gaps(self) -> list[EventGap]:
        """Every possible loss of events seen so far (oldest first)."""
        return self._subs.gaps

    # --- connection ----------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True while no connection is open (the next call reconnects unless closed by close())."""
        return self._conn is None or self._conn.closed.is_set()

    async def wait_closed(self) -> None:
        """Until the current connection closes."""
        if self._conn is not None:
            await self._conn.closed.wait()

    async def close(self) -> None:
        self._closed_by_caller = True
        if self._conn is not None:
            await self._conn.close()

    def _handle(self, conn: _Connection, msg: Any) -> None:
        if isinstance(msg, Response):
            fut = conn.pending.get(msg.msgid)
            if fut is None or fut.done():
                return
            if msg.error is not None:
                fut.set_exception(MemmanError.from_wire(msg.error))
            else:
                fut.set_result(msg.result)
        elif isinstance(msg, Notification):
            params = msg.params if isinstance(msg.params, list) else [msg.params]
            payload = params[0] if params else {}
            if msg.method == names.ERROR_EVENT and isinstance(payload, dict):
                self.error_event = payload
            sub = self._subs.event(payload, msg.method) if isinstance(payload, dict) else None
            for h in self.notification_handlers:
                _run(h, msg.method, payload)
            if sub is not None and sub.callback is not None:
                _run(sub.callback, msg.method, payload)


def _run(fn: Callable[..., Any], *args: Any) -> None:
    result = fn(*args)
    if inspect.isawaitable(result):
        asyncio.ensure_future(result)
