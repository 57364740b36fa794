"""What every shared table group's search needs on PostgreSQL: the full-text query, ids from
the shared sequence, and how vectors are ranked there."""

from __future__ import annotations

from typing import Any

from memman_daemon.search import fts
from memman_daemon.storage.postgres.pool import PgStore


def tsquery_text(text: str) -> str | None:
    """``websearch_to_tsquery`` input: each word quoted, any word may match (like FTS5's OR)."""
    ws = fts.words(text)
    return " or ".join(f'"{w}"' for w in ws) if ws else None


async def informative_query(conn: Any, table: str, text: str) -> str | None:
    """``tsquery_text`` without the words found in more than half of ``table``'s rows, unless
    that leaves none — the rule of ``search/fts.informative`` (such words add ~nothing to the
    ranking but make every row a candidate)."""
    ws = fts.words(text)
    if len(ws) < 2:
        return tsquery_text(text)
    total = await conn.fetchval("SELECT reltuples::bigint FROM pg_class WHERE relname=$1", table)
    if total is None or total < 0:  # never analyzed: count
        total = await conn.fetchval(f"SELECT count(*) FROM {table}")
    if total < 200:
        return tsquery_text(text)
    rows = await conn.fetch(  # one round trip: is each word a stop word, and how common
        f"SELECT w, numnode(websearch_to_tsquery('english', w)), (SELECT count(*) FROM "
        f"(SELECT 1 FROM {table} WHERE tsv @@ websearch_to_tsquery('english', w) LIMIT $2) x) "
        "FROM unnest($1::text[]) WITH ORDINALITY AS t(w, i) ORDER BY i",
        [f'"{w}"' for w in ws], total // 2 + 1)
    keep = [w.strip('"') for w, nodes, n in rows if nodes and n * 2 <= total]
    return tsquery_text(" ".join(keep or ws))


class SharedIds:
    """``next()`` hands out an id reserved from the shared sequence."""

    def __init__(self, pg: PgStore) -> None:
        self.pg = pg

    def __iter__(self) -> SharedIds:
        return self

    def __next__(self) -> int:
        return self.pg.take_id()


class SharedVectorBackend:
    """Stands in for the SQLite ``VectorIndex``: says how the shared store ranks vectors."""

    def __init__(self, pg: PgStore) -> None:
        self.pg = pg

    @property
    def backend(self) -> str:
        return "pgvector" if self.pg.vector_backend == "pgvector" else "in-memory matrix"

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass
