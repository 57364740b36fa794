"""Seed 002's access pattern through the async Client and the SyncClient, end to end as a new
user would: cache across exchanges, keep a scratchpad, promote, find it in a later session."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from memman import names
from memman.memory_access import Memory
from memman.sync_client import SyncClient
from memman_daemon.clock import FakeClock
from tests.helpers import daemon_process, running_daemon, short_tmpdir


async def test_async_access_pattern() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1", {"user_id": "ana", "tenant_id": "acme"})
        memory = Memory(c, session_id="s1", user_id="ana", tenant_id="acme")
        snip = await memory.scratchpad.write("Orders spike on Mondays.", explicit=True)
        assert snip["explicit"] is True
        assert await memory.scratchpad.read() == ["Orders spike on Mondays."]
        await memory.preferences.update("analysis depth", "detailed")
        assert await memory.preferences.get("analysis depth") == "detailed"
        assert await memory.preferences.get("missing", "n/a") == "n/a"
        cands = await memory.scratchpad.candidates()
        assert cands[0]["parts"]["explicit"]["value"] == 1.0
        await memory.scratchpad.promote(snip["id"], "business")
        assert (await memory.docs.search("orders spike"))[0]["doc_id"] == "agent.md"
        await memory.playbooks.save("weekly_report", user_query="weekly orders", outcome="ok")
        assert len(await memory.playbooks.for_flow("weekly_report")) == 1
        await memory.episodic.append("ran the weekly report", task="report")
        assert (await memory.episodic.search("weekly report"))[0]["metadata"] == {"task": "report"}


def test_sync_agent_across_sessions_and_restart() -> None:
    root = short_tmpdir()
    try:
        _sync_agent(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _sync_agent(root: Path) -> None:
    with daemon_process(root) as p:
        with SyncClient(p.socket, name="agent") as mm:
            mm.session_open("monday", {"user_id": "ana", "tenant_id": "acme"})
            memory = Memory(mm, session_id="monday", user_id="ana", tenant_id="acme")
            # exchange 1: the tool runs once and is cached for 2 exchanges
            assert mm.call(names.CACHE_LOOKUP, "monday", "sales_by_day", {"week": 12}) is None
            mm.call(names.CACHE_PUT, "monday", "sales_by_day", {"week": 12}, "Mon 40, Tue 12",
                    {"duration": 2})
            mm.session_add("monday", {"role": "user", "content": "How did week 12 go?"})
            mm.call(names.SESSION_FINALIZE, "monday", "How did week 12 go?", "Mondays were best.")
            entry = mm.call(names.CACHE_LIST, "monday")["entries"][0]
            assert entry["remaining_duration"] == 1  # the engine's finalize decremented it
            # exchange 2: a hit, no second tool call
            hit = mm.call(names.CACHE_LOOKUP, "monday", "sales_by_day", {"week": 12})
            assert hit["result"] == "Mon 40, Tue 12"
            s = memory.scratchpad.write("Sales usually peak on Mondays.")
            memory.scratchpad.write("Sales usually peak on Mondays.")  # seen again
            memory.preferences.update("chart style", "bars")
            best = memory.scratchpad.candidates()[0]
            assert best["snippet_id"] == s["id"] and best["parts"]["frequency"]["value"] > 0
            memory.scratchpad.promote(s["id"], "business", key="sales peak")
        show = subprocess.run([sys.executable, "-m", "memman_cli.cli", "--socket", str(p.socket),
                               "show", "monday"], capture_output=True, text=True, timeout=60)
        assert show.returncode == 0, show.stderr
        assert "=== FUNCTION CACHE STATE ===\nCached functions: 1\n" in show.stdout
        assert "  • sales_by_day({'week': 12}): 2/2 exchanges remaining" in show.stdout
        p.terminate()
    # the same data dir, a new daemon, a later session
    with daemon_process(root) as p2, SyncClient(p2.socket, name="agent") as mm:
        mm.session_open("tuesday", {"user_id": "ana", "tenant_id": "acme"})
        memory = Memory(mm, session_id="tuesday", user_id="ana", tenant_id="acme")
        assert memory.preferences.get("chart style") == "bars"
        hits = memory.docs.search("when do sales peak")
        assert "Mondays" in hits[0]["text"]
        assert mm.call(names.CACHE_LIST, "monday")["entries"][0]["tool_name"] == "sales_by_day"
