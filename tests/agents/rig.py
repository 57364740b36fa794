"""Run the real coding agents (Claude Code 2.1.197, Codex 0.171.0, installed by ``.ci/run``
into ``build/agents``) against a fake LLM endpoint, with memman's hooks installed by
``memman hooks install`` into a HOME / CODEX_HOME of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agents.fake_apis import FakeAPI

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "build" / "agents" / "node_modules" / ".bin"
EXE = {"claude-code": "claude", "codex": "codex"}
API = {"claude-code": "messages", "codex": "responses"}
HEADER = "memman — "
MEMMAN = str(Path(sys.executable).parent / "memman")


def agent_exe(agent: str) -> Path:
    """The agent's CLI; absent: a skip in a dev run, a failure under CI (it must run there)."""
    path = BIN / EXE[agent]
    if not path.exists():
        why = (f"{path} is missing: .ci/run installs the pinned CLIs (npm install --prefix "
               "build/agents @anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0)")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return path


def strings(obj: Any) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in strings(v)]
    return []


def hook_texts(bodies: list[dict[str, Any]]) -> list[str]:
    """memman's injected texts as the model received them: from each header to its last
    line (a line of memman's starts with "- "), once each."""
    out: list[str] = []
    for s in (s for b in bodies for s in strings(b)):
        at = s.find(HEADER)
        while at >= 0:
            lines = s[at:].split("\n")
            got = [lines[0]]
            for ln in lines[1:]:
                if not ln.startswith("- "):
                    break
                got.append(ln)
            text = "\n".join(got) + "\n"
            if text not in out:
                out.append(text)
            at = s.find(HEADER, at + 1)
    return out


class Rig:
    """One agent, its HOME (and CODEX_HOME), the fake API and memman's socket."""

    def __init__(self, agent: str, root: Path, api: FakeAPI, socket: Path, data: Path) -> None:
        self.agent, self.root, self.api = agent, root, api
        self.exe = agent_exe(agent)
        self.home = root / "home"
        self.codex_home = root / "codex"
        self.home.mkdir(exist_ok=True)
        self.codex_home.mkdir(exist_ok=True)
        self.data = data
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("MEMMAN_", "ANTHROPIC_", "OPENAI_", "CLAUDE", "CODEX"))}
        self.env.pop("XDG_RUNTIME_DIR", None)
        self.env.update({
            "HOME": str(self.home), "CODEX_HOME": str(self.codex_home),
            "MEMMAN_SOCKET": str(socket), "MEMMAN_DATA_DIR": str(data),
            "MEMMAN_CONFIG": str(root / "no-config.toml"),
            "ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1", "OPENAI_API_KEY": "dummy",
        })
        (self.codex_home / "config.toml").write_text(
            'model = "gpt-5"\nmodel_provider = "fake"\n\n[model_providers.fake]\n'
            f'name = "fake"\nbase_url = "{api.url}/v1"\nwire_api = "responses"\n'
            'env_key = "OPENAI_API_KEY"\n\n[features]\nplugins = false\nremote_plugin = false\n')

    def project(self, name: str, git: bool = True) -> Path:
        d = self.root / name
        d.mkdir(exist_ok=True)
        if git:
            (d / ".git").mkdir(exist_ok=True)  # a git root is a folder with .git
        return d

    def memman(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([MEMMAN, *args], env=self.env, capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)

    def settings(self) -> Path:
        if self.agent == "claude-code":
            return self.home / ".claude" / "settings.json"
        return self.codex_home / "hooks.json"

    def ask(self, prompt: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str],
                                                   list[dict[str, Any]]]:
        """One conversation; the answer and the request bodies the fake received for it."""
        since = len(self.api.bodies)
        if self.agent == "claude-code":
            cmd = [str(self.exe), "-p", prompt]
        else:
            cmd = [str(self.exe), "exec", "--skip-git-repo-check",
                   "--dangerously-bypass-hook-trust", prompt]
        r = subprocess.run(cmd, cwd=cwd, env=self.env, capture_output=True, text=True,
                           timeout=180, stdin=subprocess.DEVNULL)
        bodies = list(self.api.bodies[since:])
        return r, bodies

    def injected_lengths(self) -> list[int]:
        """The length of every text memman printed, from ``hooks.log``."""
        log = self.data / "hooks.log"
        if not log.exists():
            return []
        out = []
        for line in log.read_text().splitlines():
            if ": injected " in line:
                out.append(int(line.split(": injected ", 1)[1].split(" ", 1)[0]))
        return out


def body_text(bodies: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(b, ensure_ascii=False) for b in bodies)
