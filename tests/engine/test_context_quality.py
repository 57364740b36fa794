"""The context window keeps what matters: facts survive tight budgets, through the real daemon.

Each test builds a session the way an agent would (messages, tool calls and results, finalized
cycles), offline (no LLM configured), and checks what ``memman_session_context`` sends.
"""

from __future__ import annotations

import json
import random
from typing import Any

from tests.engine.test_context import assert_valid_chat
from tests.helpers import running_daemon

# varied, realistic filler: none of it carries the facts the tests look for
TOPICS = ["the deploy pipeline", "our on-call rotation", "the billing dashboard", "log volume",
          "the nightly backup", "flaky integration tests", "the staging certificates",
          "the grafana alerts", "the database vacuum job", "the CDN cache hit ratio"]


def chatter(rng: random.Random, i: int) -> tuple[str, str]:
    t = rng.choice(TOPICS)
    q = f"Can you look into {t} again? Something felt slow this morning, round {i}."
    a = (f"I looked at {t}. Nothing stands out compared with yesterday: the graphs are within "
         f"their usual range and nobody reported problems in the channel. I will keep an eye "
         f"on it and tell you if that changes during the afternoon.")
    return q, a


async def cycle(c: Any, sid: str, question: str, answer: str, tool: str | None = None,
                result: str | None = None, n: int = 0) -> None:
    await c.session_add(sid, {"role": "user", "content": question})
    if tool:
        call_id = f"call_{n}"
        await c.session_add(sid, {"type": "tool_call", "role": "assistant", "content": "",
                                  "tool_calls": [{"id": call_id, "function": {
                                      "name": tool, "arguments": json.dumps({"n": n})}}]})
        await c.session_add(sid, {"type": "tool_result", "role": "tool", "name": tool,
                                  "tool_call_id": call_id, "content": result})
    await c.session_add(sid, {"role": "assistant", "content": answer})
    await c.session_finalize(sid, question, answer)


async def filler(c: Any, sid: str, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    for i in range(n):
        q, a = chatter(rng, i)
        if i % 4 == 1:
            rows = "\n".join(f"{rng.choice(TOPICS)}: ok ({rng.randint(1, 9)} checks)"
                             for _ in range(6))
            await cycle(c, sid, q, a, "status_report", rows, n=1000 + i)
        else:
            await cycle(c, sid, q, a)


def texts(ctx: dict[str, Any]) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


async def test_a_keyword_free_fact_from_cycle_one_comes_back_when_asked_about() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"max_tokens": 1500})
        await c.session_add("s", {"role": "system", "content": "You are an ops assistant."})
        await cycle(c, "s", "Context first: the box we use as staging is tarn-ops-7, the one "
                            "in the second rack.", "Understood, tarn-ops-7 is staging.")
        await filler(c, "s", 60)
        await c.session_add("s", {"role": "user",
                                  "content": "Which box did I say we use as staging?"})
        ctx = await c.session_context("s")
        assert ctx["pruned"] and ctx["tokens"] <= 1500
        # a history larger than the target share: the window fills at least that share
        assert ctx["history_tokens"] > 0.7 * 1500 and ctx["tokens"] >= 0.7 * 1500
        assert "tarn-ops-7" in texts(ctx)
        assert_valid_chat(ctx["messages"])
        # the preview says why: the entry is relevant to the question
        pv = await c.session_preview("s")
        first = next(r for r in pv["entries"] if r["role"] == "user")
        assert first["score_parts"]["relevance"] > 0


async def test_a_compressed_stretch_whose_originals_fit_is_sent_as_originals() -> None:
    async with running_daemon(compression={"auto_compress": False}) as d, d.client() as c:
        await c.session_open("s", {"max_tokens": 8000})
        await filler(c, "s", 12)
        out = await c.session_compact("s")
        assert out["summary"]["entry_ids"]
        first = (await c.session_expand("s", out["summary"]["id"]))["entries"][0]
        ctx = await c.session_context("s")
        assert first["content"] in [m["content"] for m in ctx["messages"]]
        assert not any(p["kind"] in ("linked_summary", "gap_summary") for p in ctx["parts"])
        # ...and where they do not fit, the stretch is summarized
        small = await c.session_context("s", {"max_tokens": 400})
        assert small["tokens"] <= 400
        assert small["gaps"] and small["dropped_entries"] > 0


async def test_a_superseded_value_is_never_the_only_one_shown() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"max_tokens": 8000})
        await cycle(c, "s", "The launch is planned for March 14, put it in the notes.",
                    "Noted: launch on March 14.")
        await filler(c, "s", 20, seed=3)
        await cycle(c, "s", "Update: the launch moved to April 2, marketing needs more time.",
                    "Okay, the launch is now April 2.")
        await cycle(c, "s", "Read the rollout config.", "pool_size is 64 now.", "read_config",
                    "pool_size: 48\nregion: eu-west-2", n=1)
        await filler(c, "s", 20, seed=4)
        await cycle(c, "s", "Read it again, the DBA changed it.", "Done.", "read_config",
                    "pool_size: 64\nregion: eu-west-2", n=2)
        await c.session_add("s", {"role": "user", "content": "When is the launch and what is "
                                                             "the pool size?"})
        for budget in (300, 600, 1000, 2000, 4000, 8000):
            ctx = await c.session_context("s", {"max_tokens": budget})
            t = texts(ctx)
            if "March 14" in t:
                assert "April 2" in t, budget
            if "pool_size: 48" in t:
                assert "pool_size: 64" in t, budget
            assert_valid_chat(ctx["messages"])
        # where both appear the old one is marked as replaced
        ctx = await c.session_context("s", {"max_tokens": 8000})
        old = next(m["content"] for m in ctx["messages"] if "March 14, put it" in m["content"])
        assert "[replaced later:" in old and "April 2" in old


async def test_the_system_prompt_survives_unpin_and_compaction() -> None:
    async with running_daemon(compression={"auto_compress": False, "recent_window": 4}) as d, \
            d.client() as c:
        await c.session_open("s", {"max_tokens": 8000})
        sp = await c.session_add("s", {"role": "system", "content": "You are Relay. Never "
                                                                   "print secrets in full."})
        await c.session_pin("s", sp["id"], True)
        await c.session_pin("s", sp["id"], False)  # one keystroke in a TUI
        await filler(c, "s", 10)
        out = await c.session_compact("s")
        assert out["summary"] and sp["id"] not in out["summary"]["entry_ids"]
        got = await c.session_get("s")
        assert next(e for e in got["entries"] if e["id"] == sp["id"])["summary_id"] is None
        for budget in (200, 8000):
            ctx = await c.session_context("s", {"max_tokens": budget})
            assert ctx["messages"][0]["content"].startswith("You are Relay.")
            assert ctx["parts"][0]["kind"] == "system_prompt"


async def test_a_cached_result_already_in_the_log_is_sent_once() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"max_tokens": 4000})
        result = "Oslo: rain, 7 °C, wind 5 m/s from the south-west"
        await cycle(c, "s", "Weather in Oslo?", "Rain and 7 °C.", "weather", result, n=1)
        await c.cache_put("s", "weather", {"city": "Oslo"}, result, {"duration": 3})
        await c.cache_put("s", "weather", {"city": "Bergen"}, "Bergen: sun, 12 °C",
                          {"duration": 3})
        await c.session_add("s", {"role": "user", "content": "And should I bring an umbrella?"})
        ctx = await c.session_context("s")
        contents = [m.get("content") for m in ctx["messages"]]
        assert contents.count(result) == 1
        assert contents.count("Bergen: sun, 12 °C") == 1  # not in the log: it rides along
        assert_valid_chat(ctx["messages"])
        assert ctx["tokens"] == (await c.count_tokens(ctx["messages"], ctx["model"]))["tokens"]


async def test_the_fallback_summary_of_a_stretch_keeps_its_identifiers() -> None:
    async with running_daemon(compression={"auto_compress": False}) as d, d.client() as c:
        await c.session_open("s", {"max_tokens": 8000})
        await cycle(c, "s", "Which host runs the ledger primary?", "It is pg-ledger-01.corp.lan.",
                    "read_file", "ledger:\n  host: pg-ledger-01.corp.lan\n  port: 5432\n"
                                 "  pool_size: 64\n  signing_key: kid-5521-b", n=1)
        await filler(c, "s", 14)
        out = await c.session_compact("s")
        content = out["summary"]["content"]
        assert out["summary"]["source"] == "fallback"
        for ident in ("pg-ledger-01.corp.lan", "kid-5521-b", "pool_size: 64"):
            assert ident in content, ident
        # seed 004's header stays first: counts and tools
        assert "entries" in content.splitlines()[1] and "read_file" in content
        # about the configured ratio of the original, not a count-only line
        assert out["summary"]["tokens"] <= 0.4 * out["summary"]["original_tokens"]


async def test_relevance_by_meaning_brings_back_a_fact_phrased_differently() -> None:
    """With the local embedder (the default), an entry that shares no word with the question
    still gets a relevance part; with embeddings off, only shared words count."""
    fact = "Please reply in French from now on, my manager reads these."
    question = "What language should you answer in?"
    for provider, expect in (("local", True), ("none", False)):
        async with running_daemon(embeddings={"provider": provider}) as d, d.client() as c:
            await c.session_open("s", {"max_tokens": 8000})
            await cycle(c, "s", fact, "Noted.")
            await filler(c, "s", 30)
            await c.session_add("s", {"role": "user", "content": question})
            pv = await c.session_preview("s", {"max_tokens": 1200})
            row = next(r for r in pv["entries"] if r["role"] == "user")
            assert (row["score_parts"]["relevance"] > 0) is expect, provider
            ctx = await c.session_context("s", {"max_tokens": 1200})
            assert ctx["tokens"] <= 1200
            if expect:
                assert "reply in French" in texts(ctx)
