"""Property tests over random sessions and budgets, through the real daemon (in a thread)."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine.test_context import assert_valid_chat

WORDS = ["error", "success", "plan", "task", "approval", "hello", "the", "[Tool: x]",
         "[SYSTEM: y]", "data", "x" * 40, "ok"]

step = st.one_of(
    st.tuples(st.just("msg"), st.sampled_from(["user", "assistant", "system"]),
              st.lists(st.sampled_from(WORDS), min_size=1, max_size=30), st.booleans()),
    st.tuples(st.just("tool"), st.integers(1, 3),
              st.lists(st.sampled_from(WORDS), min_size=1, max_size=20), st.booleans()),
    st.tuples(st.just("orphan"), st.just(""), st.lists(st.sampled_from(WORDS), max_size=3),
              st.just(False)),
)

_ids = itertools.count()


def _vectors_settled(c) -> None:
    """Wait (bounded by count) until the recall index has every vector it is embedding."""
    import time
    for _ in range(600):
        if not c.call("memman_stats")["recall"]["pending_vectors"]:
            return
        time.sleep(0.05)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(step, min_size=1, max_size=40), budget=st.integers(60, 3000),
       compact=st.booleans())
def test_context_fits_pairs_stay_valid_and_nothing_disappears(thread_daemon, steps, budget, compact):
    sid = f"p{next(_ids)}"
    with thread_daemon.client() as c:
        c.call("memman_session_open", sid, {"max_tokens": budget})
        added = []
        pinned_tokens = 0
        for kind, role, words, pin in steps:
            text = " ".join(words)
            if kind == "msg":
                e = c.call("memman_session_add", sid, {"role": role, "content": text, "pinned": pin})
                added.append(e)
                if pin or role == "system":
                    pinned_tokens += e["tokens"]
            elif kind == "tool":
                n = role
                calls = [{"id": f"{sid}-{len(added)}-{k}", "function": {"name": "t", "arguments": "{}"}}
                         for k in range(n)]
                e = c.call("memman_session_add", sid, {"type": "tool_call", "role": "assistant",
                                                       "content": "", "tool_calls": calls})
                added.append(e)
                for call in calls:
                    added.append(c.call("memman_session_add", sid, {
                        "type": "tool_result", "role": "tool", "content": text,
                        "tool_call_id": call["id"]}))
            else:
                added.append(c.call("memman_session_add", sid, {
                    "type": "tool_result", "role": "tool", "content": text or "x",
                    "tool_call_id": f"missing-{len(added)}"}))
        if compact:
            c.call("memman_session_compact", sid)
        ctx = c.call("memman_session_context", sid, {})
        if ctx["tokens"] > budget:
            # only in a flagged emergency where the pinned entries (and system prompts) alone
            # exceed the budget, or where nothing fits and the least list a chat API accepts is
            # sent (one unit: a message, or one tool call with its results; docs/decisions.md)
            assert ctx["over_budget"] and ctx["emergency"]
            rest = [m for m in ctx["messages"] if m["role"] != "system"]
            least = len(rest) == 1 or (bool(rest) and bool(rest[0].get("tool_calls"))
                                       and all(m["role"] == "tool" for m in rest[1:]))
            assert pinned_tokens + 3 > budget or least, ctx["messages"]
        assert_valid_chat(ctx["messages"])
        # tokens reported = what the chat API would bill for exactly these messages
        counted = c.call("memman_count_tokens", ctx["messages"], ctx["model"])
        counted = counted["tokens"] if isinstance(counted, dict) else counted
        assert counted == ctx["tokens"]
        # no entry ever disappears from the store
        exp = c.call("memman_session_export", sid)
        assert [e["id"] for e in exp["entries"]] == [e["id"] for e in added]
        for sm in exp["summaries"]:
            ex = c.call("memman_session_expand", sid, sm["id"])
            assert [e["id"] for e in ex["entries"]] == sm["entry_ids"]
        c.call("memman_session_delete", sid)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(step, min_size=2, max_size=30), budget=st.integers(60, 3000))
def test_timeline_extended_entry_by_entry_equals_one_built_at_once(thread_daemon, steps, budget):
    """The context timeline is extended as entries arrive (not rebuilt); a forced rebuild must
    decide exactly the same, tool pairs completed later included."""
    sid = f"t{next(_ids)}"
    with thread_daemon.client() as c:
        c.call("memman_session_open", sid, {"max_tokens": budget})
        first = None
        for kind, role, words, pin in steps:
            text = " ".join(words)
            if kind == "msg":
                e = c.call("memman_session_add", sid, {"role": role, "content": text, "pinned": pin})
            elif kind == "tool":
                calls = [{"id": f"{sid}-{k}-{text[:5]}-{len(words)}", "function": {"name": "t", "arguments": "{}"}}
                         for k in range(role)]
                e = c.call("memman_session_add", sid, {"type": "tool_call", "role": "assistant",
                                                       "content": "", "tool_calls": calls})
                c.call("memman_session_preview", sid, {})  # the call alone: pending
                for call in calls:
                    c.call("memman_session_add", sid, {"type": "tool_result", "role": "tool",
                                                       "content": text, "tool_call_id": call["id"]})
                    c.call("memman_session_preview", sid, {})
            else:
                e = c.call("memman_session_add", sid, {"type": "tool_result", "role": "tool",
                                                       "content": text or "x",
                                                       "tool_call_id": f"missing-{text}"})
            first = first or e
            c.call("memman_session_preview", sid, {})
        _vectors_settled(c)  # retrieval's score parts change as vectors arrive
        incremental = c.call("memman_session_preview", sid, {})
        # a pin and an unpin change nothing visible but force a rebuild from the whole log
        was = next(x["pinned"] for x in incremental["entries"] if x["entry_id"] == first["id"])
        c.call("memman_session_pin", sid, first["id"], not was)
        c.call("memman_session_pin", sid, first["id"], was)
        _vectors_settled(c)
        rebuilt = c.call("memman_session_preview", sid, {})
        assert incremental["entries"] == rebuilt["entries"]
        assert incremental["summaries"] == rebuilt["summaries"]
        c.call("memman_session_delete", sid)
