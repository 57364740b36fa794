"""End to end: a real daemon subprocess, the TUI in a real terminal (tmux), keys sent with
send-keys, the screen read with capture-pane, and the daemon asked what changed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest

from memman import SyncClient, names
from tests.helpers import daemon_env, daemon_process, stop_process

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name)


def wait_screen_any(name: str, texts: tuple[str, ...], polls: int = 300) -> str:
    """Poll the pane until one of ``texts`` shows (bounded polls, never asserting time)."""
    shown = ""
    for _ in range(polls):
        shown = screen(name)
        if any(t in shown for t in texts):
            return shown
        time.sleep(0.05)
    raise AssertionError(f"none of {texts!r} appeared on the screen:\n{shown}")


def wait_screen(name: str, text: str, polls: int = 300) -> str:
    """Poll the pane until ``text`` shows (bounded number of polls, never asserting time)."""
    return wait_screen_any(name, (text,), polls)


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
             f"env -u COLUMNS -u LINES {env} TERM=xterm-256color {sys.executable} -m memman_tui "
             f"--socket {d.socket} --refresh 0.25")
        # a tmux server shared with other sessions may size windows to its latest client
        subprocess.run(["tmux", "resize-window", "-t", name, "-x", "150", "-y", "44"],
                       capture_output=True)
        try:
            wait_screen(name, "e2e-1")
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "2 snippets")
            tmux("send-keys", "-t", name, "4")  # panel 4: the scratchpad
            # candidates are sorted best first; walk down until the status line names ours
            for _ in range(3):
                if f"snippet {gone_id}: score" in screen(name):
                    break
                tmux("send-keys", "-t", name, "j")
                time.sleep(0.1)
            wait_screen(name, f"snippet {gone_id}: score")
            tmux("send-keys", "-t", name, "e")
            shown = wait_screen(name, "Evict 1 scratchpad snippet(s) from e2e-1?")
            assert "A snippet the user wants gone." in shown  # the question names its text
            assert "Yes (y)" in shown
            tmux("send-keys", "-t", name, "y")
            wait_screen(name, "evicted 1 scratchpad snippet(s)")
            with SyncClient(d.socket) as c:
                left = c.call(names.SCRATCHPAD_CANDIDATES, "e2e-1")["candidates"]
            assert [x["snippet_id"] for x in left] == [keep["snippet"]["id"]]
            tmux("send-keys", "-t", name, "q")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def _state(c: SyncClient, sid: str) -> list[tuple]:
    s = c.session_get(sid)
    return [(e["id"], e["role"], e["content"], e["pinned"], e.get("summary_id"))
            for e in s["entries"]]


def test_unpin_acts_on_the_selected_row_only_while_the_session_changes_and_u_restores():
    with daemon_process() as d:
        sid = "e2e-2"
        with SyncClient(d.socket) as c:
            c.session_open(sid, {"user_id": "alice"})
            c.session_add(sid, {"type": "context", "role": "system", "pinned": True,
                                "content": "[SYSTEM: you are the e2e agent]"})
            ids = []
            for i in range(16):
                e = c.session_add(sid, {"role": "user" if i % 2 == 0 else "assistant",
                                        "content": f"step {i} of the plan"})
                ids.append(e["entry"]["id"] if "entry" in e else e["id"])
            target, other = ids[9], ids[11]
            c.session_pin(sid, target, True)
            c.session_pin(sid, other, True)
        name = f"mm-e2e-{d.proc.pid}-2"
        env = " ".join(f"{k}={v}" for k, v in daemon_env(d.root).items()
                       if k.startswith(("MEMMAN_", "TIKTOKEN_")))
        tmux("new-session", "-d", "-s", name, "-x", "150", "-y", "44",
             f"env -u COLUMNS -u LINES {env} TERM=xterm-256color {sys.executable} -m memman_tui "
             f"--socket {d.socket} --refresh 0.25")
        # a tmux server shared with other sessions may size windows to its latest client
        subprocess.run(["tmux", "resize-window", "-t", name, "-x", "150", "-y", "44"],
                       capture_output=True)
        try:
            wait_screen(name, sid)
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "context as sent")
            wait_screen(name, "step 15 of the plan")  # the rows are in: keys act on them
            # walk down the context panel until the status line names the target entry
            pattern = re.compile(rf"entries {target}\b")
            for n in range(2, 30):  # one key at a time, each waited for
                tmux("send-keys", "-t", name, "j")
                if pattern.search(wait_screen(name, f"message {n}:")):
                    break
            wait_screen_re(name, pattern)
            # the session changes under the selection: new entries and a compaction that
            # folds the rows above it (the target is pinned, so it stays)
            with SyncClient(d.socket) as c:
                for i in range(4):
                    c.session_add(sid, {"role": "user", "content": f"late message {i}"})
                c.call(names.SESSION_COMPACT, sid)
                before = _state(c, sid)
            assert any(e[4] is not None for e in before)  # something was folded
            wait_screen(name, "late message 3")  # the refill
            shown = wait_screen_re(name, pattern)  # still the selected row after the refill
            assert f"entries {target} " in shown or f"entries {target}," in shown, (target, shown)
            tmux("send-keys", "-t", name, "x")
            wait_screen(name, f"unpinned entry {target}")
            with SyncClient(d.socket) as c:
                after = _state(c, sid)
            changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
            assert len(before) == len(after)
            assert changed == [(next(e for e in before if e[0] == target),
                                next(e for e in after if e[0] == target))]
            assert next(e for e in after if e[0] == target)[3] is False
            assert next(e for e in after if e[0] == other)[3] is True
            tmux("send-keys", "-t", name, "u")
            wait_screen(name, "undid unpin")
            with SyncClient(d.socket) as c:
                assert _state(c, sid) == before
            tmux("send-keys", "-t", name, "q")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def wait_screen_re(name: str, pattern: re.Pattern[str], polls: int = 300) -> str:
    shown = ""
    for _ in range(polls):
        shown = screen(name)
        if pattern.search(shown):
            return shown
        time.sleep(0.05)
    raise AssertionError(f"{pattern.pattern!r} never appeared on the screen:\n{shown}")


def test_the_selection_stays_put_while_the_demo_runs_and_x_acts_on_it():
    """`make run`'s situation: demo agents write to the session every fraction of a second;
    the row the person selected stays selected (held when it leaves the context) and `x`
    pins that entry without pausing."""
    with daemon_process() as d:
        sid = "e2e-01"
        env = " ".join(f"{k}={v}" for k, v in daemon_env(d.root).items()
                       if k.startswith(("MEMMAN_", "TIKTOKEN_")))
        demo = subprocess.Popen([sys.executable, "-m", "memman_cli.demo", "--socket",
                                 str(d.socket), "--sessions", "1", "--prefix", "e2e",
                                 "--rate", "1", "--duration", "600", "--max-tokens", "1500"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=daemon_env(d.root))
        name = f"mm-e2e-{d.proc.pid}-3"
        try:
            with SyncClient(d.socket) as c:
                for _ in range(400):  # the demo's session exists and has a few entries
                    rows = {r["session_id"]: r for r in c.session_list()}
                    if sid in rows and rows[sid]["entries"] >= 12:
                        break
                    time.sleep(0.05)
                assert sid in rows, list(rows)
            tmux("new-session", "-d", "-s", name, "-x", "150", "-y", "44",
                 f"env -u COLUMNS -u LINES {env} TERM=xterm-256color {sys.executable} -m "
                 f"memman_tui --socket {d.socket} --refresh 0.25")
            subprocess.run(["tmux", "resize-window", "-t", name, "-x", "150", "-y", "44"],
                           capture_output=True)
            wait_screen(name, sid)
            tmux("send-keys", "-t", name, "Enter")
            wait_screen(name, "context as sent")
            # select a message row that is one entry: walk down until the line names one
            pattern = re.compile(r"message (\d+): (message|tool_call|tool_result), "
                                 r"(kept|omitted|summarized), entries (\d+),")
            target = None
            for _ in range(8):
                tmux("send-keys", "-t", name, "j")
                m = None
                for _ in range(40):
                    m = pattern.search(screen(name))
                    if m:
                        break
                    time.sleep(0.05)
                if m:
                    target = int(m.group(4))
                    break
            assert target is not None, screen(name)
            with SyncClient(d.socket) as c:
                def count() -> int:
                    return next(r["entries"] for r in c.session_list() if r["session_id"] == sid)

                start = count()
                # the demo keeps writing: wait for many updates under the selection
                for _ in range(600):
                    if count() >= start + 12:
                        break
                    time.sleep(0.05)
                assert count() >= start + 12
            shown = screen(name)
            # still the same entry: named by the status line (kept, or held after it left)
            assert (f"entries {target}," in shown or "held here while you act" in shown), shown
            assert "nothing is selected" not in shown
            tmux("send-keys", "-t", name, "x")
            # the toast says it (for a few seconds: a loaded machine's polls can miss it), and
            # the selected row's status line then names the entry as pinned
            wait_screen_any(name, (f"pinned entry {target}", f"pinned, entries {target},"))
            with SyncClient(d.socket) as c:
                entries = c.session_get(sid, {"limit": 400})["entries"]
            assert [e["pinned"] for e in entries if e["id"] == target] == [True]
            tmux("send-keys", "-t", name, "q")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
            stop_process(demo)
