"""The usage series: how full each session was over time, kept by the daemon.

One point per context request (what the agent sent, and the whole active log, against the
session's budget), one per finalized exchange and one per compaction. The TUI draws them as a
sparkline per session and a chart on the session screen; a TUI started later reads the past
with ``memman_session_series``.

Points come from two places, neither of which is the context builder: the ``context`` handler
hands its answer to :meth:`UsageSeries.record_context`, and an event-bus tap sees
``cycle_finalized`` and ``compressed``. Each point is kept in memory (the newest
``context.series_points`` per session) and written to the ``usage_series`` table in the
background: the series is telemetry, so a point is never worth a commit on the agent's request
path (a kill -9 may lose the newest points, never a session's data).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from memman_daemon.component import Component
from memman_daemon.storage.sqlite import usage as usage_rows
from memman_daemon.storage.sqlite.store import Op, Store

if TYPE_CHECKING:
    from memman.config import Config
    from memman.types import ContextFigures
    from memman_daemon.clock import Clock
    from memman_daemon.engine.session_engine import SessionEngine
    from memman_daemon.events import EventBus
    from memman_daemon.model import Session
    from memman_daemon.sessions import Sessions

log = logging.getLogger(__name__)

#: the band lines the chart draws (shares of the budget); the thresholds' defaults
BANDS = (0.6, 0.8, 0.9, 1.0)


@dataclass
class SeriesPoint:
    """One moment of a session's usage. Tokens are counted as the chat API bills them."""

    id: int
    session_id: str
    at: float  #: unix seconds
    kind: str  #: context (a context request), exchange (finalize), compaction
    exchange: int  #: finalized Q&A cycles of the session at that moment
    sent_tokens: int | None  #: what the LLM receives (tool definitions included); None: unknown
    history_tokens: int  #: the whole active log
    budget: int  #: the session's budget (tokens)
    data: dict[str, Any] = field(default_factory=dict)  #: pruned, band, tokens_saved, ...

    def to_wire(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("data")
        d.update(self.data)
        b = self.budget or 1
        d["sent_usage"] = None if self.sent_tokens is None else round(self.sent_tokens / b, 4)
        d["history_usage"] = round(self.history_tokens / b, 4)
        return d

    def op(self) -> Op:
        return usage_rows.insert_op((self.id, self.session_id, self.at, self.kind, self.exchange,
                               self.sent_tokens, self.history_tokens, self.budget), self.data)


class UsageSeries(Component):
    stats_key = "series"

    def __init__(self, *, config: Config, clock: Clock, store: Store, events: EventBus,
                 sessions: Sessions, engine: SessionEngine) -> None:
        self.config, self.clock, self.store, self.events = config, clock, store, events
        self.sessions, self.engine = sessions, engine
        self.by_session: dict[str, deque[SeriesPoint]] = {}
        self.last_sent: dict[str, int] = {}  #: the newest context request's sent tokens
        self._next_id = 1
        self._tasks: set[asyncio.Task[Any]] = set()
        self.recorded = 0

    @property
    def keep(self) -> int:
        return max(1, int(self.config.context.series_points))

    async def load(self) -> None:
        self.by_session.clear()
        for r in await usage_rows.newest(self.store, self.keep):
            p = SeriesPoint(*r)
            self._keep(p)
            if p.sent_tokens is not None:
                self.last_sent[p.session_id] = p.sent_tokens
        self._next_id = await usage_rows.max_id(self.store) + 1
        self.events.taps.append(self._tap)

    async def close(self) -> None:
        if self._tap in self.events.taps:
            self.events.taps.remove(self._tap)
        if self._tasks:  # the last points reach the disk before the store closes
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {"recorded": self.recorded, "sessions": len(self.by_session)}

    async def on_session_deleted(self, session_id: str, client: str = "") -> None:
        self.by_session.pop(session_id, None)
        self.last_sent.pop(session_id, None)
        await self.store.write([usage_rows.delete_session_op(session_id)])

    # --- reads -------------------------------------------------------------------------
    def points(self, session_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        pts = list(self.by_session.get(session_id, ()))
        if limit is not None:
            pts = pts[-limit:] if limit > 0 else []
        return [p.to_wire() for p in pts]

    # --- recording ---------------------------------------------------------------------
    def _budget(self, s: Session) -> int:
        return self.engine.budget(s)

    def record_context(self, s: Session, answer: ContextFigures) -> None:
        """A context request's answer: what was sent and the whole history, as the daemon
        counted them (``tokens``, ``history_tokens``, ``budget``)."""
        sent, history, budget = (int(answer["tokens"]), int(answer["history_tokens"]),
                                 int(answer["budget"]))
        self.last_sent[s.id] = sent
        self._record(s, "context", sent, history, budget,
                     {"pruned": bool(answer.get("pruned")), "band": answer.get("band")})

    def _tap(self, topic: str, kind: str, data: Any, scope: dict[str, Any]) -> None:
        if topic != "session" or kind not in ("cycle_finalized", "compressed"):
            return
        s = self.sessions.by_id.get(scope.get("session_id") or "")
        if s is None:
            return
        extra: dict[str, Any] = {}
        if kind == "compressed":
            body = data() if callable(data) else (data or {})
            extra["tokens_saved"] = int(body.get("tokens_saved") or 0)
        self._record(s, "exchange" if kind == "cycle_finalized" else "compaction",
                     self.last_sent.get(s.id), self._history(s), self._budget(s), extra)

    def _history(self, s: Session) -> int:
        """The whole log as originals, as the context answer's ``history_tokens`` counts it
        (the builder's timeline, kept current as entries arrive)."""
        try:
            from memman_daemon.tokens import REPLY_PRIMING

            arr = self.engine.timelines.timeline(s).arr  # columns: no walk over the units
            return int(arr["tokens"][arr["invalid"] == 0].sum()) + REPLY_PRIMING
        except Exception:  # the builder's internals moved: the stored active tokens
            log.debug("history from the timeline failed", exc_info=True)
            return s.active_tokens

    def _record(self, s: Session, kind: str, sent: int | None, history: int, budget: int,
                data: dict[str, Any]) -> None:
        p = SeriesPoint(self._next_id, s.id, self.clock.now(), kind,
                        int(s.meta.counters.get("cycles", 0)), sent, history, budget, data)
        self._next_id += 1
        self.recorded += 1
        self._keep(p)
        self.events.publish("session", "series_point", {"point": p.to_wire()},
                                 session_id=s.id, user_id=s.meta.user_id,
                                 tenant_id=s.meta.tenant_id)
        ops: list[Op] = [p.op()]
        if p.id % 50 == 0:  # now and then, drop what is past the per-session limit
            ops.append(usage_rows.trim_op(s.id, self.keep))
        task = asyncio.get_running_loop().create_task(self._write(ops))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, ops: list[Op]) -> None:
        try:
            await self.store.write(ops)
        except Exception:  # telemetry: the session's own data is not at stake
            log.warning("a usage-series point was not stored", exc_info=True)

    def _keep(self, p: SeriesPoint) -> None:
        q = self.by_session.get(p.session_id)
        if q is None:
            q = self.by_session[p.session_id] = deque(maxlen=self.keep)
        q.append(p)
