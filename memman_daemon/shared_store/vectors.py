"""Vectors in the shared store: pgvector where the server has it, else ranked in Python.

Every embedding is stored as a float32 little-endian ``bytea`` (the same bytes as SQLite's
``embedding`` blob), so the record never depends on an extension. Where ``CREATE EXTENSION
vector`` works, a ``vec vector`` copy is written beside it and the nearest rows come from
``<=>`` (cosine distance) in the server. Without pgvector the candidate rows' blobs are
fetched and ranked by cosine in Python — exact, and measured in bench/shared.py.
"""

from __future__ import annotations

import math
from typing import Any

from memman_daemon.tiers.vectors import pack, unpack


def literal(vec: list[float]) -> str:
    """pgvector's text form."""
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


async def put(conn: Any, backend: str, table: str, row_id: int, vec: list[float],
              tenant_id: str | None = None) -> None:
    """Store one embedding (replacing any) inside the caller's transaction."""
    cols, args = ["id", "dim", "embedding"], [row_id, len(vec), pack(vec)]
    if tenant_id is not None:
        cols.append("tenant_id")
        args.append(tenant_id)
    marks = [f"${i + 1}" for i in range(len(args))]
    if backend == "pgvector":
        cols.append("vec")
        args.append(literal(vec))
        marks.append(f"${len(args)}::text::vector")
    sets = ", ".join(f"{c}=EXCLUDED.{c}" for c in cols[1:])
    await conn.execute(f"INSERT INTO {table}({', '.join(cols)}) VALUES ({', '.join(marks)}) "
                       f"ON CONFLICT (id) DO UPDATE SET {sets}", *args)


async def knn(conn: Any, backend: str, from_where: str, args: list[Any], query: list[float],
              k: int) -> list[tuple[int, float]]:
    """``(id, cosine similarity)`` of the ``k`` nearest rows.

    ``from_where`` is ``FROM <vector table> v ... WHERE ...`` using ``$1..$n`` for ``args``;
    only rows of the query's dimension are considered.
    """
    n = len(args)
    if backend == "pgvector":
        rows = await conn.fetch(
            f"SELECT v.id, 1 - (v.vec <=> ${n + 2}::text::vector) AS s {from_where} "
            f"AND v.dim=${n + 1} AND v.vec IS NOT NULL "
            f"ORDER BY v.vec <=> ${n + 2}::text::vector LIMIT ${n + 3}",
            *args, len(query), literal(query), k)
        return [(r[0], float(r[1])) for r in rows]
    rows = await conn.fetch(f"SELECT v.id, v.embedding {from_where} AND v.dim=${n + 1}",
                            *args, len(query))
    return rank(rows, query, k)


def rank(rows: Any, query: list[float], k: int) -> list[tuple[int, float]]:
    qn = math.sqrt(sum(x * x for x in query)) or 1.0
    scored = []
    for rid, emb in rows:
        v = unpack(emb)
        if len(v) != len(query):
            continue
        vn = math.sqrt(sum(x * x for x in v)) or 1.0
        scored.append((rid, sum(a * b for a, b in zip(v, query, strict=True)) / (qn * vn)))
    scored.sort(key=lambda t: (-t[1], t[0]))
    return scored[:k]
