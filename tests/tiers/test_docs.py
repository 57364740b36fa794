"""Business context: chunking, search with rerank, agent.md watched on disk, promotion to
business appending atomically, restart."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from memman import names
from memman.errors import CONFLICT, NOT_FOUND, MemmanError
from memman_daemon.clock import FakeClock
from memman_daemon.tiers.chunking import _boundary_rank, chunk_text, chunk_text_counted
from memman_daemon.tiers.docs import rerank, rerank_features
from memman_daemon.tokens import TokenCounter
from tests.helpers import running_daemon, short_tmpdir


def test_chunking_by_tokens_with_overlap() -> None:
    enc = TokenCounter().encoding("gpt-4o-mini")
    text = " ".join(f"word{i}" for i in range(2000))
    chunks = chunk_text(text, enc, 100, 20)
    assert len(chunks) > 15
    assert all(c.tokens <= 100 for c in chunks)
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start_token == a.start_token + a.tokens - 20  # 20 tokens shared
    assert chunks[0].text.startswith("word0") and chunks[-1].text.endswith("word1999")
    # prefers to end at a paragraph break in the last 40 % of the window
    para = ("alpha " * 70).strip() + ".\n\n" + ("beta " * 200).strip()
    first = chunk_text(para, enc, 100, 10)[0]
    assert first.text.endswith("alpha.")


def _chunks_token_by_token(text, enc, size, overlap):
    """The chunking rule read literally: every token decoded, the window scanned backwards."""
    overlap = max(0, min(overlap, size // 2))
    toks = enc.encode_ordinary(text)
    n, out, start = len(toks), [], 0
    while start < n:
        end = min(n, start + size)
        if end < n:
            best, best_rank = end, 0
            for i in range(end - 1, start + int(size * 0.6), -1):
                rank = _boundary_rank(enc.decode_single_token_bytes(toks[i]))
                if rank > best_rank:
                    best, best_rank = i + 1, rank
                    if rank == 3:
                        break
            end = best
        piece = enc.decode(toks[start:end]).strip()
        if piece:
            out.append((len(out), piece, end - start, start))
        if end >= n:
            break
        start = max(end - overlap, start + 1)
    return out, n


def test_chunking_with_numpy_cuts_where_the_rule_read_literally_does() -> None:
    enc = TokenCounter().encoding("gpt-4o-mini")
    rng = random.Random(7)
    words = ["alpha", "beta.", "gamma!", "delta?", "x:", "\n", "\n\n", "  ", "<|endoftext|>",
             "café", "日本", "end.\n", "zeta"]
    for _ in range(60):
        text = "".join(rng.choice(words) + rng.choice([" ", "", "\n"])
                       for _ in range(rng.randint(0, 1500)))
        size, overlap = rng.choice([1, 2, 5, 17, 100, 256]), rng.choice([0, 3, 32])
        chunks, n = chunk_text_counted(text, enc, size, overlap)
        got = [(c.seq, c.text, c.tokens, c.start_token) for c in chunks]
        assert (got, n) == _chunks_token_by_token(text, enc, size, overlap)


def test_rerank_features_and_per_doc_cap() -> None:
    cov, prox, phrase = rerank_features("users spike november", "Users spiked on November 3rd")
    assert cov == 1.0 and prox > 0.5 and phrase == 0.0
    assert rerank_features("launch date", "the launch date moved")[2] == 1.0
    cands = [{"chunk_id": i, "doc": 1 if i < 5 else 2, "text": "launch date", "lexical": 5 - i * 0.1}
             for i in range(8)]
    out = rerank("launch date", cands, top_k=10, per_doc=3, hybrid=False)
    assert [c["doc"] for c in out].count(1) == 3 and len(out) == 6


async def test_docs_add_search_list_delete() -> None:
    async with running_daemon(clock=FakeClock(), docs={"chunk_tokens": 64, "chunk_overlap": 8},
                              embeddings={"provider": "none"}) \
            as d, d.client() as c:
        long = "\n\n".join(
            f"Section {i}. The marketing team ran campaign number {i} in region {i % 5}."
            for i in range(60))
        r = await c.call(names.DOCS_ADD, "acme", {"doc_id": "campaigns", "title": "Campaigns",
                                                 "content": long})
        assert r["changed"] and r["doc"]["chunks"] > 5
        await c.call(names.DOCS_ADD, "acme", {
            "doc_id": "nov", "content": "Why did users spike on Nov 3rd? The product launch "
                                        "of the mobile app on November 3rd drove signups."})
        await c.call(names.DOCS_ADD, "other", {"doc_id": "x", "content": "users spike launch"})
        again = await c.call(names.DOCS_ADD, "acme", {"doc_id": "nov", "content": (
            "Why did users spike on Nov 3rd? The product launch of the mobile app on "
            "November 3rd drove signups.")})
        assert again["changed"] is False
        res = await c.call(names.DOCS_SEARCH, "acme", "why did users spike after the launch")
        assert res["mode"] == "fts"
        top = res["results"][0]
        assert top["doc_id"] == "nov" and top["score"] > 0
        assert set(top["parts"]) == {"lexical", "semantic", "coverage", "proximity", "phrase"}
        many = (await c.call(names.DOCS_SEARCH, "acme", "marketing campaign region"))["results"]
        assert 0 < len(many) <= 3  # at most 3 chunks of one document
        assert many[0]["candidates"] >= len(many)
        listed = (await c.call(names.DOCS_LIST, "acme"))["docs"]
        assert [x["doc_id"] for x in listed] == ["campaigns", "nov"]
        await c.call(names.DOCS_DELETE, "acme", "nov")
        res = await c.call(names.DOCS_SEARCH, "acme", "mobile app signups")
        assert all(r["doc_id"] != "nov" for r in res["results"])
        with pytest.raises(MemmanError) as ei:
            await c.call(names.DOCS_DELETE, "acme", "nov")
        assert ei.value.code == NOT_FOUND


async def _wait_for(events: list[dict], kind: str, n: int = 1, timeout: float = 5.0) -> None:
    async def poll() -> None:
        while sum(1 for e in events if e["kind"] == kind) < n:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


async def test_agent_md_edited_on_disk_becomes_searchable() -> None:
    root = short_tmpdir()
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        events: list[dict] = []
        await c.subscribe(["docs"], {"tenant_id": "acme"}, lambda n, p: events.append(p))
        path = Path(d.app.config.agent_md_path("acme"))
        assert (await c.call(names.DOCS_LIST, "acme"))["agent_md"] == str(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# agent.md\n\nOur fiscal year starts in April.\n")
        await _wait_for(events, "agent_md_ingested")
        hits = (await c.call(names.DOCS_SEARCH, "acme", "fiscal year"))["results"]
        assert hits and hits[0]["doc_id"] == "agent.md"
        path.write_text("# agent.md\n\nChurn is measured monthly by the growth team.\n")
        await _wait_for(events, "agent_md_ingested", 2)
        # the old text is gone (vector search still returns the nearest chunk it has)
        hits = (await c.call(names.DOCS_SEARCH, "acme", "fiscal year"))["results"]
        assert all("fiscal" not in h["text"] and h["lexical"] == 0 for h in hits)
        assert (await c.call(names.DOCS_SEARCH, "acme", "churn"))["results"][0]["doc_id"] == "agent.md"
    # at start, an agent.md edited while the daemon was down is ingested
    path.write_text("# agent.md\n\nQuarterly reviews happen in the first week.\n")
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        hits = (await c.call(names.DOCS_SEARCH, "acme", "quarterly reviews"))["results"]
        assert hits and hits[0]["doc_id"] == "agent.md"


async def test_promote_to_business_appends_atomically_and_ingests() -> None:
    root = short_tmpdir()
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s1", {"user_id": "u1", "tenant_id": "acme"})
        a = (await c.call(names.SCRATCHPAD_WRITE, "s1",
                          "Signups spike every first Monday after a release."))["snippet"]["id"]
        b = (await c.call(names.SCRATCHPAD_WRITE, "s1", "Fiscal year starts in April."))["snippet"]["id"]
        c2 = (await c.call(names.SCRATCHPAD_WRITE, "s1", "Fiscal year starts in July."))["snippet"]["id"]
        r = await c.call(names.SCRATCHPAD_PROMOTE, "s1", a, "business")
        assert r["ref"] == "agent.md:acme" and r["changed"]
        r = await c.call(names.SCRATCHPAD_PROMOTE, "s1", b, "business", {"key": "fiscal year"})
        path = Path(d.app.config.agent_md_path("acme"))
        text = path.read_text()
        assert "- Signups spike every first Monday after a release." in text
        assert "- **fiscal year**: Fiscal year starts in April." in text
        assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
        hits = (await c.call(names.DOCS_SEARCH, "acme", "signups spike monday"))["results"]
        assert hits[0]["doc_id"] == "agent.md"  # ingested at once, no watcher wait needed
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SCRATCHPAD_PROMOTE, "s1", c2, "business", {"key": "fiscal year"})
        assert ei.value.code == CONFLICT and ei.value.data["existing"] == "Fiscal year starts in April."
        assert "July" not in path.read_text()
        await c.call(names.SCRATCHPAD_PROMOTE, "s1", c2, "business",
                     {"key": "fiscal year", "replace": True})
        text = path.read_text()
        assert "July" in text and "April" not in text and text.count("fiscal year") == 1
        # re-promoting the same text adds nothing
        r = await c.call(names.SCRATCHPAD_PROMOTE, "s1", a, "business")
        assert r["changed"] is False and path.read_text().count("first Monday") == 1
        audit = (await c.call(names.AUDIT_LIST, {"tenant_id": "acme", "action": "promote"}))
        assert {x["target"] for x in audit["records"]} == {"agent.md:acme", "agent.md:acme#fiscal year"}
    # a later session finds it again after a restart
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        await c.session_open("s2", {"user_id": "u1", "tenant_id": "acme"})
        hits = (await c.call(names.DOCS_SEARCH, "acme", "fiscal year"))["results"]
        assert "July" in hits[0]["text"]
        snip = (await c.call(names.SCRATCHPAD_READ, "s1", [a]))["snippets"][0]
        assert snip["promoted"][0]["target"] == "business"


async def test_a_large_agent_md_is_hashed_and_its_rows_built_off_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingesting a large agent.md holds no other client: its hashes (three per ingest) and its
    chunk rows are made on worker threads, as its reading and chunking were (sha256 of 50 MB
    on the loop held every client ~0.2 s each time)."""
    import threading

    from memman_daemon.storage.sqlite import docs as sqlite_docs
    from memman_daemon.tiers import agentmd

    loop_thread = threading.get_ident()
    on_loop: list[str] = []
    real_sha, real_upsert = agentmd.sha, sqlite_docs.SqliteDocs.upsert_ops

    def sha(text: str) -> str:
        if len(text) > agentmd.HASH_OFF_LOOP_CHARS and threading.get_ident() == loop_thread:
            on_loop.append("sha")
        return real_sha(text)

    def upsert_ops(self, d, chunks, *args, **kw):  # noqa: ANN001, ANN002, ANN003
        if len(chunks) > 100 and threading.get_ident() == loop_thread:
            on_loop.append("rows")
        return real_upsert(self, d, chunks, *args, **kw)

    monkeypatch.setattr(agentmd, "sha", sha)
    monkeypatch.setattr(sqlite_docs.SqliteDocs, "upsert_ops", upsert_ops)
    # no vectors: the rows and hashes are what this is about, not embedding 5,000 chunks
    async with running_daemon(embeddings={"provider": "none"}) as d, d.client() as c:
        events: list[dict] = []
        await c.subscribe(["docs"], {"tenant_id": "acme"}, lambda n, p: events.append(p))
        path = Path(d.app.config.agent_md_path("acme"))
        path.parent.mkdir(parents=True, exist_ok=True)
        line = "- The quarterly review of the billing pipeline happens on Mondays, item"
        path.write_text("# agent.md\n\n" + "".join(f"{line} {i}\n" for i in range(5_000)))
        await _wait_for(events, "agent_md_ingested", timeout=120)
        hits = (await c.call(names.DOCS_SEARCH, "acme", "billing pipeline"))["results"]
        assert hits and hits[0]["doc_id"] == "agent.md"
    assert on_loop == []
