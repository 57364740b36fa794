"""Scratchpad (LRU, the 64 cap, frequency), promotion scores, conflicts and the audit log."""

from __future__ import annotations

import pytest

from memman import names
from memman.errors import CONFLICT, INVALID_PARAMS, NOT_FOUND, MemmanError
from memman_daemon.clock import FakeClock
from tests.helpers import running_daemon, short_tmpdir


async def test_cap_64_evicts_least_recently_used_and_reads_count_as_use() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client("agent-x") as c:
        await c.session_open("s1")
        ids = []
        for i in range(64):
            r = await c.call(names.SCRATCHPAD_WRITE, "s1", f"finding number {i}")
            ids.append(r["snippet"]["id"])
            assert r["evicted"] == []
        # use the oldest two: a read of #0 and a repeat write of #1
        await c.call(names.SCRATCHPAD_READ, "s1", [ids[0]])
        dup = await c.call(names.SCRATCHPAD_WRITE, "s1", "  Finding   number 1 ")
        assert dup["created"] is False and dup["snippet"]["frequency"] == 2
        r = await c.call(names.SCRATCHPAD_WRITE, "s1", "finding number 64")
        assert r["evicted"] == [ids[2]]  # #0 and #1 were used recently
        r = await c.call(names.SCRATCHPAD_WRITE, "s1", "finding number 65")
        assert r["evicted"] == [ids[3]]
        read = await c.call(names.SCRATCHPAD_READ, "s1")
        assert read["count"] == 64 and read["max"] == 64 and len(read["snippets"]) == 64
        texts = [s["text"] for s in read["snippets"]]
        assert "finding number 2" not in texts and "finding number 0" in texts
        assert texts.count("finding number 1") == 1  # no duplicate
        audit = (await c.call(names.AUDIT_LIST, {"session_id": "s1", "action": "evict"}))["records"]
        assert [a["what"] for a in audit] == ["finding number 3", "finding number 2"]
        assert audit[0]["client"] in ("agent-x", "conn-1") and audit[0]["data"]["reason"] == "lru"
        assert audit[0]["source"] == f"scratchpad:s1#{ids[3]}"
        # explicit evict
        out = await c.call(names.SCRATCHPAD_EVICT, "s1", ids[0])
        assert out == {"evicted": ids[0], "was_promoted": False}
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_EVICT, "s1", ids[0])
        assert ei.value.code == NOT_FOUND


async def test_lru_order_survives_restart() -> None:
    root = short_tmpdir()
    async with running_daemon(root, clock=FakeClock(), scratchpad={"max_snippets": 3}) as d, \
            d.client() as c:
        await c.session_open("s1")
        a = (await c.call(names.SCRATCHPAD_WRITE, "s1", "a"))["snippet"]["id"]
        await c.call(names.SCRATCHPAD_WRITE, "s1", "b")
        await c.call(names.SCRATCHPAD_WRITE, "s1", "c")
        await c.call(names.SCRATCHPAD_READ, "s1", [a])
    async with running_daemon(root, clock=FakeClock(), scratchpad={"max_snippets": 3}) as d, \
            d.client() as c:
        r = await c.call(names.SCRATCHPAD_WRITE, "s1", "d")
        texts = [s["text"] for s in (await c.call(names.SCRATCHPAD_READ, "s1"))["snippets"]]
        assert texts == ["a", "c", "d"] and len(r["evicted"]) == 1
        assert d.core.scratchpad.snippets("s1") == ["a", "c", "d"]


async def test_candidates_score_each_criterion_with_reasons() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1")
        plain = (await c.call(names.SCRATCHPAD_WRITE, "s1", "Looked at table orders."))["snippet"]
        general = (await c.call(names.SCRATCHPAD_WRITE, "s1",
                                "Revenue usually peaks on Mondays; reports should always start "
                                "with weekly totals."))["snippet"]
        surprise = (await c.call(names.SCRATCHPAD_WRITE, "s1",
                                 "Unexpected spike in signups on Nov 3rd."))["snippet"]
        explicit = (await c.call(names.SCRATCHPAD_WRITE, "s1", "User's fiscal year starts in April.",
                                 {"explicit": True}))["snippet"]
        for _ in range(3):
            await c.call(names.SCRATCHPAD_WRITE, "s1", "Looked at table orders.")
        res = await c.call(names.SCRATCHPAD_CANDIDATES, "s1")
        by_id = {x["snippet_id"]: x for x in res["candidates"]}
        assert res["threshold"] == 0.5
        assert set(by_id[plain["id"]]["parts"]) == {"salience", "surprisal", "frequency", "explicit"}
        assert by_id[plain["id"]]["parts"]["frequency"]["value"] == 1.0
        assert "written 4 times" in by_id[plain["id"]]["parts"]["frequency"]["reason"]
        assert "usually" in by_id[general["id"]]["parts"]["salience"]["reason"]
        assert by_id[general["id"]]["parts"]["salience"]["value"] > 0.5
        assert "spike" in by_id[surprise["id"]]["parts"]["surprisal"]["reason"]
        assert by_id[explicit["id"]]["parts"]["explicit"]["value"] == 1.0
        for x in res["candidates"]:
            total = sum(p["value"] * p["weight"] for p in x["parts"].values())
            assert x["score"] == pytest.approx(total, abs=1e-3)
            assert x["candidate"] == (x["score"] >= 0.5)
        scores = [x["score"] for x in res["candidates"]]
        assert scores == sorted(scores, reverse=True)


async def test_promote_preference_conflict_replace_and_audit() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client("tui") as c:
        await c.session_open("s1", {"user_id": "u1", "tenant_id": "acme"})
        a = (await c.call(names.SCRATCHPAD_WRITE, "s1", "User prefers charts over tables"))["snippet"]
        b = (await c.call(names.SCRATCHPAD_WRITE, "s1", "User prefers tables"))["snippet"]
        r = await c.call(names.SCRATCHPAD_PROMOTE, "s1", a["id"], "preference",
                         {"key": "output_format", "value": "charts"})
        assert r["changed"] and r["ref"] == "preference:output_format"
        assert r["snippet"]["promoted"][0]["target"] == "preference"
        assert (await c.call(names.MEMORY_RECALL, "u1", "output_format"))["value"] == "charts"
        # same value again: no change, no error
        again = await c.call(names.SCRATCHPAD_PROMOTE, "s1", a["id"], "preference",
                             {"key": "output_format", "value": "charts"})
        assert again["changed"] is False
        # a different value is refused, both shown
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_PROMOTE, "s1", b["id"], "preference",
                         {"key": "output_format", "value": "tables"})
        assert ei.value.code == CONFLICT
        assert ei.value.data == {"key": "output_format", "existing": "charts", "proposed": "tables"}
        assert (await c.call(names.MEMORY_RECALL, "u1", "output_format"))["value"] == "charts"
        snip = (await c.call(names.SCRATCHPAD_READ, "s1", [b["id"]]))["snippets"][0]
        assert snip["promoted"] == []
        r = await c.call(names.SCRATCHPAD_PROMOTE, "s1", b["id"], "preference",
                         {"key": "output_format", "value": "tables", "replace": True})
        assert r["replaced"] == "charts"
        assert (await c.call(names.MEMORY_RECALL, "u1", "output_format"))["value"] == "tables"
        audit = (await c.call(names.AUDIT_LIST, {"user_id": "u1", "action": "promote"}))["records"]
        assert len(audit) == 3
        assert audit[0]["target"] == "preference:output_format" and audit[0]["client"]
        assert audit[0]["data"]["replaced"] == "charts"
        assert audit[0]["source"] == f"scratchpad:s1#{b['id']}" and audit[0]["at"] > 0
        # promoted snippets are safe to evict
        out = await c.call(names.SCRATCHPAD_EVICT, "s1", a["id"])
        assert out["was_promoted"] is True
        assert (await c.call(names.MEMORY_RECALL, "u1", "output_format"))["value"] == "tables"


async def test_promote_rule_and_playbook_conflicts() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1", {"user_id": "u1"})
        sn = (await c.call(names.SCRATCHPAD_WRITE, "s1", "When asked for revenue, use net revenue"))
        sid = sn["snippet"]["id"]
        await c.call(names.SCRATCHPAD_PROMOTE, "s1", sid, "rule",
                     {"condition": "asked for revenue", "action": "use net revenue"})
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_PROMOTE, "s1", sid, "rule",
                         {"condition": "asked for revenue", "action": "use gross revenue"})
        assert ei.value.code == CONFLICT and ei.value.data["existing"] == "use net revenue"
        pb = {"flow": "analyze_trend", "slots": {"metric": "signups"},
              "tool_calls": [{"tool_id": "sql", "query": "select"}],
              "outcome": "chart of weekly signups", "user_query": "how are signups trending?"}
        r = await c.call(names.SCRATCHPAD_PROMOTE, "s1", sid, "playbook", pb)
        assert r["ref"].startswith("playbook:analyze_trend")
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_PROMOTE, "s1", sid, "playbook",
                         {**pb, "outcome": "a table"})
        assert ei.value.code == CONFLICT
        found = (await c.call(names.MEMORY_SEARCH, "u1", "procedural", "",
                              {"flow": "analyze_trend"}))["results"]
        assert len(found) == 1 and found[0]["slots"] == {"metric": "signups"}
        assert found[0]["tool_calls"] == [{"tool_id": "sql", "query": "select"}]
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_PROMOTE, "s1", sid, "elsewhere", {})
        assert ei.value.code == INVALID_PARAMS
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_PROMOTE, "s1", sid, "preference", {})
        assert ei.value.code == INVALID_PARAMS and "key" in ei.value.message


async def test_scratchpad_events() -> None:
    async with running_daemon(clock=FakeClock(), scratchpad={"max_snippets": 1}) as d, \
            d.client() as c:
        await c.session_open("s1")
        kinds: list[str] = []
        await c.subscribe(["scratchpad"], {}, lambda n, p: kinds.append(p["kind"]))
        a = (await c.call(names.SCRATCHPAD_WRITE, "s1", "one"))["snippet"]["id"]
        await c.call(names.SCRATCHPAD_WRITE, "s1", "one")
        await c.call(names.SCRATCHPAD_PROMOTE, "s1", a, "preference", {"key": "k"})
        await c.call(names.SCRATCHPAD_WRITE, "s1", "two")
        await c.call(names.PING)
        assert kinds == ["written", "updated", "promoted", "written", "evicted"]


async def test_deleted_session_takes_its_cache_and_scratchpad_along() -> None:
    root = short_tmpdir()
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        for sid in ("gone", "kept"):
            await c.session_open(sid)
            await c.call(names.SCRATCHPAD_WRITE, sid, f"note of {sid}")
            await c.call(names.CACHE_PUT, sid, "t", {}, "r")
        assert await d.core.cache.on_session_deleted("nope") == 0
        await c.session_delete("gone")
        # the hook (called by the daemon on delete, or at the next start for rows left behind)
        await d.core.scratchpad.on_session_deleted("gone")
        await d.core.cache.on_session_deleted("gone")
        assert "gone" not in d.core.scratchpad.by_session and "gone" not in d.core.cache.by_session
        before = (await c.call(names.AUDIT_LIST, {"session_id": "gone"}))["records"]
        assert {r["data"]["reason"] for r in before} == {"session deleted"}
        await c.session_delete("kept")  # rows left behind without the hook...
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        assert d.core.scratchpad.by_session == {} and d.core.cache.by_session == {}  # ...purged
        assert (await c.call(names.AUDIT_LIST, {"session_id": "gone"}))["records"] == before
        await c.session_open("new")
        await c.call(names.SCRATCHPAD_WRITE, "new", "x")
        ids = [r["id"] for r in (await c.call(names.AUDIT_LIST, {}))["records"]]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)


async def test_odd_values_get_clear_errors_or_are_stored() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1")
        # binary values cannot be stored as JSON: refused, naming the path (nothing stored)
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_WRITE, "s1", "x", {"metadata": {"raw": b"\x01"}})
        assert ei.value.code == INVALID_PARAMS and "opts.metadata.raw" in ei.value.message
        assert d.core.scratchpad.peek("s1") == []
        for bad in ({"salience": 2}, {"surprisal": "high"}, {"nope": 1}, {"flow": 3}):
            with pytest.raises(MemmanError) as ei:
                await c.call(names.SCRATCHPAD_WRITE, "s1", "y", bad)
            assert ei.value.code == INVALID_PARAMS
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_WRITE, "s1", "   ")
        assert ei.value.code == INVALID_PARAMS
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_READ, "s1", ["a"])
        assert ei.value.code == INVALID_PARAMS
        with pytest.raises(MemmanError) as ei:
            await c.call(names.AUDIT_LIST, {"bogus": 1})
        assert ei.value.code == INVALID_PARAMS
        with pytest.raises(MemmanError) as ei:
            await c.call(names.MEMORY_LEARN, "u", "k", {"b": b"\x02"})
        assert ei.value.code == INVALID_PARAMS and "value.b" in ei.value.message
        assert await c.call(names.MEMORY_RECALL, "u", "k") is None
        assert await c.call(names.PING) == "pong"
