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
import logging
import os
import signal
import socket
import stat
import struct
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

log = logging.getLogger("memman.daemon")


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


@dataclass
class ServerState:
    connections: set[Connection] = field(default_factory=set)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    next_conn_id: int = 1


class Connection:
    """One client: decodes its frames, runs its requests concurrently, writes answers."""

    def __init__(self, server: Server, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.core = server.core
        self.limits = server.config.limits
        self.reader = reader
        self.writer = writer
        self.id = server.state.next_conn_id
        server.state.next_conn_id += 1
        self.name = f"conn-{self.id}"  #: replaced by memman_set_client_info
        self.client_info: dict[str, Any] = {}
        self.subscriptions: set[int] = set()
        self.inflight: set[asyncio.Task[Any]] = set()
        self.closing = False

    # --- output --------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        # not `self.closing`: during shutdown the requests still running must get their answers
        if self.writer.is_closing():
            return
        # a client that never reads: its unsent output is capped, then it is dropped
        if self.writer.transport.get_write_buffer_size() + len(data) > (
                self.limits.subscriber_buffer_bytes + self.limits.max_message_bytes):
            log.warning("%s stopped reading; dropping it", self.name)
            self.abort()
            return
        self.writer.write(data)

    def deliver_event(self, event: str, payload: dict[str, Any]) -> None:
        if self.closing:
            return
        if self.writer.transport.get_write_buffer_size() > self.limits.subscriber_buffer_bytes:
            log.warning("subscriber %s is %d bytes behind; dropping it", self.name,
                        self.writer.transport.get_write_buffer_size())
            self.abort()
            return
        self.writer.write(pack_notification(event, [payload]))

    def send_error_event(self, code: int, message: str) -> None:
        self.send(pack_notification(names.ERROR_EVENT, [{"code": code, "message": message}]))

    def abort(self) -> None:
        self.closing = True
        self._drop_subscriptions()
        self.writer.transport.abort()

    def _drop_subscriptions(self) -> None:
        for sub_id in self.subscriptions:
            self.core.events.unsubscribe(sub_id)
        self.subscriptions.clear()

    # --- input ---------------------------------------------------------------------------
    async def serve(self) -> None:
        decoder = FrameDecoder(self.limits.max_message_bytes)
        try:
            while not self.closing:
                timeout = self.limits.frame_timeout_s if decoder.pending else None
                try:
                    data = await asyncio.wait_for(self.reader.read(2**18), timeout)
                except TimeoutError:
                    self.send_error_event(errors.PARSE_ERROR, "incomplete message: no more bytes "
                                          f"within {self.limits.frame_timeout_s}s; closing")
                    break
                if not data:
                    break
                try:
                    decoder.feed(data)
                    for obj in decoder:
                        self.handle(obj)
                except ProtocolError as exc:
                    self.send_error_event(exc.code, exc.message + "; closing the connection")
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            await self.finish()

    def handle(self, obj: Any) -> None:
        try:
            msg = parse(obj)
        except ProtocolError as exc:
            if exc.msgid is not None:
                self.send(pack_response(exc.msgid, exc.to_wire(), None))
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
                self.send(pack_response(req.msgid, None, result))
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
            self.send(pack_response(req.msgid, None, result))
        except Exception as exc:
            self.answer_error(req, exc)

    def answer_error(self, req: Request, exc: Exception) -> None:
        self.core.counters["errors"] += 1
        if isinstance(exc, MemmanError):
            self.send(pack_response(req.msgid, exc.to_wire(), None))
            return
        log.error("%s failed", req.method, exc_info=exc)  # a handler bug must not end the connection
        self.send(pack_response(req.msgid, [errors.INTERNAL_ERROR,
                                            f"internal error in {req.method}: {exc}"], None))

    async def finish(self, timeout: float = 10.0) -> None:
        self.closing = True
        self._drop_subscriptions()
        if self.inflight:
            await asyncio.wait(set(self.inflight), timeout=timeout)
        with contextlib.suppress(Exception):
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)


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

    # --- lifecycle -----------------------------------------------------------------------
    def run(self) -> None:
        asyncio.run(self.serve())

    async def serve(self, install_signal_handlers: bool = True) -> None:
        await self.startup(install_signal_handlers)
        try:
            await self.main_loop()
        finally:
            await self.shutdown()

    async def startup(self, install_signal_handlers: bool = True) -> None:
        handlers.load_all()
        inherited = systemd.listen_fds()
        if not inherited:
            sock = self._bind(Path(self.config.socket))
        else:
            sock = inherited[0]
            sock.setblocking(False)
        try:
            await self.core.start()
        except Exception:
            sock.close()
            self._remove_socket_file()
            raise
        self._server = await asyncio.start_unix_server(self._on_connect, sock=sock, limit=2**20,
                                                       backlog=1024)
        if install_signal_handlers:
            loop = asyncio.get_running_loop()
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

    def request_stop(self) -> None:
        self._stop.set()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, commit, close the database."""
        systemd.notify("STOPPING=1")
        self.stopping = True
        if self._server is not None:
            self._server.close()
        conns = list(self.state.connections)
        for c in conns:  # stop reading new requests; what is running finishes
            c.closing = True
        inflight = [t for c in conns for t in c.inflight]
        if inflight:
            await asyncio.wait(inflight, timeout=10.0)
        await self.core.stop()
        for c in conns:
            with contextlib.suppress(Exception):
                c.writer.close()
        for t in list(self.state.tasks):
            t.cancel()
        if self.state.tasks:
            await asyncio.wait(list(self.state.tasks), timeout=2.0)
        self._remove_socket_file()
        log.info("memman daemon stopped")

    # --- connections ---------------------------------------------------------------------
    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.state.tasks.add(task)
        conn = Connection(self, reader, writer)
        try:
            refusal = self._refusal(writer)
            if refusal is not None:
                code, message = refusal
                conn.send_error_event(code, message)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.drain(), 1.0)
                writer.close()
                return
            self.state.connections.add(conn)
            self.core.connections = len(self.state.connections)
            await conn.serve()
        finally:
            self.state.connections.discard(conn)
            self.core.connections = len(self.state.connections)
            self.state.tasks.discard(task)

    def _refusal(self, writer: asyncio.StreamWriter) -> tuple[int, str] | None:
        sock = writer.get_extra_info("socket")
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
