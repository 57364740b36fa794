"""Bounded work whatever the input, through the real daemon (real socket, real SQLite): a
megabyte question, newest message or recalled entry is ranked by a bounded excerpt, never read
whole on every request; the embedders are given bounded texts; one acknowledged 3 MB entry
leaves the daemon's memory within a bound."""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path

from memman.sync_client import SyncClient
from memman_daemon.engine.facts import ANALYSE_MAX_CHARS
from memman_daemon.search import embeddings, local_embedder, words
from tests.helpers import daemon_process, running_daemon

MB = 1024 * 1024


def prose(n_chars: int, seed: int = 1) -> str:
    """Words of random letters (many distinct tokens, like a pasted document or log)."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < n_chars:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 12)))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_chars]


class _Seen:
    """Wraps the one word pattern every tokenizer of the daemon goes through (``words``) and
    records the longest text it was given."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.longest = pattern, 0

    def findall(self, text: str) -> list[str]:
        self.longest = max(self.longest, len(text))
        return self.pattern.findall(text)


async def test_a_megabyte_question_is_ranked_by_a_bounded_excerpt(monkeypatch) -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"user_id": "u"})
        await c.session_open("past", {"user_id": "u"})
        for k in range(20):
            await c.session_add("s", {"role": ("user", "assistant")[k % 2],
                                      "content": f"the deploy of service {k} failed on node {k}"})
            await c.session_add("past", {"role": "user", "content": f"cluster alpha note {k}"})
        await c.docs_add("t", {"title": "runbook", "content": "restart the deploy on node 3"})
        big = "why did the deploy fail " + prose(2 * MB)
        seen = _Seen(words._WORD)
        monkeypatch.setattr(words, "_WORD", seen)
        # a 2 MB opts.query, memory search query (session entries), docs search query
        await c.session_context("s", {"query": big, "peek": True})
        await c.memory_search("u", "session", big)
        await c.docs_search("t", big)
        assert 0 < seen.longest <= words.QUERY_MAX_CHARS + 8
        # a 1 MB newest user message is the question: analysed once by its head when it
        # arrives, ranked by its excerpt on every request
        await c.session_add("s", {"role": "user", "content": big[: MB]})
        await c.session_context("s", {"peek": True})
        seen.longest = 0
        for _ in range(3):
            await c.session_context("s", {"peek": True})
            await c.session_context("past", {"query": "cluster alpha", "peek": True})
        assert 0 < seen.longest <= max(words.QUERY_MAX_CHARS + 8, ANALYSE_MAX_CHARS)


async def test_the_embedders_are_given_bounded_texts(monkeypatch) -> None:
    longest = [0]
    real = local_embedder.LocalEmbedder.embed

    def embed(self, texts):  # every local model's texts (search and relevance)
        longest[0] = max([longest[0], *map(len, texts)])
        return real(self, texts)

    monkeypatch.setattr(local_embedder.LocalEmbedder, "embed", embed)
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s", {"user_id": "u"})
        await c.session_add("s", {"role": "user", "content": "hello there, deploy on node 3"})
        await c.session_context("s", {"peek": True})  # loads the relevance model: prefetch on
        await c.session_add("s", {"role": "user", "content": prose(3 * MB)})
        await c.session_add("s", {"role": "assistant", "content": "noted"})
        await c.session_context("s", {"query": prose(MB, seed=2), "peek": True})
        assert await d.app.recall.drained(120)
        for _ in range(200):  # the prefetch queue drains in the background
            if not d.app.embedder.stats()["prefetch_queue"]:
                break
            await asyncio.sleep(0.05)
        assert 0 < longest[0] <= embeddings.LOCAL_MAX_CHARS


def _hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_one_acknowledged_3mb_entry_costs_under_a_gigabyte() -> None:
    with daemon_process() as d, SyncClient(d.socket) as c:
        c.call("memman_session_open", "s", {"user_id": "u"})
        c.call("memman_session_add", "s", {"role": "user", "content": "deploy on node 3 failed"})
        c.call("memman_session_context", "s", {"peek": True})  # the models are loaded
        c.call("memman_session_open", "other", {"user_id": "u"})
        c.call("memman_session_add", "other", {"role": "user", "content": "node 3 again?"})
        c.call("memman_session_context", "other", {"peek": True})
        before = _hwm_mb(d.proc.pid)
        c.call("memman_session_add", "s", {"role": "user", "content": prose(3 * MB)})
        for _ in range(3):  # the entry as the newest message, and recalled elsewhere
            c.call("memman_session_context", "s", {"peek": True})
            c.call("memman_session_context", "other", {"peek": True})
        for _ in range(600):  # its vectors are made in the background
            st = c.call("memman_stats")
            if not st["recall"]["pending_vectors"] and not st["embeddings"]["prefetch_queue"]:
                break
            c.call("memman_ping")
        assert _hwm_mb(d.proc.pid) - before < 1024
