"""Ask the one retriever (``recall/index.py``) what the question needs: this session's units
best first, and the related entries of the user's other sessions.

A past session's entry is offered only when it is related (a shared informative word or a
cosine at the model's similarity threshold), not private, not excluded by this session, and
its session takes part in recall.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.engine.window.candidates import Recalled
from memman_daemon.engine.window.timeline import Timeline
from memman_daemon.model import Session

if TYPE_CHECKING:
    from memman_daemon.recall.index import RecallIndex


@dataclass
class Retrieval:
    query: str
    query_id: int | None  #: the log entry that is the question (when taken from the log)
    units: list[int] = field(default_factory=list)  #: this session's units, best first
    unit_parts: dict[int, dict[str, Any]] = field(default_factory=dict)  #: unit -> parts
    unit_score: dict[int, float] = field(default_factory=dict)
    recalled: list[Recalled] = field(default_factory=list)  #: best first
    stand_ins: int = 0  #: hits ranked by the static model while their vector is pending
    pending: int = 0  #: entries of the corpus still waiting for their vector


def question(s: Session, query: str) -> tuple[str, int | None]:
    """What the window is retrieved for: the given query, else the newest user message."""
    if query:
        return query, None
    for e in reversed(s.entries[-200:]):
        if e.role == "user" and e.type == "message" and e.content:
            return e.content, e.id
    return "", None


async def retrieve(index: RecallIndex | None, s: Session, tl: Timeline, query: str,
                   query_id: int | None, *, recall: bool, max_items: int,
                   sessions: dict[str, Session]) -> Retrieval:
    out = Retrieval(query, query_id)
    if index is None or not query or not s.entries:
        return out
    c = index.corpus_of(s)
    hits = index.retrieve(c, query, await index.query_vectors(query))
    out.pending = hits.pending
    mine = c.of_session(s.id)
    rank = 0
    for row in hits.order(mine):
        eid = c.eids[row]
        if eid == query_id:
            continue
        u = tl.entry_unit.get(eid)
        if u is None or u.index in out.unit_parts:
            continue
        rank += 1
        out.units.append(u.index)
        out.unit_parts[u.index] = {"rank": rank, **hits.parts(row)}
        out.unit_score[u.index] = float(hits.fused[row])
        out.stand_ins += bool(hits.stand_in[row])
    if not recall or index.config.recall.scope == "off" or s.meta.recall is False:
        return out
    others = ~mine & c.alive()
    priv = np.frombuffer(c.private, dtype=np.int8, count=c.n) != 0
    others &= ~priv
    excluded = index.excluded.get(s.id, set())
    for row in hits.order(others):
        if len(out.recalled) >= max_items:
            break
        if not hits.related(row):
            continue
        eid, sid = c.eids[row], c.sids[row]
        src = sessions.get(sid)
        if src is None or src.meta.recall is False or eid in excluded:
            continue
        e = src.by_id.get(eid)
        if e is None:
            continue
        out.recalled.append(Recalled(e, sid, row, float(hits.fused[row]), hits.parts(row)))
        out.stand_ins += bool(hits.stand_in[row])
    return out
