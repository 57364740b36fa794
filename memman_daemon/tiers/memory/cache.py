"""The read-through cache of user memory's keyed records (live preferences, rules and
playbooks), and the tier's counts for ``memman_stats``.

Over the local file (``MemoryRows.sole_writer``) the cache is the truth once loaded: every
user's keyed records are read at start and every change of this daemon is put in after it
commits, so reads never go to the file. Over a shared store other daemons write the same
rows: each read goes through to the store (the database decides races, so a change must see
the latest row) and leaves what it found here; another daemon's change event
(``invalidate``) drops a user's view, so what ``peek`` shows is never older than the events
that reached this daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from memman.errors import MemmanError
from memman_daemon.storage.memories import MemoryRecord, MemoryRows, dedup_key, dedup_of

#: a user's keyed records: (kind, dedup) -> record
UserKeyed = dict[tuple[str, str], MemoryRecord]


class KeyedCache:
    """The live keyed records, by user."""

    def __init__(self, rows: MemoryRows) -> None:
        self.rows = rows
        self.authoritative = rows.sole_writer
        self.users: dict[str, UserKeyed] = {}
        #: users whose view was dropped while the cache is authoritative: read again
        self._stale: set[str] = set()

    async def load(self) -> None:
        self.users.clear()
        self._stale.clear()
        if self.authoritative:
            for rec in await self.rows.keyed():
                self.put(rec)

    def _trusted(self, user_id: str) -> bool:
        return self.authoritative and user_id not in self._stale

    async def user(self, user_id: str) -> UserKeyed:
        """The user's keyed records (read through unless this cache is the truth)."""
        if not self._trusted(user_id):
            view: UserKeyed = {}
            for rec in await self.rows.keyed(user_id):
                view[(rec.kind, dedup_of(rec) or "")] = rec
            self.users[user_id] = view
            self._stale.discard(user_id)
        return self.users.get(user_id, {})

    async def key(self, user_id: str, kind: str, key: str | None,
                  metadata: dict[str, Any] | None = None) -> MemoryRecord | None:
        """The live record of ``kind`` with this key (a playbook: flow and query)."""
        dedup = dedup_key(kind, key, metadata or {}) or ""
        if self._trusted(user_id):
            return self.users.get(user_id, {}).get((kind, dedup))
        if self.authoritative:  # dropped: read the user again, then trust it
            return (await self.user(user_id)).get((kind, dedup))
        rec = await self.rows.live_key(user_id, kind, dedup)
        view = self.users.setdefault(user_id, {})
        view.pop((kind, dedup), None)
        if rec is not None:
            view[(kind, dedup)] = rec
        return rec

    def peek(self, user_id: str) -> list[MemoryRecord]:
        """What this daemon holds of the user now, without reading."""
        return list(self.users.get(user_id, {}).values())

    def put(self, rec: MemoryRecord) -> None:
        """A keyed record this daemon committed (or read)."""
        if rec.user_id in self._stale:
            return  # read again on next use
        self.users.setdefault(rec.user_id, {})[(rec.kind, dedup_of(rec) or "")] = rec

    def drop(self, rec: MemoryRecord) -> None:
        """A keyed record deleted or archived (only if it is the one held)."""
        view = self.users.get(rec.user_id, {})
        k = (rec.kind, dedup_of(rec) or "")
        if k in view and view[k].id == rec.id:
            del view[k]

    def invalidate(self, user_id: str) -> None:
        """Forget this daemon's view of the user: the next read goes to the store."""
        self.users.pop(user_id, None)
        if self.authoritative:
            self._stale.add(user_id)


class LatestCounts:
    """The tier's counts for ``stats`` (which is sync): each call answers what the last read
    found and starts the next read in the background."""

    def __init__(self, rows: MemoryRows) -> None:
        self.rows = rows
        self.counts: dict[str, int] = dict.fromkeys(
            ("users", "episodic", "preferences", "rules", "playbooks"), 0)
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        with contextlib.suppress(MemmanError):  # the store is down: the figures stay
            self.counts = await self.rows.counts()

    def current(self) -> dict[str, int]:
        reading = self._task
        if reading is None or reading.done():
            self._task = asyncio.get_running_loop().create_task(self.refresh())
        return dict(self.counts)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
