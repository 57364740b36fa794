"""The session log: the in-memory map of Session objects and their durable record.

It owns every change of a session's log: ``open``, ``append`` (the one path that adds entries:
``session_add``, a finished cycle's question and answer, the injection), ``remove``-style
commits, ``clear``, ``delete`` and ``replace`` (an import). Each builds its rows with
``repositories.sessions`` and commits them through ``commit``, the one rollback: when the commit
fails, the session in memory is restored in place from what the disk holds, and the error is
raised as -32003 — so memory never claims what the disk does not hold. Then an event is
published.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from memman.errors import STORAGE_ERROR, MemmanError, not_found
from memman.params import INT64_MAX
from memman.schemas import DEFAULT_ROLE
from memman_daemon.changes import Changes
from memman_daemon.model import Entry, Session, SessionMeta, Summary
from memman_daemon.scope import session_owner
from memman_daemon.storage.sqlite import sessions as rows
from memman_daemon.storage.sqlite.store import Op, Store, StoreError

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.tokens import TokenCounter

log = logging.getLogger(__name__)

#: an entry longer than this (characters) has its tokens counted on a worker thread
COUNT_OFF_LOOP_CHARS = 64 * 1024

#: a component's reaction to a deleted session: ``await hook(session_id, client)``
DeletedHook = Callable[[str, str], Awaitable[Any]]


#: entries decoded between two yields of the start's load (~10 ms)
LOAD_YIELD_EVERY = 2048


class Sessions:
    def __init__(self, store: Store, config: Config, clock: Clock, events: EventBus,
                 tokens: TokenCounter, embedder: Embedder, *, read_only: bool = False) -> None:
        self.store, self.config, self.clock = store, config, clock
        self.read_only = read_only
        self.events, self.tokens, self.embedder = events, tokens, embedder
        #: set by the app once they exist: what other components hold for a session (the tool
        #: cache, the scratchpad, the usage series) is dropped with it, in this order
        self.on_deleted: list[DeletedHook] = []
        #: set by the app: the recall index follows the log (entries in; a session's entries
        #: out when it is cleared, replaced or deleted; its recall flag changed)
        self.on_appended: list[Callable[[Session, list[Entry]], None]] = []
        self.on_reset: list[Callable[[str], None]] = []
        self.on_recall_changed: list[Callable[[Session], None]] = []
        self.by_id: dict[str, Session] = {}
        self._ids = itertools.count(1)
        #: bumped for the session's owner as every commit starts and ends (memory changes on
        #: either side of it): a context answer sent again is the same only while this is
        #: (``Repeats``)
        self.changes = Changes()

    # --- ids and persistence helpers ------------------------------------------------------
    def next_id(self) -> int:
        """A new id for an entry or summary (unique across the daemon)."""
        i = next(self._ids)
        if i > INT64_MAX:
            raise MemmanError(STORAGE_ERROR, "entry ids are exhausted (the database already "
                              f"holds id {INT64_MAX}); export the sessions and import them into "
                              "a fresh data dir, where they get new ids")
        return i

    def reserve_ids(self, n: int) -> Iterator[int]:
        """``n`` new ids at once (an import), handed out by the iterator returned."""
        first = self.next_id()
        if first + n - 1 > INT64_MAX:
            raise MemmanError(STORAGE_ERROR, "entry ids are exhausted: an import of this size "
                              f"would pass id {INT64_MAX}")
        self._ids = itertools.count(first + n)
        return iter(range(first, first + n))

    async def commit(self, session: Session, ops: list[Op], *, heavy: bool = False) -> None:
        """Commit ``ops`` (rows of ``session`` and any others that must go with them). The one
        rollback: if the commit fails, ``session`` is restored in place from the disk (or
        dropped, when the disk has no row for it) and the error re-raised as -32003.
        ``heavy``: statements over many rows, committed off the event loop (``Store.write``)."""
        self.changes.bump(session_owner(session))
        try:
            await self.store.write(ops, heavy=heavy)
        except Exception as exc:
            await self._restore(session)
            if isinstance(exc, MemmanError):
                raise
            raise StoreError(f"the change could not be stored ({type(exc).__name__}: {exc}); "
                             "nothing was changed") from exc
        finally:  # the owner read again: a move to another user changes it meanwhile
            self.changes.bump(session_owner(session))

    # --- load ----------------------------------------------------------------------------
    async def any_entries(self) -> bool:
        """The store holds an entry (asked before the load: what the start prepares for)."""
        return await rows.any_entries(self.store)

    async def load(self) -> None:
        """Read every session; a row that cannot be read stops the start (``LoadError`` names
        the file, the table, the row and what to do) instead of serving half the data."""
        store = self.store
        self.by_id.clear()
        for row in await rows.all_sessions(store):
            with _row(store, "sessions", row[0]):
                self.by_id[row[0]] = Session(row[0], SessionMeta.from_wire(json.loads(row[1])))
        max_id = 0
        staged: set[str] = set()  # rows of an import that did not finish
        key = None
        entry_rows = await rows.all_entries(store)
        try:  # one handler for the whole loop (a start reads every entry): ``key`` names the row
            for n, row in enumerate(entry_rows):
                if n % LOAD_YIELD_EVERY == 0:  # the daemon answers pings while it loads
                    await asyncio.sleep(0)
                key = row[0]
                if row[2].startswith(rows.STAGING):
                    staged.add(row[2])
                    max_id = max(max_id, row[0])
                    continue
                e = Entry.from_wire(rows.decode(row[1]))
                if not isinstance(e.id, int) or not isinstance(e.tokens, int):
                    raise ValueError("id and tokens must be integers")
                if s := self.by_id.get(e.session_id):
                    s.append(e)
                if e.id > max_id:
                    max_id = e.id
        except Exception as exc:
            with _row(store, "entries", key):
                raise exc
        for row in await rows.all_summaries(store):
            if row[2].startswith(rows.STAGING):
                staged.add(row[2])
                max_id = max(max_id, row[0])
                continue
            with _row(store, "summaries", row[0]):
                sm = Summary.from_wire(json.loads(row[1]))
                if s := self.by_id.get(sm.session_id):
                    s.summaries[sm.id] = sm
            max_id = max(max_id, sm.id)
        for s in self.by_id.values():
            with _row(store, "sessions", s.id):
                s.recount()
                s.overview()
        self._ids = itertools.count(max_id + 1)
        if staged:
            names = ", ".join(repr(c[len(rows.STAGING):]) for c in sorted(staged))
            if self.read_only:  # dropped by the next import of that session, or start
                log.warning("skipped the rows of %d import(s) that did not finish: %s",
                            len(staged), names)
            else:  # an import killed mid-way leaves nothing behind: its rows go at start
                await self.store.write([op for c in sorted(staged)
                                        for op in rows.drop_staged_ops(c)], heavy=True)
                log.warning("dropped the rows of %d import(s) that did not finish: %s",
                            len(staged), names)

    async def _restore(self, s: Session) -> None:
        """Make ``s`` what the disk holds again, in place (holders of the object stay valid)."""
        disk = await rows.read_session(self.store, s.id)
        if disk is None:
            if self.by_id.get(s.id) is s:
                del self.by_id[s.id]
            return
        s.meta, s.entries, s.summaries, s.by_id = disk.meta, disk.entries, disk.summaries, disk.by_id
        s.recount()
        self.by_id[s.id] = s

    # --- queries -------------------------------------------------------------------------
    def get(self, session_id: str) -> Session:
        try:
            return self.by_id[session_id]
        except KeyError:
            raise not_found("session", session_id) from None

    # --- mutations -----------------------------------------------------------------------
    async def open(self, session_id: str, opts: dict[str, Any],
                   extra: list[Op] | tuple[Op, ...] = ()) -> tuple[Session, bool]:
        """Create the session if it does not exist; returns (session, created). ``opts`` (any
        of user_id, tenant_id, model, max_tokens, recall) is checked by the method's schema
        (``memman_session_open``); ``extra`` rows commit with the session's (an audit row)."""
        existing = self.by_id.get(session_id)
        if existing is not None:
            changed = {k: v for k, v in opts.items() if getattr(existing.meta, k) != v}
            if changed:
                for k, v in changed.items():
                    setattr(existing.meta, k, v)
                existing.meta.updated_at = self.clock.now()
                await self.commit(existing, [rows.meta_op(existing), *extra])
                if {"user_id", "tenant_id"} & changed.keys():
                    self._reindex(existing)  # its entries now belong to another scope
                elif "recall" in changed:
                    for hook in self.on_recall_changed:
                        hook(existing)
            return existing, False
        now = self.clock.now()
        meta = SessionMeta(created_at=now, updated_at=now, opened_at=now,
                           max_tokens=self.config.context.max_tokens)
        for k, v in opts.items():
            setattr(meta, k, v)
        s = Session(session_id, meta)
        self.by_id[session_id] = s
        await self.commit(s, [rows.meta_op(s), *extra])
        self.events.publish("session", "opened", {"session": s.overview()}, **self.scope(s))
        return s, True

    def build_entry(self, session: Session, raw: dict[str, Any], *, count: bool = True) -> Entry:
        """An entry from a map shaped as ``memman.schemas.ENTRY_IN`` (a client's, checked by
        ``memman_session_add``'s schema, or the daemon's own): its id, default role, tool calls
        in the chat API's shape, and its tokens counted (once, here; ``count=False``: the caller
        counts them, see ``add``). It enters the log through ``append``."""
        etype = raw.get("type", "message")
        tool_calls = raw.get("tool_calls")
        if tool_calls is not None:
            tool_calls = [normalize_call(c) for c in tool_calls]
        created_at = raw.get("created_at")
        e = Entry(id=self.next_id(), session_id=session.id, type=etype,
                  role=raw.get("role") or DEFAULT_ROLE[etype], content=raw.get("content") or "",
                  tokens=0, created_at=self.clock.now() if created_at is None else created_at,
                  name=raw.get("name"),
                  tool_call_id=raw.get("tool_call_id"), tool_calls=tool_calls,
                  metadata=raw.get("metadata") or {},
                  pinned=bool(raw.get("pinned", False)))
        if count:
            e.tokens = self.tokens.count_message(e.chat_message(), session.meta.model)
        return e

    async def add(self, session_id: str, raw: dict[str, Any]) -> Entry:
        """``session_add``: one entry from a client."""
        s = self.get(session_id)
        big = len(raw.get("content") or "") > COUNT_OFF_LOOP_CHARS
        e = self.build_entry(s, raw, count=not big)
        if big:  # tiktoken on megabytes (a single 5 MB word) takes seconds: not on the loop
            e.tokens = await asyncio.to_thread(self.tokens.count_message, e.chat_message(),
                                               s.meta.model)
        await self.append(s, [e])
        if e.content:  # relevance vectors: embedded later, in batches, off this path
            self.embedder.prefetch(e.content)
        return e

    async def append(self, s: Session, entries: list[Entry], *, meta: bool = False,
                     extra: list[Op] | tuple[Op, ...] = ()) -> None:
        """The one path by which entries (from ``build_entry``) enter a session's log: their
        rows — with the session's meta row when ``meta`` (the caller changed it), and ``extra``
        rows that must commit with them — are committed first, then the entries join the log
        in memory and each is announced (``entry_added``). A lone entry is one row, so that
        concurrent adds are runs of one statement: one executemany per group commit."""
        ops = [rows.entry_op(e) for e in entries]
        if meta:
            ops.append(rows.meta_op(s))
        await self.commit(s, [*ops, *extra])
        # memory follows the commit order: the writer resolves transactions in order and the
        # tasks wake in that order, so what memory holds is what the disk holds. A session
        # replaced (an import) or deleted since these rows were queued was so by a
        # transaction committed before them: the rows belong to what holds the id now
        live = self.by_id.get(s.id)
        if live is None:
            await self._orphaned(s, entries)
        if live is not s and meta:  # the replaced session's meta row overwrote the live one's
            await self.commit(live, [rows.meta_op(live)])
        s = live
        for e in entries:
            self._join(s, e)
        for hook in self.on_appended:
            hook(s, entries)
        for e in entries:
            self.events.publish("session", "entry_added", _entry_added(e, s), **self.scope(s))

    async def _orphaned(self, s: Session, entries: list[Entry]) -> NoReturn:
        """Rows committed after their session's delete: not acknowledged, so taken out again
        (a kill -9 before that leaves rows of no session, which load skips)."""
        with contextlib.suppress(Exception):
            await self.store.write([op for e in entries for op in rows.delete_entry_ops(e.id)])
        raise not_found("session", s.id)

    @staticmethod
    def _join(s: Session, e: Entry) -> None:
        """``e`` joins ``s`` where its id puts it (as a load of the file orders entries): at
        the end, unless it was committed into a session that replaced its own meanwhile (an
        import whose ids came after it)."""
        if not s.entries or s.entries[-1].id < e.id:
            s.append(e)  # also moves updated_at
            return
        s.entries.insert(bisect.bisect_left([x.id for x in s.entries], e.id), e)
        s.by_id[e.id] = e
        s.meta.updated_at = max(s.meta.updated_at, e.created_at)
        s.recount()

    async def fold(self, s: Session, sm: Summary, entries: list[Entry]) -> None:
        """A compression: ``entries`` (all in the active set) fold into ``sm``; its row, the
        session's meta row and the entries' links commit together (the caller changed the
        meta's counters)."""
        for e in entries:
            e.summary_id = sm.id
        s.summaries[sm.id] = sm
        # the folded entries leave the active set: not a recount of the whole log per fold
        s.active_tokens -= sum(e.tokens for e in entries)
        s.active_count -= len(entries)
        await self.commit(s, [rows.summary_op(sm), rows.meta_op(s),
                              rows.fold_op(entries, sm.id)])

    async def save_entry(self, s: Session, e: Entry, extra: list[Op] | tuple[Op, ...] = ()
                         ) -> None:
        """An entry the caller changed in place (its pin), with ``extra`` rows (its audit)."""
        await self.commit(s, [rows.entry_op(e), *extra])

    async def save_meta(self, s: Session, extra: list[Op] | tuple[Op, ...] = ()) -> None:
        """The session's meta as the caller changed it (usage reports, counters)."""
        await self.commit(s, [rows.meta_op(s), *extra])

    async def remove_entry(self, s: Session, e: Entry, relinked: list[Summary], *,
                           meta: bool, extra: list[Op] | tuple[Op, ...] = ()) -> None:
        """Take ``e`` out of the log: its rows go, with the summaries that linked it
        (``relinked``, as the caller rewrote them), the meta row when ``meta`` and ``extra``
        (its audit row), in one transaction."""
        ops: list[Op] = [*rows.delete_entry_ops(e.id), *(rows.summary_op(sm) for sm in relinked)]
        if meta:
            ops.append(rows.meta_op(s))
        s.entries.remove(e)
        del s.by_id[e.id]
        s.recount()
        await self.commit(s, [*ops, *extra])

    async def clear(self, s: Session, meta: SessionMeta) -> None:
        """Empty the session's log (entries and summaries) and give it ``meta``. Memory
        changes after the commit, so an add committed before it is cleared in both places."""
        await self.commit(s, [*rows.clear_ops(s.id), rows.meta_op(Session(s.id, meta))],
                          heavy=True)
        s.meta = meta
        s.entries, s.summaries, s.by_id = [], {}, {}
        s.recount()
        self._reindex(s)

    async def replace(self, s: Session, existing: Session | None,
                      extra: list[Op] | tuple[Op, ...] = ()) -> None:
        """Put ``s`` (an import, with fresh ids) in the place of the session of that id.

        Its rows are written in batches of ``storage.batch_max_rows`` (built on a worker
        thread) under a staging name (``rows.STAGING``), so no one transaction or loop turn
        holds the whole import; then one transaction clears the old session and moves them in,
        with the meta row: all or nothing still. Memory changes after that commit."""
        s.meta.opened_at = self.clock.now()  # a new session under that id, whatever the file says
        batch = max(1, self.config.storage.batch_max_rows)
        entries, summaries = s.entries, list(s.summaries.values())
        staging = rows.STAGING + s.id
        try:
            await self.store.write(rows.drop_staged_ops(staging))
            for i in range(0, len(entries) + len(summaries), batch):
                part_e = entries[i:i + batch]
                part_s = summaries[max(0, i - len(entries)):max(0, i + batch - len(entries))]
                ops = await asyncio.to_thread(rows.staged_ops, s.id, part_e, part_s)
                await self.store.write(ops)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self.store.write(rows.drop_staged_ops(staging))
            if isinstance(exc, MemmanError):
                raise
            raise StoreError(f"the import could not be stored ({type(exc).__name__}: {exc}); "
                             "nothing was changed") from exc
        await self.commit(existing or s, [*rows.clear_ops(s.id), *rows.unstage_ops(s.id),
                                          rows.meta_op(s), *extra], heavy=True)
        self.by_id[s.id] = s
        self._reindex(s)

    async def delete(self, session_id: str, client: str = "") -> int:
        """Remove the session and what other components hold for it (``on_deleted``, in
        order); ``client`` names who asked (for the audit log)."""
        s = self.get(session_id)
        # memory changes after the commit (as every change does): an add committed before the
        # delete goes with it, one committed after it finds no session and is taken out
        await self.commit(s, rows.delete_ops(session_id), heavy=len(s.entries) > 500)
        if self.by_id.get(session_id) is s:
            del self.by_id[session_id]
        for reset in self.on_reset:
            reset(session_id)
        for hook in self.on_deleted:
            await hook(session_id, client)
        self.events.publish("session", "deleted", {}, **self.scope(s))
        return len(s.entries)

    def _reindex(self, s: Session) -> None:
        for reset in self.on_reset:
            reset(s.id)
        for hook in self.on_appended:
            hook(s, s.entries)

    @staticmethod
    def scope(s: Session) -> dict[str, str]:
        return {"session_id": s.id, "user_id": s.meta.user_id, "tenant_id": s.meta.tenant_id}


def _entry_added(e: Entry, s: Session) -> Callable[[], dict[str, Any]]:
    """The data of an ``entry_added`` event, built only if someone listens (each entry's
    own: a function of its own, not a lambda reading the loop's variable)."""
    return lambda: {"entry": e.to_wire(), "session": s.overview()}


def normalize_call(c: dict[str, Any]) -> dict[str, Any]:
    """Shape a tool call as the chat API wants it: {id, type: function, function: {name, arguments}}."""
    fn = c.get("function") or {}  # a map when present (the schema checked it)
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):
        args = json.dumps(args, separators=(",", ":"), ensure_ascii=False)
    return {"id": c["id"], "type": "function",
            "function": {"name": str(fn.get("name", c.get("name", ""))), "arguments": args}}


class LoadError(Exception):
    """A row of the database cannot be loaded; the message names it and what to do."""


class _row:  # noqa: N801 - used as ``with _row(...)``
    """Turn any error while reading one row into a LoadError naming the file, table and row."""

    def __init__(self, store: Any, table: str, key: Any) -> None:
        self.store, self.table, self.key = store, table, key

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is None or not isinstance(exc, Exception):
            return False
        raise LoadError(
            f"cannot load {self.store.path}: row {self.key!r} of table {self.table} is damaged "
            f"({type(exc).__name__}: {exc}). Nothing was changed. Stop here and recover: move "
            f"{self.store.path} aside (the daemon then starts empty) and restore it from a "
            "backup, or delete that row with the sqlite3 shell; docs/operations.md (\"A damaged "
            "database\") has the steps") from exc
