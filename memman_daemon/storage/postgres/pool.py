"""The shared store's connection to PostgreSQL: a pool, a LISTEN connection, health.

Everything the shared tiers do goes through ``PgStore.run(fn)``: ``fn(conn)`` runs inside one
transaction within the ``storage.shared_timeout_s`` deadline, and ``run`` returns only after
COMMIT — that is what "acknowledged" means for a shared write. When the server is down or
unreachable the call fails at once with ``SharedUnavailable`` (-32010, "retry"), the store
marks itself ``down`` and one background task reconnects with exponential backoff (50 ms
doubling to ``storage.shared_backoff_max_s``). Sessions never wait on any of this: they live
in the local SQLite file.

At every (re)connection the schema is migrated (versioned, under an advisory lock) or, when the
database's version is newer than this daemon knows, refused: at start the daemon exits with
the reason; found later, the store stays ``refused`` and says why.

Events: ``notify()`` queues a payload that one sender task delivers with ``pg_notify`` in
order; the LISTEN connection hands other daemons' payloads to ``on_notify``. The LISTEN
connection closing is how an outage is noticed even when no request is running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from memman.errors import SHARED_UNAVAILABLE, STORAGE_ERROR, MemmanError
from memman_daemon.component import Component
from memman_daemon.storage.counts import BackgroundCounts
from memman_daemon.storage.postgres.schema import MIGRATIONS, PGVECTOR_DDL, SCHEMA_VERSION

log = logging.getLogger(__name__)

CHANNEL = "memman_events"
ID_HEADROOM = 16  #: ids kept reserved beyond a request's own need
T = TypeVar("T")

#: what says "the server is not there (now)": connection refused/reset, shutdown, restart
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    OSError, asyncpg.PostgresConnectionError, asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError, asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError, ConnectionError, EOFError)


#: the server answers but refuses writes: -32003 (not "retry": retrying will not help)
REFUSED_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.DiskFullError, asyncpg.exceptions.ReadOnlySQLTransactionError,
    asyncpg.exceptions.OutOfMemoryError)


class SharedUnavailable(MemmanError):
    """The shared store cannot be reached now; nothing was changed by this call. Retry."""

    def __init__(self, message: str, retry_in_s: float) -> None:
        super().__init__(SHARED_UNAVAILABLE, message, {"retry_in_s": round(retry_in_s, 3)})


class SchemaTooNew(Exception):
    pass


def redact(dsn: str) -> str:
    """The DSN without its password (for status output and logs)."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "postgresql://?"
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def origin_name() -> str:
    """This daemon among many: host:pid/random (two daemons in one process stay apart)."""
    return f"{socket.gethostname()}:{os.getpid()}/{secrets.token_hex(3)}"


class PgStore(Component):
    """The shared store on PostgreSQL (a component of the app: ``load``, ``close``, ``stats``)."""

    stats_key = "shared"
    backend = "postgresql"

    def __init__(self, dsn: str, *, timeout_s: float = 5.0, pool_size: int = 4,
                 backoff_max_s: float = 5.0) -> None:
        self.dsn = dsn
        self.timeout_s = timeout_s
        self.pool_size = max(1, pool_size)
        self.backoff_max_s = backoff_max_s
        self.origin = origin_name()
        self.state = "connecting"  #: connecting, up, down, refused, closed
        self.pool: asyncpg.Pool | None = None
        self.listener: asyncpg.Connection | None = None
        self.last_error: str | None = None
        self.down_since: float | None = None
        self.retry_at: float = 0.0
        self.reconnects = 0
        self.failures = 0  #: calls answered SharedUnavailable
        self.commits = 0
        self.schema_version: int | None = None
        self.vector_backend = "python"
        self.events_sent = 0
        self.events_received = 0
        self.on_notify: Callable[[str], None] | None = None
        #: called (awaited) after each successful (re)connection: resync what may be missed
        self.on_up: list[Callable[[], Awaitable[None]]] = []
        #: called with the new state when it changes (the daemon publishes a stats event)
        self.on_state: Callable[[str], None] | None = None
        self._reconnect: asyncio.Task[None] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._outbox: deque[str] = deque(maxlen=10_000)
        self._wake = asyncio.Event()
        self._ids: deque[int] = deque()
        self._closed = False

    # --- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        """Connect and migrate. A newer schema refuses the start; an unreachable server does
        not (the daemon serves sessions and keeps trying)."""
        try:
            await self._connect()
        except SchemaTooNew as exc:
            from memman_daemon.storage.sqlite.store import StoreError
            raise StoreError(str(exc)) from exc
        except Exception as exc:
            if not isinstance(exc, (*UNAVAILABLE_ERRORS, asyncio.TimeoutError)):
                raise
            log.warning("shared store %s unavailable at start (%s); serving sessions and "
                        "reconnecting", redact(self.dsn), exc)
            self._mark_down(exc)
        self._sender = asyncio.get_running_loop().create_task(self._send_loop(),
                                                              name="memman-shared-notify")

    async def close(self) -> None:
        self._closed = True
        self.state = "closed"
        for task in (self._reconnect, self._sender):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self._drop_connections()

    async def _connect(self) -> None:
        timeout = self.timeout_s
        pool = await asyncio.wait_for(asyncpg.create_pool(
            self.dsn, min_size=1, max_size=self.pool_size, timeout=timeout,
            command_timeout=timeout, server_settings={"application_name": "memman"}),
            timeout * 2)
        try:
            async with pool.acquire() as conn:
                await self._migrate(conn)
                self.vector_backend = await self._detect_pgvector(conn)
            listener = await asyncpg.connect(self.dsn, timeout=timeout)
            await listener.add_listener(CHANNEL, self._on_notify)
            listener.add_termination_listener(self._on_listener_lost)
        except BaseException:
            # terminate, not close: close waits for every connection to be released, and a
            # cancelled migration (SIGTERM while it waits for another daemon's) may never be
            pool.terminate()
            raise
        old = self.pool
        self.pool, self.listener = pool, listener
        if old is not None:
            old.terminate()
        was = self.state
        self.state, self.last_error, self.down_since = "up", None, None
        self._ids.clear()
        if was != "connecting":
            self.reconnects += 1
            log.info("shared store %s is back", redact(self.dsn))
        self._state_changed()
        for hook in self.on_up:
            try:
                await hook()
            except Exception:
                log.exception("resync after connecting to the shared store failed")

    async def _migrate(self, conn: asyncpg.Connection) -> None:
        # a current schema is only read (a read-only role or server can still be used)
        if await conn.fetchval("SELECT to_regclass('memman_schema') IS NOT NULL"):
            version = await conn.fetchval("SELECT version FROM memman_schema")
            self._check_version(version)
            if version == SCHEMA_VERSION:
                self.schema_version = version
                return
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(7301)")  # one migrator at a time
            await conn.execute("CREATE TABLE IF NOT EXISTS memman_schema (version INTEGER NOT NULL)")
            version = await conn.fetchval("SELECT version FROM memman_schema")
            if version is None:
                await conn.execute("INSERT INTO memman_schema VALUES (0)")
                version = 0
            self._check_version(version)
            for v in range(version, SCHEMA_VERSION):
                log.info("migrating shared store %s to schema version %d", redact(self.dsn), v + 1)
                await conn.execute(MIGRATIONS[v])
                await conn.execute("UPDATE memman_schema SET version=$1", v + 1)
            self.schema_version = SCHEMA_VERSION

    def _check_version(self, version: int | None) -> None:
        if version is not None and version > SCHEMA_VERSION:
            self.state = "refused"
            self.schema_version = version
            raise SchemaTooNew(
                f"the shared store {redact(self.dsn)} has schema version {version}, newer "
                f"than this memman understands ({SCHEMA_VERSION}); upgrade memman on this "
                "host (daemons of one shared store must run the same or newer versions)")

    async def _detect_pgvector(self, conn: asyncpg.Connection) -> str:
        has = await conn.fetchval(
            "SELECT count(*) FROM pg_available_extensions WHERE name='vector'")
        if not has:
            return "python"
        try:
            async with conn.transaction():
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                await conn.execute(PGVECTOR_DDL)
        except asyncpg.PostgresError as exc:
            log.info("pgvector is available but could not be enabled (%s); vector ranking "
                     "runs in Python", exc)
            return "python"
        await self._backfill_vectors(conn)
        return "pgvector"

    async def _backfill_vectors(self, conn: asyncpg.Connection) -> None:
        """Embeddings stored before pgvector was there get their ``vec`` copy."""
        from memman_daemon.search.vectors import unpack
        from memman_daemon.storage.postgres.vectors import literal

        for table in ("memory_vectors", "chunk_vectors"):
            while True:
                rows = await conn.fetch(f"SELECT id, embedding FROM {table} WHERE vec IS NULL "
                                        "LIMIT 500")
                if not rows:
                    break
                await conn.executemany(f"UPDATE {table} SET vec=$2::text::vector WHERE id=$1",
                                       [(r[0], literal(list(unpack(r[1])))) for r in rows])

    async def _drop_connections(self) -> None:
        listener, pool = self.listener, self.pool
        self.listener = self.pool = None
        if listener is not None:
            with contextlib.suppress(Exception):
                listener.terminate()
        if pool is not None:
            with contextlib.suppress(Exception):
                pool.terminate()

    # --- health --------------------------------------------------------------------------
    def _mark_down(self, exc: BaseException) -> None:
        if self._closed:
            return
        self.last_error = f"{type(exc).__name__}: {exc}".strip()
        if self.state not in ("down", "refused"):
            log.warning("shared store %s unavailable: %s", redact(self.dsn), self.last_error)
            self.state = "down"
            self.down_since = time.time()
            self._state_changed()
        if isinstance(exc, SchemaTooNew):
            self.state = "refused"
        if self._reconnect is None or self._reconnect.done():
            self._reconnect = asyncio.get_running_loop().create_task(
                self._reconnect_loop(), name="memman-shared-reconnect")

    def _on_listener_lost(self, conn: asyncpg.Connection) -> None:
        if conn is self.listener and not self._closed:
            self._mark_down(ConnectionError("the LISTEN connection closed"))

    async def _reconnect_loop(self) -> None:
        await self._drop_connections()
        delay = 0.05
        while not self._closed:
            self.retry_at = time.monotonic() + delay
            await asyncio.sleep(delay)
            try:
                await self._connect()
                return
            except SchemaTooNew as exc:
                self.state, self.last_error = "refused", str(exc)
                delay = self.backoff_max_s
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}".strip()
                delay = min(delay * 2, self.backoff_max_s)

    def _state_changed(self) -> None:
        if self.on_state is not None:
            try:
                self.on_state(self.state)
            except Exception:
                log.exception("shared store state callback failed")

    def unavailable(self, exc: BaseException | None = None) -> SharedUnavailable:
        retry = max(0.0, self.retry_at - time.monotonic()) if self.state != "up" else 0.0
        if self.state == "refused":
            why = self.last_error or "schema refused"
            return SharedUnavailable(f"shared store refused: {why}", self.backoff_max_s)
        why = (self.last_error or self.state) if exc is None else \
            f"{type(exc).__name__}: {exc}".strip()
        return SharedUnavailable(
            f"the shared store {redact(self.dsn)} is unavailable ({why}); nothing was changed. "
            f"memman reconnects by itself: retry in {max(retry, 0.05):.2f}s. Sessions keep "
            "working meanwhile", retry)

    # --- calls ---------------------------------------------------------------------------
    async def run(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``fn(conn)`` inside one transaction; returns after COMMIT. Raises SharedUnavailable
        (nothing changed, or — if the connection broke during COMMIT — not known; every
        shared write is safe to retry) or lets PostgreSQL errors of ``fn`` through."""
        pool = self.pool
        if self.state != "up" or pool is None:
            self.failures += 1
            raise self.unavailable()
        try:
            async with asyncio.timeout(self.timeout_s):
                async with pool.acquire() as conn, conn.transaction():
                    result = await fn(conn)
        except TimeoutError as exc:
            self.failures += 1
            raise SharedUnavailable(
                f"the shared store {redact(self.dsn)} did not answer within "
                f"{self.timeout_s:g}s; the change may not have been made. Retry (every shared "
                "write can be repeated safely)", 0.0) from exc
        except REFUSED_ERRORS as exc:  # the server is there but will not take the write
            raise MemmanError(STORAGE_ERROR, f"the shared store {redact(self.dsn)} refused the "
                              f"write ({type(exc).__name__}: {exc}); nothing was changed. Check "
                              "the server's disk space and that it is a primary, not a "
                              "read-only standby; the daemon keeps running") from exc
        except asyncpg.PostgresError as exc:
            if isinstance(exc, UNAVAILABLE_ERRORS):
                self.failures += 1
                self._mark_down(exc)
                raise self.unavailable(exc) from exc
            raise
        except UNAVAILABLE_ERRORS as exc:
            self.failures += 1
            self._mark_down(exc)
            raise self.unavailable(exc) from exc
        self.commits += 1
        return result

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self.run(lambda c: c.fetch(sql, *args))

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        return await self.run(lambda c: c.fetchrow(sql, *args))

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.run(lambda c: c.fetchval(sql, *args))

    # --- ids -----------------------------------------------------------------------------
    async def ensure_ids(self, n: int) -> None:
        """Have at least ``n`` ids from ``memman_ids`` ready for ``take_id``, plus headroom
        (``ID_HEADROOM``) for the other requests of this daemon that take theirs meanwhile;
        most writes need no extra round trip."""
        if len(self._ids) >= n + ID_HEADROOM:
            return
        want = n + 4 * ID_HEADROOM - len(self._ids)
        rows = await self.fetch("SELECT nextval('memman_ids') FROM generate_series(1, $1)", want)
        self._ids.extend(r[0] for r in rows)

    def take_id(self) -> int:
        if not self._ids:  # only if very many requests interleaved: the caller may retry
            raise SharedUnavailable("no shared record id was reserved in time; retry", 0.0)
        return self._ids.popleft()

    # --- events --------------------------------------------------------------------------
    def notify(self, payload: str) -> None:
        """Queue ``payload`` for other daemons (sent in order; dropped while down)."""
        if self.state != "up":
            return
        self._outbox.append(payload)
        self._wake.set()

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                payload = self._outbox[0]
                try:
                    await self._send(payload)
                    self.events_sent += 1
                except Exception as exc:  # down: the events of the outage are not replayed
                    log.debug("event not sent to other daemons: %s", exc)
                    self._outbox.clear()
                    break
                self._outbox.popleft()

    async def _send(self, payload: str) -> None:
        """One event to the other daemons (``pg_notify``, in a transaction of its own)."""
        await self.run(lambda c: c.execute("SELECT pg_notify($1, $2)", CHANNEL, payload))

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self.events_received += 1
        if self.on_notify is not None:
            try:
                self.on_notify(payload)
            except Exception:
                log.exception("handling an event from another daemon failed")

    def stats(self) -> dict[str, Any]:
        return {"backend": self.backend, "dsn": redact(self.dsn), "state": self.state,
                "last_error": self.last_error,
                "down_for_s": None if self.down_since is None
                else round(time.time() - self.down_since, 3),
                "retry_in_s": None if self.state == "up"
                else round(max(0.0, self.retry_at - time.monotonic()), 3),
                "reconnects": self.reconnects, "failures": self.failures,
                "commits": self.commits, "schema_version": self.schema_version,
                "vector_backend": self.vector_backend, "origin": self.origin,
                "events_sent": self.events_sent, "events_received": self.events_received}


class SharedCounts(BackgroundCounts):
    """A shared tier's counts for ``stats``: ``sql`` selects one row, the counts in the order
    of ``keys`` (see ``BackgroundCounts``)."""

    def __init__(self, pg: PgStore, sql: str, keys: tuple[str, ...]) -> None:
        async def read() -> dict[str, int]:
            row = await pg.fetchrow(sql)
            return dict(zip(keys, row, strict=True)) if row is not None else {}
        super().__init__(read, keys)
