"""Budgeted context through the real daemon: seed 001 section 11.1 success criteria and more."""

from __future__ import annotations

from typing import Any

from memman_daemon.clock import FakeClock
from tests.engine.conftest import llm_config
from tests.helpers import running_daemon
from tests.llm_server import LLMServer

FILLER = "just some ordinary chatter about nothing in particular, the weather is fine today"


def assert_valid_chat(messages: list[dict[str, Any]]) -> None:
    """What the chat completions API accepts: each tool message answers a call of the
    assistant message just before its run of tool messages, and every call is answered."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] in ("system", "user", "assistant", "tool")
        if m["role"] == "tool":
            raise AssertionError(f"tool message without a preceding tool call at {i}")
        if m.get("tool_calls"):
            want = {c["id"] for c in m["tool_calls"]}
            got = set()
            j = i + 1
            while j < len(messages) and messages[j]["role"] == "tool":
                got.add(messages[j]["tool_call_id"])
                j += 1
            assert got == want, f"tool calls {want} answered by {got}"
            i = j
            continue
        i += 1


async def add(c, sid: str, content: str, role: str = "user", **kw) -> int:
    e = await c.call("memman_session_add", sid, {"role": role, "content": content, **kw})
    return e["id"] if isinstance(e, dict) and "id" in e else e["entry"]["id"]


async def tool_pair(c, sid: str, n: int, result: str) -> tuple[int, int]:
    call_id = f"call_{n}"
    a = await add(c, sid, "", role="assistant", type="tool_call",
                  tool_calls=[{"id": call_id, "function": {"name": "shell",
                                                          "arguments": '{"cmd": "ls"}'}}])
    b = await add(c, sid, result, role="tool", type="tool_result", tool_call_id=call_id)
    return a, b


async def test_small_history_is_kept_whole_and_bands_follow_usage():
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {})
        for i in range(10):
            await add(c, "s", f"{FILLER} {i}", role="user" if i % 2 == 0 else "assistant")
        r = await c.call("memman_session_context", "s", {})
        assert r["band"] == "ok" and not r["pruned"] and len(r["messages"]) == 10
        full = r["history_tokens"]
        assert r["tokens"] == full
        for budget, band in [(int(full / 0.7), "warn"), (int(full / 0.85), "prune"),
                             (int(full / 0.95), "aggressive"), (int(full / 1.5), "emergency")]:
            r = await c.call("memman_session_context", "s", {"max_tokens": budget})
            assert r["band"] == band, (budget, r["usage"])
            assert r["tokens"] <= budget


async def test_keyword_design_success_criteria():
    """11.1: within budget; user messages kept first; tool results (success and error) kept;
    what is dropped is listed (no summary takes a share it does not earn); emergency works."""
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {"max_tokens": 1000})
        await add(c, "s", "Please always answer in French and keep the task list updated")
        ids = []
        for i in range(60):
            ids.append(await add(c, "s", f"{FILLER} {i}", role="assistant"))
            if i == 20:
                ok_call, ok_res = await tool_pair(c, "s", 1, "[Tool: deploy] success: completed 3 pods")
            if i == 30:
                er_call, er_res = await tool_pair(c, "s", 2, "deploy failed with error: quota exceeded")
        r = await c.call("memman_session_context", "s", {})
        assert r["pruned"] and r["tokens"] <= 1000
        assert r["tokens"] <= r["budget"]
        contents = [m["content"] for m in r["messages"]]
        assert any("answer in French" in (t or "") for t in contents)  # user instruction kept
        assert any("success: completed" in (t or "") for t in contents)  # tool success kept
        assert any("quota exceeded" in (t or "") for t in contents)  # tool error kept
        assert_valid_chat(r["messages"])
        dropped = [g for g in r["gaps"] if g["action"] == "dropped"]
        assert dropped and all(g["reason"] for g in dropped)
        assert sum(g["count"] for g in r["gaps"]) == r["dropped_entries"]
        assert not any("[Summary of" in (t or "") for t in contents)
        # emergency (> 100 %) still answers within budget, without any LLM call
        r = await c.call("memman_session_context", "s", {"max_tokens": 400})
        assert r["band"] == "emergency" and r["emergency"] and r["tokens"] <= 400
        assert_valid_chat(r["messages"])
        st = await c.call("memman_stats")
        assert st["summarizer"]["calls"] == 0


async def test_emergency_skips_the_llm_even_when_one_is_configured(llm_key):
    with LLMServer() as srv:
        async with running_daemon(config=llm_config(srv)) as d, d.client() as c:
            await c.call("memman_session_open", "s", {"max_tokens": 300})
            for i in range(40):
                await add(c, "s", f"{FILLER} {i}")
            r = await c.call("memman_session_context", "s", {})
            assert r["band"] == "emergency" and r["tokens"] <= 300
            assert srv.chat_requests() == []
            assert (await c.call("memman_stats"))["summarizer"]["emergency_skips"] >= 0


async def test_pinned_and_system_always_stay_and_pairs_go_together():
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {"max_tokens": 600})
        await add(c, "s", "You are a careful assistant.", role="system")
        pinned = await add(c, "s", f"remember the code word is PELICAN {FILLER}", role="assistant")
        await c.call("memman_session_pin", "s", pinned, True)
        for i in range(30):
            await add(c, "s", f"{FILLER} {i}", role="assistant")
            if i % 7 == 3:
                await tool_pair(c, "s", i, f"result {i} {FILLER}")
        r = await c.call("memman_session_context", "s", {})
        assert r["pruned"] and r["tokens"] <= 600
        assert r["messages"][0] == {"role": "system", "content": "You are a careful assistant."}
        assert any("PELICAN" in (m["content"] or "") for m in r["messages"])
        assert_valid_chat(r["messages"])
        # preview agrees and changes nothing
        before = await c.call("memman_session_get", "s")
        p = await c.call("memman_session_preview", "s", {})
        after = await c.call("memman_session_get", "s")
        assert before == after
        rows = {row["entry_id"]: row for row in p["entries"]}
        assert rows[pinned]["decision"] == "kept" and rows[pinned]["reason"] == "pinned"
        assert {row["decision"] for row in p["entries"]} >= {"kept", "dropped"}
        assert all("score" in row and row["reason"] for row in p["entries"])
        for row in p["entries"]:  # grouped entries share one decision
            if "group" in row:
                assert len({rows[i]["decision"] for i in row["group"]}) == 1
        # unpin: the entry becomes an ordinary candidate again
        await c.call("memman_session_pin", "s", pinned, False)
        p2 = await c.call("memman_session_preview", "s", {})
        assert {r["entry_id"]: r for r in p2["entries"]}[pinned]["reason"] != "pinned"


async def test_pinned_alone_over_budget_is_flagged():
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {"max_tokens": 50})
        for i in range(3):
            e = await add(c, "s", f"{FILLER} {FILLER} {i}")
            await c.call("memman_session_pin", "s", e, True)
        await add(c, "s", "not pinned")
        r = await c.call("memman_session_context", "s", {})
        assert r["over_budget"] and r["emergency"] and r["tokens"] > 50
        assert len(r["messages"]) == 3


async def test_rolling_summary_and_compression_summaries_appear():
    clock = FakeClock()
    async with running_daemon(clock=clock, compression={"max_entries": 30, "auto_compress": False}) as d, \
            d.client() as c:
        await c.call("memman_session_open", "s", {})
        for i in range(12):
            await c.call("memman_session_finalize", "s", f"question {i}?", f"answer {i}.")
        for i in range(20):
            await add(c, "s", f"{FILLER} {i}")
        out = await c.call("memman_session_compact", "s")
        assert out["summary"]["entry_ids"]
        # the whole log fits the default budget: compressed entries are sent as originals
        r = await c.call("memman_session_context", "s", {})
        texts = [m["content"] for m in r["messages"]]
        assert any(t.startswith("[Conversation summary]") and "question 0?" in t for t in texts)
        assert not any(t.startswith("[Summary of") for t in texts)
        assert "question 0?" in texts and f"{FILLER} 0" in texts
        assert r["rolling_summary"] == "included"
        # a budget they do not fit: what the question asks for comes back, within the budget
        r = await c.call("memman_session_context", "s", {"max_tokens": 300,
                                                          "query": "what was answer 3?"})
        texts = "\n".join(m["content"] or "" for m in r["messages"])
        assert "answer 3." in texts and r["pruned"]
        assert r["tokens"] <= 300


async def test_pruned_event_and_report_text():
    async with running_daemon() as d, d.client() as c:
        events: list[dict] = []
        await c.subscribe(["session"], {"session_id": "s"}, lambda n, p: events.append(p))
        await c.call("memman_session_open", "s", {"max_tokens": 400})
        for i in range(40):
            await add(c, "s", f"{FILLER} {i}")
        await c.call("memman_session_context", "s", {})
        rep = await c.call("memman_session_report", "s")
        text = rep["text"]
        assert text.startswith("=== MEMORY STATE ===\nSession: s | Exchanges: 0 | Summary: 0 bytes")
        assert "=== AGENT RECEIVES (" in text and "=== DROPPED" in text
        await c.call("memman_ping")
        kinds = [e["kind"] for e in events]
        assert "pruned" in kinds and "entry_added" in kinds
        seqs = [e["seq"] for e in events]
        assert seqs == list(range(1, len(seqs) + 1))


async def test_bad_options_get_clear_errors():
    from memman.errors import INVALID_PARAMS, NOT_FOUND, MemmanError
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {})
        for call, code in [(("memman_session_context", "s", {"max_tokens": -1}), INVALID_PARAMS),
                           (("memman_session_context", "s", {"bogus": 1}), INVALID_PARAMS),
                           (("memman_session_context", "nope", {}), NOT_FOUND),
                           (("memman_session_pin", "s", 999, True), NOT_FOUND),
                           (("memman_session_expand", "s", 999), NOT_FOUND)]:
            try:
                await c.call(*call)
            except MemmanError as exc:
                assert exc.code == code, (call, exc)
            else:
                raise AssertionError(f"{call} did not fail")
        assert await c.call("memman_ping") == "pong"


TOOL = {"type": "function", "function": {
    "name": "lookup_order", "description": "Look up an order by its number and return its "
    "status, items, shipping address and the carrier's tracking number.",
    "parameters": {"type": "object", "properties": {
        "order": {"type": "string", "description": "the order number"}},
        "required": ["order"]}}}


async def test_tiny_budgets_say_over_budget_and_never_send_an_empty_list():
    """No system prompt, no pinned entry: a budget the reply priming alone passes, tool
    definitions alone over the budget, a budget the question does not fit — each says
    ``over_budget`` when it sends more than the budget, and the list is never empty (the
    chat API refuses ``messages: []``): the least valid list is the question."""
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {})
        await add(c, "s", f"{FILLER} what did we decide about the launch?")
        for budget, tools in [(1, None), (10, None), (1, [TOOL]), (50, [TOOL])]:
            opts: dict[str, Any] = {"max_tokens": budget, "peek": True}
            if tools:
                opts["tools"] = tools
            r = await c.call("memman_session_context", "s", opts)
            assert r["messages"], (budget, tools)
            assert_valid_chat(r["messages"])
            assert r["tokens"] > budget and r["over_budget"], (budget, tools, r["tokens"])
        r = await c.call("memman_session_context", "s", {"max_tokens": 8000, "peek": True})
        assert not r["over_budget"]
