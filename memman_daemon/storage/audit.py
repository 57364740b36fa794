"""The audit group's interface: one row per audited action (``AuditRecord``), appended in the
same transaction as the change it describes. ``storage/sqlite/audit.py`` keeps it in the
local file (session tiers always; the shared tiers too without PostgreSQL);
``storage/postgres/audit.py`` in the shared store, with the daemon that wrote each row.
``tiers/audit.py`` (``AuditLog``) is written once over it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

#: the columns in the order ``AuditRecord`` takes them (``data`` as JSON text last)
COLUMNS = "id, at, action, what, source, target, client, session_id, user_id, tenant_id, data"


@dataclass
class AuditRecord:
    """One audited action."""

    id: int
    at: float  #: unix seconds
    action: str  #: promote, evict, expire, replace, ...
    what: str  #: the text or cache call the action moved or removed
    source: str  #: where it came from, e.g. "scratchpad:s1#7" or "cache:s1/<key>"
    target: str  #: where it went, e.g. "preference:theme", "agent.md:acme" or "-" for an eviction
    client: str  #: the connection's client name
    session_id: str | None = None
    user_id: str | None = None
    tenant_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)  #: reason, previous value, ...

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    def row(self) -> tuple[Any, ...]:
        """Every column, in ``COLUMNS`` order (``data`` as JSON text)."""
        return (self.id, self.at, self.action, self.what, self.source, self.target,
                self.client, self.session_id, self.user_id, self.tenant_id,
                json.dumps(self.data, ensure_ascii=False, default=str))

    @classmethod
    def new(cls, id: int, at: float, action: str, what: str, source: str, target: str,
            client: str, session_id: str | None, user_id: str | None, tenant_id: str | None,
            data: dict[str, Any]) -> AuditRecord:
        """A new record: ``what`` cut to 2000 characters, an unnamed client as "-"."""
        return cls(id, at, action, what[:2000], source, target, client or "-", session_id,
                   user_id, tenant_id, data)

    @classmethod
    def from_row(cls, r: Any) -> AuditRecord:
        """From a row of the audit table (either store): ``data`` is its JSON text."""
        # the ten columns before ``data`` by position (a checker cannot count a slice's
        # items, so ``data`` is set apart rather than passed by name after them)
        rec = cls(*r[:10])
        rec.data = json.loads(r[10])
        return rec


def select_newest(filt: dict[str, Any], mark: Callable[[int], str]) -> tuple[str, list[Any]]:
    """The query of ``memman_audit_list`` and its parameters, newest first. ``filt``:
    session_id, user_id, tenant_id, action, before_id, limit. ``mark(n)`` is the n-th
    parameter's placeholder (``?`` or ``$n``: both audit tables have these columns)."""
    where: list[str] = []
    params: list[Any] = []
    for k in ("session_id", "user_id", "tenant_id", "action"):
        if filt.get(k) is not None:
            params.append(filt[k])
            where.append(f"{k}={mark(len(params))}")
    if filt.get("before_id") is not None:
        params.append(int(filt["before_id"]))
        where.append(f"id<{mark(len(params))}")
    sql = f"SELECT {COLUMNS} FROM audit"
    if where:
        sql += " WHERE " + " AND ".join(where)
    params.append(int(filt.get("limit") or 100))
    return sql + f" ORDER BY id DESC LIMIT {mark(len(params))}", params


def select_promotion(client: str, session_id: str | None, after: float | None,
                     mark: Callable[[int], str]) -> tuple[str, list[Any]]:
    """The query of a client's newest promotion (of one session) made at or after ``after``."""
    params: list[Any] = [client, after if after is not None else float("-inf")]
    where = f"client={mark(1)} AND action='promote' AND at >= {mark(2)}"
    if session_id is not None:
        params.append(session_id)
        where += f" AND session_id={mark(3)}"
    return (f"SELECT {COLUMNS} FROM audit WHERE {where} ORDER BY at DESC, id DESC LIMIT 1",
            params)


class AuditStore(Protocol):
    @property
    def host(self) -> str | None:
        """The daemon written into each row (``data.host``); None locally."""

    async def load(self) -> None:
        """Ready to hand out ids."""

    async def ensure_ids(self, n: int) -> None:
        """At least ``n`` ids ready for ``take_id`` (call it before ``record``)."""

    def take_id(self) -> int: ...

    def insert_op(self, rec: AuditRecord) -> Any: ...

    async def newest(self, filt: dict[str, Any]) -> list[AuditRecord]:
        """``select_newest``'s rows."""

    async def newest_promotion(self, client: str, session_id: str | None,
                               after: float | None) -> AuditRecord | None: ...
