"""Late interaction (MaxSim) in the recall retriever: token vectors packed in a bounded size,
kept in the local file beside the entry's vector, and used to order the fusion's candidates —
through the real daemon on a real socket and SQLite file, and the packing on its own."""

from __future__ import annotations

import sqlite3

import numpy as np

from memman_daemon.recall.index import BLOCK, Blocks, rarity
from memman_daemon.search import late
from tests.helpers import embedded_together, running_daemon, short_tmpdir

MARCH = 1709373600.0
LINES = [
    "Our neighbour's tortoise escaped again and was found two streets away under a hedge.",
    "The quarterly report is due on Friday, Tim wants the charts in blue.",
    "I bought a second-hand cello, it needs new strings before the recital.",
    "Parking at the stadium costs eleven euros now, we should take the tram.",
    "My sister adopted a retired greyhound named Comet from the shelter.",
    "The boiler man comes Tuesday between eight and noon, someone has to be home.",
    "We booked the cabin by the lake for the last week of August.",
    "Dentist moved my appointment to the 14th, the morning slot.",
]


def test_packing_is_bounded_and_close_to_the_float_scores() -> None:
    rng = np.random.default_rng(7)
    dim = 384
    docs = []
    for n in (1, 5, late.TOKENS, 40, 250):
        t = rng.normal(size=(n, dim)).astype(np.float32)
        docs.append(t / np.linalg.norm(t, axis=1, keepdims=True))
    packed = [late.pack(t) for t in docs]
    for (p, k), t in zip(packed, docs, strict=True):
        assert p.shape == (late.TOKENS, late.width(dim)) and p.nbytes == 3104
        assert k == min(len(t), late.TOKENS)
    q = docs[1][:3]
    got = late.maxsim(q, np.stack([p for p, _ in packed]),
                      np.array([k for _, k in packed]), dim)
    # exact where nothing was averaged: 4-bit values with a scale per token stay close
    for i in range(3):
        want = (q @ docs[i].T).max(axis=1).sum()
        assert abs(got[i] - want) < 0.1 * len(q)
    assert got[1] > got[0] and got[1] > got[2]  # the text that holds the question's tokens
    assert late.maxsim(q, np.zeros((0, late.TOKENS, late.width(dim)), np.uint8),
                       np.zeros(0, np.int64), dim).shape == (0,)


def test_best_is_the_max_over_the_unpacked_tokens_across_chunks_and_blocks() -> None:
    # best works a chunk of rows at a time in buffers kept per thread, gathering the rows
    # from the store itself; what it answers is the plain definition on unpacked vectors
    rng = np.random.default_rng(11)
    dim, n = 384, BLOCK + 700  # two blocks of the store
    packed = np.stack([late.pack(rng.normal(size=(int(rng.integers(1, 40)), dim))
                                 .astype(np.float32))[0] for _ in range(n)])
    counts = rng.integers(0, late.TOKENS + 1, n)  # some rows without tokens
    store = Blocks(n, packed.shape[1:], np.uint8)
    store[np.arange(n)] = packed
    for k, m in ((late.CHUNK * 2 + 37, 7), (late.CHUNK, 40), (5, 1)):
        rows = rng.choice(n, k, replace=False)  # any order, both blocks
        counts[rows[:2]] = 0
        q = rng.normal(size=(m, dim)).astype(np.float32)
        vecs = late.unpack(packed[rows], dim)  # (k, TOKENS, dim)
        sims = np.einsum("ktd,md->ktm", vecs, q)
        sims[np.arange(late.TOKENS)[None, :] >= counts[rows][:, None]] = -np.inf
        want = sims.max(axis=1)
        want[~np.isfinite(want)] = 0.0
        c = counts[rows].astype(np.int64)
        for got in (late.best(q, store, c, dim, rows=rows),
                    late.best(q, packed, c, dim, rows=rows),
                    late.best(q, packed[rows], c, dim)):
            assert got.shape == (k, m)
            assert np.allclose(got, want, atol=1e-3)
        assert (c == 0).sum() >= 2 and (got[c == 0] == 0).all()


def test_rerank_keeps_the_scores_and_changes_only_the_candidates_order() -> None:
    fused = np.array([0.5, 0.0, 0.3, 0.2, 0.1])
    out = late.rerank(fused, np.array([0, 2, 3]), np.array([1.0, 3.0, 2.0]))
    assert out.tolist() == [0.2, 0.0, 0.5, 0.3, 0.1]
    assert sorted(out.tolist()) == sorted(fused.tolist())


async def test_token_vectors_order_the_candidates_and_are_kept_across_a_restart() -> None:
    root = short_tmpdir()
    question = "which animal did my sister take home?"
    # each line alone (one speaker's lines are each other's neighbours: ``context_share``
    # would lend them each other's words; test_a_turn_is_scored_with_... covers that)
    alone = {"context_share": 0.0}
    async with running_daemon(root, recall=alone) as d, d.client() as c:
        await c.session_open("t1", {"user_id": "ana"})
        for k, line in enumerate(LINES):
            await c.session_add("t1", {"role": "user", "content": line,
                                       "created_at": MARCH + 60 * k})
        app = d.server.app
        assert await app.recall.drained(60)
        if not app.embedder.late:  # the transformer is the default model; this test needs it
            raise AssertionError(f"the search model {app.embedder.model_id} has no tokens")
        got = await c.call("memman_memory_search", "ana", "session", question, {"limit": 8})
        order = [r["text"] for r in got["results"]]
        assert order and "greyhound" in order[0]
        # the order is MaxSim's among the candidates, computed here from the same model: the
        # question encoded alone, as the daemon does
        _pooled, qt, qp = app.embedder._local.encode_tokens([question])
        q = late.question_tokens(qt[0], qp[0])
        # each question token weighted by its word's rarity in the user's corpus
        corpus = next(iter(app.recall.corpora.values()))
        w = rarity(corpus, late.question_words(qt[0], qp[0]))
        assert w is not None and len(w) == len(q) and 0 < w.min() <= w.max() <= 1
        # against the token vectors the daemon stored for those lines (encoded here again,
        # a line embedded in another batch than its neighbours gives other outputs: under a
        # loaded suite the daemon's batches follow the adds' timing)
        rows = np.array([next(r for r in range(corpus.n) if corpus.texts[r].endswith(text))
                         for text in order], dtype=np.int64)
        assert corpus.tok is not None and (corpus.tok_n[rows] > 0).all()
        ms = (late.best(q, corpus.tok, corpus.tok_n[rows].astype(np.int64), q.shape[1],
                        rows=rows) * w).sum(axis=1)
        assert list(np.argsort(-ms, kind="stable")) == list(range(len(order)))
        # and it is not the fusion's order (the test would otherwise prove nothing): BM25 and
        # cosine ranks fused by RRF, as the parts report them
        def rrf(r: dict) -> float:
            return sum(1 / (60 + x) for x in (r["parts"]["bm25_rank"],
                                             r["parts"]["vector_rank"]) if x)
        assert [r["text"] for r in sorted(got["results"], key=lambda r: -rrf(r))] != order
    db = sqlite3.connect(root / "data" / "memman.db")
    rows = db.execute("SELECT n, length(packed) FROM recall_tokens").fetchall()
    assert len(rows) == len(LINES) and all(0 < n <= late.TOKENS and size == 3104
                                           for n, size in rows)
    db.close()
    async with running_daemon(root, recall=alone) as d, d.client() as c:
        app = d.server.app
        assert await app.recall.drained(60)
        assert app.recall.stats()["embedded"] == 0  # nothing computed again
        got = await c.call("memman_memory_search", "ana", "session", question, {"limit": 8})
        assert [r["text"] for r in got["results"]] == order
        await c.call("memman_session_delete", "t1")
    db = sqlite3.connect(root / "data" / "memman.db")
    assert db.execute("SELECT count(*) FROM recall_tokens").fetchone()[0] == 0
    db.close()


#: what two friends say about anything else (the name of the news is rare, as in any long chat)
CHAT = [
    "the bus was cancelled so I walked, forty minutes but the light was lovely",
    "there's a new bakery on the corner and I have been three times already",
    "my phone screen cracked, again, same corner as last time",
    "trying to drink less coffee, currently failing",
    "the neighbours are renovating and the drilling starts at eight sharp",
    "I repotted every plant in the flat and now the floor is soil",
    "we watched that slow film everyone recommends and I fell asleep twice",
    "work is a lot right now, three deadlines landing in the same fortnight",
    "my sister sent a photo of her garden and now I'm jealous",
    "remind me to send you that recipe, the one with the burnt aubergine",
    "I'm thinking of getting a bike for the commute, the trams are packed",
    "we should plan something for when it gets warmer",
]
#: news told over two turns, among lines that name the same person and say nothing
TWO_TURNS = [
    *((("user", "assistant")[k % 2], line) for k, line in enumerate(CHAT)),
    ("user", "Piet says hi, by the way"),
    ("assistant", "ha, tell him hi back"),
    ("user", "Did I tell you Piet still owes me a book"),
    ("assistant", "the weather has been grim all week, rain sideways every morning"),
    ("user", "Thought of Piet today, there was a greyhound on the tram"),
    ("assistant", "made soup from whatever was left in the fridge"),
    ("user", "Bad news about Piet"),
    ("assistant", "oh no"),
    ("user", "They got a concussion. it was a five-a-side tackle. I'll bring soup round"),
    ("assistant", "Ran into Piet's old boss at the station, small world"),
    ("user", "Haven't heard from Piet in ages, should write"),
    ("assistant", "I finally fixed the dripping tap, took me two evenings"),
]


async def _window(question: str, share: float, budget: int, private: str = "") -> str:
    """The recalled part of the window a fresh session of the same user gets for
    ``question`` within ``budget`` tokens."""
    async with running_daemon(recall={"context_share": share}) as d, d.client() as c:
        await c.session_open("old", {"user_id": "ana"})
        async with embedded_together(d.server.app):
            for k, (role, line) in enumerate(TWO_TURNS):
                entry = {"role": role, "content": line, "created_at": MARCH + 60 * k}
                if line == private:
                    entry["metadata"] = {"private": True}
                await c.session_add("old", entry)
        assert await d.server.app.recall.drained(60)
        await c.session_open("ask", {"user_id": "ana"})
        await c.session_add("ask", {"role": "user", "content": question,
                                    "created_at": MARCH + 86400})
        got = await c.call("memman_session_context", "ask", {"max_tokens": budget})
        assert got["tokens"] <= budget
        return "\n".join(m["content"] for m in got["messages"] if m["role"] == "system")


QUESTION = "When did Piet get hurt?"
OPENER, ANSWER = "Bad news about Piet", TWO_TURNS[-4][1]


async def test_a_turn_is_scored_with_the_same_speakers_neighbouring_turn() -> None:
    """The turn that answers names no one ("they got a concussion"); the turn before it by
    the same speaker names Piet and says nothing. Scored alone, the answer loses the room to
    Piet's small talk; scored in its conversation (each question word its best in the turn,
    or a share of its best in the neighbouring turn) it is among the few lines sent."""
    budget = 130
    assert ANSWER not in await _window(QUESTION, 0.0, budget)
    assert ANSWER in await _window(QUESTION, 0.7, budget)


async def test_a_private_turn_lends_its_words_to_no_neighbour() -> None:
    """Asked from another session, a private turn is outside the caller's scope: it is not
    sent, and its words do not bring the turn next to it in either (that turn fares as it
    does alone)."""
    budget = 130
    got = await _window(QUESTION, 0.7, budget, private=OPENER)
    assert OPENER not in got and ANSWER not in got


async def test_a_question_asked_again_reuses_its_maxsim_terms_and_sees_changes_at_once() -> None:
    """The MaxSim terms of a question are kept per row between requests (``late.Kept``):
    asked again, the window is the same as with nothing kept, and an entry excluded,
    forgotten or newly said shows in the very next window."""
    async with running_daemon() as d, d.client() as c:
        await c.session_open("old", {"user_id": "ana"})
        for k, (role, line) in enumerate(TWO_TURNS):
            await c.session_add("old", {"role": role, "content": line,
                                        "created_at": MARCH + 60 * k})
        assert await d.server.app.recall.drained(60)
        rec = d.server.app.recall
        await c.session_open("ask", {"user_id": "ana"})
        await c.session_add("ask", {"role": "user", "content": QUESTION,
                                    "created_at": MARCH + 86400})

        async def recalled() -> list[int]:
            got = await c.call("memman_session_context", "ask", {"max_tokens": 400})
            return [r["entry_id"] for r in got["recalled"]]

        first = await recalled()
        kept = [k for _, k in rec._kept_best.values()]
        assert kept and all(len(k.rows) for k in kept)  # the terms were kept...
        assert await recalled() == first  # ...and read again: the same window
        rec._kept_best.clear()
        assert await recalled() == first  # the same as with nothing kept
        answer = next(r["entry_id"] for r in (await c.call(
            "memman_session_context", "ask", {"max_tokens": 400}))["recalled"]
            if "concussion" in r["text"])
        await c.call("memman_recall_exclude", "ask", answer)
        assert answer not in await recalled()
        gone = next(i for i in await recalled() if i != answer)
        await c.call("memman_memory_forget", "ana", gone)
        assert gone not in await recalled()
        # said later, with the question's words: found at once (its row scored anew)
        await c.session_add("old", {"role": "user", "content": "Piet got hurt in March, a "
                                    "concussion at five-a-side", "created_at": MARCH + 4000})
        assert await rec.drained(60)
        got = await c.call("memman_session_context", "ask", {"max_tokens": 400})
        assert any("hurt in March" in r["text"] for r in got["recalled"])


#: a group chat where all three friends talk about the same trip at length: only the speaker's
#: name tells their long turns apart
GROUP = [
    "Noor: ok so about the cabin, I looked at the map again and honestly the drive is long "
    "but the lake is right there and we could swim every morning if the weather holds",
    "Chidi: lol",
    "Birgit: about the cabin, I rang the owner and she says the wood stove works now and "
    "there is a rowing boat we can use as long as we bring our own life jackets",
    "Noor: same",
    "Chidi: the cabin thing, I checked the trains and there is one on friday afternoon that "
    "gets in before dark if we change at the junction and do not miss the connection",
    "Birgit: haha",
    "Chidi: my train is delayed again",
    "Noor: who's watching the match tonight",
    "Birgit: brb making tea",
]


def test_a_speakers_name_keeps_token_vectors_of_its_own() -> None:
    """A long turn's leading name is not averaged into its first token mean: ``head`` finds
    it (after a time stamp too, not in a time's colon) and ``pack`` keeps its tokens."""
    assert late.head(["no", "##or", ":", "ok"]) == (0, 2)
    assert late.head(["12", "/", "06", ",", "15", ":", "05", "-", "mary", "ann", ":", "hi"]) \
        == (8, 10)
    assert late.head(["15", ":", "05", "ok"]) == (0, 0)
    assert late.head(["the", "cabin", "is", "booked"]) == (0, 0)
    rng = np.random.default_rng(3)
    t = rng.normal(size=(60, 384)).astype(np.float32)
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    packed, k = late.pack(t, (5, 7))
    got = late.unpack(packed, 384)[:k]
    assert k == late.TOKENS and packed.nbytes == 3104  # the same bounded size
    assert float(got[1] @ t[5]) > 0.95 and float(got[2] @ t[6]) > 0.95
    blurred = late.unpack(late.pack(t)[0], 384)
    assert max(float(v @ t[5]) for v in blurred) < 0.6


async def test_a_question_about_a_speaker_finds_that_speakers_long_turn() -> None:
    """"What did Noor say about the cabin?": the three long turns all talk about the cabin;
    Noor's name opens one of them. Averaged into that turn's first token mean, the name no
    longer told it apart from Birgit's and Chidi's; kept as tokens of its own, each
    question about one friend finds that friend's turn first."""
    async with running_daemon() as d, d.client() as c:
        await c.session_open("g", {"user_id": "trio"})
        for k, line in enumerate(GROUP):
            await c.session_add("g", {"role": "user" if line.startswith("Noor") else
                                      "assistant", "content": line,
                                      "created_at": MARCH + 60 * k})
        assert await d.server.app.recall.drained(60)
        assert d.server.app.embedder.late
        for name in ("Noor", "Birgit", "Chidi"):
            got = await c.call("memman_memory_search", "trio", "session",
                               f"What did {name} say about the cabin?", {"limit": 3})
            top = got["results"][0]["text"]
            assert top.startswith(f"{name}: ") and "cabin" in top, (name, top)


async def test_a_question_added_then_asked_is_embedded_once(monkeypatch) -> None:
    """The newest user message is the next window's question and an entry to embed: the
    question's search-model pass gives the entry its vector and token vectors (the embedder
    is not run on the same text twice), and they are the pass's own. (The background embedder
    listens for a burst before each batch: made longer here, so the question comes first.)"""
    from memman_daemon.recall import index

    monkeypatch.setattr(index, "CALM_PROBE_S", 0.5)
    async with running_daemon() as d, d.client() as c:
        app = d.server.app
        await c.session_open("s", {"user_id": "ana"})
        for k, line in enumerate(LINES):
            await c.session_add("s", {"role": ("user", "assistant")[k % 2], "content": line,
                                      "created_at": MARCH + 60 * k})
        assert await app.recall.drained(60)
        local = app.embedder._local
        passes: list[str] = []
        encode = local.encode_tokens

        def counted(texts: list[str]):  # the search model's passes, text by text
            passes.extend(texts)
            return encode(texts)
        local.encode_tokens = counted
        q = "Who adopted the greyhound from the shelter, and what is its name?"
        added = await c.session_add("s", {"role": "user", "content": q})
        await c.session_context("s", {"max_tokens": 400})  # the question's pass
        assert passes == [q]
        assert await app.recall.drained(60)
        assert passes == [q]  # the entry took the question's pass
        rec = app.recall
        corpus = rec.corpus_of(app.sessions.get("s"))
        row = corpus.row_of[added["id"]]
        vec, _stat, _qtok, _words = await rec.query_vectors(q)
        assert corpus.has_vec[row] and np.allclose(corpus.vec[row], vec)
        assert corpus.tok_n[row] > 0
