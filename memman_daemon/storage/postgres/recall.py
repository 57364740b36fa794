"""The recall index across hosts: a shared table of recall rows in PostgreSQL.

Sessions stay in each daemon's SQLite file; what crosses is one ``recall_rows`` row per entry
a user's sessions logged (not private, in a session that takes part in recall), keyed by
``(origin, entry_id)`` — the daemon's database (host:path) and the entry's id there — with its
session id, role, text and time, and ``recall_row_vectors``: the search model's vector of a
row, written by whichever daemon embedded it, so no other daemon with that model embeds it
again.

- **Writing** never waits on the add path: indexed entries, removals and vectors are queued
  and one task writes them in batches, one transaction each. While the store is down nothing
  is queued; when it is back (and at start) the table is brought in line with this daemon's
  session log (``_reconcile``): missing rows and vectors are written, rows of entries that are
  gone are marked gone. So an entry acknowledged locally reaches the table eventually.
- **Reading**: every change takes the next ``recall_seq`` value under one advisory lock (so
  commits come in ``seq`` order); each daemon reads what other origins changed since the last
  ``seq`` it saw — at start, when another daemon's ``recall`` signal arrives (NOTIFY), and
  after an outage — and hands it to the index (``Change``).
- A removed entry's row stays as a tombstone (``gone``, its text emptied) so that the others
  learn of the removal.
- **Forgetting another daemon's entry** (``forget``: ``memman_memory_forget`` of a recalled
  entry) makes its row a tombstone marked ``forgotten``, at once (awaited). The others drop it
  as any removal; its origin reads its own forgotten rows too, records them in its file
  (``recall_forgotten``: the entry stays in its session, no other session recalls it) and
  never shares them again: the upsert does not bring a forgotten row back for the same entry
  (same session and time; an id used again after a restart is another entry).
- Vectors: a row whose origin embeds with this daemon's model waits for the origin's vector;
  others are embedded here and written back for everyone.

The local part (this daemon's vectors, exclusions) is ``LocalRecall``, used as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.storage.postgres.events import encode
from memman_daemon.storage.recall import REMOTE_BASE, Change, RemoteRow, VectorRow
from memman_daemon.storage.sqlite.recall import LocalRecall, forgotten_ops

if TYPE_CHECKING:
    from memman_daemon.model import Entry, Session
    from memman_daemon.storage.postgres.events import SharedEventBus
    from memman_daemon.storage.postgres.pool import PgStore
    from memman_daemon.storage.sqlite.store import Store

log = logging.getLogger(__name__)

LOCK = 7302  #: the advisory lock every recall write holds: commits in ``seq`` order
BATCH = 2000  #: queued changes written in one transaction at most
GATHER_S = 0.05  #: how long the writer lets a burst of adds gather before a batch
SIGNAL = ("recall", "changed")  #: tells the others to read (``events.py``: INTERNAL_TOPICS)

_ROW = ("INSERT INTO recall_rows(origin, entry_id, session_id, tenant_id, user_id, type, role, "
        "name, content, text, created_at, model, seq) "
        "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,nextval('recall_seq')) "
        "ON CONFLICT (origin, entry_id) DO UPDATE SET session_id=EXCLUDED.session_id, "
        "tenant_id=EXCLUDED.tenant_id, user_id=EXCLUDED.user_id, type=EXCLUDED.type, "
        "role=EXCLUDED.role, name=EXCLUDED.name, content=EXCLUDED.content, text=EXCLUDED.text, "
        "created_at=EXCLUDED.created_at, model=EXCLUDED.model, gone=false, forgotten=false, "
        "seq=EXCLUDED.seq WHERE recall_rows.gone AND NOT (recall_rows.forgotten "
        "AND recall_rows.session_id=EXCLUDED.session_id "
        "AND recall_rows.created_at=EXCLUDED.created_at)")
_GONE = ("WITH g AS (UPDATE recall_rows SET gone=true, content='', text='', "
         "seq=nextval('recall_seq') WHERE origin=$1 AND NOT gone AND {} RETURNING id) "
         "DELETE FROM recall_row_vectors v USING g WHERE v.id=g.id")
_FORGET = ("WITH g AS (UPDATE recall_rows SET gone=true, forgotten=true, content='', text='', "
           "seq=nextval('recall_seq') WHERE id=$1 AND NOT gone RETURNING id) "
           "DELETE FROM recall_row_vectors v USING g WHERE v.id=g.id")
_VEC_OWN = ("INSERT INTO recall_row_vectors(id, model, embedding, seq) "
            "SELECT id, $3, $4, nextval('recall_seq') FROM recall_rows "
            "WHERE origin=$1 AND entry_id=$2 AND NOT gone "
            "ON CONFLICT (id, model) DO UPDATE SET embedding=EXCLUDED.embedding, seq=EXCLUDED.seq")
_VEC_SHARED = ("INSERT INTO recall_row_vectors(id, model, embedding, seq) "
               "SELECT id, $2, $3, nextval('recall_seq') FROM recall_rows WHERE id=$1 AND NOT gone "
               "ON CONFLICT (id, model) DO UPDATE SET embedding=EXCLUDED.embedding, "
               "seq=EXCLUDED.seq")
_COLS = ("id, origin, entry_id, session_id, tenant_id, user_id, type, role, name, content, "
         "text, created_at, model, gone, forgotten, seq")


def _blob(v: Any) -> bytes:
    return np.asarray(v, dtype="<f4").tobytes()


class SharedRecall:
    """``RecallStorage`` with a shared PostgreSQL table (see the module's docstring)."""

    def __init__(self, pg: PgStore, events: SharedEventBus, local: Store) -> None:
        self.pg, self.events = pg, events
        self.local = LocalRecall(local)
        self.origin = f"{socket.gethostname()}:{local.path}"
        self._local_rows: Callable[[], Iterable[tuple[Session, list[tuple[Entry, str]]]]] = list
        self._on_change: Callable[[Change], None] = lambda _c: None
        self._model: Callable[[], str] = str
        self._outbox: deque[tuple[str, Any]] = deque()
        self._dirty = True  #: the table may lack what the log holds: reconcile first
        self._cursor = 0  #: the highest ``seq`` of the others' changes read
        self._read_model = ""  #: the model whose vectors were read
        self._write_wake = asyncio.Event()
        self._read_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.written = self.read = self.reconciled = 0

    # --- RecallStorage: the local part ------------------------------------------------------
    async def vectors(self, model: str) -> list[tuple[int, bytes]]:
        return await self.local.vectors(model)

    async def exclusions(self) -> list[tuple[str, int]]:
        return await self.local.exclusions()

    def exclude_op(self, session_id: str, entry_id: int, at: float) -> Any:
        return self.local.exclude_op(session_id, entry_id, at)

    def include_op(self, session_id: str, entry_id: int) -> Any:
        return self.local.include_op(session_id, entry_id)

    async def forgotten(self) -> list[tuple[int, str, float]]:
        return await self.local.forgotten()

    async def save_vectors(self, rows: list[VectorRow]) -> None:
        own = [r for r in rows if r[0] < REMOTE_BASE]
        if own:
            await self.local.save_vectors(own)
        self._queue("vectors", rows)

    # --- lifecycle --------------------------------------------------------------------------
    def attach(self, local: Callable[[], Iterable[tuple[Session, list[tuple[Entry, str]]]]],
               on_change: Callable[[Change], None], model: Callable[[], str]) -> None:
        self._local_rows, self._on_change, self._model = local, on_change, model

    async def load(self) -> None:
        self.pg.on_up.append(self._back)
        self.events.on_remote.append(self._remote)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._write_loop(), name="memman-recall-share"),
                       loop.create_task(self._read_loop(), name="memman-recall-read")]
        # reconcile at start (the store came up before this hook was there; down: ``_back``)
        self._write_wake.set()
        # the others' rows before the first request: a fresh session's first question finds
        # them (when the store is down, they come when it is back)
        with contextlib.suppress(Exception):
            await self._read()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []
        with contextlib.suppress(Exception):  # what is queued, if the store is there
            await self._flush()

    async def _back(self) -> None:
        """The store is (back) up: bring the table in line, read what was missed."""
        self._dirty = True
        self._write_wake.set()
        self._read_wake.set()

    def _remote(self, topic: str, kind: str, scope: dict[str, Any]) -> None:
        if (topic, kind) == SIGNAL:
            self._read_wake.set()

    def stats(self) -> dict[str, Any]:
        return {"origin": self.origin, "queued": len(self._outbox), "written": self.written,
                "read": self.read, "reconciled": self.reconciled, "cursor": self._cursor}

    # --- handing this daemon's changes over (queued) -----------------------------------------
    def _queue(self, kind: str, item: Any) -> None:
        if self.pg.state != "up":  # nothing piles up during an outage: reconciled after
            self._dirty = True
            return
        self._outbox.append((kind, item))
        self._write_wake.set()

    def arrived(self, s: Session, entries: list[tuple[Entry, str]]) -> None:
        self._queue("rows", (s.meta.tenant_id, s.meta.user_id, entries))

    def removed(self, entry_ids: list[int]) -> None:
        self._queue("gone", entry_ids)

    def session_removed(self, session_id: str) -> None:
        self._queue("session", session_id)

    def resync(self) -> None:
        self._dirty = True  # the reconcile compares every row of this origin with the log
        self._write_wake.set()

    async def forget(self, entry_id: int, ops: list[Any]) -> None:
        async def write(conn: Any) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK)
            await conn.execute(_FORGET, entry_id - REMOTE_BASE)

        await self.pg.run(write)
        self._signal()
        await self.local.forget(entry_id, ops)

    # --- the writer -------------------------------------------------------------------------
    async def _write_loop(self) -> None:
        while True:
            await self._write_wake.wait()
            await asyncio.sleep(GATHER_S)  # a burst of adds: one batch
            self._write_wake.clear()
            try:
                if self._dirty:
                    self._outbox.clear()  # the reconcile covers what they held
                    self._dirty = False
                    await self._reconcile()
                while self._outbox:
                    await self._flush()
            except Exception as exc:
                # down (the reconnect calls ``_back``) or refused: retried in full later
                log.info("recall rows not shared yet (%s); retried when the store is back", exc)
                self._dirty = True
                self._outbox.clear()
                if self.pg.state == "up":
                    await asyncio.sleep(1.0)
                    self._write_wake.set()

    async def _flush(self) -> None:
        batch = [self._outbox.popleft() for _ in range(min(BATCH, len(self._outbox)))]
        if batch:
            await self._write(batch)

    async def _write(self, batch: list[tuple[str, Any]]) -> None:
        model = self._model()
        rows: list[tuple[Any, ...]] = []
        gone: list[int] = []
        sessions: list[str] = []
        own: list[tuple[Any, ...]] = []
        shared: list[tuple[Any, ...]] = []
        for kind, item in batch:
            if kind == "rows":
                tenant, user, entries = item
                rows += [(self.origin, e.id, e.session_id, tenant, user, e.type, e.role, e.name,
                          e.content or "", text, float(e.created_at), model)
                         for e, text in entries]
            elif kind == "gone":
                gone += item
            elif kind == "session":
                sessions.append(item)
            else:
                for key, _sid, m, v in item:
                    if key >= REMOTE_BASE:
                        shared.append((key - REMOTE_BASE, m, _blob(v)))
                    else:
                        own.append((self.origin, key, m, _blob(v)))

        async def write(conn: Any) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK)
            # in the order they came: rows, then what was removed, then vectors
            if rows:
                await conn.executemany(_ROW, rows)
            if gone:
                await conn.execute(_GONE.format("entry_id = ANY($2::bigint[])"), self.origin,
                                   gone)
            for sid in sessions:
                await conn.execute(_GONE.format("session_id=$2"), self.origin, sid)
            if own:
                await conn.executemany(_VEC_OWN, own)
            if shared:
                await conn.executemany(_VEC_SHARED, shared)

        await self.pg.run(write)
        self.written += len(rows)
        self._signal()

    def _signal(self) -> None:
        """Tell the other daemons to read (not an event of any subscriber's topic)."""
        if self.events.send is not None:
            self.events.send(encode(self.events.origin, *SIGNAL, {}, {}))

    async def _reconcile(self) -> None:
        """Bring this origin's rows in line with the session log: what the log holds and the
        table lacks is written (with the vectors kept locally), what the table holds and the
        log no longer does is marked gone."""
        model = self._model()
        have: dict[int, bool] = {}
        forgotten: set[tuple[int, str, float]] = set()  # another host's forget: never again
        for r in await self.pg.fetch(
                "SELECT r.entry_id, v.id IS NOT NULL, r.gone, r.session_id, r.created_at "
                "FROM recall_rows r LEFT JOIN recall_row_vectors v ON v.id=r.id AND v.model=$2 "
                "WHERE r.origin=$1 AND (NOT r.gone OR r.forgotten)", self.origin, model):
            if r[2]:
                forgotten.add((r[0], r[3], r[4]))
            else:
                have[r[0]] = r[1]
        batch: list[tuple[str, Any]] = []
        wanted: set[int] = set()
        for s, entries in self._local_rows():
            wanted.update(e.id for e, _ in entries)
            missing = [(e, t) for e, t in entries if e.id not in have
                       and (e.id, e.session_id, float(e.created_at)) not in forgotten]
            if missing:
                batch.append(("rows", (s.meta.tenant_id, s.meta.user_id, missing)))
        unvectored = {eid for eid in wanted if not have.get(eid)}
        if unvectored and model:
            stored = [(eid, blob) for eid, blob in await self.local.vectors(model)
                      if eid in unvectored]
            if stored:
                batch.append(("vectors", [(eid, "", model, np.frombuffer(b, dtype="<f4"))
                                          for eid, b in stored]))
        stale = [eid for eid in have if eid not in wanted]
        if stale:
            batch.append(("gone", stale))
        for k in range(0, len(batch), 50):  # bounded transactions
            await self._write(batch[k:k + 50])
        self.reconciled += 1

    # --- the reader -------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        while True:
            await self._read_wake.wait()
            self._read_wake.clear()
            try:
                await self._read()
            except Exception as exc:  # down: read again when it is back (``_back``)
                log.debug("reading the others' recall rows failed: %s", exc)

    async def _read(self) -> None:
        model = self._model()
        cursor, first = self._cursor, self._cursor == 0
        # a new model: its vectors of every row, not only of the rows changed since
        vcursor = cursor if model == self._read_model else 0

        async def read(conn: Any) -> tuple[list[Any], list[Any]]:
            # one snapshot for both tables: nothing committed between them is skipped
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            # the others' rows, and this daemon's own that another host forgot
            rows = await conn.fetch(
                f"SELECT {_COLS} FROM recall_rows WHERE seq > $1 AND (origin <> $2 OR forgotten) "
                + ("AND (NOT gone OR origin = $2) " if first else "") + "ORDER BY seq",
                cursor, self.origin)
            vecs = await conn.fetch(
                "SELECT v.id, v.embedding, v.seq FROM recall_row_vectors v JOIN recall_rows r "
                "ON r.id=v.id WHERE v.seq > $1 AND v.model=$3 AND r.origin <> $2 "
                "AND NOT r.gone", vcursor, self.origin, model)
            return rows, vecs

        rows, vecs = await self.pg.run(read)
        change = Change()
        for r in rows:
            key = REMOTE_BASE + r["id"]
            if r["origin"] == self.origin:
                change.forgotten.append((r["entry_id"], r["session_id"], r["created_at"]))
            elif r["gone"]:
                change.gone.append(key)
            else:
                change.rows.append(RemoteRow(
                    key, r["origin"], r["session_id"], r["tenant_id"], r["user_id"], r["type"],
                    r["role"], r["name"], r["content"], r["text"], r["created_at"], r["model"]))
        change.vectors = [(REMOTE_BASE + v["id"], bytes(v["embedding"])) for v in vecs]
        if change.forgotten:  # recorded first (read again if it fails): holds across a restart
            await self.local.store.write(forgotten_ops(change.forgotten, time.time()))
        self._cursor = max([cursor, *(r["seq"] for r in rows), *(v["seq"] for v in vecs)])
        self._read_model = model
        self.read += len(rows)
        if change.rows or change.gone or change.vectors or change.forgotten:
            self._on_change(change)
