"""A value changed in casual words reaches the model: the same speaker coming back to a
subject later ("booked the farmhouse in the Douro valley" / weeks later "the farmhouse in the
Douro valley cancelled on us, got the old mill instead") follows the earlier turn up in the
ranking (``RecallIndex.follow_ups``), in the session itself and from a fresh session of the
same user — and never across the scope: a private turn or another user's follows nothing up.
A real daemon on a real socket and SQLite file, the shipped MiniLM."""

from __future__ import annotations

from typing import Any

import pytest

from memman_daemon.recall import index as recall_index
from tests.helpers import embedded_together, running_daemon

DAY = 86400.0
START = 1709373600.0
BANTER = [
    "the cat next door is sitting on my car again", "lol", "brb making tea",
    "my train is delayed AGAIN", "send pics",
    "who's watching the match tonight", "voting for pizza. always pizza", "same tbh",
    "the heating bill this month, i can't", "haha", "wait what", "ugh relatable",
    "just burnt toast. twice.", "this group chat is chaos", "new phone, who dis",
]
BOOKED = ("Rosalind: booked a farmhouse in the Douro valley for the reunion! i put down the "
          "deposit, settle up with me whenever")
IDEAS = "Quinn: reunion ideas: a farmhouse in the Douro valley or a lake house in Masuria?"
MOVED = ("Rosalind: bad news, the farmhouse in the Douro valley cancelled on us. good news, i "
         "got an old mill in the Ardennes instead, same weekend, deposit carried over")
#: the same speaker back on the booking's subject, in its own words, changing nothing
REPEAT = ("Rosalind: still buzzing about the farmhouse in the Douro valley, the deposit is "
          "paid and the countdown is on")
QUESTION = "Where is the reunion happening now?"
NAMES = ("Rosalind", "Quinn", "Pavlo")


def _sessions(private: str = "", repeat: bool = False) -> list[list[tuple[str, dict]]]:
    """Three sessions of a group chat weeks apart: the ideas, the booking, the move
    (``private``: that line is logged private; ``repeat``: the booking's session also has
    ``REPEAT``, later)."""
    out: list[list[tuple[str, dict]]] = []
    for k, news in enumerate((IDEAS, BOOKED, MOVED)):
        turns = []
        for j in range(12):
            who = NAMES[(j + k) % 3]
            turns.append((f"{who}: {BANTER[(j * 7 + k) % len(BANTER)]}", {}))
        turns.insert(5, (news, {"private": True} if news == private else {}))
        if repeat and news == BOOKED:
            turns.insert(10, (REPEAT, {}))
        out.append(turns)
    return out


async def _said(c: Any, *, across: bool, private: str, other_user: bool,
                repeat: bool = False) -> float:
    """The three sessions logged (one session, or ``across``: one each); the time after."""
    at = START
    for k, turns in enumerate(_sessions(private, repeat)):
        sid = f"chat{k}" if across else "chat"
        if k == 0 or across:
            user = "pavlo"
            if other_user and turns[5][0] == MOVED:
                user = "someone-else"
            await c.session_open(sid, {"user_id": user})
        for text, meta in turns:
            at += 300
            entry: dict[str, Any] = {"role": "user" if text.startswith("Pavlo")
                                     else "assistant", "content": text, "created_at": at}
            if meta:
                entry["metadata"] = meta
            await c.session_add(sid, entry)
        at += 20 * DAY
    return at


async def _window(budget: int, *, across: bool, follow: bool = True,
                  private: str = "", other_user: bool = False, repeat: bool = False) -> str:
    """The window's text for the question within ``budget`` tokens: asked in the chat's own
    session, or (``across``) from a fresh session of the same user."""
    mp = pytest.MonkeyPatch()
    if not follow:
        mp.setattr(recall_index, "FOLLOW_TOP", 0)
    try:
        async with running_daemon() as d, d.client() as c:
            async with embedded_together(d.server.app):
                at = await _said(c, across=across, private=private, other_user=other_user,
                                 repeat=repeat)
            assert await d.server.app.recall.drained(60)
            if across:
                await c.session_open("ask", {"user_id": "pavlo"})
                await c.session_add("ask", {"role": "user", "content": QUESTION,
                                            "created_at": at})
                got = await c.call("memman_session_context", "ask", {"max_tokens": budget})
            else:
                got = await c.call("memman_session_context", "chat",
                                   {"max_tokens": budget, "query": QUESTION})
            assert got["tokens"] <= budget
            return "\n".join(m["content"] for m in got["messages"]
                             if isinstance(m.get("content"), str))
    finally:
        mp.undo()


BUDGET = 230  #: room for a few lines: the question's words find the booking and the ideas


async def _index_of_asker(d: Any, c: Any) -> tuple[Any, Any, dict[str, int]]:
    """pavlo's session "ask", opened: the recall index, his corpus and each text's row."""
    await c.session_open("ask", {"user_id": "pavlo"})
    rec = d.server.app.recall
    await rec.loaded()
    rec.settle()
    corpus = rec.corpus_of(d.server.app.sessions.get("ask"))
    return rec, corpus, {t: i for i, t in enumerate(corpus.texts[:corpus.n])}


@pytest.mark.parametrize("across", [False, True], ids=["one session", "across sessions"])
async def test_a_later_turn_of_the_same_speaker_on_the_subject_follows_it_up(
        across: bool) -> None:
    """The move names neither "reunion" nor "where": ranked by the question it is far below
    the booking it changes; as the booking's follow-up it is sent right after it."""
    assert MOVED not in await _window(BUDGET, across=across, follow=False)
    got = await _window(BUDGET, across=across)
    assert BOOKED in got and MOVED in got


async def test_a_private_or_other_users_turn_follows_nothing_up() -> None:
    """Asked from another session, a private turn is outside the caller's scope: a private
    booking is not sent and lifts no follow-up of its own; a private move is not sent;
    another user's turn is in no list at all. Whether the move is sent anyway by its own rank
    is a near tie at this budget (the embedder's batches move it), so what the private
    booking lends is read from the index itself, over the caller's rows."""
    got = await _window(BUDGET, across=True, private=BOOKED)
    assert BOOKED not in got
    got = await _window(BUDGET, across=True, private=MOVED)
    assert BOOKED in got and MOVED not in got
    got = await _window(BUDGET, across=True, other_user=True)
    assert BOOKED in got and MOVED not in got


async def test_the_follow_up_lift_reads_only_the_callers_rows() -> None:
    """``RecallIndex.follow_ups`` over a ranking where the booking is best and the move far
    down: with the booking among the rows the caller may see, the move is lifted to just
    below it; with the booking private (outside the scope's mask), the move keeps its own
    score, exactly."""
    import numpy as np

    from memman_daemon.scope import Caller, across_mask

    async with running_daemon() as d, d.client() as c:
        await _said(c, across=True, private=BOOKED, other_user=False)
        rec, corpus, row = await _index_of_asker(d, c)
        booked, moved, ideas = row[BOOKED], row[MOVED], row[IDEAS]
        fused = np.zeros(corpus.n)
        fused[booked], fused[ideas], fused[moved] = 1.0, 0.9, 0.01
        seen = across_mask(rec, corpus, Caller("pavlo", session_id="ask").asking(None))
        assert not seen[booked] and seen[moved] and seen[ideas]  # private: outside the scope
        assert rec.follow_ups(corpus, fused, seen)[moved] == 0.01  # it lends nothing
        seen[booked] = True  # as if it were the caller's to see: the move follows it up
        assert rec.follow_ups(corpus, fused, seen)[moved] > 0.9


@pytest.mark.parametrize("across", [False, True], ids=["one session", "across sessions"])
async def test_an_update_is_lifted_and_the_subject_said_again_is_not(across: bool) -> None:
    """The same speaker comes back to the booking twice: once in the same terms ("still
    buzzing about the farmhouse in the Douro valley"), once with a new value and a change
    said (the mill in the Ardennes, "instead"). Both hold the booking's rare words; only the
    update is lifted to just below it. In the index, exactly: the repeat keeps its own
    score; in the window, the repeat gives the update no competition for the room."""
    import numpy as np

    from memman_daemon.scope import Caller, across_mask

    async with running_daemon() as d, d.client() as c:
        await _said(c, across=True, private="", other_user=False, repeat=True)
        rec, corpus, row = await _index_of_asker(d, c)
        booked, moved, again, ideas = row[BOOKED], row[MOVED], row[REPEAT], row[IDEAS]
        fused = np.zeros(corpus.n)
        fused[booked], fused[ideas], fused[moved], fused[again] = 1.0, 0.9, 0.01, 0.02
        seen = across_mask(rec, corpus, Caller("pavlo", session_id="ask").asking(None))
        lifted = rec.follow_ups(corpus, fused, seen)
        assert lifted[moved] > 0.9 and lifted[again] == 0.02
    got = await _window(BUDGET, across=across, repeat=True)
    assert BOOKED in got and MOVED in got


def test_what_a_turn_says_leaves_its_stamp_and_name_out() -> None:
    """The words compared are what a turn says: the same sign-off a month later, under
    another stamp, is a repeat (its day and minute were rare words that matched a turn of the
    same day); a chat export's stamp before the name is left out too. An update names a new
    value, negates, or says a change; the subject said again does none of these."""
    from memman_daemon.recall.updates import changes, said

    a = said("[Fri 16 Aug 2024 08:56] Rosa: That's all for now, thanks a lot.")
    b = said("[Sat 21 Sep 2024 16:36] Rosa: That's all for now, thanks a lot.")
    assert a.terms == b.terms and not changes(a, b, a.terms, 1)
    assert said("12/06/2023, 15:05 - Ravi: it's the Fox and Hound now").terms == {
        "fox", "hound", "now"}
    booked = said(BOOKED)
    subject = frozenset({"farmhouse", "douro", "valley", "deposit"})
    assert changes(booked, said(MOVED), subject, 2)
    assert not changes(booked, said(REPEAT), subject, 2)
    assert changes(said("Liesel: interview at Northwind Ferries tomorrow, pray for me"),
                   said("Liesel: Northwind Ferries said no but the library took me"),
                   frozenset({"northwind", "ferry"}), 2)
