"""Export and import of a whole session (the compression design's exportSession / importSession).

An export is a plain map: the session meta (rolling summary, exchanges, cycle, usage), every
entry (compressed ones included), every summary, the summary -> entries links and stats.

An import is checked whole against ``memman.schemas.EXPORT`` (memman_session_import's declared
``data``: every field's type and range, with the path of
the first bad value, e.g. ``data.entries[3].id``) and for consistency (no duplicate ids, links
only to entries and summaries in the same file) before anything changes; then every entry and
summary gets a fresh id from the daemon's sequence (same order, links rewritten) — ids in a
file are never trusted — and the whole session is written in one transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memman.errors import LIMIT_EXCEEDED, MemmanError, invalid_params
from memman.schemas import FORMAT
from memman_daemon.engine import usage
from memman_daemon.model import (
    Cycle,
    Entry,
    Exchange,
    Session,
    SessionMeta,
    Summary,
)
from memman_daemon.sessions import normalize_call

if TYPE_CHECKING:
    from memman.config import LimitsConfig
    from memman_daemon.sessions import Sessions


def export(s: Session, entries: list[Entry] | None = None) -> dict[str, Any]:
    """The export map; ``entries`` narrows it to one page of the entry log (summaries and links
    stay whole: they are small)."""
    m = s.meta.to_wire()
    return {
        "format": FORMAT,
        "session_id": s.id,
        "meta": m,
        "entries": [e.to_wire() for e in (s.entries if entries is None else entries)],
        "summaries": [sm.to_wire() for sm in sorted(s.summaries.values(), key=lambda x: x.id)],
        "links": [{"summary_id": sm.id, "entry_ids": list(sm.entry_ids)}
                  for sm in sorted(s.summaries.values(), key=lambda x: x.id)],
        "exchanges": m["exchanges"],
        "cycle": m["cycle"],
        "stats": {**s.overview(), "usage": usage.stats(s.meta)},
    }


def check_count(data: Any, limits: LimitsConfig) -> None:
    """``[limits] import_max_entries`` on ``data`` as it arrived (before its schema is checked:
    counting is cheap, checking a million entries is not): -32004 naming the limit and how
    to raise it. Whatever is not a list here is left to the schema."""
    if not isinstance(data, dict):
        return
    n = sum(len(v) for v in (data.get("entries"), data.get("summaries"))
            if isinstance(v, (list, tuple)))
    if n > limits.import_max_entries:
        raise MemmanError(LIMIT_EXCEEDED, f"the import holds {n} entries and summaries, over "
                                          f"the {limits.import_max_entries} of "
                                          "limits.import_max_entries; split the file "
                                          "(memman_session_export pages a session with "
                                          "opts.after_id and opts.limit), or raise the limit: "
                                          "import_max_entries = N under [limits] in "
                                          "config.toml (read again when it changes)")


def check_limits(data: dict[str, Any], limits: LimitsConfig) -> None:
    """An import's own bound (``[limits] import_max_entries`` / ``import_max_bytes``), checked
    before anything is built: -32004 naming the limit."""
    check_count(data, limits)
    size = 0
    for raw in (*(data.get("entries") or []), *(data.get("summaries") or [])):
        size += len(raw.get("content", "").encode("utf-8", "surrogatepass"))
        if size > limits.import_max_bytes:
            raise MemmanError(LIMIT_EXCEEDED, "the import's text is over the "
                                              f"{limits.import_max_bytes} bytes of "
                                              "limits.import_max_bytes; split the file, or "
                                              "raise the limit: import_max_bytes = N under "
                                              "[limits] in config.toml (read again when it "
                                              "changes)")


async def parse_off_loop(data: dict[str, Any], session_id: str, sessions: Sessions) -> Session:
    """``parse`` on a worker thread (an import may hold 100,000 entries), with ids reserved
    here, on the loop, so that no other writer can take them meanwhile."""
    n = len(data.get("entries") or []) + len(data.get("summaries") or []) + 1
    ids = sessions.reserve_ids(n)
    return await asyncio.to_thread(parse, data, session_id, ids.__next__)


def parse(data: dict[str, Any], session_id: str, next_id: Callable[[], int]) -> Session:
    """Build the Session an export describes (``data`` already checked against ``memman.schemas.EXPORT``),
    with fresh ids from ``next_id``. Raises -32602 for an inconsistent file."""
    raw_meta = dict(data.get("meta") or {})
    raw_meta["exchanges"] = [Exchange(**x) for x in raw_meta.get("exchanges", [])]
    cyc = dict(raw_meta.get("cycle") or {})
    raw_meta["cycle"] = Cycle(**cyc)
    meta = SessionMeta(**raw_meta)
    entries_raw = data.get("entries") or []
    summaries_raw = data.get("summaries") or []
    seen: dict[int, str] = {}
    for i, raw in enumerate(entries_raw):
        if raw["id"] in seen:
            raise invalid_params(f"data.entries[{i}].id", f"duplicate id {raw['id']} (also "
                                 f"{seen[raw['id']]})")
        seen[raw["id"]] = f"data.entries[{i}]"
    entry_ids = set(seen)
    for i, raw in enumerate(summaries_raw):
        if raw["id"] in seen:
            raise invalid_params(f"data.summaries[{i}].id", f"duplicate id {raw['id']} (also "
                                 f"{seen[raw['id']]})")
        seen[raw["id"]] = f"data.summaries[{i}]"
        for j, eid in enumerate(raw["entry_ids"]):
            if eid not in entry_ids:
                raise invalid_params(f"data.summaries[{i}].entry_ids[{j}]",
                                     f"links to entry {eid}, which is not in the file")
    summary_ids = set(seen) - entry_ids
    for i, raw in enumerate(entries_raw):
        sid = raw.get("summary_id")
        if sid is not None and sid not in summary_ids:
            raise invalid_params(f"data.entries[{i}].summary_id",
                                 f"links to summary {sid}, which is not in the file")
        if raw["role"] == "tool" and not raw.get("tool_call_id"):
            raise invalid_params(f"data.entries[{i}].tool_call_id",
                                 "a tool result needs the id of the call it answers")
    for i, link in enumerate(data.get("links") or []):
        if "summary_id" in link and link["summary_id"] not in summary_ids:
            raise invalid_params(f"data.links[{i}].summary_id",
                                 f"links summary {link['summary_id']}, which is not in the file")
        for j, eid in enumerate(link.get("entry_ids") or []):
            if eid not in entry_ids:
                raise invalid_params(f"data.links[{i}].entry_ids[{j}]",
                                     f"links to entry {eid}, which is not in the file")
    # fresh ids, in the file's id order, so that the log keeps its order
    mapping = {old: next_id() for old in sorted(seen)}
    s = Session(session_id, meta)
    for raw in sorted(entries_raw, key=lambda r: r["id"]):
        calls = raw.get("tool_calls")
        if calls is not None:  # shaped as session_add shapes them (the chat API's form)
            calls = [normalize_call(c) for c in calls]
        e = Entry.from_wire({**raw, "id": mapping[raw["id"]], "session_id": session_id,
                             "metadata": raw.get("metadata") or {}, "tool_calls": calls})
        if e.summary_id is not None:
            e.summary_id = mapping[e.summary_id]
        s.append(e)
    for raw in summaries_raw:
        sm = Summary.from_wire({**raw, "id": mapping[raw["id"]], "session_id": session_id,
                                "entry_ids": [mapping[i] for i in raw["entry_ids"]]})
        s.summaries[sm.id] = sm
    s.summaries = dict(sorted(s.summaries.items()))
    start = meta.cycle.start_id
    if start:
        later = [mapping[o] for o in sorted(seen) if o >= start]
        meta.cycle.start_id = min(later) if later else next_id()
    meta.cycle.agent_message_ids = [mapping[i] for i in meta.cycle.agent_message_ids
                                    if i in mapping]
    for x in meta.exchanges:  # the exchange's entries in the log, under their new ids
        x.first_id = mapping.get(x.first_id, 0)
        x.last_id = mapping.get(x.last_id, 0)
    s.recount()
    return s
