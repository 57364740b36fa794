"""`make run` without a terminal: daemon + demo for a moment, a summary, and nothing left over."""

from __future__ import annotations

import shutil
import subprocess
import sys

from memman_cli.launcher import daemon_answers
from tests.helpers import daemon_env, short_tmpdir


def test_launcher_without_a_terminal_runs_the_demo_and_stops_what_it_started():
    root = short_tmpdir()
    sock = root / "s" / "memman.sock"
    try:
        out = subprocess.run(
            [sys.executable, "-m", "memman_cli.launcher", "--socket", str(sock), "--data-dir",
             str(root / "data"), "--sessions", "3", "--rate", "5", "--duration", "1.5"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=daemon_env(root),
            timeout=90)
        assert out.returncode == 0, out.stderr
        assert "started the memman daemon" in out.stdout
        assert "running the demo" in out.stdout
        for sid in ("demo-01", "demo-02", "demo-03"):
            assert sid in out.stdout
        assert "memman_session_add" in out.stdout  # the demo's own summary
        assert not daemon_answers(sock)  # the daemon it started is gone
    finally:
        shutil.rmtree(root, ignore_errors=True)
