"""The socket file and the connection limits: modes, stale takeover, never stealing a live
socket, max clients, and refusal of other users (SO_PEERCRED)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from memman import errors
from memman.client import Client
from memman.errors import ConnectionLost
from memman_daemon import server as server_mod
from memman_daemon.server import StartupError
from memman_daemon.sessions import LoadError
from tests.helpers import daemon_process, make_config, running_daemon, short_tmpdir
from tests.wire import RawConn, blocking_ping

GUARD = 30.0


@pytest.fixture
def root():
    d = short_tmpdir("mmsock")
    yield d
    shutil.rmtree(d, ignore_errors=True)


async def test_socket_0600_in_a_0700_directory(root) -> None:
    async with running_daemon(root) as d:
        assert stat.S_IMODE(d.socket.stat().st_mode) == 0o600
        assert stat.S_IMODE(d.socket.parent.stat().st_mode) == 0o700
        assert stat.S_ISSOCK(d.socket.stat().st_mode)


async def test_refuses_a_socket_directory_open_to_others(root) -> None:
    (root / "s").mkdir(mode=0o755)
    (root / "s").chmod(0o755)
    with pytest.raises(StartupError, match="open to other users.*chmod 700"):
        async with running_daemon(root):
            pass


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown the directory to another user")
async def test_refuses_a_socket_directory_owned_by_someone_else(root) -> None:
    (root / "s").mkdir(mode=0o700)
    os.chown(root / "s", 65534, 65534)
    with pytest.raises(StartupError, match="owned by uid 65534"):
        async with running_daemon(root):
            pass


async def test_stale_socket_is_taken_over(root) -> None:
    path = root / "s" / "memman.sock"
    path.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()  # the file stays; nobody listens: what a crashed daemon leaves
    assert path.exists()
    async with running_daemon(root) as d, d.client() as c:
        assert await c.ping() == "pong"


async def test_a_file_that_is_not_a_socket_is_left_alone(root) -> None:
    path = root / "s" / "memman.sock"
    path.parent.mkdir(mode=0o700)
    path.write_text("precious")
    with pytest.raises(StartupError, match="not a socket"):
        async with running_daemon(root):
            pass
    assert path.read_text() == "precious"


async def test_refuses_to_steal_a_live_socket(root) -> None:
    async with running_daemon(root) as d:
        other = short_tmpdir("mmsock2")
        try:
            cfg = make_config(other)
            cfg.socket = d.socket
            with pytest.raises(StartupError, match="already listening"):
                async with running_daemon(other, config=cfg):
                    pass
        finally:
            shutil.rmtree(other, ignore_errors=True)
        async with d.client() as c:  # the first daemon is untouched
            assert await c.ping() == "pong"
        assert d.socket.exists()


def test_second_daemon_process_exits_with_a_clear_message() -> None:
    with daemon_process() as d:
        r = subprocess.run([sys.executable, "-m", "memman_daemon", "--socket", str(d.socket),
                            "--data-dir", str(d.root / "data2")], capture_output=True, text=True,
                           timeout=GUARD, env={**os.environ, "MEMMAN_CONFIG": str(d.root / "x")})
        assert r.returncode == 1
        assert "already listening" in r.stderr
        assert blocking_ping(d.socket) == "pong"


async def test_max_clients(root) -> None:
    async with running_daemon(root, limits={"max_clients": 3}) as d:
        clients = [await _client(d) for _ in range(3)]
        for c in clients:
            assert await c.ping() == "pong"
        async with RawConn.open(d.socket) as rc:
            out = await rc.outcome(GUARD)
        assert out.closed
        assert out.error_codes() == [errors.LIMIT_EXCEEDED]
        assert "max_clients" in out.errors[0]["message"]
        for c in clients:  # the others are unaffected
            assert await c.ping() == "pong"
        await clients.pop().close()
        for _ in range(int(GUARD / 0.02)):  # the slot frees once the daemon sees the close
            if len(d.server.state.connections) < 3:
                break
            await asyncio.sleep(0.02)
        clients.append(await _client(d))
        assert await clients[-1].ping() == "pong"
        for c in clients:
            await c.close()


async def test_a_refused_client_that_already_sent_a_request_reads_why(root) -> None:
    """Real clients send at once; they must get the -32004 reason, not a connection reset."""
    from memman.client import Client
    from memman.errors import MemmanError
    from memman.sync_client import SyncClient

    async with running_daemon(root, limits={"max_clients": 1}) as d:
        first = await _client(d)
        with pytest.raises(MemmanError) as exc:
            await Client.connect(d.socket)  # sends memman_set_client_info straight away
        assert exc.value.code == errors.LIMIT_EXCEEDED and "max_clients" in exc.value.message

        def blocking() -> MemmanError:
            with pytest.raises(MemmanError) as sync_exc:
                SyncClient(d.socket)
            return sync_exc.value
        err = await asyncio.to_thread(blocking)
        assert err.code == errors.LIMIT_EXCEEDED
        assert await first.ping() == "pong"
        await first.close()


async def _client(d):
    from memman.client import Client
    return await Client.connect(d.socket)


@pytest.mark.parametrize("owner", ["ours", "another uid"])
def test_a_symlinked_socket_directory_is_refused(root, owner: str) -> None:
    """Issue 22: the socket directory is checked with lstat: a symlink is refused whoever owns
    it (whoever can re-point it could take the socket's place), naming it."""
    real = root / "real"
    real.mkdir(mode=0o700)
    link = root / "link"
    link.symlink_to(real)
    if owner == "another uid":
        if os.geteuid() != 0:
            pytest.skip("needs root to make a link owned by another uid")
        os.lchown(link, 65534, 65534)
    with pytest.raises(StartupError) as ei:
        server_mod.prepare_socket_dir(link)
    assert "is a symlink" in str(ei.value) and str(link) in str(ei.value)
    cfg = make_config(root)
    cfg.socket = link / "memman.sock"

    async def start() -> None:
        async with running_daemon(root, config=cfg):
            pass
    with pytest.raises(StartupError):
        asyncio.run(start())
    assert not (real / "memman.sock").exists()


async def test_foreign_uid_refused(root, monkeypatch) -> None:
    """The refusal path, with SO_PEERCRED reporting another uid."""
    monkeypatch.setattr(server_mod, "peer_uid", lambda sock: os.getuid() + 4242)
    async with running_daemon(root) as d:
        async with RawConn.open(d.socket) as rc:
            await rc.send(b"\x94\x00\x01\xabmemman_ping\x90")
            out = await rc.outcome(GUARD)
        assert out.closed
        assert out.error_codes() == [errors.FORBIDDEN]
        assert f"uid {os.getuid() + 4242}" in out.errors[0]["message"]
        assert not [m for m in out.messages if m[0] == 1], "a refused peer got an answer"


#: what the foreign user runs: the standard library only (nothing from the checkout or its
#: venv, which that user may not be able to read); the raw bytes it got go out as hex
REFUSED_CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(sys.argv[1])
try:
    s.sendall(bytes.fromhex(sys.argv[2]))
except OSError:
    pass
got = b""
while True:
    try:
        data = s.recv(65536)
    except OSError:
        break
    if not data:
        break
    got += data
print(got.hex())
"""


def _python_for(uid: int) -> str | None:
    """An interpreter the user ``uid`` can run (the system's first: the checkout and its venv
    may sit under a directory only root can read), or None."""
    candidates = ["/usr/bin/python3", "/usr/local/bin/python3",
                  getattr(sys, "_base_executable", ""), sys.executable]
    for exe in dict.fromkeys(c for c in candidates if c):
        r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                            exe, "-c", "import socket"], capture_output=True, cwd="/")
        if r.returncode == 0:
            return exe
    return None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to connect as another user")
async def test_real_foreign_uid_refused(root) -> None:
    """A client really running as ``nobody`` (the socket made reachable only for this test),
    with a Python that user can run and nothing from the checkout."""
    import msgpack

    python = _python_for(65534)
    if python is None:
        pytest.skip("no Python interpreter is runnable by uid 65534 (the checkout and its venv "
                    "are not readable by that user, and there is no system python3)")
    async with running_daemon(root) as d:
        for p, mode in ((root, 0o711), (d.socket.parent, 0o711), (d.socket, 0o666)):
            p.chmod(mode)
        request = msgpack.packb([0, 1, "memman_ping", []]).hex()
        proc = await asyncio.create_subprocess_exec(
            "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python,
            "-c", REFUSED_CLIENT, str(d.socket), request,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
        stdout, stderr = await asyncio.wait_for(proc.communicate(), GUARD)
        assert proc.returncode == 0, stderr.decode()
        u = msgpack.Unpacker(raw=False)
        u.feed(bytes.fromhex(stdout.decode().strip()))
        messages = list(u)
        assert [m[0] for m in messages] == [2], messages  # one event, no answer
        assert messages[0][1] == "memman_error_event"
        assert messages[0][2][0]["code"] == errors.FORBIDDEN
        assert "uid 65534" in messages[0][2][0]["message"]
        async with d.client() as c:
            assert await c.ping() == "pong"


async def _held_start(root: Path, fail: bool = False
                      ) -> tuple[server_mod.Server, asyncio.Event, asyncio.Task[None]]:
    """A daemon whose data load is held until the event is set (as a large data dir holds it
    for seconds); the real load runs after it, or ``fail``: the load finds damage."""
    srv = server_mod.Server(make_config(root))
    hold, real_start = asyncio.Event(), srv.app.start

    async def start() -> None:
        await hold.wait()
        if fail:
            raise LoadError("a damaged row (held-start test)")
        await real_start()

    srv.app.start = start  # type: ignore[method-assign]
    task = asyncio.create_task(srv.serve(install_signal_handlers=False))
    while not Path(srv.config.socket).exists():
        assert not task.done(), task
        await asyncio.sleep(0.01)
    return srv, hold, task


async def test_a_ping_is_answered_while_the_data_loads_and_other_requests_wait_for_it(
        root) -> None:
    srv, hold, task = await _held_start(root)
    try:
        async with await Client.connect(srv.config.socket, name="early") as c:
            opened = asyncio.create_task(c.session_open("s", {}))
            # sent before the ping on one connection: read first, and waiting for the load
            assert await asyncio.wait_for(c.ping(), GUARD) == "pong"
            assert (await c.get_api_info())["api_level"] >= 1
            assert not srv.started.is_set() and not opened.done()
            hold.set()
            assert (await asyncio.wait_for(opened, GUARD))["created"] is True
            assert (await c.session_get("s"))["session_id"] == "s"
    finally:
        hold.set()
        srv.request_stop()
        await asyncio.wait_for(task, GUARD)


async def test_a_request_waiting_for_a_load_that_fails_ends_with_its_connection(root) -> None:
    srv, hold, task = await _held_start(root, fail=True)
    c = await Client.connect(srv.config.socket, name="early")
    try:
        opened = asyncio.create_task(c.session_open("s", {}))
        assert await asyncio.wait_for(c.ping(), GUARD) == "pong"
        hold.set()
        with pytest.raises(LoadError):
            await asyncio.wait_for(task, GUARD)
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(opened, GUARD)
        assert not Path(srv.config.socket).exists()
    finally:
        await c.close()


async def test_while_the_data_loads_a_few_connections_are_served_and_the_rest_wait(root) -> None:
    """The bound on connections accepted during a load (``server.early_accepts()``): the
    descriptors the load needs stay its own; a client past the bound waits in the backlog
    and is served once the load is done."""
    srv, hold, task = await _held_start(root)
    bound = server_mod.early_accepts()
    held: list[asyncio.StreamWriter] = []
    try:
        for _ in range(bound):
            held.append((await asyncio.open_unix_connection(str(srv.config.socket)))[1])
        for _ in range(int(GUARD / 0.01)):
            if len(srv.state.connections) == bound:
                break
            await asyncio.sleep(0.01)
        assert len(srv.state.connections) == bound
        late = asyncio.create_task(asyncio.to_thread(blocking_ping, srv.config.socket, GUARD))
        # a negative can only be shown over an interval: the late client is not accepted
        await asyncio.sleep(0.3)
        assert not late.done() and len(srv.state.connections) == bound
        hold.set()
        assert await asyncio.wait_for(late, GUARD) == "pong"
    finally:
        for w in held:
            w.close()
        hold.set()
        srv.request_stop()
        await asyncio.wait_for(task, GUARD)
