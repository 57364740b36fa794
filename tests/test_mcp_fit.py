"""`memman mcp` as Claude Code uses it: a session per server process, scoped `sessions`, a
search floor, the daemon found without XDG_RUNTIME_DIR, Host/Origin checks on every loopback
bind, and tool errors that say what is wrong. The official `mcp` client drives it; a real
daemon answers."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

from memman import paths
from memman.config import Config
from memman.integrations.mcp_server import client_session_name
from memman.sync_client import SyncClient
from tests.helpers import daemon_process, short_tmpdir, stop_process
from tests.test_mcp_server import MEMMAN, _data, _env


@contextlib.asynccontextmanager
async def mcp_client(root: Path, sock: Path, *args: str, name: str = "claude-code",
                     **env: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=MEMMAN, args=["mcp", *args],
                                   env=_env(root, sock, **env))
    async with Client(params, client_info=Implementation(name=name, version="1.0")) as client:
        yield client


def _error(result: Any) -> str:
    assert result.is_error, result.content
    return result.content[0].text


async def test_each_server_process_is_its_own_session_of_the_user() -> None:
    with daemon_process() as dp:
        with SyncClient(dp.socket) as mm:  # another user's session, and another tenant's
            mm.session_open("bob-chat", {"user_id": "bob", "tenant_id": "acme"})
            mm.session_open("ana-initech", {"user_id": "ana", "tenant_id": "initech"})
        async with mcp_client(dp.root, dp.socket, "--user", "ana", "--tenant", "acme") as one:
            added = _data(await one.call_tool("add", {
                "content": "My cat is called Mirabelle and she is allergic to salmon."}))
            first = added["session_id"]
            assert re.fullmatch(r"claude-code-\d{8}-\d{6}-[0-9a-f]{4}", first), first
            listed = _data(await one.call_tool("sessions", {}))
            assert [r["session_id"] for r in listed["sessions"]] == [first]
            assert listed["sessions"][0]["current"]
        async with mcp_client(dp.root, dp.socket, "--user", "ana", "--tenant", "acme") as two:
            ctx = _data(await two.call_tool("context", {"query": "what is my cat called?"}))
            second = ctx["session_id"]
            assert second != first
            listed = _data(await two.call_tool("sessions", {}))
            rows = listed["sessions"]
            assert {r["session_id"] for r in rows} == {first, second}
            assert {(r["user_id"], r["tenant_id"]) for r in rows} == {("ana", "acme")}
            assert listed["user_id"] == "ana"
        with SyncClient(dp.socket) as mm:
            owners = {r["session_id"]: r["user_id"] for r in mm.session_list()}
        assert owners[first] == owners[second] == "ana"
        # memory carries across through recall: what ana told the first comes back, dated
        # and with its source session
        assert "Mirabelle" in ctx["text"] and f"session {first}" in ctx["text"]


async def test_an_explicit_session_is_shared() -> None:
    with daemon_process() as dp:
        async with mcp_client(dp.root, dp.socket, "--user", "ana",
                              MEMMAN_MCP_SESSION="desk") as a:
            assert _data(await a.call_tool("add", {"content": "hello"}))["session_id"] == "desk"
        async with mcp_client(dp.root, dp.socket, "--session", "desk", "--user", "ana") as b:
            ctx = _data(await b.call_tool("context", {}))
            assert ctx["session_id"] == "desk" and "hello" in ctx["text"]


def test_session_names() -> None:
    name = client_session_name("Claude Code (desktop)", 0)
    assert re.fullmatch(r"claude-code-desktop-\d{8}-\d{6}-[0-9a-f]{4}", name)
    assert client_session_name(None).startswith("mcp-")
    assert client_session_name("Claude Code") != client_session_name("Claude Code")


async def test_search_returns_only_hits_above_the_floor() -> None:
    with daemon_process() as dp:
        with SyncClient(dp.socket) as mm:
            mm.docs_add("acme", {"doc_id": "handbook", "title": "Handbook",
                                 "content": "Expenses are filed by the fifth of each month. "
                                            "Holidays are booked in the HR portal."})
        async with mcp_client(dp.root, dp.socket, "--user", "ana", "--tenant", "acme") as c:
            await c.call_tool("remember", {"text": "the staging db listens on port 6543"})
            found = _data(await c.call_tool("search", {"query": "staging database port"}))
            assert [h["source"].split(" ")[0] for h in found["hits"]] == ["scratchpad"]
            assert all(h["coverage"] >= 0.25 for h in found["hits"])
            assert "doc:handbook" not in json.dumps(found)
            none = _data(await c.call_tool("search", {"query": "kubernetes ingress"}))
            assert none["hits"] == []
            held = _data(await c.call_tool("search", {"query": "when are expenses filed"}))
            assert [h["id"] for h in held["hits"]] == ["doc:handbook"]
            # what the user said in a session is found too, with its session and date
            added = _data(await c.call_tool("add", {"content": "My dentist is Dr Alvarez on "
                                                               "Kungsgatan."}))
            said = _data(await c.call_tool("search", {"query": "who is my dentist"}))
            assert said["hits"] and said["hits"][0]["id"] == added["id"]
            assert said["hits"][0]["source"].startswith("user in session ")


async def test_tool_errors_say_what_is_wrong() -> None:
    with daemon_process() as dp:
        async with mcp_client(dp.root, dp.socket, "--user", "ana") as c:
            for bad in ("memory:²", "memory:99999999999999999999", "entry:s#1e5",
                        "snippet:s#9223372036854775808", "chunk:-3"):
                text = _error(await c.call_tool("forget", {"id": bad}))
                assert f"bad id {bad!r}" in text, text
            text = _error(await c.call_tool("forget", {"id": "memory:424242"}))
            assert "-32001" in text and "424242" in text
            big = "x" * (10 * 1024 * 1024)
            text = _error(await c.call_tool("add", {"content": big}))
            assert "8,388,608 bytes" in text and "max_message_bytes" in text, text
            # and the server keeps serving
            assert _data(await c.call_tool("add", {"content": "still here"}))["tokens"] > 0


async def test_a_daemon_that_cannot_start_is_explained() -> None:
    """A second daemon on the same data dir (another socket) hits the data-dir lock: the tool
    error says so instead of 'Connection closed'."""
    with daemon_process() as dp:
        other = short_tmpdir() / "o"
        other.mkdir(mode=0o700)
        sock = other / "memman.sock"
        async with mcp_client(dp.root, sock, "--user", "ana") as c:
            text = _error(await c.call_tool("recall", {"key": "editor"}))
            assert "not available" in text and "exited" in text, text
            assert "another memman daemon" in text and "is using the data dir" in text, text


def test_mcp_variables_are_known_to_the_config() -> None:
    env = {"MEMMAN_MCP_SESSION": "desktop", "MEMMAN_MCP_USER": "ana",
           "MEMMAN_MCP_TENANT": "acme", "MEMMAN_MCP_HTTP": "8765", "MEMMAN_MCP_NO_START": "1",
           "MEMMAN_MCP_MIN_COVERAGE": "0.3"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.setenv("MEMMAN_MCP_SESION", "typo")
        warnings = Config.load(short_tmpdir() / "none.toml").warnings
    assert not [w for w in warnings if any(k + " " in w for k in env)], warnings
    assert any("MEMMAN_MCP_SESION" in w and "MEMMAN_MCP_SESSION" in w for w in warnings)


def test_the_default_socket_is_stable_without_xdg_runtime_dir(monkeypatch) -> None:
    monkeypatch.delenv("MEMMAN_SOCKET", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    seen = set()
    for tmp in ("/tmp", "/var/tmp/x", "/nonexistent"):  # launchers set TMPDIR differently
        monkeypatch.setenv("TMPDIR", tmp)
        seen.add(paths.socket_path()[0])
    assert len(seen) == 1
    path = seen.pop()
    assert len(str(path).encode()) <= 107
    run_user = Path(f"/run/user/{__import__('os').getuid()}")
    if run_user.is_dir() and run_user.stat().st_uid == __import__("os").getuid():
        assert path == run_user / "memman" / "memman.sock"
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run_user))
        assert paths.socket_path()[0] == path  # the same as a login shell's
    else:
        assert str(path) == f"/tmp/memman-{__import__('os').getuid()}/memman.sock"


@contextlib.contextmanager
def http_on(root: Path, sock: Path, host: str) -> Iterator[int]:
    proc = subprocess.Popen([MEMMAN, "mcp", "--http", f"{host}:0", "--user", "ana"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=_env(root, sock))
    port: list[int] = []
    found = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if m := re.search(r"streamable HTTP at http://\S+:(\d+)/mcp", line):
                port.append(int(m.group(1)))
                found.set()
        found.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        found.wait(60)
        assert port, "memman mcp --http printed no address"
        yield port[0]
    finally:
        stop_process(proc)


def _post(host: str, port: int, headers: dict[str, str]) -> int:
    shown = f"[{host}]" if ":" in host else host
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}).encode()
    req = urllib.request.Request(f"http://{shown}:{port}/mcp", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Accept": "application/json, text/event-stream",
                                          **headers})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _ in range(600):  # the address is printed just before uvicorn starts listening
        try:
            with opener.open(req, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except urllib.error.URLError as exc:
            if "refused" not in str(exc.reason):
                raise
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {shown}:{port}")


@pytest.mark.parametrize("host", ["127.0.0.2", "::1", "localhost", "127.0.0.1"])
def test_http_checks_host_and_origin_on_every_loopback_bind(host: str) -> None:
    import socket as socketlib

    if host == "::1":
        try:
            with socketlib.socket(socketlib.AF_INET6) as s6:
                s6.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")

    with daemon_process() as dp, http_on(dp.root, dp.socket, host) as port:
        addr = "127.0.0.1" if host == "localhost" else host
        shown = f"[{addr}]" if ":" in addr else addr
        assert _post(addr, port, {"Host": f"evil.example:{port}"}) == 421
        assert _post(addr, port, {"Host": f"{shown}:{port}"}) == 200
        assert _post(addr, port, {"Host": f"{shown}:{port}",
                                  "Origin": "http://evil.example"}) == 403
        assert _post(addr, port, {"Host": f"{shown}:{port}",
                                  "Origin": f"http://{shown}:{port}"}) == 200


async def test_over_http_a_big_argument_names_the_limit() -> None:
    from tests.test_mcp_server import http_server

    with daemon_process() as dp, http_server(dp.root, dp.socket, "--user", "ana") as url:
        async with Client(url) as c:
            text = _error(await c.call_tool("add", {"content": "x" * (10 * 1024 * 1024)}))
            assert "8,388,608 bytes" in text, text
            assert _data(await c.call_tool("add", {"content": "small"}))["tokens"] > 0
