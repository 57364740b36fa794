"""Protocol methods on one session's log: open, list, get, add, remove, pop, delete, inject,
and the context engine's cycle, context, preview, pin, expand, compact, export / import / clear,
usage report and usage series. Each method is declared in ``memman/api.py`` (its parameters
checked there, before the handler runs); its handler hands the change to ``Sessions`` /
``SessionEngine``. docs/protocol.md lists params, results and errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memman import names
from memman.errors import invalid_params
from memman_daemon.engine import portability, usage
from memman_daemon.engine.report import render_memory_state
from memman_daemon.engine.usage_series import BANDS
from memman_daemon.rpc import Call, handles, prechecks
from memman_daemon.scope import Caller, owner_conflict

if TYPE_CHECKING:
    from memman.types import ContextAnswer, Preview
    from memman_daemon.app import App


@handles(names.SESSION_OPEN)
async def session_open(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
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
    audit: list[Any] = []
    if moved:  # the move and its audit row commit together
        assert existing is not None
        user = opts.get("user_id", existing.meta.user_id)
        tenant = opts.get("tenant_id", existing.meta.tenant_id)
        rec, op = call.app.audit.record(
            "reassign", ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in moved.items()),
            f"session:{session_id}", f"user:{user}", call.client_name, session_id=session_id,
            user_id=user, tenant_id=tenant, previous={k: old for k, (old, _) in moved.items()})
        audit.append(op)
    s, created = await call.app.sessions.open(session_id, opts, audit)
    out = {**s.overview(), "created": created}
    if moved:
        out["audit_id"] = rec.id
    return out


@handles(names.SESSION_LIST)
def session_list(call: Call, filter: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for s in call.app.sessions.by_id.values():
        if all(getattr(s.meta, k, None) == v for k, v in filter.items()):
            rows.append(s.overview())
    return rows


@handles(names.SESSION_GET)
def session_get(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
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


@handles(names.SESSION_ADD)
async def session_add(call: Call, session_id: str, entry: dict[str, Any]) -> dict[str, Any]:
    e = await call.app.sessions.add(session_id, entry)
    return {"id": e.id, "tokens": e.tokens, "created_at": e.created_at}


@handles(names.SESSION_DELETE)
async def session_delete(call: Call, session_id: str) -> dict[str, Any]:
    n = await call.app.sessions.delete(session_id, call.client_name)
    return {"deleted": True, "entries": n}


def _session(call: Call, session_id: str):
    return call.app.sessions.get(session_id)


@handles(names.SESSION_FINALIZE)
async def session_finalize(call: Call, session_id: str, question: str, answer: str) -> dict[str, Any]:
    return await call.app.engine.finalize(_session(call, session_id), question, answer)


@handles(names.SESSION_CONTEXT)
async def session_context(call: Call, session_id: str, opts: dict[str, Any]) -> ContextAnswer:
    s = _session(call, session_id)
    peek = opts.get("peek", False)
    rest = {k: v for k, v in opts.items() if k != "peek"}
    if peek:
        return await call.app.engine.assemble(s, rest)
    out = await call.app.engine.context(s, rest)
    call.app.series.record_context(s, out)
    return out


@handles(names.SESSION_PREVIEW)
async def session_preview(call: Call, session_id: str, opts: dict[str, Any]) -> Preview:
    return await call.app.engine.preview(_session(call, session_id), opts)


@handles(names.SESSION_PIN)
async def session_pin(call: Call, session_id: str, entry_id: int, pinned: bool) -> dict[str, Any]:
    return await call.app.engine.pin(_session(call, session_id), entry_id, pinned,
                                     client=call.client_name)


@handles(names.RECALL_EXCLUDE)
async def recall_exclude(call: Call, session_id: str, entry_id: int,
                         excluded: bool) -> dict[str, Any]:
    s = _session(call, session_id)
    recall = call.app.recall
    owner = Caller(s.meta.user_id, s.meta.tenant_id)
    await recall.loaded()  # an entry is found by its row: the start's rows indexed
    src = recall.session_of_entry(owner, entry_id)
    # or an entry of the user's session on another host (shared store)
    e = src.by_id[entry_id] if src is not None else recall.remote_entry(owner, entry_id)
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
    await recall.set_exclusion(session_id, entry_id, excluded, call.app.clock.now(), [audit_op])
    call.app.events.publish("session", "recall_excluded", out, **call.app.sessions.scope(s))
    return {**out, "audit_id": rec.id}


@handles(names.SESSION_EXPAND)
async def session_expand(call: Call, session_id: str, summary_id: int) -> dict[str, Any]:
    return call.app.engine.expand(_session(call, session_id), summary_id)


@handles(names.SESSION_COMPACT)
async def session_compact(call: Call, session_id: str) -> dict[str, Any]:
    eng = call.app.engine
    out = await eng.compact(_session(call, session_id),
                            deadline=call.app.config.compression.llm_deadline_s)
    return out or {"summary": None, "tokens_saved": 0,
                   "reason": "fewer than compression.min_entries entries outside the recent window"}


@handles(names.SESSION_EXPORT)
async def session_export(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    s = _session(call, session_id)
    if not opts:
        return portability.export(s)
    entries, page = page_entries(s.entries, {**opts, "after_id": opts.get("after_id", 0)})
    return {**portability.export(s, entries), **page}


@handles(names.SESSION_IMPORT)
async def session_import(call: Call, data: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    portability.check_limits(data, call.app.config.limits)
    return await call.app.engine.import_(data, opts, call.client_name)


@prechecks(names.SESSION_IMPORT)
def import_count(app: App, params: Any) -> None:
    if isinstance(params, (list, tuple)) and params:
        portability.check_count(params[0], app.config.limits)


@handles(names.SESSION_CLEAR)
async def session_clear(call: Call, session_id: str) -> dict[str, Any]:
    return await call.app.engine.clear(_session(call, session_id))


@handles(names.SESSION_REPORT_USAGE)
async def session_report_usage(call: Call, session_id: str, prompt_tokens: int,
                               completion_tokens: int) -> dict[str, Any]:
    return await call.app.engine.report_usage(_session(call, session_id), prompt_tokens,
                                               completion_tokens)


@handles(names.SESSION_REPORT)
async def session_report(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
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


@handles(names.SESSION_REMOVE)
async def session_remove(call: Call, session_id: str, entry_id: int) -> dict[str, Any]:
    s = call.app.sessions.get(session_id)
    return await call.app.engine.remove(s, entry_id, call.client_name)


@handles(names.SESSION_POP)
async def session_pop(call: Call, session_id: str) -> dict[str, Any]:
    s = call.app.sessions.get(session_id)
    return await call.app.engine.remove(s, None, call.client_name)


@handles(names.SESSION_SERIES)
def session_series(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    limit = opts.get("limit")
    s = call.app.sessions.get(session_id)
    budget = call.app.engine.budget(s)
    return {"session_id": session_id, "budget": budget, "bands": list(BANDS),
            "points": call.app.series.points(session_id, limit)}


@handles(names.SESSION_INJECT)
async def session_inject(call: Call, session_id: str, prompt_injection: str,
                         tool_results: list[Any]) -> dict[str, Any]:
    return await call.app.injection.inject(session_id, prompt_injection, tool_results,
                                            call.client_name)
