"""Every option of the window is real, through the real daemon: a context request with an
undeclared option is refused naming it; the importance score of the keyword-scoring design
(``[scoring] profile = "keyword"``, its weights and keywords) and the prune and target
thresholds each change what a window sends; a config file that still sets a removed option
loads with a warning naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from memman.config import Config
from memman.errors import InvalidParams
from tests.helpers import running_daemon, short_tmpdir

T0 = 1_700_000_000.0
#: an agent's early tool failures, as the keyword-scoring design saw tool output ("[Tool:")
EARLY = ["[Tool: build] failed: error in step compile (missing header foo.h).",
         "[Tool: deploy] failed with exception TimeoutError after 30 s.",
         "[Tool: migrate] error: migration 0042 failed on table orders."]
#: the agent's own turns after them: half carry the design's keywords (plan, task), half are
#: chit-chat
FILLER = ("Still working through the plan and the task, nothing new to report yet.",
          "The weather was mild and we talked about our lunch for a while.")


async def _no_question_session(c, sid: str) -> None:
    """A session with no user message (an agent's own log): the window has no question,
    nothing for retrieval to rank, so only importance orders what the budget keeps."""
    await c.session_open(sid, {"user_id": "u"})
    await c.session_add(sid, {"role": "system", "content": "You are a build agent.",
                              "created_at": T0})
    for k, text in enumerate(EARLY):
        await c.session_add(sid, {"role": "assistant", "content": text,
                                  "created_at": T0 + 1 + k})
    for k in range(60):
        await c.session_add(sid, {"role": "assistant", "content": FILLER[k % 2],
                                  "created_at": T0 + 10 + k})


async def _window(sid: str = "s", budget: int = 1000, **sections) -> list[str]:
    async with running_daemon(compression={"auto_compress": False}, **sections) as d, \
            d.client() as c:
        await _no_question_session(c, sid)
        ctx = await c.session_context(sid, {"max_tokens": budget, "peek": True})
        assert ctx["tokens"] <= budget
        return [m.get("content") or "" for m in ctx["messages"]]


def _early_kept(msgs: list[str]) -> int:
    return sum(1 for m in msgs if any(e in m for e in EARLY))


async def test_keyword_profile_keeps_the_early_errors_the_default_window_leaves_out() -> None:
    default = await _window()
    keyword = await _window(scoring={"profile": "keyword"})
    assert keyword != default
    assert _early_kept(keyword) >= _early_kept(default)
    assert _early_kept(keyword) == len(EARLY)  # error/failed are the design's keywords


async def test_the_keyword_profile_s_keywords_and_weights_change_the_window() -> None:
    base = await _window(scoring={"profile": "keyword"})
    # no keyword in the early turns any more: they lose their content part
    other_words = await _window(scoring={"profile": "keyword",
                                         "important_keywords": ["zebra"]})
    assert other_words != base
    assert _early_kept(other_words) < _early_kept(base)
    # recency alone: the newest turns, as a plain window would
    recency_only = await _window(scoring={"profile": "keyword", "recency_weight": 1.0,
                                          "role_weight": 0.0, "content_weight": 0.0})
    assert recency_only != base and _early_kept(recency_only) == 0


async def test_the_salience_profile_s_weights_change_the_window() -> None:
    base = await _window()
    weights = {"recency": 0.0, "role": 0.0, "content": 1.0, "salience": 0.0,
               "relevance": 0.0, "superseded": 0.0}
    assert await _window(scoring={"weights": weights}) != base


async def test_target_usage_is_the_share_a_window_with_no_question_fills() -> None:
    async def tokens(target: float) -> int:
        async with running_daemon(compression={"auto_compress": False},
                                  context={"target_usage": target}) as d, d.client() as c:
            await _no_question_session(c, "s")
            ctx = await c.session_context("s", {"max_tokens": 1000, "peek": True})
            return ctx["tokens"]

    # the design's conservative, balanced and aggressive targets
    low, mid, high = await tokens(0.5), await tokens(0.7), await tokens(0.8)
    assert low < mid < high <= 1000
    assert low <= 0.5 * 1000 + 40  # the system prompt and the reply priming ride on top


async def test_prune_threshold_decides_whether_the_whole_log_is_sent() -> None:
    async def pruned(threshold: float, warn: float) -> bool:
        async with running_daemon(compression={"auto_compress": False},
                                  context={"prune_threshold": threshold,
                                           "warn_threshold": warn}) as d, d.client() as c:
            await c.session_open("s", {"user_id": "u"})
            for k in range(30):
                await c.session_add("s", {"role": ("user", "assistant")[k % 2],
                                          "content": f"{FILLER[k % 2]} ({k})"})
            full = (await c.session_context("s", {"max_tokens": 100_000, "peek": True}))
            budget = int(full["tokens"] / 0.7)  # the log is ~70 % of the budget
            ctx = await c.session_context("s", {"max_tokens": budget, "peek": True})
            return bool(ctx["pruned"])

    assert await pruned(0.6, 0.5) is True  # conservative: prunes at 60 %
    assert await pruned(0.9, 0.6) is False  # aggressive: keeps all up to 90 %


async def test_an_undeclared_context_option_is_refused_naming_it() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s")
        for method in (c.session_context, c.session_preview):
            with pytest.raises(InvalidParams, match="'opts.no_such_option': unknown key"):
                await method("s", {"no_such_option": 1})
        with pytest.raises(InvalidParams, match=r"'opts.tools\[0\].function.name'"):
            await c.session_context("s", {"tools": [{"type": "function", "function": {}}]})
        with pytest.raises(InvalidParams, match="'opts.recall'"):
            await c.session_context("s", {"recall": "yes"})
        with pytest.raises(InvalidParams, match="'opts.query'"):
            await c.session_context("s", {"query": 5})
        # the declared ones pass
        await c.session_context("s", {"query": "x", "recall": False, "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})


def test_a_removed_option_in_a_config_file_is_a_warning_naming_it() -> None:
    root = short_tmpdir()
    f = Path(root) / "config.toml"
    f.write_text("[context]\nfill_usage = 0.9\nmax_tokens = 4000\n")
    cfg = Config.load(f)
    assert cfg.context.max_tokens == 4000
    assert any("[context] fill_usage" in w and "no longer means anything" in w
               for w in cfg.warnings)
