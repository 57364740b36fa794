"""Seed 000: cached tool results reach the context in valid chat format, inside the budget."""

from tests.helpers import running_daemon


def _assert_valid_tool_pairing(messages: list[dict]) -> None:
    open_ids: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, m
            open_ids.discard(m["tool_call_id"])
        else:
            assert not open_ids, f"tool results missing for {open_ids}"
            open_ids = {c["id"] for c in m.get("tool_calls") or []}
    assert not open_ids


async def test_cached_results_ride_along_before_the_new_question() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"max_tokens": 2000})
        await c.session_add("s", {"role": "system", "content": "You help with champions."})
        await c.cache_put("s", "gcs_get_champion_details", {"champion_name": "droideka"},
                          "Droideka: shielded, rolls fast", {"duration": 2})
        await c.session_add("s", {"role": "user", "content": "How fast does it roll?"})
        ctx = await c.session_context("s")
        msgs = ctx["messages"]
        assert msgs[-1] == {"role": "user", "content": "How fast does it roll?"}
        assert msgs[-2] == {"role": "tool", "tool_call_id": msgs[-3]["tool_calls"][0]["id"],
                            "content": "Droideka: shielded, rolls fast"}
        assert msgs[-3]["tool_calls"][0]["function"]["name"] == "gcs_get_champion_details"
        _assert_valid_tool_pairing(msgs)
        billed = await c.count_tokens(msgs, ctx["model"])
        assert ctx["tokens"] == billed["tokens"] and ctx["tokens"] <= ctx["budget"] == 2000
        assert ctx["cached_tools"]["messages"] == 2
        # `memman show` reports exactly what the agent receives, cached results included
        report = (await c.session_report("s"))["text"]
        assert f"=== AGENT RECEIVES ({len(msgs)} messages) ===" in report

        # each finalized cycle decrements the duration; at 0 the result leaves the context
        for i in range(2):
            await c.session_finalize("s", f"q{i}", "a short answer")
        ctx = await c.session_context("s")
        assert not any(m.get("tool_calls") for m in ctx["messages"])
        assert ctx["cached_tools"]["messages"] == 0


async def test_cached_results_never_push_the_context_over_budget() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"max_tokens": 600})
        for i in range(40):
            await c.session_add("s", {"role": "user" if i % 2 == 0 else "assistant",
                                      "content": f"message {i} " + "filler text " * 10})
        await c.cache_put("s", "search", {"q": "x"}, "result " * 60, {"duration": 3})
        ctx = await c.session_context("s")
        assert ctx["tokens"] <= 600
        _assert_valid_tool_pairing(ctx["messages"])
        assert ctx["tokens"] == (await c.count_tokens(ctx["messages"], ctx["model"]))["tokens"]
        big = await c.session_context("s", {"max_tokens": 150})
        assert big["cached_tools"]["messages"] == 0 and "left out" in big["cached_tools"]["note"]
