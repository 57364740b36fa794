"""A long retrieval lets the other clients in before the selection (``ContextBuilder.build``'s
pause), through the real daemon. Whatever another client does meanwhile that changes who may
see what — an exclusion, a forget, the session moved to another user, taken out of recall or
deleted — builds the window
again from the start; what leaves the ranking as good as it was (another user's add) does
not. The pause is forced on every build here (``PAUSE_AFTER_S = 0``) and the other client's
call is made at the pause itself, over its own connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from memman_daemon.engine.window import builder as B
from tests.helpers import running_daemon

MARCH = 1709373600.0  # 2024-03-02 10:00 UTC


def texts(ctx: dict) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


async def _setup(c: Any) -> list[int]:
    await c.session_open("p", {"user_id": "ana"})
    ids = [(await c.session_add("p", {"role": r, "content": t, "created_at": MARCH + 60 * k}))
           ["id"] for k, (r, t) in enumerate([
               ("user", "My locker code is 4417."), ("assistant", "Noted, I will keep it."),
               ("user", "The VPN gateway is vpn-2.corp.example."),
               ("assistant", "Noted, vpn-2 it is.")])]
    await c.session_open("q", {"user_id": "ana"})
    await c.session_add("q", {"role": "user", "content": "What is my locker code, and which "
                                                         "VPN gateway do I use?"})
    return ids


def _at_pause(d: Any, act: Callable[[], Awaitable[Any]]) -> list[int]:
    """The next pause of a build runs ``act`` (once); the list counts the pauses."""
    b = d.server.app.engine.builder
    seen: list[int] = []
    own = b._pause

    async def pause() -> None:
        seen.append(1)
        if len(seen) == 1:
            await act()
        await own()
    b._pause = pause
    return seen


@pytest.mark.parametrize("change", ["exclude", "forget", "reassign", "recall_off", "delete"])
async def test_who_may_see_what_changed_at_the_pause_builds_the_window_again(
        change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(B, "PAUSE_AFTER_S", 0.0)
    async with running_daemon() as d, d.client() as c, d.client() as other:
        ids = await _setup(c)
        assert await d.server.app.recall.drained(60)
        assert "4417" in texts(await c.session_context("q", {"max_tokens": 800}))
        b = d.server.app.engine.builder
        acts = {
            "exclude": lambda: other.call("memman_recall_exclude", "q", ids[0]),
            "forget": lambda: other.call("memman_memory_forget", "ana", f"entry:p#{ids[0]}"),
            "reassign": lambda: other.session_open("p", {"user_id": "bob", "reassign": True}),
            "recall_off": lambda: other.session_open("p", {"user_id": "ana", "recall": False}),
            "delete": lambda: other.call("memman_session_delete", "p"),
        }
        seen = _at_pause(d, acts[change])
        again = b.counters["built_again"]
        got = texts(await c.session_context("q", {"max_tokens": 700}))
        assert seen and b.counters["built_again"] == again + 1
        assert "4417" not in got
        if change in ("reassign", "recall_off", "delete"):  # the whole session left recall
            assert "vpn-2" not in got
        else:
            assert "vpn-2" in got


async def test_another_users_add_at_the_pause_leaves_the_build_going_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(B, "PAUSE_AFTER_S", 0.0)
    async with running_daemon() as d, d.client() as c, d.client() as other:
        await _setup(c)
        await other.session_open("b", {"user_id": "bob"})
        assert await d.server.app.recall.drained(60)
        b = d.server.app.engine.builder
        seen = _at_pause(d, lambda: other.session_add(
            "b", {"role": "user", "content": "My locker code is 9999."}))
        again = b.counters["built_again"]
        got = texts(await c.session_context("q", {"max_tokens": 700}))
        assert seen and b.counters["built_again"] == again
        assert "4417" in got and "9999" not in got


async def test_a_row_of_the_user_indexed_at_the_pause_builds_the_window_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows indexed meanwhile are in none of the ranking's arrays (sized to the rows it
    ranked): the build starts again (found with the pause forced through the whole suite: a
    completing turn's row past the ranked ones was read from them, an IndexError)."""
    monkeypatch.setattr(B, "PAUSE_AFTER_S", 0.0)
    async with running_daemon() as d, d.client() as c, d.client() as other:
        await _setup(c)
        assert await d.server.app.recall.drained(60)
        b = d.server.app.engine.builder

        async def add_and_index() -> None:
            await other.session_add("p", {"role": "user", "content": "My bike lock is 8812."})
            await d.server.app.recall.settle_sliced()
        seen = _at_pause(d, add_and_index)
        again = b.counters["built_again"]
        got = texts(await c.session_context("q", {"max_tokens": 700}))
        assert seen and b.counters["built_again"] == again + 1
        assert "4417" in got
