"""Protocol methods on one session's log: open, list, get, add, remove, pop, delete, inject,
and the context engine's cycle, context, preview, pin, expand, compact, export / import / clear,
usage report and usage series. Each handler checks its parameters and hands the change to
``Sessions`` / ``SessionEngine``; docs/protocol.md lists params, results and errors.
"""

from __future__ import annotations

from typing import Any

from memman import names
from memman.errors import CONFLICT, MemmanError, invalid_params
from memman_daemon.api.shapes import DURATION, MODEL, SESSION_ID, TOOL, TOOL_PARAMS, TTL
from memman_daemon.engine import portability, usage
from memman_daemon.engine.report import render_memory_state
from memman_daemon.engine.usage_series import BANDS
from memman_daemon.params import (
    COUNT,
    MAX_TOKENS,
    METADATA,
    ROW_ID,
    TOKENS,
    TOOL_CALL,
    Array,
    Bool,
    Id,
    Map,
    Nullable,
    Stored,
    Str,
)
from memman_daemon.rpc import Call, Param, method

ENTRY_IN = Map({
    "type": Str(choices=("message", "tool_call", "tool_result", "context", "summary")),
    "role": Nullable(Str(choices=("system", "user", "assistant", "tool"))),
    "content": Nullable(Str()),
    "name": Nullable(Str(max_bytes=1024)),
    "tool_call_id": Nullable(Str(max_bytes=1024)),
    "tool_calls": Nullable(Array(TOOL_CALL)),
    "metadata": Nullable(METADATA),
    "pinned": Bool(),
}, rest=Stored(), empty_array_ok=False)
#: context options; keys not declared here are left to the engine's own check
CONTEXT_OPTS = Map({"max_tokens": MAX_TOKENS, "model": MODEL},
                   rest=Stored())


@method(names.SESSION_OPEN, Param("session_id", SESSION_ID),
        Param("opts", Map({"user_id": Id(), "tenant_id": Id(), "model": MODEL,
                           "max_tokens": MAX_TOKENS, "recall": Bool(),
                           "reassign": Bool()}),
              default=dict), writes=True)
async def session_open(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Create a session (or return the existing one); opts: user_id, tenant_id, model,
    max_tokens, recall (false: this session neither recalls nor is recalled), reassign.

    An existing session keeps its owner: re-opening it with another ``user_id`` or
    ``tenant_id`` is refused (-32002, data ``{owner: {user_id, tenant_id}}``) unless
    ``opts.reassign`` is true; a reassignment is written to the audit log (action
    ``reassign``)."""
    opts = dict(opts)
    reassign = bool(opts.pop("reassign", False))
    existing = call.app.sessions.by_id.get(session_id)
    moved: dict[str, tuple[str, str]] = {}
    if existing is not None:
        moved = {k: (getattr(existing.meta, k), opts[k]) for k in ("user_id", "tenant_id")
                 if k in opts and opts[k] != getattr(existing.meta, k)}
        if moved and not reassign:
            raise owner_conflict(session_id, existing.meta.user_id, existing.meta.tenant_id,
                                 {k: new for k, (_, new) in moved.items()})
    s, created = await call.app.sessions.open(session_id, opts)
    out = {**s.overview(), "created": created}
    if moved:
        rec, op = call.app.audit.record(
            "reassign", ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in moved.items()),
            f"session:{s.id}", f"user:{s.meta.user_id}", call.client_name, session_id=s.id,
            user_id=s.meta.user_id, tenant_id=s.meta.tenant_id,
            previous={k: old for k, (old, _) in moved.items()})
        await call.app.store.write([op])
        out["audit_id"] = rec.id
    return out


def owner_conflict(session_id: str, user_id: str, tenant_id: str,
                   asked: dict[str, str]) -> MemmanError:
    """-32002: ``session_id`` belongs to user/tenant, the open named another owner."""
    as_ = " and ".join(f"{k.removesuffix('_id')} {v!r}" for k, v in asked.items())
    return MemmanError(CONFLICT, (
        f"session {session_id!r} belongs to user {user_id!r} of tenant {tenant_id!r}; opening "
        f"it as {as_} is refused. Use another session id, or pass opts.reassign = true to move "
        "the session to the new owner (written to the audit log)"),
        {"owner": {"user_id": user_id, "tenant_id": tenant_id}, "asked": asked})


@method(names.SESSION_LIST, Param("filter", Map({"user_id": Id(), "tenant_id": Id()}), default=dict))
def session_list(call: Call, filter: dict[str, Any]) -> list[dict[str, Any]]:
    """Every session's overview row; filter by user_id / tenant_id."""
    rows = []
    for s in call.app.sessions.by_id.values():
        if all(getattr(s.meta, k, None) == v for k, v in filter.items()):
            rows.append(s.overview())
    return rows


@method(names.SESSION_GET, Param("session_id", SESSION_ID),
        Param("opts", Map({"limit": COUNT, "entries": Bool(), "after_id": ROW_ID}), default=dict))
def session_get(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """The session's state: overview, rolling summary, exchanges, cycle, entries, summaries.

    opts.limit (int) returns only the newest ``limit`` entries; opts.entries=false none.
    opts.after_id pages by entry range instead: the entries with an id above it, oldest first,
    at most ``limit`` of them; ``next_after_id`` is where the next page starts (nil at the end).
    """
    s = call.app.sessions.get(session_id)
    entries, page = page_entries(s.entries, opts)
    return {
        **s.overview(),
        "summary": s.meta.summary,
        "exchanges": [vars(x) for x in s.meta.exchanges],
        "cycle": vars(s.meta.cycle),
        "injection_done": s.meta.injection_done,
        "entries": [e.to_wire() for e in entries],
        "summaries": [sm.to_wire() for sm in s.summaries.values()],
        "encoding": call.app.tokens.encoding_name(s.meta.model),
        "usage": usage.stats(s.meta),  # billed vs counted tokens (memman_session_report_usage)
        **page,
    }


def page_entries(entries: list[Any], opts: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The entries ``opts`` asks for (``limit``, ``entries``, ``after_id``) and the page info:
    ``{total_entries, next_after_id}`` (``next_after_id`` nil when nothing follows)."""
    limit = opts.get("limit")
    after = opts.get("after_id")
    total = len(entries)
    if opts.get("entries") is False or limit == 0:
        return [], {"total_entries": total, "next_after_id": None}
    if after is None:
        return (entries[-limit:] if limit else entries), {"total_entries": total,
                                                          "next_after_id": None}
    lo, hi = 0, total  # entries are in id order: binary search for the first id above `after`
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid].id <= after:
            lo = mid + 1
        else:
            hi = mid
    chosen = entries[lo:lo + limit] if limit else entries[lo:]
    more = lo + len(chosen) < total
    return chosen, {"total_entries": total,
                    "next_after_id": chosen[-1].id if more and chosen else None}


@method(names.SESSION_ADD, Param("session_id", SESSION_ID), Param("entry", ENTRY_IN), writes=True)
async def session_add(call: Call, session_id: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Append a typed entry; returns its id and tokens (counted once, here)."""
    e = await call.app.sessions.add(session_id, entry)
    return {"id": e.id, "tokens": e.tokens, "created_at": e.created_at}


@method(names.SESSION_DELETE, Param("session_id", SESSION_ID), writes=True)
async def session_delete(call: Call, session_id: str) -> dict[str, Any]:
    """Delete the session and everything in it."""
    n = await call.app.sessions.delete(session_id, call.client_name)
    return {"deleted": True, "entries": n}


def _session(call: Call, session_id: str):
    return call.app.sessions.get(session_id)


@method(names.SESSION_FINALIZE, Param("session_id", SESSION_ID), Param("question", Str()),
        Param("answer", Str()), writes=True)
async def session_finalize(call: Call, session_id: str, question: str, answer: str) -> dict[str, Any]:
    """End the current Q&A cycle: record the exchange, fold old ones into the rolling summary."""
    return await call.app.engine.finalize(_session(call, session_id), question, answer)


@method(names.SESSION_CONTEXT, Param("session_id", SESSION_ID), Param("opts", CONTEXT_OPTS, default=dict))
async def session_context(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """The budgeted message list for the chat API, with tokens, band and what was dropped.

    ``opts.peek`` (true): the same answer with no side effects — no compression check, no
    ``pruned`` event, no usage-series point (a viewer such as the TUI looks without changing
    what it looks at)."""
    s = _session(call, session_id)
    peek = opts.get("peek", False)
    if not isinstance(peek, bool):
        raise invalid_params("opts.peek", "expected a boolean")
    rest = {k: v for k, v in opts.items() if k != "peek"}
    if peek:
        return await call.app.engine.assemble(s, rest)
    out = await call.app.engine.context(s, rest)
    call.app.series.record_context(s, out)
    return out


@method(names.SESSION_PREVIEW, Param("session_id", SESSION_ID), Param("opts", CONTEXT_OPTS, default=dict))
async def session_preview(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """What context would keep, drop and summarize now, per entry with score and reason."""
    return await call.app.engine.preview(_session(call, session_id), opts)


@method(names.SESSION_PIN, Param("session_id", SESSION_ID), Param("entry_id", ROW_ID),
        Param("pinned", Bool(), default=True), writes=True)
async def session_pin(call: Call, session_id: str, entry_id: int, pinned: bool) -> dict[str, Any]:
    """Pin (or unpin) an entry: pinned entries always stay in the context. A change and its
    audit row (action ``pin`` / ``unpin``) commit together, so ``memman_undo`` can reverse it."""
    return await call.app.engine.pin(_session(call, session_id), entry_id, pinned,
                                     client=call.client_name)


@method(names.RECALL_EXCLUDE, Param("session_id", SESSION_ID), Param("entry_id", ROW_ID),
        Param("excluded", Bool(), default=True), writes=True)
async def recall_exclude(call: Call, session_id: str, entry_id: int,
                         excluded: bool) -> dict[str, Any]:
    """Stop (or resume) recalling an entry of another of the user's sessions in this
    session's windows; the change and its audit row commit together (``memman_undo``
    reverses it)."""
    s = _session(call, session_id)
    recall = call.app.recall
    src = recall.session_of_entry(s.meta.user_id, entry_id)
    # or an entry of the user's session on another host (shared store)
    e = src.by_id[entry_id] if src is not None else recall.remote_entry(s.meta.user_id, entry_id)
    if e is None or (src is not None and src.id == s.id):
        raise invalid_params("entry_id", f"entry {entry_id} is not an entry of another session "
                             f"of user {s.meta.user_id!r}")
    before = entry_id in recall.excluded.get(session_id, set())
    out: dict[str, Any] = {"session_id": session_id, "entry_id": entry_id, "excluded": excluded}
    if before == excluded:
        return out
    rec, audit_op = call.app.audit.record(
        "recall_exclude" if excluded else "recall_include", e.content or "",
        f"session:{e.session_id}#{entry_id}", "recall", call.client_name, session_id=s.id,
        user_id=s.meta.user_id, tenant_id=s.meta.tenant_id, entry_id=entry_id,
        previous=before)
    op = (recall.exclude_op(session_id, entry_id, call.app.clock.now()) if excluded
          else recall.include_op(session_id, entry_id))
    await call.app.store.write([op, audit_op])
    recall.set_excluded(session_id, entry_id, excluded)
    call.app.events.publish("session", "recall_excluded", out, **call.app.sessions.scope(s))
    return {**out, "audit_id": rec.id}


@method(names.SESSION_EXPAND, Param("session_id", SESSION_ID), Param("summary_id", ROW_ID))
async def session_expand(call: Call, session_id: str, summary_id: int) -> dict[str, Any]:
    """A compression summary and the original entries it replaced."""
    return call.app.engine.expand(_session(call, session_id), summary_id)


@method(names.SESSION_COMPACT, Param("session_id", SESSION_ID), writes=True)
async def session_compact(call: Call, session_id: str) -> dict[str, Any]:
    """Compress entries older than the recent window now (the compression design's manual request)."""
    eng = call.app.engine
    out = await eng.compact(_session(call, session_id),
                            deadline=call.app.config.compression.llm_deadline_s)
    return out or {"summary": None, "tokens_saved": 0,
                   "reason": "fewer than compression.min_entries entries outside the recent window"}


@method(names.SESSION_EXPORT, Param("session_id", SESSION_ID),
        Param("opts", Map({"after_id": ROW_ID, "limit": COUNT}), default=dict))
async def session_export(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Everything: entries, summaries, links, exchanges, cycle, stats. ``opts.after_id`` /
    ``opts.limit`` page the entries by range (``next_after_id`` says where the next page
    starts); an answer over the output cap is refused with how to page it."""
    s = _session(call, session_id)
    if not opts:
        return portability.export(s)
    entries, page = page_entries(s.entries, {**opts, "after_id": opts.get("after_id", 0)})
    return {**portability.export(s, entries), **page}


@method(names.SESSION_IMPORT, Param("data", portability.EXPORT),
        Param("opts", Map({"session_id": Id(), "replace": Bool()}), default=dict), writes=True,
        offload=True)
async def session_import(call: Call, data: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    """Restore an export (opts: session_id to rename, replace to overwrite). Its own bound:
    ``[limits] import_max_entries`` / ``import_max_bytes``."""
    portability.check_limits(data, call.app.config.limits)
    return await call.app.engine.import_(data, opts)


@method(names.SESSION_CLEAR, Param("session_id", SESSION_ID), writes=True)
async def session_clear(call: Call, session_id: str) -> dict[str, Any]:
    """Remove every entry, summary, exchange and the rolling summary; keep the session."""
    return await call.app.engine.clear(_session(call, session_id))


@method(names.SESSION_REPORT_USAGE, Param("session_id", SESSION_ID), Param("prompt_tokens", TOKENS),
        Param("completion_tokens", TOKENS, default=0), writes=True)
async def session_report_usage(call: Call, session_id: str, prompt_tokens: int,
                               completion_tokens: int) -> dict[str, Any]:
    """Record what the provider billed; the drift against memman's count is in the stats."""
    if prompt_tokens < 0:
        raise invalid_params("prompt_tokens", "must not be negative")
    if completion_tokens < 0:
        raise invalid_params("completion_tokens", "must not be negative")
    return await call.app.engine.report_usage(_session(call, session_id), prompt_tokens,
                                               completion_tokens)


@method(names.SESSION_REPORT, Param("session_id", SESSION_ID), Param("opts", CONTEXT_OPTS, default=dict))
async def session_report(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """The Q&A-cycle design's MEMORY STATE text (what `memman show` prints) and the data behind it."""
    eng = call.app.engine
    s = _session(call, session_id)
    ctx = await eng.assemble(s, opts)
    data = portability.export(s)
    data["context"] = ctx
    data["state"] = eng.memory_state(s)
    data["usage"] = usage.stats(s.meta)
    data["cache"] = [e.to_wire() for e in call.app.cache.entries(session_id)]
    # per entry: the decision and every score part, as the preview reports them
    entries = (await eng.builder.preview(s, eng.request(s, opts)))["entries"]
    return {"text": render_memory_state(data), "state": data["state"], "band": ctx["band"],
            "entries": entries}


@method(names.SESSION_REMOVE, Param("session_id", SESSION_ID), Param("entry_id", ROW_ID), writes=True)
async def session_remove(call: Call, session_id: str, entry_id: int) -> dict[str, Any]:
    """Remove one entry of a session's log; linked summaries drop the link and say so."""
    s = call.app.sessions.get(session_id)
    return await call.app.engine.remove(s, entry_id, call.client_name)


@method(names.SESSION_POP, Param("session_id", SESSION_ID), writes=True)
async def session_pop(call: Call, session_id: str) -> dict[str, Any]:
    """Remove and return the newest entry of a session (``removed`` is nil when empty)."""
    s = call.app.sessions.get(session_id)
    return await call.app.engine.remove(s, None, call.client_name)


@method(names.SESSION_SERIES, Param("session_id", SESSION_ID),
        Param("opts", Map({"limit": Nullable(COUNT)}), default=dict))
def session_series(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Points oldest first: ``{at, kind, exchange, sent_tokens, history_tokens, budget,
    sent_usage, history_usage, ...}``; opts: ``limit`` (newest N points)."""
    for k in opts:
        if k != "limit":
            raise invalid_params(f"opts.{k}", "unknown option; known: limit")
    limit = opts.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise invalid_params("opts.limit", "expected a non-negative integer (points)")
    s = call.app.sessions.get(session_id)
    budget = int(s.meta.max_tokens or call.app.config.context.max_tokens)
    return {"session_id": session_id, "budget": budget, "bands": list(BANDS),
            "points": call.app.series.points(session_id, limit)}


@method(names.SESSION_INJECT, Param("session_id", SESSION_ID), Param("prompt_injection", Str()),
        Param("tool_results", Array(Map({
            "tool": TOOL, "tool_name": TOOL, "params": TOOL_PARAMS, "parameters": TOOL_PARAMS,
            "result": Stored(), "duration": DURATION, "ttl_s": TTL,
            "call_id": Nullable(Str(max_bytes=1024))}, required=("result",),
            empty_array_ok=False)), default=list), writes=True)
async def session_inject(call: Call, session_id: str, prompt_injection: str,
                         tool_results: list[Any]) -> dict[str, Any]:
    """One-time context injection; a second call fails with ALREADY_DONE (-32006)."""
    return await call.app.injection.inject(session_id, prompt_injection, tool_results,
                                            call.client_name)
