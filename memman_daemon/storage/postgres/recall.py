"""The recall index across hosts: a shared table of recall rows in PostgreSQL.

Sessions stay in each daemon's SQLite file; what crosses is one ``recall_rows`` row per entry
a user's sessions logged (not private, in a session that takes part in recall), keyed by
``(origin, entry_id)`` — the store's origin id (``storage/sqlite/identity.py``: written once
into the SQLite file, so a data dir moved or copied, or a host renamed, keeps it) and the
entry's id there — with its session id, role, text and time, and ``recall_row_vectors``: the
search model's vector of a row, written by whichever daemon embedded it, so no other daemon
with that model embeds it again.

- **One origin, one running daemon.** Before it writes, a daemon holds a session-level
  advisory lock on its origin (``_claim``, on a connection of its own). A copy of a data dir
  started beside its original finds the lock held: it says so (a log error, ``conflict`` in
  its stats and ``memman status``) and publishes nothing until the other stops. Rows an older
  daemon published under ``host:path`` of this file are adopted (their origin rewritten), not
  written again.
- **In the order acknowledged.** The writer applies its queue in order — rows, removals, a
  session's removal, vectors, one after another as they were queued — so an entry added after
  a clear is not cleared with it, and a session reassigned or replaced is removed and written
  again under its new owner or content. A row written again is read again by the others, who
  replace what they held.

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
import hashlib
import logging
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import asyncpg
import numpy as np

from memman_daemon.storage.postgres.events import encode
from memman_daemon.storage.recall import (
    REMOTE_BASE,
    Change,
    Forgotten,
    RemoteRow,
    TokenRow,
    VectorRow,
)
from memman_daemon.storage.sqlite import identity
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
CLAIM_RETRY_S = 5.0  #: how often a daemon whose origin another holds tries to take it again

#: held for as long as the daemon publishes under its origin (a session lock: released when
#: its connection ends, a crash included)
_CLAIM = "SELECT pg_try_advisory_lock(hashtextextended('memman-recall-origin:' || $1, 0))"
#: the claim is still held, by this daemon's claim connection (its server pid)
_HELD = ("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype='advisory' AND granted "
         "AND pid=$1 AND objsubid=1 AND ((classid::bigint << 32) | objid::bigint) = "
         "hashtextextended('memman-recall-origin:' || $2, 0))")
#: rows an older daemon of this file published under ``host:path``: this origin's now (their
#: ids stay, so the others' exclusions of them hold); those whose entry this origin already
#: has are duplicates and become tombstones
_ADOPT = ("UPDATE recall_rows o SET origin=$1, seq=nextval('recall_seq') WHERE o.origin=$2 "
          "AND NOT EXISTS (SELECT 1 FROM recall_rows n WHERE n.origin=$1 "
          "AND n.entry_id=o.entry_id)")

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
#: a tombstone keeps no vector and no token vectors
_DROP = ("dt AS (DELETE FROM recall_row_tokens k USING g WHERE k.id=g.id) "
         "DELETE FROM recall_row_vectors v USING g WHERE v.id=g.id")
_GONE = ("WITH g AS (UPDATE recall_rows SET gone=true, content='', text='', "
         "seq=nextval('recall_seq') WHERE origin=$1 AND NOT gone AND {} RETURNING id), "
         + _DROP.replace("{", "{{").replace("}", "}}"))
_FORGET = ("WITH g AS (UPDATE recall_rows SET gone=true, forgotten=true, content='', text='', "
           "seq=nextval('recall_seq') WHERE id=$1 AND NOT gone RETURNING id), " + _DROP)
_VEC_OWN = ("INSERT INTO recall_row_vectors(id, model, embedding, seq) "
            "SELECT id, $3, $4, nextval('recall_seq') FROM recall_rows "
            "WHERE origin=$1 AND entry_id=$2 AND NOT gone "
            "ON CONFLICT (id, model) DO UPDATE SET embedding=EXCLUDED.embedding, seq=EXCLUDED.seq")
_VEC_SHARED = ("INSERT INTO recall_row_vectors(id, model, embedding, seq) "
               "SELECT id, $2, $3, nextval('recall_seq') FROM recall_rows WHERE id=$1 AND NOT gone "
               "ON CONFLICT (id, model) DO UPDATE SET embedding=EXCLUDED.embedding, "
               "seq=EXCLUDED.seq")
_TOK_OWN = ("INSERT INTO recall_row_tokens(id, model, n, packed, seq) "
            "SELECT id, $3, $4, $5, nextval('recall_seq') FROM recall_rows "
            "WHERE origin=$1 AND entry_id=$2 AND NOT gone "
            "ON CONFLICT (id, model) DO UPDATE SET n=EXCLUDED.n, packed=EXCLUDED.packed, "
            "seq=EXCLUDED.seq")
_TOK_SHARED = ("INSERT INTO recall_row_tokens(id, model, n, packed, seq) "
               "SELECT id, $2, $3, $4, nextval('recall_seq') FROM recall_rows "
               "WHERE id=$1 AND NOT gone "
               "ON CONFLICT (id, model) DO UPDATE SET n=EXCLUDED.n, packed=EXCLUDED.packed, "
               "seq=EXCLUDED.seq")
_COLS = ("id, origin, entry_id, session_id, tenant_id, user_id, type, role, name, content, "
         "text, created_at, model, gone, forgotten, seq")


class ClaimLost(Exception):
    """This daemon no longer holds its origin's claim (``_claim`` takes it again)."""


def _blob(v: Any) -> bytes:
    return np.asarray(v, dtype="<f4").tobytes()


def _packed(p: Any) -> bytes:
    """Packed token vectors (``search/late.py``) as stored: their bytes."""
    return p if isinstance(p, bytes) else np.ascontiguousarray(p, dtype=np.uint8).tobytes()


class SharedRecall:
    """``RecallStorage`` with a shared PostgreSQL table (see the module's docstring)."""

    def __init__(self, pg: PgStore, events: SharedEventBus, local: Store, *,
                 publish: bool = True) -> None:
        self.pg, self.events = pg, events
        self.local = LocalRecall(local)
        self.origin = ""  #: this store's origin id (``load``, from the SQLite file)
        #: what older daemons named this file's rows (adopted at the first claim)
        self.legacy = f"{socket.gethostname()}:{local.path}"
        #: why this daemon does not publish (another running daemon holds its origin), or None
        self.conflict: str | None = None
        #: False on a read-only daemon: it recalls the others' rows and writes none (its data
        #: dir's writer, or its next read-write start, publishes them)
        self.publish = publish
        self._claim_conn: asyncpg.Connection | None = None
        self._local_rows: Callable[[], Iterable[tuple[Session, list[tuple[Entry, str]]]]] = list
        self._on_change: Callable[[Change], list[Any]] = lambda _c: []
        self._model: Callable[[], str] = str
        self._digest: Callable[[int, str, float], str] = lambda _e, _s, _c: ""
        self._outbox: deque[tuple[str, Any]] = deque()
        self._dirty = True  #: the table may lack what the log holds: reconcile first
        self._cursor = 0  #: the highest ``seq`` of the others' changes read
        self._read_model = ""  #: the model whose vectors were read
        self._write_wake = asyncio.Event()
        self._read_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.written = self.read = self.reconciled = 0

    # --- RecallStorage: the local part ------------------------------------------------------
    async def vectors(self, model: str, after: int = -1, limit: int = -1
                      ) -> list[tuple[int, bytes]]:
        return await self.local.vectors(model, after, limit)

    async def exclusions(self) -> list[tuple[str, int, str]]:
        return await self.local.exclusions()

    def exclude_op(self, session_id: str, entry_id: int, at: float, said: str = "") -> Any:
        return self.local.exclude_op(session_id, entry_id, at, said)

    def include_op(self, session_id: str, entry_id: int) -> Any:
        return self.local.include_op(session_id, entry_id)

    async def write_exclusion(self, session_id: str, entry_id: int, excluded: bool, at: float,
                              ops: list[Any], said: str = "") -> None:
        await self.local.write_exclusion(session_id, entry_id, excluded, at, ops, said)

    async def forgotten(self) -> list[Forgotten]:
        return await self.local.forgotten()

    async def save_vectors(self, rows: list[VectorRow]) -> None:
        own = [r for r in rows if r[0] < REMOTE_BASE]
        if own:
            await self.local.save_vectors(own)
        self._queue("vectors", rows)

    async def tokens(self, model: str, after: int = -1, limit: int = -1
                     ) -> list[tuple[int, tuple[int, bytes]]]:
        return await self.local.tokens(model, after, limit)

    async def save_tokens(self, rows: list[TokenRow]) -> None:
        own = [r for r in rows if r[0] < REMOTE_BASE]
        if own:
            await self.local.save_tokens(own)
        self._queue("tokens", rows)

    # --- lifecycle --------------------------------------------------------------------------
    def attach(self, local: Callable[[], Iterable[tuple[Session, list[tuple[Entry, str]]]]],
               on_change: Callable[[Change], list[Any]], model: Callable[[], str],
               digest: Callable[[int, str, float], str] | None = None) -> None:
        self._local_rows, self._on_change, self._model = local, on_change, model
        self._digest = digest or (lambda _e, _s, _c: "")

    async def load(self) -> None:
        self.origin = await identity.origin(self.local.store)
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
            if self._claim_conn is not None and not self.conflict:
                await self._flush()
        if self._claim_conn is not None:  # the origin is free for its next start
            with contextlib.suppress(Exception):
                await self._claim_conn.close()
            self._claim_conn = None

    async def _back(self) -> None:
        """The store is (back) up: bring the table in line, read what was missed."""
        self._dirty = True
        self._write_wake.set()
        self._read_wake.set()

    def _remote(self, topic: str, kind: str, scope: dict[str, Any]) -> None:
        if (topic, kind) == SIGNAL:
            self._read_wake.set()

    def stats(self) -> dict[str, Any]:
        return {"origin": self.origin, "read_only": not self.publish,
                "publishing": self._claim_conn is not None
                and not self._claim_conn.is_closed(), "conflict": self.conflict,
                "queued": len(self._outbox), "written": self.written,
                "read": self.read, "reconciled": self.reconciled, "cursor": self._cursor}

    # --- handing this daemon's changes over (queued) -----------------------------------------
    def _queue(self, kind: str, item: Any) -> None:
        # nothing piles up while it cannot be written: reconciled after
        if self.pg.state != "up" or self.conflict or not self.publish:
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
            if not self.publish:
                self._outbox.clear()
                continue
            try:
                if not await self._claim():  # another running daemon publishes this origin
                    self._dirty = True
                    self._outbox.clear()
                    asyncio.get_running_loop().call_later(CLAIM_RETRY_S, self._write_wake.set)
                    continue
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
                if isinstance(exc, ClaimLost) and self._claim_conn is not None:
                    with contextlib.suppress(Exception):  # claimed again on the next try
                        await self._claim_conn.close()
                    self._claim_conn = None
                if self.pg.state == "up":
                    await asyncio.sleep(1.0)
                    self._write_wake.set()

    async def _flush(self) -> None:
        batch = [self._outbox.popleft() for _ in range(min(BATCH, len(self._outbox)))]
        if batch:
            await self._write(batch)

    async def _claim(self) -> bool:
        """Hold this origin (see the module's docstring); False while another running daemon
        holds it. The first claim adopts the rows an older daemon published under
        ``host:path`` of this file."""
        conn = self._claim_conn
        if conn is not None and not conn.is_closed():
            return True
        self._claim_conn = None
        if not self.origin:
            self._refuse(f"the database {self.local.store.path} has no origin id (it was not "
                         "migrated: a read-only start?); start the daemon once read-write")
            return False
        conn = await asyncpg.connect(self.pg.dsn, timeout=self.pg.timeout_s,
                                     server_settings={"application_name": "memman-origin"})
        try:
            got = await conn.fetchval(_CLAIM, self.origin)
        except BaseException:
            await conn.close()
            raise
        if not got:
            await conn.close()
            self._refuse(
                f"another running daemon publishes recall under this store's origin "
                f"{self.origin}: {self.local.store.path} is a copy of its data dir (or the "
                "same file opened twice). This daemon's entries are not shared with other "
                "hosts until that daemon stops; stop the copy (a copy of a data dir is the "
                "same store, and must not run beside it)")
            return False
        self._claim_conn = conn
        if self.conflict:
            log.warning("recall origin %s is free again: publishing", self.origin)
        self.conflict = None
        await self._adopt()
        return True

    def _refuse(self, why: str) -> None:
        if why != self.conflict:
            log.error("recall across hosts: %s", why)
        self.conflict = why

    async def _adopt(self) -> None:
        async def write(conn: Any) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK)
            await conn.execute(_ADOPT, self.origin, self.legacy)
            await conn.execute(_GONE.format("true"), self.legacy)

        await self.pg.run(write)
        self._signal()

    async def _write(self, batch: list[tuple[str, Any]]) -> None:
        model = self._model()
        # the batch as steps in the order queued (runs of one kind merged): applied in any
        # other order, a removal queued before an add (a clear, then an add) would remove it,
        # and one queued after rows (a session reassigned: removed, then written again under
        # its new owner) would find them still there and leave them with the old owner
        steps: list[tuple[str, list[Any]]] = []
        n = 0
        for kind, item in batch:
            if kind == "rows":
                tenant, user, entries = item
                items: list[Any] = [
                    (self.origin, e.id, e.session_id, tenant, user, e.type, e.role, e.name,
                     e.content or "", text, float(e.created_at), model) for e, text in entries]
                n += len(items)
            elif kind == "gone":
                items = list(item)
            elif kind == "session":
                items = [item]
            elif kind == "tokens":
                items = [(key, m, int(k), _packed(p)) for key, _sid, m, p, k in item]
            else:
                items = [(key, m, _blob(v)) for key, _sid, m, v in item]
            if steps and steps[-1][0] == kind:
                steps[-1][1].extend(items)
            elif items:
                steps.append((kind, items))

        claim = self._claim_conn
        holder = claim.get_server_pid() if claim is not None else 0

        async def write(conn: Any) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK)
            # still this origin's one publisher: a claim lost with its connection (a restart
            # of the server not noticed yet) writes nothing, the next try claims again
            if not await conn.fetchval(_HELD, holder, self.origin):
                raise ClaimLost(f"the claim on recall origin {self.origin} was lost")
            for kind, items in steps:
                if kind == "rows":
                    await conn.executemany(_ROW, items)
                elif kind == "gone":
                    await conn.execute(_GONE.format("entry_id = ANY($2::bigint[])"),
                                       self.origin, items)
                elif kind == "session":
                    await conn.execute(_GONE.format("session_id = ANY($2::text[])"),
                                       self.origin, items)
                elif kind == "tokens":
                    own_t = [(self.origin, k, m, n, b) for k, m, n, b in items
                             if k < REMOTE_BASE]
                    shared_t = [(k - REMOTE_BASE, m, n, b) for k, m, n, b in items
                                if k >= REMOTE_BASE]
                    if own_t:
                        await conn.executemany(_TOK_OWN, own_t)
                    if shared_t:
                        await conn.executemany(_TOK_SHARED, shared_t)
                else:
                    own = [(self.origin, k, m, b) for k, m, b in items if k < REMOTE_BASE]
                    shared = [(k - REMOTE_BASE, m, b) for k, m, b in items if k >= REMOTE_BASE]
                    if own:
                        await conn.executemany(_VEC_OWN, own)
                    if shared:
                        await conn.executemany(_VEC_SHARED, shared)

        await self.pg.run(write)
        self.written += n
        self._signal()

    def _signal(self) -> None:
        """Tell the other daemons to read (not an event of any subscriber's topic)."""
        if self.events.send is not None:
            self.events.send(encode(self.events.origin, *SIGNAL, {}, {}))

    async def _reconcile(self) -> None:
        """Bring this origin's rows in line with the session log: what the log holds and the
        table lacks is written (with the vectors kept locally), what the table holds and the
        log no longer does is marked gone, and a row whose entry now reads otherwise (its
        session reassigned or replaced while the store was away, a copy's entry of the same
        id) is marked gone and written again — removals first, as the writer keeps them."""
        model = self._model()
        have: dict[int, tuple[bool, tuple[Any, ...]]] = {}
        tokened: set[int] = set()  # rows with their token vectors of the model
        forgotten: set[tuple[int, str, float]] = set()  # another host's forget: never again
        for r in await self.pg.fetch(
                "SELECT r.entry_id, v.id IS NOT NULL, r.gone, r.session_id, r.created_at, "
                "r.tenant_id, r.user_id, md5(r.text), t.id IS NOT NULL "
                "FROM recall_rows r LEFT JOIN recall_row_vectors v ON v.id=r.id AND v.model=$2 "
                "LEFT JOIN recall_row_tokens t ON t.id=r.id AND t.model=$2 "
                "WHERE r.origin=$1 AND (NOT r.gone OR r.forgotten)", self.origin, model):
            if r[2]:
                forgotten.add((r[0], r[3], r[4]))
            else:
                have[r[0]] = (r[1], (r[3], r[5], r[6], float(r[4]), r[7]))
                if r[8]:
                    tokened.add(r[0])
        rows: list[tuple[str, Any]] = []
        wanted: set[int] = set()
        changed: set[int] = set()
        for s, entries in self._local_rows():
            missing = []
            for e, t in entries:
                wanted.add(e.id)
                got = have.get(e.id)
                if got is None:
                    if (e.id, e.session_id, float(e.created_at)) not in forgotten:
                        missing.append((e, t))
                elif got[1] != (e.session_id, s.meta.tenant_id, s.meta.user_id,
                                float(e.created_at),
                                hashlib.md5(t.encode(errors="replace")).hexdigest()):
                    changed.add(e.id)
                    missing.append((e, t))
            if missing:
                rows.append(("rows", (s.meta.tenant_id, s.meta.user_id, missing)))
        unvectored = {eid for eid in wanted if eid in changed or not have.get(eid, (False,))[0]}
        batch: list[tuple[str, Any]] = []
        stale = [eid for eid in have if eid not in wanted]
        if stale or changed:
            batch.append(("gone", [*stale, *changed]))
        batch += rows
        if unvectored and model:
            stored = [(eid, blob) for eid, blob in await self.local.vectors(model)
                      if eid in unvectored]
            if stored:
                batch.append(("vectors", [(eid, "", model, np.frombuffer(b, dtype="<f4"))
                                          for eid, b in stored]))
        untokened = {eid for eid in wanted if eid in changed or eid not in tokened}
        if untokened and model:
            toks = [(eid, "", model, got[1], got[0])
                    for eid, got in await self.local.tokens(model) if eid in untokened]
            for k in range(0, len(toks), 500):
                batch.append(("tokens", toks[k:k + 500]))
        for k in range(0, len(batch), 50):  # bounded transactions, in order
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

        async def read(conn: Any) -> tuple[list[Any], list[Any], list[Any]]:
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
            toks = await conn.fetch(
                "SELECT t.id, t.n, t.packed, t.seq FROM recall_row_tokens t JOIN recall_rows r "
                "ON r.id=t.id WHERE t.seq > $1 AND t.model=$3 AND r.origin <> $2 "
                "AND NOT r.gone", vcursor, self.origin, model)
            return rows, vecs, toks

        rows, vecs, toks = await self.pg.run(read)
        change = Change()
        for r in rows:
            key = REMOTE_BASE + r["id"]
            if r["origin"] == self.origin:
                change.forgotten.append((r["entry_id"], r["session_id"], r["created_at"],
                                         self._digest(r["entry_id"], r["session_id"],
                                                      r["created_at"])))
            elif r["gone"]:
                change.gone.append(key)
            else:
                change.rows.append(RemoteRow(
                    key, r["origin"], r["session_id"], r["tenant_id"], r["user_id"], r["type"],
                    r["role"], r["name"], r["content"], r["text"], r["created_at"], r["model"]))
        change.vectors = [(REMOTE_BASE + v["id"], bytes(v["embedding"])) for v in vecs]
        change.tokens = [(REMOTE_BASE + t["id"], int(t["n"]), bytes(t["packed"])) for t in toks]
        if change.forgotten:  # recorded first (read again if it fails): holds across a restart
            await self.local.store.write(forgotten_ops(change.forgotten, time.time()))
        self._cursor = max([cursor, *(r["seq"] for r in rows), *(v["seq"] for v in vecs),
                            *(t["seq"] for t in toks)])
        self._read_model = model
        self.read += len(rows)
        if change.rows or change.gone or change.vectors or change.tokens or change.forgotten:
            ops = self._on_change(change)
            if ops:  # exclusions carried over: a failure costs them after a restart only
                try:
                    await self.local.store.write(ops)
                except Exception:
                    log.warning("keeping %d carried recall exclusions failed", len(ops),
                                exc_info=True)
