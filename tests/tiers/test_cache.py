"""Tool-result cache and one-time injection through the real daemon (seed 000)."""

from __future__ import annotations

import asyncio
import json

import pytest

from memman import names
from memman.cache_state import cache_key, format_cache_state
from memman.errors import ALREADY_DONE, INVALID_PARAMS, NOT_FOUND, MemmanError
from memman_daemon.clock import FakeClock
from tests.helpers import running_daemon, short_tmpdir


async def test_key_is_seed_000_md5() -> None:
    import hashlib
    params = {"b": 2, "a": 1}
    want = hashlib.md5(f"t:{json.dumps(params, sort_keys=True)}".encode()).hexdigest()
    assert cache_key("t", params) == want
    assert cache_key("t", {"a": 1, "b": 2}) == want


async def test_duration_counts_exchanges_hit_refreshes_finalize_decrements() -> None:
    clock = FakeClock()
    async with running_daemon(clock=clock) as d, d.client("agent-1") as c:
        await c.session_open("s1")
        put = await c.call(names.CACHE_PUT, "s1", "gcs_get_champion_details",
                           {"champion_name": "droideka"}, {"hp": 900}, {"duration": 3})
        assert put["remaining_duration"] == 3 and put["original_duration"] == 3
        assert put["result"] == {"hp": 900}  # as it was put (the context gets its JSON text)
        assert put["key"] == cache_key("gcs_get_champion_details", {"champion_name": "droideka"})
        for field in ("tool_name", "parameters", "result", "remaining_duration",
                      "original_duration", "call_id", "cached_at"):
            assert field in put
        cache = d.app.cache
        await cache.on_cycle_finalized("s1")
        await cache.on_cycle_finalized("s1")
        lst = await c.call(names.CACHE_LIST, "s1")
        assert lst["entries"][0]["remaining_duration"] == 1
        assert "2 exchanges" not in lst["state"] and "1/3 exchanges remaining" in lst["state"]
        hit = await c.call(names.CACHE_LOOKUP, "s1", "gcs_get_champion_details",
                           {"champion_name": "droideka"})
        assert hit["remaining_duration"] == 3 and hit["hits"] == 1
        assert await c.call(names.CACHE_LOOKUP, "s1", "gcs_get_champion_details",
                            {"champion_name": "other"}) is None
        for _ in range(2):
            assert await cache.on_cycle_finalized("s1") == []
        assert await cache.on_cycle_finalized("s1") == [put["key"]]
        assert (await c.call(names.CACHE_LIST, "s1"))["entries"] == []
        counters = (await c.call(names.CACHE_LIST, "s1"))["counters"]
        assert counters == {"hits": 1, "misses": 1, "puts": 1, "expired": 0, "evicted": 1}
        audit = (await c.call(names.AUDIT_LIST, {"session_id": "s1"}))["records"]
        assert audit[0]["action"] == "evict" and audit[0]["data"]["reason"] == "duration"


async def test_ttl_expires_on_wall_clock_without_refresh() -> None:
    clock = FakeClock()
    async with running_daemon(clock=clock) as d, d.client() as c:
        await c.session_open("s1")
        await c.call(names.CACHE_PUT, "s1", "weather", {"city": "Oslo"}, "rain",
                     {"duration": 10, "ttl_s": 60})
        clock.advance(59)
        assert (await c.call(names.CACHE_LOOKUP, "s1", "weather", {"city": "Oslo"}))["result"] == "rain"
        clock.advance(1)  # a hit does not extend the TTL
        assert await c.call(names.CACHE_LOOKUP, "s1", "weather", {"city": "Oslo"}) is None
        # the lookup answers at once; the expiry's removal commits in the background
        for _ in range(200):
            if d.app.cache.counters["expired"]:
                break
            await asyncio.sleep(0.01)
        assert d.app.cache.counters["expired"] == 1
        # expiry on finalize too
        await c.call(names.CACHE_PUT, "s1", "weather", {"city": "Rome"}, "sun",
                     {"duration": 10, "ttl_s": 5})
        clock.advance(6)
        assert await d.app.cache.on_cycle_finalized("s1") == [cache_key("weather", {"city": "Rome"})]


async def test_events_and_context_messages_are_valid_chat() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1")
        events: list[dict] = []
        await c.subscribe(["cache"], {"session_id": "s1"}, lambda n, p: events.append(p))
        await c.call(names.CACHE_PUT, "s1", "a", {"x": 1}, "one", {"call_id": "c1"})
        await c.call(names.CACHE_PUT, "s1", "b", {"y": 2}, "two", {"call_id": "c1"})
        await c.call(names.CACHE_LOOKUP, "s1", "a", {"x": 1})
        await c.call(names.CACHE_LOOKUP, "s1", "zz", {})
        await c.call(names.CACHE_EVICT, "s1", cache_key("b", {"y": 2}))
        await c.call(names.PING)
        assert [e["kind"] for e in events] == ["put", "put", "hit", "miss", "evicted"]
        await c.call(names.CACHE_PUT, "s1", "b", {"y": 2}, "two", {"call_id": "c1"})
        msgs = d.app.cache.context_messages("s1")
        assert msgs[0]["role"] == "assistant" and len(msgs[0]["tool_calls"]) == 2
        ids = [tc["id"] for tc in msgs[0]["tool_calls"]]
        assert len(set(ids)) == 2  # unique even though both asked for c1
        assert [m["tool_call_id"] for m in msgs[1:]] == ids
        assert json.loads(msgs[0]["tool_calls"][0]["function"]["arguments"]) == {"x": 1}
        assert d.app.tokens.count_messages(msgs, "gpt-4o-mini") > 0


async def test_bad_input_and_unknown_session() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        with pytest.raises(MemmanError) as ei:
            await c.call(names.CACHE_PUT, "s1", "t", {}, "r", {"duration": 0})
        assert ei.value.code == INVALID_PARAMS and "duration" in ei.value.message
        with pytest.raises(MemmanError) as ei:
            await c.call(names.CACHE_LOOKUP, "nope", "t", {})
        assert ei.value.code == NOT_FOUND
        with pytest.raises(MemmanError) as ei:
            await c.call(names.CACHE_PUT, "s1", "t", {"blob": b"\x00\xff"}, "r")
        assert ei.value.code == INVALID_PARAMS and "JSON" in ei.value.message
        with pytest.raises(MemmanError) as ei:
            await c.call(names.CACHE_LOOKUP, "s1", "t", {1: "a", "b": 2})
        assert ei.value.code == INVALID_PARAMS
        assert await c.call(names.PING) == "pong"
        with pytest.raises(MemmanError) as ei:
            await c.call(names.CACHE_EVICT, "s1", "missing")
        assert ei.value.code == NOT_FOUND


async def test_capacity_evicts_closest_to_expiry() -> None:
    async with running_daemon(clock=FakeClock(), cache={"max_entries_per_session": 2}) as d, \
            d.client() as c:
        await c.session_open("s1")
        await c.call(names.CACHE_PUT, "s1", "a", {}, "1", {"duration": 5})
        await c.call(names.CACHE_PUT, "s1", "b", {}, "2", {"duration": 1})
        await c.call(names.CACHE_PUT, "s1", "c", {}, "3", {"duration": 5})
        tools = [e["tool_name"] for e in (await c.call(names.CACHE_LIST, "s1"))["entries"]]
        assert tools == ["a", "c"]


async def test_injection_once_and_caches_proactive_results() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1")
        res = await c.call(names.SESSION_INJECT, "s1", "The user is on the billing screen.", [
            {"tool": "db_get_ux_details", "params": {"query": "screen help"}, "result": "help text",
             "duration": 2}])
        assert res["messages"][0]["role"] == "assistant"
        assert res["messages"][0]["content"] == (
            "I can see you're on a specific screen. The user is on the billing screen.")
        assert res["messages"][1]["tool_calls"][0]["function"]["name"] == "db_get_ux_details"
        assert res["messages"][2]["role"] == "tool"
        hit = await c.call(names.CACHE_LOOKUP, "s1", "db_get_ux_details", {"query": "screen help"})
        assert hit["result"] == "help text" and hit["original_duration"] == 2
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SESSION_INJECT, "s1", "again", [])
        assert ei.value.code == ALREADY_DONE and "already done" in ei.value.message
        s = await c.session_get("s1")
        assert sum(1 for e in s["entries"] if e["metadata"].get("injection")) == 1


async def test_cache_and_injection_survive_restart() -> None:
    root = short_tmpdir()
    clock = FakeClock()
    async with running_daemon(root, clock=clock) as d, d.client() as c:
        await c.session_open("s1")
        await c.call(names.SESSION_INJECT, "s1", "hi", [
            {"tool": "t", "params": {"a": 1}, "result": "r", "duration": 4}])
        await c.call(names.CACHE_LOOKUP, "s1", "t", {"a": 1})
        await d.app.cache.on_cycle_finalized("s1")
    async with running_daemon(root, clock=clock) as d, d.client() as c:
        lst = (await c.call(names.CACHE_LIST, "s1"))["entries"]
        assert [(e["tool_name"], e["remaining_duration"]) for e in lst] == [("t", 3)]
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SESSION_INJECT, "s1", "hi", [])
        assert ei.value.code == ALREADY_DONE


def test_format_cache_state_matches_seed() -> None:
    text = format_cache_state([{"tool_name": "gcs_get_champion_details",
                                "parameters": {"champion_name": "droideka"},
                                "remaining_duration": 2, "original_duration": 3}])
    assert text == ("=== FUNCTION CACHE STATE ===\nCached functions: 1\n"
                    "  • gcs_get_champion_details({'champion_name': 'droideka'}): "
                    "2/3 exchanges remaining")


async def test_read_only_daemon_serves_tiers_without_writing() -> None:
    root = short_tmpdir()
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1")
        await c.call(names.CACHE_PUT, "s1", "t", {}, "r", {"duration": 2})
        await d.app.cache.on_cycle_finalized("s1")
        await c.call(names.SCRATCHPAD_WRITE, "s1", "note")
        await c.call(names.MEMORY_LEARN, "u", "k", "v")
    async with running_daemon(root, clock=FakeClock(), read_only=True) as d, d.client() as c:
        commits = d.app.store.commits
        assert (await c.call(names.CACHE_LOOKUP, "s1", "t", {}))["result"] == "r"
        assert [s["text"] for s in (await c.call(names.SCRATCHPAD_READ, "s1"))["snippets"]] == ["note"]
        assert (await c.call(names.MEMORY_RECALL, "u", "k"))["value"] == "v"
        assert (await c.call(names.MEMORY_SEARCH, "u", "semantic", "v"))["results"]
        with pytest.raises(MemmanError) as ei:
            await c.call(names.CACHE_PUT, "s1", "t2", {}, "r")
        assert ei.value.code == -32005
        await c.call(names.PING)
        assert d.app.store.commits == commits
