"""User memory in the shared store (PostgreSQL).

The same component as ``tiers/user_memory.py`` — validation, record shapes, events, working
memory (the local scratchpad) are inherited — with the storage underneath swapped:

- nothing is cached across calls: before a change or a read that needs them, the user's live
  preferences, rules and playbooks are read from the shared store (one query), so a write made
  by any daemon is seen by the next call on every daemon;
- ids come from the shared sequence (``PgStore.ensure_ids``), never from a local counter;
- a write commits in PostgreSQL (with its vector and any audit record) before the answer;
- the database decides between daemons: a live preference/rule/playbook is unique per user
  (``memories_live``); the daemon whose insert loses gets -32002 with the winner's value, or —
  when it asked to replace (``learn``'s default) — tries again and overwrites;
- search ranks with PostgreSQL's full text (``websearch_to_tsquery``, ``ts_rank``) and the
  vectors of ``shared_store/vectors.py``; scores have the same parts and the same fusion.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import asyncpg

from memman.errors import CONFLICT, NOT_FOUND, MemmanError, invalid_params
from memman_daemon.search import fts
from memman_daemon.search.hybrid import content_words
from memman_daemon.storage.postgres import vectors
from memman_daemon.storage.postgres.ops import execute, split
from memman_daemon.storage.postgres.pool import PgStore, SharedCounts
from memman_daemon.storage.postgres.search import SharedIds as _SharedIds
from memman_daemon.storage.postgres.search import SharedVectorBackend, informative_query
from memman_daemon.tiers.scratchpad import normalize
from memman_daemon.tiers.user_memory import (
    MEMORY_TYPES,
    Change,
    MemoryRecord,
    UserMemory,
    _check_type,
    clear_types,
    summary_without,
)

T = TypeVar("T")
COLS = MemoryRecord._COLS
UPSERT = ("INSERT INTO memories(id, user_id, type, kind, key, content, metadata, created_at, "
          "updated_at, archived_by, dedup) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) "
          "ON CONFLICT (id) DO UPDATE SET user_id=EXCLUDED.user_id, type=EXCLUDED.type, "
          "kind=EXCLUDED.kind, key=EXCLUDED.key, content=EXCLUDED.content, "
          "metadata=EXCLUDED.metadata, created_at=EXCLUDED.created_at, "
          "updated_at=EXCLUDED.updated_at, archived_by=EXCLUDED.archived_by, dedup=EXCLUDED.dedup")


def dedup_of(rec: MemoryRecord) -> str | None:
    """What must be unique among a user's live records of this kind."""
    if rec.kind in ("preference", "rule"):
        return rec.key or ""
    if rec.kind == "playbook":
        return f"{rec.key}\n{normalize(str(rec.metadata.get('user_query') or ''))}"
    return None


def upsert_args(rec: MemoryRecord) -> tuple[Any, ...]:
    return (rec.id, rec.user_id, rec.type, rec.kind, rec.key, rec.content,
            json.dumps(rec.metadata, ensure_ascii=False, default=str), rec.created_at,
            rec.updated_at, rec.archived_by, dedup_of(rec))


class RaceLost(MemmanError):
    """Another daemon committed a live record with the same key first."""


class PgUserMemory(UserMemory):
    """User memory kept in PostgreSQL: ``UserMemory``'s arguments and the shared store."""

    def __init__(self, *args: Any, pg: PgStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pg = pg
        self._ids = _SharedIds(self.pg)
        self.vectors = SharedVectorBackend(self.pg)  # type: ignore[assignment]
        self._locks: dict[str, asyncio.Lock] = {}
        self._counts = SharedCounts(
            pg, "SELECT count(DISTINCT user_id), count(*) FILTER (WHERE type='episodic'), "
            "count(*) FILTER (WHERE kind='preference'), count(*) FILTER (WHERE kind='rule'), "
            "count(*) FILTER (WHERE kind='playbook') FROM memories WHERE archived_by IS NULL",
            ("users", "episodic", "preferences", "rules", "playbooks"))
        self.races = 0

    async def load(self) -> None:
        self.pg.on_up.append(self._counts.refresh)

    async def close(self) -> None:
        self._counts.close()

    def stats(self) -> dict[str, Any]:
        """Counts as of the previous call (refreshed in the background: stats are sync)."""
        return {**self._counts.current(),
                "searches": self.searches, "search_mode": self.search_mode,
                "vector_backend": self.pg.vector_backend, "backend": "postgresql",
                "races": self.races, "duplicates": self.duplicates,
                "vector_index": self.vscopes.stats()}

    def _lock(self, user_id: str) -> asyncio.Lock:
        return self._locks.setdefault(user_id, asyncio.Lock())

    async def _sync_user(self, user_id: str) -> None:
        """Replace this daemon's view of the user's live preferences/rules/playbooks with the
        shared store's."""
        rows = await self.pg.fetch(
            f"SELECT {COLS} FROM memories WHERE user_id=$1 AND type IN ('semantic','procedural') "
            "AND archived_by IS NULL ORDER BY id", user_id)
        self.prefs.pop(user_id, None)
        self.rules.pop(user_id, None)
        self.playbooks.pop(user_id, None)
        for r in rows:
            self._index(MemoryRecord.from_row(r))

    async def _sync_key(self, user_id: str, kind: str, key: str) -> None:
        """Refresh this daemon's view of one live preference/rule (or a flow's playbooks)."""
        if kind == "playbook":
            rows = await self.pg.fetch(
                f"SELECT {COLS} FROM memories WHERE user_id=$1 AND kind='playbook' AND key=$2 "
                "AND archived_by IS NULL ORDER BY id", user_id, key)
            books = self.playbooks.setdefault(user_id, [])
            books[:] = [b for b in books if b.key != key]
        else:
            rows = await self.pg.fetch(
                f"SELECT {COLS} FROM memories WHERE user_id=$1 AND kind=$2 AND dedup=$3 "
                "AND archived_by IS NULL", user_id, kind, key)
            (self.prefs if kind == "preference" else self.rules).get(user_id, {}).pop(key, None)
        for r in rows:
            self._index(MemoryRecord.from_row(r))

    async def _retrying(self, user_id: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run a change; when another daemon won a race for the same key, run it again (it
        then sees the winner: no change, a replacement, or CONFLICT, as the caller asked)."""
        for attempt in range(3):
            try:
                return await fn()
            except RaceLost:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    # --- the storage underneath the inherited logic --------------------------------------
    def _vector_op(self, record_id: int, vec: Any, model: str) -> Any:
        """A PgOp storing a record's vector (committed with the record)."""
        return vectors.put_op(self.pg.vector_backend, "memory_vectors", record_id, vec, model)

    async def _load_scope(self, key: Hashable) -> tuple[list[int], Any]:
        user_id, type_ = key  # type: ignore[misc]
        dim = self.vscopes.dim or 0
        rows = await self.pg.fetch(
            "SELECT v.id, v.embedding FROM memory_vectors v JOIN memories m ON m.id = v.id "
            "WHERE m.user_id=$1 AND m.type=$2 AND m.archived_by IS NULL AND v.model=$3 "
            "AND v.dim=$4", user_id, type_, self.embedder.model_id, dim)
        return vectors.matrix(rows, dim)

    def forget_scopes(self, user_id: str) -> None:
        """Drop this daemon's loaded vectors of a user (another daemon changed them)."""
        for key in [k for k in self.vscopes.scopes if k[0] == user_id]:  # type: ignore[index]
            self.vscopes.scopes.pop(key, None)

    def on_remote(self, topic: str, kind: str, scope: dict[str, Any]) -> None:
        if topic == "memory" and scope.get("user_id"):
            self.forget_scopes(scope["user_id"])

    async def _nearest(self, user_id: str, types: tuple[str, ...], qv: Any,
                       k: int) -> list[tuple[int, float]]:
        if self.pg.vector_backend != "pgvector":
            return await super()._nearest(user_id, types, qv, k)
        return await self.pg.run(lambda conn: vectors.nearest(
            conn, "FROM memory_vectors v JOIN memories m ON m.id = v.id WHERE m.user_id=$1 "
            "AND m.type = ANY($2::text[]) AND m.archived_by IS NULL", [user_id, list(types)],
            qv, self.embedder.model_id, k))

    async def _fetch(self, ids: list[int]) -> dict[int, MemoryRecord]:
        if not ids:
            return {}
        rows = await self.pg.fetch(f"SELECT {COLS} FROM memories WHERE archived_by IS NULL "
                                   "AND id = ANY($1)", ids)
        return {r[0]: MemoryRecord.from_row(r) for r in rows}

    async def _bm25(self, user_id: str, types: tuple[str, ...], query: str, limit: int,
                    kind: str | None, content_only: bool = False
                    ) -> tuple[dict[int, float], dict[int, MemoryRecord]]:
        """PostgreSQL's full text: ``({id: ts_rank}, {id: record})``, best first."""
        cfg = self.config.memory
        args: list[Any] = [user_id, list(types)]
        filt = "m.user_id=$1 AND m.type = ANY($2::text[]) AND m.archived_by IS NULL"
        if kind:
            args.append(kind)
            filt += f" AND m.kind=${len(args)}"
        text = " ".join(content_words(fts.words(query))) if content_only else query
        cols = ", ".join(f"m.{c.strip()}" for c in COLS.split(","))

        async def read(conn: Any) -> list[Any]:
            tsq = await informative_query(conn, "memories", text)
            if not tsq:
                return []
            n = len(args)
            return await conn.fetch(
                f"SELECT {cols}, ts_rank(m.tsv, q) AS r FROM memories m, "
                f"websearch_to_tsquery('english', ${n + 1}) q WHERE m.tsv @@ q AND {filt} "
                f"ORDER BY r DESC, m.id DESC LIMIT ${n + 2}", *args, tsq, cfg.candidates)

        lexical: dict[int, float] = {}
        rows: dict[int, MemoryRecord] = {}
        for r in await self.pg.run(read):
            rec = MemoryRecord.from_row(r)
            rows[rec.id] = rec
            lexical[rec.id] = float(r[10])
        return lexical, rows

    async def count_vector_backlog(self, model_id: str) -> int:
        return int(await self.pg.fetchval(
            "SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
            "WHERE m.archived_by IS NULL AND (v.id IS NULL OR v.model <> $1)", model_id))

    async def vector_backlog(self, after: int, model_id: str, limit: int) -> list[tuple[int, str]]:
        rows = await self.pg.fetch(
            f"SELECT {', '.join('m.' + c.strip() for c in COLS.split(','))} FROM memories m "
            "LEFT JOIN memory_vectors v ON v.id = m.id WHERE m.id > $1 AND m.archived_by IS NULL "
            "AND (v.id IS NULL OR v.model <> $2) ORDER BY m.id LIMIT $3", after, model_id, limit)
        out = []
        for r in rows:
            rec = MemoryRecord.from_row(r)
            self._backlog_scope[rec.id] = (rec.user_id, rec.type)
            out.append((rec.id, self.vector_text(rec)))
        return out

    async def store_vectors(self, ids: list[int], vecs: Any, model_id: str) -> None:
        backend = self.pg.vector_backend
        ops = [vectors.put_op(backend, "memory_vectors", i, v, model_id)
               for i, v in zip(ids, vecs, strict=True)]

        async def tx(conn: Any) -> None:
            live = {r[0] for r in await conn.fetch("SELECT id FROM memories WHERE id = ANY($1)",
                                                   ids)}
            await execute(conn, [op for op, i in zip(ops, ids, strict=True) if i in live])
        await self.pg.run(tx)
        if self.embedder.model_id == model_id:
            self.vscopes.add_stored(self._backlog_scope, ids, vecs)

    async def _bump(self, old: MemoryRecord, similarity: float,
                    new: MemoryRecord) -> dict[str, Any]:
        """A near-duplicate append: as the SQLite tier, the update in the shared store."""
        meta = dict(old.metadata)
        meta["frequency"] = int(meta.get("frequency", 1)) + 1
        meta["last_duplicate"] = new.content if new.content != old.content else None
        meta = {k: v for k, v in meta.items() if v is not None}
        at = self.clock.now()
        await self.pg.run(lambda conn: conn.execute(
            "UPDATE memories SET metadata=$1, updated_at=$2 WHERE id=$3",
            json.dumps(meta, ensure_ascii=False, default=str), at, old.id))
        prev = MemoryRecord(**{**old.__dict__})
        old.metadata, old.updated_at = meta, at
        self.duplicates += 1
        self._publish("updated", old.user_id, record=old.to_wire(), previous=prev.to_wire(),
                      duplicate=True, similarity=round(similarity, 6))
        return {"type": old.type, "record": old.to_wire(), "created": False,
                "duplicate_of": old.id, "similarity": round(similarity, 6),
                "frequency": meta["frequency"]}

    async def commit(self, change: Change, extra_ops: list[Any] | None = None,
                     client: str = "") -> None:
        shared, local = split(extra_ops or [])
        vec_ops, _ = split(change.ops)  # the record's vector (PgOps from _vector_ops)
        rec = change.record
        edit = self._edit_audit(change, client)  # an edit's history, in the same transaction
        if edit is not None:
            shared.append(edit[1])
        if change.changed or shared:
            async def tx(conn: Any) -> None:
                if change.changed:
                    await conn.execute(UPSERT, *upsert_args(rec))
                    await execute(conn, vec_ops)
                await execute(conn, shared)

            try:
                await self.pg.run(tx)
            except asyncpg.UniqueViolationError as exc:
                self.races += 1
                winner = await self.pg.fetchrow(
                    f"SELECT {COLS} FROM memories WHERE user_id=$1 AND kind=$2 AND dedup=$3 "
                    "AND archived_by IS NULL", rec.user_id, rec.kind, dedup_of(rec))
                won = MemoryRecord.from_row(winner).to_wire() if winner else None
                raise RaceLost(CONFLICT, f"another daemon wrote {rec.kind} {rec.key!r} of user "
                               f"{rec.user_id!r} first"
                               + (f" ({won['content']!r})" if won else "")
                               + "; the shared store kept the first. Pass replace=true to "
                               "overwrite it, or keep it",
                               {"key": rec.key, "existing": won["content"] if won else None,
                                "proposed": rec.content, "winner": won}) from exc
        if local:  # a snippet's "promoted" mark: after the shared commit
            await self.store.write(local)
        self._applied(change, edit[0].id if edit else None)

    async def prepare_preference(self, user_id: str, key: str, value: str, *, replace: bool,
                                 metadata: dict[str, Any] | None = None) -> Change:
        if not key:  # bad params answer -32602 even while the shared store is down
            raise invalid_params("key", "must not be empty")
        await self._sync_key(user_id, "preference", key)
        await self.pg.ensure_ids(2)  # the record and, for a promotion, its audit record
        return await super().prepare_preference(user_id, key, value, replace=replace,
                                                metadata=metadata)

    async def prepare_rule(self, user_id: str, condition: str, action: str, *, replace: bool,
                           metadata: dict[str, Any] | None = None) -> Change:
        if not condition:
            raise invalid_params("condition", "must not be empty")
        await self._sync_key(user_id, "rule", condition)
        await self.pg.ensure_ids(2)
        return await super().prepare_rule(user_id, condition, action, replace=replace,
                                          metadata=metadata)

    async def prepare_playbook(self, user_id: str, pb: dict[str, Any], *, replace: bool) -> Change:
        flow = pb.get("flow") or pb.get("flow_dact")
        if isinstance(flow, str) and flow:
            await self._sync_key(user_id, "playbook", flow)
        await self.pg.ensure_ids(2)
        return await super().prepare_playbook(user_id, pb, replace=replace)

    # --- methods ---------------------------------------------------------------------------
    async def learn(self, user_id: str, key: str, value: Any, opts: dict[str, Any],
                    client: str = "") -> dict[str, Any]:
        return await self._retrying(user_id, lambda: super(PgUserMemory, self).learn(
            user_id, key, value, opts, client))

    async def append(self, user_id: str, type_: str, entry: dict[str, Any],
                     client: str = "") -> dict[str, Any]:
        if type_ == "working":  # the local scratchpad: works while the shared store is down
            return await super().append(user_id, type_, entry, client)
        _check_type(type_, MEMORY_TYPES)
        if not isinstance(entry, dict):
            raise invalid_params("entry", "expected a map")

        async def go() -> dict[str, Any]:
            await self.pg.ensure_ids(1)
            return await super(PgUserMemory, self).append(user_id, type_, entry, client)
        return await self._retrying(user_id, go)

    async def recall(self, user_id: str, key: str) -> dict[str, Any] | None:  # type: ignore[override]
        row = await self.pg.fetchrow(
            f"SELECT {COLS} FROM memories WHERE user_id=$1 AND kind='preference' AND dedup=$2 "
            "AND archived_by IS NULL", user_id, key)
        self.prefs.get(user_id, {}).pop(key, None)
        if row is not None:
            self._index(MemoryRecord.from_row(row))
        return super().recall(user_id, key)

    async def search(self, user_id: str, type_: str, query: str,
                     opts: dict[str, Any]) -> list[dict[str, Any]]:
        if isinstance(opts.get("flow"), str) and type_ != "working":
            await self._sync_user(user_id)  # exact flow, then similar keyed records
        return await super().search(user_id, type_, query, opts)

    async def playbook(self, user_id: str, query: str, opts: dict[str, Any],
                       client: str = "") -> dict[str, Any]:
        await self._sync_user(user_id)
        return await super().playbook(user_id, query, opts, client)

    async def list(self, user_id: str, type_: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        _check_type(type_, MEMORY_TYPES)
        if type_ == "working":
            return await super().list(user_id, type_, opts)
        limit = int(opts.get("limit") or 50)
        where = "user_id=$1 AND type=$2"
        args: list[Any] = [user_id, type_]
        if not opts.get("include_archived"):
            where += " AND archived_by IS NULL"
        if opts.get("kind"):
            args.append(opts["kind"])
            where += f" AND kind=${len(args)}"
        if opts.get("before_id") is not None:
            args.append(int(opts["before_id"]))
            where += f" AND id<${len(args)}"
        args.append(limit)
        rows = await self.pg.fetch(
            f"SELECT {COLS} FROM memories WHERE {where} ORDER BY id DESC LIMIT ${len(args)}", *args)
        return [MemoryRecord.from_row(r).to_wire() for r in rows]

    async def compact(self, user_id: str, type_: str, opts: dict[str, Any],
                      client: str = "") -> dict[str, Any]:
        _check_type(type_, MEMORY_TYPES)
        if type_ == "working":
            return await super().compact(user_id, type_, opts, client)
        async with self._lock(user_id):
            await self._sync_user(user_id)
            await self.pg.ensure_ids(1)
            return await self._compact_shared(user_id, type_, opts)

    async def _compact_shared(self, user_id: str, type_: str,
                              opts: dict[str, Any]) -> dict[str, Any]:
        keep = opts.get("keep_last", self.config.memory.compact_keep_last)
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
            raise invalid_params("opts.keep_last", "expected a whole number ≥ 0")
        summarize = bool(opts.get("summarize_older", True))
        if type_ == "semantic":
            return {"type": type_, "archived": 0, "summary_id": None,
                    "kept": len(self.prefs.get(user_id, {}))}
        rows = await self.pg.fetch(
            f"SELECT {COLS} FROM memories WHERE user_id=$1 AND type=$2 AND archived_by IS NULL "
            "ORDER BY created_at, id", user_id, type_)
        recs = [MemoryRecord.from_row(r) for r in rows]
        older = recs[:max(0, len(recs) - keep)]
        if not older:
            return {"type": type_, "archived": 0, "summary_id": None, "kept": len(recs)}
        summary = self._compaction_summary(user_id, type_, older) if summarize else None
        mark = summary.id if summary else 0
        vops, vindex = await self._vector_ops([summary]) if summary else ([], lambda: None)

        async def tx(conn: Any) -> None:
            await conn.execute("UPDATE memories SET archived_by=$1 WHERE id = ANY($2)", mark,
                               [r.id for r in older])
            if summary is not None:
                await conn.execute(UPSERT, *upsert_args(summary))
                await execute(conn, vops)
        await self.pg.run(tx)
        vindex()
        self.vscopes.remove((user_id, type_), [r.id for r in older])
        for r in older:
            self._unindex(r)
        self._publish("compacted", user_id, type=type_, archived=len(older),
                      summary_id=summary.id if summary else None)
        return {"type": type_, "archived": len(older),
                "summary_id": summary.id if summary else None, "kept": len(recs) - len(older)}

    async def stats_for(self, user_id: str) -> dict[str, Any]:
        async def read(conn: Any) -> tuple[list[Any], int, int]:
            rows = await conn.fetch(
                "SELECT type, kind, count(*), sum(length(content) + length(metadata) + "
                "length(coalesce(key,''))) FROM memories WHERE user_id=$1 AND archived_by IS NULL "
                "GROUP BY type, kind", user_id)
            archived = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE user_id=$1 AND archived_by IS NOT NULL",
                user_id)
            vecs = await conn.fetchval(
                "SELECT count(*) FROM memory_vectors v JOIN memories m ON m.id=v.id "
                "WHERE m.user_id=$1", user_id)
            return rows, archived, vecs

        rows, archived, vecs = await self.pg.run(read)
        by_type: dict[str, list[int]] = {}
        by_kind: dict[str, int] = {}
        for t, k, n, b in rows:
            acc = by_type.setdefault(t, [0, 0])
            acc[0] += n
            acc[1] += b or 0
            by_kind[k] = by_kind.get(k, 0) + n
        return self._stats_answer(
            user_id, episodic=by_type.get("episodic", [0, 0])[0],
            semantic=by_kind.get("preference", 0), rules=by_kind.get("rule", 0),
            playbooks=by_kind.get("playbook", 0), archived=archived, vectors=vecs,
            stored_bytes=sum(b for _, b in by_type.values()))

    async def forget(self, user_id: str, record_id: int, client: str = "") -> dict[str, Any]:
        """As the SQLite tier: delete one record (its vector goes with it), audited; a summary
        that linked it drops the link and says so."""
        await self.pg.ensure_ids(1)

        async def tx(conn: Any) -> tuple[MemoryRecord, int | None, int, Any]:
            row = await conn.fetchrow(f"SELECT {COLS} FROM memories WHERE id=$1 AND user_id=$2 "
                                      "FOR UPDATE", record_id, user_id)
            if row is None:
                raise MemmanError(NOT_FOUND, f"memory record {record_id} of user {user_id!r} "
                                  "not found; memman_memory_search or memman_memory_list show "
                                  "the ids")
            rec = MemoryRecord.from_row(row)
            await conn.execute("DELETE FROM memories WHERE id=$1", rec.id)
            summary_id = rec.archived_by or None
            if summary_id:
                found = await conn.fetchrow(f"SELECT {COLS} FROM memories WHERE id=$1 "
                                            "FOR UPDATE", summary_id)
                if found is not None:
                    content, meta = summary_without(MemoryRecord.from_row(found), rec.id)
                    await conn.execute("UPDATE memories SET content=$1, metadata=$2 WHERE id=$3",
                                       content, json.dumps(meta, ensure_ascii=False, default=str),
                                       summary_id)
                else:
                    summary_id = None
            unlinked = 0
            if rec.kind == "summary":
                unlinked = int(await conn.fetchval(
                    "WITH u AS (UPDATE memories SET archived_by=0 WHERE archived_by=$1 "
                    "RETURNING 1) SELECT count(*) FROM u", rec.id))
            arec, aop = self._forget_audit(rec, summary_id, unlinked, client)
            await execute(conn, [aop])
            return rec, summary_id, unlinked, arec

        rec, summary_id, unlinked, arec = await self.pg.run(tx)
        self._unindex(rec)
        self.vscopes.remove((user_id, rec.type), [rec.id])
        return self._forgotten(rec, summary_id, unlinked, arec.id, client)

    async def clear(self, user_id: str, type_: str, client: str = "") -> dict[str, Any]:
        types = clear_types(type_)
        cleared: dict[str, int] = {}
        stored = [t for t in types if t != "working"]
        if stored:
            await self.pg.ensure_ids(1)

            async def tx(conn: Any) -> list[tuple[str, int]]:
                counts = [(r[0], r[1]) for r in await conn.fetch(
                    "SELECT type, count(*) FROM memories WHERE user_id=$1 AND type = ANY($2) "
                    "GROUP BY type", user_id, stored)]
                _, aop = self._clear_audit(user_id, stored, counts, client)
                await conn.execute("DELETE FROM memories WHERE user_id=$1 AND type = ANY($2)",
                                   user_id, stored)
                await execute(conn, split([aop])[0])
                return counts

            async with self._lock(user_id):
                counts = await self.pg.run(tx)
            for t, n in counts:
                cleared[t] = n
            self.prefs.pop(user_id, None)
            self.rules.pop(user_id, None)
            self.playbooks.pop(user_id, None)
            self.forget_scopes(user_id)
        if "working" in types:
            cleared["working"] = await self.scratchpad.clear(self._user_sessions(user_id),
                                                             client)
        return self._cleared(user_id, types, cleared)
