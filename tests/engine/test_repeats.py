"""A context answer sent again (``engine/window/repeats.py``), through the real daemon: the
same request of an unchanged session gets the same answer without a second build, and every
change a window reads — of this session, of another session of the user, of who may see
what — builds it again. ``check`` builds every answer sent again a second time and compares
the two, so a change that a counter missed fails here."""

from __future__ import annotations

import pytest

from memman_daemon.engine.window.repeats import StaleRepeat
from memman_daemon.scope import session_owner
from tests.helpers import running_daemon

MARCH = 1709373600.0  # 2024-03-02 10:00 UTC


def texts(ctx: dict) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


async def _session(c, sid: str, user: str, lines: list[str], at: float) -> list[int]:
    await c.session_open(sid, {"user_id": user})
    return [(await c.session_add(sid, {"role": ("user", "assistant")[k % 2], "content": t,
                                       "created_at": at + 60 * k}))["id"]
            for k, t in enumerate(lines)]


def _sent_again(d) -> int:
    return d.server.app.engine.builder.counters["sent_again"]


async def _settled(d, sid: str = "q") -> None:
    """The background work a window of ``sid`` reads is done (vectors, the timelines'
    follower for its owner)."""
    app = d.server.app
    assert await app.recall.drained(60)
    s = app.sessions.get(sid)
    for _ in range(400):
        if app.engine.timelines.state(session_owner(s)) is not None:
            return
        await app.engine.timelines.catch_up(s, None)
    raise AssertionError("the timelines did not settle")


async def test_the_same_request_again_is_the_same_answer_without_a_build() -> None:
    async with running_daemon() as d, d.client() as c:
        await _session(c, "p", "ana", ["The VPN gateway is vpn-2.corp.example.",
                                       "Noted, vpn-2 it is."], MARCH)
        await _session(c, "q", "ana", ["Which VPN gateway do I use?"], MARCH + 86400)
        await _settled(d)
        first = await c.session_context("q", {"max_tokens": 800})
        n = _sent_again(d)
        again = await c.session_context("q", {"max_tokens": 800})
        assert again == first and "vpn-2" in texts(again)
        assert _sent_again(d) == n + 1
        # another request of the same session is another answer; each keeps its own (an
        # agent's and its hook's, a TUI's peek)
        other = await c.session_context("q", {"max_tokens": 600})
        assert _sent_again(d) == n + 1 and other["budget"] == 600
        assert await c.session_context("q", {"max_tokens": 800}) == first
        assert await c.session_context("q", {"max_tokens": 600, "peek": True}) == other
        assert _sent_again(d) == n + 3
        assert (await c.call("memman_stats"))["session_engine"]["context"]["sent_again"] == n + 3


async def test_every_change_a_window_reads_builds_it_again() -> None:
    """Each change below is followed by the same request: with ``check`` on, an answer sent
    again that a fresh build would not give raises inside the daemon (the call fails)."""
    async with running_daemon() as d, d.client() as c:
        d.server.app.engine.builder.repeats.check = True
        past = await _session(c, "p", "ana", [
            "The VPN gateway is vpn-2.corp.example.", "Noted, vpn-2 it is.",
            "My locker code is 4417.", "Noted."], MARCH)
        await _session(c, "q", "ana", ["Which VPN gateway and locker code do I use?"],
                       MARCH + 86400)
        ask = {"max_tokens": 800}

        async def window() -> dict:
            # (a read that brings another session's timeline up to date keeps nothing: the
            # next one does, and the one after is sent again, and checked)
            await _settled(d)
            n = _sent_again(d)
            for _ in range(4):
                got = await c.session_context("q", ask)
                if _sent_again(d) > n:
                    return got
            raise AssertionError("the same request of an unchanged session was built again")

        ctx = await window()
        assert "vpn-2" in texts(ctx) and "4417" in texts(ctx)
        # another session of the user says something new
        await c.session_add("p", {"role": "user", "content": "The VPN gateway is now vpn-7.",
                                  "created_at": MARCH + 600})
        assert "vpn-7" in texts(await window())
        # this session: a new question, a pin
        await c.session_add("q", {"role": "user", "content": "And the printer queue?"})
        await window()
        await c.call("memman_session_pin", "q", (await c.session_get("q"))["entries"][0]["id"],
                     True)
        await window()
        # who may see what: an exclusion, a forget, a session taken out of recall, another
        # user's session
        out = await c.call("memman_recall_exclude", "q", past[2])
        assert out["excluded"]
        assert "4417" not in texts(await window())
        await c.call("memman_undo", {"session_id": "q"})
        assert "4417" in texts(await window())
        await c.call("memman_memory_forget", "ana", f"entry:p#{past[2]}")
        assert "4417" not in texts(await window())
        await c.session_open("p", {"user_id": "ana", "recall": False})
        assert "vpn-2" not in texts(await window())
        await c.session_open("p", {"user_id": "ana", "recall": True})
        assert "vpn-2" in texts(await window())
        await c.session_open("p", {"user_id": "bob", "reassign": True})
        assert "vpn-2" not in texts(await window())
        # what the user taught memman
        await c.call("memman_memory_learn", "ana", "vpn_rule", "always use the VPN gateway "
                     "of the nearest office", {})
        await window()
        # a change of the config file (reloaded in place)
        d.server.app.config.context.neighbours = not d.server.app.config.context.neighbours
        d.server.app.events.publish("stats", "config_reloaded", {"path": "test"})
        await window()


async def test_another_users_work_leaves_an_answer_sent_again() -> None:
    """Every counter is kept per owner (the user within the tenant): another user's adds,
    their analysis, vectors and events leave ana's answer as it was (sent again, and checked
    against a fresh build), where a change of ana's own other session builds it again. The
    same user name in another tenant is another owner."""
    async with running_daemon() as d, d.client() as c:
        app = d.server.app
        app.engine.builder.repeats.check = True
        await _session(c, "p", "ana", ["The VPN gateway is vpn-2.corp.example.",
                                       "Noted, vpn-2 it is."], MARCH)
        await _session(c, "q", "ana", ["Which VPN gateway do I use?"], MARCH + 86400)
        await _session(c, "b", "bob", ["The VPN gateway is vpn-9.corp.example."], MARCH)
        await c.session_open("t", {"user_id": "ana", "tenant_id": "acme"})
        await _settled(d)
        ask = {"max_tokens": 800}
        await c.session_context("q", ask)
        first = await c.session_context("q", ask)
        for k in range(3):  # bob works: adds, his own windows, his vectors and analysis
            await c.session_add("b", {"role": ("user", "assistant")[k % 2],
                                      "content": f"VPN gateway note {k}: vpn-{k}"})
            await c.session_context("b", ask)
            await c.session_add("t", {"role": "user", "content": f"acme VPN gateway {k}"})
            await _settled(d, "b")
            await _settled(d, "t")
            n = _sent_again(d)
            assert await c.session_context("q", ask) == first
            assert _sent_again(d) == n + 1
        assert "vpn-9" not in texts(first) and "acme" not in texts(first)
        # ana's other session says something new: built again, and it is in the answer
        await c.session_add("p", {"role": "user", "content": "The VPN gateway is now vpn-7.",
                                  "created_at": MARCH + 600})
        await _settled(d)
        n = _sent_again(d)
        got = await c.session_context("q", ask)
        assert _sent_again(d) == n and "vpn-7" in texts(got)


async def test_a_change_the_counters_miss_is_caught_by_the_check() -> None:
    """The check can fail: with the state read as a constant, a change is missed and the
    answer sent again differs from the fresh one."""
    async with running_daemon() as d, d.client() as c:
        past = await _session(c, "p", "ana", ["My locker code is 4417.", "Noted."], MARCH)
        await _session(c, "q", "ana", ["What is my locker code?"], MARCH + 86400)
        await _settled(d)
        rep = d.server.app.engine.builder.repeats
        rep.state = lambda s: 1  # a counter that never moves
        rep.check = True
        assert "4417" in texts(await c.session_context("q", {"max_tokens": 800}))
        await c.call("memman_recall_exclude", "q", past[0])
        with pytest.raises(Exception) as got:
            await c.session_context("q", {"max_tokens": 800})
        assert getattr(got.value, "code", None) == -32603
        with pytest.raises(StaleRepeat):
            rep.verify({"tokens": 1}, {"tokens": 2})  # type: ignore[typeddict-item]


def test_kept_answers_are_bounded_by_their_tokens_and_a_gone_session_drops_its_own() -> None:
    from types import SimpleNamespace

    from memman_daemon.engine.window import repeats as R

    rep = R.Repeats()
    rep.state = lambda s: 7
    sessions = [SimpleNamespace(id=f"s{k}") for k in range(40)]
    for s in sessions:
        rep.put(s, 7, ("ask",), {"tokens": 32_000})  # type: ignore[arg-type,typeddict-item]
    kept = [s for s in sessions if rep.get(s, ("ask",)) is not None]  # type: ignore[arg-type]
    assert len(kept) == R.TOKENS_KEPT // 32_000 and kept == sessions[-len(kept):]
    assert rep._tokens == 32_000 * len(kept)
    rep.put(kept[-1], 7, ("other",), {"tokens": 256})  # type: ignore[arg-type,typeddict-item]
    assert rep.get(kept[-1], ("other",)) is not None  # type: ignore[arg-type]
    rep.forget(kept[-1].id)  # both of its answers
    assert rep.get(kept[-1], ("other",)) is None  # type: ignore[arg-type]
    assert rep.get(kept[-1], ("ask",)) is None  # type: ignore[arg-type]
    left = [s for s in sessions if rep.get(s, ("ask",)) is not None]  # type: ignore[arg-type]
    assert len(left) == len(kept) - 2  # (the oldest gave way to the other answer)
    assert rep._tokens == 32_000 * len(left)
    # another request, or another state, is not the kept answer
    assert rep.get(kept[0], ("other",)) is None  # type: ignore[arg-type]
    rep.state = lambda s: 8
    assert rep.get(kept[0], ("ask",)) is None  # type: ignore[arg-type]


async def test_a_question_added_while_the_vectors_are_awaited_is_the_one_answered() -> None:
    """A user's message added while a build awaits its question's vectors is the question
    of that build (the state it then reads counts the message: an answer kept under it must
    be built for it). Found by the whole suite with every build paused (a TUI test)."""
    async with running_daemon() as d, d.client() as c, d.client() as other:
        app = d.server.app
        app.engine.builder.repeats.check = True
        await _session(c, "p", "ana", ["My locker code is 4417.", "Noted."], MARCH)
        await _session(c, "q", "ana", ["Which VPN gateway do I use?"], MARCH + 86400)
        await _settled(d)
        own = app.recall.question_vectors
        added: list[int] = []

        async def vectors(query: str, s=None):  # type: ignore[no-untyped-def]
            if not added:
                added.append((await other.session_add(
                    "q", {"role": "user", "content": "What is my locker code?"}))["id"])
            return await own(query, s)
        app.recall.question_vectors = vectors  # type: ignore[method-assign]
        got = await c.session_context("q", {"max_tokens": 800})
        assert added and got["query"] == "What is my locker code?" and "4417" in texts(got)
        # asked again: sent again only if it is what a fresh build gives (``check``)
        assert await c.session_context("q", {"max_tokens": 800}) == got
