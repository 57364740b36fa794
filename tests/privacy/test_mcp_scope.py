"""`memman mcp` for one user never reads, writes or forgets another's session, driven by the
MCP SDK's own client over stdio against a real daemon process."""

from __future__ import annotations

import json

import pytest
from mcp.shared.exceptions import MCPError

from memman.sync_client import SyncClient
from tests.helpers import daemon_process
from tests.test_mcp_server import stdio_client


def _text(result) -> str:
    return result.structured_content and json.dumps(result.structured_content) \
        or "".join(getattr(c, "text", "") for c in result.content)


async def test_bobs_server_cannot_touch_anas_session_and_tenants_stay_apart() -> None:
    with daemon_process() as dp:
        with SyncClient(dp.socket) as mm:
            mm.session_open("ana-s", {"user_id": "ana", "tenant_id": "acme"})
            first = mm.session_add("ana-s", {"role": "user",
                                             "content": "ana's alarm code is 4417 heron"})
            mm.session_open("ana-g", {"user_id": "ana", "tenant_id": "globex"})
            mm.session_add("ana-g", {"role": "user", "content": "globex alarm code is 9902 finch"})
        before = len(SyncClient(dp.socket).session_get("ana-s", {})["entries"])

        async with stdio_client(dp.root, dp.socket, "--user", "bob", "--tenant", "acme",
                                "--session", "ana-s") as bob:
            added = await bob.call_tool("add", {"content": "bob was here"})
            assert added.is_error and "-32002" in _text(added)
            ctx = await bob.call_tool("context", {"query": "alarm code"})
            assert ctx.is_error and "4417" not in _text(ctx)
            gone = await bob.call_tool("forget", {"id": f"entry:ana-s#{first['id']}"})
            assert gone.is_error and "-32002" in _text(gone)
            note = await bob.call_tool("remember", {"text": "bob's note"})
            assert note.is_error
            found = await bob.call_tool("search", {"query": "alarm code heron"})
            assert "4417" not in _text(found) and "9902" not in _text(found)
            with pytest.raises(MCPError, match="-32002"):
                await bob.read_resource("memman://session/ana-s")
        with SyncClient(dp.socket) as mm:
            st = mm.session_get("ana-s", {})
            assert len(st["entries"]) == before and st["user_id"] == "ana"
            assert all("bob" not in e["content"] for e in st["entries"])

        # the same user id in another tenant sees that tenant's sessions only
        async with stdio_client(dp.root, dp.socket, "--user", "ana", "--tenant", "globex",
                                "--session", "ana-g2") as ana_g:
            found = _text(await ana_g.call_tool("search", {"query": "alarm code"}))
            assert "9902" in found and "4417" not in found
            ctx = await ana_g.call_tool("context", {"query": "what is the alarm code?"})
            assert "4417" not in _text(ctx)
            bad = await ana_g.call_tool("forget", {"id": f"entry:ana-s#{first['id']}"})
            assert bad.is_error
        async with stdio_client(dp.root, dp.socket, "--user", "ana", "--tenant", "acme",
                                "--session", "ana-s") as ana:
            found = _text(await ana.call_tool("search", {"query": "alarm code"}))
            assert "4417" in found and "9902" not in found
            ok = await ana.call_tool("forget", {"id": f"entry:ana-s#{first['id']}"})
            assert not ok.is_error
