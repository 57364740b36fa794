"""The ``memories`` table group: user memory's records, their full text and their vectors.

``MemoryRows`` is the interface the user-memory tier (``tiers/memory/``) is written over; it has
two implementations, ``storage/sqlite/memories.py`` (the local file: ``memories``,
``memories_fts``, ``memory_vectors``) and ``storage/postgres/memories.py`` (the shared store),
and ``backend_for`` sets one as ``Storage.memories``. The SQL of each dialect lives only there.

Reads are async methods. Writes are returned as operations (``Op`` for SQLite, ``PgOp`` for
PostgreSQL) and committed with ``Storage.write(ops)``, so that a record, its vector and its
audit row (another group's operation) commit in one transaction. A live preference, rule or
playbook is unique per user, kind and ``dedup_of`` (SQLite: ``memories_live`` on preferences
and rules; PostgreSQL: the same on all three): a second one is refused at commit with
``ConstraintError`` -- another writer got there first.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

COLUMNS = "id, user_id, type, kind, key, content, metadata, created_at, updated_at, archived_by"
#: the kinds kept one live record per key (preference key, rule condition, playbook flow+query)
KEYED_KINDS = ("preference", "rule", "playbook")


@dataclass
class MemoryRecord:
    """One stored memory. ``kind`` is entry, preference, rule, playbook or summary."""

    id: int
    user_id: str
    type: str
    kind: str
    key: str | None  #: preference key, rule condition or playbook flow
    content: str  #: entry text, preference value, rule action, playbook query + outcome
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0  #: unix seconds
    updated_at: float = 0.0
    archived_by: int | None = None  #: compacted into this summary (0: archived, no summary)

    _COLS = COLUMNS

    @classmethod
    def from_row(cls, r: Any) -> MemoryRecord:
        """From a row in ``COLUMNS`` order (``metadata`` as JSON text)."""
        return cls(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7], r[8], r[9])

    def to_wire(self) -> dict[str, Any]:
        d = asdict(self)
        d["timestamp"] = self.created_at
        if self.kind == "preference":
            d["value"] = self.content
        elif self.kind == "rule":
            d["condition"], d["action"] = self.key, self.content
        elif self.kind == "playbook":
            for k in ("flow", "slots", "tool_calls", "outcome", "user_query"):
                d[k] = self.metadata.get(k)
        return d

    def metadata_json(self) -> str:
        return to_json(self.metadata)

    def row(self) -> tuple[Any, ...]:
        """The record as a row of ``memories`` (``metadata`` as JSON text)."""
        return (self.id, self.user_id, self.type, self.kind, self.key, self.content,
                self.metadata_json(), self.created_at, self.updated_at, self.archived_by)

    def copy(self) -> MemoryRecord:
        return MemoryRecord(**{**self.__dict__, "metadata": dict(self.metadata)})


def to_json(metadata: dict[str, Any]) -> str:
    """``metadata`` as stored (JSON text: what was written is what is read back)."""
    return json.dumps(metadata, ensure_ascii=False, default=str)


def fold(text: str) -> str:
    """The form two playbook queries are compared in: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


def dedup_key(kind: str, key: str | None, metadata: dict[str, Any]) -> str | None:
    """What must be unique among a user's live records of ``kind`` (None: nothing)."""
    if kind in ("preference", "rule"):
        return key or ""
    if kind == "playbook":
        return f"{key}\n{fold(str(metadata.get('user_query') or ''))}"
    return None


def dedup_of(rec: MemoryRecord) -> str | None:
    return dedup_key(rec.kind, rec.key, rec.metadata)


def newest_where(user_id: str, type_: str, *, include_archived: bool, kind: str | None,
                 before_id: int | None) -> tuple[str, list[Any]]:
    """The condition of ``MemoryRows.newest`` with ``?`` marks (numbered on PostgreSQL)."""
    where = "user_id=? AND type=?"
    params: list[Any] = [user_id, type_]
    if not include_archived:
        where += " AND archived_by IS NULL"
    if kind:
        where += " AND kind=?"
        params.append(kind)
    if before_id is not None:
        where += " AND id<?"
        params.append(before_id)
    return where, params


@dataclass
class UserCounts:
    """One user's stored layers, for ``memman_memory_stats``."""

    live: dict[str, int]  #: live records by kind
    episodic: int  #: live records of the episodic layer
    stored_bytes: int  #: content + metadata + key of the live records
    archived: int
    vectors: int

    @classmethod
    def from_rows(cls, rows: list[Any], archived: int, vectors: int) -> UserCounts:
        """From ``(type, kind, records, bytes)`` rows of the user's live records."""
        live: dict[str, int] = {}
        episodic = stored = 0
        for t, k, n, b in rows:
            live[k] = live.get(k, 0) + n
            episodic += n if t == "episodic" else 0
            stored += b or 0
        return cls(live, episodic, stored, int(archived), int(vectors))


class MemoryRows(Protocol):
    """The ``memories`` table group on one backend."""

    #: nothing else writes these rows (the local file): a cache of them, once loaded, is the
    #: truth; otherwise (a shared store) a cache must read through
    sole_writer: bool
    vectors: Any  #: shown as ``user_memory.vectors`` (``.backend``: how vectors are ranked)

    @property
    def vector_backend(self) -> str: ...

    async def open(self) -> None:
        """Ready to hand out ids (SQLite: after the largest stored one)."""

    async def reserve_ids(self, n: int) -> None:
        """Have ``n`` ids ready for ``next_id`` (and, on a shared store, for its audit)."""

    def next_id(self) -> int: ...

    # --- reads ----------------------------------------------------------------------------
    async def get(self, record_id: int, user_id: str | None = None) -> MemoryRecord | None:
        """One record (of that user), live or archived."""

    async def live(self, ids: list[int]) -> dict[int, MemoryRecord]:
        """The live records among ``ids``."""

    async def keyed(self, user_id: str | None = None) -> list[MemoryRecord]:
        """The live preferences, rules and playbooks of one user (None: of every user), in id
        order."""

    async def live_key(self, user_id: str, kind: str, dedup: str) -> MemoryRecord | None:
        """The live record of ``kind`` the unique index compares with ``dedup``."""

    async def newest(self, user_id: str, type_: str, *, limit: int,
                     include_archived: bool = False, kind: str | None = None,
                     before_id: int | None = None) -> list[MemoryRecord]:
        """The user's records of one layer, newest first."""

    async def oldest_live(self, user_id: str, type_: str) -> list[MemoryRecord]:
        """The user's live records of one layer, oldest first (what compaction folds)."""

    async def full_text(self, user_id: str, types: tuple[str, ...], words: list[str],
                        kind: str | None, candidates: int, *, scan: int,
                        want: int, key_prefixes: tuple[str, ...] | None = None
                        ) -> list[tuple[MemoryRecord, float]]:
        """The live records of these layers (of ``kind``; whose key starts with one of
        ``key_prefixes`` when given) matching any of ``words``, best first, with their lexical
        score (higher is better), at most ``candidates``. When the words match more than
        ``scan`` records, only the newest ``scan`` matches may be ranked, unless that leaves
        fewer than ``want``."""

    async def nearest(self, user_id: str, types: tuple[str, ...], query: np.ndarray,
                      model: str, k: int, kind: str | None = None
                      ) -> list[tuple[int, float]] | None:
        """``(id, cosine)`` of the ``k`` nearest live records (of ``kind``), best first --
        or None when this store does not rank vectors itself (the caller ranks the loaded
        vectors)."""

    async def scope_vectors(self, user_id: str, type_: str, model: str,
                            dim: int) -> tuple[list[int], np.ndarray]:
        """The ids and vectors of ``model`` of the live records of one layer of the user."""

    async def backlog(self, after: int, model: str, limit: int) -> list[MemoryRecord]:
        """Live records after id ``after`` with no vector of ``model``, in id order."""

    async def count_backlog(self, model: str) -> int: ...

    async def counts(self) -> dict[str, int]:
        """Live records of every user: users, episodic, preferences, rules, playbooks."""

    async def user_counts(self, user_id: str) -> UserCounts: ...

    async def counts_by_type(self, user_id: str, types: list[str]) -> dict[str, int]:
        """Records of these layers of the user, archived ones included (what clear deletes)."""

    async def count_archived_by(self, summary_id: int) -> int: ...

    async def put_vectors(self, ids: list[int], vecs: np.ndarray, model: str) -> None:
        """Store vectors made in the background, skipping records deleted meanwhile."""

    # --- writes, as operations for Storage.write ------------------------------------------
    def upsert(self, rec: MemoryRecord) -> list[Any]:
        """Insert ``rec`` or rewrite it by its id (never another live record of its key)."""

    def put_vector(self, record_id: int, vec: np.ndarray, model: str) -> Any: ...

    def touch(self, record_id: int, metadata: dict[str, Any], updated_at: float) -> Any: ...

    def archive(self, ids: list[int], summary_id: int) -> list[Any]:
        """Archive records behind compaction summary ``summary_id`` (0: no summary)."""

    def rewrite(self, record_id: int, content: str, metadata: dict[str, Any]) -> Any: ...

    def relink(self, summary_id: int) -> Any:
        """The records a removed summary archived stay archived, linked to no summary."""

    def delete(self, record_id: int) -> list[Any]:
        """One record and its vector."""

    def clear(self, user_id: str, types: list[str]) -> list[Any]:
        """Every record (and vector) of these layers of the user."""
