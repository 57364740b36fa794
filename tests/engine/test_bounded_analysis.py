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


async def test_a_large_backlog_is_not_waited_for_and_the_follower_completes_it(monkeypatch):
    """After a burst of adds (or a restart) a context does not wait for the analysis of every
    entry: it gets every unit and the newest entries' own analysis, the background follower does
    the rest — and once it has, the window marks the value a later entry replaced."""
    import asyncio

    from memman_daemon.background import BackgroundShare
    from memman_daemon.engine.window import timeline
    from tests.engine.test_context import FILLER, add
    from tests.helpers import running_daemon

    monkeypatch.setattr(timeline, "WAIT_ENTRIES", 40)
    monkeypatch.setattr(timeline, "NEWEST_OWN", 10)
    monkeypatch.setattr(timeline, "INLINE_ENTRIES", 5)
    async with running_daemon(compression={"auto_compress": False}) as d, d.client() as c:
        tls = d.app.engine.timelines
        share: BackgroundShare = tls.background
        tls.background = None  # no follower while the backlog builds up
        await c.call("memman_session_open", "big", {})
        old = await add(c, "big", "The exporter listens on port 9100.")
        for i in range(120):
            await add(c, "big", f"{FILLER} {i}", role="user" if i % 2 else "assistant")
        await add(c, "big", "I changed the port to 9200 this morning.", role="assistant")
        s = d.app.sessions.get("big")
        out = await c.call("memman_session_context", "big",
                           {"query": "which port does the exporter listen on", "max_tokens": 300})
        tl = tls.timeline(s)
        # every entry is in a unit; the analysis is not: only the newest entries' own
        assert tl.consumed == len(s.entries) == 122
        assert tl.an.done == 0
        assert len(tl.an.cands) <= timeline.NEWEST_OWN + timeline.INLINE_ENTRIES
        assert s.entries[-1].id in tl.an.cands and old not in tl.an.cands
        assert (await c.stats())["session_engine"]["analysis_pending"] == 122
        assert not out["over_budget"]
        # the follower catches up, in slices within the background share
        monkeypatch.setattr("memman_daemon.background.FREEZE_EVERY", 50)
        tls.background = share
        slices = share.slices
        tls.appended(s, [])
        for _ in range(500):
            if not (await c.stats())["session_engine"]["analysis_pending"]:
                break
            await asyncio.sleep(0.01)
        assert tl.an.done == len(s.entries)
        assert share.slices > slices and share.freezes >= 1  # 122 entries, one every 50
        assert any(eid == old for eid, _k in tl.an.sup.by)
        out = await c.call("memman_session_context", "big",
                           {"query": "which port does the exporter listen on", "max_tokens": 300})
        text = "\n".join(m["content"] or "" for m in out["messages"])
        assert "9200" in text
        assert "port 9100" not in text or "replaced later" in text
