"""Bounded analysis (issue #22): the inputs that made one client stall the others — change
statements about one subject, long runs of spaces in a ``key: value`` line, huge entries — cost
work linear in their size. Work is counted (candidates examined, characters a pattern sees),
never timed."""

from __future__ import annotations

from memman_daemon.engine import facts
from memman_daemon.engine.supersede import SCAN, Supersession
from memman_daemon.engine.window.timeline import ANALYSE_MAX_CHARS, Analysis
from memman_daemon.model import Entry


def test_change_statements_about_one_subject_are_not_quadratic() -> None:
    sup = Supersession()
    n = 3000
    for i in range(n):
        text = f"the deploy target moved from host-{i} to host-{i + 1}"
        sup.feed(i, facts.analyse(text, structured=False), "message")
    # a scan of every earlier candidate would look at ~n^2/2 = 4.5M; the word index looks at
    # the newest SCAN holding the word, per statement
    assert sup.examined <= n * (SCAN + facts.MAX_CANDIDATE_CHARS), sup.examined
    assert sup.examined < n * n / 20
    # and it still finds what it should: each statement replaces the one before
    assert (n - 2, 0) in sup.by


class _CountingPattern:
    """Wraps a compiled pattern, adding up the characters each match call is given."""

    def __init__(self, rx) -> None:
        self.rx, self.chars, self.calls = rx, 0, 0

    def match(self, s: str, *a):
        self.calls += 1
        self.chars += len(s)
        return self.rx.match(s, *a)

    def __getattr__(self, name):
        return getattr(self.rx, name)


def test_key_value_pattern_sees_bounded_heads_of_lines(monkeypatch) -> None:
    counting = _CountingPattern(facts._KV)
    monkeypatch.setattr(facts, "_KV", counting)
    line = "owner: x" + " " * 30_000 + "y"
    cands = facts.analyse(line, structured=False)
    assert cands
    assert counting.chars <= counting.calls * facts.MAX_CANDIDATE_CHARS
    lines = "\n".join(f"key{i}: value {i}" for i in range(20_000))
    counting.chars = counting.calls = 0
    facts.analyse(lines, structured=True)
    assert counting.chars <= counting.calls * facts.MAX_CANDIDATE_CHARS


def test_the_pattern_is_linear_on_long_runs_of_spaces() -> None:
    # the old lazy value with a trailing \s*,?$ backtracked quadratically; the value now runs
    # to the end of the line: matching a 320-character head takes one pass
    head = ("owner: x" + " " * 30_000 + "y")[: facts.MAX_CANDIDATE_CHARS]
    assert facts._KV.match(head) is not None
    assert facts.kv_of("port: 8080 ,") == ("port", "8080")


def test_a_huge_entry_is_analysed_by_its_head(monkeypatch) -> None:
    seen: list[int] = []
    real = facts.analyse

    def counting(text: str, structured: bool):
        seen.append(len(text))
        return real(text, structured)

    monkeypatch.setattr(facts, "analyse", counting)
    big = Entry(1, "s", "message", "user", "word " * 1_000_000, 0, 0.0)
    an = Analysis(session=1)
    from memman.config import ScoringConfig
    an.feed([big], ScoringConfig())
    assert seen and max(seen) <= ANALYSE_MAX_CHARS
