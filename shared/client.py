"""The asyncio client: many concurrent requests on one connection, matched by msgid.

    client = await Client.connect(name="my-agent")
    await client.session_open("s1", {"user_id": "ana"})      # == call("memman_session_open", ...)
    await client.session_add("s1", {"role": "user", "content": "hi"})
    sub = await client.subscribe(["session"], {"session_id": "s1"}, callback=print)

Errors from the daemon raise ``MemmanError`` (``code``, ``message``); a lost connection raises
``ConnectionLost`` in every waiting call.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memman import names, paths
from memman.errors import ConnectionLost, MemmanError
from memman.protocol import (
    FrameDecoder,
    Notification,
    ProtocolError,
    Response,
    pack_request,
    parse,
)

EventCallback = Callable[[str, dict[str, Any]], Any]


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 name: str = "client", socket_path: Path | None = None,
                 max_message_bytes: int = 64 * 1024 * 1024) -> None:
        self.name = name
        self.socket_path = socket_path
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._subs: dict[int, EventCallback] = {}
        #: called for every notification (event name, params) — e.g. memman_error_event
        self.notification_handlers: list[Callable[[str, Any], Any]] = []
        #: the last memman_error_event (e.g. why the daemon refused or closed this connection)
        self.error_event: dict[str, Any] | None = None
        self._decoder = FrameDecoder(max_message_bytes)
        self._closed = asyncio.Event()
        self._reader_task = asyncio.create_task(self._read_loop(), name=f"memman-client-{name}")

    @classmethod
    async def connect(cls, socket_path: str | os.PathLike | None = None, *, name: str = "client",
                      timeout: float = 5.0) -> Client:
        path = paths.socket_path(socket_path)[0]
        paths.check_socket_owner(path)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=2**20), timeout)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise ConnectionLost(f"no memman daemon at {path} ({exc.strerror or exc}); "
                                 "start one with `memman daemon`") from None
        client = cls(reader, writer, name=name, socket_path=path)
        await client.call(names.SET_CLIENT_INFO, name, {"library": "memman.Client"})
        return client

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- calls ---------------------------------------------------------------------------
    async def call(self, method: str, *params: Any) -> Any:
        if self._closed.is_set():
            raise ConnectionLost()
        msgid = next(self._ids) % 2**32
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msgid] = fut
        try:
            self._writer.write(pack_request(msgid, method, params))
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._pending.pop(msgid, None)
            raise ConnectionLost(f"connection to the memman daemon was lost: {exc}") from None
        try:
            return await fut
        finally:
            self._pending.pop(msgid, None)

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        if attr.startswith("_"):
            raise AttributeError(attr)

        async def method(*params: Any) -> Any:
            return await self.call(f"memman_{attr}", *params)

        method.__name__ = attr
        return method

    def memory(self, session_id: str | None = None, user_id: str = "default",
               tenant_id: str = "default") -> Any:
        """Seed 002's access pattern (``memory.preferences.get(key)`` ...), see memman.memory_access."""
        from memman.memory_access import Memory

        return Memory(self, session_id=session_id, user_id=user_id, tenant_id=tenant_id)

    async def subscribe(self, topics: list[str] | tuple[str, ...] = (),
                        filter: dict[str, str] | None = None,
                        callback: EventCallback | None = None) -> int:
        """Subscribe; ``callback(event_name, payload)`` runs for each event (may be async)."""
        result = await self.call(names.SUBSCRIBE, list(topics), filter or {})
        sub_id = result["subscription"]
        if callback is not None:
            self._subs[sub_id] = callback
        return sub_id

    async def unsubscribe(self, sub_id: int) -> bool:
        self._subs.pop(sub_id, None)
        return (await self.call(names.UNSUBSCRIBE, sub_id))["removed"]

    # --- connection ----------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        if not self._closed.is_set():
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader_task
        self._fail_all(ConnectionLost("the client was closed"))
        self._closed.set()

    def _fail_all(self, exc: Exception) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(exc)
        self._pending.clear()

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(2**18)
                if not data:
                    break
                self._decoder.feed(data)
                for obj in self._decoder:
                    self._handle(parse(obj))
        except (ConnectionError, ProtocolError, OSError):
            pass
        finally:
            self._closed.set()
            err = self.error_event  # the daemon's own reason, when it said why it closed
            self._fail_all(MemmanError(err.get("code", -32603), str(err.get("message")))
                           if err else ConnectionLost())

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, Response):
            fut = self._pending.get(msg.msgid)
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
            for h in self.notification_handlers:
                _run(h, msg.method, payload)
            if isinstance(payload, dict):
                cb = self._subs.get(payload.get("subscription"))  # type: ignore[arg-type]
                if cb is not None:
                    _run(cb, msg.method, payload)


def _run(fn: Callable[..., Any], *args: Any) -> None:
    result = fn(*args)
    if inspect.isawaitable(result):
        asyncio.ensure_future(result)
