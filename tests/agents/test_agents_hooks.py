"""memman behind the real Claude Code and Codex CLIs: hooks installed by ``memman hooks
install``, a fake LLM endpoint on loopback logging what the model would receive, the real
daemon on a real socket. One daemon per agent, one scenario:

1. a conversation in project P1 states a fact; 2. a new conversation in P1 asks about it: the
body the model receives carries it, injected by memman; 3. a conversation in project P2 asks
the same: its body does not; 4. a correction in a later conversation wins; 5. every injected
text is under the cap and arrived whole; 6. with the daemon stopped and its socket
unreachable the agent still answers, and the model sees no hook error; 7. installing twice
equals installing once, and uninstall leaves the other hooks.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.agents.fake_apis import FakeAPI
from tests.agents.rig import API, HEADER, MEMMAN, Rig, agent_exe, body_text, hook_texts
from tests.helpers import daemon_process, short_tmpdir, stop_process

pytestmark = pytest.mark.slow

FACT = "Remember this: the staging database of this service listens on port 6543."
QUESTION = "Which port does the staging database listen on?"
CORRECTION = "Correction: the staging database moved to port 7654 last week."
OTHER_HOOK = {"matcher": "", "hooks": [{"type": "command", "command": "true # someone else's"}]}
CAP = 9000  # [hooks] max_chars, the default


def memman_hook_processes(agent: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if f"hook {agent}" in ln and "memman" in ln]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_agent_remembers_through_hooks(agent: str) -> None:
    agent_exe(agent)  # skip (dev) or fail (CI) before starting anything
    root = short_tmpdir("ag")
    with FakeAPI(API[agent]) as api, daemon_process(root) as dp:
        rig = Rig(agent, root, api, dp.socket, dp.data_dir)
        # someone else's hook is already there; memman's joins it
        settings = rig.settings()
        settings.parent.mkdir(parents=True, exist_ok=True)
        # (Codex's hooks.json holds hooks only: another key there turns every hook off)
        other = {"theme": "dark"} if agent == "claude-code" else {}
        settings.write_text(json.dumps({"hooks": {"Stop": [OTHER_HOOK]}, **other}))
        r = rig.memman("hooks", "install", agent)
        assert r.returncode == 0, r.stderr
        once = settings.read_text()
        assert rig.memman("hooks", "install", agent).returncode == 0
        assert settings.read_text() == once  # twice is once
        installed = json.loads(once)
        assert installed.get("theme") == other.get("theme")
        assert OTHER_HOOK in installed["hooks"]["Stop"]
        assert all(f"{MEMMAN} hook {agent}" in json.dumps(installed["hooks"][ev])
                   for ev in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"))

        p1, p2 = rig.project("p1"), rig.project("p2")
        sub = p1 / "src"
        sub.mkdir()
        r, bodies = rig.ask(FACT, p1)
        assert r.returncode == 0 and "OK." in r.stdout, r.stderr[-2000:]

        # 2. a new conversation in P1 (from a sub-folder: the project is the git root)
        r, bodies = rig.ask(QUESTION, sub)
        assert r.returncode == 0, r.stderr[-2000:]
        texts = hook_texts(bodies)
        assert any("6543" in t for t in texts), body_text(bodies)[-3000:]
        assert "6543" not in QUESTION
        # the same with the start recap turned off: the per-prompt recall brings it
        rig.env["MEMMAN_HOOKS_INJECT_START"] = "false"
        r, bodies = rig.ask(QUESTION, p1)
        assert r.returncode == 0, r.stderr[-2000:]
        texts = hook_texts(bodies)
        assert [t for t in texts if "bears on this prompt" in t and "6543" in t], texts
        assert not [t for t in texts if "recap" in t]
        del rig.env["MEMMAN_HOOKS_INJECT_START"]

        # 3. another project: nothing of P1's
        r, bodies = rig.ask(QUESTION, p2)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "6543" not in body_text(bodies)
        assert not any("6543" in t for t in hook_texts(bodies))

        # 4. a later correction wins
        r, _ = rig.ask(CORRECTION, p1)
        assert r.returncode == 0, r.stderr[-2000:]
        r, bodies = rig.ask(QUESTION, p1)
        assert r.returncode == 0, r.stderr[-2000:]
        texts = hook_texts(bodies)
        joined = "\n".join(texts)
        assert "7654" in joined, joined
        for t in texts:  # the recap: newest first
            if "7654" in t and "6543" in t:
                assert t.index("7654") < t.index("6543"), t
        rig.env["MEMMAN_HOOKS_INJECT_START"] = "false"
        r, bodies = rig.ask(QUESTION, p1)
        del rig.env["MEMMAN_HOOKS_INJECT_START"]
        assert r.returncode == 0, r.stderr[-2000:]
        prompt_texts = [t for t in hook_texts(bodies) if "bears on this prompt" in t]
        # the per-prompt recall: the correction, and not the value it replaced
        assert prompt_texts and all("7654" in t and "6543" not in t for t in prompt_texts), \
            prompt_texts

        # 5. every injected text is under the cap, and arrived whole (its length as printed)
        lengths = rig.injected_lengths()
        assert lengths and all(n < CAP for n in lengths)
        seen = [t for b in api.bodies for t in hook_texts([b])]
        assert seen
        for t in seen:
            assert len(t) < CAP and t.startswith(HEADER)
            assert len(t) in lengths, (len(t), lengths)

        # the conversations are memman sessions, with their agent and project
        r = rig.memman("sessions", "--json")
        assert r.returncode == 0, r.stderr
        rows = [s for s in json.loads(r.stdout) if s.get("agent") == agent]
        assert len(rows) == 7
        assert {s["project"] for s in rows} == {str(p1.resolve()), str(p2.resolve())}
        assert all(s["session_id"].startswith(agent + "-") for s in rows)
        human = rig.memman("sessions").stdout
        assert f"{agent} in {p1.resolve()}" in human

        # 6. the daemon stopped, its socket unreachable: the agent still answers
        stop_process(dp.proc)
        blocker = root / "blocker"
        blocker.write_text("not a directory")
        rig.env["MEMMAN_SOCKET"] = str(blocker / "memman.sock")
        since = len(api.bodies)
        r, bodies = rig.ask(QUESTION, p1)
        assert r.returncode == 0 and "OK." in r.stdout, r.stderr[-2000:]
        assert bodies
        text = body_text(api.bodies[since:])
        assert HEADER not in text and "Traceback" not in text and "memman" not in text
        assert "hook error" not in (r.stdout + r.stderr).lower()
        log = (dp.data_dir / "hooks.log").read_text()
        assert "gave up" in log
        assert memman_hook_processes(agent) == []

        # 7. uninstall removes memman's hooks only
        assert rig.memman("hooks", "uninstall", agent).returncode == 0
        left = json.loads(settings.read_text())
        assert left == {"hooks": {"Stop": [OTHER_HOOK]}, **other}
    if os.environ.get("MEMMAN_KEEP_TMP") is None:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
