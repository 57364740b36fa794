"""The session engine's methods (issue 3): cycles, context, preview, pin, compression,
export / import / clear, the usage ledger and the memory-state report."""

from __future__ import annotations

from typing import Any

from memman import names
from memman.errors import invalid_params
from memman_daemon.engine import portability, usage
from memman_daemon.engine.report import render_memory_state
from memman_daemon.handlers.spine import MODEL, SESSION_ID, page_entries
from memman_daemon.params import COUNT, ROW_ID, Bool, Id, Int, Map, Stored, Str
from memman_daemon.rpc import Call, Param, method

#: context options; keys not declared here are left to the engine's own check
CONTEXT_OPTS = Map({"max_tokens": Int(1, 2**31, doc="a positive integer (tokens)"), "model": MODEL},
                   rest=Stored())
TOKENS = Int(0, 2**40, doc="a token count (a non-negative integer)")


def _session(call: Call, session_id: str):
    return call.core.sessions.get(session_id)


@method(names.SESSION_FINALIZE, Param("session_id", SESSION_ID), Param("question", Str()),
        Param("answer", Str()), writes=True)
async def session_finalize(call: Call, session_id: str, question: str, answer: str) -> dict[str, Any]:
    """End the current Q&A cycle: record the exchange, fold old ones into the rolling summary."""
    return await call.core.engine.finalize(_session(call, session_id), question, answer)


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
        return await call.core.engine.assemble(s, rest)
    out = await call.core.engine.context(s, rest)
    call.core.series.record_context(s, out)
    return out


@method(names.SESSION_PREVIEW, Param("session_id", SESSION_ID), Param("opts", CONTEXT_OPTS, default=dict))
async def session_preview(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """What context would keep, drop and summarize now, per entry with score and reason."""
    return call.core.engine.preview(_session(call, session_id), opts)


@method(names.SESSION_PIN, Param("session_id", SESSION_ID), Param("entry_id", ROW_ID),
        Param("pinned", Bool(), default=True), writes=True)
async def session_pin(call: Call, session_id: str, entry_id: int, pinned: bool) -> dict[str, Any]:
    """Pin (or unpin) an entry: pinned entries always stay in the context. A change is
    written to the audit log (action ``pin`` / ``unpin``), so ``memman_undo`` can reverse it."""
    s = _session(call, session_id)
    e = s.by_id.get(entry_id)
    before = e.pinned if e is not None else None
    out = await call.core.engine.pin(s, entry_id, pinned)
    if e is not None and before != pinned:
        text = e.content or ""
        rec, op = call.core.audit.record(
            "pin" if pinned else "unpin", text, f"session:{s.id}#{entry_id}",
            "pinned" if pinned else "unpinned", call.client_name, session_id=s.id,
            user_id=s.meta.user_id, tenant_id=s.meta.tenant_id, entry_id=entry_id,
            previous=before, role=e.role, type=e.type)
        await call.core.store.write([op])
        out = {**out, "audit_id": rec.id}
    return out


@method(names.SESSION_EXPAND, Param("session_id", SESSION_ID), Param("summary_id", ROW_ID))
async def session_expand(call: Call, session_id: str, summary_id: int) -> dict[str, Any]:
    """A compression summary and the original entries it replaced."""
    return call.core.engine.expand(_session(call, session_id), summary_id)


@method(names.SESSION_COMPACT, Param("session_id", SESSION_ID), writes=True)
async def session_compact(call: Call, session_id: str) -> dict[str, Any]:
    """Compress entries older than the recent window now (seed 004's manual request)."""
    eng = call.core.engine
    out = await eng.compact(_session(call, session_id),
                            deadline=call.core.config.compression.llm_deadline_s)
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
        Param("opts", Map({"session_id": Id(), "replace": Bool()}), default=dict), writes=True)
async def session_import(call: Call, data: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    """Restore an export (opts: session_id to rename, replace to overwrite)."""
    return await call.core.engine.import_(data, opts)


@method(names.SESSION_CLEAR, Param("session_id", SESSION_ID), writes=True)
async def session_clear(call: Call, session_id: str) -> dict[str, Any]:
    """Remove every entry, summary, exchange and the rolling summary; keep the session."""
    return await call.core.engine.clear(_session(call, session_id))


@method(names.SESSION_REPORT_USAGE, Param("session_id", SESSION_ID), Param("prompt_tokens", TOKENS),
        Param("completion_tokens", TOKENS, default=0), writes=True)
async def session_report_usage(call: Call, session_id: str, prompt_tokens: int,
                               completion_tokens: int) -> dict[str, Any]:
    """Record what the provider billed; the drift against memman's count is in the stats."""
    if prompt_tokens < 0:
        raise invalid_params("prompt_tokens", "must not be negative")
    if completion_tokens < 0:
        raise invalid_params("completion_tokens", "must not be negative")
    return await call.core.engine.report_usage(_session(call, session_id), prompt_tokens,
                                               completion_tokens)


@method(names.SESSION_REPORT, Param("session_id", SESSION_ID), Param("opts", CONTEXT_OPTS, default=dict))
async def session_report(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Seed 000's MEMORY STATE text (what `memman show` prints) and the data behind it."""
    eng = call.core.engine
    s = _session(call, session_id)
    ctx = await eng.assemble(s, opts)
    data = portability.export(s)
    data["context"] = ctx
    data["state"] = eng.memory_state(s)
    data["usage"] = usage.stats(s.meta)
    cache = getattr(call.core, "cache", None)
    cache = [e.to_wire() for e in cache.entries(session_id)] if cache is not None else None
    data["cache"] = cache
    # per entry: the decision and every score part, as the preview reports them
    entries = eng.builder.preview(s, eng.request(s, opts))["entries"]
    return {"text": render_memory_state(data), "state": data["state"], "band": ctx["band"],
            "entries": entries}
