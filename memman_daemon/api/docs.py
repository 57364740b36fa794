"""Protocol methods of business documents: add, search, list, delete, remove (over ``Docs``)."""

from __future__ import annotations

from typing import Any

from memman import names
from memman_daemon.api.shapes import LIMIT, answer
from memman_daemon.params import METADATA, ROW_ID, AnyOf, Id, Int, Map, Nullable, Str
from memman_daemon.rpc import Call, Param, method

TENANT_ID = Id("t1")


@method(names.DOCS_REMOVE, Param("tenant_id", Id("t1")), Param("ref", AnyOf((Id(), ROW_ID))),
        writes=True)
async def docs_remove(call: Call, tenant_id: str, ref: str | int) -> dict[str, Any]:
    """Remove one business document (by doc_id, or by the id of one of its chunks)."""
    return await call.app.docs.remove(tenant_id, ref, call.client_name)


@method(names.DOCS_ADD, Param("tenant_id", TENANT_ID), Param("doc", Map({
    "content": Str(min_len=1, strip_empty=True), "doc_id": Nullable(Id()),
    "title": Nullable(Str(max_bytes=4096)), "source": Nullable(Str(max_bytes=4096)),
    "metadata": Nullable(METADATA)}, required=("content",), empty_array_ok=False)), writes=True)
async def docs_add(call: Call, tenant_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Add or replace a document: doc = {content, doc_id?, title?, source?, metadata?}."""
    return await call.app.docs.add(tenant_id, doc)


@method(names.DOCS_SEARCH, Param("tenant_id", TENANT_ID), Param("query", Str()),
        Param("opts", Map({"limit": Nullable(LIMIT),
                           "candidates": Nullable(Int(1, 100_000, doc="a positive integer"))}),
              default=dict))
async def docs_search(call: Call, tenant_id: str, query: str, opts: dict[str, Any]) -> dict[str, Any]:
    """~100 candidates reranked to 10; opts: limit, candidates."""
    docs = call.app.docs
    return {"results": await docs.search(tenant_id, query, opts),
            "mode": "hybrid" if call.app.embedder.enabled else "fts"}


@method(names.DOCS_LIST, Param("tenant_id", TENANT_ID))
async def docs_list(call: Call, tenant_id: str) -> dict[str, Any]:
    return {"docs": await answer(call.app.docs.list(tenant_id)),
            "agent_md": str(call.app.agent_md.path(tenant_id))}


@method(names.DOCS_DELETE, Param("tenant_id", TENANT_ID), Param("doc_id", Id()), writes=True)
async def docs_delete(call: Call, tenant_id: str, doc_id: str) -> dict[str, Any]:
    return await call.app.docs.delete(tenant_id, doc_id, call.client_name)
