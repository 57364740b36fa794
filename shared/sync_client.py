"""A blocking client for scripts: one request at a time over a plain socket.

    with SyncClient() as mm:
        mm.session_open("s1")
        print(mm.session_get("s1"))

Events from ``subscribe`` are queued while calls wait; read them with ``next_event(timeout)``.
Like ``memman.Client`` it has a typed method per protocol method, reconnects after a lost
connection and retries -32007 with bounded backoff (``retry=False`` turns that off),
re-subscribes, and reports possible event losses as ``EventGap`` (``on_gap``, ``gaps``).
"""

from __future__ import annotations

import collections
import itertools
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memman import names, paths
from memman.errors import (
    INTERNAL_ERROR,
    ConnectionLost,
    MemmanError,
    error_for,
)
from memman.methods import SyncMethods
from memman.protocol import FrameDecoder, Notification, Response, pack_request, parse
from memman.reconnect import EventGap, GapCallback, RetryPolicy, Subscriptions, next_retry


class _Unsent(Exception):
    def __init__(self, error: MemmanError) -> None:
        self.error = error


class SyncClient(SyncMethods):
    def __init__(self, socket_path: str | os.PathLike | None = None, *, name: str = "client",
                 timeout: float | None = 30.0, info: dict[str, Any] | None = None,
                 retry: RetryPolicy | bool | None = None,
                 on_gap: GapCallback | None = None) -> None:
        """Connect now; no daemon at the socket raises ``ConnectionLost`` at once."""
        self.name = name
        self.socket_path: Path = paths.socket_path(socket_path)[0]
        self.timeout = timeout
        self.info: dict[str, Any] = {"library": "memman.SyncClient", **(info or {})}
        self.retry = RetryPolicy.of(retry)
        self.reconnects = 0  #: connections re-opened after a loss
        self._ids = itertools.count(1)
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._events: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._subs = Subscriptions(on_gap=on_gap)
        self._closed_by_caller = False
        self._connected_once = False
        self._connect()

    def _connect(self) -> None:
        """The one place a connection is made: socket, client info, subscriptions again."""
        paths.check_socket_owner(self.socket_path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.socket_path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise ConnectionLost(f"no memman daemon at {self.socket_path} ({exc.strerror}); "
                                 "start one with `memman daemon`") from None
        except OSError as exc:
            sock.close()
            raise ConnectionLost(f"cannot connect to the memman daemon at {self.socket_path}: "
                                 f"{exc}") from None
        self._sock = sock
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._events = collections.deque(e for e in self._events if e[0] != names.ERROR_EVENT)
        try:
            self._request(names.SET_CLIENT_INFO, (self.name, self.info))
            for sub in list(self._subs.by_id.values()):
                result = self._request(names.SUBSCRIBE, (sub.topics, sub.filter))
                self._subs.resubscribed(sub, result["subscription"])
                self._subs.early_events(sub)  # queued already; relabelled in place
        except _Unsent as unsent:
            self._drop()
            raise unsent.error from None
        except BaseException:
            self._drop()
            raise
        if self._connected_once:
            self.reconnects += 1
        self._connected_once = True

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._subs.connection_lost()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed_by_caller = True
        if self._sock is not None:
            self._sock.close()

    @property
    def gaps(self) -> list[EventGap]:
        """Every possible loss of events seen so far (oldest first)."""
        return self._subs.gaps

    def call(self, method: str, *params: Any) -> Any:
        """Send one request; retried per ``self.retry`` after -32007 or a lost connection."""
        delays: Iterator[float] | None = None  # made at the first failure: the common path pays nothing for retries
        while True:
            try:
                if self._closed_by_caller:
                    raise ConnectionLost("the client was closed")
                if self._sock is None:
                    if not self.retry.reconnect:
                        raise _Unsent(ConnectionLost())
                    try:
                        self._connect()
                    except MemmanError as refused:
                        raise _Unsent(refused) from None
                return self._request(method, params)
            except _Unsent as unsent:
                exc, sent = unsent.error, False
            except MemmanError as err:
                exc, sent = err, True
            delay, delays = next_retry(exc, method, sent, self.retry, delays,
                                       self._closed_by_caller)
            time.sleep(delay)

    def _request(self, method: str, params: tuple[Any, ...]) -> Any:
        if self._sock is None:
            raise _Unsent(ConnectionLost())
        msgid = next(self._ids) % 2**32
        try:
            self._sock.sendall(pack_request(msgid, method, params))
        except OSError as exc:
            self._drop()
            raise _Unsent(self._lost(f"connection to the memman daemon was lost: {exc}")) from None
        while True:
            try:
                msg = self._next_message(None)
            except ConnectionLost as exc:
                self._drop()
                raise self._lost(exc.message) from None
            if isinstance(msg, Response) and msg.msgid == msgid:
                if msg.error is not None:
                    raise MemmanError.from_wire(msg.error)
                return msg.result

    def _lost(self, message: str) -> MemmanError:
        """The daemon's own reason (a memman_error_event before it closed) when it gave one."""
        for event, payload in reversed(self._events):
            if event == names.ERROR_EVENT and isinstance(payload, dict):
                return error_for(payload.get("code", INTERNAL_ERROR), str(payload.get("message")))
        return ConnectionLost(message)

    if not TYPE_CHECKING:  # at run time only: mypy flags a misspelled method
        def __getattr__(self, attr: str) -> Any:
            """``client.foo_bar(...)`` calls ``memman_foo_bar``: methods newer than this client."""
            if attr.startswith("_"):
                raise AttributeError(attr)
            return lambda *params: self.call(f"memman_{attr}", *params)

    def memory(self, session_id: str | None = None, user_id: str = "default",
               tenant_id: str = "default") -> Any:
        """The tiered access pattern (``memory.preferences.get(key)`` ...), see memman.memory_access."""
        from memman.memory_access import Memory

        return Memory(self, session_id=session_id, user_id=user_id, tenant_id=tenant_id)

    def subscribe(self, topics: list[str] | tuple[str, ...] = (),
                  filter: dict[str, str] | None = None) -> int:
        """Subscribe; events queue for ``next_event``. The id stays valid across reconnects."""
        result = self.call(names.SUBSCRIBE, list(topics), filter or {})
        sub = self._subs.add(result["subscription"], list(topics), filter or {}, None)
        self._subs.early_events(sub)  # queued already; relabelled in place
        return sub.id

    def unsubscribe(self, sub_id: int) -> bool:
        sub = self._subs.remove(sub_id)
        if sub is None:
            return False
        return bool(self.call(names.UNSUBSCRIBE, sub.server_id)["removed"])

    def next_event(self, timeout: float | None = 5.0) -> tuple[str, dict[str, Any]] | None:
        """The next queued or arriving event, or None after ``timeout`` seconds.

        A lost connection is re-opened (subscriptions re-created) when retries are on.
        """
        if self._events:
            return self._events.popleft()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                if self._sock is None:
                    if not self.retry.reconnect or self._closed_by_caller:
                        raise ConnectionLost()
                    self.call(names.PING)  # reconnects with backoff, re-subscribes
                    if self._events:
                        return self._events.popleft()
                self._next_message(left)
            except TimeoutError:
                return None
            except ConnectionLost:
                self._drop()
                if not self.retry.reconnect or self._closed_by_caller:
                    raise
                continue
            if self._events:
                return self._events.popleft()
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _next_message(self, timeout: float | None) -> Any:
        assert self._sock is not None
        old = self._sock.gettimeout()
        if timeout is not None:
            self._sock.settimeout(timeout)
        try:
            while True:
                for obj in self._decoder:
                    msg = parse(obj)
                    if isinstance(msg, Notification):
                        params = msg.params if isinstance(msg.params, list) else [msg.params]
                        payload = params[0] if params else {}
                        if isinstance(payload, dict):
                            self._subs.event(payload, msg.method)
                        self._events.append((msg.method, payload))
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
            if self._sock is not None:
                self._sock.settimeout(old)
