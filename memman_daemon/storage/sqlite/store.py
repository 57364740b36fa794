"""The durable record: SQLite, WAL, group commit.

Writers hand ``write()`` a list of ``(sql, params)`` operations and await it; it returns only
after the transaction holding them commits. Operations queued while a commit is running share
the next transaction, and runs of the same statement go through one ``executemany`` — so many
concurrent durable writes cost about one commit. With ``synchronous = NORMAL`` (the default) a
WAL commit writes the log and does not wait for the disk, so a group commit of up to
``INLINE_MAX_ROWS`` rows runs right on the event loop (~0.1-1 ms; a hop to a thread and back
cost more than that on a busy core); the fsync of a checkpoint runs on the writer's own thread,
once a second at most, from a connection of its own. Larger batches, and every commit with
``synchronous = FULL`` (an fsync each), run on that thread too. If a batch fails, each request
in it is retried alone so one bad request cannot fail the others. Reads (the start-up load,
searches) go through a read-only connection (aiosqlite).

The writer never dies silently: any failure of a request (SQLite, I/O, a value SQLite cannot
bind) fails that request with -32003 and the writer goes on. If the writer itself cannot go on,
``on_fatal`` is called (the server then exits non-zero so a supervisor restarts it) and every
later write is refused at once instead of waiting. Before each transaction the database path is
checked against the file that was opened: a file deleted or replaced under the daemon makes
every later write fail with -32003 saying so (the open handle would write into a file nobody
will read again).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from memman.errors import STORAGE_ERROR, MemmanError
from memman_daemon.storage.sqlite.schema import MIGRATIONS, SCHEMA_VERSION, renumbered

log = logging.getLogger(__name__)

Op = tuple[str, Sequence[Any]]
T = TypeVar("T")

#: a group commit of at most this many rows runs on the event loop (synchronous = NORMAL only)
INLINE_MAX_ROWS = 500
CHECKPOINT_INTERVAL_S = 1.0  #: most often the WAL is checkpointed (on the writer's thread)


class StoreError(MemmanError):
    def __init__(self, message: str) -> None:
        super().__init__(STORAGE_ERROR, message)


class ConstraintError(StoreError):
    """The database refused a row that breaks a constraint (a unique index): another writer
    got there first. The caller may look again and retry."""


class Store:
    def __init__(self, path: Path, synchronous: str = "NORMAL", batch_max_rows: int = 5000) -> None:
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA", "OFF"):
            raise ValueError(f"storage.synchronous must be NORMAL or FULL, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.batch_max_rows = batch_max_rows
        #: the writer's connection: used by the write loop (on the event loop or, for what may
        #: not run there, on the writer's thread; never both at once) and by ``on_writer``
        self.db: sqlite3.Connection | None = None
        self._thread: ThreadPoolExecutor | None = None  #: the writer's thread
        #: commits without an fsync (WAL + NORMAL): small ones run on the event loop
        self.inline = self.synchronous in ("NORMAL", "OFF")
        self._checkpointer: sqlite3.Connection | None = None  #: on the writer's thread
        self._checkpointing: asyncio.Future[None] | None = None
        self._checkpointed_at = 0.0
        self.checkpoints = 0
        self.reader: aiosqlite.Connection | None = None
        self._queue: list[tuple[list[Op], asyncio.Future[None]]] = []
        #: futures of writes marked heavy (``write(heavy=True)``): their batch runs on the thread
        self._heavy: set[asyncio.Future[None]] = set()
        self._wakeup = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.commits = 0
        self.rows_written = 0
        self.write_errors = 0
        #: called once if the writer cannot go on (the server stops and exits non-zero)
        self.on_fatal: Callable[[BaseException], None] | None = None
        self.broken: str | None = None  #: why writes are refused for good, once they are
        self._identity: tuple[int, int] | None = None  #: (st_dev, st_ino) of the file opened
        #: the integrity check while it runs beside the start (``open``); None once it passed
        self._check: asyncio.Future[None] | None = None
        self._check_db: sqlite3.Connection | None = None  #: its connection (``close`` stops it)

    # --- lifecycle -----------------------------------------------------------------------
    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="memman-store-writer")
        try:
            self.db = await self.on_writer(
                lambda _: sqlite3.connect(self.path, isolation_level=None,
                                          check_same_thread=False))
            await self.on_writer(self._setup)
            if await self.on_writer(_version) == SCHEMA_VERSION:
                # nothing to migrate: the check (a read of the whole file, ~0.3 s at 400 MB,
                # in SQLite without the interpreter lock) runs on a thread of its own while
                # the start reads; no write is committed and the start does not end before it
                # passed (``checked``)
                self._check = self._check_beside()
            else:  # a migration writes: only into a file that passed
                await self.on_writer(self._quick_check)
                await self.on_writer(self._migrate)
            if self.inline:  # opened with the file, so it checkpoints this file and no other
                self._checkpointer = await self.on_writer(
                    lambda _: sqlite3.connect(self.path, isolation_level=None,
                                              check_same_thread=False))
            st = os.stat(self.path)
            self._identity = (st.st_dev, st.st_ino)
            self.reader = await aiosqlite.connect(f"file:{self.path}?mode=ro", uri=True,
                                                  isolation_level=None)
            self.reader.row_factory = aiosqlite.Row
        except sqlite3.DatabaseError as exc:
            await self.close()
            if _is_full(exc):
                raise StoreError(f"cannot open database {self.path}: {disk_full(self.path)}; "
                                 "free some space there") from exc
            raise StoreError(f"cannot open database {self.path}: {exc}. Move the file aside to "
                             "start empty, or restore it from a backup.") from exc
        self._writer = asyncio.create_task(self._write_loop(), name="memman-store-writer")

    async def on_writer(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(connection)`` on the writer's thread (where its connection lives)."""
        if self._thread is None:  # closed (shutting down) or never opened
            raise StoreError(f"the database {self.path} is not open")
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, fn, self.db)  # type: ignore[arg-type]

    def _check_beside(self) -> asyncio.Future[None]:
        db = self._check_db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                              check_same_thread=False)

        def run() -> None:
            try:
                self._quick_check(db)
            finally:
                db.close()
        thread = ThreadPoolExecutor(1, thread_name_prefix="memman-store-check")
        try:
            return asyncio.get_running_loop().run_in_executor(thread, run)
        finally:
            thread.shutdown(wait=False)  # the thread ends with the check

    async def checked(self) -> None:
        """Wait for the integrity check of ``open`` when it runs beside the start; a file that
        failed it raises ``StoreError`` (as ``open`` does when it runs the check itself)."""
        check = self._check
        if check is None:
            return
        try:
            await asyncio.shield(check)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}. Move the file aside to "
                             "start empty, or restore it from a backup.") from exc
        if self._check is check:
            self._check = None

    def _setup(self, db: sqlite3.Connection) -> None:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={self.synchronous}")
        db.execute("PRAGMA foreign_keys=ON")
        if self.inline:  # checkpoints (and their fsync) are run from the writer's thread
            db.execute("PRAGMA wal_autocheckpoint=0")

    @staticmethod
    def _quick_check(db: sqlite3.Connection) -> None:
        rows = [r[0] for r in db.execute("PRAGMA quick_check").fetchall()]
        if rows != ["ok"]:
            detail = "; ".join(rows[:3])
            raise sqlite3.DatabaseError(
                f"integrity check failed ({len(rows)} problems): {detail[:300]}")

    def _migrate(self, db: sqlite3.Connection) -> None:
        row = db.execute("PRAGMA user_version").fetchone()
        version = row[0] if row else 0
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"schema version {version} is newer than this memman understands ({SCHEMA_VERSION})")
        if version < SCHEMA_VERSION:
            version = renumbered(db, version)
        for v in range(version, SCHEMA_VERSION):
            log.info("migrating %s to schema version %d", self.path, v + 1)
            db.executescript(f"BEGIN;\n{MIGRATIONS[v]}\nPRAGMA user_version={v + 1};\nCOMMIT;")

    async def close(self) -> None:
        """Commit what is queued, then close both connections."""
        if self._check is not None and not self._check.done():
            with contextlib.suppress(sqlite3.Error):
                self._check_db.interrupt()  # type: ignore[union-attr]
            await asyncio.gather(self._check, return_exceptions=True)
        if self._writer is not None:
            await self.flush()
            self._writer.cancel()
            try:
                await self._writer
            except asyncio.CancelledError:
                pass
            self._writer = None
        if self.reader is not None:
            await self.reader.close()
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)
        if self._checkpointer is not None:
            await self.on_writer(lambda _: self._checkpointer.close())  # type: ignore[union-attr]
            self._checkpointer = None
        if self.db is not None:  # the last connection to close checkpoints the WAL
            await self.on_writer(lambda db: db.close())
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        self.reader = self.db = self._thread = None

    # --- reads (start-up load and searches; normal reads are served from memory) ------------
    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        conn = self.reader
        if conn is None:  # closed (shutting down) or never opened
            raise StoreError(f"the database {self.path} is not open")
        # one call on the reader's thread: a statement left open between two awaits would
        # hold its read transaction, and a read queued meanwhile would see that older snapshot
        return list(await conn.execute_fetchall(sql, params))

    # --- writes ---------------------------------------------------------------------------
    async def write(self, ops: Iterable[Op], *, heavy: bool = False) -> None:
        """Durably apply ``ops`` in one transaction (shared with concurrent writers).
        ``heavy``: few statements that touch many rows (an import moved into its session, a
        large session cleared): committed on the writer's thread, never on the event loop."""
        ops = list(ops)
        if not ops:
            return
        if self.broken is not None:
            raise StoreError(self.broken)
        if self._writer is None:
            raise StoreError("the database is closed")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if heavy:
            self._heavy.add(fut)
        self._queue.append((ops, fut))
        self._wakeup.set()
        try:
            await fut
        finally:
            self._heavy.discard(fut)

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        if self._queue and self._writer is not None and self.broken is None:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._queue.append(([], fut))
            self._wakeup.set()
            await asyncio.shield(fut)

    async def _write_loop(self) -> None:
        batch: list[tuple[list[Op], asyncio.Future[None]]] = []
        try:
            await self.checked()
        except Exception as exc:  # noqa: BLE001 - a damaged file: nothing is written into it
            self.broken = str(exc)
            for _, fut in self._queue:
                self._fail(fut, exc)
            self._queue.clear()
            return
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._queue:
                    batch, rows = [], 0
                    while self._queue and (not batch or rows < self.batch_max_rows):
                        item = self._queue.pop(0)
                        batch.append(item)
                        rows += len(item[0])
                    await self._commit_batch(batch)
                    batch = []
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the writer cannot go on: say so, refuse, stop
            self._die(f"the database writer stopped ({type(exc).__name__}: {exc}); the daemon "
                      "is exiting so that its supervisor restarts it", exc, batch)

    def _die(self, why: str, exc: BaseException,
             batch: list[tuple[list[Op], asyncio.Future[None]]]) -> None:
        log.critical("%s", why, exc_info=exc)
        self.broken = why
        for _, fut in [*batch, *self._queue]:
            self._fail(fut, exc)
        self._queue.clear()
        if self.on_fatal is not None:
            self.on_fatal(exc)

    async def _commit_batch(self, batch: list[tuple[list[Op], asyncio.Future[None]]]) -> None:
        try:
            self._check_file()
            heavy = any(fut in self._heavy for _, fut in batch)
            await self._transaction([op for ops, _ in batch for op in ops], heavy)
        except _Replaced as exc:
            for _, fut in batch:
                self._fail(fut, exc)
            return
        except Exception as exc:  # noqa: BLE001 - any failure fails requests, never the writer
            if len(batch) == 1:
                self._fail(batch[0][1], exc)
                return
            for ops, fut in batch:  # isolate the request that broke the batch
                try:
                    await self._transaction(ops, fut in self._heavy)
                except Exception as exc1:  # noqa: BLE001
                    self._fail(fut, exc1)
                else:
                    _resolve(fut)
            return
        for _, fut in batch:
            _resolve(fut)

    def _check_file(self) -> None:
        """Refuse to write into a database file that is no longer the one at ``path``."""
        if self._identity is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != self._identity:
            what = "deleted" if st is None else "replaced by another file"
            self.broken = (f"the database file {self.path} was {what} while the daemon ran; "
                           "writes are refused so that nothing is acknowledged into a file that "
                           "is gone. Restore the file (or move the new one aside) and restart "
                           "the daemon")
            log.critical("%s", self.broken)
            raise _Replaced(self.broken)

    async def _transaction(self, ops: list[Op], heavy: bool = False) -> None:
        if not ops:
            return
        if self.inline and len(ops) <= INLINE_MAX_ROWS and not heavy:
            assert self.db is not None
            _apply(self.db, ops)
        else:
            await self.on_writer(lambda db: _apply(db, ops))
        self.commits += 1
        self.rows_written += len(ops)
        if self.inline:
            self._checkpoint_soon()

    def _checkpoint_soon(self) -> None:
        """Start a passive checkpoint on the writer's thread, at most once a second (it copies
        the WAL into the database file and syncs it; writers are not blocked meanwhile)."""
        now = time.monotonic()
        if (self._checkpointing is not None and not self._checkpointing.done()) or \
                now - self._checkpointed_at < CHECKPOINT_INTERVAL_S:
            return
        self._checkpointed_at = now
        assert self._thread is not None
        fut = asyncio.get_running_loop().run_in_executor(self._thread, self._checkpoint)
        fut.add_done_callback(_log_checkpoint_failure)
        self._checkpointing = fut

    def _checkpoint(self) -> None:
        assert self._checkpointer is not None
        self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self.checkpoints += 1

    def _fail(self, fut: asyncio.Future[None], exc: BaseException) -> None:
        self.write_errors += 1
        log.warning("write to %s failed: %s", self.path, exc)
        if fut.done():
            return
        if isinstance(exc, _Replaced) or self.broken is not None:
            fut.set_exception(StoreError(self.broken or str(exc)))
        elif isinstance(exc, sqlite3.IntegrityError):
            fut.set_exception(ConstraintError(
                f"the database {self.path} refused the write ({exc}); nothing was changed"))
        elif isinstance(exc, (sqlite3.OperationalError, OSError)) and _is_full(exc):
            fut.set_exception(StoreError(
                f"the database {self.path} refused the write: {disk_full(self.path)}; nothing "
                "was changed. Free some space there; the daemon keeps running."))
        elif isinstance(exc, (sqlite3.OperationalError, OSError)):
            fut.set_exception(StoreError(
                f"the database {self.path} refused the write ({exc}); nothing was changed. "
                "Check free disk space and file permissions; the daemon keeps running."))
        else:
            fut.set_exception(StoreError(
                f"the database {self.path} could not store this request ({type(exc).__name__}: "
                f"{exc}); nothing was changed and the daemon keeps running."))


def _is_full(exc: BaseException) -> bool:
    return (getattr(exc, "errno", None) == errno.ENOSPC
            or getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
            or "disk is full" in str(exc))


def disk_full(path: Path) -> str:
    """Which disk is full, for a message: the file system holding ``path`` and what is free."""
    where = os.path.realpath(path.parent)
    mount = where
    while not os.path.ismount(mount) and os.path.dirname(mount) != mount:
        mount = os.path.dirname(mount)
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return f"the disk holding {where} (mounted at {mount}) is full"
    return (f"the disk holding {where} (the file system mounted at {mount}) is full "
            f"({free} bytes free)")


def _log_checkpoint_failure(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        # the WAL keeps growing until a checkpoint succeeds; nothing written is lost
        log.warning("checkpointing the WAL failed: %s", fut.exception())


def _version(db: sqlite3.Connection) -> int:
    row = db.execute("PRAGMA user_version").fetchone()
    return row[0] if row else 0


def _apply(db: sqlite3.Connection, ops: list[Op]) -> None:
    """One transaction, on the writer's thread: runs of one statement go through executemany."""
    db.execute("BEGIN IMMEDIATE")
    try:
        i = 0
        while i < len(ops):
            sql, j = ops[i][0], i
            while j < len(ops) and ops[j][0] == sql:
                j += 1
            if j - i == 1:
                db.execute(sql, ops[i][1])
            else:
                db.executemany(sql, [p for _, p in ops[i:j]])
            i = j
        db.execute("COMMIT")
    except BaseException:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise


class _Replaced(Exception):
    """The database file at the path is not the one the daemon opened."""


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
