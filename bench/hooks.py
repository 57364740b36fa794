"""``memman hook``: what each hook costs the agent, and what its injected text carries.

1. Latency: each event's hook process (``memman hook claude-code``, the event on stdin, the real
   daemon on a real socket, a project with earlier conversations), end to end as the agent
   waits for it, p50 / p95 over N runs, beside ``python -c pass`` from the same interpreter.
2. What the text carries: a scripted coding project of 14 earlier conversations (facts stated
   once among chit-chat, long tool output and code; two facts corrected later), then one new
   conversation per fact asking about it in other words. memman's injection (the start recap
   and the prompt's recall, each under ``[hooks] max_chars``) against a baseline that injects
   the project's newest lines up to the same cap: how many asked facts the text carries, and
   for corrected facts whether it carries the current value (and the stale one alone).

    .venv/bin/python bench/hooks.py [--runs N] [--cap CHARS]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MEMMAN = str(Path(sys.executable).parent / "memman")

# (statement, question, the answer's token); "corrected" facts say so
FACTS: list[tuple[str, str, str]] = [
    ("The integration tests need the fixture server on port 7311 before they start.",
     "What has to be running before the integration tests, and where?", "7311"),
    ("We pin the Postgres image at 15.4-alpine; 16 broke the citext migration.",
     "Which database container version do we use?", "15.4-alpine"),
    ("Releases are tagged from the branch named train/amber, never from main.",
     "Where do release tags come from?", "train/amber"),
    ("The flaky test is test_ledger_rollover; it fails when TZ is not UTC.",
     "Which test flakes, and why?", "test_ledger_rollover"),
    ("Our API rate limit for partners is 480 requests per minute.",
     "How many calls a minute can a partner make?", "480"),
    ("Feature flags live in config/flags.yaml and ship with the deploy.",
     "Where are the feature toggles kept?", "config/flags.yaml"),
    ("The S3 bucket for uploads is acme-uploads-euw3 in eu-west-3.",
     "Which storage bucket takes user uploads?", "acme-uploads-euw3"),
    ("Code review needs two approvals, one of them from the owners of payments/.",
     "How many approvals does a merge request need?", "two approvals"),
    ("The staging deploy uses kamal with the host list in deploy/staging.yml.",
     "How do we ship to staging?", "deploy/staging.yml"),
    ("Sentry's project slug for the worker is acme-worker-py.",
     "What is the error tracker's project for the background worker?", "acme-worker-py"),
]
CORRECTIONS: list[tuple[str, str, str, str]] = [
    # (first statement, later correction, question, current token; the stale token)
    ("The cache TTL for product pages is 300 seconds.",
     "Correction: we changed the product page cache TTL to 90 seconds yesterday.",
     "How long are product pages cached?", "90 seconds"),
    ("The on-call rotation hands over on Mondays at 10:00.",
     "Update: the on-call handover moved to Tuesdays at 09:00.",
     "When does on-call hand over?", "Tuesdays"),
]
STALE = {"How long are product pages cached?": "300 seconds",
         "When does on-call hand over?": "Mondays"}
CHATTER = ["Thanks, that looks right.", "Let me check the logs first.",
           "Can you tidy the imports in that file?", "Run the linter again please.",
           "Good, commit it with a short message."]
CODE = ("def rollover(ledger, day):\n    for acct in ledger.accounts:\n        acct.close(day)\n"
        "        acct.open(day + 1)\n    return ledger\n") * 6


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


class Bench:
    def __init__(self, root: Path, cap: int) -> None:
        self.root = root
        self.sock = root / "s" / "m.sock"
        self.data = root / "data"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MEMMAN_")}
        # only the paths: the hook's short path (no config file, defaults), as most users run it
        self.env.update({"MEMMAN_SOCKET": str(self.sock), "MEMMAN_DATA_DIR": str(self.data),
                         "MEMMAN_CONFIG": str(root / "none.toml")})
        if cap != 9000:
            self.env["MEMMAN_HOOKS_MAX_CHARS"] = str(cap)
        self.cap = cap
        self.proj = root / "shop"
        (self.proj / ".git").mkdir(parents=True)
        self.daemon: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.root / "daemon.log", "ab")  # noqa: SIM115 - kept open for the process
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "memman_daemon", "--socket", str(self.sock), "--data-dir",
             str(self.data)], stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(self.sock))
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the daemon did not start")

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.terminate()
            self.daemon.wait(30)

    def hook(self, event: dict[str, Any]) -> tuple[str, float]:
        t = time.perf_counter()
        r = subprocess.run([MEMMAN, "hook", "claude-code"], input=json.dumps(event),
                           env=self.env, capture_output=True, text=True)
        return r.stdout, time.perf_counter() - t

    def conversation(self, turns: list[tuple[str, str | None]]) -> None:
        """turns: (user prompt, a tool output or None)."""
        sid = str(uuid.uuid4())
        base = {"session_id": sid, "cwd": str(self.proj)}
        self.hook({**base, "hook_event_name": "SessionStart", "source": "startup"})
        for prompt, tool in turns:
            self.hook({**base, "hook_event_name": "UserPromptSubmit", "prompt": prompt})
            if tool is not None:
                self.hook({**base, "hook_event_name": "PostToolUse", "tool_name": "Bash",
                           "tool_input": {"command": "pytest -x"},
                           "tool_response": {"stdout": tool}, "tool_use_id": f"t{uuid.uuid4()}"})
            self.hook({**base, "hook_event_name": "Stop",
                       "last_assistant_message": "Done. " + CHATTER[len(prompt) % 5]})

    def seed(self) -> None:
        log_text = "\n".join(f"PASSED tests/unit/test_mod_{i}.py::test_case_{i}"
                             for i in range(400))
        for i, (fact, _q, _a) in enumerate(FACTS):
            turns: list[tuple[str, str | None]] = [(CHATTER[i % 5], None),
                                                   (fact, None),
                                                   ("Run the test suite.", log_text),
                                                   ("Here is the function:\n" + CODE, None)]
            self.conversation(turns)
            if i in (2, 6):  # a first statement, corrected in a later conversation
                j = 0 if i == 2 else 1
                self.conversation([(CORRECTIONS[j][0], None), ("Run the test suite.", log_text)])
        for _first, fix, _q, _a in CORRECTIONS:
            self.conversation([(fix, None), (CHATTER[3], None)])

    def sessions(self) -> list[dict[str, Any]]:
        r = subprocess.run([MEMMAN, "sessions", "--json"], env=self.env, capture_output=True,
                           text=True, check=True)
        return json.loads(r.stdout)

    def newest_lines(self) -> str:
        """The baseline: the project's newest lines (every entry of its conversations, newest
        first, as memman's lines are written) up to the same cap."""
        sys.path.insert(0, str(ROOT))
        from memman.integrations.hooks import day, fit, one_line, source_label
        from memman.sync_client import SyncClient

        lines: list[tuple[float, str]] = []
        with SyncClient(self.sock) as c:
            for o in self.sessions():
                if o.get("project") != str(self.proj):
                    continue
                for e in c.session_get(o["session_id"])["entries"]:
                    text = e["content"] or json.dumps(e.get("tool_calls") or "")
                    lines.append((e["created_at"], f"- {day(e['created_at'])} "
                                  f"({source_label(o['session_id'])}) {e['role']}: "
                                  f"{one_line(text)}"))
        lines.sort(key=lambda x: -x[0])
        return fit("Recent lines of this project (newest first):", [ln for _, ln in lines],
                   self.cap)

    def ask(self, question: str) -> tuple[str, dict[str, float]]:
        sid = str(uuid.uuid4())
        base = {"session_id": sid, "cwd": str(self.proj)}
        start, t1 = self.hook({**base, "hook_event_name": "SessionStart", "source": "startup"})
        prompt, t2 = self.hook({**base, "hook_event_name": "UserPromptSubmit",
                                "prompt": question})
        tool, t3 = self.hook({**base, "hook_event_name": "PostToolUse", "tool_name": "Read",
                              "tool_input": {"file": "README.md"},
                              "tool_response": "# shop\n" * 40, "tool_use_id": f"t{sid}"})
        stop, t4 = self.hook({**base, "hook_event_name": "Stop",
                              "last_assistant_message": "It is in the notes."})
        assert len(start) < self.cap and len(prompt) < self.cap
        return start + prompt, {"SessionStart": t1, "UserPromptSubmit": t2, "PostToolUse": t3,
                                "Stop": t4}


def bare(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30, help="hook processes timed per event")
    ap.add_argument("--cap", type=int, default=9000, help="[hooks] max_chars")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mmhb", dir="/tmp"))
    b = Bench(root, a.cap)
    try:
        b.start()
        t0 = time.perf_counter()
        b.seed()
        seeded = time.perf_counter() - t0
        baseline_text = b.newest_lines()
        questions = [(q, ans) for _f, q, ans in FACTS] + [(q, cur) for _a, _b, q, cur
                                                          in CORRECTIONS]
        carried = {"memman": 0, "newest lines": 0}
        current = {"memman": 0, "newest lines": 0}
        stale_only = {"memman": 0, "newest lines": 0}
        times: dict[str, list[float]] = {}
        sizes: list[int] = []
        missed: list[str] = []
        for q, token in questions:
            text, t = b.ask(q)
            if token not in text:
                missed.append(q)
            sizes.append(len(text))
            for k, v in t.items():
                times.setdefault(k, []).append(v)
            for name, got in (("memman", text), ("newest lines", baseline_text)):
                if token in got:
                    carried[name] += 1
                if q in STALE:
                    current[name] += token in got
                    stale_only[name] += STALE[q] in got and token not in got
        # latency on the seeded project, each round interleaved with the bare interpreter and
        # a hook that needs no daemon (SessionEnd), so that the machine's load hits all alike
        times = {"bare": [], "SessionEnd (no daemon call)": []}
        for i in range(a.runs):
            times["bare"] += bare(1)
            times["SessionEnd (no daemon call)"].append(b.hook(
                {"hook_event_name": "SessionEnd", "session_id": "x", "cwd": str(b.proj)})[1])
            _text, t = b.ask(questions[i % len(questions)][0])
            for k, v in t.items():
                times.setdefault(k, []).append(v)
        base = times.pop("bare")
    finally:
        b.stop()
        shutil.rmtree(root, ignore_errors=True)
    bp50, bp95 = percentile(base, 0.5) * 1000, percentile(base, 0.95) * 1000
    load = os.getloadavg()[0]
    print(f"## Hook latency (memman hook claude-code, end to end; {a.runs} runs per event; "
          f"seeding {seeded:.1f}s; load average {load:.1f} on {os.cpu_count()} cores)\n")
    print("| process | p50 ms | p95 ms | p95 over bare ms |")
    print("|---|---:|---:|---:|")
    print(f"| `python -c pass` (bare) | {bp50:.0f} | {bp95:.0f} | - |")
    for k, v in times.items():
        p50, p95 = percentile(v, 0.5) * 1000, percentile(v, 0.95) * 1000
        print(f"| {k} | {p50:.0f} | {p95:.0f} | {p95 - bp95:+.0f} |")
    n = len(questions)
    print(f"\n## What the injected text carries ({n} questions, each in a new conversation, "
          f"after 14 earlier conversations; cap {a.cap:,} characters)\n")
    print("| injection | asked facts carried | corrected: current value | corrected: stale "
          "value only | largest text (chars) |")
    print("|---|---:|---:|---:|---:|")
    print(f"| memman (start recap + prompt recall) | {carried['memman']}/{n} | "
          f"{current['memman']}/{len(STALE)} | {stale_only['memman']}/{len(STALE)} | "
          f"{max(sizes):,} |")
    print(f"| newest lines up to the cap | {carried['newest lines']}/{n} | "
          f"{current['newest lines']}/{len(STALE)} | {stale_only['newest lines']}/{len(STALE)} "
          f"| {len(baseline_text):,} |")
    if missed:
        print(f"\nmemman missed: {'; '.join(missed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
