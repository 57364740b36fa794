"""Protocol methods of business documents: add, search, list, delete, remove (over ``Docs``)."""

from __future__ import annotations

from typing import Any

from memman import names
from memman_daemon.rpc import Call, handles


@handles(names.DOCS_REMOVE)
async def docs_remove(call: Call, tenant_id: str, ref: str | int) -> dict[str, Any]:
    return await call.app.docs.remove(tenant_id, ref, call.client_name)


@handles(names.DOCS_ADD)
async def docs_add(call: Call, tenant_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    return await call.app.docs.add(tenant_id, doc)


@handles(names.DOCS_SEARCH)
async def docs_search(call: Call, tenant_id: str, query: str, opts: dict[str, Any]) -> dict[str, Any]:
    docs = call.app.docs
    return {"results": await docs.search(tenant_id, query, opts),
            "mode": "hybrid" if call.app.embedder.enabled else "fts"}


@handles(names.DOCS_LIST)
async def docs_list(call: Call, tenant_id: str) -> dict[str, Any]:
    return {"docs": await call.app.docs.list(tenant_id),
            "agent_md": str(call.app.agent_md.path(tenant_id))}


@handles(names.DOCS_DELETE)
async def docs_delete(call: Call, tenant_id: str, doc_id: str) -> dict[str, Any]:
    return await call.app.docs.delete(tenant_id, doc_id, call.client_name)
