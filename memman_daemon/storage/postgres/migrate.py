"""``memman shared migrate --to postgresql://...``: copy local user memory and business context
into the shared store.

What moves: every user-memory record (live and archived, with its vector and the vector's
model), every document with its chunks and vectors, each tenant's agent.md (the file's content), and the audit
records of shared-tier changes (promotions, clears, imports). Sessions stay where they are.

- **Idempotent and resumable.** Records are copied in batches, each one transaction that also
  writes ``migrated(source, tbl, old_id, new_id)``; a record already listed there is skipped.
  Run it again after an interruption and it continues; run it twice and the second copies
  nothing. ``source`` names the SQLite file (host:path).
- **New ids.** Ids come from the shared sequence, so files from several hosts can be moved
  into one store; references are remapped (``archived_by``, a summary's ``entry_ids``,
  chunks' document).
- **Meeting what is already shared.** A live preference, rule or playbook with the same key in
  the shared store: the same value is merged (nothing copied); a different one — the newer
  (``updated_at``) stays live and the other is kept archived (``archived_by`` 0), never
  deleted. A document with the same ``doc_id``: the newer replaces the older. agent.md: the
  newer of the file and the shared row wins.
- **Progress** goes to stderr, one line per batch; the result is a summary map.

The SQLite file is only read (the daemon may keep running; WAL allows it).
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg

from memman.config import Config
from memman_daemon.storage.agentmd import DOC_ID, sha
from memman_daemon.storage.memories import MemoryRecord, dedup_of
from memman_daemon.storage.postgres.memories import UPSERT, upsert_args
from memman_daemon.storage.postgres.pool import PgStore, redact

SHARED_ACTIONS = ("promote", "clear", "import")
Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Migration:
    def __init__(self, config: Config, dsn: str, *, batch: int = 500, limit: int | None = None,
                 progress: Progress = _stderr) -> None:
        self.config = config
        self.dsn = dsn
        self.batch = max(1, batch)
        self.limit = limit  #: copy at most this many records in this run (a trial; run again)
        self.progress = progress
        self.db_path = config.database_path.resolve()
        self.source = f"{socket.gethostname()}:{self.db_path}"
        self.copied: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.merged = 0
        self.superseded = 0
        self._budget = limit

    # --- helpers -------------------------------------------------------------------------
    def _take(self, n: int) -> int:
        if self._budget is None:
            return n
        n = min(n, self._budget)
        self._budget -= n
        return n

    async def _done_ids(self, conn: asyncpg.Connection, tbl: str, ids: list[int]) -> dict[int, int]:
        rows = await conn.fetch("SELECT old_id, new_id FROM migrated WHERE source=$1 AND tbl=$2 "
                                "AND old_id = ANY($3)", self.source, tbl, ids)
        return {r[0]: r[1] for r in rows}

    async def _ids(self, conn: asyncpg.Connection, n: int) -> list[int]:
        if n == 0:
            return []
        rows = await conn.fetch("SELECT nextval('memman_ids') FROM generate_series(1, $1)", n)
        return [r[0] for r in rows]

    async def _mark(self, conn: asyncpg.Connection, tbl: str, pairs: list[tuple[int, int]]) -> None:
        if pairs:
            await conn.executemany(
                "INSERT INTO migrated(source, tbl, old_id, new_id) VALUES ($1,$2,$3,$4) "
                "ON CONFLICT DO NOTHING", [(self.source, tbl, o, n) for o, n in pairs])

    def _count(self, what: str, copied: int, skipped: int) -> None:
        self.copied[what] = self.copied.get(what, 0) + copied
        self.skipped[what] = self.skipped.get(what, 0) + skipped

    # --- run -----------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        if not self.db_path.exists():
            raise FileNotFoundError(f"no local database at {self.db_path} (nothing to move); "
                                    "pass --data-dir or --config for another one")
        store = PgStore(self.dsn, timeout_s=30.0)
        await store._connect()  # migrates the shared schema (or refuses a newer one)
        await store.close()
        src = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        conn = await asyncpg.connect(self.dsn, timeout=30)
        started = time.monotonic()
        try:
            self.progress(f"moving {self.db_path} into {redact(self.dsn)}")
            await self._memories(src, conn)
            await self._fix_archived(conn)
            await self._docs(src, conn)
            await self._agent_md(src, conn)
            await self._audit(src, conn)
        finally:
            await conn.close()
            src.close()
        complete = self._budget is None or self._budget > 0
        out = {"source": self.source, "to": redact(self.dsn), "copied": self.copied,
               "already_there": self.skipped, "merged": self.merged,
               "superseded": self.superseded, "complete": complete,
               "seconds": round(time.monotonic() - started, 3)}
        self.progress(f"done: {json.dumps(out['copied'])} copied, "
                      f"{json.dumps(out['already_there'])} already there"
                      + ("" if complete else " (limit reached: run again to continue)"))
        return out

    async def _memories(self, src: sqlite3.Connection, conn: asyncpg.Connection) -> None:
        total = src.execute("SELECT count(*) FROM memories").fetchone()[0]
        seen = 0
        last = 0
        while True:
            rows = src.execute(f"SELECT {MemoryRecord._COLS} FROM memories WHERE id>? "
                               "ORDER BY id LIMIT ?", (last, self.batch)).fetchall()
            if not rows:
                break
            last = rows[-1][0]
            seen += len(rows)
            recs = [MemoryRecord.from_row(r) for r in rows]
            done = await self._done_ids(conn, "memories", [r.id for r in recs])
            todo = [r for r in recs if r.id not in done]
            todo = todo[:self._take(len(todo))]
            vecs = {r[0]: r[1:] for r in src.execute(
                f"SELECT id, dim, embedding, {_model_col(src, 'memory_vectors')} FROM "
                f"memory_vectors WHERE id IN ({','.join('?' * len(todo))})",
                [r.id for r in todo]).fetchall()} if todo else {}
            async with conn.transaction():
                await self._copy_memories(conn, todo, vecs)
            self._count("memories", len(todo), len(done))
            self.progress(f"memories {seen}/{total}")
            if self._budget == 0:
                return

    async def _copy_memories(self, conn: asyncpg.Connection, todo: list[MemoryRecord],
                             vecs: dict[int, tuple[int, bytes, str]]) -> None:
        ids = await self._ids(conn, len(todo))
        pairs: list[tuple[int, int]] = []
        for rec, new_id in zip(todo, ids, strict=True):
            old_id = rec.id
            if rec.kind == "summary" and isinstance(rec.metadata.get("entry_ids"), list):
                mapped = await self._done_ids(conn, "memories", rec.metadata["entry_ids"])
                rec.metadata["entry_ids"] = [mapped.get(i, i) for i in rec.metadata["entry_ids"]]
            if rec.archived_by:  # a summary copied later: remapped by _fix_archived
                rec.archived_by = -rec.archived_by
            rec.id = new_id
            key = dedup_of(rec)
            if key is not None and rec.archived_by is None:
                live = await conn.fetchrow(
                    "SELECT id, content, metadata, updated_at FROM memories WHERE user_id=$1 "
                    "AND kind=$2 AND dedup=$3 AND archived_by IS NULL",
                    rec.user_id, rec.kind, key)
                if live is not None:
                    if live[1] == rec.content and json.loads(live[2]) == rec.metadata:
                        self.merged += 1
                        pairs.append((old_id, live[0]))
                        continue
                    self.superseded += 1
                    if rec.updated_at > live[3]:
                        await conn.execute("UPDATE memories SET archived_by=0 WHERE id=$1", live[0])
                    else:
                        rec.archived_by = 0
            await conn.execute(UPSERT, *upsert_args(rec))
            if old_id in vecs:
                await conn.execute("INSERT INTO memory_vectors(id, dim, embedding, model) VALUES "
                                   "($1,$2,$3,$4) ON CONFLICT (id) DO NOTHING",
                                   new_id, *vecs[old_id])
            pairs.append((old_id, new_id))
        await self._mark(conn, "memories", pairs)

    async def _fix_archived(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            "UPDATE memories m SET archived_by = mp.new_id FROM migrated mp "
            "WHERE m.archived_by < 0 AND mp.source=$1 AND mp.tbl='memories' "
            "AND mp.old_id = -m.archived_by", self.source)

    async def _docs(self, src: sqlite3.Connection, conn: asyncpg.Connection) -> None:
        rows = src.execute("SELECT id, tenant_id, doc_id, data FROM docs ORDER BY id").fetchall()
        for n, (pk, tenant, doc_id, data) in enumerate(rows, 1):
            if await self._done_ids(conn, "docs", [pk]):
                self._count("docs", 0, 1)
                continue
            if not self._take(1):
                return
            d = json.loads(data)
            chunks = src.execute("SELECT id, seq, tokens, content FROM doc_chunks WHERE doc=? "
                                 "ORDER BY seq", (pk,)).fetchall()
            cvecs = {r[0]: r[1:] for r in src.execute(
                f"SELECT v.id, v.dim, v.embedding, {_model_col(src, 'chunk_vectors', 'v.')} "
                "FROM chunk_vectors v JOIN doc_chunks c ON c.id=v.id WHERE c.doc=?",
                (pk,)).fetchall()}
            async with conn.transaction():
                have = await conn.fetchrow("SELECT id, data FROM docs WHERE tenant_id=$1 AND "
                                           "doc_id=$2 FOR UPDATE", tenant, doc_id)
                if have is not None:
                    theirs = json.loads(have[1])
                    if theirs.get("hash") == d.get("hash") or \
                            theirs.get("updated_at", 0) >= d.get("updated_at", 0):
                        self.merged += 1
                        await self._mark(conn, "docs", [(pk, have[0])])
                        continue
                    self.superseded += 1
                    await conn.execute("DELETE FROM docs WHERE id=$1", have[0])
                ids = await self._ids(conn, len(chunks) + 1)
                new_pk = ids.pop(0)
                await conn.execute("INSERT INTO docs(id, tenant_id, doc_id, data) VALUES "
                                   "($1,$2,$3,$4)", new_pk, tenant, doc_id, data)
                await conn.executemany(
                    "INSERT INTO doc_chunks(id, doc, tenant_id, seq, tokens, content) "
                    "VALUES ($1,$2,$3,$4,$5,$6)",
                    [(cid, new_pk, tenant, seq, tok, text)
                     for cid, (_, seq, tok, text) in zip(ids, chunks, strict=True)])
                vec_rows = [(cid, tenant, *cvecs[old])
                            for cid, (old, *_) in zip(ids, chunks, strict=True) if old in cvecs]
                if vec_rows:
                    await conn.executemany("INSERT INTO chunk_vectors(id, tenant_id, dim, "
                                           "embedding, model) VALUES ($1,$2,$3,$4,$5)", vec_rows)
                await self._mark(conn, "docs", [(pk, new_pk)])
                await self._mark(conn, "doc_chunks",
                                 [(old, cid) for cid, (old, *_) in zip(ids, chunks, strict=True)])
            self._count("docs", 1, 0)
            self._count("chunks", len(chunks), 0)
            self.progress(f"docs {n}/{len(rows)}")

    async def _agent_md(self, src: sqlite3.Connection, conn: asyncpg.Connection) -> None:

        tenants = [r[0] for r in src.execute(
            "SELECT tenant_id FROM docs WHERE doc_id=? ORDER BY tenant_id", (DOC_ID,))]
        for tenant in tenants:
            path = Path(self.config.agent_md_path(tenant))
            try:
                text, mtime = path.read_text(encoding="utf-8"), path.stat().st_mtime
            except FileNotFoundError:
                continue
            row = await conn.fetchrow("SELECT hash, updated_at FROM agent_md WHERE tenant_id=$1",
                                      tenant)
            if row is not None and (row[0] == sha(text) or row[1] >= mtime):
                self._count("agent_md", 0, 1)
                continue
            await conn.execute(
                "INSERT INTO agent_md(tenant_id, content, hash, updated_at, updated_by) "
                "VALUES ($1,$2,$3,$4,$5) ON CONFLICT (tenant_id) DO UPDATE SET "
                "content=EXCLUDED.content, hash=EXCLUDED.hash, updated_at=EXCLUDED.updated_at, "
                "updated_by=EXCLUDED.updated_by, version=agent_md.version + 1",
                tenant, text, sha(text), mtime, f"migrate:{self.source}")
            self._count("agent_md", 1, 0)
            self.progress(f"agent.md of {tenant}")

    async def _audit(self, src: sqlite3.Connection, conn: asyncpg.Connection) -> None:
        marks = ",".join("?" * len(SHARED_ACTIONS))
        rows = src.execute(
            "SELECT id, at, action, what, source, target, client, session_id, user_id, "
            f"tenant_id, data FROM audit WHERE action IN ({marks}) ORDER BY id",
            SHARED_ACTIONS).fetchall()
        for i in range(0, len(rows), self.batch):
            part = rows[i:i + self.batch]
            done = await self._done_ids(conn, "audit", [r[0] for r in part])
            todo = [r for r in part if r[0] not in done]
            todo = todo[:self._take(len(todo))]
            async with conn.transaction():
                ids = await self._ids(conn, len(todo))
                await conn.executemany(
                    "INSERT INTO audit(id, at, action, what, source, target, client, session_id, "
                    "user_id, tenant_id, data, host) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)",
                    [(new, *r[1:], f"migrate:{self.source}") for new, r in zip(ids, todo, strict=True)])
                await self._mark(conn, "audit", [(r[0], new) for new, r in zip(ids, todo,
                                                                              strict=True)])
            self._count("audit", len(todo), len(done))
            self.progress(f"audit {min(i + self.batch, len(rows))}/{len(rows)}")
            if self._budget == 0:
                return


def _model_col(src: sqlite3.Connection, table: str, alias: str = "") -> str:
    """The vector's model column (files from before it existed: '')."""
    cols = {r[1] for r in src.execute(f"PRAGMA table_info({table})")}
    return f"{alias}model" if "model" in cols else "''"


def run(config: Config, dsn: str, *, batch: int = 500, limit: int | None = None,
        progress: Progress = _stderr) -> dict[str, Any]:
    return asyncio.run(Migration(config, dsn, batch=batch, limit=limit, progress=progress).run())
