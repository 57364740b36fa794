"""`memman shared migrate --to postgresql://...`: a local SQLite file's user memory and
business context are copied into a real PostgreSQL server — in two runs (the first stopped by
--limit), then a third that copies nothing — and every record is compared with its original."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from memman import names
from memman_daemon.clock import FakeClock
from tests.helpers import daemon_env, running_daemon, short_tmpdir
from tests.llm_server import LLMServer
from tests.pg_server import fresh_db, session_server


def migrate(root: Path, dsn: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memman_cli.cli", "--json", "shared", "migrate",
                           "--to", dsn, "--data-dir", str(root / "data"), "--batch", "4", *extra],
                          capture_output=True, text=True, timeout=120, env=daemon_env(root))


async def build_local(root: Path, embeddings_url: str) -> dict[str, Any]:
    """A daemon on SQLite only, with a bit of everything."""
    clock = FakeClock()
    async with running_daemon(root, clock=clock, llm={"embeddings_base_url": embeddings_url}) \
            as d, d.client() as c:
        for i in range(15):
            clock.advance(60)
            await c.call(names.MEMORY_APPEND, "ana", "episodic",
                         {"content": f"event {i} about the billing export", "metadata": {"n": i}})
        await c.call(names.MEMORY_COMPACT, "ana", "episodic", {"keep_last": 10})
        await c.call(names.MEMORY_LEARN, "ana", "tone", "brief")
        await c.call(names.MEMORY_LEARN, "ana", "limits", {"rows": 100, "cols": [1, 2]})
        await c.call(names.MEMORY_APPEND, "ana", "procedural",
                     {"content": "answer with a table", "condition": "asked for numbers"})
        await c.call(names.MEMORY_APPEND, "ana", "procedural", {
            "flow": "peek_table", "slots": {"table": "orders"}, "tool_calls": [{"n": "q"}],
            "outcome": "first rows summarized", "user_query": "what is in orders"})
        await c.call(names.MEMORY_APPEND, "bob", "episodic", {"content": "bob's only event"})
        await c.call(names.MEMORY_CLEAR, "bob", "episodic")  # audited, not migrated as data
        long = "\n\n".join(f"Section {i}. Campaign {i} ran in region {i % 4}." for i in range(40))
        await c.call(names.DOCS_ADD, "acme", {"doc_id": "campaigns", "content": long,
                                             "metadata": {"owner": "growth"}})
        await c.session_open("s1", {"user_id": "ana", "tenant_id": "acme"})
        sn = (await c.call(names.SCRATCHPAD_WRITE, "s1", "Fiscal year starts in April."))
        await c.call(names.SCRATCHPAD_PROMOTE, "s1", sn["snippet"]["id"], "business",
                     {"key": "fiscal year"})
        sn = (await c.call(names.SCRATCHPAD_WRITE, "s1", "The user prefers CSV exports"))
        await c.call(names.SCRATCHPAD_PROMOTE, "s1", sn["snippet"]["id"], "preference",
                     {"key": "export"})
        await c.call(names.SCRATCHPAD_EVICT, "s1", sn["snippet"]["id"])  # a local-only audit
        return {"recall": await c.call(names.MEMORY_RECALL, "ana", "limits"),
                "episodic": (await c.call(names.MEMORY_LIST, "ana", "episodic",
                                          {"limit": 100, "include_archived": True}))["records"],
                "agent_md": Path(d.app.config.agent_md_path("acme")).read_text()}


async def test_migrate_copies_every_record_idempotently_and_resumably() -> None:
    root = short_tmpdir()
    dsn = fresh_db(session_server())
    with LLMServer(dim=8) as srv:
        local = await build_local(root, srv.base_url)
    db = sqlite3.connect(root / "data" / "memman.db")
    n_mem = db.execute("SELECT count(*) FROM memories").fetchone()[0]
    assert n_mem == 21 and db.execute("SELECT count(*) FROM memory_vectors").fetchone()[0] == n_mem

    first = migrate(root, dsn, "--limit", "7")
    assert first.returncode == 0, first.stderr
    out1 = json.loads(first.stdout)
    assert out1["complete"] is False and out1["copied"]["memories"] == 7
    assert "memories 4/21" in first.stderr  # progress, batch by batch
    second = migrate(root, dsn)
    assert second.returncode == 0, second.stderr
    out2 = json.loads(second.stdout)
    assert out2["complete"] and out2["copied"]["memories"] == n_mem - 7
    assert out2["already_there"]["memories"] == 7
    third = json.loads(migrate(root, dsn).stdout)
    assert sum(third["copied"].values()) == 0 and third["already_there"]["memories"] == n_mem

    conn = await asyncpg.connect(dsn)
    try:
        await compare_every_record(db, conn, local)
    finally:
        await conn.close()
        db.close()

    # a daemon on the shared store answers as the SQLite one did (ids aside)
    async with running_daemon(short_tmpdir(), clock=FakeClock(), storage={"shared": dsn}) as d, \
            d.client() as c:
        got = await c.call(names.MEMORY_RECALL, "ana", "limits")
        assert {**got, "id": 0} == {**local["recall"], "id": 0}
        eps = (await c.call(names.MEMORY_LIST, "ana", "episodic",
                            {"limit": 100, "include_archived": True}))["records"]
        strip = ("id", "archived_by", "metadata")
        assert sorted(json.dumps({k: v for k, v in r.items() if k not in strip}, sort_keys=True)
                      for r in eps) == sorted(json.dumps({k: v for k, v in r.items()
                                                          if k not in strip}, sort_keys=True)
                                              for r in local["episodic"])
        hits = (await c.call(names.DOCS_SEARCH, "acme", "fiscal year"))["results"]
        assert hits[0]["doc_id"] == "agent.md"
        assert Path(d.app.config.agent_md_path("acme")).read_text() == local["agent_md"]


async def compare_every_record(db: sqlite3.Connection, conn: asyncpg.Connection,
                               local: dict[str, Any]) -> None:
    maps: dict[str, dict[int, int]] = {}
    for tbl, old, new in await conn.fetch("SELECT tbl, old_id, new_id FROM migrated"):
        maps.setdefault(tbl, {})[old] = new
    mem = maps["memories"]
    rows = db.execute("SELECT id, user_id, type, kind, key, content, metadata, created_at, "
                      "updated_at, archived_by FROM memories ORDER BY id").fetchall()
    assert len(mem) == len(rows)
    for r in rows:
        p = await conn.fetchrow("SELECT user_id, type, kind, key, content, metadata, created_at, "
                                "updated_at, archived_by FROM memories WHERE id=$1", mem[r[0]])
        assert p is not None, r
        meta = json.loads(r[6])
        if "entry_ids" in meta:
            meta["entry_ids"] = [mem[i] for i in meta["entry_ids"]]
        archived = None if r[9] is None else (0 if r[9] == 0 else mem[r[9]])
        assert (p["user_id"], p["type"], p["kind"], p["key"], p["content"]) == tuple(r[1:6])
        assert json.loads(p["metadata"]) == meta
        assert (p["created_at"], p["updated_at"], p["archived_by"]) == (r[7], r[8], archived)
    for old, dim, blob, model in db.execute("SELECT id, dim, embedding, model FROM "
                                            "memory_vectors"):
        v = await conn.fetchrow("SELECT dim, embedding, model FROM memory_vectors WHERE id=$1",
                                mem[old])
        assert v is not None and (v["dim"], bytes(v["embedding"]), v["model"]) == (dim, blob,
                                                                                 model)
    assert await conn.fetchval("SELECT count(*) FROM memories") == len(rows)
    for pk, tenant, doc_id, data in db.execute("SELECT id, tenant_id, doc_id, data FROM docs"):
        p = await conn.fetchrow("SELECT id, tenant_id, doc_id, data FROM docs WHERE id=$1",
                                maps["docs"][pk])
        assert (p["tenant_id"], p["doc_id"], json.loads(p["data"])) == (tenant, doc_id,
                                                                       json.loads(data))
        chunks = db.execute("SELECT id, seq, tokens, content FROM doc_chunks WHERE doc=? "
                            "ORDER BY seq", (pk,)).fetchall()
        got = await conn.fetch("SELECT id, seq, tokens, content FROM doc_chunks WHERE doc=$1 "
                               "ORDER BY seq", p["id"])
        assert [tuple(g)[1:] for g in got] == [c[1:] for c in chunks]
        for cid, *_ in chunks:
            blob = db.execute("SELECT embedding FROM chunk_vectors WHERE id=?", (cid,)).fetchone()
            v = await conn.fetchval("SELECT embedding FROM chunk_vectors WHERE id=$1",
                                    maps["doc_chunks"][cid])
            assert blob is not None and bytes(v) == blob[0]
    assert await conn.fetchval("SELECT content FROM agent_md WHERE tenant_id='acme'") \
        == local["agent_md"]
    audit = db.execute("SELECT id, at, action, what, source, target, client, session_id, "
                       "user_id, tenant_id, data FROM audit ORDER BY id").fetchall()
    shared = [a for a in audit if a[2] in ("promote", "clear", "import")]
    assert {a[2] for a in audit} - {a[2] for a in shared} == {"evict"}  # local-only stays
    assert len(maps["audit"]) == len(shared) == 3
    for a in shared:
        p = await conn.fetchrow("SELECT at, action, what, source, target, client, session_id, "
                                "user_id, tenant_id, data FROM audit WHERE id=$1",
                                maps["audit"][a[0]])
        assert tuple(p) == a[1:]
