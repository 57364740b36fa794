"""What the window keeps between requests (an entry's split lines, the supersession rules'
string helpers) answers as a fresh read does, and follows an entry whose text changed."""

from __future__ import annotations

from memman_daemon.engine import supersede
from memman_daemon.engine.window import summarize
from memman_daemon.model import Entry


def _entry(text: str, role: str = "tool") -> Entry:
    return Entry(id=41, session_id="s", type="message", role=role, content=text, tokens=10,
                 created_at=0.0)


def test_split_lines_follow_a_changed_text() -> None:
    e = _entry("port is 8080\nhost is alpha\nnothing here")
    first = summarize.line_candidates([e], {"port"})
    assert [line for _pos, line in first] == ["port is 8080"]
    assert summarize.line_candidates([e], {"port"}) == first  # kept: the same answer
    e.content = "port is 9090\nhost is beta"
    assert [line for _pos, line in summarize.line_candidates([e], {"port", "host"})] == [
        "port is 9090", "host is beta"]


def test_split_lines_kept_within_their_bound(monkeypatch) -> None:
    monkeypatch.setattr(summarize, "SPLIT_CHARS", 50)
    for k in range(20):
        e = _entry(f"line {k} about the port\nand the host {k}")
        e.id = 1000 + k
        assert summarize.line_candidates([e], {"port"})
    assert sum(got[2] for got in summarize._SPLIT.values()) == summarize._split_chars
    assert summarize._split_chars <= 50 or len(summarize._SPLIT) == 1


def test_supersession_helpers_as_fresh() -> None:
    sup = supersede.Supersession()
    from memman_daemon.engine import facts
    texts = ["the meeting is on Thursday", "we moved the meeting to Friday",
             "we moved the meeting to Friday"]
    for i, t in enumerate(texts):
        sup.feed(i + 1, facts.analyse(t, structured=False), "message")
    assert (1, 0) in sup.by
    assert supersede._same_kind("the meeting is on Thursday", "Friday")
    assert not supersede._same_kind("the meeting is on the roof", "Friday")


async def test_a_questions_bm25_kept_follows_rows_added_and_removed() -> None:
    """``RecallIndex._lexical`` keeps a question's every-row BM25 while the corpus's rows are
    the same: a row added that holds the question's word scores at once, a removed one no
    longer does, and a kept answer is the fresh one (embeddings off: BM25 alone ranks)."""
    import numpy as np

    from memman_daemon.recall.index import text_terms
    from memman_daemon.search import core
    from tests.helpers import running_daemon

    async with running_daemon(embeddings={"provider": "none"}) as d, d.client() as c:
        rec = d.server.app.recall
        await c.session_open("a", {"user_id": "ana"})
        for k in range(5):
            await c.session_add("a", {"role": "user", "content": f"note {k} about lunch"})
        s = d.server.app.sessions.get("a")
        rec.settle()
        corpus = rec.corpus_of(s)
        q = "where is the quokka enclosure"
        first = rec._lexical(corpus, q)
        assert not first.any() and rec._lexical(corpus, q) is first  # kept
        added = await c.session_add("a", {"role": "user",
                                          "content": "the quokka enclosure is by the gate"})
        rec.settle()
        got = rec._lexical(corpus, q)
        row = corpus.row_of[added["id"]]
        assert got[row] > 0
        assert np.array_equal(got, core.Bm25Lexical(corpus.bm25, text_terms).scores(q))
        await c.call("memman_session_remove", "a", added["id"])
        again = rec._lexical(corpus, q)
        assert not again.any()
