"""One client connection: decodes its frames, runs its requests, writes answers and events.

Owns the per-connection protocol state (decoder, in-flight requests, subscriptions, the
partial-frame watch) and the output cap; the ``Server`` it belongs to owns the lifecycle.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from memman import errors, names
from memman.errors import MemmanError
from memman.protocol import (
    FrameDecoder,
    FrameRefused,
    Notification,
    ProtocolError,
    Request,
    pack_notification,
    pack_response,
    parse,
)
from memman_daemon.rpc import REGISTRY, Call

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.app import App

log = logging.getLogger("memman.daemon")

#: the start of a frame up to this long waits as bytes, not in a decoder of its own (~40 KB);
#: a client dripping a frame byte by byte makes the daemon decode at most this much again per
#: byte, within limits.frame_timeout_s
PARTIAL_FRAME_BYTES = 4096


@dataclass
class ServerState:
    """What all connections share: the live connections and the request counters."""

    connections: set[Connection] = field(default_factory=set)
    #: one decoder between frames, lent to whichever connection has bytes to decode: a
    #: connection keeps a decoder of its own only while a frame of its is half received
    #: (a msgpack Unpacker is ~40 KB; one per connection was what thousands of short
    #: connections left behind as heap fragmentation)
    spare_decoder: FrameDecoder | None = None
    next_conn_id: int = 1
    requests: int = 0  #: requests received (answered or refused)
    errors: int = 0  #: requests answered with an error

    def stats(self) -> dict[str, int]:
        return {"clients": len(self.connections), "requests": self.requests,
                "errors": self.errors}


#: what is answered while the daemon still loads its data (it accepts from the moment its
#: socket is bound): every other request waits for the load (``Connection.start_request``)
WHILE_LOADING = frozenset({names.PING, names.GET_API_INFO, names.SET_CLIENT_INFO})


class Host(Protocol):
    """What a connection needs of the server that accepted it."""

    app: App
    config: Config
    state: ServerState
    stopping: bool
    started: asyncio.Event  #: set once the data is loaded

    def refusal(self, transport: asyncio.BaseTransport) -> tuple[int, str] | None: ...


class Connection(asyncio.Protocol):
    """One client: decodes its frames, runs its requests concurrently, writes answers.

    An ``asyncio.Protocol`` rather than a stream reader loop: frames are decoded as bytes
    arrive, and in-memory reads are answered in the same callback, with no task or future per
    request.
    """

    def __init__(self, server: Host) -> None:
        self.server = server
        self.app = server.app
        self.limits = server.config.limits
        self.transport: asyncio.Transport | None = None
        #: held only while a frame is half received (``ServerState.spare_decoder`` otherwise):
        #: a msgpack Unpacker costs ~40 KB (its fixed parse stack), and a connection between
        #: frames, or one that goes without sending anything, should cost nothing
        self.decoder: Any = None
        #: the start of a frame that is still arriving, when short: kept as bytes (decoded
        #: again with the rest) rather than in a decoder of its own
        self._partial = b""
        self.id = server.state.next_conn_id
        server.state.next_conn_id += 1
        self.name = f"conn-{self.id}"  #: replaced by memman_set_client_info
        self.client_info: dict[str, Any] = {}
        self.connected_at = time.time()  #: unix seconds (memman_clients_list)
        self.requests = 0  #: requests this connection sent (memman_clients_list)
        #: how errors are sent on this connection: "memman" [code, message] or "nvim"
        self.error_style = "memman"
        self.subscriptions: set[int] = set()
        self.inflight: set[asyncio.Task[Any]] = set()
        self.closing = False
        self._frame_timer: asyncio.TimerHandle | None = None
        self.last_active = time.monotonic()  #: for the idle timeout (limits.idle_timeout_s)
        self.lost = asyncio.get_running_loop().create_future()  #: done when the socket closed

    # --- lifecycle -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        refusal = self.server.refusal(transport)
        if refusal is not None:
            self.refuse(*refusal)
            return
        self.server.state.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._drop_subscriptions()
        if self._frame_timer is not None:
            self._frame_timer.cancel()
            self._frame_timer = None
        self.server.state.connections.discard(self)
        if not self.lost.done():
            self.lost.set_result(None)
        # nothing of a closed connection may stay reachable: the decoder's buffer, the
        # transport, a half-received frame
        self.decoder = _CLOSED_DECODER
        self._partial = b""
        if self.transport is not None:
            asyncio.get_running_loop().call_soon(_release_transport, self.transport)
        self.transport = None
        self.client_info = {}

    def refuse(self, code: int, message: str) -> None:
        """Tell the client why, then close gently: a client that already sent a request must
        still read the error (closing with its bytes unread would reset the connection)."""
        self.closing = True  # what it sends is read and dropped
        self.send_error_event(code, message)
        transport = self.transport
        assert transport is not None
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(self.limits.refusal_linger_s, transport.close)

    def close(self) -> None:
        """Stop reading; what is already written is still flushed, then the socket closes."""
        self.closing = True
        self._drop_subscriptions()
        if self.transport is not None:
            self.transport.close()

    # --- output --------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        # not `self.closing`: during shutdown the requests still running must get their answers
        t = self.transport
        if t is None or t.is_closing():
            return
        # a client that never reads: its unsent output is capped, then it is dropped
        if t.get_write_buffer_size() + len(data) > (
                self.limits.subscriber_buffer_bytes + self.limits.max_message_bytes):
            log.warning("%s stopped reading; dropping it", self.name)
            self.abort()
            return
        t.write(data)

    def deliver_event(self, event: str, payload: dict[str, Any]) -> None:
        t = self.transport
        if self.closing or t is None or t.is_closing():
            return
        if t.get_write_buffer_size() > self.limits.subscriber_buffer_bytes:
            log.warning("subscriber %s is %d bytes behind; dropping it", self.name,
                        t.get_write_buffer_size())
            self.abort()
            return
        t.write(pack_notification(event, [payload]))

    def send_error_event(self, code: int, message: str) -> None:
        self.send(pack_notification(names.ERROR_EVENT, [{"code": code, "message": message}]))

    def abort(self) -> None:
        """Drop the connection now, unsent output included (a client that stopped reading)."""
        self.closing = True
        self._drop_subscriptions()
        if self.transport is not None:
            self.transport.abort()

    def _drop_subscriptions(self) -> None:
        for sub_id in self.subscriptions:
            self.app.events.unsubscribe(sub_id)
        self.subscriptions.clear()

    # --- input ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_active = time.monotonic()
        completed = False
        state = self.server.state
        if self._partial:
            data, self._partial = self._partial + data, b""
        if self.decoder is None:
            spare = state.spare_decoder
            if spare is not None and spare.max_message_bytes == self.limits.max_message_bytes:
                state.spare_decoder = None
                self.decoder = spare
            else:
                self.decoder = FrameDecoder(self.limits.max_message_bytes)
        decoder = self.decoder
        # the one place a client's bytes become answers: a refused frame is answered and
        # skipped, anything else that goes wrong here is said and logged before the close —
        # an exception escaping this callback would make asyncio drop the socket unanswered
        try:
            decoder.feed(data)
            while True:
                try:
                    obj = next(decoder)
                except StopIteration:
                    break
                except FrameRefused as exc:
                    self.refused_frame(exc)
                    continue
                completed = True
                self.handle(obj)
                if self.closing:
                    return
        except ProtocolError as exc:
            self.unreadable(exc.message)
            return
        except Exception as exc:
            log.error("%s: reading its bytes failed", self.name, exc_info=exc)
            self.unreadable(f"the daemon could not read the message: {type(exc).__name__}: "
                            f"{exc}")
            return
        pending = decoder.pending
        if self.decoder is decoder:
            if not pending:  # between frames: lend it back
                self.decoder = None
                if state.spare_decoder is None:
                    state.spare_decoder = decoder
            elif pending <= min(PARTIAL_FRAME_BYTES, len(data)) and not decoder.skipping:
                self.decoder = None  # mid-frame: not reusable, dropped
                self._partial = bytes(data[-pending:])
        self._watch_partial_frame(completed)

    def unreadable(self, why: str) -> None:
        """Bytes that cannot be followed (not msgpack): say why, log it once, close — the one
        case a connection is closed for what it sent."""
        log.warning("closing %s: %s", self.name, why)
        self.send_error_event(errors.PARSE_ERROR, why + "; closing the connection")
        self.close()

    def refused_frame(self, exc: FrameRefused) -> None:
        """A readable frame refused whole (over the cap): its request gets -32602 naming the
        limit; the rest of the frame is skipped and the connection stays usable."""
        self.server.state.requests += 1
        self.server.state.errors += 1
        message = f"the request was refused unread: {exc.message}"
        log.info("%s: %s", self.name, message)
        if exc.msgid is not None:
            self.requests += 1
            self.send(pack_response(exc.msgid, errors.styled(
                [errors.INVALID_PARAMS, message], self.error_style), None))
        else:
            self.send_error_event(errors.INVALID_PARAMS, message)

    def eof_received(self) -> bool | None:
        return None  # the client is done: close our side too (after flushing)

    def _watch_partial_frame(self, completed: bool) -> None:
        """A whole frame must arrive within frame_timeout_s of its first byte. The deadline is
        set when a frame starts and is not moved by later bytes of the same frame (a client
        sending one byte a second is closed all the same)."""
        pending = self.decoder.pending if self.decoder is not None else len(self._partial)
        if not pending:
            if self._frame_timer is not None:
                self._frame_timer.cancel()
                self._frame_timer = None
            return
        if self._frame_timer is not None and not completed:
            return  # the same frame is still arriving: its deadline stands
        if self._frame_timer is not None:
            self._frame_timer.cancel()
        self._frame_timer = asyncio.get_running_loop().call_later(
            self.limits.frame_timeout_s, self._partial_frame_timed_out)

    def _partial_frame_timed_out(self) -> None:
        self._frame_timer = None
        if not self.closing:
            self.unreadable("incomplete message: the frame did not arrive whole within "
                            f"{self.limits.frame_timeout_s}s (limits.frame_timeout_s)")

    def idle_for(self, now: float) -> float:
        """Seconds without a byte from the client, or 0 while it waits for answers or events."""
        if self.subscriptions or self.inflight or self.closing:
            return 0.0
        return now - self.last_active

    def handle(self, obj: Any) -> None:
        try:
            msg = parse(obj)
        except ProtocolError as exc:
            if exc.msgid is not None:
                self.send(pack_response(exc.msgid, errors.styled(exc.to_wire(), self.error_style),
                                        None))
            else:
                self.send_error_event(exc.code, exc.message)
            return
        if isinstance(msg, Request):
            try:
                self.start_request(msg)
            except Exception as exc:  # start_request answers its own; this is a last resort
                self.answer_error(msg, exc)
        elif isinstance(msg, Notification):
            pass  # clients' notifications carry nothing the daemon acts on; unknown ones are ignored
        # responses from clients: the daemon sends no requests, so there is nothing to match

    def start_request(self, req: Request) -> None:
        """Check and bind a request; answer a plain (non-async) handler at once, else run the
        coroutine as its own task so answers can go out of order. While the daemon loads, a
        request other than ``WHILE_LOADING`` waits for the load in a task of its own."""
        self.server.state.requests += 1
        self.requests += 1
        if not self.server.started.is_set() and req.method not in WHILE_LOADING:
            task = asyncio.create_task(self._after_load(req))
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)
            return
        self._dispatch(req)

    async def _after_load(self, req: Request) -> None:
        await self.server.started.wait()
        self._dispatch(req)

    def _dispatch(self, req: Request) -> None:
        app = self.app
        try:
            if self.server.stopping:
                raise MemmanError(errors.SHUTTING_DOWN, "the daemon is shutting down; retry shortly")
            method = REGISTRY.lookup(req.method)
            if method.writes and app.read_only:
                raise MemmanError(errors.FORBIDDEN, f"{req.method} changes memory, and the daemon "
                                                    "runs read-only (--read-only)")
            if method.offload:  # a large parameter is checked off the loop, in the task
                task = asyncio.create_task(self.run_offloaded(req, method))
                self.inflight.add(task)
                task.add_done_callback(self.inflight.discard)
                return
            kwargs = method.bind(req.params)
            if not method.is_async:  # in-memory reads: no task, no extra loop iteration
                result = method.handler(Call(app, self.name, self), **kwargs)
                self.respond(req, result)
                return
        except Exception as exc:
            self.answer_error(req, exc)
            return
        task = asyncio.create_task(self.run_request(req, method.handler, kwargs))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    async def run_request(self, req: Request, handler: Any, kwargs: dict[str, Any]) -> None:
        try:
            result = await handler(Call(self.app, self.name, self), **kwargs)
            self.respond(req, result)
        except Exception as exc:
            self.answer_error(req, exc)
        finally:
            self.last_active = time.monotonic()

    async def run_offloaded(self, req: Request, method: Any) -> None:
        try:
            if method.precheck is not None:
                method.precheck(self.app, req.params)
            kwargs = await asyncio.to_thread(method.bind, req.params)
        except Exception as exc:
            self.answer_error(req, exc)
            return
        await self.run_request(req, method.handler, kwargs)

    def respond(self, req: Request, result: Any) -> None:
        """Send the answer, or -32004 saying how to page when it is over the output cap."""
        data = pack_response(req.msgid, None, result)
        cap = self.limits.max_message_bytes
        if len(data) > cap:
            raise MemmanError(errors.LIMIT_EXCEEDED, too_large(req.method, len(data), cap))
        self.send(data)

    def answer_error(self, req: Request, exc: Exception) -> None:
        self.server.state.errors += 1
        if isinstance(exc, MemmanError):
            wire = exc.to_wire()
        elif isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
            # a file the request needed could not be written (a full or read-only data dir):
            # the storage error every write gets for that, not an internal one
            log.warning("%s: a file write failed: %s", req.method, exc)
            wire = [errors.STORAGE_ERROR, f"{req.method} could not write to disk: "
                    f"{_DISK_ERRNOS[exc.errno]} ({exc}); free space or fix the data dir's "
                    "permissions; the daemon keeps running"]
        else:
            log.error("%s failed", req.method, exc_info=exc)  # a handler bug must not end the connection
            wire = [errors.INTERNAL_ERROR, f"internal error in {req.method}: {exc}"]
        try:
            data = pack_response(req.msgid, errors.styled(wire, self.error_style), None)
        except Exception:  # a message msgpack cannot pack (a lone surrogate in it)
            data = pack_response(req.msgid, errors.styled(
                [wire[0], str(wire[1]).encode("utf-8", "replace").decode()], self.error_style),
                None)
        self.send(data)


_DISK_ERRNOS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded",
                errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                errno.EPERM: "operation not permitted", errno.EIO: "I/O error"}


class _ClosedDecoder:
    pending = 0

    def feed(self, data: bytes) -> None:
        return None

    def __iter__(self) -> _ClosedDecoder:
        return self

    def __next__(self) -> Any:
        raise StopIteration


_CLOSED_DECODER: Any = _ClosedDecoder()


def _release_transport(transport: asyncio.BaseTransport) -> None:
    """Break the reference cycle a closed asyncio socket transport keeps to itself (its
    ``_read_ready_cb`` is one of its own bound methods), so it is freed at once by reference
    counting instead of waiting for a full garbage collection — which ``tune_gc`` makes rare.
    Without this, every closed connection stayed in memory (tens of KB each)."""
    if getattr(transport, "_sock", True) is None and hasattr(transport, "_read_ready_cb"):
        transport._read_ready_cb = None  # type: ignore[attr-defined]


def too_large(method: str, size: int, cap: int) -> str:
    """The error for an answer over the output cap, saying how to get it in pages."""
    how = {
        names.SESSION_GET: "page it by entry range: memman_session_get(session_id, "
                           "{after_id: 0, limit: N}), then again with after_id = the answer's "
                           "next_after_id until it is nil",
        names.SESSION_EXPORT: "page it by entry range: memman_session_export(session_id, "
                              "{after_id: 0, limit: N}), then again with after_id = the "
                              "answer's next_after_id until it is nil; import the pages' "
                              "entries together",
    }.get(method, "ask for less (opts.limit where the method has it)")
    return (f"the answer to {method} is {size} bytes, over the {cap}-byte output cap "
            f"(limits.max_message_bytes); {how}")
