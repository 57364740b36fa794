"""FTS5 query building shared by user memory and business documents.

User text never reaches FTS5's query syntax: it is split into words, each quoted, and the
words are OR-ed so BM25 ranks by how many and how rare they are. Which words are worth
matching (the rare enough ones) is asked of the index: ``repositories/fts.py``.
"""

from __future__ import annotations

from memman_daemon.search.words import words as split_words

MAX_WORDS = 32


def words(text: str) -> list[str]:
    """Distinct lower-case words of ``text``, in order, at most 32."""
    return list(dict.fromkeys(split_words(text)))[:MAX_WORDS]


def match_expr(ws: list[str]) -> str | None:
    """A safe MATCH expression: each word quoted, any word may match."""
    if not ws:
        return None
    return " OR ".join(f'"{w}"' for w in ws)
