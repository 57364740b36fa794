"""The FTS5 queries both full-text indexes share (``memories_fts``, ``doc_chunks_fts``): how
many rows match a word (``informative``) and where the newest matches begin (``newest_bound``).
Callers: ``storage/sqlite/memories.py`` and ``tiers/docs.py``; the query text itself is built by
``search/fts.py``.

Words that occur in more than half of the indexed rows are dropped when rarer words remain:
FTS5's BM25 gives such a word an IDF of ~0 (it clamps log((N − n + .5) / (n + .5)) at 1e-6),
so it adds nothing to any score — but matching it makes FTS5 score every row that contains
it, which is what makes a query with a very common word slow. The ranking is unchanged, only
rows that would score ~0 leave the candidate set.
"""

from __future__ import annotations

from typing import Any

TABLES = ("memories_fts", "doc_chunks_fts")


def _checked(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"not a full-text table: {table!r}")
    return table


async def newest_bound(store: Any, table: str, match: str, scan: int) -> int:
    """The rowid below which the newest ``scan`` matches of ``match`` lie (0: fewer match)."""
    t = _checked(table)
    bound = await store.fetchall(f"SELECT rowid FROM {t} WHERE {t} MATCH ? "
                                 "ORDER BY rowid DESC LIMIT 1 OFFSET ?", (match, scan))
    return int(bound[0][0]) if bound else 0


async def informative(store: Any, table: str, ws: list[str], total_rows: int) -> list[str]:
    """``ws`` without the words found in more than half of ``total_rows`` rows (BM25 gives
    them no weight), unless that would leave none."""
    _checked(table)
    if len(ws) < 2 or total_rows < 200:
        return ws
    keep = []
    for w in ws:
        rows = await store.fetchall(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?",
                                    (f'"{w}"',))
        if rows[0][0] * 2 <= total_rows:
            keep.append(w)
    return keep or ws
