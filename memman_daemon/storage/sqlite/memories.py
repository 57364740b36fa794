"""The ``memories`` table group in the local SQLite file (``storage/memories.py``'s
``MemoryRows``): ``memories`` (one row per stored record), its FTS5 index ``memories_fts`` and
``memory_vectors`` (one vector per record, with the model that made it). Writes are ``Op``s
for ``Storage.write``; the daemon is the file's only writer (``sole_writer``).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from memman_daemon.search import fts
from memman_daemon.search.vector_matrix import blobs_to_matrix
from memman_daemon.search.vectors import VectorIndex
from memman_daemon.storage import memories as model
from memman_daemon.storage.memories import COLUMNS, MemoryRecord, UserCounts
from memman_daemon.storage.sqlite import fts as fts_rows
from memman_daemon.storage.sqlite.store import Op, Store


def prefixed(alias: str) -> str:
    """``COLUMNS`` of table alias ``alias``."""
    return ", ".join(f"{alias}.{c.strip()}" for c in COLUMNS.split(","))


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _records(rows: list[Any]) -> list[MemoryRecord]:
    return [MemoryRecord.from_row(r) for r in rows]


#: the columns an upsert of a record rewrites (all but its id)
_SET = ", ".join(f"{c.strip()}=excluded.{c.strip()}" for c in COLUMNS.split(",")[1:])
_VECTOR = "INSERT OR REPLACE INTO memory_vectors(id, dim, embedding, model) "


def _blob(vec: np.ndarray) -> tuple[int, bytes]:
    return int(vec.shape[0]), vec.astype(np.float32).tobytes()


class SqliteMemories:
    """User memory's rows in the local file."""

    sole_writer = True

    def __init__(self, store: Store) -> None:
        self.store = store
        self.vectors = VectorIndex(store.path)  # sqlite-vec where it loads (tests compare)
        self._ids = itertools.count(1)

    @property
    def vector_backend(self) -> str:
        return str(self.vectors.backend)

    async def open(self) -> None:
        rows = await self.store.fetchall("SELECT max(id) FROM memories")
        self._ids = itertools.count((rows[0][0] or 0) + 1)

    async def reserve_ids(self, n: int) -> None:
        pass  # a local counter

    def next_id(self) -> int:
        return next(self._ids)

    # --- reads ----------------------------------------------------------------------------
    async def _select(self, where: str, params: Any = ()) -> list[MemoryRecord]:
        return _records(await self.store.fetchall(f"SELECT {COLUMNS} FROM memories {where}",
                                                  params))

    async def get(self, record_id: int, user_id: str | None = None) -> MemoryRecord | None:
        if user_id is None:
            found = await self._select("WHERE id=?", (record_id,))
        else:
            found = await self._select("WHERE id=? AND user_id=?", (record_id, user_id))
        return found[0] if found else None

    async def live(self, ids: list[int]) -> dict[int, MemoryRecord]:
        if not ids:
            return {}
        found = await self._select(f"WHERE archived_by IS NULL AND id IN ({_marks(len(ids))})",
                                   ids)
        return {r.id: r for r in found}

    async def keyed(self, user_id: str | None = None) -> list[MemoryRecord]:
        live = "type IN ('semantic','procedural') AND archived_by IS NULL"
        if user_id is None:
            return await self._select(f"WHERE {live} ORDER BY id")
        return await self._select(f"WHERE user_id=? AND {live} ORDER BY id", (user_id,))

    async def live_key(self, user_id: str, kind: str, dedup: str) -> MemoryRecord | None:
        # no dedup column here: a playbook's is its flow and query, compared as stored
        key = dedup.split("\n", 1)[0] if kind == "playbook" else dedup
        found = await self._select("WHERE user_id=? AND kind=? AND key=? AND archived_by IS NULL "
                                   "ORDER BY id", (user_id, kind, key))
        return next((r for r in found if model.dedup_of(r) == dedup), None)

    async def newest(self, user_id: str, type_: str, *, limit: int,
                     include_archived: bool = False, kind: str | None = None,
                     before_id: int | None = None) -> list[MemoryRecord]:
        where, params = model.newest_where(user_id, type_, include_archived=include_archived,
                                           kind=kind, before_id=before_id)
        return await self._select(f"WHERE {where} ORDER BY id DESC LIMIT ?", [*params, limit])

    async def oldest_live(self, user_id: str, type_: str) -> list[MemoryRecord]:
        return await self._select("WHERE user_id=? AND type=? AND archived_by IS NULL "
                                  "ORDER BY created_at, id", (user_id, type_))

    async def full_text(self, user_id: str, types: tuple[str, ...], words: list[str],
                        kind: str | None, candidates: int, *, scan: int,
                        want: int, key_prefixes: tuple[str, ...] | None = None
                        ) -> list[tuple[MemoryRecord, float]]:
        store = self.store
        # the rows FTS5 indexes (archived ones too), as the highest id: one b-tree descent,
        # where count(*) reads every page (ms at 100k rows, on every search). Ids only grow and
        # deletions are rare, and the rule only asks whether a word is in most rows
        total = (await store.fetchall("SELECT coalesce(max(rowid), 0) FROM memories"))[0][0]
        match = fts.match_expr(await fts_rows.informative(store, "memories_fts", words, total))
        if not match:
            return []
        # BM25 over every match is what makes a query of very common words slow: when the
        # words match more than `scan` entries, only the newest `scan` matches are ranked --
        # unless that leaves this user fewer than `want` results, then all are
        low = await fts_rows.newest_bound(store, "memories_fts", match, scan)
        found = await self._ranked(match, low, user_id, types, kind, candidates, key_prefixes)
        if low and len(found) < want:
            found = await self._ranked(match, 0, user_id, types, kind, candidates,
                                       key_prefixes)
        return [(MemoryRecord.from_row(r), -r[10]) for r in found]

    async def _ranked(self, match: str, low: int, user_id: str, types: tuple[str, ...],
                      kind: str | None, limit: int,
                      key_prefixes: tuple[str, ...] | None = None) -> list[Any]:
        filt = f"m.user_id=? AND m.type IN ({_marks(len(types))}) AND m.archived_by IS NULL"
        params: list[Any] = [user_id, *types]
        if kind:
            filt += " AND m.kind=?"
            params.append(kind)
        if key_prefixes is not None:  # compared as text: no LIKE pattern in a user's key
            filt += " AND (" + " OR ".join(["substr(m.key, 1, ?) = ?"] * len(key_prefixes)) + ")"
            for p in key_prefixes:
                params += [len(p), p]
        return await self.store.fetchall(
            f"SELECT {prefixed('m')}, bm25(memories_fts) AS r "
            f"FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
            f"WHERE memories_fts MATCH ? AND memories_fts.rowid >= ? AND {filt} "
            f"ORDER BY r LIMIT ?", [match, low, *params, limit])

    async def nearest(self, user_id: str, types: tuple[str, ...], query: np.ndarray,
                      model: str, k: int, kind: str | None = None
                      ) -> list[tuple[int, float]] | None:
        return None  # ranked in the daemon's loaded matrices

    async def scope_vectors(self, user_id: str, type_: str, model: str,
                            dim: int) -> tuple[list[int], np.ndarray]:
        found = await self.store.fetchall(
            "SELECT v.id, v.embedding FROM memory_vectors v JOIN memories m ON m.id = v.id "
            "WHERE m.user_id=? AND m.type=? AND m.archived_by IS NULL AND v.model=? AND v.dim=?",
            (user_id, type_, model, dim))
        return [r[0] for r in found], blobs_to_matrix([r[1] for r in found], dim)

    async def backlog(self, after: int, model: str, limit: int) -> list[MemoryRecord]:
        return _records(await self.store.fetchall(
            f"SELECT {prefixed('m')} FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
            "WHERE m.id > ? AND m.archived_by IS NULL AND (v.id IS NULL OR v.model <> ?) "
            "ORDER BY m.id LIMIT ?", (after, model, limit)))

    async def count_backlog(self, model: str) -> int:
        rows = await self.store.fetchall(
            "SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
            "WHERE m.archived_by IS NULL AND (v.id IS NULL OR v.model <> ?)", (model,))
        return int(rows[0][0])

    async def counts(self) -> dict[str, int]:
        rows = await self.store.fetchall(
            "SELECT count(DISTINCT user_id), coalesce(sum(type='episodic'), 0), "
            "coalesce(sum(kind='preference'), 0), coalesce(sum(kind='rule'), 0), "
            "coalesce(sum(kind='playbook'), 0) FROM memories WHERE archived_by IS NULL")
        return dict(zip(("users", "episodic", "preferences", "rules", "playbooks"), rows[0],
                        strict=True))

    async def user_counts(self, user_id: str) -> UserCounts:
        rows = await self.store.fetchall(
            "SELECT type, kind, count(*), sum(length(content) + length(metadata) + "
            "length(coalesce(key,''))) FROM memories WHERE user_id=? AND archived_by IS NULL "
            "GROUP BY type, kind", (user_id,))
        archived = await self.store.fetchall(
            "SELECT count(*) FROM memories WHERE user_id=? AND archived_by IS NOT NULL",
            (user_id,))
        vecs = await self.store.fetchall(
            "SELECT count(*) FROM memory_vectors v JOIN memories m ON m.id=v.id WHERE m.user_id=?",
            (user_id,))
        return UserCounts.from_rows(rows, archived[0][0], vecs[0][0])

    async def counts_by_type(self, user_id: str, types: list[str]) -> dict[str, int]:
        rows = await self.store.fetchall(
            f"SELECT type, count(*) FROM memories WHERE user_id=? AND type IN "
            f"({_marks(len(types))}) GROUP BY type", [user_id, *types])
        return {r[0]: r[1] for r in rows}

    async def count_archived_by(self, summary_id: int) -> int:
        rows = await self.store.fetchall("SELECT count(*) FROM memories WHERE archived_by=?",
                                         (summary_id,))
        return int(rows[0][0])

    async def put_vectors(self, ids: list[int], vecs: np.ndarray, model: str) -> None:
        await self.store.write([
            (_VECTOR + "SELECT ?,?,?,? WHERE EXISTS (SELECT 1 FROM memories WHERE id=?)",
             (i, *_blob(v), model, i)) for i, v in zip(ids, vecs, strict=True)])

    # --- writes ---------------------------------------------------------------------------
    def upsert(self, rec: MemoryRecord) -> list[Op]:
        # not INSERT OR REPLACE: that would delete another live record of the same user and
        # key to make room; here the unique index memories_live refuses it
        return [(f"INSERT INTO memories({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?) "
                 f"ON CONFLICT(id) DO UPDATE SET {_SET}", rec.row())]

    def put_vector(self, record_id: int, vec: np.ndarray, model: str) -> Op:
        return (_VECTOR + "VALUES (?,?,?,?)", (record_id, *_blob(vec), model))

    def touch(self, record_id: int, metadata: dict[str, Any], updated_at: float) -> Op:
        return ("UPDATE memories SET metadata=?, updated_at=? WHERE id=?",
                (model.to_json(metadata), updated_at, record_id))

    def archive(self, ids: list[int], summary_id: int) -> list[Op]:
        return [("UPDATE memories SET archived_by=? WHERE id=?", (summary_id, i)) for i in ids]

    def rewrite(self, record_id: int, content: str, metadata: dict[str, Any]) -> Op:
        return ("UPDATE memories SET content=?, metadata=? WHERE id=?",
                (content, model.to_json(metadata), record_id))

    def relink(self, summary_id: int) -> Op:
        return ("UPDATE memories SET archived_by=0 WHERE archived_by=?", (summary_id,))

    def delete(self, record_id: int) -> list[Op]:
        return [("DELETE FROM memory_vectors WHERE id=?", (record_id,)),
                ("DELETE FROM memories WHERE id=?", (record_id,))]

    def clear(self, user_id: str, types: list[str]) -> list[Op]:
        marks = _marks(len(types))
        return [(f"DELETE FROM memory_vectors WHERE id IN (SELECT id FROM memories WHERE "
                 f"user_id=? AND type IN ({marks}))", [user_id, *types]),
                (f"DELETE FROM memories WHERE user_id=? AND type IN ({marks})",
                 [user_id, *types])]
