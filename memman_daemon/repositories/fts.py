"""The FTS5 query both full-text indexes share (``memories_fts``, ``doc_chunks_fts``): how
many rows match a word. Callers: ``tiers/user_memory.py`` and ``tiers/docs.py`` through
``informative``; the query text itself is built by ``search/fts.py``.

Words that occur in more than half of the indexed rows are dropped when rarer words remain:
FTS5's BM25 gives such a word an IDF of ~0 (it clamps log((N − n + .5) / (n + .5)) at 1e-6),
so it adds nothing to any score — but matching it makes FTS5 score every row that contains
it, which is what makes a query with a very common word slow. The ranking is unchanged, only
rows that would score ~0 leave the candidate set.
"""

from __future__ import annotations

from typing import Any

TABLES = ("memories_fts", "doc_chunks_fts")


async def informative(store: Any, table: str, ws: list[str], total_rows: int) -> list[str]:
    """``ws`` without the words found in more than half of ``total_rows`` rows (BM25 gives
    them no weight), unless that would leave none."""
    if table not in TABLES:
        raise ValueError(f"not a full-text table: {table!r}")
    if len(ws) < 2 or total_rows < 200:
        return ws
    keep = []
    for w in ws:
        rows = await store.fetchall(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?",
                                    (f'"{w}"',))
        if rows[0][0] * 2 <= total_rows:
            keep.append(w)
    return keep or ws
