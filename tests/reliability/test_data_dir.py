"""One daemon per data dir, a database file swapped under the daemon, and a damaged database
at start. Daemons run as subprocesses (the lock is per process; exit codes are the point)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from memman import names
from memman.errors import STORAGE_ERROR, MemmanError
from memman.sync_client import SyncClient
from tests.helpers import daemon_env, daemon_process, short_tmpdir


def _second_daemon(root, data, sock) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memman_daemon", "--socket", str(sock), "--data-dir", str(data)],
        capture_output=True, text=True, timeout=60, env=daemon_env(root))


def test_a_second_daemon_on_the_same_data_dir_is_refused() -> None:
    """Problem 5: another --socket, same --data-dir: it exits non-zero naming the pid and the
    socket of the daemon that holds the data dir; nothing of the first is disturbed."""
    root = short_tmpdir()
    with daemon_process(root) as d:
        with SyncClient(d.socket) as c:
            c.call(names.SESSION_OPEN, "s")
            for i in range(20):
                c.call(names.SESSION_ADD, "s", {"content": f"first {i}"})
        other = d.root / "s2" / "memman.sock"
        r = _second_daemon(d.root, d.data_dir, other)
        assert r.returncode != 0
        assert str(d.proc.pid) in r.stderr and str(d.socket) in r.stderr, r.stderr
        assert not other.exists()
        with SyncClient(d.socket) as c:
            c.call(names.SESSION_ADD, "s", {"content": "still mine"})
        d.terminate()
    with daemon_process(root) as d2, SyncClient(d2.socket) as c:  # after it stopped: free
        assert len(c.call(names.SESSION_GET, "s")["entries"]) == 21


def test_a_database_deleted_or_replaced_under_the_daemon_refuses_writes() -> None:
    """Problem 5: writes after the file is deleted (or replaced by another file) are refused
    with -32003 saying so, never acknowledged into a file nobody will read."""
    for how in ("delete", "replace"):
        with daemon_process() as d, SyncClient(d.socket) as c:
            c.call(names.SESSION_OPEN, "s")
            c.call(names.SESSION_ADD, "s", {"content": "before"})
            db = d.data_dir / "memman.db"
            if how == "delete":
                for suffix in ("", "-wal", "-shm"):
                    p = db.with_name(db.name + suffix)
                    if p.exists():
                        p.unlink()
            else:
                shutil.copy(db, db.with_name("copy.db"))
                os.replace(db.with_name("copy.db"), db)
            with pytest.raises(MemmanError) as ei:
                c.call(names.SESSION_ADD, "s", {"content": "after"})
            assert ei.value.code == STORAGE_ERROR
            assert ("deleted" if how == "delete" else "replaced") in ei.value.message
            with pytest.raises(MemmanError):  # and every later write too
                c.call(names.SESSION_OPEN, "t")
            assert [e["content"] for e in c.call(names.SESSION_GET, "s")["entries"]] == ["before"]


def _damage(db_path, table: str) -> object:
    db = sqlite3.connect(db_path)
    try:
        key = db.execute(f"SELECT id FROM {table} ORDER BY id LIMIT 1").fetchone()[0]
        col = "meta" if table == "sessions" else "data"
        bad = {"sessions": '{"summary": 1, "exchanges": [{"q": 1}]}',
               "entries": '{"id": "x", "session_id": 5',
               "summaries": "[]", "scratchpad": '{"id": 1, "text": '}[table]
        db.execute(f"UPDATE {table} SET {col}=? WHERE id=?", (bad, key))
        db.commit()
        return key
    finally:
        db.close()


@pytest.mark.parametrize("table", ["sessions", "entries", "scratchpad"])
def test_a_damaged_row_stops_the_start_with_file_row_and_what_to_do(table: str) -> None:
    """Problem 8: a row whose JSON is damaged (the quick check passes): the daemon exits
    non-zero within the bound, naming the file, the table, the row and what to do; no socket
    is left behind."""
    root = short_tmpdir()
    with daemon_process(root) as d, SyncClient(d.socket) as c:
        c.call(names.SESSION_OPEN, "s")
        c.call(names.SESSION_ADD, "s", {"content": "hello"})
        c.call(names.SCRATCHPAD_WRITE, "s", "a note")
    db = root / "data" / "memman.db"
    key = _damage(db, table)
    sock = root / "s" / "memman.sock"
    r = _second_daemon(root, root / "data", sock)  # bounded by its timeout: never a hang
    assert r.returncode != 0
    assert str(db) in r.stderr and table in r.stderr, r.stderr
    if table != "scratchpad":  # the session log names the row; other components their data
        assert json.dumps(key) in r.stderr.replace("'", '"'), r.stderr
    assert "docs/operations.md" in r.stderr and "Traceback" not in r.stderr
    assert not sock.exists()
