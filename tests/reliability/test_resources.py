"""Bounded resources: closed connections cost nothing, running out of file descriptors does
not spin, a frame has one deadline, idle connections time out, and answers over the output
cap say how to page (and paging works).

CPU and memory are measured from /proc (the daemon runs as a subprocess); the assertions are
loose ratios and bounds, never wall time. Every loop is bounded by count and by time.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import subprocess
import sys
import time

import msgpack
import pytest

from memman import names
from memman.errors import LIMIT_EXCEEDED, MemmanError
from memman.protocol import pack_request
from tests.helpers import (
    daemon_env,
    daemon_process,
    running_daemon,
    short_tmpdir,
    stop_process,
    wait_for_socket,
)
from tests.reliability.test_load import rss_mb
from tests.wire import RawConn, blocking_call, blocking_ping

CYCLES = 10_000  #: connect / disconnect cycles (an attack run saw ~10-30 KB kept per cycle)
CYCLE_BUDGET_S = 180.0
RSS_GROWTH_BOUND_MB = 50.0  #: 10,000 cycles x 10 KB would be ~100 MB


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: what a cycle sends before it hangs up: nothing, a request it reads the answer to, a named
#: client that subscribes, half a frame, a request it never reads the answer to
CYCLE_KINDS = ("bare", "ping", "named", "half", "unread")


def _send_kind(s: socket.socket, kind: str, i: int) -> None:
    if kind == "named":
        s.sendall(pack_request(1, names.SET_CLIENT_INFO, [f"agent-{i}", {"note": "x" * 200}])
                  + pack_request(2, names.SUBSCRIBE, [[], {}]))
        u = msgpack.Unpacker(raw=False)
        answers = 0
        while answers < 2:
            data = s.recv(65536)
            if not data:
                break
            u.feed(data)
            answers += sum(1 for m in u if m[0] == 1)
    elif kind == "half":
        s.sendall(pack_request(1, names.PING, [])[:-1])
    elif kind == "unread":
        s.sendall(pack_request(1, names.SET_CLIENT_INFO, [f"agent-{i}", {}])
                  + pack_request(2, names.SESSION_OPEN, [f"s{i % 20}", {}]))


def _cycles(path: str, n: int, deadline: float, *, ping: bool, kind: str = "") -> int:
    done = 0
    for i in range(n):
        if time.monotonic() > deadline:
            break
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        while True:
            try:
                s.connect(path)
                break
            except BlockingIOError:  # the listen backlog is full: the daemon is catching up
                if time.monotonic() > deadline:
                    s.close()
                    return done
                time.sleep(0.01)
        if kind:
            _send_kind(s, kind, i)
        elif ping:
            s.sendall(pack_request(1, names.PING, []))
            u = msgpack.Unpacker(raw=False)
            while not list(u):
                data = s.recv(65536)
                if not data:
                    break
                u.feed(data)
        s.close()
        done += 1
    return done


def test_connect_disconnect_loop_keeps_nothing() -> None:
    """Problem 7 / issue 22: 10,000 connect / disconnect cycles of every kind (without a
    byte, with a request, named and subscribed, half a frame, an answer never read): the
    daemon's RSS after the loop is within 50 MB of before, and no connection is left
    counted."""
    with daemon_process() as d:
        path = str(d.socket)
        deadline = time.monotonic() + CYCLE_BUDGET_S
        for kind in CYCLE_KINDS:  # warm up (imports, caches, the sessions "unread" opens)
            _cycles(path, 100, deadline, ping=False, kind=kind)
        before = rss_mb(d.proc.pid)
        n = 0
        for kind in CYCLE_KINDS:
            n += _cycles(path, CYCLES // len(CYCLE_KINDS), deadline, ping=False, kind=kind)
        assert n >= 4000, f"only {n} cycles within the time budget"
        # the daemon has seen every close once the stats show no other client
        for _ in range(100):
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
                s.sendall(pack_request(2, names.STATS, []))
                u = msgpack.Unpacker(raw=False)
                stats = None
                while stats is None:
                    u.feed(s.recv(1 << 20))
                    for m in u:  # a refusal (max_clients while closes are pending) is an event
                        stats = m[3] if m[0] == 1 else {"clients": -1}
            if stats["clients"] == 1:
                break
            time.sleep(0.05)
        assert stats["clients"] == 1
        after = rss_mb(d.proc.pid)
        print(f"{n} cycles: RSS {before:.1f} -> {after:.1f} MB")
        assert after - before < RSS_GROWTH_BOUND_MB, (before, after)


async def test_gone_connections_leave_nothing_reachable() -> None:
    """Issue 22: what a connection held (its entry in ServerState, its subscriptions on the
    event bus, its client info, its decoder) is gone with it, counted, not measured: after
    400 cycles of every kind no Connection object is alive and the bus holds no
    subscription."""
    import gc

    from memman_daemon.connection import Connection

    async with running_daemon() as d:
        path = str(d.socket)
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + CYCLE_BUDGET_S

        def mine() -> list[Connection]:
            # this daemon's: the tests before this one ran daemons in this process too
            return [o for o in gc.get_objects()
                    if isinstance(o, Connection) and o.server is d.server]

        def run_all() -> int:
            return sum(_cycles(path, 80, deadline, ping=False, kind=k) for k in CYCLE_KINDS)

        assert await loop.run_in_executor(None, run_all) == 400
        state = d.server.state
        for _ in range(400):  # the daemon sees every close (and every late answer) in time
            if not state.connections and not d.app.events.subscriptions and not any(
                    c.inflight for c in state.connections):
                # reachable, not merely uncollected: a connection whose close raised inside
                # its own task (a reset while answering) can sit in a cycle with the
                # exception's frames until the collector runs, and an idle daemon allocates
                # too little to trigger it (15 of 400 were waiting in a CI run)
                gc.collect()
                alive = mine()
                if not alive:
                    break
            await asyncio.sleep(0.05)
        assert not state.connections
        assert not d.app.events.subscriptions
        gc.collect()
        alive = mine()
        # (what holds them, to find it when it happens: 76 of 400 once in a CI run of the
        # whole suite, never alone or under load here)
        held = sorted({f"{type(r).__module__}.{type(r).__qualname__}"
                       for c in alive[:5] for r in gc.get_referrers(c)
                       if r is not alive and not isinstance(r, type(mine))})
        assert alive == [], f"{len(alive)} closed connections still reachable, held by {held}"
        # the cycles did reach the daemon: at least the pings (a request whose client closed
        # before the daemon read it may go uncounted on a busy machine, by design)
        assert state.requests >= 80


def test_out_of_file_descriptors_does_not_spin() -> None:
    """Problem 7: at `ulimit -n 64`, 100 connections wait: the daemon's CPU use while they wait
    is a small share of the time that passes, it logs the failure once per interval (not a
    traceback per attempt), and it serves again once they go."""
    root = short_tmpdir()
    sock, data, log = root / "s" / "memman.sock", root / "data", root / "daemon.log"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memman_daemon", "--socket", str(sock), "--data-dir",
             str(data)], stdout=logf, stderr=subprocess.STDOUT, env=daemon_env(root),
            preexec_fn=limit)
    conns = []
    try:
        wait_for_socket(sock, proc)
        # loaded (a ping is answered during the load; a listing waits for it): measure from here
        assert blocking_call(sock, names.SESSION_LIST, [{}], timeout=60) is not None
        for _ in range(100):
            s = socket.socket(socket.AF_UNIX)
            s.setblocking(False)
            try:
                s.connect(str(sock))
            except (BlockingIOError, OSError):
                pass
            conns.append(s)
        cpu0, t0 = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(4)  # the window measured (an interval, not an assertion on time)
        cpu1, t1 = _cpu_seconds(proc.pid), time.monotonic()
        ratio = (cpu1 - cpu0) / (t1 - t0)
        print(f"CPU while out of descriptors: {cpu1 - cpu0:.2f}s over {t1 - t0:.2f}s")
        assert ratio < 0.25, ratio  # 100 % in the attack run; 0.4 before the fix here
        text = log.read_text()
        assert "Too many open files" in text
        assert len(text) < 64 * 1024 and "Traceback" not in text
        for s in conns:
            s.close()
        conns = []
        for _ in range(50):  # serves again
            try:
                assert blocking_ping(sock, timeout=5) == "pong"
                break
            except (OSError, ConnectionError):
                time.sleep(0.2)
        else:
            raise AssertionError("the daemon did not serve again")
    finally:
        for s in conns:
            s.close()
        stop_process(proc)


async def test_one_byte_a_second_does_not_keep_a_frame_open() -> None:
    """Problem 7: the frame deadline is for the whole frame: bytes that keep trickling in do
    not move it."""
    async with running_daemon(limits={"frame_timeout_s": 1.0}) as d:
        frame = pack_request(1, names.SESSION_LIST, [{}])
        async with RawConn.open(d.socket) as rc:
            closed = False
            sent = 0
            started = time.monotonic()
            for b in frame[:-1]:  # never the last byte
                if not await rc.send(bytes([b])):
                    closed = True
                    break
                sent += 1
                out = await rc.outcome(0.3)
                if out.closed or out.messages:
                    closed = True
                    assert -32700 in out.error_codes() or out.closed
                    break
                if time.monotonic() - started > 30:
                    break
            assert closed, f"still open after {sent} trickled bytes"
        assert await asyncio.to_thread(blocking_ping, d.socket) == "pong"


async def test_idle_connections_time_out_but_subscribers_stay() -> None:
    """Problem 7: an idle connection is closed after limits.idle_timeout_s (with an error
    event saying why); one that subscribed to events is not."""
    async with running_daemon(limits={"idle_timeout_s": 1.0}) as d:
        async with d.client() as sub:
            await sub.subscribe(["session"])
            async with RawConn.open(d.socket) as rc:
                out = await rc.outcome(15)  # the main loop checks once a second
                assert out.closed
                assert any("idle" in str(e) for e in out.errors), out.messages
            assert not sub.closed
            assert await sub.call(names.PING) == "pong"


async def test_answers_over_the_output_cap_say_how_to_page() -> None:
    """Problem 9: a session too large for one answer: session_get and export are refused with
    -32004 saying how to page; paging by entry range returns every entry; the connection
    stays usable."""
    cap = 1024 * 1024
    async with running_daemon(limits={"max_message_bytes": cap}) as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "big")
        for i in range(4):
            await c.call(names.SESSION_ADD, "big", {"content": f"{i} " + "x" * (cap // 3)})
        for method in (names.SESSION_GET, names.SESSION_EXPORT):
            with pytest.raises(MemmanError) as ei:
                await c.call(method, "big")
            assert ei.value.code == LIMIT_EXCEEDED
            assert "after_id" in ei.value.message and "limits.max_message_bytes" in ei.value.message
            got, after = [], 0
            for _ in range(10):
                page = await c.call(method, "big", {"after_id": after, "limit": 2})
                got += page["entries"]
                if page["next_after_id"] is None:
                    break
                after = page["next_after_id"]
            assert [e["content"][:2] for e in got] == ["0 ", "1 ", "2 ", "3 "]
        assert await c.call(names.PING) == "pong"


async def test_paging_is_exact() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "s")
        ids = [(await c.call(names.SESSION_ADD, "s", {"content": str(i)}))["id"] for i in range(7)]
        page = await c.call(names.SESSION_GET, "s", {"after_id": ids[2], "limit": 3})
        assert [e["id"] for e in page["entries"]] == ids[3:6]
        assert page["next_after_id"] == ids[5] and page["total_entries"] == 7
        last = await c.call(names.SESSION_GET, "s", {"after_id": ids[5], "limit": 3})
        assert [e["id"] for e in last["entries"]] == ids[6:] and last["next_after_id"] is None
        newest = await c.call(names.SESSION_GET, "s", {"limit": 2})
        assert [e["id"] for e in newest["entries"]] == ids[5:]
        await asyncio.sleep(0)
