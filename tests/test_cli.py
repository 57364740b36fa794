"""The `memman` command against a daemon subprocess."""

import json
import re
import subprocess
import sys

from memman.sync_client import SyncClient
from tests.helpers import daemon_env, daemon_process, short_tmpdir


def memman(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memman_cli.cli", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_status_fails_without_daemon() -> None:
    root = short_tmpdir()
    r = memman("--socket", str(root / "none.sock"), "status")
    assert r.returncode == 1 and "not running" in r.stderr


def test_status_sessions_show_against_a_daemon_subprocess() -> None:
    with daemon_process() as p:
        sock = str(p.socket)
        with SyncClient(sock) as mm:
            mm.session_open("chat-1", {"user_id": "ana"})
            mm.session_add("chat-1", {"role": "user", "content": "What is the plan?"})
        r = memman("--socket", sock, "status")
        assert r.returncode == 0, r.stderr
        assert "running" in r.stdout and "o200k_base" in r.stdout  # the default model's own encoding
        assert re.search(r"recall +1 entries of 1 user\(s\), scope user", r.stdout), r.stdout
        j = json.loads(memman("--socket", sock, "--json", "status").stdout)
        assert j["running"] and j["sessions"] == 1
        rows = json.loads(memman("--socket", sock, "--json", "sessions").stdout)
        assert rows[0]["session_id"] == "chat-1" and rows[0]["entries"] == 1
        assert "chat-1" in memman("--socket", sock, "sessions").stdout
        show = memman("--socket", sock, "show", "chat-1")
        assert show.returncode == 0, show.stderr
        assert "=== MEMORY STATE ===" in show.stdout and "Session: chat-1" in show.stdout
        missing = memman("--socket", sock, "show", "nope")
        assert missing.returncode == 1 and "not found" in missing.stderr


def test_daemon_refuses_a_second_daemon_on_a_live_socket() -> None:
    with daemon_process() as p:
        r = subprocess.run([sys.executable, "-m", "memman_daemon", "--socket", str(p.socket),
                            "--data-dir", str(p.root / "other")], capture_output=True, text=True,
                           timeout=60, env=daemon_env(p.root))
        assert r.returncode == 1 and "already listening" in r.stderr


def test_flags_work_after_the_subcommand_too() -> None:
    root = short_tmpdir()
    r = memman("status", "--json", "--socket", str(root / "none.sock"))
    assert r.returncode == 1 and json.loads(r.stdout)["running"] is False
