"""The ``memories`` table group's contract (``storage/memories.py``'s ``MemoryRows``): every
implementation passes the same tests -- the local SQLite file and a real PostgreSQL server.
Writes are committed as the tiers commit them, with ``Storage.write``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from memman_daemon.storage import Storage, backend_for
from memman_daemon.storage.memories import MemoryRecord
from memman_daemon.storage.sqlite.store import ConstraintError, Store
from tests.helpers import make_config, short_tmpdir
from tests.pg_server import fresh_db, session_server

MODEL = "test-model"


@pytest.fixture(params=["sqlite", "postgresql"])
async def storage(request: pytest.FixtureRequest) -> AsyncIterator[Storage]:
    root = short_tmpdir()
    shared = fresh_db(session_server()) if request.param == "postgresql" else ""
    config = make_config(root, storage={"shared": shared})
    local = Store(config.database_path)
    await local.open()
    st = backend_for(config, local)
    await st.store.load()
    await st.memories.open()
    try:
        yield st
    finally:
        await st.store.close()
        await local.close()


async def new(st: Storage, user: str, type_: str, kind: str, key: str | None, content: str,
              at: float = 1000.0, **meta: Any) -> MemoryRecord:
    await st.memories.reserve_ids(1)
    return MemoryRecord(st.memories.next_id(), user, type_, kind, key, content, meta, at, at)


async def stored(st: Storage, *recs: MemoryRecord) -> None:
    await st.write([op for r in recs for op in st.memories.upsert(r)])


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


async def test_upsert_replaces_by_id_and_the_key_stays_unique(storage: Storage) -> None:
    rows = storage.memories
    first = await new(storage, "ana", "semantic", "preference", "tone", "brief")
    assert await rows.live_key("ana", "preference", "tone") is None
    await stored(storage, first)
    # what an upsert of the key replaces: the live record (its previous value)
    previous = await rows.live_key("ana", "preference", "tone")
    assert previous is not None and previous.content == "brief"
    edited = MemoryRecord(**{**previous.__dict__, "content": "detailed", "updated_at": 2000.0})
    await stored(storage, edited)
    now = await rows.live_key("ana", "preference", "tone")
    assert now is not None and (now.id, now.content, now.updated_at) == (first.id, "detailed",
                                                                         2000.0)
    # a second live record of the same user and key is refused: another writer got there
    rival = await new(storage, "ana", "semantic", "preference", "tone", "chatty")
    with pytest.raises(ConstraintError):
        await stored(storage, rival)
    assert [r.content for r in await rows.keyed("ana")] == ["detailed"]
    # another user, or another kind, has its own key
    await stored(storage, await new(storage, "bob", "semantic", "preference", "tone", "x"),
                 await new(storage, "ana", "procedural", "rule", "tone", "y"))
    assert {(r.user_id, r.kind) for r in await rows.keyed()} == {
        ("ana", "preference"), ("bob", "preference"), ("ana", "rule")}


async def test_a_playbook_is_found_by_flow_and_folded_query(storage: Storage) -> None:
    pb = await new(storage, "ana", "procedural", "playbook", "weekly", "orders\nok",
                   flow="weekly", user_query="Weekly   ORDERS")
    await stored(storage, pb)
    found = await storage.memories.live_key("ana", "playbook", "weekly\nweekly orders")
    assert found is not None and found.id == pb.id
    assert await storage.memories.live_key("ana", "playbook", "weekly\nmonthly") is None


async def test_get_and_delete_take_the_vector_along(storage: Storage) -> None:
    rows = storage.memories
    rec = await new(storage, "ana", "episodic", "entry", None, "deployed the api")
    await storage.write([*rows.upsert(rec), rows.put_vector(rec.id, unit(1, 0, 0, 0), MODEL)])
    got = await rows.get(rec.id, "ana")
    assert got is not None and got.content == "deployed the api" and got.metadata == {}
    assert await rows.get(rec.id, "bob") is None
    assert (await rows.get(rec.id)) == got
    assert (await rows.user_counts("ana")).vectors == 1
    await storage.write(rows.delete(rec.id))
    assert await rows.get(rec.id) is None
    assert (await rows.user_counts("ana")).vectors == 0


async def test_archive_relink_and_rewrite(storage: Storage) -> None:
    rows = storage.memories
    a, b, c = [await new(storage, "ana", "episodic", "entry", None, f"entry {i}", at=1000.0 + i)
               for i in range(3)]
    summary = await new(storage, "ana", "episodic", "summary", None, "two entries", at=1001.0)
    await stored(storage, a, b, c)
    assert [r.id for r in await rows.oldest_live("ana", "episodic")] == [a.id, b.id, c.id]
    await storage.write([*rows.archive([a.id, b.id], summary.id), *rows.upsert(summary)])
    assert [r.id for r in await rows.oldest_live("ana", "episodic")] == [summary.id, c.id]
    assert await rows.count_archived_by(summary.id) == 2
    listed = await rows.newest("ana", "episodic", limit=10, include_archived=True)
    assert [r.id for r in listed] == sorted([a.id, b.id, c.id, summary.id], reverse=True)
    assert [r.id for r in await rows.newest("ana", "episodic", limit=10, kind="entry")] == [c.id]
    assert [r.id for r in await rows.newest("ana", "episodic", limit=1,
                                            before_id=summary.id)] == [c.id]
    await storage.write([rows.rewrite(summary.id, "one entry", {"entry_ids": [b.id]})])
    sm = await rows.get(summary.id)
    assert sm is not None and (sm.content, sm.metadata) == ("one entry", {"entry_ids": [b.id]})
    await storage.write([rows.relink(summary.id)])  # the summary is going: unlinked, archived
    assert await rows.count_archived_by(summary.id) == 0
    assert await rows.count_archived_by(0) == 2
    assert (await rows.live([a.id, b.id, c.id])).keys() == {c.id}


async def test_full_text_ranks_the_live_records_of_the_user(storage: Storage) -> None:
    rows = storage.memories
    recs = [await new(storage, "ana", "episodic", "entry", None, text) for text in (
        "red fish red fish", "blue fish", "old boots")]
    other = await new(storage, "bob", "episodic", "entry", None, "red fish")
    rule = await new(storage, "ana", "procedural", "rule", "fish", "cook it")
    await stored(storage, *recs, other, rule)

    async def found(words: list[str], types: tuple[str, ...] = ("episodic",),
                    kind: str | None = None) -> list[tuple[int, float]]:
        return [(r.id, s) for r, s in await rows.full_text("ana", types, words, kind, 10,
                                                            scan=1000, want=10)]

    hits = await found(["red", "fish"])
    assert [i for i, _ in hits] == [recs[0].id, recs[1].id]  # best first, bob's left out
    assert hits[0][1] > hits[1][1]
    assert await found(["nothing"]) == []
    both = await found(["fish"], ("episodic", "procedural"))
    assert {i for i, _ in both} == {recs[0].id, recs[1].id, rule.id}
    assert [i for i, _ in await found(["fish"], ("episodic", "procedural"), "rule")] == [rule.id]
    await storage.write(rows.archive([recs[0].id], 0))
    assert [i for i, _ in await found(["red", "fish"])] == [recs[1].id]


async def test_full_text_keeps_to_key_prefixes_before_ranking(storage: Storage) -> None:
    rows = storage.memories
    mine = await new(storage, "ana", "semantic", "preference", "lg:pets:miso", "cat food")
    deeper = await new(storage, "ana", "semantic", "preference", "lg:pets/vet:a", "cat food")
    other = await new(storage, "ana", "semantic", "preference", "lg:petsitter:b",
                      "cat food cat food cat food")
    pct = await new(storage, "ana", "semantic", "preference", "lg:p%_:c", "cat food")
    await stored(storage, mine, deeper, other, pct)

    async def found(prefixes: tuple[str, ...] | None) -> set[int]:
        return {r.id for r, _ in await rows.full_text(
            "ana", ("semantic",), ["cat", "food"], None, 10, scan=1000, want=10,
            key_prefixes=prefixes)}

    assert await found(None) == {mine.id, deeper.id, other.id, pct.id}
    assert await found(("lg:pets:", "lg:pets/")) == {mine.id, deeper.id}
    assert await found(("lg:pets:",)) == {mine.id}
    assert await found(("lg:p%",)) == {pct.id}  # a prefix is text, never a LIKE pattern


async def test_vectors_nearest_and_backlog(storage: Storage) -> None:
    rows = storage.memories
    near, far, bare = [await new(storage, "ana", "episodic", "entry", None, t)
                       for t in ("near", "far", "bare")]
    await storage.write([*rows.upsert(near), *rows.upsert(far), *rows.upsert(bare),
                         rows.put_vector(near.id, unit(1, 0.1, 0, 0), MODEL),
                         rows.put_vector(far.id, unit(0, 1, 0, 0), MODEL)])
    ids, matrix = await rows.scope_vectors("ana", "episodic", MODEL, 4)
    assert sorted(ids) == [near.id, far.id] and matrix.shape == (2, 4)
    assert np.allclose(matrix[ids.index(near.id)], unit(1, 0.1, 0, 0), atol=1e-6)
    assert (await rows.scope_vectors("ana", "episodic", "other-model", 4))[0] == []
    hits = await rows.nearest("ana", ("episodic",), unit(1, 0, 0, 0), MODEL, 2)
    if hits is not None:  # a store that ranks vectors itself ranks them as the matrix does
        assert [i for i, _ in hits] == [near.id, far.id]
        assert hits[0][1] == pytest.approx(float(unit(1, 0.1, 0, 0)[0]), abs=1e-4)
    # the background re-embed's backlog: live records with no vector of the model
    assert [r.id for r in await rows.backlog(0, MODEL, 10)] == [bare.id]
    assert await rows.count_backlog(MODEL) == 1
    assert await rows.count_backlog("other-model") == 3
    gone = await new(storage, "ana", "episodic", "entry", None, "deleted meanwhile")
    await rows.put_vectors([bare.id, gone.id], np.stack([unit(0, 0, 1, 0),
                                                         unit(0, 0, 0, 1)]), MODEL)
    assert await rows.count_backlog(MODEL) == 0
    assert (await rows.user_counts("ana")).vectors == 3  # none for the missing record


async def test_counts_and_clear(storage: Storage) -> None:
    rows = storage.memories
    await stored(storage, *[await new(storage, "ana", "episodic", "entry", None, f"e{i}")
                            for i in range(3)],
                 await new(storage, "ana", "semantic", "preference", "tone", "brief"),
                 await new(storage, "ana", "procedural", "rule", "if", "then"),
                 await new(storage, "bob", "procedural", "playbook", "f", "q\nok",
                           user_query="q"))
    assert await rows.counts() == {"users": 2, "episodic": 3, "preferences": 1, "rules": 1,
                                   "playbooks": 1}
    n = await rows.user_counts("ana")
    assert (n.episodic, n.live, n.archived, n.vectors) == (
        3, {"entry": 3, "preference": 1, "rule": 1}, 0, 0)
    assert n.stored_bytes == 3 * (2 + 2) + (5 + 2 + 4) + (4 + 2 + 2)
    assert await rows.counts_by_type("ana", ["episodic", "semantic"]) == {"episodic": 3,
                                                                          "semantic": 1}
    await storage.write(rows.clear("ana", ["episodic", "semantic"]))
    assert await rows.counts_by_type("ana", ["episodic", "semantic", "procedural"]) == {
        "procedural": 1}
    assert (await rows.counts())["users"] == 2
