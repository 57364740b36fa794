"""End to end: a real daemon subprocess, the TUI in a real terminal (tmux), keys sent with
send-keys, the screen read with capture-pane, and the daemon asked what changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from memman import SyncClient, names
from tests.helpers import daemon_env, daemon_process

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name)


def wait_screen(name: str, text: str, polls: int = 300) -> str:
    """Poll the pane until ``text`` shows (bounded number of polls, never asserting time)."""
    shown = ""
    for _ in range(polls):
        shown = screen(name)
        if text in shown:
            return shown
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared on the screen:\n{shown}")


def test_evict_a_snippet_from_the_terminal():
    with daemon_process() as d:
        with SyncClient(d.socket) as c:
            c.session_open("e2e-1", {"user_id": "alice"})
            c.session_add("e2e-1", {"role": "user", "content": "what changed yesterday?"})
            keep = c.call(names.SCRATCHPAD_WRITE, "e2e-1", "Sign-ups follow campaign emails.")
            gone = c.call(names.SCRATCHPAD_WRITE, "e2e-1", "A snippet the user wants gone.")
        gone_id = gone["snippet"]["id"]
        name = f"mm-e2e-{d.proc.pid}"
        env = " ".join(f"{k}={v}" for k, v in daemon_env(d.root).items()
                       if k.startswith(("MEMMAN_", "TIKTOKEN_")))
        tmux("new-session", "-d", "-s", name, "-x", "150", "-y", "44",
             f"env {env} TERM=xterm-256color {sys.executable} -m memman_tui "
             f"--socket {d.socket} --refresh 0.25")
        try:
            wait_screen(name, "e2e-1")
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "2 snippets")
            tmux("send-keys", "-t", name, "Tab", "Tab")  # context -> cache -> scratchpad
            # candidates are sorted best first; walk down until the status line names ours
            for _ in range(3):
                if f"snippet {gone_id}: score" in screen(name):
                    break
                tmux("send-keys", "-t", name, "j")
                time.sleep(0.1)
            wait_screen(name, f"snippet {gone_id}: score")
            tmux("send-keys", "-t", name, "e")
            shown = wait_screen(name, "Evict 1 scratchpad snippet(s)?")
            assert "Yes (y)" in shown
            tmux("send-keys", "-t", name, "y")
            wait_screen(name, "evicted 1 scratchpad snippet(s)")
            with SyncClient(d.socket) as c:
                left = c.call(names.SCRATCHPAD_CANDIDATES, "e2e-1")["candidates"]
            assert [x["snippet_id"] for x in left] == [keep["snippet"]["id"]]
            tmux("send-keys", "-t", name, "q")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
