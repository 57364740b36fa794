"""The result shapes in memman.types are the daemon's: every field a real daemon sends for these
answers is declared, and every field declared as always present is sent."""

from __future__ import annotations

import typing
from typing import Any

from memman import api, names, types
from tests.helpers import running_daemon


def _declared(td: type) -> tuple[set[str], set[str]]:
    required = set(getattr(td, "__required_keys__", set()))
    return required, required | set(getattr(td, "__optional_keys__", set()))


def _check(label: str, td: type, answer: Any, problems: list[str]) -> None:
    assert isinstance(answer, dict), (label, answer)
    required, known = _declared(td)
    if extra := set(answer) - known:
        problems.append(f"{label}: {td.__name__} lacks {sorted(extra)}")
    if missing := required - set(answer):
        problems.append(f"{label}: {td.__name__} declares {sorted(missing)} as always sent")


def _returns(method: str) -> type:
    spec = api.BY_NAME[method]
    name = spec.returns.removeprefix("list[").removesuffix("]").split("|")[0].strip()
    return getattr(types, name)


async def test_answers_have_the_declared_fields() -> None:
    problems: list[str] = []
    async with running_daemon() as d, d.client() as c:
        def check(method: str, answer: Any, td: type | None = None) -> None:
            _check(method, td or _returns(method), answer, problems)

        check(names.SESSION_OPEN, await c.session_open("s1", {"user_id": "u1", "tenant_id": "t1"}))
        added = await c.session_add("s1", {"type": "message", "role": "user",
                                           "content": "What is the refund window?"})
        check(names.SESSION_ADD, added)
        await c.session_add("s1", {"type": "message", "role": "assistant",
                                   "content": "Refunds are accepted within 30 days."})
        check(names.SESSION_FINALIZE, await c.session_finalize("s1", "refund window?", "30 days"))
        for row in await c.session_list():
            check(names.SESSION_LIST, row)
        got = await c.session_get("s1")
        check(names.SESSION_GET, got)
        for e in got["entries"]:
            _check("entry", types.Entry, e, problems)
        ctx = await c.session_context("s1", {"peek": True})
        check(names.SESSION_CONTEXT, ctx)
        for p in ctx["parts"]:
            _check("part", types.ContextPart, p, problems)
        preview = await c.session_preview("s1")
        check(names.SESSION_PREVIEW, preview)
        # one name per figure: the second names the answers once carried are gone
        for answer in (ctx, preview):
            assert not {"sent_tokens", "full_tokens", "target_tokens", "final_usage"} & set(answer)
        for e in preview["entries"]:
            _check("preview entry", types.EntryDecision, e, problems)
        _check("compaction", types.Compaction, preview["compaction"], problems)
        series = await c.session_series("s1")
        check(names.SESSION_SERIES, series)
        for p in series["points"]:
            _check("series point", types.SeriesPoint, p, problems)
        check(names.SESSION_PIN, await c.session_pin("s1", added["id"], True))
        check(names.CACHE_PUT, await c.cache_put("s1", "weather", {"city": "Rome"}, {"t": 21}))
        check(names.CACHE_LOOKUP, await c.cache_lookup("s1", "weather", {"city": "Rome"}))
        cache = await c.cache_list("s1")
        check(names.CACHE_LIST, cache)
        for e in cache["entries"]:
            _check("cache entry", types.CacheEntry, e, problems)
        written = await c.scratchpad_write("s1", "Always answer refunds in days.", {"explicit": True})
        check(names.SCRATCHPAD_WRITE, written)
        _check("snippet", types.Snippet, written["snippet"], problems)
        check(names.SCRATCHPAD_READ, await c.scratchpad_read("s1"))
        cands = await c.scratchpad_candidates("s1")
        check(names.SCRATCHPAD_CANDIDATES, cands)
        for x in cands["candidates"]:
            _check("candidate", types.Candidate, x, problems)
        check(names.MEMORY_LEARN, await c.memory_learn("u1", "currency", "EUR"))
        check(names.MEMORY_RECALL, await c.memory_recall("u1", "currency"))
        check(names.MEMORY_LIST, await c.memory_list("u1", "semantic"))
        check(names.MEMORY_STATS, await c.memory_stats("u1"))
        check(names.DOCS_ADD, await c.docs_add("t1", {"doc_id": "policy", "title": "Policy",
                                                       "content": "Refunds within 30 days."}))
        docs = await c.docs_list("t1")
        check(names.DOCS_LIST, docs)
        for doc in docs["docs"]:
            _check("document", types.Document, doc, problems)
        check(names.DOCS_SEARCH, await c.docs_search("t1", "refund"))
        audit = await c.audit_list({"session_id": "s1"})
        check(names.AUDIT_LIST, audit)
        for r in audit["records"]:
            _check("audit record", types.AuditRecord, r, problems)
        clients = await c.clients_list()
        check(names.CLIENTS_LIST, clients)
        for row in clients["clients"]:
            _check("client row", types.ClientRow, row, problems)
        check(names.COUNT_TOKENS, await c.count_tokens([{"role": "user", "content": "hi"}]))
        check(names.GET_API_INFO, await c.get_api_info())
        check(names.SESSION_REMOVE, await c.session_remove("s1", added["id"]))
        check(names.SESSION_CLEAR, await c.session_clear("s1"))
        check(names.SESSION_DELETE, await c.session_delete("s1"))
    assert not problems, "\n".join(problems)


def test_every_listed_result_type_exists() -> None:
    for spec in api.METHODS:
        for part in spec.returns.replace("list[", "").replace("]", "").split("|"):
            part = part.strip()
            if part not in ("dict", "list", "Any", "None", "str", "int", "float", "bool"):
                assert typing.is_typeddict(getattr(types, part, None)), (spec.name, part)
