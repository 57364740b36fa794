"""The documents, agent.md and audit groups' contract (``storage/docs.py``,
``storage/agentmd.py``, ``storage/audit.py``): each test runs against the SQLite file and a
real PostgreSQL (conftest.py), through the interface only."""

from __future__ import annotations

import numpy as np
import pytest

from memman_daemon.storage import ConstraintError, Storage
from memman_daemon.storage.agentmd import DOC_ID, sha
from memman_daemon.storage.audit import AuditRecord
from memman_daemon.storage.docs import Doc, NewChunk

MODEL = "m1"


def _doc(pk: int, tenant: str, doc_id: str, text: str, n: int) -> Doc:
    return Doc(pk, tenant, doc_id, doc_id.title(), "upload", sha(text), n, 10 * n, len(text),
               1.0, 2.0, {"owner": "growth"})


async def _add(s: Storage, tenant: str, doc_id: str, texts: list[str],
               vecs: np.ndarray | None = None, old: Doc | None = None) -> tuple[Doc, list[int]]:
    pk = old.pk if old else await s.docs.new_doc_id()
    d = _doc(pk, tenant, doc_id, " ".join(texts), len(texts))
    ids = await s.docs.new_chunk_ids(len(texts))
    chunks = [NewChunk(i, seq, 10, t) for seq, (i, t) in enumerate(zip(ids, texts, strict=True))]
    await s.write(s.docs.upsert_ops(d, chunks, vecs, MODEL, old is not None))
    return d, ids


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


async def test_a_document_is_stored_read_replaced_and_deleted(storage: Storage) -> None:
    s = storage
    d, ids = await _add(s, "acme", "plan", ["the launch plan for november", "budget"])
    assert await s.docs.get("acme", "plan") == d
    assert await s.docs.get("other", "plan") is None
    assert await s.docs.of_chunk("acme", ids[1]) == d
    assert await s.docs.of_chunk("other", ids[1]) is None  # another tenant's chunk
    assert sorted(await s.docs.chunk_ids(d.pk)) == sorted(ids)
    assert sorted(await s.docs.chunks(ids)) == [(ids[0], d.pk, 0, "the launch plan for november"),
                                               (ids[1], d.pk, 1, "budget")]
    d2, _ = await _add(s, "acme", "notes", ["weekly notes"])
    assert [x.doc_id for x in await s.docs.of_tenant("acme")] == ["plan", "notes"]  # oldest first
    assert await s.docs.counts() == {"tenants": 1, "documents": 2, "chunks": 3}
    # replaced: the same key, every old chunk gone
    d3, new_ids = await _add(s, "acme", "plan", ["a new plan"], old=d)
    assert d3.pk == d.pk and await s.docs.chunk_ids(d.pk) == new_ids
    assert (await s.docs.get("acme", "plan")).hash == sha("a new plan")  # type: ignore[union-attr]
    # a second "new" document with a doc_id already there is refused (another writer first)
    with pytest.raises(ConstraintError):
        await _add(s, "acme", "plan", ["someone else's plan"])
    assert await s.docs.chunk_ids(d.pk) == new_ids
    await s.write(s.docs.delete_ops(d2))
    assert await s.docs.get("acme", "notes") is None and await s.docs.chunk_ids(d2.pk) == []
    assert await s.docs.counts() == {"tenants": 1, "documents": 1, "chunks": 1}


async def test_full_text_ranks_the_tenants_matching_chunks(storage: Storage) -> None:
    s = storage
    await _add(s, "acme", "a", ["users spiked after the mobile launch", "quarterly revenue grew"])
    await _add(s, "acme", "b", ["the launch of the mobile app drove signups and users"])
    await _add(s, "other", "c", ["mobile launch users"])
    found = await s.docs.full_text("acme", "mobile launch users", 10, 10, 1000)
    assert {f[3] for f in found} == {"users spiked after the mobile launch",
                                     "the launch of the mobile app drove signups and users"}
    assert all(f[4] > 0 for f in found)  # higher is better on both
    assert await s.docs.full_text("acme", "zebra", 10, 10, 1000) == []
    assert len(await s.docs.full_text("acme", "launch", 1, 1, 1000)) == 1


async def test_vectors_rank_nearest_and_the_backlog_fills_in(storage: Storage) -> None:
    s = storage
    vecs = np.stack([_unit(1, 0, 0), _unit(0, 1, 0)])
    d, ids = await _add(s, "acme", "v", ["north", "east"], vecs)
    _, later = await _add(s, "acme", "w", ["up"])  # stored without a vector
    q = _unit(0.9, 0.1, 0)
    hits = await s.docs.nearest("acme", q, MODEL, 2)
    loaded, matrix = await s.docs.scope_vectors("acme", MODEL, 3)
    assert sorted(loaded) == sorted(ids) and matrix.shape == (2, 3)
    if hits is not None:  # ranked by the database (pgvector)
        assert [h[0] for h in hits] == ids and hits[0][1] > hits[1][1]
    assert (await s.docs.scope_vectors("acme", "another model", 3))[0] == []
    assert await s.docs.count_backlog(MODEL) == 1
    assert await s.docs.backlog(0, MODEL, 10) == [(later[0], "acme", "up")]
    assert await s.docs.count_backlog("another model") == 3
    # stored in the background: a chunk deleted meanwhile gets none (and fails nothing)
    await s.write(s.docs.late_vector_ops([later[0], 999_999], np.stack([_unit(0, 0, 1)] * 2),
                                         MODEL))
    assert await s.docs.count_backlog(MODEL) == 0
    await s.write(s.docs.delete_ops(d))
    assert (await s.docs.scope_vectors("acme", MODEL, 3))[0] == [later[0]]


async def test_agent_md_content_and_its_document(storage: Storage) -> None:
    s, md = storage, storage.agent_md
    assert await md.get("acme") is None and await md.tenants() == []
    text = "# agent.md\n\n- Fiscal year starts in April.\n"
    d, _ = await _add(s, "acme", DOC_ID, [text])
    await s.write(md.put_ops("acme", text, 5.0, None, force=False))
    row = await md.get("acme")
    assert row is not None and row.hash == sha(text) == d.hash
    if row.content is None:  # the file is the only copy: the row is the document's
        assert await md.tenants() == [] and md.put_ops("acme", "x", 6.0, row, False) == []
        return
    assert row.content == text and row.updated_at == 5.0 and await md.tenants() == ["acme"]
    # an edit names the row it read: a second edit from the same row is refused
    await s.write(md.put_ops("acme", text + "- b\n", 6.0, row, force=False))
    with pytest.raises(ConstraintError):
        await s.write(md.put_ops("acme", text + "- c\n", 7.0, row, force=False))
    with pytest.raises(ConstraintError):  # a first row written meanwhile
        await s.write(md.put_ops("acme", "- d\n", 7.0, None, force=False))
    assert (await md.get("acme")).content == text + "- b\n"  # type: ignore[union-attr]
    await s.write(md.put_ops("acme", "imported\n", 8.0, None, force=True))  # last writer wins
    assert (await md.get("acme")).content == "imported\n"  # type: ignore[union-attr]
    await s.write(md.delete_ops("acme"))
    assert await md.get("acme") is None


async def test_audit_rows_commit_with_the_change_and_read_back(storage: Storage) -> None:
    s, a = storage, storage.audit
    await a.ensure_ids(3)
    recs = [AuditRecord.new(a.take_id(), 10.0 + i, action, f"what {i}", "src", "tgt", "agent",
                            "s1" if i else None, "ana", "acme", {"n": i})
            for i, action in enumerate(["promote", "remove", "promote"])]
    assert len({r.id for r in recs}) == 3
    d, _ = await _add(s, "acme", "gone", ["x"])
    # one transaction: a refused change leaves no audit row either
    with pytest.raises(ConstraintError):
        await s.write([*s.docs.upsert_ops(d, [], None, MODEL, False), a.insert_op(recs[0])])
    assert await a.newest({}) == []
    await s.write([*s.docs.delete_ops(d), *(a.insert_op(r) for r in recs)])
    got = await a.newest({"tenant_id": "acme"})
    assert [r.id for r in got] == sorted((r.id for r in recs), reverse=True)
    assert got[-1] == recs[0] and got[-1].data == {"n": 0}
    assert [r.id for r in await a.newest({"action": "promote", "limit": 1})] == [recs[2].id]
    assert [r.id for r in await a.newest({"before_id": recs[1].id})] == [recs[0].id]
    assert await a.newest({"user_id": "bob"}) == []
    assert (await a.newest_promotion("agent", "s1", None)) == recs[2]
    assert await a.newest_promotion("agent", "s1", 12.5) is None
    assert await a.newest_promotion("agent", None, 9.0) == recs[2]
