"""Vector search with sqlite-vec.

Vectors are stored by the normal writer in plain tables (``memory_vectors``,
``chunk_vectors``) as float32 little-endian blobs — sqlite-vec's own vector format — so writes
need no extension. Nearest neighbours are found by a separate read-only connection that loads
sqlite-vec and ranks with ``vec_distance_cosine`` (exact search; at the sizes memman targets
this is simpler and as fast as an approximate index).

Loading an extension needs an SQLite build that allows it. Python's own ``sqlite3`` does when
it was compiled with ``--enable-loadable-sqlite-extensions``; otherwise ``pysqlite3`` (from the
``pysqlite3-binary`` wheel) is used if installed. With neither, the same ranking runs in Python
over the stored blobs, and ``backend`` says so.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from array import array
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def pack(vec: list[float]) -> bytes:
    """A vector as sqlite-vec's float32 blob."""
    return array("f", vec).tobytes()


def unpack(blob: bytes) -> array:
    a = array("f")
    a.frombytes(blob)
    return a


def _connect_with_vec(path: Path) -> tuple[Any, str]:
    import sqlite_vec

    modules: list[Any] = []
    import sqlite3
    modules.append(sqlite3)
    try:
        from pysqlite3 import dbapi2 as pysqlite3  # type: ignore[import-not-found]
        modules.append(pysqlite3)
    except ImportError:
        pass
    for mod in modules:
        conn = mod.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        try:
            conn.enable_load_extension(True)
            sqlite_vec.load(conn)
            conn.enable_load_extension(False)
            return conn, f"sqlite-vec via {mod.__name__}"
        except (AttributeError, Exception):
            conn.close()
    raise RuntimeError("no SQLite build here can load extensions")


class VectorIndex:
    """k-nearest-neighbour queries over the vector tables."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: Any = None
        self._lock = threading.Lock()
        self.backend = "none"

    def open(self) -> None:
        try:
            self._conn, self.backend = _connect_with_vec(self.path)
        except Exception as exc:
            log.info("sqlite-vec unavailable (%s); vector ranking runs in Python", exc)
            self._conn, self.backend = None, "python"

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def knn(self, sql_sqlite_vec: str, sql_plain: str, params: list[Any],
                  query: list[float], k: int, fetch_plain: Any) -> list[tuple[int, float]]:
        """``(id, cosine similarity)`` of the ``k`` nearest rows.

        ``sql_sqlite_vec`` selects ``id, vec_distance_cosine(embedding, ?)`` (the query blob is
        its first parameter, then ``params``, then ``k``); ``sql_plain`` selects ``id,
        embedding`` with ``params`` and is used (through the async ``fetch_plain``) when
        sqlite-vec cannot load.
        """
        blob = pack(query)
        if self._conn is not None:
            def run() -> list[tuple[int, float]]:
                with self._lock:
                    cur = self._conn.execute(sql_sqlite_vec, [blob, *params, k])
                    return [(r[0], 1.0 - r[1]) for r in cur.fetchall()]
            return await asyncio.to_thread(run)
        rows = await fetch_plain(sql_plain, params)
        qn = math.sqrt(sum(x * x for x in query)) or 1.0
        scored = []
        for rid, emb in rows:
            v = unpack(emb)
            if len(v) != len(query):
                continue
            vn = math.sqrt(sum(x * x for x in v)) or 1.0
            scored.append((rid, sum(a * b for a, b in zip(v, query, strict=True)) / (qn * vn)))
        scored.sort(key=lambda t: -t[1])
        return scored[:k]
