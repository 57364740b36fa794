"""FTS5 query building shared by user memory and business documents.

User text never reaches FTS5's query syntax: it is split into words, each quoted, and the
words are OR-ed so BM25 ranks by how many and how rare they are.

Words that occur in more than half of the indexed rows are dropped when rarer words remain:
FTS5's BM25 gives such a word an IDF of ~0 (it clamps log((N − n + .5) / (n + .5)) at 1e-6),
so it adds nothing to any score — but matching it makes FTS5 score every row that contains
it, which is what makes a query with a very common word slow. The ranking is unchanged, only
rows that would score ~0 leave the candidate set.
"""

from __future__ import annotations

import re
from typing import Any

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_WORDS = 32


def words(text: str) -> list[str]:
    """Distinct lower-case words of ``text``, in order, at most 32."""
    return list(dict.fromkeys(_WORD.findall(text.lower())))[:MAX_WORDS]


def match_expr(ws: list[str]) -> str | None:
    """A safe MATCH expression: each word quoted, any word may match."""
    if not ws:
        return None
    return " OR ".join(f'"{w}"' for w in ws)


async def informative(store: Any, table: str, ws: list[str], total_rows: int) -> list[str]:
    """``ws`` without the words found in more than half of ``total_rows`` rows (BM25 gives
    them no weight), unless that would leave none."""
    if len(ws) < 2 or total_rows < 200:
        return ws
    keep = []
    for w in ws:
        rows = await store.fetchall(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?",
                                    (f'"{w}"',))
        if rows[0][0] * 2 <= total_rows:
            keep.append(w)
    return keep or ws
