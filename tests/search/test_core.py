"""The retrieval core (``memman_daemon/search/core.py``): the scope filters before ranking
(a row the caller may not see takes no rank from one it may), fusion reads its constants,
the list form and the dense form rank alike, the stages run in the order declared, and
through the real daemon ``memman_memory_search`` type ``session`` ranks only what the caller
may be shown."""

from __future__ import annotations

import numpy as np

from memman_daemon.search import core
from memman_daemon.search.bm25 import Bm25
from memman_daemon.search.vector_matrix import VectorScopes
from memman_daemon.search.words import terms
from tests.helpers import running_daemon

TEXTS = ["the deploy failed on the staging cluster",
         "deploy deploy deploy staging rollback notes",
         "lunch order for friday",
         "the staging cluster runs postgres 15"]


def _bm25() -> Bm25:
    b = Bm25()
    for t in TEXTS:
        b.add(terms(t))
    return b


async def test_the_scope_mask_filters_before_ranking() -> None:
    lex = core.Bm25Lexical(_bm25(), terms)
    everyone = await lex.ranked("deploy staging", core.Scope("ana"), 10)
    assert [r for r, _, _ in everyone][:2] == [1, 0]
    hidden = np.array([True, False, True, True])  # row 1 is not the caller's to see
    seen = await lex.ranked("deploy staging", core.Scope("ana", mask=hidden), 10)
    assert 1 not in [r for r, _, _ in seen] and seen[0][0] == 0
    # the dense form: the hidden row is in no list, so the visible row ranks first
    bm = lex.scores("deploy staging")
    ranking = core.dense(bm, np.zeros(4, np.float32), hidden, np.zeros(4, bool),
                         core.Fusion(60), 100)
    assert ranking.lexical_rank[0] == 1 and ranking.lexical_rank[1] == 0
    assert ranking.fused[1] == 0 and ranking.fused[0] == 1 / 61


async def test_fusion_reads_its_constants_from_config_sections() -> None:
    class Section:
        rrf_k = 5
        bm25_weight = 0.5
        vector_weight = 1.0

    f = core.Fusion.of(Section())
    fused = {x.id: x.rrf for x in f.fuse([(1, 3.0), (2, 1.0)], [(2, 0.9)])}
    assert fused[1] == 0.5 / 6 and fused[2] == 0.5 / 7 + 1.0 / 6

    class Recall:
        rrf_k = 60

    assert core.Fusion.of(Recall()) == core.Fusion(60, 1.0, 1.0)


class _Note:
    name = "note"

    def __init__(self, seen: list[str], tag: str) -> None:
        self.seen, self.tag = seen, tag

    def __call__(self, ranked: core.Ranked) -> core.Ranked:
        self.seen.append(self.tag)
        ranked.hits = ranked.hits[:2]
        return ranked


async def test_the_list_form_fuses_scoped_rows_then_runs_the_declared_stages() -> None:
    vecs = np.eye(4, dtype=np.float32)
    ids = [10, 11, 12, 13]

    async def load(key: object) -> tuple[list[int], np.ndarray]:
        return ids, vecs

    matrices = VectorScopes(load)

    async def text(query: str, scope: core.Scope, k: int) -> list[core.Found]:
        rows = {10: 2.0, 11: 1.0} if scope.owner == "ana" else {}
        return [(i, s, f"row {i}") for i, s in rows.items()][:k]

    async def no_store(qv: np.ndarray, scope: core.Scope, k: int) -> None:
        return None

    async def rows(got: list[int], scope: core.Scope) -> dict[int, str]:
        return {i: f"row {i}" for i in got if i != 13}  # 13 is outside the scope

    retriever = core.Retriever(core.SqlLexical(text),
                               core.VectorStore(no_store, matrices, lambda s: [s.owner]),
                               rows, core.Fusion(60))
    order: list[str] = []
    qv = np.array([0, 0, 1, 0.5], dtype=np.float32)
    ranked = await retriever.run("q", core.Scope("ana"), candidates=10, qv=qv, cosines=10,
                                 stages=(_Note(order, "a"), _Note(order, "b")))
    assert order == ["a", "b"] and ranked.fused
    got = [c.id for c in ranked.hits]
    assert 13 not in got and len(got) == 2
    assert ranked.hits[0].fused is not None and ranked.hits[0].fused.matched
    # a lexical-only hit gets its cosine from the loaded matrix
    by_id = {c.id: c for c in (await retriever.run(
        "q", core.Scope("ana"), candidates=10, qv=qv, cosines=10)).hits}
    assert by_id[10].cosine == 0.0 and by_id[12].cosine is not None
    # full text alone: no fusion, the lexical order
    plain = await retriever.run("q", core.Scope("ana"), candidates=10, qv=None)
    assert not plain.fused and [c.id for c in plain.hits] == [10, 11]


async def test_session_search_ranks_only_what_the_caller_may_see() -> None:
    """A private entry of another session that matches better takes no rank from the visible
    one: the visible hit is first in the BM25 list (filter before ranking)."""
    async with running_daemon() as d, d.client() as c:
        await c.session_open("p", {"user_id": "ana"})
        for k in range(3):
            await c.session_add("p", {"role": "user", "content": "glacier glacier glacier "
                                      f"hike permit number {k}", "metadata": {"private": True}})
        await c.session_open("v", {"user_id": "ana"})
        await c.session_add("v", {"role": "user", "content": "the glacier hike needs a permit"})
        await c.session_open("q", {"user_id": "ana"})
        got = (await c.memory_search("ana", "session", "glacier hike permit",
                                     {"limit": 10}))["results"]
        assert [r["session_id"] for r in got] == ["v"]
        assert got[0]["parts"]["bm25_rank"] == 1


def test_add_many_builds_the_postings_add_builds_one_document_at_a_time() -> None:
    """``Bm25.add_many`` (a start indexes every entry at once) against ``add``: the same rows,
    postings, term frequencies, lengths and scores, across empty documents, repeated terms,
    documents over ``MAX_TERMS`` and documents added one at a time before and after."""
    import random

    from memman_daemon.search.bm25 import MAX_TERMS
    rnd = random.Random(7)
    vocab = [f"w{i}" for i in range(300)]
    for _ in range(200):
        docs = [[rnd.choice(vocab[:rnd.randint(1, 300)])
                 for _ in range(rnd.choice([0, 1, 3, 20, MAX_TERMS + 50]))]
                for _ in range(rnd.randint(0, 30))]
        before = [[rnd.choice(vocab) for _ in range(5)] for _ in range(rnd.randint(0, 3))]
        one, many = Bm25(), Bm25()
        for d in before:
            one.add(d)
            many.add(d)
        for d in docs:
            one.add(d)
        assert many.add_many(docs) == len(before)
        one.add(["w1", "w1"])
        many.add(["w1", "w1"])
        assert (one.n, one.live, one._len, one._alive) == (many.n, many.live, many._len,
                                                           many._alive)
        assert one._total == many._total
        assert {t: (list(r), list(one._tfs[t])) for t, r in one._rows.items()} == \
            {t: (list(r), list(many._tfs[t])) for t, r in many._rows.items()}
        q = rnd.sample(vocab, 3)
        assert np.array_equal(one.scores(q), many.scores(q))


def test_numbered_terms_are_the_terms_of_each_text() -> None:
    """``words.numbered_terms`` (a start's indexing: every text's words split and looked up
    at once) against ``terms`` one text at a time: the same terms in the same order, cut at
    the limit, across scripts other than Latin, characters outside the BMP and lone
    surrogates, control characters and the byte 0xFF's character, camelCase and snake_case,
    stop words, digits, empty texts; and BM25 built from them is the one ``add`` builds."""
    import random

    from memman_daemon.search import words
    from memman_daemon.search.bm25 import MAX_TERMS
    rnd = random.Random(11)
    pieces = ["the", "Deploy", "deployments", "parseHTTPHeader", "snake_case_name", "a.b.c",
              "x", "42", "v1.2.3", "café", "naïve", "日本語のテキスト", "مرحبا", "emoji🙂👍🏽",
              "\ud800", "\udfff", "ÿÿ", "\xff", "\x00", "\t", "\n", "  ", "--", "[12:05]",
              "Ana:", "BenchmarkSlidingAllow", "HTTPServer", "I", "ok", "ids_1234abcd", "😀x"]
    texts = ["", " ", "\xff", "ÿ"] + [
        "".join(rnd.choice([" ", "", ", ", "\n"]) + rnd.choice(pieces)
                for _ in range(rnd.choice([0, 1, 5, 40, MAX_TERMS + 10])))
        for _ in range(300)]
    for limit in (MAX_TERMS, 7):
        for at in range(0, len(texts), 37):
            part = texts[at:at + 37]
            ids, lens, names = words.numbered_terms(part, limit)
            got, k = [], 0
            for n in lens.tolist():
                got.append([names[i] for i in ids[k:k + n].tolist()])
                k += n
            assert k == len(ids)
            assert got == [words.terms(t)[:limit] for t in part]
    one, many = Bm25(), Bm25()
    for t in texts:
        one.add(terms(t))
    assert many.add_numbered(*words.numbered_terms(texts, MAX_TERMS)) == 0
    assert (one.n, one._len, one._total) == (many.n, many._len, many._total)
    assert {t: (list(r), list(one._tfs[t])) for t, r in one._rows.items()} == \
        {t: (list(r), list(many._tfs[t])) for t, r in many._rows.items()}


def test_a_corpus_adds_many_rows_as_it_adds_them_one_at_a_time() -> None:
    """``Corpus.add_many`` (a start's rows, a column at a time) against ``add``: the same
    columns (entry ids, sessions and their numbers, times, the private mark, texts, the row
    of each entry, room for vectors) and the same BM25 postings."""
    import random

    from memman_daemon.model import Entry
    from memman_daemon.recall.index import Corpus
    rnd = random.Random(5)
    one, many = Corpus(), Corpus()
    eid = 0
    for size in [1, 2, 63, 64, 65, 300, 7]:
        part = []
        for _ in range(size):
            eid += 1
            meta = rnd.choice([{}, {"private": True}, {"private": "yes"}, {"x": 1}])
            e = Entry(eid, rnd.choice(["s1", "s2", "s3"]), "message", "user", "", 3,
                      1000.0 + eid, metadata=meta)
            part.append((e, " ".join(rnd.choice(TEXTS).split()[:rnd.randint(0, 6)])))
        for e, text in part:
            one.add(e, text)
        many.add_many(part)
    assert (list(one.eids), one.sids, list(one.codes), one.code_of, list(one.at),
            list(one.private), one.texts, one.row_of, one.n) == \
        (list(many.eids), many.sids, list(many.codes), many.code_of, list(many.at),
         list(many.private), many.texts, many.row_of, many.n)
    assert len(one.has_vec) == len(many.has_vec) == len(one.tok_n) == len(many.has_svec)
    assert {t: (list(r), list(one.bm25._tfs[t])) for t, r in one.bm25._rows.items()} == \
        {t: (list(r), list(many.bm25._tfs[t])) for t, r in many.bm25._rows.items()}
