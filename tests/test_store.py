"""The durable record: pragmas, migrations, integrity check at start."""

import asyncio
import sqlite3
import subprocess
import sys

import pytest

from memman_daemon.storage.sqlite.schema import SCHEMA_VERSION
from memman_daemon.storage.sqlite.store import Store, StoreError
from tests.helpers import daemon_env, running_daemon, short_tmpdir


async def test_wal_synchronous_and_schema_version() -> None:
    root = short_tmpdir()
    async with running_daemon(root, storage={"synchronous": "FULL"}) as d, d.client() as c:
        await c.session_open("s")
        assert (await c.stats())["store"]["synchronous"] == "FULL"
        db = d.app.config.database_path
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_bad_synchronous_value_is_refused_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="NORMAL or FULL"):
        Store(short_tmpdir() / "x.db", "SOMETIMES")


async def test_a_database_from_a_newer_memman_is_refused() -> None:
    root = short_tmpdir()
    db = root / "data" / "memman.db"
    db.parent.mkdir()
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    store = Store(db)
    with pytest.raises(StoreError, match="newer than this memman"):
        await store.open()


def test_corrupt_database_stops_start_up_naming_the_file() -> None:
    root = short_tmpdir()
    data = root / "data"
    data.mkdir()
    db = data / "memman.db"
    with sqlite3.connect(db) as conn:  # a few pages of real data, then damage them
        conn.execute("CREATE TABLE t(x)")
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 200)
        conn.execute("CREATE INDEX ti ON t(x)")
    raw = bytearray(db.read_bytes())
    for off in range(4096 * 2, len(raw), 4096):  # keep the header page, scramble the rest
        raw[off + 8: off + 60] = b"\xff" * 52
    db.write_bytes(bytes(raw))
    r = subprocess.run([sys.executable, "-m", "memman_daemon", "--socket", str(root / "s" / "m.sock"),
                        "--data-dir", str(data)], capture_output=True, text=True, timeout=60,
                       env=daemon_env(root))
    assert r.returncode == 1
    assert str(db) in r.stderr and "backup" in r.stderr
    assert not (root / "s" / "m.sock").exists()


async def _damaged_current(root):
    """A database of the current schema whose last pages (rows of ``entries``) are damaged."""
    db = root / "memman.db"
    store = Store(db)
    await store.open()
    await store.write([("INSERT INTO entries(id, session_id, data) VALUES (?,?,?)",
                        (i, "s", "x" * 900)) for i in range(1, 400)])
    await store.close()
    raw = bytearray(db.read_bytes())
    for off in range(len(raw) - 4096 * 40, len(raw), 4096):  # the header and schema kept
        raw[off + 8: off + 60] = b"\xff" * 52
    db.write_bytes(bytes(raw))
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("PRAGMA quick_check")] != ["ok"]
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    return db


async def test_the_check_beside_the_start_lets_no_write_into_a_damaged_file() -> None:
    """With nothing to migrate the integrity check runs beside the start (``open`` returns
    before it): a write queued meanwhile is refused once it fails, nothing is written into the
    file, and ``checked`` (what the start awaits before it ends) raises naming the file."""
    root = short_tmpdir()
    db = await _damaged_current(root)
    before = db.read_bytes()
    store = Store(db)
    await store.open()
    try:
        with pytest.raises(StoreError, match="integrity check failed"):
            await store.write([("INSERT INTO sessions(id, meta) VALUES ('n', '{}')", ())])
        with pytest.raises(StoreError, match="integrity check failed") as got:
            await store.checked()
        assert str(db) in str(got.value) and "backup" in str(got.value)
        with pytest.raises(StoreError):
            await store.write([("INSERT INTO sessions(id, meta) VALUES ('m', '{}')", ())])
    finally:
        await store.close()
    assert db.read_bytes() == before


async def test_a_damaged_file_of_the_current_schema_stops_start_up_naming_the_file() -> None:
    """The daemon on such a file (its check beside the start) exits 1 as before, naming the
    file and what to do, and leaves no socket."""
    root = short_tmpdir()
    data = root / "data"
    data.mkdir()
    db = await _damaged_current(data)
    r = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "memman_daemon", "--socket",
                         str(root / "s" / "m.sock"), "--data-dir", str(data)],
        capture_output=True, text=True, timeout=60, env=daemon_env(root))
    assert r.returncode == 1, r.stderr
    assert str(db) in r.stderr and "backup" in r.stderr
    assert not (root / "s" / "m.sock").exists()


async def test_commits_on_the_loop_and_checkpoints_on_the_writer_thread(monkeypatch) -> None:
    """synchronous = NORMAL: small group commits run inline, the WAL is checkpointed from the
    writer's thread (so it does not grow without bound); FULL: every commit on the thread."""
    import memman_daemon.storage.sqlite.store as store_mod
    monkeypatch.setattr(store_mod, "CHECKPOINT_INTERVAL_S", 0.0)
    root = short_tmpdir()
    store = Store(root / "m.db")
    await store.open()
    try:
        assert store.inline
        on_thread = []
        real = store.on_writer

        async def spy(fn):  # what still goes to the writer's thread
            on_thread.append(fn)
            return await real(fn)

        store.on_writer = spy  # type: ignore[method-assign]
        rows = [("INSERT INTO sessions(id, meta) VALUES (?, ?)", (f"s{i}", "{}"))
                for i in range(3 * store_mod.INLINE_MAX_ROWS)]
        for i in range(40):
            await store.write(rows[i:i + 1])
        assert on_thread == []  # forty one-row commits, none of them on the thread
        await store.write(rows[40:])  # larger than INLINE_MAX_ROWS: on the thread
        assert len(on_thread) == 1
        for _ in range(200):  # the checkpoints run behind the commits
            if store.checkpoints and store._checkpointing and store._checkpointing.done():
                break
            await asyncio.sleep(0.01)
        assert store.checkpoints >= 1
    finally:
        await store.close()
    assert not (root / "m.db-wal").exists()  # closed cleanly: the WAL was folded in
    with sqlite3.connect(root / "m.db") as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == len(rows)

    full = Store(root / "f.db", "FULL")
    await full.open()
    try:
        assert not full.inline
        await full.write(rows[:1])
        assert full.checkpoints == 0  # SQLite's own auto-checkpoint, on the thread
    finally:
        await full.close()


#: main's schema v5 for a short while (the recall index), before the one-live-preference
#: migration took that number and the recall index became v6; copied as it was written
_RECALL_V5 = """
    CREATE TABLE recall_vectors (
        entry_id   INTEGER PRIMARY KEY,  -- entries.id
        session_id TEXT NOT NULL,
        model      TEXT NOT NULL,
        embedding  BLOB NOT NULL         -- float32 little-endian, unit length
    );
    CREATE INDEX recall_vectors_session ON recall_vectors(session_id);
    CREATE TABLE recall_exclusions (
        session_id TEXT NOT NULL,        -- the session that no longer recalls it
        entry_id   INTEGER NOT NULL,     -- the recalled entry (of another session)
        at         REAL NOT NULL,
        PRIMARY KEY (session_id, entry_id)
    );
"""


@pytest.mark.parametrize("era", ["v4", "v5 = recall index", "v5 = one live preference", "v6"])
async def test_every_schema_main_wrote_upgrades(era: str) -> None:
    """A data dir of each schema main ever wrote starts and reaches the current version, its
    rows kept; the short-lived v5 that held the recall index included (it refused to start:
    "table recall_vectors already exists")."""
    from memman import names
    from memman_daemon.storage.sqlite.schema import MIGRATIONS

    root = short_tmpdir()
    db = root / "data" / "memman.db"
    db.parent.mkdir(parents=True)
    scripts = {"v4": MIGRATIONS[:4], "v5 = recall index": [*MIGRATIONS[:4], _RECALL_V5],
               "v5 = one live preference": MIGRATIONS[:5], "v6": MIGRATIONS[:6]}[era]
    with sqlite3.connect(db) as conn:
        for v, script in enumerate(scripts):
            conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version={v + 1};\nCOMMIT;")
        row = ("INSERT INTO memories(id, user_id, type, kind, key, content, metadata, "
               "created_at, updated_at) VALUES (?, 'bob', 'semantic', 'preference', 'style', ?, "
               "'{}', 1, ?)")
        if "memories_live" not in "".join(scripts):  # two live rows: what the old race left
            conn.execute(row, (1, "terse", 10.0))
        conn.execute(row, (2, "detailed", 20.0))
    conn.close()
    async with running_daemon(root) as d, d.client() as c:
        assert (await c.call(names.MEMORY_RECALL, "bob", "style"))["value"] == "detailed"
        await c.session_open("s")
        await c.session_add("s", {"role": "user", "content": "after the upgrade"})
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name='memories_live'").fetchone()
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name='recall_vectors'").fetchone()
    conn.close()


async def test_a_read_sees_every_write_acknowledged_before_it_while_other_reads_run() -> None:
    """Reads share one connection: a read that is half done (its statement open) must not
    lend its older snapshot to the next read. (A read left open by a background task made
    ``memman_audit_list`` miss the audit row of a reassignment acknowledged just before.)"""
    root = short_tmpdir()
    store = Store(root / "x.db")
    await store.open()
    try:
        await store.write([("CREATE TABLE t(x)", ())])
        await store.write([("INSERT INTO t VALUES (?)", (i,)) for i in range(2000)])

        async def write_then_count(n: int) -> int:
            await store.write([("INSERT INTO t VALUES (?)", (-n,))])
            rows = await store.fetchall("SELECT count(*) FROM t WHERE x=?", (-n,))
            return rows[0][0]

        for n in range(1, 61):  # a long read in flight while a write is acknowledged
            _, seen = await asyncio.gather(store.fetchall("SELECT x FROM t"), write_then_count(n))
            assert seen == 1, f"round {n}: an acknowledged write was not visible to a read after it"
    finally:
        await store.close()
