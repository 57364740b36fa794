"""What every layer of user memory is written with: the parts (``MemoryCore``), a prepared
change (``Change``) and how one is committed -- in one transaction with its vector, its audit
row and the caller's operations, the race for a key decided by the database."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from memman.errors import CONFLICT, MemmanError, invalid_params
from memman_daemon.search.hybrid import memory_vector_text
from memman_daemon.search.vector_matrix import VectorMatrix, VectorScopes
from memman_daemon.storage.memories import MemoryRecord, dedup_of
from memman_daemon.storage.sqlite.store import ConstraintError
from memman_daemon.tiers.memory.cache import KeyedCache

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.search.reembed import VectorSync
    from memman_daemon.storage import Storage
    from memman_daemon.tiers.audit import Recorder

MEMORY_TYPES = ("working", "episodic", "semantic", "procedural")
STORED_TYPES = ("episodic", "semantic", "procedural")
T = TypeVar("T")
#: a keyed change refused by the unique index (a concurrent one won) is prepared again this often
RACE_ATTEMPTS = 4


def check_type(type_: str, allowed: tuple[str, ...] = MEMORY_TYPES) -> None:
    if type_ not in allowed:
        raise invalid_params("type", f"must be one of {', '.join(allowed)}; got {type_!r}")


@dataclass
class Change:
    """A prepared memory change: commit ``ops`` (with any others), then ``apply()``."""

    record: MemoryRecord
    ops: list[Any]
    apply: Callable[[], None]
    event: str  #: the memory event kind to publish after commit
    previous: MemoryRecord | None = None
    changed: bool = True


class RaceLost(MemmanError):
    """Another writer committed a live record with the same key first."""


@dataclass
class MemoryCore:
    """The parts every layer uses: the rows (``storage.memories``), the keyed cache, the
    loaded vector matrices (scopes ``(user_id, type)``), the embedder, events and audit."""

    config: Config
    clock: Clock
    storage: Storage
    events: EventBus
    embedder: Embedder
    vector_sync: VectorSync  #: asked for a pass when records were stored without vectors
    audit: Recorder  #: where changes are audited (the shared audit with PostgreSQL)
    races: int = 0

    def __post_init__(self) -> None:
        self.rows = self.storage.memories
        self.cache = KeyedCache(self.rows)
        self.vscopes = VectorScopes(self._load_scope)

    def new(self, user_id: str, type_: str, kind: str, key: str | None, content: str,
            metadata: dict[str, Any], at: float | None = None) -> MemoryRecord:
        at = at if at is not None else self.clock.now()
        return MemoryRecord(self.rows.next_id(), user_id, type_, kind, key, content, metadata,
                            at, at)

    def publish(self, kind: str, user_id: str, **data: Any) -> None:
        self.events.publish("memory", kind, data, user_id=user_id)

    # --- vectors -----------------------------------------------------------------------
    @staticmethod
    def vector_text(rec: MemoryRecord) -> str:
        return memory_vector_text(rec.kind, rec.key, rec.content, rec.metadata)

    async def _load_scope(self, key: Hashable) -> tuple[list[int], np.ndarray]:
        scope: tuple[str, str] = key  # type: ignore[assignment]  # (user_id, type)
        return await self.rows.scope_vectors(*scope, self.embedder.model_id,
                                             self.vscopes.dim or 0)

    async def scope(self, user_id: str, type_: str, dim: int) -> VectorMatrix:
        self.vscopes.dim = dim
        return await self.vscopes.get((user_id, type_), dim)

    def forget_scopes(self, user_id: str) -> None:
        """Drop the loaded vectors of a user (reloaded when next searched)."""
        for key in [k for k in self.vscopes.scopes if k[0] == user_id]:  # type: ignore[index]
            self.vscopes.scopes.pop(key, None)

    async def vector_ops(self, recs: list[MemoryRecord], vecs: np.ndarray | None = None
                         ) -> tuple[list[Any], Callable[[], None]]:
        """Ops storing the records' vectors (embedded now unless given) and a callable that
        puts them in the loaded matrices after commit. Without vectors (embeddings off or
        failing) the background worker fills them in later."""
        emb = self.embedder
        if not emb.enabled or not recs:
            return [], lambda: None
        if vecs is None:
            vecs = await emb.embed([self.vector_text(r) for r in recs])
        if vecs is None:
            self.vector_sync.request()
            return [], lambda: None
        model = emb.model_id
        ops = [self.rows.put_vector(r.id, v, model) for r, v in zip(recs, vecs, strict=True)]

        def index() -> None:
            if emb.model_id != model:
                return
            for r, v in zip(recs, vecs, strict=True):
                self.vscopes.add((r.user_id, r.type), [r.id], v[None, :])
        return ops, index

    # --- commit --------------------------------------------------------------------------
    async def commit(self, change: Change, extra_ops: list[Any] | None = None,
                     client: str = "") -> None:
        """Write the change (with ``extra_ops`` in the same transaction), then apply it.

        An edit (a record that replaces a previous value) is written to the audit log with the
        previous value, in the same transaction, so a record's history can be read back. A
        keyed record refused by the unique index (another writer's committed first) is
        ``RaceLost``: CONFLICT, naming the winner."""
        ops = change.ops + (extra_ops or [])
        edit = self._edit_audit(change, client)
        if edit is not None:
            ops.append(edit[1])
        if change.changed or extra_ops:
            try:
                await self.storage.write(ops)
            except ConstraintError as exc:
                raise await self._race_lost(change.record) from exc
        self._applied(change, edit[0].id if edit else None)

    async def _race_lost(self, rec: MemoryRecord) -> RaceLost:
        self.races += 1
        self.cache.invalidate(rec.user_id)  # the winner is read when next needed
        winner = await self.rows.live_key(rec.user_id, rec.kind, dedup_of(rec) or "")
        won = winner.to_wire() if winner else None
        return RaceLost(CONFLICT, f"another writer stored {rec.kind} {rec.key!r} of user "
                        f"{rec.user_id!r} first" + (f" ({won['content']!r})" if won else "")
                        + "; the store kept the first. Pass replace=true to overwrite it, or "
                        "keep it", {"key": rec.key, "existing": won["content"] if won else None,
                                    "proposed": rec.content, "winner": won})

    async def decided(self, once: Callable[[], Awaitable[T]]) -> T:
        """Run a change of a keyed record; when the database refused it because a concurrent
        change of the same user and key committed first, prepare it again: it then sees the
        winner (its value is the ``previous``, or CONFLICT when the caller did not ask to
        replace)."""
        for attempt in range(RACE_ATTEMPTS):
            try:
                return await once()
            except RaceLost:
                if attempt == RACE_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0)  # the winner's own step applies its record first
        raise AssertionError("unreachable")

    def _edit_audit(self, change: Change, client: str) -> tuple[Any, Any] | None:
        """The audit record (and its operation) of an edit: a change replacing a value."""
        prev = change.previous
        if not change.changed or prev is None:
            return None
        rec = change.record
        return self.audit.record(
            "edit", rec.content, f"memory:{rec.user_id}#{rec.id}", f"{rec.kind}:{rec.key}",
            client, user_id=rec.user_id, record_id=rec.id, type=rec.type, kind=rec.kind,
            key=rec.key, previous=prev.content, previous_metadata=prev.metadata,
            previous_updated_at=prev.updated_at)

    def _applied(self, change: Change, audit_id: int | None) -> None:
        """After the commit: update this daemon's view and announce the change."""
        if change.changed:
            change.apply()
            data: dict[str, Any] = {"record": change.record.to_wire()}
            if change.previous is not None:
                data["previous"] = change.previous.to_wire()
                data["audit_id"] = audit_id
            self.publish(change.event, change.record.user_id, **data)
