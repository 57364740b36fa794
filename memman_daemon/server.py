"""The daemon's lifecycle, in uvicorn's shape: run() -> serve() -> startup() / main_loop() /
shutdown(); the socket (bind, permissions, the data-dir lock, refusals) and ``ServerState``, which
owns what all connections share (the live connections, the id of the next one).

Layers: bytes <-> msgpack objects (``FrameDecoder``), objects <-> requests / responses /
notifications (``connection.Connection``), then the methods (``rpc.REGISTRY``, filled by
``api``), which never touch the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import gc
import logging
import os
import resource
import signal
import socket
import stat
import struct
import time
from pathlib import Path
from typing import Any

from memman import errors
from memman.config import DEFAULT_MODEL, Config
from memman_daemon import api, systemd
from memman_daemon.app import App
from memman_daemon.background import tune_malloc, tune_switching
from memman_daemon.clock import Clock
from memman_daemon.connection import Connection, ServerState
from memman_daemon.sessions import LoadError
from memman_daemon.storage.sqlite.store import StoreError, disk_full

log = logging.getLogger("memman.daemon")


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


class _StoppedWhileStarting(Exception):
    """SIGTERM (or SIGINT) arrived before the daemon served: it stops with exit code 0."""


class Server:
    def __init__(self, config: Config, *, clock: Clock | None = None, read_only: bool = False) -> None:
        self.config = config
        self.app = App(config, clock, read_only=read_only)
        self.state = ServerState()
        self.app.background.requests = lambda: self.state.requests  # busy or idle
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
        try:
            await self.startup(install_signal_handlers)
        except _StoppedWhileStarting:
            log.info("memman daemon stopped while starting")
            return
        try:
            await self.main_loop()
        finally:
            await self.shutdown()

    async def startup(self, install_signal_handlers: bool = True) -> None:
        tune_malloc()  # before the loads and the worker threads allocate
        tune_switching()
        api.load_all()
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
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            # from the start: SIGTERM while the app loads (a shared-store migration waiting
            # for another daemon's, a large data dir) stops it cleanly, exit 0
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        # accepting from here: a client that connects while the data loads (seconds on a
        # large data dir) gets its ping answered; its other requests wait for the load
        loop.set_exception_handler(self._loop_exception)
        early = asyncio.create_task(self._accept_while_loading(sock), name="memman-early")
        try:
            # the default encoding's tables, off the loop: a ping is answered between the
            # ~0.2 s their build keeps the GIL in native code and the rest of it
            await asyncio.to_thread(self.app.tokens.encoding, DEFAULT_MODEL)
            await self._start_app()
        except BaseException as exc:
            early.cancel()
            for c in list(self.state.connections):  # with the requests waiting for the load
                for t in list(c.inflight):
                    t.cancel()
                c.abort()
            sock.close()
            self._remove_socket_file()
            # close what was opened (the database threads would keep the process alive)
            with contextlib.suppress(Exception):
                await self.app.stop()
            if isinstance(exc, (StartupError, StoreError, LoadError, _StoppedWhileStarting)) \
                    or not isinstance(exc, Exception):
                raise
            raise StartupError(f"cannot start on {self.config.database_path}: "
                               f"{type(exc).__name__}: {exc}. Nothing was changed; see "
                               "docs/operations.md (\"A damaged database\")") from exc
        early.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await early
        self._server = await loop.create_unix_server(lambda: Connection(self), sock=sock,
                                                     backlog=1024)
        self.app.store.on_fatal = self._fatal
        tune_gc()
        log.info("memman daemon serving on %s (database %s)", self.config.socket,
                 self.config.database_path)
        systemd.notify(f"READY=1\nSTATUS=serving on {self.config.socket}\nMAINPID={os.getpid()}")
        self.started.set()

    async def _accept_while_loading(self, sock: socket.socket) -> None:
        """Accept at most ``early_accepts()`` connections while the data loads; the rest wait in
        the listen backlog until the server proper starts. The bound keeps the descriptors the
        load itself needs (the database, the watchers, the models) for it: with a small
        ``ulimit -n`` and clients piling up, accepting them all starved the load."""
        loop = asyncio.get_running_loop()
        for _ in range(early_accepts()):
            try:
                conn, _addr = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in _ACCEPT_ERRNOS:  # out of descriptors: the rest wait for the load
                    log.warning("accepting while loading stopped: %s", exc.strerror or exc)
                    return
                continue  # a client gone before it was accepted (counted: no spin)
            conn.setblocking(False)
            try:
                # shielded: a load that ends meanwhile must not drop an accepted client
                await asyncio.shield(loop.connect_accepted_socket(lambda: Connection(self), conn))
            except OSError:
                conn.close()

    async def main_loop(self) -> None:
        last = None
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 1.0)
            # once a second: a stats event for subscribers of the "stats" topic
            snapshot = self.state.requests
            if last is not None and self.app.events.subscriptions:
                self.app.events.publish("stats", "tick", {"requests_per_s": snapshot - last,
                                                           "clients": len(self.state.connections)})
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

    async def _start_app(self) -> None:
        """``app.start()``, given up (cancelled) when a stop is requested meanwhile."""
        start = asyncio.create_task(self.app.start(), name="memman-start")
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({start, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not start.done():
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await start
            raise _StoppedWhileStarting
        start.result()

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
        await self.app.stop()
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
            fcntl.flock(fd, (fcntl.LOCK_SH if self.app.read_only else fcntl.LOCK_EX)
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
        if not self.app.read_only:
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n{self.config.socket}\n".encode(), 0)
            except OSError as exc:
                os.close(fd)
                if exc.errno == errno.ENOSPC:
                    raise StartupError(f"cannot start: {disk_full(path)}; free some space "
                                       "there (the data dir needs a few MB)") from None
                raise StartupError(f"cannot write {path}: {exc.strerror}") from None
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


def early_accepts() -> int:
    """How many connections are served while the data loads (ping and the API's description
    at once, every other request once the load is done); more wait in the backlog. A sixteenth
    of the open-file limit, at most 64: at ``ulimit -n 64`` four, so the load keeps the
    descriptors it needs."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 64
    return max(2, min(64, soft // 16))


def tune_gc() -> None:
    """Memory is many long-lived objects (every entry of every session), so Python's full
    collections walk them all and stall requests for tens of ms; requests make little cyclic
    garbage. Move what was loaded out of the collector's sight and collect the old generations
    far less often (docs/decisions.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def prepare_socket_dir(d: Path) -> None:
    """Create the socket's directory 0700, or check an existing one with ``lstat``: a real
    directory (not a symlink, whoever owns it: its target could be re-pointed later), ours,
    and private (0700)."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        old = os.umask(0o077)
        try:
            d.mkdir(parents=True, mode=0o700)
        except FileExistsError:  # created meanwhile: checked below like any other
            pass
        finally:
            os.umask(old)
        st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode):
        raise StartupError(f"refusing to use {d}: it is a symlink (owned by uid {st.st_uid}), "
                           "and whoever can re-point it could take the socket's place. Use a "
                           "real directory: remove the link, or choose another directory with "
                           "--socket.")
    if not stat.S_ISDIR(st.st_mode):
        raise StartupError(f"refusing to use {d}: it is not a directory. Choose another "
                           "directory with --socket.")
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
