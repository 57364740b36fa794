"""Sessions: the in-memory map of Session objects and their durable record.

Every mutation follows one pattern: build the rows that change, ``await`` their commit, change
the in-memory objects (or, where the objects are changed first, ``persist(...)`` reloads the
session from SQLite when the commit fails), then publish an event — so memory never claims
what the disk does not hold.
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any

from memman.errors import STORAGE_ERROR, MemmanError, invalid_params, not_found
from memman_daemon.model import ENTRY_TYPES, ROLES, Entry, Session, SessionMeta, Summary
from memman_daemon.params import INT64_MAX
from memman_daemon.store import Op, StoreError

if TYPE_CHECKING:
    from memman_daemon.core import Core

# entry type -> role used when the caller names none
_DEFAULT_ROLE = {"message": "user", "tool_call": "assistant", "tool_result": "tool",
                 "context": "system", "summary": "system"}


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class Sessions:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.by_id: dict[str, Session] = {}
        self._ids = itertools.count(1)

    # --- ids and persistence helpers ------------------------------------------------------
    def next_id(self) -> int:
        """A new id for an entry or summary (unique across the daemon)."""
        i = next(self._ids)
        if i > INT64_MAX:
            raise MemmanError(STORAGE_ERROR, "entry ids are exhausted (the database already "
                              f"holds id {INT64_MAX}); export the sessions and import them into "
                              "a fresh data dir, where they get new ids")
        return i

    @staticmethod
    def entry_op(e: Entry) -> Op:
        return ("INSERT OR REPLACE INTO entries(id, session_id, data) VALUES (?,?,?)",
                (e.id, e.session_id, _dumps(e.to_wire())))

    @staticmethod
    def summary_op(s: Summary) -> Op:
        return ("INSERT OR REPLACE INTO summaries(id, session_id, data) VALUES (?,?,?)",
                (s.id, s.session_id, _dumps(s.to_wire())))

    @staticmethod
    def meta_op(s: Session) -> Op:
        return ("INSERT OR REPLACE INTO sessions(id, meta) VALUES (?,?)",
                (s.id, _dumps(s.meta.to_wire())))

    async def persist(self, session: Session, ops: list[Op]) -> None:
        """Commit ``ops``; on failure restore ``session`` from disk and re-raise (as -32003)."""
        try:
            await self.core.store.write(ops)
        except Exception as exc:
            await self.reload(session.id)
            if isinstance(exc, MemmanError):
                raise
            raise StoreError(f"the change could not be stored ({type(exc).__name__}: {exc}); "
                             "nothing was changed") from exc

    # --- load ----------------------------------------------------------------------------
    async def load(self) -> None:
        """Read every session; a row that cannot be read stops the start (``LoadError`` names
        the file, the table, the row and what to do) instead of serving half the data."""
        store = self.core.store
        self.by_id.clear()
        for row in await store.fetchall("SELECT id, meta FROM sessions"):
            with _row(store, "sessions", row[0]):
                self.by_id[row[0]] = Session(row[0], SessionMeta.from_wire(json.loads(row[1])))
        max_id = 0
        for row in await store.fetchall("SELECT id, data FROM entries ORDER BY id"):
            with _row(store, "entries", row[0]):
                e = Entry.from_wire(json.loads(row[1]))
                if not isinstance(e.id, int) or not isinstance(e.tokens, int):
                    raise ValueError("id and tokens must be integers")
                if s := self.by_id.get(e.session_id):
                    s.append(e)
            max_id = max(max_id, e.id)
        for row in await store.fetchall("SELECT id, data FROM summaries ORDER BY id"):
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

    async def reload(self, session_id: str) -> None:
        store = self.core.store
        rows = await store.fetchall("SELECT meta FROM sessions WHERE id=?", (session_id,))
        if not rows:
            self.by_id.pop(session_id, None)
            return
        s = Session(session_id, SessionMeta.from_wire(json.loads(rows[0][0])))
        for row in await store.fetchall("SELECT data FROM entries WHERE session_id=? ORDER BY id",
                                        (session_id,)):
            s.append(Entry.from_wire(json.loads(row[0])))
        for row in await store.fetchall("SELECT data FROM summaries WHERE session_id=? ORDER BY id",
                                        (session_id,)):
            sm = Summary.from_wire(json.loads(row[0]))
            s.summaries[sm.id] = sm
        s.recount()
        self.by_id[session_id] = s

    # --- queries -------------------------------------------------------------------------
    def get(self, session_id: str) -> Session:
        try:
            return self.by_id[session_id]
        except KeyError:
            raise not_found("session", session_id) from None

    # --- mutations -----------------------------------------------------------------------
    async def open(self, session_id: str, opts: dict[str, Any]) -> tuple[Session, bool]:
        """Create the session if it does not exist; returns (session, created)."""
        if not session_id:
            raise invalid_params("session_id", "must not be empty")
        known = {"user_id", "tenant_id", "model", "max_tokens"}
        for k in opts:
            if k not in known:
                raise invalid_params(f"opts.{k}", f"unknown option; known: {', '.join(sorted(known))}")
        for k in ("user_id", "tenant_id", "model"):
            if k in opts and not isinstance(opts[k], str):
                raise invalid_params(f"opts.{k}", "expected a string")
        if "max_tokens" in opts and (not isinstance(opts["max_tokens"], int) or opts["max_tokens"] <= 0):
            raise invalid_params("opts.max_tokens", "expected a positive integer")
        existing = self.by_id.get(session_id)
        if existing is not None:
            changed = {k: v for k, v in opts.items() if getattr(existing.meta, k) != v}
            if changed:
                for k, v in changed.items():
                    setattr(existing.meta, k, v)
                existing.meta.updated_at = self.core.clock.now()
                await self.persist(existing, [self.meta_op(existing)])
            return existing, False
        now = self.core.clock.now()
        meta = SessionMeta(created_at=now, updated_at=now,
                           max_tokens=self.core.config.context.max_tokens)
        for k, v in opts.items():
            setattr(meta, k, v)
        s = Session(session_id, meta)
        self.by_id[session_id] = s
        try:
            await self.core.store.write([self.meta_op(s)])
        except StoreError:
            self.by_id.pop(session_id, None)
            raise
        self.core.events.publish("session", "opened", {"session": s.overview()}, **self.scope(s))
        return s, True

    def build_entry(self, session: Session, raw: dict[str, Any]) -> Entry:
        """Validate an entry map from a client and count its tokens (once, here)."""
        if not isinstance(raw, dict):
            raise invalid_params("entry", "expected a map")
        etype = raw.get("type", "message")
        if etype not in ENTRY_TYPES:
            raise invalid_params("entry.type", f"must be one of {', '.join(ENTRY_TYPES)}; got {etype!r}")
        role = raw.get("role") or _DEFAULT_ROLE[etype]
        if role not in ROLES:
            raise invalid_params("entry.role", f"must be one of {', '.join(ROLES)}; got {role!r}")
        content = raw.get("content", "")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise invalid_params("entry.content", "expected a string")
        for k in ("name", "tool_call_id"):
            if raw.get(k) is not None and not isinstance(raw[k], str):
                raise invalid_params(f"entry.{k}", "expected a string")
        tool_calls = raw.get("tool_calls")
        if tool_calls is not None:
            if not isinstance(tool_calls, list) or not all(
                    isinstance(c, dict) and isinstance(c.get("id"), str) for c in tool_calls):
                raise invalid_params("entry.tool_calls", "expected an array of maps each with an 'id'")
            tool_calls = [_normalize_call(c) for c in tool_calls]
        if role == "tool" and not raw.get("tool_call_id"):
            raise invalid_params("entry.tool_call_id", "a tool result needs the id of the call it answers")
        metadata = raw.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise invalid_params("entry.metadata", "expected a map")
        e = Entry(id=0, session_id=session.id, type=etype, role=role, content=content, tokens=0,
                  created_at=self.core.clock.now(), name=raw.get("name"),
                  tool_call_id=raw.get("tool_call_id"), tool_calls=tool_calls, metadata=metadata,
                  pinned=bool(raw.get("pinned", False)))
        e.tokens = self.core.tokens.count_message(e.chat_message(), session.meta.model)
        return e

    async def add(self, session_id: str, raw: dict[str, Any]) -> Entry:
        s = self.get(session_id)
        e = self.build_entry(s, raw)
        e.id = self.next_id()
        # only the entry row (updated_at is re-derived at load), so that concurrent adds are
        # runs of one statement: one executemany per group commit. Memory changes after the
        # commit: a refused write leaves nothing behind.
        await self.core.store.write([self.entry_op(e)])
        s.append(e)  # also moves updated_at
        if e.content:  # relevance vectors: embedded later, in batches, off this path
            self.core.embedder.prefetch(e.content)
        self.core.events.publish("session", "entry_added",
                                 lambda: {"entry": e.to_wire(), "session": s.overview()},
                                 **self.scope(s))
        return e

    async def delete(self, session_id: str, client: str = "") -> int:
        """Remove the session and, through their ``on_session_deleted`` hooks, what other
        components hold for it; ``client`` names who asked (for the audit log)."""
        s = self.get(session_id)
        del self.by_id[session_id]
        try:
            await self.core.store.write([
                ("DELETE FROM entries WHERE session_id=?", (session_id,)),
                ("DELETE FROM summaries WHERE session_id=?", (session_id,)),
                ("DELETE FROM sessions WHERE id=?", (session_id,)),
            ])
        except StoreError:
            self.by_id[session_id] = s
            raise
        # what other components hold for the session (cache, scratchpad) goes with it
        for component in self.core.components:
            hook = getattr(component, "on_session_deleted", None)
            if hook is not None:
                await hook(session_id, client)
        self.core.events.publish("session", "deleted", {}, **self.scope(s))
        return len(s.entries)

    @staticmethod
    def scope(s: Session) -> dict[str, str]:
        return {"session_id": s.id, "user_id": s.meta.user_id, "tenant_id": s.meta.tenant_id}


def _normalize_call(c: dict[str, Any]) -> dict[str, Any]:
    """Shape a tool call as the chat API wants it: {id, type: function, function: {name, arguments}}."""
    fn = c.get("function") or {}
    if not isinstance(fn, dict):
        raise MemmanError(-32602, "invalid parameter 'entry.tool_calls': 'function' must be a map")
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):
        args = _dumps(args)
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

    def __exit__(self, typ: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        raise LoadError(
            f"cannot load {self.store.path}: row {self.key!r} of table {self.table} is damaged "
            f"({type(exc).__name__}: {exc}). Nothing was changed. Stop here and recover: move "
            f"{self.store.path} aside (the daemon then starts empty) and restore it from a "
            "backup, or delete that row with the sqlite3 shell; docs/operations.md (\"A damaged "
            "database\") has the steps") from exc
