"""Seed 000 cycles and seed 004 compression through the real daemon."""

from __future__ import annotations

import asyncio

from memman_daemon.clock import FakeClock
from tests.engine.test_context import FILLER, add, assert_valid_chat, tool_pair
from tests.helpers import running_daemon, short_tmpdir


async def test_finalize_exchanges_answers_and_rolling_summary():
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {})
        long_answer = ("The deployment plan has several steps. " * 40).strip()
        assert len(long_answer.encode()) > 750
        r = await c.call("memman_session_finalize", "s", "How do I deploy?", long_answer)
        x = r["exchange"]
        assert x["summarized"] and x["answer_bytes"] == len(long_answer.encode())
        assert len(x["answer"].encode()) <= 520
        assert r["added_entry_ids"]  # question and answer logged losslessly
        got = await c.call("memman_session_get", "s")
        entries = got["entries"] if "entries" in got else got["session"]["entries"]
        assert any(e["content"] == long_answer for e in entries)
        for i in range(10):
            r = await c.call("memman_session_finalize", "s", f"q{i} " + "x" * 300, "a " + "y" * 300)
        st = r["state"]
        assert st["exchanges"] == 10 and st["summary_bytes"] > 0
        assert r["folded"] == 1
        for i in range(20):
            r = await c.call("memman_session_finalize", "s", f"q{i} " + "x" * 300, "a " + "y" * 300)
            assert r["state"]["summary_bytes"] <= 4000
        assert r["state"]["summary_compressions"] >= 1
        assert r["state"]["llm_compressions"] == 0  # no key: truncation fallback
        rep = await c.call("memman_session_report", "s")
        assert "| Exchanges: 10 |" in rep["text"]


async def test_finalize_does_not_duplicate_logged_messages():
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {})
        await add(c, "s", "what time is it?")
        await add(c, "s", "it is noon", role="assistant")
        r = await c.call("memman_session_finalize", "s", "what time is it?", "it is noon")
        assert r["added_entry_ids"] == [] and len(r["agent_message_ids"]) == 1
        r = await c.call("memman_session_finalize", "s", "what time is it?", "it is one")
        assert len(r["added_entry_ids"]) == 2  # a new cycle: both are new


async def test_compression_links_expand_and_survive_restart():
    root = short_tmpdir()
    clock = FakeClock()
    sections = {"compression": {"max_entries": 100, "check_interval_s": 0.05}}
    async with running_daemon(root, clock=clock, **sections) as d, d.client() as c:
        events: list[dict] = []
        await c.subscribe(["session"], {}, lambda n, p: events.append(p))
        await c.call("memman_session_open", "s", {})
        ids = []
        for i in range(101):
            ids.append(await add(c, "s", f"{FILLER} {i}"))
            clock.advance(1)
        for _ in range(200):  # the sweep compresses in the background
            if any(e["kind"] == "compressed" for e in events):
                break
            await asyncio.sleep(0.02)
        ev = next(e for e in events if e["kind"] == "compressed")
        sm = ev["summary"]
        assert sm["entry_ids"] == ids[:91]  # all but the recent window of 10
        assert sm["original_tokens"] > sm["tokens"] > 0
        assert sm["ratio"] == round(sm["original_tokens"] / sm["tokens"], 3)
        assert sm["time_range"]["end"] - sm["time_range"]["start"] == 90
        ex = await c.call("memman_session_expand", "s", sm["id"])
        assert [e["id"] for e in ex["entries"]] == ids[:91]
        assert all(e["summary_id"] == sm["id"] for e in ex["entries"])
        sid = sm["id"]
    async with running_daemon(root, **sections) as d, d.client() as c:
        ex = await c.call("memman_session_expand", "s", sid)
        assert len(ex["entries"]) == 91  # compressed entries stay in the store
        exp = await c.call("memman_session_export", "s")
        assert len(exp["entries"]) == 101 and exp["links"] == [{"summary_id": sid,
                                                                "entry_ids": ids[:91]}]


async def test_compression_respects_min_entries_pins_and_tool_pairs():
    async with running_daemon(compression={"auto_compress": False, "recent_window": 3}) as d, \
            d.client() as c:
        await c.call("memman_session_open", "s", {})
        for i in range(3):
            await add(c, "s", f"{FILLER} {i}")
        r = await c.call("memman_session_compact", "s")
        assert r["summary"] is None  # fewer than min_entries (5)
        keep = await add(c, "s", "pinned fact: the port is 8443")
        await c.call("memman_session_pin", "s", keep, True)
        for i in range(4):
            await add(c, "s", f"{FILLER} {i}")
        call, res = await tool_pair(c, "s", 1, "tool output")
        await add(c, "s", "last one")
        r = await c.call("memman_session_compact", "s")
        ids = r["summary"]["entry_ids"]
        assert keep not in ids
        assert (call in ids) == (res in ids)
        ctx = await c.call("memman_session_context", "s", {})
        assert_valid_chat(ctx["messages"])
        assert any("8443" in (m["content"] or "") for m in ctx["messages"])
