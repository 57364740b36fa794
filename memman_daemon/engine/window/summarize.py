"""Summaries where they carry what no kept entry carries: an entry the question needs that is
too large to keep whole is sent as its lines (or sentences) that match the question, each
whole — never cut inside a sentence or a value — in their order, within the room left.

Bounded work: at most ``MAX_CHARS`` of one entry are looked at.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from memman_daemon.engine import facts
from memman_daemon.model import Entry

MAX_CHARS = 200_000  #: characters of one entry searched for matching lines
MAX_LINES = 40
#: characters of split entries kept (``_split``): a large entry retrieved by question after
#: question is split and its lines' words read once, not on every request
SPLIT_CHARS = 4_000_000
_SPLIT: OrderedDict[tuple[int, bool], tuple[str, list[tuple[str, frozenset[str]]], int]] = \
    OrderedDict()
_split_chars = 0


def _split(e: Entry) -> list[tuple[str, frozenset[str]]]:
    """``e``'s lines (``facts.split_candidates``) with their terms, kept per entry while its
    text is the same (an LRU bounded by ``SPLIT_CHARS`` characters)."""
    global _split_chars
    text = (e.content or "")[:MAX_CHARS]
    key = (e.id, e.role == "tool")
    got = _SPLIT.get(key)
    if got is not None and got[0] == text:
        _SPLIT.move_to_end(key)
        return got[1]
    if got is not None:
        _split_chars -= got[2]
    lines = [(line, frozenset(facts.terms(line)))
             for line in facts.split_candidates(text, structured=e.role == "tool")]
    _SPLIT[key] = (text, lines, len(text))
    _split_chars += len(text)
    while _split_chars > SPLIT_CHARS and len(_SPLIT) > 1:
        _split_chars -= _SPLIT.popitem(last=False)[1][2]
    return lines


def line_candidates(entries: list[Entry], query_terms: set[str]) -> list[tuple[int, str]]:
    """The lines of ``entries`` that share a word with the question, best first (the most
    words shared, then the earlier), at most ``MAX_LINES * 4``, each with its position in
    the entries' text. ``select`` takes them greedily into the room (``MAX_LINES`` at most)
    and sends them in their order."""
    if not query_terms:
        return []
    scored: list[tuple[int, int, str]] = []
    k = 0
    for e in entries:
        for line, terms in _split(e):
            hit = len(terms.intersection(query_terms))
            if hit:
                scored.append((-hit, k, line))
            k += 1
    scored.sort()
    return [(pos, line) for _neg, pos, line in scored[: MAX_LINES * 4]]


FACTS_HEADER = "[Facts from the rest of this session that the question asks about]"
POOL = 4000  #: picks looked at, best first (bounded work)
RETRIEVED = 300  #: retrieved entries whose picks are looked at first
REL_WEIGHT = 0.8  #: how much sharing the question's words adds to a line's salience


def fact_lines(tl: Any, kept: set[int], query_terms: set[str], idf: Callable[[str], float],
               room: int, measure: Callable[[str], int],
               retrieved: Sequence[int] = ()) -> tuple[str, list[int], int]:
    """For a question that asks for many things: the fact lines (values, names, decisions,
    outcomes — the timeline's presorted picks) of entries the window does not send, the ones
    that share the question's words first (weighed by ``idf``: how informative a word is in the
    user's recall index), none that a later entry replaced, within ``room``. ``retrieved``: entry ids best first (their picks are looked at first). Returns (message
    text, entry ids quoted, tokens of the text), or ("", [], 0)."""
    from memman_daemon.engine import extractive

    an = tl.an
    by = an.sup.by
    weight = {t: idf(t) for t in query_terms}
    # a line that shares two or three of the question's informative words is about it
    enough = 2.0 * (sum(weight.values()) / len(weight)) if weight else 1.0
    pool: list[extractive.Pick] = []
    # the picks of the entries the question retrieved first, then the most salient of all
    refs = [(eid, k) for eid in retrieved[:RETRIEVED] for k in range(len(an.cands.get(eid, ())))]
    refs += [(eid, k) for _neg, eid, k in an.picks[:POOL]]
    seen: set[tuple[int, int]] = set()
    for eid, k in refs:
        if eid in kept or (eid, k) in by or (eid, k) in seen:
            continue
        seen.add((eid, k))
        p = an.pick.get((eid, k))
        if p is None or eid not in an.cands:
            continue
        rel = min(1.0, sum(weight[t] for t in query_terms.intersection(an.cands[eid][k].terms))
                  / enough)
        # salience + REL_WEIGHT x relevance, per size (the picks' own scale)
        size = (1.0 + len(p.text) / 400.0) ** 0.5
        pool.append(extractive.Pick(p.order, p.label, p.text, p.score + REL_WEIGHT * rel / size))
    head_cost = measure(FACTS_HEADER) + 4
    if room <= head_cost or not pool:
        return "", [], 0
    chosen, used = extractive.choose(pool, room - head_cost, measure)
    if not chosen:
        return "", [], 0
    text = extractive.render(FACTS_HEADER, chosen)
    return text, sorted({p.order[0] for p in chosen}), used + head_cost
