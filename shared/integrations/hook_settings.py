"""``memman hooks install|uninstall|config AGENT``: memman's hooks in a coding agent's settings.

- ``claude-code``: ``~/.claude/settings.json`` (``--project DIR``: ``DIR/.claude/settings.json``).
- ``codex``: ``$CODEX_HOME/hooks.json`` (``~/.codex`` when ``CODEX_HOME`` is unset); Codex
  0.171.0 reads it with no feature flag to turn on.

Both files hold ``{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type": "command",
"command": ...}]}]}}``. memman's hooks are the groups whose command runs ``memman hook AGENT``
(recognised by that, wherever memman lives): install replaces them with the current ones (so
installing twice is installing once) and leaves every other key and hook as it was; uninstall
removes only them. The command is the absolute path of this ``memman``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from memman.integrations.hooks import AGENTS

#: the events memman's hook acts on (PreToolUse and SessionEnd carry nothing it needs)
EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop")
#: events whose groups take a matcher (tool names): memman's matches every tool
MATCHED = ("PostToolUse",)
TIMEOUT_S = 30  #: the agent stops waiting for a hook after this (seconds)


def memman_command() -> str:
    """The absolute path of this ``memman`` (the console script beside this interpreter, else
    the one on PATH, else this interpreter running the CLI module)."""
    here = Path(sys.executable).parent / "memman"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here.absolute())
    found = shutil.which("memman")
    if found:
        return str(Path(found).absolute())
    return f"{shlex.quote(sys.executable)} -m memman_cli"


def settings_path(agent: str, project: str | None = None) -> Path:
    if agent == "claude-code":
        base = Path(project).absolute() if project else Path.home()
        return base / ".claude" / "settings.json"
    if project:
        raise ValueError("--project is for claude-code; codex reads $CODEX_HOME/hooks.json")
    home = os.environ.get("CODEX_HOME")
    return (Path(home) if home else Path.home() / ".codex") / "hooks.json"


def hooks_for(agent: str, command: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """memman's hook groups for ``agent``, by event."""
    cmd = f"{command or memman_command()} hook {agent}"
    out: dict[str, list[dict[str, Any]]] = {}
    for ev in EVENTS:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": cmd,
                                            "timeout": TIMEOUT_S}]}
        if ev in MATCHED:
            group = {"matcher": "*", **group}
        out[ev] = [group]
    return out


def is_memman(group: Any, agent: str) -> bool:
    """A hook group memman installed: every command in it runs ``memman hook AGENT``."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return False
    cmds = [h.get("command", "") for h in group["hooks"] if isinstance(h, dict)]
    return bool(cmds) and all(isinstance(c, str) and c.rstrip().endswith(f" hook {agent}")
                              and "memman" in c for c in cmds)


def read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); fix it or move it away, then "
                         "run this again (nothing was written)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def without_memman(data: dict[str, Any], agent: str) -> dict[str, Any]:
    """``data`` with memman's hook groups removed (events left empty are dropped)."""
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return dict(data)
    kept: dict[str, Any] = {}
    for ev, groups in hooks.items():
        if not isinstance(groups, list):
            kept[ev] = groups
            continue
        rest = [g for g in groups if not is_memman(g, agent)]
        if rest:
            kept[ev] = rest
    out = dict(data)
    if kept:
        out["hooks"] = kept
    else:
        out.pop("hooks", None)
    return out


def installed(data: dict[str, Any], agent: str, command: str | None = None) -> dict[str, Any]:
    out = without_memman(data, agent)
    hooks = dict(out.get("hooks") or {})
    for ev, groups in hooks_for(agent, command).items():
        hooks[ev] = [*(hooks.get(ev) or []), *groups]
    out["hooks"] = hooks
    return out


def write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".memman.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="memman hooks", description=(
        "Plug memman into a coding agent's hooks: every conversation is captured, and what "
        "earlier conversations of the project said reaches the model with no tool call."))
    sub = p.add_subparsers(dest="action", required=True)
    for name, doc in (("install", "merge memman's hooks into the agent's settings"),
                      ("uninstall", "remove memman's hooks (and only them)"),
                      ("config", "print memman's hooks without writing anything")):
        sp = sub.add_parser(name, help=doc, description=doc)
        sp.add_argument("agent", choices=AGENTS)
        if name != "config":
            sp.add_argument("--project", metavar="DIR", default=None,
                            help="claude-code: DIR/.claude/settings.json instead of "
                                 "~/.claude/settings.json")
    a = p.parse_args(argv)
    if a.action == "config":
        print(json.dumps({"hooks": hooks_for(a.agent)}, indent=2))
        return 0
    try:
        path = settings_path(a.agent, a.project)
        data = read(path)
    except (OSError, ValueError) as exc:
        print(f"memman hooks: {exc}", file=sys.stderr)
        return 1
    new = installed(data, a.agent) if a.action == "install" else without_memman(data, a.agent)
    if new == data:
        print(f"memman hooks: {path} already {'has' if a.action == 'install' else 'has no'} "
              f"memman's hooks for {a.agent}")
        return 0
    write(path, new)
    verb = "installed into" if a.action == "install" else "removed from"
    print(f"memman hooks: {a.agent} hooks {verb} {path}")
    return 0
