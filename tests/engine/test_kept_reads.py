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
