"""One daemon per data dir, a database file swapped under the daemon, and a damaged database
at start. Daemons run as subprocesses (the lock is per process; exit codes are the point)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

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


def _small_disk(root: Path) -> Path | None:
    """A 3 MB tmpfs at ``root/data`` (root only), or None where mounting is not allowed."""
    data = root / "data"
    data.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return None
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(data)],
                       capture_output=True, text=True)
    return data if r.returncode == 0 else None


def test_a_data_dir_with_3_mb_free_starts_and_a_full_disk_is_named() -> None:
    """Issue 22: start-up writes nothing it only needs to read (the 3.6 MB encoding file is
    read in place), so a data dir with 3 MB free starts and counts tokens; when the disk does
    fill, the error names it."""
    root = short_tmpdir()
    data = _small_disk(root)
    if data is None:
        pytest.skip("mounting a 3 MB tmpfs needs root (the test below proves start-up writes "
                    "no cache instead)")
    try:
        with daemon_process(root) as d:
            with SyncClient(d.socket) as c:
                c.session_open("s", {})
                assert c.count_tokens([{"role": "user", "content": "hello"}])["tokens"] > 0
                assert not (data / "cache").exists()
                err = None
                for i in range(5000):
                    try:
                        c.session_add("s", {"role": "user", "content": f"{i} " + "x" * 4000})
                    except MemmanError as exc:
                        err = exc
                        break
                assert err is not None and err.code == STORAGE_ERROR
                assert f"mounted at {data}" in err.message and "is full" in err.message, err
                assert c.ping() == "pong"
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)


def test_start_up_needs_no_writable_cache_for_tokens() -> None:
    """Where nothing can be written under <data>/cache (a file is in its place), the daemon
    starts and counts with the model's own encoding, read from the installed wheel."""
    root = short_tmpdir()
    (root / "data").mkdir()
    (root / "data" / "cache").write_text("not a directory")
    with daemon_process(root) as d, SyncClient(d.socket) as c:
        out = c.count_tokens([{"role": "user", "content": "hello there"}], "gpt-4o-mini")
        assert out["encoding"] == "o200k_base" and out["tokens"] > 0
        assert c.stats()["tokenizer"]["sources"]["o200k_base"] == "bpe-openai"


def test_a_full_data_dir_is_refused_naming_the_disk() -> None:
    root = short_tmpdir()
    data = _small_disk(root)
    if data is None:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        with open(data / "filler", "wb") as f:  # fill it
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
        r = subprocess.run([sys.executable, "-m", "memman_daemon", "--socket",
                            str(root / "s" / "m.sock"), "--data-dir", str(data)],
                           env=daemon_env(root), capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert f"mounted at {data}) is full" in r.stderr and "Traceback" not in r.stderr, r.stderr
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)
