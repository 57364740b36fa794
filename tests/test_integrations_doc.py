"""The examples in docs/integrations.md and the README run as written: each Python block as a
script, the Claude Code command's server part and the Claude Desktop / Cursor JSON through the
MCP SDK's client — against a real daemon and an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from memman.sync_client import SyncClient
from tests.helpers import daemon_env, daemon_process
from tests.llm_server import LLMServer
from tests.test_openai_agents import scripted

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "integrations.md"
README = ROOT / "README.md"
BIN = str(Path(sys.executable).parent)


def blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(), re.S | re.M)


def one(path: Path, lang: str, marker: str) -> str:
    found = [b for b in blocks(path, lang) if marker in b]
    assert len(found) == 1, f"{path.name}: expected one {lang} block with {marker!r}"
    return found[0]


@pytest.fixture
def env_and_daemon(tmp_path: Path):
    with daemon_process() as dp, LLMServer() as llm:
        llm.respond = scripted
        env = daemon_env(dp.root)
        env.update(MEMMAN_SOCKET=str(dp.socket), MEMMAN_DATA_DIR=str(dp.data_dir),
                   OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key",
                   PATH=BIN + os.pathsep + env.get("PATH", ""))
        yield env, dp


def run_block(code: str, env: dict[str, str], tmp: Path) -> str:
    script = tmp / "example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, cwd=tmp, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_mcp_python_example(env_and_daemon, tmp_path: Path) -> None:
    env, dp = env_and_daemon
    out = run_block(one(DOC, "python", "from mcp import Client"), env, tmp_path)
    assert "['add', 'context', 'forget', 'recall', 'remember', 'search', 'sessions']" in out
    assert "remembered snippet:notes#" in out
    assert "found the staging db listens on port 6543 in scratchpad of session notes" in out
    assert re.search(r"context \d+ tokens", out)
    with SyncClient(dp.socket) as mm:  # forgotten, and audited
        assert mm.scratchpad_read("notes")["snippets"] == []
        assert mm.audit_list({"session_id": "notes"})["records"][0]["client"] == "memman-mcp"


def test_agents_example_and_memman_show(env_and_daemon, tmp_path: Path) -> None:
    env, dp = env_and_daemon
    out = run_block(one(DOC, "python", "MemmanSession"), env, tmp_path)
    assert "turn 1: The tool says: Oslo: 21C and sunny." in out
    assert "turn 2: Earlier tool output: Oslo: 21C and sunny" in out
    assert "popped: {'role': 'assistant'" in out or "popped: {'id'" in out
    show = subprocess.run(["memman", "show", "weather-chat"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert show.returncode == 0 and "Oslo: 21C and sunny" in show.stdout
    with SyncClient(dp.socket) as mm:
        s = mm.session_get("weather-chat")
        assert s["user_id"] == "ana"
        assert [e["type"] for e in s["entries"]][:3] == ["message", "tool_call", "tool_result"]


def test_langchain_example(env_and_daemon, tmp_path: Path) -> None:
    env, dp = env_and_daemon
    out = run_block(one(DOC, "python", "MemmanChatMessageHistory"), env, tmp_path)
    assert "['What is 2+2?', '4.']" in out and "You asked what 2+2 is." in out
    with SyncClient(dp.socket) as mm:
        assert [e["content"] for e in mm.session_get("lc-chat")["entries"]] == [
            "What is 2+2?", "4.", "What did I ask?", "You asked what 2+2 is."]


@pytest.mark.parametrize("path", [DOC, README], ids=["integrations.md", "README"])
async def test_claude_code_and_desktop_setups_start_a_working_server(env_and_daemon,
                                                                     path: Path) -> None:
    """The docs' Claude Code line and Claude Desktop / Cursor JSON (their absolute path stands
    for wherever `memman mcp config` finds memman: here the venv's), and what `memman mcp
    config` prints, each start a working server; each server process is its own session."""
    env, dp = env_and_daemon
    block = one(path, "sh", "claude mcp add")
    line = next(ln for ln in block.splitlines() if ln.startswith("claude mcp add"))
    argv = shlex.split(line.split("#")[0])
    assert argv[:4] == ["claude", "mcp", "add", "memman"] and "--" in argv
    server_argv = argv[argv.index("--") + 1:]
    config = json.loads(one(path, "json", "mcpServers"))["mcpServers"]["memman"]
    assert Path(config["command"]).is_absolute() and Path(server_argv[0]).is_absolute()
    made = subprocess.run([shutil.which("memman", path=env["PATH"]), "mcp", "config",
                           "cursor", "--user", "ana", "--tenant", "acme"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    printed = json.loads(made.stdout)["mcpServers"]["memman"]
    assert Path(printed["command"]).is_absolute() and os.access(printed["command"], os.X_OK)
    for command, args, extra in [(server_argv[0], server_argv[1:], {}),
                                 (config["command"], config["args"], config.get("env", {})),
                                 (printed["command"], printed["args"], printed.get("env", {}))]:
        params = StdioServerParameters(command=shutil.which(Path(command).name,
                                                            path=env["PATH"]),
                                       args=args, env={**env, **extra})
        async with Client(params) as client:
            assert len((await client.list_tools()).tools) == 7
            res = await client.call_tool("remember", {"text": "blue", "key": "colour"})
            assert not res.is_error
            res = await client.call_tool("remember", {"text": "set up from the docs"})
            assert not res.is_error
    with SyncClient(dp.socket) as mm:
        assert mm.memory_recall("ana", "colour")["value"] == "blue"  # --user ana
        mine = [r for r in mm.session_list({"user_id": "ana", "tenant_id": "acme"})
                if r["session_id"].startswith("mcp-")]
        assert len(mine) >= 3  # one session per server process


def test_langgraph_example(env_and_daemon, tmp_path: Path) -> None:
    env, dp = env_and_daemon
    out = run_block(one(DOC, "python", "MemmanStore"), env, tmp_path)
    assert "Mirabelle" in out
    with SyncClient(dp.socket) as mm:
        keys = [r["key"] for r in mm.memory_list("ana", "semantic", {})["records"]]
        assert sum(k.startswith("langgraph:memories/ana:") for k in keys) == 2
