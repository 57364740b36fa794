"""Summaries where they carry what no kept entry carries: an entry the question needs that is
too large to keep whole is sent as its lines (or sentences) that match the question, each
whole — never cut inside a sentence or a value — in their order, within the room left.

Bounded work: at most ``MAX_CHARS`` of one entry are looked at.
"""

from __future__ import annotations

from collections.abc import Callable

from memman_daemon.engine import facts
from memman_daemon.model import Entry

MAX_CHARS = 200_000  #: characters of one entry searched for matching lines
MAX_LINES = 40


def relevant_lines(entries: list[Entry], query_terms: set[str], room: int,
                   measure: Callable[[str], int]) -> tuple[list[str], int]:
    """The lines of ``entries`` that share a word with the question, best first into the
    room, returned in their order with their tokens (each line plus its newline)."""
    if not query_terms or room <= 0:
        return [], 0
    scored: list[tuple[int, int, str]] = []
    k = 0
    for e in entries:
        text = (e.content or "")[:MAX_CHARS]
        for line in facts.split_candidates(text, structured=e.role == "tool"):
            hit = len(query_terms & set(facts.terms(line)))
            if hit:
                scored.append((-hit, k, line))
            k += 1
    scored.sort()
    chosen: list[tuple[int, str]] = []
    used = 0
    for _neg, pos, line in scored[: MAX_LINES * 4]:
        n = measure(line) + 1
        if used + n <= room:
            chosen.append((pos, line))
            used += n
        if len(chosen) >= MAX_LINES:
            break
    chosen.sort()
    return [line for _pos, line in chosen], used
