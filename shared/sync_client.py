"""A blocking client for scripts: one request at a time over a plain socket.

    with SyncClient() as mm:
        mm.session_open("s1")
        print(mm.session_get("s1"))

Events from ``subscribe`` are queued while calls wait; read them with ``next_event(timeout)``.
"""

from __future__ import annotations

import collections
import itertools
import os
import socket
from pathlib import Path
from typing import Any

from memman import names, paths
from memman.errors import ConnectionLost, MemmanError
from memman.protocol import FrameDecoder, Notification, Response, pack_request, parse


class SyncClient:
    def __init__(self, socket_path: str | os.PathLike | None = None, *, name: str = "client",
                 timeout: float | None = 30.0) -> None:
        self.name = name
        self.socket_path: Path = paths.socket_path(socket_path)[0]
        paths.check_socket_owner(self.socket_path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(str(self.socket_path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            self._sock.close()
            raise ConnectionLost(f"no memman daemon at {self.socket_path} ({exc.strerror}); "
                                 "start one with `memman daemon`") from None
        self._ids = itertools.count(1)
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._events: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self.call(names.SET_CLIENT_INFO, name, {"library": "memman.SyncClient"})

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def call(self, method: str, *params: Any) -> Any:
        msgid = next(self._ids) % 2**32
        try:
            self._sock.sendall(pack_request(msgid, method, params))
        except OSError as exc:
            raise self._lost(f"connection to the memman daemon was lost: {exc}") from None
        while True:
            try:
                msg = self._next_message(None)
            except ConnectionLost as exc:
                raise self._lost(exc.message) from None
            if isinstance(msg, Response) and msg.msgid == msgid:
                if msg.error is not None:
                    raise MemmanError.from_wire(msg.error)
                return msg.result

    def _lost(self, message: str) -> MemmanError:
        """The daemon's own reason (a memman_error_event before it closed) when it gave one."""
        for event, payload in reversed(self._events):
            if event == names.ERROR_EVENT and isinstance(payload, dict):
                return MemmanError(payload.get("code", -32603), str(payload.get("message")))
        return ConnectionLost(message)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return lambda *params: self.call(f"memman_{attr}", *params)

    def memory(self, session_id: str | None = None, user_id: str = "default",
               tenant_id: str = "default") -> Any:
        """Seed 002's access pattern (``memory.preferences.get(key)`` ...), see memman.memory_access."""
        from memman.memory_access import Memory

        return Memory(self, session_id=session_id, user_id=user_id, tenant_id=tenant_id)

    def subscribe(self, topics: list[str] | tuple[str, ...] = (),
                  filter: dict[str, str] | None = None) -> int:
        return self.call(names.SUBSCRIBE, list(topics), filter or {})["subscription"]

    def next_event(self, timeout: float | None = 5.0) -> tuple[str, dict[str, Any]] | None:
        """The next queued or arriving event, or None after ``timeout`` seconds."""
        if self._events:
            return self._events.popleft()
        try:
            self._next_message(timeout)
        except TimeoutError:
            return None
        return self._events.popleft() if self._events else None

    def _next_message(self, timeout: float | None) -> Any:
        old = self._sock.gettimeout()
        if timeout is not None:
            self._sock.settimeout(timeout)
        try:
            while True:
                for obj in self._decoder:
                    msg = parse(obj)
                    if isinstance(msg, Notification):
                        params = msg.params if isinstance(msg.params, list) else [msg.params]
                        self._events.append((msg.method, params[0] if params else {}))
                        if timeout is not None:
                            return msg
                        continue
                    return msg
                try:
                    data = self._sock.recv(2**18)
                except TimeoutError:
                    raise TimeoutError from None
                except OSError as exc:  # e.g. reset by the daemon
                    raise ConnectionLost(f"connection to the memman daemon was lost: {exc}") from None
                if not data:
                    raise ConnectionLost()
                self._decoder.feed(data)
        finally:
            self._sock.settimeout(old)
