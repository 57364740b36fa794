"""Export and import of a whole session (seed 004's exportSession / importSession).

An export is a plain map: the session meta (rolling summary, exchanges, cycle, usage), every
entry (compressed ones included), every summary, the summary -> entries links and stats.
Importing it and exporting again gives the identical map as long as the ids are free in the
daemon (they are kept); otherwise entries and summaries get fresh ids in the same order.
"""

from __future__ import annotations

from typing import Any

from memman.errors import invalid_params
from memman_daemon.engine import usage
from memman_daemon.model import ENTRY_TYPES, ROLES, Entry, Session, SessionMeta, Summary

FORMAT = "memman.session/1"


def export(s: Session) -> dict[str, Any]:
    m = s.meta.to_wire()
    return {
        "format": FORMAT,
        "session_id": s.id,
        "meta": m,
        "entries": [e.to_wire() for e in s.entries],
        "summaries": [sm.to_wire() for sm in sorted(s.summaries.values(), key=lambda x: x.id)],
        "links": [{"summary_id": sm.id, "entry_ids": list(sm.entry_ids)}
                  for sm in sorted(s.summaries.values(), key=lambda x: x.id)],
        "exchanges": m["exchanges"],
        "cycle": m["cycle"],
        "stats": {**s.overview(), "usage": usage.stats(s.meta)},
    }


def parse(data: Any, session_id: str) -> Session:
    """Validate an export map and build the Session it describes (ids as given)."""
    if not isinstance(data, dict):
        raise invalid_params("data", "expected a map produced by memman_session_export")
    if data.get("format", FORMAT) != FORMAT:
        raise invalid_params("data.format", f"expected {FORMAT!r}, got {data.get('format')!r}")
    try:
        meta = SessionMeta.from_wire(data.get("meta") or {})
    except TypeError as exc:
        raise invalid_params("data.meta", f"not a session meta map: {exc}") from None
    s = Session(session_id, meta)
    entries = data.get("entries") or []
    if not isinstance(entries, list):
        raise invalid_params("data.entries", "expected an array")
    for i, raw in enumerate(entries):
        if not isinstance(raw, dict):
            raise invalid_params(f"data.entries[{i}]", "expected a map")
        try:
            e = Entry.from_wire(raw)
        except TypeError as exc:
            raise invalid_params(f"data.entries[{i}]", f"missing fields: {exc}") from None
        if e.type not in ENTRY_TYPES or e.role not in ROLES or not isinstance(e.content, str):
            raise invalid_params(f"data.entries[{i}]", "bad type, role or content")
        if not isinstance(e.id, int) or not isinstance(e.tokens, int):
            raise invalid_params(f"data.entries[{i}]", "id and tokens must be integers")
        e.session_id = session_id
        s.append(e)
    for i, raw in enumerate(data.get("summaries") or []):
        try:
            sm = Summary.from_wire(raw)
        except TypeError as exc:
            raise invalid_params(f"data.summaries[{i}]", f"missing fields: {exc}") from None
        sm.session_id = session_id
        s.summaries[sm.id] = sm
    known = set(s.summaries)
    for e in s.entries:
        if e.summary_id is not None and e.summary_id not in known:
            raise invalid_params("data.entries", f"entry {e.id} links to missing summary {e.summary_id}")
    s.recount()
    return s


def remap_ids(s: Session, next_id) -> None:
    """Give every entry and summary a fresh id (same order), fixing the links."""
    mapping: dict[int, int] = {}
    items = sorted([(e.id, e) for e in s.entries] + [(sm.id, sm) for sm in s.summaries.values()],
                   key=lambda t: t[0])
    for old, _ in items:
        mapping[old] = next_id()
    for e in s.entries:
        e.id = mapping[e.id]
        if e.summary_id is not None:
            e.summary_id = mapping[e.summary_id]
    new_summaries = {}
    for sm in s.summaries.values():
        sm.id = mapping[sm.id]
        sm.entry_ids = [mapping.get(i, i) for i in sm.entry_ids]
        new_summaries[sm.id] = sm
    s.summaries = new_summaries
    s.by_id = {e.id: e for e in s.entries}
    start = s.meta.cycle.start_id
    if start:
        later = [mapping[o] for o, _ in items if o >= start]
        s.meta.cycle.start_id = min(later) if later else next_id()
