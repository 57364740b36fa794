"""Vectors in the shared store: pgvector where the server has it, else ranked in the daemon.

Every embedding is stored as a float32 little-endian ``bytea`` with its model (the same bytes
and columns as SQLite's), so the record never depends on an extension. Ranking:

- **pgvector** (``CREATE EXTENSION vector`` worked): a ``vec vector`` copy is written beside
  the bytes and the nearest rows come from ``<=>`` (cosine distance) in the server;
- **fallback**: the scope's vectors (a user's layer, a tenant's chunks) are loaded from the
  shared store into the daemon's in-memory matrix (``search/vector_matrix.py``, as with
  SQLite) and ranked there. A scope is dropped when another daemon changes it (its event says
  so), so the next search reloads it. Measured in bench/shared.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memman_daemon.search.vector_matrix import blobs_to_matrix
from memman_daemon.storage.postgres.ops import PgOp


def literal(vec: Any) -> str:
    """pgvector's text form."""
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


def blob(vec: Any) -> bytes:
    return np.asarray(vec, dtype=np.float32).tobytes()


def put_op(backend: str, table: str, row_id: int, vec: Any, model: str,
           tenant_id: str | None = None) -> PgOp:
    """The statement storing one embedding (replacing any)."""
    cols, args = ["id", "dim", "embedding", "model"], [row_id, len(vec), blob(vec), model]
    if tenant_id is not None:
        cols.append("tenant_id")
        args.append(tenant_id)
    marks = [f"${i + 1}" for i in range(len(args))]
    if backend == "pgvector":
        cols.append("vec")
        args.append(literal(vec))
        marks.append(f"${len(args)}::text::vector")
    sets = ", ".join(f"{c}=EXCLUDED.{c}" for c in cols[1:])
    return PgOp(f"INSERT INTO {table}({', '.join(cols)}) VALUES ({', '.join(marks)}) "
                f"ON CONFLICT (id) DO UPDATE SET {sets}", tuple(args))


async def nearest(conn: Any, from_where: str, args: list[Any], query: Any, model: str,
                  k: int) -> list[tuple[int, float]]:
    """pgvector: ``(id, cosine similarity)`` of the ``k`` nearest rows of this model.
    ``from_where`` is ``FROM <vector table> v ... WHERE ...`` using ``$1..$n`` for ``args``."""
    n = len(args)
    rows = await conn.fetch(
        f"SELECT v.id, 1 - (v.vec <=> ${n + 3}::text::vector) AS s {from_where} "
        f"AND v.dim=${n + 1} AND v.model=${n + 2} AND v.vec IS NOT NULL "
        f"ORDER BY v.vec <=> ${n + 3}::text::vector LIMIT ${n + 4}",
        *args, len(query), model, literal(query), k)
    return [(r[0], float(r[1])) for r in rows]


def matrix(rows: list[Any], dim: int) -> tuple[list[int], np.ndarray]:
    """``(ids, vectors)`` for a VectorScopes loader from ``(id, embedding)`` rows."""
    return [r[0] for r in rows], blobs_to_matrix([bytes(r[1]) for r in rows], dim)
