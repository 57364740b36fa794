"""What may enter a window: this session's units (from its timeline) sorted into the parts the
budget treats differently, and the past sessions' entries the retriever found.

Plain data, made fresh for each request; nothing here changes a timeline.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memman.types import ScoreParts
from memman_daemon.engine.window.timeline import Timeline, Unit, states_its_date
from memman_daemon.model import Entry
from memman_daemon.search import words

ANSWER_WEIGHT = 0.7  #: the answer a retrieved question got, at this share of its score
QUESTION_WEIGHT = 0.5  #: the question a retrieved answer answers


@dataclass(frozen=True)
class SessionCandidates:
    units: list[Unit]
    valid: np.ndarray  #: unit index -> may be sent (a tool call with all its results, ...)
    mandatory: list[int]  #: system prompt and pinned units: always sent
    current: list[int]  #: the exchange in progress: its question first, then its newest steps
    history_tokens: int  #: the whole log as originals (sendable units)
    companions: dict[int, list[int]]  #: unit -> units that complete it (a correction)

    def newest(self) -> Iterator[int]:
        """Every other sendable unit, newest first (lazily: a fill stops early)."""
        taken = set(self.mandatory) | set(self.current)
        valid = self.valid
        for i in range(len(self.units) - 1, -1, -1):
            if valid[i] and i not in taken:
                yield i


def of_session(tl: Timeline) -> SessionCandidates:
    units = tl.units
    arr = tl.arr
    valid = arr["invalid"] == 0
    mandatory = np.flatnonzero((arr["mandatory"] != 0) & valid).tolist()
    cur: list[int] = []
    for i in range(len(units) - 1, -1, -1):
        if units[i].first.role == "user" and not units[i].mandatory:
            cur = [i, *range(len(units) - 1, i, -1)]
            break
    cur = [i for i in cur if valid[i] and not units[i].mandatory]
    full = int(arr["tokens"][valid].sum())
    return SessionCandidates(units, valid, mandatory, cur, full, _companions(tl))


def _companions(tl: Timeline) -> dict[int, list[int]]:
    """Units a retrieved unit brings along: the statement that superseded a value it holds
    (so a window never shows only the corrected-away value)."""
    out: dict[int, list[int]] = {}
    for (eid, _k), (later, _text) in tl.an.sup.by.items():
        u, v = tl.entry_unit.get(eid), tl.entry_unit.get(later)
        if u is not None and v is not None and v.index != u.index:
            got = out.setdefault(u.index, [])
            if v.index not in got:
                got.append(v.index)
    return out


@dataclass(frozen=True, slots=True)
class Completers:
    """What may complete a unit, before the question is known (``completers``): the next and
    the previous unit when they are the other side's turns, and the terms each asking turn
    asks with (None: it asks nothing). A past session's units are asked about by every new
    question: this part is read once per version of its timeline, the topic checked per
    request (``completes``)."""

    answer: int | None  #: the next unit, when it is the other side's turn
    asks: frozenset[str] | None  #: the terms the unit's own questions hold
    question: int | None  #: the previous unit, when it is the other side's turn
    question_asks: frozenset[str] | None  #: the terms that unit's questions hold


def completers(units: list[Unit], i: int) -> Completers | None:
    """``Completers`` of unit ``i``; None when it is not a conversation turn."""
    u = units[i]
    role = u.first.role
    if role not in ("user", "assistant"):
        return None
    prev = units[i - 1] if i > 0 else None
    nxt = units[i + 1] if i + 1 < len(units) else None
    other = ("user", "assistant")
    answer = i + 1 if nxt is not None and nxt.first.role in other \
        and nxt.first.role != role else None
    question = i - 1 if prev is not None and prev.first.role in other \
        and prev.first.role != role else None
    asks = _asked(u.first) if answer is not None else None
    question_asks = _asked(prev.first) if prev is not None and question is not None else None
    return Completers(answer, asks, question, question_asks)


def completes(c: Completers | None, asked: frozenset[str]) -> tuple[int, float] | None:
    """``completing`` from a unit's ``completers`` and the question's topic."""
    if c is None:
        return None
    if c.answer is not None and _about(c.asks, asked):
        return c.answer, ANSWER_WEIGHT
    if c.question is not None and _about(c.question_asks, asked):
        return c.question, QUESTION_WEIGHT
    return None


def completing(units: list[Unit], i: int, asked: frozenset[str]) -> tuple[int, float] | None:
    """The neighbouring turn that completes unit ``i``, with how much of the hit's score it
    carries: the answer its question got (0.7: a question is asked for its answer), or the
    question it answers (0.5: context for the hit itself) — a turn of the other side, right
    after or before.

    ``asked``: the topic of the question the window is for (``Retrieval.topic``; empty: any
    question counts). A neighbour comes along only when the turn of the two that asks, asks
    about it: in chat most turns end with a question ("and you?"), and the reply to one about
    something else is small talk that would take the place of a retrieved turn."""
    return completes(completers(units, i), asked)


CONTINUES_WEIGHT = 0.6  #: the share of a recalled turn's score its speaker's next turn gets
SHORT_REPLY_WORDS = 6  #: a reply this short ("oh wow", "go on") does not end a speaker's turn


def continuing(units: list[Unit], i: int) -> tuple[int, float] | None:
    """The same speaker's turn that carries on unit ``i`` — right after it, or after a short
    reply of the other side — else the one it carries on: news told over two turns ("guess
    who rang me, Noor" / "oh wow" / "she's moving to Tromsø") names its subject in one turn and
    its value in the other. For a recalled turn (``retrieve``), when no question and answer
    complete it."""
    role = units[i].first.role
    if role not in ("user", "assistant"):
        return None
    for step in (1, -1):
        j = i + step
        if not 0 <= j < len(units) or units[j].first.role not in ("user", "assistant"):
            continue
        if units[j].first.role == role:
            return j, CONTINUES_WEIGHT
        k = j + step
        if 0 <= k < len(units) and units[k].first.role == role \
                and len((units[j].first.content or "").split()) <= SHORT_REPLY_WORDS:
            return k, CONTINUES_WEIGHT
    return None


#: a sentence that asks: from the end of the previous sentence to a question mark
_QUESTION = re.compile(r"[^.!?\n]*\?")


def _asked(e: Entry) -> frozenset[str] | None:
    """The terms of ``e``'s questions (its sentences that end with a question mark, in its
    last 400 characters); None when it asks nothing."""
    text = (e.content or "")[-400:]
    if "?" not in text:
        return None
    return frozenset(t for q in _QUESTION.findall(text) for t in words.terms(q))


def _about(terms: frozenset[str] | None, about: frozenset[str]) -> bool:
    """A turn that asks ``terms`` asks something (about one of ``about``'s terms, when there
    are any)."""
    return terms is not None and (not about or not about.isdisjoint(terms))


_DAYS: dict[int, str] = {}  #: day number -> "YYYY-MM-DD" (a window dates hundreds of lines)


def day(ts: float) -> str:
    return day_name(int(ts // 86400))


def day_name(n: int) -> str:
    """Day ``n`` since the epoch (UTC) as "YYYY-MM-DD"."""
    got = _DAYS.get(n)
    if got is None:
        if len(_DAYS) > 100_000:
            _DAYS.clear()
        got = _DAYS[n] = time.strftime("%Y-%m-%d", time.gmtime(n * 86400))
    return got


@dataclass(slots=True)
class Recalled:
    """An entry of another session of this user, brought back by the retriever."""

    entry: Entry
    session_id: str
    row: int
    score: float  #: fused retrieval score
    hits: Any = None  #: the retriever's arrays, read for ``parts`` when shown
    supersedes: int | None = None  #: brought along: it replaced a value of this entry
    tokens: int = 0  #: tokens of its line (``recalled_line``, with its newline)
    note: str = ""  #: "current" / "replaced later" when a newer recalled statement changed it
    date: str = field(init=False)  #: its day (UTC), "2024-03-05"
    #: lines of one session and day share one heading (``group_heading``): (session, day,
    #: or "" for lines that state their own date)
    group: tuple[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.date = day(self.entry.created_at)
        # a line that opens with its own date is grouped under its session alone
        self.group = (self.session_id, "" if states_its_date(self.entry.content) else self.date)

    @property
    def parts(self) -> ScoreParts:
        out: ScoreParts = self.hits.parts(self.row) \
            if self.hits is not None and self.row >= 0 else {}
        return {**out, "supersedes": self.supersedes} if self.supersedes else out


def parts_of(items: list[Recalled]) -> list[ScoreParts]:
    """Each item's ``parts``, read from the retriever's arrays at once where they share one."""
    hits = items[0].hits if items else None
    if hits is None or any(r.hits is not hits or r.row < 0 for r in items):
        return [r.parts for r in items]
    got = hits.parts_of([r.row for r in items])
    return [{**p, "supersedes": r.supersedes} if r.supersedes else p
            for r, p in zip(items, got, strict=True)]


def group_heading(group: tuple[str, str]) -> str:
    """The heading of a session's recalled lines of one day: its date and source, said once
    for its lines (a session id can cost dozens of tokens; said on every line it took the
    room of a third of the lines). Lines that open with their own date: the source alone."""
    sid, date = group
    return f"[{date} · session {sid}]" if date else f"[session {sid}]"


def recalled_line(r: Recalled) -> str:
    e = r.entry
    who = e.name or e.role
    mark = f" ({r.note})" if r.note else ""
    return f"-{mark} {who}: {e.content}"
