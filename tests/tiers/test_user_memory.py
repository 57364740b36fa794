"""User memory through the real daemon: layers, FTS ranking with recency, hybrid with
embeddings from the loopback OpenAI-compatible server, compaction, clear, restart."""

from __future__ import annotations

import pytest

from memman import names
from memman.errors import CONFLICT, INVALID_PARAMS, MemmanError
from memman_daemon.clock import FakeClock
from tests.helpers import running_daemon, short_tmpdir
from tests.llm_server import LLMServer

DAY = 86_400.0


async def test_fts_ranking_bm25_and_recency_bonus() -> None:
    clock = FakeClock()
    async with running_daemon(clock=clock, embeddings={"provider": "none"}) as d, d.client() as c:
        ap = names.MEMORY_APPEND
        old = (await c.call(ap, "u1", "episodic", {
            "content": "Security scan found vulnerabilities in src auth module",
            "timestamp": clock.now() - 3 * DAY}))["record"]
        await c.call(ap, "u1", "episodic", {"content": "Deployed the billing service"})
        weak = (await c.call(ap, "u1", "episodic",
                             {"content": "Agent analyzed security headers"}))["record"]
        await c.call(ap, "u2", "episodic", {"content": "security vulnerabilities elsewhere"})
        res = await c.call(names.MEMORY_SEARCH, "u1", "episodic", "security vulnerabilities")
        assert res["mode"] == "fts"
        hits = res["results"]
        assert {h["id"] for h in hits} == {old["id"], weak["id"]}  # u2's entry not included
        by_id = {h["id"]: h for h in hits}
        assert by_id[old["id"]]["lexical"] > by_id[weak["id"]]["lexical"] > 0  # BM25: both terms
        assert by_id[old["id"]]["recency"] == 0.0  # 3 days old
        assert by_id[weak["id"]]["recency"] == pytest.approx(0.5)  # just now
        for h in hits:
            assert h["score"] == pytest.approx(h["lexical"] + h["recency"])
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
        # recency decides between equally relevant entries
        clock.advance(DAY / 2)
        newer = (await c.call(ap, "u1", "episodic", {"content": "Agent analyzed security headers"}))
        hits = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", "headers"))["results"]
        assert hits[0]["id"] == newer["record"]["id"]
        assert hits[1]["recency"] == pytest.approx(0.25)
        # odd characters are safe in queries
        assert (await c.call(names.MEMORY_SEARCH, "u1", "episodic", 'a"b* OR (NOT'))["results"] == []


async def test_semantic_procedural_working_layers() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        r = await c.call(names.MEMORY_LEARN, "u1", "dataset-format", "CSV with headers")
        assert r["changed"] and r["previous"] is None
        r = await c.call(names.MEMORY_LEARN, "u1", "dataset-format", "semicolon CSV")
        assert r["previous"] == "CSV with headers"  # learn overwrites (seed 003)...
        with pytest.raises(MemmanError) as ei:  # ...unless asked not to
            await c.call(names.MEMORY_LEARN, "u1", "dataset-format", "TSV", {"replace": False})
        assert ei.value.code == CONFLICT
        assert (await c.call(names.MEMORY_RECALL, "u1", "dataset-format"))["value"] == "semicolon CSV"
        assert await c.call(names.MEMORY_RECALL, "u1", "nope") is None
        await c.call(names.MEMORY_LEARN, "u1", "depth", {"level": 3})
        assert (await c.call(names.MEMORY_RECALL, "u1", "depth"))["value"] == {"level": 3}
        await c.call(names.MEMORY_APPEND, "u1", "semantic",
                     {"content": "dark", "metadata": {"key": "theme"}})
        assert (await c.call(names.MEMORY_RECALL, "u1", "theme"))["value"] == "dark"
        await c.call(names.MEMORY_APPEND, "u1", "procedural",
                     {"content": "answer in one paragraph", "metadata": {"condition": "user is a data consumer"}})
        await c.call(names.MEMORY_APPEND, "u1", "procedural", {
            "flow": "peek_table", "slots": {"table": "orders"}, "tool_calls": [],
            "outcome": "first 100 rows summarized", "user_query": "what is in the orders table"})
        rules = (await c.call(names.MEMORY_SEARCH, "u1", "procedural", "data consumer"))["results"]
        assert rules[0]["kind"] == "rule" and rules[0]["action"] == "answer in one paragraph"
        books = (await c.call(names.MEMORY_SEARCH, "u1", "procedural", "orders table",
                              {"kind": "playbook"}))["results"]
        assert books[0]["flow"] == "peek_table"
        prefs = (await c.call(names.MEMORY_SEARCH, "u1", "semantic", "csv"))["results"]
        assert prefs[0]["key"] == "dataset-format"
        # working = the session scratchpad
        await c.session_open("s1", {"user_id": "u1"})
        await c.call(names.MEMORY_APPEND, "u1", "working", {"session_id": "s1",
                                                            "content": "orders has 3 anomalies"})
        assert d.core.scratchpad.snippets("s1") == ["orders has 3 anomalies"]
        w = (await c.call(names.MEMORY_SEARCH, "u1", "working", "anomalies"))["results"]
        assert w[0]["text"] == "orders has 3 anomalies" and w[0]["score"] >= 2
        with pytest.raises(MemmanError) as ei:
            await c.call(names.MEMORY_APPEND, "u2", "working", {"session_id": "s1", "content": "x"})
        assert ei.value.code == INVALID_PARAMS
        with pytest.raises(MemmanError) as ei:
            await c.call(names.MEMORY_APPEND, "u1", "bogus", {"content": "x"})
        assert ei.value.code == INVALID_PARAMS and "working" in ei.value.message
        st = await c.call(names.MEMORY_STATS, "u1")
        assert st["semantic_entry_count"] == 3 and st["procedural_rule_count"] == 1
        assert st["playbook_count"] == 1 and st["working_snippets"] == 1
        assert st["working_memory_tokens"] > 0 and st["total_storage_bytes"] > 0


async def test_compact_archives_behind_summary_and_clear_deletes() -> None:
    clock = FakeClock()
    async with running_daemon(clock=clock) as d, d.client() as c:
        for i in range(15):
            clock.advance(1)
            await c.call(names.MEMORY_APPEND, "u1", "episodic",
                         {"content": f"event {i} about widgets", "metadata": {"task": "scan"}})
        r = await c.call(names.MEMORY_COMPACT, "u1", "episodic", {"keep_last": 10})
        assert r["archived"] == 5 and r["kept"] == 10 and r["summary_id"]
        live = (await c.call(names.MEMORY_LIST, "u1", "episodic", {"limit": 100}))["records"]
        assert len(live) == 11
        summary = next(x for x in live if x["kind"] == "summary")
        assert summary["content"].startswith("[Summary of 5 entries]\n- event 0 about widgets [task=scan]")
        everything = (await c.call(names.MEMORY_LIST, "u1", "episodic",
                                   {"limit": 100, "include_archived": True}))["records"]
        assert len(everything) == 16  # nothing deleted
        hits = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", "event 3", {"limit": 50}))
        assert all(h["archived_by"] is None for h in hits["results"])
        st = await c.call(names.MEMORY_STATS, "u1")
        assert st["episodic_entry_count"] == 11 and st["archived_count"] == 5
        r = await c.call(names.MEMORY_CLEAR, "u1", "episodic")
        assert r["cleared"] == {"episodic": 16}
        assert (await c.call(names.MEMORY_STATS, "u1"))["episodic_entry_count"] == 0
        audit = (await c.call(names.AUDIT_LIST, {"user_id": "u1", "action": "clear"}))["records"]
        assert audit and audit[0]["data"]["counts"] == {"episodic": 16}


async def test_embeddings_path_hybrid_ranking() -> None:
    with LLMServer(dim=8) as srv:
        async with running_daemon(clock=FakeClock(),
                                  llm={"embeddings_base_url": srv.base_url}) as d, d.client() as c:
            await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": "alpha launch notes"})
            await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": "beta pricing memo"})
            exact = "gamma retention review"
            target = (await c.call(names.MEMORY_APPEND, "u1", "episodic",
                                   {"content": exact}))["record"]
            assert any(p.endswith("/embeddings") for p in srv.paths)
            st = await c.call(names.MEMORY_STATS, "u1")
            assert st["vector_count"] == 3 and st["search_mode"] == "hybrid"
            # no shared word with anything stored: only the vector can find it (equal text ->
            # equal vector in the test server), ranked first with cosine 1
            res = await c.call(names.MEMORY_SEARCH, "u1", "episodic", exact)
            assert res["mode"] == "hybrid"
            top = res["results"][0]
            assert top["id"] == target["id"] and top["semantic"] == pytest.approx(1.0, abs=1e-5)
            assert all(r["semantic"] is not None for r in res["results"])
            assert d.core.user_memory.vectors.backend != "none"
            # docs are embedded and searched the same way
            await c.call(names.DOCS_ADD, "acme", {"doc_id": "d1", "content": "zeta quarterly plan"})
            out = await c.call(names.DOCS_SEARCH, "acme", "zeta quarterly plan")
            assert out["mode"] == "hybrid" and out["results"][0]["parts"]["semantic"] == pytest.approx(1.0, abs=1e-5)
            embed_calls = srv.paths.count("/v1/embeddings")
        # the endpoint going away does not fail writes: stored without a vector
        async with running_daemon(clock=FakeClock(),
                                  llm={"embeddings_base_url": "http://127.0.0.1:9/v1",
                                       "timeout_s": 1.0}) as d, d.client() as c:
            r = await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": "still stored"})
            assert r["created"]
            hits = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", "stored"))["results"]
            assert hits[0]["content"] == "still stored"
            assert d.core.embedder.failures >= 1
        assert embed_calls >= 5


@pytest.mark.sqlite_only  # the SQLite backend's vector index (shared_store ranks its own)
async def test_in_memory_vector_ranking_agrees_with_sqlite_vec() -> None:
    """Vectors are stored in sqlite-vec's format; the in-memory matrix ranks them as
    sqlite-vec's vec_distance_cosine does (or the pure-Python fallback where it cannot load)."""
    with LLMServer(dim=8) as srv:
        async with running_daemon(clock=FakeClock(),
                                  llm={"embeddings_base_url": srv.base_url}) as d, d.client() as c:
            for t in ("one fish", "two fish", "red fish", "blue fish", "old boots", "sea"):
                await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": t})
            res = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", "red fish"))["results"]
            um = d.core.user_memory
            qv = await d.core.embedder.embed(["red fish"])
            assert qv is not None
            ranked = await um.vectors.knn(
                "SELECT id, vec_distance_cosine(embedding, ?) AS d FROM memory_vectors "
                "WHERE model=? ORDER BY d LIMIT ?",
                "SELECT id, embedding FROM memory_vectors WHERE model=?",
                [d.core.embedder.model_id], [float(x) for x in qv[0]], 10, d.core.store.fetchall)
            by_vec = {r["id"]: r for r in res if "vector" in r["matched"]}
            assert len(ranked) == 6 and len(by_vec) == 6
            for rid, sim in ranked:
                assert by_vec[rid]["semantic"] == pytest.approx(sim, abs=1e-4)
                assert by_vec[rid]["parts"]["vector"]["score"] == pytest.approx(sim, abs=1e-4)
            vec_order = sorted(by_vec.values(), key=lambda r: r["parts"]["vector"]["rank"])
            assert [r["id"] for r in vec_order] == [rid for rid, _ in ranked]


async def test_user_memory_survives_restart() -> None:
    root = short_tmpdir()
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        await c.call(names.MEMORY_LEARN, "u1", "tone", "brief")
        await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": "migrated the database"})
        await c.call(names.MEMORY_APPEND, "u1", "procedural", {
            "flow": "f1", "outcome": "ok", "user_query": "migrate please"})
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        assert (await c.call(names.MEMORY_RECALL, "u1", "tone"))["value"] == "brief"
        hits = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", "database"))["results"]
        assert hits[0]["content"] == "migrated the database"
        assert len((await c.call(names.MEMORY_SEARCH, "u1", "procedural", "", {"flow": "f1"}))["results"]) == 1
        new = await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": "another"})
        assert new["record"]["id"] > hits[0]["id"]


async def test_broad_query_scan_cap_keeps_minority_users_results() -> None:
    async with running_daemon(clock=FakeClock(), memory={"max_scan": 5},
                              embeddings={"provider": "none"}) as d, d.client() as c:
        mine = (await c.call(names.MEMORY_APPEND, "rare", "episodic",
                             {"content": "common word from the rare user"}))["record"]
        for i in range(20):
            await c.call(names.MEMORY_APPEND, "busy", "episodic", {"content": f"common word {i}"})
        busy = (await c.call(names.MEMORY_SEARCH, "busy", "episodic", "common",
                             {"limit": 3}))["results"]
        assert len(busy) == 3  # only the newest 5 matches were ranked: enough
        assert all(int(r["content"].split()[-1]) >= 15 for r in busy)
        rare = (await c.call(names.MEMORY_SEARCH, "rare", "episodic", "common"))["results"]
        assert [r["id"] for r in rare] == [mine["id"]]  # found although older than the cap


async def test_words_in_most_rows_are_dropped_when_rarer_words_remain() -> None:
    async with running_daemon(clock=FakeClock(), memory={"max_scan": 50},
                              embeddings={"provider": "none"}) as d, d.client() as c:
        for i in range(240):
            extra = " zebra" if i in (3, 100) else ""
            await c.call(names.MEMORY_APPEND, "u1", "episodic",
                         {"content": f"the report number {i}{extra}"})
        res = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", "the report zebra"))["results"]
        # "the" and "report" are in every row (BM25 weight ~0): only the zebra rows match,
        # including #3, far older than the newest 50
        assert sorted(r["content"] for r in res) == ["the report number 100 zebra",
                                                     "the report number 3 zebra"]
        # all words common: the newest max_scan matches are ranked
        res = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", "the report",
                            {"limit": 5}))["results"]
        assert len(res) == 5
