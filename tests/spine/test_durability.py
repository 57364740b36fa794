"""Acknowledged means committed: ``kill -9`` of the daemon during concurrent durable writes
loses nothing that was answered, the database passes ``PRAGMA integrity_check``, and a SIGTERM
commits and removes the socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sqlite3
import time
from pathlib import Path

from memman.client import Client
from memman.errors import ConnectionLost, MemmanError
from memman.sync_client import SyncClient
from tests.helpers import daemon_process, short_tmpdir

WRITERS = 16
SESSIONS = 4
ACKED_BEFORE_KILL = 1500  # the kill comes once this many adds were answered
GUARD = 60.0


async def write_until_killed(sock: Path, acked: list[tuple[str, str, int]],
                             enough: asyncio.Event) -> None:
    """Writers add entries as fast as they are answered; each answer is recorded."""

    async def writer(w: int) -> None:
        c = await Client.connect(sock, name=f"writer-{w}")
        try:
            for i in range(10**9):
                sid, content = f"s{w % SESSIONS}", f"w{w}-{i}"
                try:
                    r = await c.session_add(sid, {"role": "user", "content": content})
                except (ConnectionLost, MemmanError):
                    return
                acked.append((sid, content, r["id"]))
                if len(acked) >= ACKED_BEFORE_KILL:
                    enough.set()
        finally:
            await c.close()

    await asyncio.gather(*(writer(w) for w in range(WRITERS)))


def integrity(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [r[0] for r in conn.execute("PRAGMA integrity_check")]


async def test_kill9_during_concurrent_writes_loses_no_acknowledged_entry() -> None:
    root = short_tmpdir("mmk9")
    try:
        await _kill9_roundtrip(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _kill9_roundtrip(root: Path) -> None:
    acked: list[tuple[str, str, int]] = []
    with daemon_process(root) as d:
        with SyncClient(d.socket) as c:
            for s in range(SESSIONS):
                c.call("memman_session_open", f"s{s}", {"user_id": "u"})
        enough = asyncio.Event()
        writers = asyncio.create_task(write_until_killed(d.socket, acked, enough))
        await asyncio.wait_for(enough.wait(), GUARD)
        d.kill9()  # mid-stream: requests are in flight on every connection
        await asyncio.wait_for(writers, GUARD)
        killed_at = len(acked)
    assert killed_at >= ACKED_BEFORE_KILL
    db = root / "data" / "memman.db"
    assert integrity(db) == ["ok"]  # as the crash left it (WAL replayed on open)
    # restart on the same socket path (the stale socket is taken over) and data dir
    with daemon_process(root) as d2, SyncClient(d2.socket) as c:
        present: dict[str, set[str]] = {}
        for s in range(SESSIONS):
            got = c.call("memman_session_get", f"s{s}", {})
            present[f"s{s}"] = {e["content"] for e in got["entries"]}
        missing = [(sid, content) for sid, content, _ in acked if content not in present[sid]]
        assert not missing, f"{len(missing)} acknowledged entries lost, e.g. {missing[:5]}"
        ids = [i for _, _, i in acked]
        assert len(set(ids)) == len(ids)
    assert integrity(db) == ["ok"]


def test_sigterm_commits_and_removes_the_socket() -> None:
    root = short_tmpdir("mmterm")
    try:
        _sigterm_roundtrip(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _sigterm_roundtrip(root: Path) -> None:
    with daemon_process(root) as d:
        with SyncClient(d.socket) as c:
            c.call("memman_session_open", "t", {})
            for i in range(200):
                c.call("memman_session_add", "t", {"role": "user", "content": f"m{i}"})
        assert d.terminate() == 0
        deadline = time.monotonic() + GUARD
        while d.socket.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not d.socket.exists(), "SIGTERM left the socket file behind"
    db = root / "data" / "memman.db"
    assert integrity(db) == ["ok"]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        n = conn.execute("SELECT count(*) FROM entries WHERE session_id = 't'").fetchone()[0]
    assert n == 200


async def test_requests_in_flight_at_shutdown_are_answered() -> None:
    """SIGTERM semantics in-process: a durable write waiting for its commit when shutdown
    begins still commits and is answered; a request arriving after gets -32007."""
    from tests.helpers import running_daemon

    root = short_tmpdir("mmflight")
    async with running_daemon(root) as d:
        c = await Client.connect(d.socket)
        late = await Client.connect(d.socket)
        await c.session_open("s", {})
        store = d.app.store
        entered, release = asyncio.Event(), asyncio.Event()
        original = store._transaction

        async def held(ops, *args):
            entered.set()
            await release.wait()
            await original(ops, *args)

        store._transaction = held
        pending = asyncio.create_task(c.session_add("s", {"role": "user", "content": "in flight"}))
        await asyncio.wait_for(entered.wait(), GUARD)
        d.server.request_stop()
        for _ in range(int(GUARD / 0.01)):
            if d.server.stopping:
                break
            await asyncio.sleep(0.01)
        try:
            await asyncio.wait_for(late.ping(), GUARD)
        except MemmanError as exc:
            assert exc.code == -32007
        except ConnectionLost:
            pass  # the refusal may race the close; either way nothing new runs
        release.set()
        result = await asyncio.wait_for(pending, GUARD)
        assert result["id"] > 0
        await c.close()
        await late.close()
        db = d.app.config.database_path
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = [json.loads(r[0])["content"] for r in conn.execute("SELECT data FROM entries")]
    shutil.rmtree(root, ignore_errors=True)
    assert rows == ["in flight"]


def _orphans(db: Path) -> int:
    """Entry and summary rows of no session (an import's staged rows included)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return sum(conn.execute(f"SELECT count(*) FROM {t} WHERE session_id NOT IN "
                                "(SELECT id FROM sessions)").fetchone()[0]
                   for t in ("entries", "summaries"))


def _wait_staged(db: Path, tries: int) -> bool:
    """Whether an import's staged rows showed up on disk within ``tries`` looks."""
    conn = None
    try:
        for _ in range(tries):
            with contextlib.suppress(sqlite3.Error):  # the WAL's files may be on their way
                conn = conn or sqlite3.connect(f"file:{db}?mode=ro", uri=True)
                if conn.execute("SELECT 1 FROM entries WHERE session_id >= char(0) AND "
                                "session_id < char(1) LIMIT 1").fetchone():
                    return True
            time.sleep(0.002)  # a look every 2 ms: bounded by the count
    finally:
        if conn is not None:
            conn.close()
    return False


def test_kill9_during_staged_imports_leaves_no_orphan_rows() -> None:
    """An import is written in batches under a staging name; kill -9 in the middle, in a
    loop: after the restart no entry or summary row is left without its session, and the
    session holds all of the import or none of it."""
    import socket as socketlib

    from memman.protocol import pack_request

    root = short_tmpdir("mmk9i")
    (root / "no-config.toml").write_text("[storage]\nbatch_max_rows = 20\n")
    entries = [{"id": i + 1, "type": "message", "role": "user", "content": f"line {i}",
                "tokens": 3, "created_at": 1_700_000_000 + i} for i in range(3000)]
    frame = pack_request(1, "memman_session_import", [
        {"format": "memman.session/1", "session_id": "imp", "entries": entries},
        {"replace": True}])
    db = root / "data" / "memman.db"
    caught = 0
    try:
        for _ in range(3):  # rounds: bounded by count
            with daemon_process(root) as d:
                s = socketlib.socket(socketlib.AF_UNIX)
                s.connect(str(d.socket))
                s.sendall(frame)
                caught += _wait_staged(db, 5000)
                d.kill9()
                s.close()
            with daemon_process(root) as d, SyncClient(d.socket) as c:
                assert c.ping() == "pong"
                listed = [x["session_id"] for x in c.session_list({})]
                n = len(c.session_get("imp", {"limit": 10_000})["entries"]) \
                    if "imp" in listed else 0
                assert n in (0, len(entries)), n
            assert _orphans(db) == 0
            assert integrity(db) == ["ok"]
        assert caught, "no round killed the daemon while an import was staged"
    finally:
        shutil.rmtree(root, ignore_errors=True)
