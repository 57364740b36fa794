"""Recall across sessions and retrieval under a budget, through the real daemon: what a user
said in one session comes back in another, dated and sourced; private and deleted entries
never do; corrections supersede; the window never exceeds its budget; context equals preview."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.engine.test_context import assert_valid_chat
from tests.helpers import running_daemon

MARCH = 1709373600.0  # 2024-03-02 10:00 UTC
FILLER = ["How was the weekend?", "Busy, the usual errands and a long walk.",
          "Did you see the match last night?", "No, I fell asleep before half time.",
          "Lunch on Thursday?", "Sure, the usual place at noon."]


def texts(ctx: dict) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


async def _session(c, sid: str, user: str, lines: list[tuple[str, str]], at: float) -> None:
    await c.session_open(sid, {"user_id": user})
    for k, (role, content) in enumerate(lines):
        await c.session_add(sid, {"role": role, "content": content, "created_at": at + 60 * k})


async def test_a_fact_from_session_one_is_in_session_three_with_its_date_and_source() -> None:
    async with running_daemon() as d, d.client() as c:
        await _session(c, "s1", "ana", [
            ("user", "My cat Miso is allergic to chicken, please remember that."),
            ("assistant", "Noted: Miso must not eat chicken."),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(12)]], MARCH)
        await _session(c, "s2", "ana", [(("user", "assistant")[k % 2], FILLER[k % 6])
                                        for k in range(12)], MARCH + 86400 * 7)
        await _session(c, "other", "bob", [("user", "My dog Rex is allergic to beef.")],
                       MARCH)
        await c.session_open("s3", {"user_id": "ana"})
        await c.session_add("s3", {"role": "user", "content": "Which food must my cat avoid?"})
        assert await d.server.app.recall.drained(60)
        ctx = await c.session_context("s3", {"max_tokens": 1000})
        body = texts(ctx)
        assert "Miso is allergic to chicken" in body
        # its date and source session, said once above that session's lines
        assert "[2024-03-02 · session s1]\n" in body
        assert "Rex" not in body  # another user's sessions are never recalled
        rec = [p for p in ctx["parts"] if p["kind"] == "recalled"]
        assert rec and {s["session_id"] for s in rec[0]["sources"]} <= {"s1", "s2"}
        # the room is filled in rank order: the facts rank first, small talk after them
        best = sorted(ctx["recalled"], key=lambda r: -r["fused"])
        assert {"Miso" in r["text"] for r in best[:2]} == {True}
        assert all(r["session_id"] == "s1" for r in best[:2])
        assert ctx["tokens"] <= 1000 and not ctx["over_budget"]
        assert_valid_chat(ctx["messages"])
        # the session may opt out, per request or for good
        off = await c.session_context("s3", {"max_tokens": 1000, "recall": False})
        assert "Miso" not in texts(off)
        await c.session_open("s3", {"user_id": "ana", "recall": False})
        assert "Miso" not in texts(await c.session_context("s3", {"max_tokens": 1000}))


async def test_private_and_deleted_entries_are_never_recalled() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("a", {"user_id": "ana"})
        await c.session_add("a", {"role": "user", "content": "My bank PIN hint is the blue heron.",
                                  "metadata": {"private": True}})
        await c.session_add("a", {"role": "user", "content": "My favourite bird is the heron."})
        await c.session_open("b", {"user_id": "ana"})
        await c.session_add("b", {"role": "user", "content": "The kingfisher nests by the river."})
        await c.session_open("q", {"user_id": "ana"})
        await c.session_add("q", {"role": "user", "content": "Which birds did I mention, heron or kingfisher?"})
        assert await d.server.app.recall.drained(60)
        body = texts(await c.session_context("q", {"max_tokens": 2000}))
        assert "favourite bird is the heron" in body and "kingfisher nests" in body
        assert "PIN" not in body
        # a private entry still serves its own session
        own = await c.session_context("a", {"max_tokens": 2000, "query": "PIN hint"})
        assert "PIN hint" in texts(own)
        await c.session_delete("b")
        body = texts(await c.session_context("q", {"max_tokens": 2000}))
        assert "kingfisher nests" not in body and "favourite bird" in body
        # a removed entry leaves recall too
        entries = (await c.session_get("a"))["entries"]
        fav = next(e["id"] for e in entries if "favourite" in e["content"])
        await c.session_remove("a", fav)
        assert "favourite bird" not in texts(await c.session_context("q", {"max_tokens": 2000}))


async def test_no_i_meant_supersedes() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("ci", {"user_id": "dev", "max_tokens": 8000})
        await c.session_add("ci", {"role": "user", "content": "Pin the CI toolchain: set go-version to 1.21.13"})
        await c.session_add("ci", {"role": "assistant", "content": "Done, go-version is 1.21.13."})
        await c.session_add("ci", {"role": "user", "content": "no, I meant 1.22.6, sorry"})
        for k in range(60):
            await c.session_add("ci", {"role": ("user", "assistant")[k % 2],
                                       "content": f"{FILLER[k % 6]} ({k})"})
        assert await d.server.app.recall.drained(60)
        for budget in (120, 300, 1000, 8000):
            ctx = await c.session_context("ci", {"max_tokens": budget,
                                                 "query": "Which go-version does CI pin?"})
            body = texts(ctx)
            if "1.21.13" in body:  # never the corrected-away value alone
                assert "1.22.6" in body, budget
            assert ctx["tokens"] <= budget
        body = texts(await c.session_context("ci", {"max_tokens": 300,
                                                    "query": "Which go-version does CI pin?"}))
        assert "1.22.6" in body


#: how a recalled line may end: where a tokenizer could join it to the next line's "-"
LINE_ENDS = ["ends with a dot.", "trailing spaces   ", "a path /usr/local/bin/",
             "ends with a newline\n", "two newlines\n\n", "a dash -", "brackets [x]",
             "emoji 🎉!!", 'code: x = {"a": 1};', "multi\nline\n- item", "日本語のテキスト。",
             "a slash /", "!!!", "crlf\r\n", "tab\t", "quote'", "ends in digits 2024"]


async def test_the_recalled_message_costs_what_its_lines_measure() -> None:
    """The recalled message's figure is summed from its lines' measures (it is not tokenized
    whole again): it is the message's real count, whatever the lines end with, for each
    encoding (and one the sum does not hold for: measured whole)."""
    async with running_daemon() as d, d.client() as c:
        await _session(c, "n1", "kim", [(("user", "assistant")[k % 2],
                                         f"deploy note {k}: {end}")
                                        for k, end in enumerate(LINE_ENDS)], MARCH)
        await c.session_open("n2", {"user_id": "kim"})
        await c.session_add("n2", {"role": "user", "content": "What did the deploy notes say?"})
        assert await d.server.app.recall.drained(60)
        counter = d.server.app.tokens
        for model in ("gpt-4o-mini", "gpt-4", "text-davinci-003"):
            for budget in (300, 4000):
                ctx = await c.session_context("n2", {"max_tokens": budget, "model": model})
                at = next(k for k, p in enumerate(ctx["parts"]) if p["kind"] == "recalled")
                assert ctx["parts"][at]["tokens"] == counter.count_message(
                    ctx["messages"][at], model), (model, budget)
                assert ctx["tokens"] <= budget
                if budget > 300:
                    assert len(ctx["recalled"]) == len(LINE_ENDS)


async def test_a_change_said_in_the_active_voice_supersedes_within_and_across_sessions() -> None:
    """"we moved the offsite to Friday" replaces "the offsite is on Thursday": in its session
    the old value never shows alone; recalled in a later session, the old line is marked
    "replaced later" and the new one "current"."""
    async with running_daemon() as d, d.client() as c:
        await _session(c, "plan1", "ana", [
            ("user", "The team offsite is on Thursday at the lake house."),
            ("assistant", "Noted, Thursday at the lake house."),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(40)],
            ("user", "Change of plan: we moved the offsite to Friday, the bus was booked."),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(40)]], MARCH)
        assert await d.server.app.recall.drained(60)
        for budget in (150, 300, 1000):
            ctx = await c.session_context("plan1", {"max_tokens": budget,
                                                    "query": "Which day is the team offsite?"})
            body = texts(ctx)
            if "is on Thursday" in body:  # never the replaced value alone
                assert "offsite to Friday" in body, budget
        await c.session_open("plan2", {"user_id": "ana"})
        await c.session_add("plan2", {"role": "user", "content": "Which day is the team offsite?"})
        ctx = await c.session_context("plan2", {"max_tokens": 1000})
        lines = texts(ctx).splitlines()
        old = next(ln for ln in lines if "is on Thursday" in ln)
        new = next(ln for ln in lines if "offsite to Friday" in ln)
        assert "(replaced later)" in old and "(current)" in new


async def test_a_recalled_value_comes_with_the_later_sessions_correction() -> None:
    """Session 1 sets a value, session 2 corrects it in words the question does not use; a
    fresh session asking for it never gets only the corrected-away value."""
    async with running_daemon() as d, d.client() as c:
        await _session(c, "r1", "dev", [
            ("user", "Set the deploy region to eu-west-1 for everything, please."),
            ("assistant", "Done, eu-west-1 it is."),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(20)]], MARCH)
        await _session(c, "r2", "dev", [
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(10)],
            ("user", "Actually, use eu-central-1 instead of eu-west-1, the data has to stay "
                     "there."),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(10)]],
            MARCH + 86400 * 3)
        await c.session_open("r3", {"user_id": "dev"})
        await c.session_add("r3", {"role": "user", "content": "Which region do my deploys go to?"})
        assert await d.server.app.recall.drained(60)
        both = 0
        for budget in (80, 120, 160, 240, 400, 1000):
            ctx = await c.session_context("r3", {"max_tokens": budget})
            lines = [ln for ln in texts(ctx).splitlines() if "eu-west-1" in ln
                     or "eu-central-1" in ln]
            assert ctx["tokens"] <= budget
            if any("deploy region to eu-west-1" in ln for ln in lines):
                new = next(ln for ln in lines if "use eu-central-1" in ln)
                assert "(current)" in new, budget
                both += 1
        assert both


async def test_an_old_value_whose_replacement_does_not_fit_is_not_sent_alone() -> None:
    """Near the budget's edge the unit with the old value fits and the long statement that
    replaced it does not: both stay out (they go together or not at all)."""
    async with running_daemon() as d, d.client() as c:
        await _session(c, "edge", "ana", [
            ("user", "The launch is planned for March 14."),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(30)],
            ("user", "Update: the launch moved to April 2. " + "Marketing needs the extra weeks "
             "for the campaign, the agency is late with the video, and sales wants a demo. "
             * 8),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(30)]], MARCH)
        assert await d.server.app.recall.drained(60)
        shown = []
        for budget in range(80, 700, 20):
            ctx = await c.session_context("edge", {"max_tokens": budget,
                                                   "query": "When is the launch planned?"})
            body = texts(ctx)
            assert ctx["tokens"] <= budget
            if "March 14" in body:
                assert "April 2" in body, budget
                shown.append(budget)
        assert shown  # at a budget with room for both, both are sent


async def test_the_context_equals_the_preview_and_preview_explains_each_entry() -> None:
    async with running_daemon() as d, d.client() as c:
        await _session(c, "p1", "ana", [("user", "The staging host is stg-eu-4.internal."),
                                        ("assistant", "Got it.")], MARCH)
        await _session(c, "p2", "ana", [(("user", "assistant")[k % 2], FILLER[k % 6])
                                        for k in range(40)], MARCH + 86400)
        await c.session_add("p2", {"role": "user", "content": "Which staging host do we use?"})
        assert await d.server.app.recall.drained(60)
        opts = {"max_tokens": 400}
        ctx = await c.session_context("p2", {**opts, "peek": True})
        pv = await c.session_preview("p2", opts)
        assert pv["messages"] == ctx["messages"] and pv["tokens"] == ctx["tokens"]
        assert pv["parts"] == ctx["parts"]
        kept = [r for r in pv["entries"] if r["decision"] == "kept"]
        assert kept and all("bm25" in r["score_parts"] and "vector" in r["score_parts"]
                            and "recency" in r["score_parts"] and "salience" in r["score_parts"]
                            for r in pv["entries"])
        assert any(r["rank"] for r in pv["entries"])
        assert pv["recalled"] and pv["recalled"][0]["session_id"] == "p1"
        assert pv["recalled"][0]["date"] == "2024-03-02"


async def test_a_retrieved_turn_brings_the_answer_only_to_a_question_on_the_topic() -> None:
    """A hit that asks about what the question asks brings the reply it got (which shares no
    word with the question); a hit that ends with small talk ("how was your weekend?") does
    not bring the reply to that."""
    async with running_daemon() as d, d.client() as c:
        filler = [(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(60)]
        await _session(c, "n", "ana", [
            ("user", "Which database should the inventory service use?"),
            ("assistant", "Go with Postgres 16 on port 5433."),
            ("user", "The inventory service finally passed review. How was your weekend?"),
            ("assistant", "Quiet, mostly reading by the window."),
            *filler], MARCH)
        assert await d.server.app.recall.drained(60)
        pv = await c.session_preview("n", {"max_tokens": 400,
                                           "query": "What database does the inventory service use?"})
        why = {r["entry_id"]: r.get("reason") or "" for r in pv["entries"]
               if r["decision"] == "kept"}
        first = min(r["entry_id"] for r in pv["entries"])
        assert why.get(first, "").startswith("retrieved")
        assert why.get(first + 1, "").startswith("completes #")  # the answer, no shared word
        assert why.get(first + 2, "").startswith("retrieved")
        assert not why.get(first + 3, "").startswith("completes")  # small talk stays out


async def test_a_recalled_question_brings_the_answer_it_got_in_its_session() -> None:
    async with running_daemon() as d, d.client() as c:
        await _session(c, "s1", "ana", [
            ("assistant", "Which name should the new project get, Pebble or Harbor?"),
            ("user", "Let's go with the first one, I like how it sounds."),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(20)]], MARCH)
        await c.session_open("s3", {"user_id": "ana"})
        await c.session_add("s3", {"role": "user",
                                   "content": "What name did I choose for the new project?"})
        assert await d.server.app.recall.drained(60)
        ctx = await c.session_context("s3", {"max_tokens": 1000})
        body = texts(ctx)
        assert ("[2024-03-02 · session s1]\n- assistant: Which name should the new project"
                in body)
        # the answer shares no word with the question: it comes as the turn that completes it
        assert "\n- user: Let's go with the first one" in body
        # ...ranked right after its question, before the small talk that fills the room left
        best = [r["text"] for r in sorted(ctx["recalled"], key=lambda r: -r["fused"])]
        assert best[0].startswith("Which name") and best[1].startswith("Let's go with")


async def test_vectors_survive_a_restart_without_re_embedding(tmp_path_factory) -> None:
    from tests.helpers import short_tmpdir
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        await _session(c, "r", "ana", [("user", f"note {k}: {FILLER[k % 6]}") for k in range(20)],
                       MARCH)
        assert await d.server.app.recall.drained(60)
        assert d.server.app.recall.stats()["embedded"] == 20
    async with running_daemon(root) as d, d.client() as c:
        await d.server.app.recall.loaded()  # read after the daemon answers
        st = d.server.app.recall.stats()
        assert st["entries"] == 20 and st["pending_vectors"] == 0 and st["embedded"] == 0


_ids = itertools.count()
WORDS = ["deploy", "region", "cat", "allergic", "chicken", "the", "x" * 30, "1.22.6", "ok",
         "no, I meant 8080", "sorry", "port", "instead of"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(sessions=st.lists(st.lists(st.tuples(st.sampled_from(["user", "assistant"]),
                                            st.lists(st.sampled_from(WORDS), min_size=1,
                                                     max_size=25)),
                                  min_size=1, max_size=25), min_size=1, max_size=4),
       budget=st.integers(40, 3000), query=st.lists(st.sampled_from(WORDS), max_size=6))
def test_never_over_budget_and_always_chat_valid(thread_daemon, sessions, budget, query):
    user = f"u{next(_ids)}"
    with thread_daemon.client() as c:
        for k, turns in enumerate(sessions):
            sid = f"{user}-{k}"
            c.call("memman_session_open", sid, {"user_id": user, "max_tokens": budget})
            for j, (role, words) in enumerate(turns):
                c.call("memman_session_add", sid, {"role": role, "content": " ".join(words),
                                                   "created_at": MARCH + 86400 * k + j})
        opts = {"query": " ".join(query)} if query else {}
        ctx = c.call("memman_session_context", sid, opts)
        assert_valid_chat(ctx["messages"])
        if not ctx["over_budget"]:
            assert ctx["tokens"] <= budget
        own = c.call("memman_count_tokens", ctx["messages"], ctx["model"])
        assert own["tokens"] == ctx["tokens"]


async def test_memory_search_finds_what_past_sessions_said() -> None:
    async with running_daemon() as d, d.client() as c:
        await _session(c, "m1", "ana", [("user", "Our office moved to Leeds in spring."),
                                        ("assistant", "Noted, Leeds it is."),
                                        ("user", "Secret: the safe code is 4417.")], MARCH)
        await c.session_add("m1", {"role": "user", "content": "my locker code is 9921",
                                   "metadata": {"private": True}})
        await _session(c, "m2", "bob", [("user", "Our office is in Bristol.")], MARCH)
        assert await d.server.app.recall.drained(60)
        got = await c.call("memman_memory_search", "ana", "session", "where is the office?", {})
        texts_ = [r["text"] for r in got["results"]]
        assert texts_ and "Leeds" in texts_[0] and not any("Bristol" in t for t in texts_)
        assert all(r["session_id"] == "m1" for r in got["results"])
        got = await c.call("memman_memory_search", "ana", "session", "locker code", {})
        assert not any("9921" in r["text"] for r in got["results"])
        # forget an entry the search named: it leaves its session and recall
        hit = next(r for r in (await c.call("memman_memory_search", "ana", "session",
                                             "where is the office?", {}))["results"]
                   if "moved to Leeds" in r["text"])
        await c.call("memman_memory_forget", "ana", hit["id"])
        got = await c.call("memman_memory_search", "ana", "session", "where is the office?", {})
        assert not any("moved to Leeds" in r["text"] for r in got["results"])


async def test_a_person_excludes_a_recalled_entry_and_undoes_it() -> None:
    async with running_daemon() as d, d.client() as c:
        await _session(c, "e1", "ana", [("user", "The VPN gateway is vpn-2.corp.example.")],
                       MARCH)
        await c.session_open("e2", {"user_id": "ana"})
        await c.session_add("e2", {"role": "user", "content": "Which VPN gateway do I use?"})
        assert await d.server.app.recall.drained(60)
        ctx = await c.session_context("e2", {"max_tokens": 800})
        eid = ctx["recalled"][0]["entry_id"]
        out = await c.call("memman_recall_exclude", "e2", eid)
        assert out["excluded"] and out["audit_id"]
        assert "vpn-2" not in texts(await c.session_context("e2", {"max_tokens": 800}))
        audit = (await c.call("memman_audit_list", {"session_id": "e2"}))["records"]
        assert audit[0]["action"] == "recall_exclude"
        await c.call("memman_undo", {"session_id": "e2"})
        assert "vpn-2" in texts(await c.session_context("e2", {"max_tokens": 800}))
        # an entry of the same session is not a recalled one
        own = (await c.session_get("e2"))["entries"][0]["id"]
        try:
            await c.call("memman_recall_exclude", "e2", own)
        except Exception as exc:
            assert getattr(exc, "code", None) == -32602 and "entry_id" in str(exc)
        else:
            raise AssertionError("excluding an entry of the session itself was accepted")


async def test_preferences_rules_and_playbook_that_bear_on_the_question_come_along() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_memory_learn", "ana", "invoice_currency", "EUR, never USD", {})
        await c.call("memman_memory_learn", "ana", "favourite_colour", "green", {})
        await c.session_open("inv", {"user_id": "ana"})
        await c.session_add("inv", {"role": "user",
                                    "content": "Which currency should the invoice for Lyon use?"})
        ctx = await c.session_context("inv", {"max_tokens": 600})
        learned = [p for p in ctx["parts"] if p["kind"] == "learned"]
        assert learned, ctx["parts"]
        body = texts(ctx)
        assert "invoice_currency: EUR, never USD" in body and "favourite_colour" not in body
        assert ctx["tokens"] <= 600
        off = await c.session_context("inv", {"max_tokens": 600, "recall": False})
        assert "EUR" not in texts(off)


async def test_the_window_is_whole_while_entries_arrive_during_its_request() -> None:
    """A context request awaits the question's vectors; entries that arrive meanwhile must not
    reach a window planned over fewer units (it used to answer -32603, index out of bounds,
    several times a minute under `make run`'s demo)."""
    import asyncio

    async with running_daemon() as d, d.client("reader") as reader, d.client("writer") as w:
        await _session(w, "busy", "ana", [(("user", "assistant")[k % 2], FILLER[k % 6])
                                          for k in range(12)], MARCH)
        stop = asyncio.Event()

        async def write() -> None:
            k = 0
            while not stop.is_set():
                await w.session_add("busy", {"role": ("user", "assistant")[k % 2],
                                             "content": f"note {k}: {FILLER[k % 6]}"})
                k += 1

        writer = asyncio.create_task(write())
        try:
            for k in range(60):  # a new question each time: its vectors are computed, awaited
                ctx = await reader.session_context("busy", {
                    "max_tokens": 400, "query": f"what was said about the walk, {k} times?"})
                assert ctx["tokens"] <= 400
                assert_valid_chat(ctx["messages"])
        finally:
            stop.set()
            await writer


async def test_news_told_over_two_turns_is_recalled_whole() -> None:
    # the name is in one turn, the value in the speaker's next one after a short reply: a
    # question about the name recalls the first, and the first brings the second (no
    # embeddings: only the shared word "Noor" relates them, nothing else brings the second)
    async with running_daemon(embeddings={"provider": "none"}) as d, d.client() as c:
        await _session(c, "n1", "ana", [
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(6)],
            ("user", "Guess who rang me last night. Noor, my aunt"),
            ("assistant", "oh wow"),
            ("user", "They are moving to Tromsø, boxes already in the hall."),
            *[(("assistant", "user")[k % 2], FILLER[k % 6]) for k in range(6)]], MARCH)
        await c.session_open("n2", {"user_id": "ana"})
        await c.session_add("n2", {"role": "user", "content": "Where is Noor living now?"})
        assert await d.server.app.recall.drained(60)
        ctx = await c.session_context("n2", {"max_tokens": 400})
        body = texts(ctx)
        assert "Noor, my aunt" in body and "moving to Tromsø" in body
        assert "How was the weekend?" not in body  # chit-chat is never offered
        assert ctx["tokens"] <= 400 and not ctx["over_budget"]


async def test_a_question_asked_again_reuses_its_cosines_and_sees_every_new_vector() -> None:
    """The cosines of a question asked again are kept: the next read computes only the rows
    that arrived or got their vector since (counted), and equals a fresh product."""
    import numpy as np

    from memman_daemon.model import Entry
    from memman_daemon.recall.index import Corpus

    async with running_daemon() as d:
        r = d.app.recall
        c = r.corpora.setdefault(("u", "t"), Corpus())
        rng = np.random.default_rng(3)

        def row(i: int) -> int:
            return c.add(Entry(i, "s", "message", "user", f"line {i}", 3, float(i)), f"line {i}")

        def unit() -> np.ndarray:
            v = rng.standard_normal(8).astype(np.float32)
            return v / np.linalg.norm(v)

        for i in range(1, 101):
            c.set_vec(row(i), unit())
        q = unit()
        first = r._cosines(c, q, c.has_vec[: c.n] & c.alive()).copy()
        assert np.allclose(first, c.vec.matmul(c.n, q))
        for i in range(101, 111):  # ten new rows, five of them with a vector
            got = row(i)
            if i % 2:
                c.set_vec(got, unit())
        c.remove(7)
        rows_seen: list[int] = []
        vec = c.vec
        real_get, real_matmul = type(vec).__getitem__, type(vec).matmul

        class Counting(type(vec)):
            def __getitem__(self, key):
                if isinstance(key, np.ndarray):
                    rows_seen.append(len(key))
                return real_get(self, key)

            def matmul(self, n, q):
                rows_seen.append(n)
                return real_matmul(self, n, q)

        vec.__class__ = Counting
        have = c.has_vec[: c.n] & c.alive()
        again = np.asarray(r._cosines(c, q, have))
        vec.__class__ = Counting.__mro__[1]
        assert rows_seen == [5]  # only the rows that got a vector since
        want = np.where(have, vec.matmul(c.n, q), 0.0)
        assert np.allclose(again, want) and again[6] == 0.0  # entry 7 is row 6: removed
        c.set_vec(0, unit())  # a replaced vector: the kept cosines are not trusted
        third = np.asarray(r._cosines(c, q, c.has_vec[: c.n] & c.alive()))
        assert np.allclose(third, np.where(c.has_vec[: c.n] & c.alive(), c.vec.matmul(c.n, q),
                                           0.0))
        # a question's facets: the ones not kept in one pass, each as its own product
        have = c.has_vec[: c.n] & c.alive()
        qs = [q, unit(), unit()]
        for got, v in zip(r._cosines_many(c, qs, have), qs, strict=True):
            assert np.allclose(got, np.where(have, c.vec.matmul(c.n, v), 0.0))


async def test_a_row_whose_vector_is_pending_ranks_by_its_stand_in_until_it_arrives() -> None:
    """While a row's search vector is pending the static model stands in for it (kept as
    float16, ranked over the rows that have one); once every row has its vector the stand-ins
    are dropped and the rows rank by the search model."""

    import numpy as np

    from memman_daemon.component import stop_task
    from memman_daemon.scope import Caller

    async with running_daemon() as d, d.client() as c:
        r = d.app.recall
        await stop_task(d.app.embed_queue._task)  # nothing is embedded meanwhile
        await _session(c, "s1", "ana", [
            ("user", "My cat Miso is allergic to chicken."),
            *[(("user", "assistant")[k % 2], FILLER[k % 6]) for k in range(6)]], MARCH)
        caller = Caller("ana", session_id="s1")
        hits = await r.search(caller, "which pet food allergy", 5, session_id="s1")
        corpus = r.corpus_of(d.app.sessions.get("s1"))
        assert hits and {h["parts"]["vector_model"] for h in hits} == {"static (pending)"}
        assert corpus.svec is not None and corpus.svec.dtype == np.float16
        assert "Miso" in hits[0]["text"]
        await d.app.embed_queue.load()  # the queue at work again
        assert await r.drained(60)
        hits = await r.search(caller, "which pet food allergy", 5, session_id="s1")
        assert {h["parts"]["vector_model"] for h in hits} == {"search"}
        assert corpus.svec is None and "Miso" in hits[0]["text"]


def test_vector_rows_grow_in_blocks_and_read_like_one_array(monkeypatch) -> None:
    """The recall index's vectors grow a block at a time (nothing held is copied) and are read
    like one array: a row, a gather across blocks, a product over the first n rows."""
    import numpy as np

    from memman_daemon.recall import index

    monkeypatch.setattr(index, "BLOCK", 4)
    rows = index.Blocks(3, (2,), np.float32)
    assert rows.shape == (4, 2)
    dense = np.arange(22, dtype=np.float32).reshape(11, 2)
    first = rows.blocks[0]
    rows.ensure(11)
    assert rows.shape == (12, 2) and rows.blocks[0] is first  # grown, not copied
    for i in range(11):
        rows[i] = dense[i]
    pick = np.array([9, 1, 5, 10])
    assert np.array_equal(rows[pick], dense[pick])
    rows[np.array([2, 6])] = np.array([[-1, -1], [-2, -2]], dtype=np.float32)
    dense[[2, 6]] = [[-1, -1], [-2, -2]]
    q = np.array([0.5, 2.0], dtype=np.float32)
    assert np.allclose(rows.matmul(11, q), dense @ q)
    assert np.allclose(rows.matmul(6, np.stack([q, -q], axis=1)), dense[:6] @ np.stack([q, -q], 1))
    assert np.array_equal(rows[7], dense[7])
    assert np.array_equal(rows[9, :1], dense[9, :1])  # a row, then within it


async def test_the_embedder_returns_the_heaps_free_pages_when_its_backlog_is_done(
        monkeypatch) -> None:
    """The embedder's batches leave the C heap fragmented: once the backlog is embedded (and
    every ``TRIM_EVERY`` entries) its free pages go back to the system."""
    from memman_daemon import background
    from memman_daemon.recall import index

    calls: list[int] = []

    async def counting() -> bool:
        calls.append(1)
        return await background.release_memory()

    monkeypatch.setattr(index, "release_memory", counting)
    assert await background.release_memory()  # glibc here: the call exists
    async with running_daemon() as d, d.client() as c:
        await _session(c, "s1", "ana", [(("user", "assistant")[k % 2], FILLER[k % 6])
                                        for k in range(6)], MARCH)
        assert await d.app.recall.drained(60)
        for _ in range(200):  # the trim follows the last batch's save
            if calls:
                break
            await asyncio.sleep(0.01)
        assert calls


async def test_a_fresh_session_spends_its_budget_on_past_turns_in_rank_order() -> None:
    # the turns alike the question are the same two lines said fifty times (sent once each),
    # so what fills the room is the rest of the ranking: past turns keep coming, best first,
    # until no more fit (the first offer of past entries is spent on the repeats; the window
    # asks for more rather than leave the budget free)
    async with running_daemon() as d, d.client() as c:
        await _session(c, "old", "ana", [
            (("user", "assistant")[k % 2], f"Note {k}: the bike with the {k}-speed hub is "
                                           f"parked at rack {k}.") for k in range(40)],
                       MARCH)
        await _session(c, "chat", "ana", [
            (("user", "assistant")[k % 2], FILLER[k % 2]) for k in range(100)],
                       MARCH + 86400)
        await c.session_open("q", {"user_id": "ana"})
        await c.session_add("q", {"role": "user", "content": "How was the weekend?"})
        assert await d.server.app.recall.drained(60)
        ctx = await c.session_context("q", {"max_tokens": 600})
        body = texts(ctx)
        # the question's own words are not sent again; its past answer is, once
        assert body.count("How was the weekend?") == 1
        assert body.count("Busy, the usual errands") == 1
        notes = [r for r in ctx["recalled"] if r["text"].startswith("Note ")]
        assert 5 <= len(notes) < 40  # the room is filled, and it is not everything
        # what is left free is less than any past turn not sent would cost
        assert ctx["breakdown"]["free"] < 30, ctx["breakdown"]
        assert ctx["tokens"] <= 600 and not ctx["over_budget"]
        assert_valid_chat(ctx["messages"])


async def test_a_line_said_again_on_other_days_is_sent_once_and_leaves_room() -> None:
    # a chat export stamps every line, so small talk said in every session is a different
    # text each time; the question matches it best, but its copies say nothing the first
    # does not: one is sent, and the room goes to the turn that answers
    def said(day: int, who: str, text: str) -> str:
        return f"{day:02d}/03/2024, 09:{day:02d} - {who}: {text}"

    async with running_daemon() as d, d.client() as c:
        for day in range(1, 13):
            lines = [("user", said(day, "Ana", "any news about the garden?")),
                     ("assistant", said(day, "Ben", "nothing new, all quiet")),
                     *[(("user", "assistant")[k % 2], said(day, ("Ana", "Ben")[k % 2],
                                                         FILLER[k % 6])) for k in range(2)]]
            if day == 7:
                lines.append(("assistant", said(day, "Ben", "the storm flattened the garden "
                                                            "shed, the roof is in the pond")))
            await _session(c, f"d{day}", "ana", lines, MARCH + 86400 * day)
        await c.session_open("q", {"user_id": "ana"})
        await c.session_add("q", {"role": "user", "content": "Any news about the garden?"})
        assert await d.server.app.recall.drained(60)
        ctx = await c.session_context("q", {"max_tokens": 400})
        assert "flattened the garden shed" in texts(ctx)
        best = [r["text"] for r in sorted(ctx["recalled"], key=lambda r: -r["fused"])]
        # the answer among the best two, beside at most one of the copies
        assert any("flattened the garden shed" in t for t in best[:2]), best
        assert sum("any news about the garden?" in t for t in best[:2]) <= 1, best
        assert ctx["tokens"] <= 400 and not ctx["over_budget"]
        # they are not dropped: what room is left, the copies may fill, after the rest
        assert sum("any news about the garden?" in t for t in best) > 3, best


async def test_a_line_said_again_is_judged_only_among_what_the_caller_may_see() -> None:
    # another user's and a private session's copies of the same stamped line (the same name,
    # the same words, ranked as high) are never seen, never sent, and never make the
    # caller's own line a "repeat" that goes below the rest
    def said(day: int, text: str) -> str:
        return f"{day:02d}/03/2024, 09:{day:02d} - Ana: {text}"

    async with running_daemon() as d, d.client() as c:
        for day in range(1, 9):  # bob's sessions first: his copies are the older ones
            await _session(c, f"b{day}", "bob", [
                ("user", said(day, "any news about the garden?")),
                ("user", said(day, "the garden gnome was stolen again"))], MARCH + 86400 * day)
        await c.session_open("p", {"user_id": "ana"})
        await c.session_add("p", {"role": "user", "content": said(9, "any news about the garden?"),
                                  "metadata": {"private": True}, "created_at": MARCH + 86400 * 9})
        await c.session_add("p", {"role": "user", "metadata": {"private": True},
                                  "content": said(9, "the garden key is under the blue pot"),
                                  "created_at": MARCH + 86400 * 9 + 60})
        await _session(c, "a1", "ana", [("user", said(10, "any news about the garden?")),
                                        ("user", said(10, "the tulips along the fence are up"))],
                       MARCH + 86400 * 10)
        await c.session_open("q", {"user_id": "ana"})
        await c.session_add("q", {"role": "user", "content": "Any news about the garden?"})
        assert await d.server.app.recall.drained(60)
        ctx = await c.session_context("q", {"max_tokens": 400})
        body = texts(ctx)
        assert "gnome" not in body and "blue pot" not in body  # bob's, and private
        assert {r["session_id"] for r in ctx["recalled"]} == {"a1"}
        fused = {r["text"].split(" - Ana: ")[1]: r["fused"] for r in ctx["recalled"]}
        # not taken for a repeat: a repeat goes below half of the lowest other best row
        assert fused["any news about the garden?"] > 0.5 * fused[
            "the tulips along the fence are up"], fused
        assert body.count("any news about the garden?") == 1


async def test_the_index_grows_after_windows_that_looked_for_corrections() -> None:
    """A window looks for later statements that replaced a recalled value (BM25 over the
    recalled entry's rarest words) and keeps those scores while the index is the same; the
    words' postings keep growing with the next entries that use them (a kept view of them
    once stopped the index from growing: the next add failed), and the next window finds
    the new entry."""
    async with running_daemon() as d, d.client() as c:
        await _session(c, "g1", "ana", [("user", "The VPN gateway is vpn-2.corp.example."),
                                        ("assistant", "Noted, vpn-2 it is.")], MARCH)
        await c.session_open("g2", {"user_id": "ana"})
        await c.session_add("g2", {"role": "user", "content": "Which VPN gateway do I use?"})
        assert await d.server.app.recall.drained(60)
        for _ in range(2):  # the second reads the kept scores
            ctx = await c.session_context("g2", {"max_tokens": 800})
            assert any("vpn-2" in r["text"] for r in ctx["recalled"])
        before = d.server.app.recall.stats()["entries"]
        await c.session_add("g1", {"role": "user", "content": "The VPN gateway is now "
                                   "vpn-7.corp.example, vpn-2 is retired.",
                                   "created_at": MARCH + 3600})
        assert await d.server.app.recall.drained(60)
        assert d.server.app.recall.stats()["entries"] == before + 1
        ctx = await c.session_context("g2", {"max_tokens": 800})
        assert any("vpn-7" in r["text"] for r in ctx["recalled"])
