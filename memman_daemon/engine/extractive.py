"""Summaries that keep facts, without an LLM: ranked sentences and lines, verbatim.

Used wherever a summary is needed and no LLM answers (no key, an error, a timeout, emergency
mode): gap summaries in the context window, compression summaries, the rolling summary and
condensed answers. The first line is a header with counts, tools and errors; then the
candidates that carry facts (see ``facts``), chosen by salience (and relevance to the current
question when one is given), superseded values left out, in their original order, each prefixed
by who said it. A candidate is taken whole or not at all: no value is ever cut.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from memman_daemon.engine import facts
from memman_daemon.model import Entry

MIN_SALIENCE = 0.3  #: below this a candidate is filler unless the question is about it


@dataclass(slots=True)
class Pick:
    """A candidate offered to a summary: where it came from and how much it is worth."""

    order: tuple[int, int]  #: (entry id, candidate index): the original order
    label: str
    text: str
    score: float


def label(e: Entry) -> str:
    if e.role == "tool":
        return f"tool {e.name}" if e.name else "tool"
    if e.tool_calls:
        names = ",".join(c.get("function", {}).get("name", "") for c in e.tool_calls)
        return f"assistant calls {names}"
    return e.role


def features(e: Entry) -> tuple[bool, tuple[str, ...], bool]:
    """What the header counts of one entry: a user message?, its tools, an error result?"""
    tools = [c.get("function", {}).get("name", "") for c in e.tool_calls or []]
    if e.role == "tool" and e.name:
        tools.append(e.name)
    error = e.role == "tool" and bool(
        e.metadata.get("is_error") or e.metadata.get("error")
        or any(facts.is_error_line(ln) for ln in e.content.splitlines()[:50]))
    return e.role == "user", tuple(t for t in tools if t), error


def header_of(feats: list[tuple[bool, tuple[str, ...], bool]]) -> str:
    """The compression design's header: counts, tools, errors (an error is an error line of a tool result,
    not the word "error" in prose)."""
    users = sum(1 for f in feats if f[0])
    errors = sum(1 for f in feats if f[2])
    tools: dict[str, None] = {}
    for f in feats:
        for t in f[1]:
            tools[t] = None
    return header_counts(len(feats), users, list(tools), errors)


def header_counts(entries: int, users: int, names: list[str], errors: int) -> str:
    parts = [f"{entries} entries, {users} from the user"]
    if names:
        parts.append("tools: " + ", ".join(names[:4]) + (" ..." if len(names) > 4 else ""))
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''} encountered")
    return "; ".join(parts)


def header(entries: list[Entry]) -> str:
    return header_of([features(e) for e in entries])


def choose(picks: Iterable[Pick], room: int, measure: Callable[[str], int],
           presorted: bool = False,
           group: Callable[[Pick], tuple[int, int]] | None = None) -> tuple[list[Pick], int]:
    """The best picks that fit ``room`` (in ``measure``'s units), best value per cost first
    (``presorted``: ``picks`` already come best first, and are only read as far as needed).

    Diversity: each line already taken from the same entry, or of the same shape (the same
    line with other numbers and names: a linter's hundred warnings), lowers the next one's
    value, so one long log cannot fill the room with its lookalikes. ``group`` names the
    message a pick goes to and what opening it costs (a frame and a header), paid once."""
    opened: set[int] = set()
    stream = iter(picks if presorted else sorted(picks, key=lambda p: p.score, reverse=True))
    per_entry: dict[int, int] = {}
    per_shape: dict[str, int] = {}
    shapes: dict[int, str] = {}

    def value(p: Pick) -> float:
        sh = shapes.get(id(p))
        if sh is None:
            sh = shapes[id(p)] = _shape(p.text)
        return p.score * 0.8 ** per_entry.get(p.order[0], 0) * 0.5 ** per_shape.get(sh, 0)

    deferred: list[tuple[float, int, Pick]] = []
    nxt = next(stream, None)
    chosen: list[Pick] = []
    seen: set[str] = set()
    used = misses = seq = 0
    while room - used >= 8 and misses <= 400:
        if deferred and (nxt is None or -deferred[0][0] >= nxt.score):
            neg, _, p = heapq.heappop(deferred)
            v = value(p)
            if v < -neg - 1e-12:  # lowered since it was deferred: wait again
                seq += 1
                heapq.heappush(deferred, (-v, seq, p))
                continue
        elif nxt is not None:
            p, nxt = nxt, next(stream, None)
            v = value(p)
            if v < p.score - 1e-12:
                seq += 1
                heapq.heappush(deferred, (-v, seq, p))
                continue
        else:
            break
        key = p.text.lower()
        if key in seen:
            continue
        cost = measure(line(p))
        if group is not None:
            gid, opening = group(p)
            if gid not in opened:
                cost += opening
        if cost > room - used:
            misses += 1
            continue
        if group is not None:
            opened.add(gid)
        seen.add(key)
        chosen.append(p)
        used += cost
        per_entry[p.order[0]] = per_entry.get(p.order[0], 0) + 1
        sh = shapes[id(p)]
        per_shape[sh] = per_shape.get(sh, 0) + 1
    chosen.sort(key=lambda p: p.order)
    return chosen, used


_SHAPE_TOKEN = re.compile(r"[A-Za-z_][\w.\-]*|\d[\d.:,]*")


def _shape(text: str) -> str:
    return _SHAPE_TOKEN.sub("w", text)[:32]


def line(p: Pick) -> str:
    return f"- {p.label}: {p.text}\n"


def render(head: str, chosen: list[Pick]) -> str:
    """Header line, then one line per pick; consecutive picks of one entry share a line."""
    out = [head]
    last: tuple[int, str] | None = None
    for p in chosen:
        if last is not None and last == (p.order[0], p.label):
            out[-1] += " " + p.text
        else:
            out.append(f"- {p.label}: {p.text}")
        last = (p.order[0], p.label)
    return "\n".join(out)


def picks_of(e: Entry, cands: list[facts.Candidate], *, skip: set[tuple[int, int]] | frozenset = frozenset(),
             relevance: Callable[[facts.Candidate], float] | None = None,
             min_salience: float = MIN_SALIENCE) -> list[Pick]:
    lab = label(e)
    out = []
    for i, c in enumerate(cands):
        if (e.id, i) in skip:
            continue
        rel = relevance(c) if relevance is not None else 0.0
        if c.salience < min_salience and rel <= 0.0:
            continue
        # a short candidate that carries a value is worth more per token than a long one
        score = c.salience + 0.8 * rel + (0.05 if e.role == "user" else 0.0)
        score /= (1.0 + len(c.text) / 400.0) ** 0.5
        out.append(Pick((e.id, i), lab, c.text, score))
    return out


def summarize_entries(entries: list[Entry], room: int, measure: Callable[[str], int],
                      *, query: str = "",
                      known: Mapping[int, list[facts.Candidate]] | None = None) -> str:
    """A self-contained extractive summary of ``entries`` within ``room`` units of ``measure``
    (tokens or bytes): header line first, superseded values left out. ``known``: candidates
    already found per entry id (the context timeline's), used for entries without tool calls
    instead of analysing their text again."""
    from memman_daemon.engine.supersede import Supersession

    def candidates(e: Entry) -> list[facts.Candidate]:
        if known is not None and not e.tool_calls and e.id in known:
            return known[e.id]
        # bounded work: a huge entry by its head, as the timeline analyses it
        return facts.analyse(e.content[:facts.ANALYSE_MAX_CHARS] + _calls_text(e),
                             structured=e.role == "tool")

    head = "[Previous conversation summary] " + header(entries)
    analysed = [(e, candidates(e)) for e in entries]
    sup = Supersession()
    for e, cands in analysed:
        sup.feed(e.id, cands, e.name or e.role if e.role == "tool" else "message")
    qt = set(facts.terms(query)) if query else set()

    def rel(c: facts.Candidate) -> float:
        return len(qt.intersection(c.terms)) / len(qt) if qt else 0.0

    skip = set(sup.by)
    picks = [p for e, cands in analysed for p in picks_of(e, cands, skip=skip, relevance=rel)]
    chosen, _ = choose(picks, room - measure(head + "\n"), measure)
    return render(head, chosen)


def condense(text: str, room: int, measure: Callable[[str], int]) -> str:
    """Free text (an answer, a rolling summary) cut to ``room``: its fact-carrying sentences and
    lines, verbatim and in order; lines already of the form ``- who: ...`` keep their label."""
    if measure(text) <= room:
        return text
    from memman_daemon.engine.supersede import Supersession

    cands = facts.analyse(text, structured=False)
    sup = Supersession()
    for i, c in enumerate(cands):  # each line on its own: a later line may replace an earlier
        sup.feed(i, [c], "message")
    picks = []
    for i, c in enumerate(cands):
        if (i, 0) in sup.by:
            continue
        score = c.salience / (1.0 + len(c.text) / 400.0) ** 0.5
        picks.append(Pick((0, i), "", c.text, score + i * 1e-6))  # ties: the newer one
    ranked = sorted(picks, key=lambda p: p.score, reverse=True)
    chosen: list[Pick] = []
    used = 0
    for p in ranked:
        cost = measure(p.text + "\n")
        if used + cost <= room:
            chosen.append(p)
            used += cost
    chosen.sort(key=lambda p: p.order)
    return "\n".join(p.text for p in chosen)


def _calls_text(e: Entry) -> str:
    if not e.tool_calls:
        return ""
    return "\n" + "\n".join(f"{c.get('function', {}).get('name', '')}("
                            f"{c.get('function', {}).get('arguments', '')})" for c in e.tool_calls)
