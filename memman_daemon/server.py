"""The daemon's socket server, in uvicorn's shape: run() -> serve() -> startup() /
main_loop() / shutdown().

Layers: bytes <-> msgpack objects (``FrameDecoder``), objects <-> requests / responses /
notifications (``Connection``), then the method handlers (``rpc.REGISTRY``), which never touch
the socket. ``ServerState`` holds what all connections share.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import gc
import logging
import os
import signal
import socket
import stat
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memman import errors, names
from memman.config import Config
from memman.errors import MemmanError
from memman.protocol import (
    FrameDecoder,
    Notification,
    ProtocolError,
    Request,
    pack_notification,
    pack_response,
    parse,
)
from memman_daemon import handlers, systemd
from memman_daemon.clock import Clock
from memman_daemon.core import Core
from memman_daemon.rpc import REGISTRY, Call
from memman_daemon.sessions import LoadError
from memman_daemon.store import StoreError

log = logging.getLogger("memman.daemon")


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


@dataclass
class ServerState:
    connections: set[Connection] = field(default_factory=set)
    next_conn_id: int = 1


class Connection(asyncio.Protocol):
    """One client: decodes its frames, runs its requests concurrently, writes answers.

    An ``asyncio.Protocol`` rather than a stream reader loop: frames are decoded as bytes
    arrive, and in-memory reads are answered in the same callback, with no task or future per
    request.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.core = server.core
        self.limits = server.config.limits
        self.transport: asyncio.Transport | None = None
        #: made at the first byte: a msgpack Unpacker costs ~40 KB (its fixed parse stack), and
        #: a client that connects and goes without sending anything should cost nothing
        self.decoder: Any = None
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
        self.core.connections = len(self.server.state.connections)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._drop_subscriptions()
        if self._frame_timer is not None:
            self._frame_timer.cancel()
            self._frame_timer = None
        self.server.state.connections.discard(self)
        self.core.connections = len(self.server.state.connections)
        if not self.lost.done():
            self.lost.set_result(None)
        # nothing of a closed connection may stay reachable: the decoder's buffer, the
        # transport, a half-received frame
        self.decoder = _CLOSED_DECODER
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
            self.core.events.unsubscribe(sub_id)
        self.subscriptions.clear()

    # --- input ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_active = time.monotonic()
        completed = False
        if self.decoder is None:
            self.decoder = FrameDecoder(self.limits.max_message_bytes)
        try:
            self.decoder.feed(data)
            for obj in self.decoder:
                completed = True
                self.handle(obj)
                if self.closing:
                    return
        except ProtocolError as exc:
            self.send_error_event(exc.code, exc.message + "; closing the connection")
            self.close()
            return
        self._watch_partial_frame(completed)

    def eof_received(self) -> bool | None:
        return None  # the client is done: close our side too (after flushing)

    def _watch_partial_frame(self, completed: bool) -> None:
        """A whole frame must arrive within frame_timeout_s of its first byte. The deadline is
        set when a frame starts and is not moved by later bytes of the same frame (a client
        sending one byte a second is closed all the same)."""
        if not self.decoder.pending:
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
            self.send_error_event(errors.PARSE_ERROR, "incomplete message: the frame did not "
                                  f"arrive whole within {self.limits.frame_timeout_s}s "
                                  "(limits.frame_timeout_s); closing")
            self.close()

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
            self.start_request(msg)
        elif isinstance(msg, Notification):
            pass  # clients' notifications carry nothing the daemon acts on; unknown ones are ignored
        # responses from clients: the daemon sends no requests, so there is nothing to match

    def start_request(self, req: Request) -> None:
        """Check and bind a request; answer a plain (non-async) handler at once, else run the
        coroutine as its own task so answers can go out of order."""
        core = self.core
        core.counters["requests"] += 1
        self.requests += 1
        try:
            if self.server.stopping:
                raise MemmanError(errors.SHUTTING_DOWN, "the daemon is shutting down; retry shortly")
            method = REGISTRY.lookup(req.method)
            if method.writes and core.read_only:
                raise MemmanError(errors.FORBIDDEN, f"{req.method} changes memory, and the daemon "
                                                    "runs read-only (--read-only)")
            kwargs = method.bind(req.params)
            if not method.is_async:  # in-memory reads: no task, no extra loop iteration
                result = method.handler(Call(core, self.name, self), **kwargs)
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
            result = await handler(Call(self.core, self.name, self), **kwargs)
            self.respond(req, result)
        except Exception as exc:
            self.answer_error(req, exc)
        finally:
            self.last_active = time.monotonic()

    def respond(self, req: Request, result: Any) -> None:
        """Send the answer, or -32004 saying how to page when it is over the output cap."""
        data = pack_response(req.msgid, None, result)
        cap = self.limits.max_message_bytes
        if len(data) > cap:
            raise MemmanError(errors.LIMIT_EXCEEDED, too_large(req.method, len(data), cap))
        self.send(data)

    def answer_error(self, req: Request, exc: Exception) -> None:
        self.core.counters["errors"] += 1
        if isinstance(exc, MemmanError):
            wire = exc.to_wire()
        else:
            log.error("%s failed", req.method, exc_info=exc)  # a handler bug must not end the connection
            wire = [errors.INTERNAL_ERROR, f"internal error in {req.method}: {exc}"]
        self.send(pack_response(req.msgid, errors.styled(wire, self.error_style), None))


class Server:
    def __init__(self, config: Config, *, clock: Clock | None = None, read_only: bool = False) -> None:
        self.config = config
        self.core = Core(config, clock, read_only=read_only)
        self.state = ServerState()
        self.stopping = False
        self.started = asyncio.Event()
        self._stop = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._owns_socket_file = False
        self._lock_fd: int | None = None
        self.exit_code = 0  #: what the process exits with (non-zero after a fatal error)
        self._accept_errors = 0
        self._accept_logged_at = -1e9

    # --- lifecycle -----------------------------------------------------------------------
    def run(self) -> int:
        asyncio.run(self.serve())
        return self.exit_code

    async def serve(self, install_signal_handlers: bool = True) -> None:
        await self.startup(install_signal_handlers)
        try:
            await self.main_loop()
        finally:
            await self.shutdown()

    async def startup(self, install_signal_handlers: bool = True) -> None:
        handlers.load_all()
        self._lock_data_dir()
        try:
            await self._startup(install_signal_handlers)
        except BaseException:
            self._unlock_data_dir()
            raise

    async def _startup(self, install_signal_handlers: bool) -> None:
        inherited = systemd.listen_fds()
        if not inherited:
            sock = self._bind(Path(self.config.socket))
        else:
            sock = inherited[0]
            sock.setblocking(False)
            name = sock.getsockname()  # report the path systemd bound, not our default
            if isinstance(name, str) and name:
                self.config.socket = Path(name)
        try:
            await self.core.start()
        except BaseException as exc:
            sock.close()
            self._remove_socket_file()
            # close what was opened (the database threads would keep the process alive)
            with contextlib.suppress(Exception):
                await self.core.stop()
            if isinstance(exc, (StartupError, StoreError, LoadError)) or not isinstance(exc, Exception):
                raise
            raise StartupError(f"cannot start on {self.config.database_path}: "
                               f"{type(exc).__name__}: {exc}. Nothing was changed; see "
                               "docs/operations.md (\"A damaged database\")") from exc
        self.core.store.on_fatal = self._fatal
        tune_gc()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: Connection(self), sock=sock,
                                                     backlog=1024)
        loop.set_exception_handler(self._loop_exception)
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        log.info("memman daemon serving on %s (database %s)", self.config.socket,
                 self.config.database_path)
        systemd.notify(f"READY=1\nSTATUS=serving on {self.config.socket}\nMAINPID={os.getpid()}")
        self.started.set()

    async def main_loop(self) -> None:
        last = None
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 1.0)
            # once a second: a stats event for subscribers of the "stats" topic
            snapshot = self.core.counters["requests"]
            if last is not None and self.core.events.subscriptions:
                self.core.events.publish("stats", "tick", {"requests_per_s": snapshot - last,
                                                           "clients": self.core.connections})
            last = snapshot
            self.close_idle()

    def close_idle(self) -> None:
        """Close connections silent for limits.idle_timeout_s (never subscribers, never while
        a request of theirs runs)."""
        limit = self.config.limits.idle_timeout_s
        if not limit or limit <= 0:
            return
        now = time.monotonic()
        for conn in list(self.state.connections):
            if conn.idle_for(now) > limit:
                conn.send_error_event(errors.LIMIT_EXCEEDED, f"idle for more than {limit}s "
                                      "(limits.idle_timeout_s); closing. Reconnect when needed, "
                                      "or subscribe to events to stay connected")
                conn.close()

    def request_stop(self) -> None:
        self._stop.set()

    def _fatal(self, exc: BaseException) -> None:
        """The writer cannot go on: stop serving and exit non-zero (a supervisor restarts us)."""
        self.exit_code = 70  # EX_SOFTWARE
        self.request_stop()

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Out of file descriptors (or memory) on accept: asyncio pauses accepting and retries;
        log that once per limits.log_interval_s with a count, never a traceback per attempt."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _ACCEPT_ERRNOS:
            self._accept_errors += 1
            now = time.monotonic()
            if now - self._accept_logged_at >= self.config.limits.log_interval_s:
                self._accept_logged_at = now
                log.error("cannot accept connections: %s (%d times since the last report); "
                          "retrying with back-off. Raise the open-file limit (ulimit -n, "
                          "LimitNOFILE=) or lower limits.max_clients", exc.strerror,
                          self._accept_errors)
                self._accept_errors = 0
            return
        loop.default_exception_handler(context)

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, commit, close the database."""
        systemd.notify("STOPPING=1")
        self.stopping = True
        if self._server is not None:
            self._server.close()
        # from here start_request answers every new request with -32007; what runs finishes
        conns = list(self.state.connections)
        inflight = [t for c in conns for t in c.inflight]
        if inflight:
            await asyncio.wait(inflight, timeout=10.0)
        await self.core.stop()
        for c in conns:
            c.close()  # flushes the answers already written
        lost = [c.lost for c in conns]
        if lost:
            await asyncio.wait(lost, timeout=2.0)
        self._remove_socket_file()
        self._unlock_data_dir()
        log.info("memman daemon stopped")

    # --- one daemon per data dir ---------------------------------------------------------
    def _lock_data_dir(self) -> None:
        """Hold an exclusive lock on <data>/memman.lock for the daemon's life (shared for a
        read-only daemon); the file says which pid and socket hold it."""
        d = Path(self.config.data_dir)
        d.mkdir(parents=True, exist_ok=True)
        path = d / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.core.read_only else fcntl.LOCK_EX)
                        | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").split("\n")
            finally:
                os.close(fd)
            pid = holder[0] if holder and holder[0] else "unknown"
            sock = holder[1] if len(holder) > 1 and holder[1] else "unknown"
            raise StartupError(
                f"another memman daemon (pid {pid}, socket {sock}) is using the data dir {d} "
                f"({exc.strerror}); two daemons on one data dir would hand out the same ids and "
                "lose data. Stop it first, or give this one another --data-dir") from None
        if not self.core.read_only:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{self.config.socket}\n".encode(), 0)
        self._lock_fd = fd

    def _unlock_data_dir(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None

    # --- connections ---------------------------------------------------------------------
    def refusal(self, transport: asyncio.BaseTransport) -> tuple[int, str] | None:
        """Why a new connection is refused (error code, message), or None to accept it."""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            uid = peer_uid(sock)
            if uid is not None and uid != os.getuid():
                log.warning("refused a connection from uid %d", uid)
                return errors.FORBIDDEN, (f"connections from uid {uid} are refused: this memman "
                                          f"daemon serves uid {os.getuid()} only")
        if self.stopping:
            return errors.SHUTTING_DOWN, "the daemon is shutting down"
        if len(self.state.connections) >= self.config.limits.max_clients:
            return errors.LIMIT_EXCEEDED, (f"too many clients ({self.config.limits.max_clients}, "
                                           "limits.max_clients); try again later")
        return None

    # --- the socket file -----------------------------------------------------------------
    def _bind(self, path: Path) -> socket.socket:
        prepare_socket_dir(path.parent)
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise StartupError(f"{path} exists and is not a socket; remove it or choose "
                                   "another path with --socket")
            if socket_is_live(path):
                raise StartupError(f"a memman daemon is already listening on {path}; stop it "
                                   "first (memman status shows it) or choose another --socket")
            log.info("removing stale socket %s", path)
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # 0600 from the moment of bind
        try:
            sock.bind(str(path))
        except OSError as exc:
            sock.close()
            raise StartupError(f"cannot bind {path}: {exc.strerror}") from exc
        finally:
            os.umask(old)
        sock.listen(1024)
        sock.setblocking(False)
        self._owns_socket_file = True
        return sock

    def _remove_socket_file(self) -> None:
        if self._owns_socket_file:
            with contextlib.suppress(FileNotFoundError):
                Path(self.config.socket).unlink()
            self._owns_socket_file = False


LOCK_NAME = "memman.lock"
_ACCEPT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


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


def tune_gc() -> None:
    """Memory is many long-lived objects (every entry of every session), so Python's full
    collections walk them all and stall requests for tens of ms; requests make little cyclic
    garbage. Move what was loaded out of the collector's sight and collect the old generations
    far less often (docs/decisions.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def prepare_socket_dir(d: Path) -> None:
    """Create the socket's directory 0700, or check an existing one is ours and private."""
    if not d.exists():
        old = os.umask(0o077)
        try:
            d.mkdir(parents=True, mode=0o700)
        finally:
            os.umask(old)
        return
    st = d.stat()
    if st.st_uid != os.getuid():
        raise StartupError(f"refusing to use {d}: it is owned by uid {st.st_uid}, not by you "
                           f"({os.getuid()}). Choose another directory with --socket.")
    if st.st_mode & 0o077:
        raise StartupError(f"refusing to use {d}: it is open to other users (mode "
                           f"{stat.S_IMODE(st.st_mode):o}). Run `chmod 700 {d}` or choose "
                           "another directory with --socket.")


def socket_is_live(path: Path) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
        return True
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        return True  # e.g. EAGAIN: a listener exists but is busy
    finally:
        s.close()


def peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid
