"""The spine's methods: api info, stats, subscriptions, token counting, session basics."""

from __future__ import annotations

from typing import Any

from memman import __version__, names
from memman.errors import ERROR_STYLES, invalid_params
from memman_daemon.engine import usage
from memman_daemon.params import (
    COUNT,
    METADATA,
    ROW_ID,
    AnyOf,
    Array,
    Bool,
    Id,
    Int,
    Map,
    Nullable,
    Stored,
    Str,
)
from memman_daemon.rpc import REGISTRY, Call, Param, method
from memman_daemon.tokens import check_tools

SCOPE_FILTER = Map({"session_id": Id(), "user_id": Id(), "tenant_id": Id()})
SESSION_ID = Id("s1")
MODEL = Id("gpt-4o-mini")
#: a chat message as the API takes it (memman_count_tokens)
CHAT_MESSAGE = Map({"role": Str(), "content": Nullable(Stored()), "name": Nullable(Str()),
                    "tool_call_id": Nullable(Str()), "tool_calls": Nullable(Array(Map(rest=Stored())))},
                   rest=Stored(), empty_array_ok=False)
ENTRY_IN = Map({
    "type": Str(choices=("message", "tool_call", "tool_result", "context", "summary")),
    "role": Nullable(Str(choices=("system", "user", "assistant", "tool"))),
    "content": Nullable(Str()),
    "name": Nullable(Str(max_bytes=1024)),
    "tool_call_id": Nullable(Str(max_bytes=1024)),
    "tool_calls": Nullable(Array(Map({
        "id": Str(min_len=1, max_bytes=1024), "type": Str(),
        "function": Map({"name": Str(), "arguments": Stored()}, rest=Stored()),
        "name": Str()}, required=("id",), rest=Stored()))),
    "metadata": Nullable(METADATA),
    "pinned": Bool(),
}, rest=Stored(), empty_array_ok=False)


@method(names.GET_API_INFO)
def get_api_info(call: Call) -> dict[str, Any]:
    """The api level, version, and every method (with its parameters) and event."""
    return {
        "api_level": names.API_LEVEL,
        "version": __version__,
        "methods": [
            {"name": m.name, "params": [p.name for p in m.params], "writes": m.writes}
            for m in sorted(REGISTRY.methods.values(), key=lambda m: m.name)
        ],
        "events": sorted({*names.TOPICS.values(), names.ERROR_EVENT}),
        "topics": list(names.TOPICS),
    }


@method(names.PING)
def ping(call: Call) -> str:
    return "pong"


@method(names.SET_CLIENT_INFO, Param("name", Str(min_len=1, max_bytes=512)),
        Param("info", METADATA, default=dict))
def set_client_info(call: Call, name: str, info: dict[str, Any]) -> dict[str, Any]:
    """Name this connection (as Neovim's nvim_set_client_info): the audit log and stats show it.

    ``info.errors = "nvim"`` sends this connection's errors Neovim-style, ``[0, "[code]
    message"]``, so that ``vim.rpcrequest`` shows the message; ``"memman"`` (the default) is
    ``[code, message]``.
    """
    if not name or len(name) > 128:
        raise invalid_params("name", "expected 1 to 128 characters")
    style = info.get("errors", "memman")
    if isinstance(style, bytes):
        style = style.decode(errors="replace")
    if style not in ERROR_STYLES:
        raise invalid_params("info.errors", f"expected one of {', '.join(ERROR_STYLES)}, "
                             f"got {style!r}")
    call.connection.error_style = style
    call.connection.name = name
    call.connection.client_info = dict(info)
    return {"connection": call.connection.id, "name": name}


@method(names.STATS)
def stats(call: Call) -> dict[str, Any]:
    return call.core.stats()


@method(names.SUBSCRIBE, Param("topics", Array(Str(max_bytes=64), max_items=64), default=list),
        Param("filter", SCOPE_FILTER, default=dict))
def subscribe(call: Call, topics: list[Any], filter: dict[str, Any]) -> dict[str, Any]:
    """Start receiving events on this connection; returns the subscription id."""
    topics = [t.decode() if isinstance(t, bytes) else t for t in topics]
    if not all(isinstance(t, str) for t in topics):
        raise invalid_params("topics", "expected an array of strings")
    if not all(isinstance(v, str) for v in filter.values()):
        raise invalid_params("filter", "values must be strings")
    conn = call.connection
    try:
        sub = call.core.events.subscribe(topics, filter, conn.deliver_event)
    except ValueError as exc:
        raise invalid_params("topics" if "topic" in str(exc) else "filter", str(exc)) from None
    conn.subscriptions.add(sub.id)
    return {"subscription": sub.id, "topics": sorted(sub.topics) or list(names.TOPICS),
            "filter": sub.filter}


@method(names.UNSUBSCRIBE, Param("subscription", ROW_ID))
def unsubscribe(call: Call, subscription: int) -> dict[str, Any]:
    conn = call.connection
    removed = subscription in conn.subscriptions and call.core.events.unsubscribe(subscription)
    conn.subscriptions.discard(subscription)
    return {"removed": bool(removed)}


@method(names.COUNT_TOKENS, Param("messages", Array(CHAT_MESSAGE)),
        Param("model", AnyOf((MODEL, Map({"model": MODEL, "tools": Array(Stored())},
                                         empty_array_ok=False))), default="gpt-4o-mini",
              doc="a model name, or an options map {model, tools}"),
        Param("tools", AnyOf((Array(Stored()), Map({"tools": Nullable(Array(Stored()))}))),
              default=list,
              doc="the tools= list as sent to the chat API, or an options map {tools: [...]}"))
def count_tokens(call: Call, messages: list[Any], model: str | dict[str, Any],
                 tools: list[Any] | dict[str, Any]) -> dict[str, Any]:
    """Prompt tokens of a chat request as the API bills it, and the encoding that counted.

    ``tools`` (the function definitions as sent to the API) are counted with the cookbook's
    billing formula and reported apart as ``tool_tokens``; ``tokens`` includes them. The
    second parameter may also be an options map ``{model, tools}``.
    """
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise invalid_params(f"messages[{i}]", "expected a map with role and content")
    where = "tools"
    if isinstance(model, dict):
        opts = model
        unknown = sorted(set(opts) - {"model", "tools"})
        if unknown:
            raise invalid_params(f"model.{unknown[0]}", "unknown option (known: model, tools)")
        if "tools" in opts:
            tools, where = opts["tools"], "model.tools"
        model = opts.get("model", "gpt-4o-mini")
        if not isinstance(model, str) or not model:
            raise invalid_params("model.model", "expected a model name")
    if isinstance(tools, dict):
        unknown = sorted(set(tools) - {"tools"})
        if unknown:
            raise invalid_params(f"tools.{unknown[0]}", "unknown option (known: tools)")
        tools, where = tools.get("tools") or [], "tools.tools"
    check_tools(tools, where)
    counter = call.core.tokens
    message_tokens = counter.count_messages(messages, model)
    tool_tokens = counter.count_tools(tools, model)
    return {"tokens": message_tokens + tool_tokens, "message_tokens": message_tokens,
            "tool_tokens": tool_tokens,
            "per_message": [counter.count_message(m, model) for m in messages],
            "encoding": counter.encoding_name(model), "model": model}


@method(names.SESSION_OPEN, Param("session_id", SESSION_ID),
        Param("opts", Map({"user_id": Id(), "tenant_id": Id(), "model": MODEL,
                           "max_tokens": Int(1, 2**31, doc="a positive integer (tokens)")}),
              default=dict), writes=True)
async def session_open(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Create a session (or return the existing one); opts: user_id, tenant_id, model, max_tokens."""
    s, created = await call.core.sessions.open(session_id, opts)
    return {**s.overview(), "created": created}


@method(names.SESSION_LIST, Param("filter", Map({"user_id": Id(), "tenant_id": Id()}), default=dict))
def session_list(call: Call, filter: dict[str, Any]) -> list[dict[str, Any]]:
    """Every session's overview row; filter by user_id / tenant_id."""
    rows = []
    for s in call.core.sessions.by_id.values():
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
    s = call.core.sessions.get(session_id)
    entries, page = page_entries(s.entries, opts)
    return {
        **s.overview(),
        "summary": s.meta.summary,
        "exchanges": [vars(x) for x in s.meta.exchanges],
        "cycle": vars(s.meta.cycle),
        "injection_done": s.meta.injection_done,
        "entries": [e.to_wire() for e in entries],
        "summaries": [sm.to_wire() for sm in s.summaries.values()],
        "encoding": call.core.tokens.encoding_name(s.meta.model),
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
    e = await call.core.sessions.add(session_id, entry)
    return {"id": e.id, "tokens": e.tokens, "created_at": e.created_at}


@method(names.SESSION_DELETE, Param("session_id", SESSION_ID), writes=True)
async def session_delete(call: Call, session_id: str) -> dict[str, Any]:
    """Delete the session and everything in it."""
    n = await call.core.sessions.delete(session_id, call.client_name)
    return {"deleted": True, "entries": n}
