"""Token vectors across hosts: with ``[storage] shared``, the daemon that embedded an entry
writes its packed token vectors (``search/late.py``) to ``recall_row_tokens`` beside its
vector, and every other daemon takes them, so another host's entries reach the MaxSim stage
without being embedded again — after a restart too. A forgotten entry's token vectors leave
the shared store with its row. Two real daemons on one real PostgreSQL."""

from __future__ import annotations

import shutil

import asyncpg
import numpy as np
import pytest

from memman_daemon.search import late
from tests.helpers import RunningDaemon, short_tmpdir
from tests.pg_server import fresh_db, session_server
from tests.shared_store.test_recall_across_hosts import (
    FACT,
    MARCH,
    _ask,
    daemon,
    until,
)


@pytest.fixture
def dsn() -> str:
    return fresh_db(session_server())


CHAT = "We talked about the weather in Porto and the trains to Lisbon."


async def _token_rows(dsn: str, d: RunningDaemon) -> dict[int, tuple[int, bytes]]:
    """``d``'s entries that have token vectors in the shared store: entry id -> (n, bytes)."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT r.entry_id, t.n, t.packed FROM recall_row_tokens t JOIN recall_rows r "
            "ON r.id = t.id WHERE r.origin=$1", d.app.recall.storage.origin)
    finally:
        await conn.close()
    return {r[0]: (r[1], bytes(r[2])) for r in rows}


def _remote_tokens(d: RunningDaemon, user: str = "ana") -> dict[int, np.ndarray]:
    """The packed token vectors ``d`` holds for other hosts' rows of ``user``: corpus id ->
    packed rows (those with none are left out)."""
    out: dict[int, np.ndarray] = {}
    for (_tenant, uid), c in d.app.recall.corpora.items():
        if uid != user or c.tok is None:
            continue
        for eid in c.remote:
            row = c.row_of.get(eid)
            if row is not None and c.tok_n[row] > 0:
                out[eid] = c.tok[row, : c.tok_n[row]].copy()
    return out


def _embedded_on_a(a: RunningDaemon, entry_id: int) -> np.ndarray:
    for c in a.app.recall.corpora.values():
        row = c.row_of.get(entry_id)
        if row is not None and c.tok is not None and c.tok_n[row] > 0:
            return c.tok[row, : c.tok_n[row]].copy()
    raise AssertionError(f"entry {entry_id} has no token vectors on its own host")


async def test_token_vectors_embedded_on_a_rank_a_s_entries_on_b_without_embedding(
        dsn: str) -> None:
    root_b = short_tmpdir()
    try:
        async with daemon(dsn) as a, a.client() as ca:
            if not a.app.embedder.late:  # the search model in force gives no token vectors
                pytest.skip("the local search model (MiniLM) is not installed")
            await ca.session_open("s1", {"user_id": "ana"})
            fact = await ca.session_add("s1", {"role": "user", "content": FACT,
                                               "created_at": MARCH})
            chat = await ca.session_add("s1", {"role": "assistant", "content": CHAT,
                                               "created_at": MARCH + 60})
            assert await a.app.recall.drained(60)

            async def shared() -> bool:
                return set(await _token_rows(dsn, a)) >= {fact["id"], chat["id"]}

            await until(shared)
            stored = await _token_rows(dsn, a)
            n, packed = stored[fact["id"]]
            dim = a.app.recall.corpora[("default", "ana")].vec.shape[1]
            assert 0 < n <= late.TOKENS and len(packed) == late.TOKENS * late.width(dim)

            async with daemon(dsn, root_b) as b, b.client() as cb:
                await _ask(cb, "q")

                async def took_them() -> bool:
                    await cb.session_context("q", {"max_tokens": 1000})
                    return len(_remote_tokens(b)) >= 2

                await until(took_them)
                # the same bytes A packed, and B embedded nothing of A's (its own question
                # at most)
                got = _remote_tokens(b)
                assert any(np.array_equal(t, _embedded_on_a(a, fact["id"])) for t in got.values())
                assert b.app.recall.stats()["embedded"] <= 1
                # B's MaxSim stage can rank A's rows: the question's tokens score against them
                c = b.app.recall.corpora[("default", "ana")]
                vecs = await b.app.recall.question_vectors("what is my cat allergic to")
                qtok = vecs[0][2]
                rows = np.asarray([c.row_of[eid] for eid in got], dtype=np.int64)
                scores = late.maxsim(qtok, c.tok[rows], c.tok_n[rows].astype(np.int64),
                                     qtok.shape[1])
                assert (scores > 0).any()

            # B restarted: the token vectors come from the shared store again, not embedded
            async with daemon(dsn, root_b) as b2, b2.client() as cb2:
                async def again() -> bool:
                    await cb2.session_context("q", {"max_tokens": 1000})
                    return len(_remote_tokens(b2)) >= 2

                await until(again)
                assert b2.app.recall.stats()["embedded"] <= 1  # its question, at most

            # forgotten on A: its token vectors leave the shared store with its row
            await ca.memory_forget("ana", fact["id"])

            async def gone() -> bool:
                return fact["id"] not in await _token_rows(dsn, a)

            await until(gone)
            assert chat["id"] in await _token_rows(dsn, a)
    finally:
        shutil.rmtree(root_b, ignore_errors=True)
