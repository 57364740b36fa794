"""Operations for the shared store, and writing a mix of shared and local operations.

Tier code hands ``store.write()`` lists of ``(sql, params)`` operations for the local SQLite
file. An operation for the shared store is a ``PgOp`` instead (the shared audit log returns
them). With the SQLite backend there are none and everything is one local transaction; with
PostgreSQL, ``write_mixed`` commits the shared part first (the record of the change), then the
local part (a snippet's "promoted" mark, say). If the local write then fails, the shared change
stands and the caller gets -32003 for the local part.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from memman_daemon.storage.sqlite.store import ConstraintError, Op

if TYPE_CHECKING:
    from memman_daemon.storage.sqlite.store import Store


@dataclass(frozen=True)
class PgOp:
    """One statement for the shared store (``$1``-style parameters)."""

    sql: str
    args: tuple[Any, ...]
    #: the rows the statement must touch; another number means another writer changed them
    #: meanwhile: the transaction is rolled back with ``ConstraintError`` (look again, retry)
    expect: int | None = None


def split(ops: Iterable[Any]) -> tuple[list[PgOp], list[Op]]:
    shared: list[PgOp] = []
    local: list[Op] = []
    for op in ops:
        (shared if isinstance(op, PgOp) else local).append(op)
    return shared, local


async def execute(conn: Any, ops: list[PgOp]) -> None:
    for op in ops:
        status = await conn.execute(op.sql, *op.args)
        if op.expect is not None and int(status.rsplit(" ", 1)[-1]) != op.expect:
            raise ConstraintError(f"another writer got there first ({status})")


async def write_mixed(shared_store: Any, store: Store, ops: Iterable[Any]) -> None:
    """Commit the shared operations in ``shared_store`` (a ``PgStore``; one transaction),
    then the local ones in ``store``."""
    shared, local = split(ops)
    if shared:
        try:
            await shared_store.run(lambda conn: execute(conn, shared))
        except asyncpg.UniqueViolationError as exc:  # the same signal as SQLite's
            raise ConstraintError(f"another writer got there first: {exc}") from exc
    if local:
        await store.write(local)
