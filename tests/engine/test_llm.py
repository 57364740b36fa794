"""The summarizer's LLM path: the real openai client against the loopback server."""

from __future__ import annotations

import pytest

from tests.engine.conftest import llm_config
from tests.engine.test_context import FILLER, add, tool_pair
from tests.helpers import running_daemon
from tests.llm_server import LLMServer


async def _compact(c) -> dict:
    await c.call("memman_session_open", "s", {})
    for i in range(20):
        # "error" in prose is not an error: only a tool result with an error line counts
        await add(c, "s", f"{FILLER} {i} error in step {i}" if i == 3 else f"{FILLER} {i}")
        if i == 5:
            await tool_pair(c, "s", i, "Traceback (most recent call last):\nValueError: bad step")
    return await c.call("memman_session_compact", "s")


async def test_good_answer_is_used_and_counted(llm_key):
    with LLMServer(reply="Topics: chatter. Decisions: none. Errors: step 3.") as srv:
        async with running_daemon(config=llm_config(srv, compression={"auto_compress": False,
                                                                    "llm_deadline_s": 5.0})) as d, \
                d.client() as c:
            r = await _compact(c)
            assert r["summary"]["source"] == "llm"
            assert "Topics: chatter" in r["summary"]["content"]
            req = srv.chat_requests()[-1]
            assert req["model"] == "gpt-4o-mini"
            prompt = req["messages"][0]["content"]
            for word in ("topics", "decisions", "Tools used", "errors", "Open tasks"):
                assert word.lower() in prompt.lower()
            st = (await c.call("memman_stats"))["summarizer"]
            assert st["calls"] == 1 and st["ok"] == 1 and st["failures"] == 0
            assert st["prompt_tokens"] > 0 and st["completion_tokens"] > 0
            assert st["latency_total_s"] >= 0


@pytest.mark.parametrize("mode,counter", [("500", "http_errors"), ("malformed", "malformed"),
                                          ("empty", "malformed")])
async def test_failures_fall_back(llm_key, mode, counter):
    with LLMServer(mode=mode) as srv:
        async with running_daemon(config=llm_config(srv, compression={"auto_compress": False,
                                                                    "llm_deadline_s": 5.0})) as d, \
                d.client() as c:
            r = await _compact(c)
            assert r["summary"]["source"] == "fallback"
            assert "[Previous conversation summary]" in r["summary"]["content"]
            assert "1 error encountered" in r["summary"]["content"]
            st = (await c.call("memman_stats"))["summarizer"]
            assert st[counter] == 1 and st["failures"] == 1 and st["fallbacks"] == 1


async def test_hang_past_timeout_falls_back(llm_key):
    with LLMServer(mode="hang", hang_s=5) as srv:
        async with running_daemon(config=llm_config(srv, timeout_s=0.3, compression={"auto_compress": False, "llm_deadline_s": 5.0})) as d, \
                d.client() as c:
            r = await _compact(c)
            assert r["summary"]["source"] == "fallback"
            st = (await c.call("memman_stats"))["summarizer"]
            assert st["timeouts"] == 1


async def test_the_window_never_asks_the_llm(llm_key):
    """Retrieval under a budget needs no LLM at read time: a hung LLM costs a context request
    nothing, and no chat request is made for it."""
    with LLMServer(mode="hang", hang_s=1.0) as srv:
        async with running_daemon(config=llm_config(srv, timeout_s=10, context={"llm_deadline_s": 0.05}),
                                  compression={"auto_compress": False}) as d, d.client() as c:
            await c.call("memman_session_open", "s", {"max_tokens": 2000})
            for i in range(80):
                await add(c, "s", f"ticket OPS-{1000 + i} is assigned to team {i % 7}, see the "
                                  "runbook", role="assistant")
            r = await c.call("memman_session_context", "s", {"query": "who has OPS-1042?"})
            assert r["pruned"] and r["tokens"] <= 2000
            assert any("OPS-1042" in (m["content"] or "") for m in r["messages"])
            assert srv.chat_requests() == []


async def test_openai_env_vars_are_honoured(monkeypatch):
    with LLMServer(reply="env summary") as srv:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        from tests.helpers import make_config, short_tmpdir
        cfg = make_config(short_tmpdir(), compression={"auto_compress": False,
                                                       "llm_deadline_s": 5.0})
        cfg.llm.api_key_env = "OPENAI_API_KEY"
        async with running_daemon(config=cfg) as d, d.client() as c:
            r = await _compact(c)
            assert r["summary"]["source"] == "llm" and "env summary" in r["summary"]["content"]


async def test_no_key_means_fallback_without_calls():
    async with running_daemon(compression={"auto_compress": False}) as d, d.client() as c:
        r = await _compact(c)
        assert r["summary"]["source"] == "fallback"
        st = (await c.call("memman_stats"))["summarizer"]
        assert st["calls"] == 0 and st["no_key"] == 1 and not st["available"]


async def test_llm_compresses_the_rolling_summary(llm_key):
    with LLMServer(reply="condensed history") as srv:
        async with running_daemon(config=llm_config(srv, cycle={"llm_deadline_s": 5.0})) as d, \
                d.client() as c:
            await c.call("memman_session_open", "s", {})
            for i in range(25):
                r = await c.call("memman_session_finalize", "s", f"q{i} " + "x" * 400, "a" * 300)
            assert r["state"]["llm_compressions"] >= 1
            rep = await c.call("memman_session_report", "s")
            assert "LLM compressions: " in rep["text"]


async def test_condensing_an_answer_uses_the_scratchpad(llm_key):
    with LLMServer(reply="Short answer.") as srv:
        async with running_daemon(config=llm_config(srv, cycle={"llm_deadline_s": 5.0})) as d, \
                d.client() as c:
            await c.call("memman_session_open", "s", {})
            await c.call("memman_scratchpad_write", "s", "Revenue is reported in EUR.", {})
            await c.call("memman_session_finalize", "s", "What was revenue?", "Revenue rose. " * 80)
            prompt = srv.chat_requests()[-1]["messages"][0]["content"]
            assert prompt.startswith("Condense the following text")
            assert "Notes the agent kept (scratchpad):\n- Revenue is reported in EUR." in prompt


async def test_emergency_counters():
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {"max_tokens": 300})
        for i in range(30):
            await add(c, "s", f"{FILLER} {i}, ticket OPS-{1000 + i}", role="assistant")
        r = await c.call("memman_session_context", "s", {})
        assert r["band"] == "emergency" and r["tokens"] <= 300
        st = await c.call("memman_stats")
        assert st["session_engine"]["context"]["emergencies"] == 1
        assert sum(g["count"] for g in r["gaps"]) == r["dropped_entries"] > 0


async def test_a_config_reload_points_the_summarizer_at_the_new_endpoint(llm_key):
    import asyncio

    from memman.config import Config
    from tests.helpers import short_tmpdir

    with LLMServer(reply="From the first.") as one, LLMServer(reply="From the second.") as two:
        root = short_tmpdir()
        cfg_file = root / "config.toml"
        body = ('[llm]\nbase_url = "{url}"\napi_key_env = "MEMMAN_TEST_LLM_KEY"\n'
                '[compression]\nauto_compress = false\nllm_deadline_s = 5.0\n')
        cfg_file.write_text(body.format(url=one.base_url))
        cfg = Config.load(cfg_file, socket=root / "s" / "m.sock", data_dir=root / "data")
        async with running_daemon(root, config=cfg) as d, d.client() as c:
            assert (await _compact(c))["summary"]["content"].endswith("From the first.")
            cfg_file.write_text(body.format(url=two.base_url))
            for _ in range(100):
                if d.app.config.llm.base_url == two.base_url:
                    break
                await asyncio.sleep(0.05)
            for i in range(20):
                await add(c, "s", f"{FILLER} more {i}")
            r = await c.call("memman_session_compact", "s")
            assert r["summary"]["content"].endswith("From the second.")
            assert len(two.chat_requests()) == 1
