"""The SQL of the session log's tables: ``sessions`` (one meta row per session), ``entries``
and ``summaries``. The rows to write, as ops for ``Store.write``, and the reads at load and
after a failed commit. ``Sessions`` (memman_daemon/sessions.py) is the only caller."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import orjson

from memman_daemon.model import Entry, Session, SessionMeta, Summary
from memman_daemon.storage.sqlite import recall
from memman_daemon.storage.sqlite.store import Op, Store


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def decode(data: str) -> Any:
    """A row's JSON (a start decodes every entry): orjson, or the standard decoder for what
    orjson refuses and ``_dumps`` can write (NaN, a lone surrogate)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def entry_op(e: Entry) -> Op:
    return ("INSERT OR REPLACE INTO entries(id, session_id, data) VALUES (?,?,?)",
            (e.id, e.session_id, _dumps(e.to_wire())))


def fold_op(entries: list[Entry], summary_id: int) -> Op:
    """The entries' rows now point at their summary: one statement, the JSON edited by SQLite
    (rewriting each row from Python cost ~10 µs an entry on the event loop)."""
    return ("UPDATE entries SET data = json_set(data, '$.summary_id', ?) "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (summary_id, _dumps([e.id for e in entries])))


def summary_op(s: Summary) -> Op:
    return ("INSERT OR REPLACE INTO summaries(id, session_id, data) VALUES (?,?,?)",
            (s.id, s.session_id, _dumps(s.to_wire())))


def meta_op(s: Session) -> Op:
    return ("INSERT OR REPLACE INTO sessions(id, meta) VALUES (?,?)",
            (s.id, _dumps(s.meta.to_wire())))


def delete_entry_ops(entry_id: int) -> list[Op]:
    """The entry, and its vector in the recall index."""
    return [("DELETE FROM entries WHERE id=?", (entry_id,)), *recall.delete_entry_ops(entry_id)]


#: an import's rows wait under this session column until the last transaction moves them to
#: their session: no session id holds a NUL, and rows left by an import that never finished are
#: skipped at load and dropped at the next start (unless it is read-only)
STAGING = "\x00import\x00"


def staged_ops(session_id: str, entries: list[Entry], summaries: list[Summary]) -> list[Op]:
    """Rows of an import being written in batches (their JSON already names their session)."""
    staging = STAGING + session_id
    return [*(("INSERT OR REPLACE INTO entries(id, session_id, data) VALUES (?,?,?)",
               (e.id, staging, _dumps(e.to_wire()))) for e in entries),
            *(("INSERT OR REPLACE INTO summaries(id, session_id, data) VALUES (?,?,?)",
               (s.id, staging, _dumps(s.to_wire()))) for s in summaries)]


def unstage_ops(session_id: str) -> list[Op]:
    """Move an import's staged rows to their session (in the transaction that clears it)."""
    staging = STAGING + session_id
    return [("UPDATE entries SET session_id=? WHERE session_id=?", (session_id, staging)),
            ("UPDATE summaries SET session_id=? WHERE session_id=?", (session_id, staging))]


def drop_staged_ops(column: str) -> list[Op]:
    """The rows of an import that did not finish (``column``: their session column)."""
    return [("DELETE FROM entries WHERE session_id=?", (column,)),
            ("DELETE FROM summaries WHERE session_id=?", (column,))]


def clear_ops(session_id: str) -> list[Op]:
    """Every entry and summary of the session, and what recall kept of them (its meta row
    stays)."""
    return [("DELETE FROM entries WHERE session_id=?", (session_id,)),
            ("DELETE FROM summaries WHERE session_id=?", (session_id,)),
            *recall.clear_ops(session_id)]


def delete_ops(session_id: str) -> list[Op]:
    """The session and all it logged (its recall exclusions too)."""
    return [*clear_ops(session_id), *recall.delete_session_ops(session_id),
            ("DELETE FROM sessions WHERE id=?", (session_id,)),
            ("DELETE FROM recall_exclusions WHERE session_id=?", (session_id,))]


async def all_sessions(store: Store) -> list[sqlite3.Row]:
    return await store.fetchall("SELECT id, meta FROM sessions")


async def any_entries(store: Store) -> bool:
    return bool(await store.fetchall("SELECT 1 FROM entries LIMIT 1"))


async def all_entries(store: Store) -> list[sqlite3.Row]:
    return await store.fetchall("SELECT id, data, session_id FROM entries ORDER BY id")


async def all_summaries(store: Store) -> list[sqlite3.Row]:
    return await store.fetchall("SELECT id, data, session_id FROM summaries ORDER BY id")


async def read_session(store: Store, session_id: str) -> Session | None:
    """The session as the disk holds it, or None when it has no row."""
    rows = await store.fetchall("SELECT meta FROM sessions WHERE id=?", (session_id,))
    if not rows:
        return None
    s = Session(session_id, SessionMeta.from_wire(json.loads(rows[0][0])))
    for row in await store.fetchall("SELECT data FROM entries WHERE session_id=? ORDER BY id",
                                    (session_id,)):
        s.append(Entry.from_wire(decode(row[0])))
    for row in await store.fetchall("SELECT data FROM summaries WHERE session_id=? ORDER BY id",
                                    (session_id,)):
        sm = Summary.from_wire(json.loads(row[0]))
        s.summaries[sm.id] = sm
    s.recount()
    return s
