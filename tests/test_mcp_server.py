"""`memman mcp` driven by the MCP SDK's own client, over stdio and over streamable HTTP on
loopback, against a real daemon (a subprocess on a real socket and SQLite file)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from memman.integrations.mcp_server import Settings, daemon_answers, parse_http
from memman.sync_client import SyncClient
from tests.helpers import daemon_env, daemon_process, short_tmpdir, stop_process

TOOLS = {"remember", "recall", "search", "forget", "context", "add", "sessions"}
MEMMAN = str(Path(sys.executable).with_name("memman"))


def _env(root: Path, sock: Path, **extra: str) -> dict[str, str]:
    env = daemon_env(root)
    env["MEMMAN_SOCKET"] = str(sock)
    env["MEMMAN_DATA_DIR"] = str(root / "data")
    env.update(extra)
    return env


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content or json.loads(result.content[0].text)


@contextlib.asynccontextmanager
async def stdio_client(root: Path, sock: Path, *args: str,
                       **env: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=MEMMAN, args=["mcp", *args],
                                   env=_env(root, sock, **env))
    async with Client(params) as client:
        yield client


@contextlib.contextmanager
def http_server(root: Path, sock: Path, *args: str) -> Iterator[str]:
    """`memman mcp --http 127.0.0.1:0`; yields the URL it prints."""
    proc = subprocess.Popen([MEMMAN, "mcp", "--http", "127.0.0.1:0", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=_env(root, sock))
    url: list[str] = []
    lines: list[str] = []
    found = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if m := re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line):
                url.append(m.group(1))
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        found.wait(60)
        assert url, f"memman mcp --http printed no URL: {''.join(lines)}"
        yield url[0]
    finally:
        stop_process(proc)


async def exercise(client: Client, sock: Path) -> None:
    """The checks both transports must pass."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert len(t.description or "") > 40 and t.input_schema["type"] == "object"
    assert tools["remember"].input_schema["required"] == ["text"]
    assert "key" in tools["remember"].input_schema["properties"]

    # remember, then search finds it (with where it came from), across sources
    note = _data(await client.call_tool("remember", {"text": "the staging db is on port 6543"}))
    assert note["stored_as"] == "snippet" and note["id"].startswith("snippet:agent1#")
    pref = _data(await client.call_tool("remember", {"text": "vim", "key": "editor"}))
    assert pref["stored_as"] == "preference"
    rule = _data(await client.call_tool("remember", {
        "text": "x", "condition": "the user asks about staging", "action": "mention port 6543"}))
    assert rule["stored_as"] == "rule"
    with SyncClient(sock) as mm:
        mm.docs_add("acme", {"doc_id": "runbook", "title": "Runbook",
                             "content": "Staging deploys go through the blue pipeline."})
    found = _data(await client.call_tool("search", {"query": "staging port 6543"}))
    ids = [h["id"] for h in found["hits"]]
    assert note["id"] in ids and rule["id"] in ids and "doc:runbook" in ids
    assert ids[0] == note["id"]  # each source's best, ordered by the query words they hold
    assert ids.index(rule["id"]) < ids.index("doc:runbook")
    by_id = {h["id"]: h for h in found["hits"]}
    assert "scratchpad of session agent1" in by_id[note["id"]]["source"]
    assert "business document 'Runbook' of tenant acme" in by_id["doc:runbook"]["source"]
    assert _data(await client.call_tool("recall", {"key": "editor"}))["value"] == "vim"

    # forget removes it
    gone = _data(await client.call_tool("forget", {"id": note["id"]}))
    assert gone["forgotten"] == note["id"]
    found = _data(await client.call_tool("search", {"query": "staging port 6543"}))
    assert note["id"] not in [h["id"] for h in found["hits"]]
    _data(await client.call_tool("forget", {"id": pref["id"]}))
    assert _data(await client.call_tool("recall", {"key": "editor"}))["found"] is False

    # add entries (a tool call with its result), then context returns a budgeted window
    for i in range(30):
        _data(await client.call_tool("add", {"content": f"turn {i}: " + "words " * 40,
                                             "role": "user" if i % 2 else "assistant"}))
    _data(await client.call_tool("add", {"content": "", "type": "tool_call", "tool_calls": [
        {"id": "c1", "function": {"name": "lookup", "arguments": "{\"q\": \"port\"}"}}]}))
    added = _data(await client.call_tool("add", {"content": "6543", "type": "tool_result",
                                                 "tool_call_id": "c1"}))
    assert added["id"].startswith("entry:agent1#")
    full = _data(await client.call_tool("context", {"format": "messages"}))
    small = _data(await client.call_tool("context", {"max_tokens": 400, "format": "messages"}))
    assert small["budget"] == 400 and small["tokens"] <= 400 < full["tokens"]
    assert len(small["messages"]) < len(full["messages"])
    roles = [m["role"] for m in small["messages"]]
    assert roles[-1] == "tool" and small["messages"][-2]["tool_calls"][0]["id"] == "c1"
    text = _data(await client.call_tool("context", {"max_tokens": 400}))["text"]
    assert "-> calls lookup" in text and "[result of c1]" in text
    sessions = _data(await client.call_tool("sessions", {}))["sessions"]
    row = next(s for s in sessions if s["session_id"] == "agent1")
    assert row["user_id"] == "ana" and row["tenant_id"] == "acme" and row["active_tokens"] > 400

    # forget one session entry by its id
    _data(await client.call_tool("forget", {"id": added["id"]}))
    after = _data(await client.call_tool("context", {"format": "messages"}))
    assert after["messages"][-1]["role"] != "tool"

    # a bad argument is a tool error, and the next call still works
    bad = await client.call_tool("context", {"max_tokens": "lots"})
    assert bad.is_error and "max_tokens" in bad.content[0].text
    bad = await client.call_tool("forget", {"id": "memory:999999"})
    assert bad.is_error and "memman error -32001" in bad.content[0].text
    bad = await client.call_tool("add", {"content": "x", "role": "tool"})
    assert bad.is_error and "tool_call_id" in bad.content[0].text
    bad = await client.call_tool("forget", {"id": "nonsense"})
    assert bad.is_error and "memory:12" in bad.content[0].text
    assert _data(await client.call_tool("recall", {"key": "nothing"}))["found"] is False

    # per-call overrides
    other = _data(await client.call_tool("remember", {"text": "tea", "key": "drink",
                                                      "user_id": "bob"}))
    assert other["user_id"] == "bob"
    assert _data(await client.call_tool("recall", {"key": "drink"}))["found"] is False
    assert _data(await client.call_tool("recall", {"key": "drink", "user_id": "bob"}))[
        "value"] == "tea"

    # resources
    report = await client.read_resource("memman://session/agent1")
    assert "agent1" in report.contents[0].text
    mem = (await client.read_resource("memman://user/bob/memory")).contents[0].text
    assert "drink: tea" in mem
    agent_md = (await client.read_resource("memman://tenant/acme/agent.md")).contents[0].text
    assert "agent.md" in agent_md
    with pytest.raises(MCPError, match="session 'nope' not found"):
        await client.read_resource("memman://session/nope")
    assert "agent1" in (await client.read_resource("memman://session/agent1")).contents[0].text
    templates = {t.uri_template for t in (await client.list_resource_templates())
                 .resource_templates}
    assert templates == {"memman://session/{id}", "memman://user/{id}/memory",
                         "memman://tenant/{id}/agent.md"}


async def test_stdio_against_a_real_daemon() -> None:
    with daemon_process() as dp:
        async with stdio_client(dp.root, dp.socket, "--session", "agent1", "--tenant", "acme",
                                MEMMAN_MCP_USER="ana") as client:
            await exercise(client, dp.socket)
        with SyncClient(dp.socket) as mm:  # what the MCP server did is memman's own state
            audit = mm.audit_list({"session_id": "agent1"})["records"]
            assert {r["client"] for r in audit} == {"memman-mcp"}
            assert mm.session_get("agent1")["user_id"] == "ana"


async def test_streamable_http_on_loopback() -> None:
    with daemon_process() as dp, http_server(dp.root, dp.socket, "--session", "agent1",
                                             "--tenant", "acme", "--user", "ana") as url:
        async with Client(url) as client:
            await exercise(client, dp.socket)
        async with Client(url) as client:  # a second client of the same server
            assert len((await client.list_tools()).tools) == len(TOOLS)


async def test_starts_a_daemon_when_none_runs_unless_no_start() -> None:
    root = short_tmpdir()
    sock = root / "s" / "memman.sock"
    sock.parent.mkdir(mode=0o700)
    async with stdio_client(root, sock, "--no-start") as client:  # serves, and says why
        assert len((await client.list_tools()).tools) == len(TOOLS)
        res = await client.call_tool("recall", {"key": "k"})
        assert res.is_error and "not available" in res.content[0].text
        assert "--no-start" in res.content[0].text and str(sock) in res.content[0].text
    assert not sock.exists()
    pids: list[int] = []
    try:
        async with stdio_client(root, sock) as client:
            out = _data(await client.call_tool("remember", {"text": "kept", "key": "k"}))
            assert out["stored_as"] == "preference"
            with SyncClient(sock) as mm:
                pids.append(mm.stats()["pid"])
            # the daemon dies hard: the next call starts another and the answered write is there
            os.kill(pids[0], signal.SIGKILL)
            async with asyncio.timeout(30):
                while daemon_answers(sock):
                    await asyncio.sleep(0.05)
            assert _data(await client.call_tool("recall", {"key": "k"}))["value"] == "kept"
        with SyncClient(sock) as mm:  # the daemon it started keeps running in the background
            pids.append(mm.stats()["pid"])
            assert mm.memory_recall("default", "k")["value"] == "kept"
        assert pids[0] != pids[1]
        assert (root / "data" / "daemon.log").exists()
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        async with asyncio.timeout(30):
            while daemon_answers(sock):
                await asyncio.sleep(0.05)
        shutil.rmtree(root, ignore_errors=True)


def test_settings_from_flags_and_environment() -> None:
    s = Settings.from_args([], env={"MEMMAN_MCP_SESSION": "s9", "MEMMAN_MCP_USER": "u9",
                                    "MEMMAN_MCP_TENANT": "t9", "MEMMAN_MCP_HTTP": "8765",
                                    "MEMMAN_MCP_NO_START": "1"})
    assert (s.session, s.user, s.tenant, s.http, s.no_start) == (
        "s9", "u9", "t9", ("127.0.0.1", 8765), True)
    s = Settings.from_args(["--session", "a", "--user", "b", "--tenant", "c", "--http",
                            "[::1]:9000"], env={"MEMMAN_MCP_SESSION": "s9"})
    assert (s.session, s.user, s.tenant, s.http, s.no_start) == ("a", "b", "c", ("::1", 9000),
                                                                 False)
    d = Settings.from_args([], env={})
    assert (d.session, d.user, d.tenant, d.http, d.no_start) == (None, "default", "default",
                                                                 None, False)
    assert parse_http("localhost:1") == ("localhost", 1)
    for bad in ("0.0.0.0:80", "example.com:80", "10.1.2.3:5", "abc", "70000"):
        with pytest.raises(ValueError):
            parse_http(bad)


def test_http_refuses_other_hosts_and_a_busy_port() -> None:
    with daemon_process() as dp:
        env = _env(dp.root, dp.socket)
        out = subprocess.run([MEMMAN, "mcp", "--http", "0.0.0.0:8080"], capture_output=True,
                             text=True, env=env, timeout=60)
        assert out.returncode == 2 and "loopback only" in out.stderr
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            out = subprocess.run([MEMMAN, "mcp", "--http", f"127.0.0.1:{port}"],
                                 capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in out.stderr


def test_stdio_answers_every_request_even_a_line_it_cannot_parse() -> None:
    """The SDK's stdio reader drops a line it cannot parse; the client would wait forever. A
    lone surrogate in a tool argument, or arguments nested 100k deep, get a JSON-RPC error for
    their request id, and the server goes on answering."""
    with daemon_process() as dp:
        proc = subprocess.Popen([MEMMAN, "mcp", "--session", "s1"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=_env(dp.root, dp.socket))
        answers: dict[Any, dict[str, Any]] = {}
        arrived = threading.Condition()

        def read() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                msg = json.loads(raw)
                with arrived:
                    answers[msg.get("id")] = msg
                    arrived.notify_all()

        threading.Thread(target=read, daemon=True).start()

        def send(line: str) -> None:
            assert proc.stdin is not None
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()

        def answer(msgid: Any) -> dict[str, Any]:
            with arrived:
                assert arrived.wait_for(lambda: msgid in answers, timeout=60), answers.keys()
                return answers[msgid]

        def call(msgid: int, arguments: str) -> str:
            head = json.dumps({"jsonrpc": "2.0", "id": msgid, "method": "tools/call"})
            return head[:-1] + ', "params": {"name": "remember", "arguments": ' + arguments + "}}"

        try:
            send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}}))
            assert "result" in answer(1)
            send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            send(call(2, '{"text": "lone \\ud800 surrogate"}'))
            send(call(3, '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"))
            send(json.dumps({"jsonrpc": "2.0", "id": "four", "method": "tools/list"}))
            lone, deep = answer(2), answer(3)
            assert lone["error"]["code"] == -32700 and "surrogate" in lone["error"]["message"]
            assert deep["error"]["code"] == -32700 and "deep" in deep["error"]["message"]
            assert {t["name"] for t in answer("four")["result"]["tools"]} >= TOOLS
        finally:
            stop_process(proc)
