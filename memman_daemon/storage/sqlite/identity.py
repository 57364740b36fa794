"""The store's identity: ``store_identity``, written once by the migration that made it.

``origin``: this store among the daemons of a shared store (the key of its rows in the shared
``recall_rows``). It lives in the SQLite file, so it goes wherever the sessions go: a data dir
moved to another path or host, or a host renamed, is the same origin; a copy of the file
claims the same origin as its original (``storage/postgres/recall.py`` refuses to publish while
another running daemon holds it)."""

from __future__ import annotations

import sqlite3

from memman_daemon.storage.sqlite.store import Store


async def origin(store: Store) -> str:
    """This store's origin id ('' when the file predates it and could not be migrated, as in
    a read-only start)."""
    try:
        rows = await store.fetchall("SELECT value FROM store_identity WHERE key='origin'")
    except sqlite3.OperationalError:  # no such table: a file this daemon may not migrate
        return ""
    return str(rows[0][0]) if rows else ""
