"""``memman_search`` across hosts: two daemons, each with its own socket and SQLite file, on one
real PostgreSQL. On B, ana's one search finds what she said on A, her stored memory and her
tenant's documents; never another user's, another tenant's, a private or recall-off entry;
and the id it returns for an entry said on A is one the forget method takes on B: it forgets
that entry (from recall on both hosts, A's session keeps it), not an entry of a session of
the same name on B."""

from __future__ import annotations

from typing import Any

import pytest

from memman import names
from memman.errors import NOT_FOUND, MemmanError
from tests.pg_server import fresh_db, session_server
from tests.privacy.test_scope import T0, say
from tests.shared_store.test_recall_across_hosts import daemon, until

Q = "heron alarm code"


@pytest.fixture
def dsn() -> str:
    return fresh_db(session_server())


def _texts(out: dict[str, Any]) -> str:
    return "\n".join(h["text"] for h in out["hits"])


async def test_one_search_on_b_finds_what_ana_may_read_from_a_and_forgets_the_right_entry(
        dsn: str) -> None:
    async with daemon(dsn) as a, daemon(dsn) as b, a.client() as ca, b.client() as cb:
        # on A: ana's entries, her memory and her tenant's document
        [said_on_a] = await say(ca, "s1", "ana", "acme", ["heron alarm code for the shed: 5521"])
        await ca.memory_append("ana", "episodic", {"content": "the heron alarm code is 4417"})
        await ca.docs_add("acme", {"content": "Site manual: the heron alarm code panel is by "
                                              "the door, code 7742.", "doc_id": "manual"})
        # on A, what she may not read: another user, another tenant, private, recall-off
        await say(ca, "b1", "bob", "acme", ["bob's heron alarm code is 1111"])
        await ca.memory_append("bob", "episodic", {"content": "bob heron alarm code 1112"})
        await say(ca, "g1", "ana", "globex", ["globex heron alarm code 2222"])
        await ca.docs_add("globex", {"content": "globex heron alarm code manual 2223",
                                     "doc_id": "g"})
        await say(ca, "s2", "ana", "acme", ["public line of s2"], at=T0 + 10)
        await ca.session_add("s2", {"role": "user", "content": "secret heron alarm code 3334",
                                    "metadata": {"private": True}})
        await say(ca, "off", "ana", "acme", ["off-record heron alarm code 3335"], recall=False)
        # on B, a session of hers with the same name as A's (its own entries)
        [local] = await say(cb, "s1", "ana", "acme", ["heron alarm code of B's own s1: 8808"],
                            at=T0 + 20)
        assert await a.app.recall.drained(60)

        async def search_b(user: str = "ana", tenant: str = "acme") -> dict[str, Any]:
            return await cb.call(names.SEARCH, user, Q, {"tenant_id": tenant, "limit": 50})

        async def arrived() -> bool:
            got = _texts(await search_b())
            return all(x in got for x in ("5521", "4417", "7742", "8808"))

        await until(arrived)
        out = await search_b()
        got = _texts(out)
        for other in ("1111", "1112", "2222", "2223", "3334", "3335"):
            assert other not in got, (other, got)
        assert out["user_id"] == "ana" and out["tenant_id"] == "acme"
        # bob on B: his own, none of hers
        bob = _texts(await search_b("bob"))
        assert "1111" in bob and "1112" in bob
        assert not any(x in bob for x in ("5521", "4417", "8808", "3334")), bob
        assert "7742" in bob  # the tenant's documents are every member's
        # the other tenant's search on B: its own entry and document only
        globex = _texts(await search_b("ana", "globex"))
        assert "2222" in globex and "2223" in globex
        assert not any(x in globex for x in ("5521", "7742", "8808"))

        # the id of the entry said on A, forgotten on B: that entry, not B's own s1 line
        [remote] = [h for h in out["hits"] if h["kind"] == "entry" and "5521" in h["text"]]
        assert remote["id"].startswith("entry:s1#")
        wrong = remote["id"].replace("entry:s1#", "entry:s2#")  # her id under another session
        with pytest.raises(MemmanError) as ei:
            await cb.memory_forget("ana", wrong, {"tenant_id": "acme"})
        assert ei.value.code == NOT_FOUND
        gone = await cb.memory_forget("ana", remote["id"], {"tenant_id": "acme"})
        assert gone["forgotten"] and gone["session_id"] == "s1"
        assert [e["content"] for e in (await cb.session_get("s1"))["entries"]] == \
            ["heron alarm code of B's own s1: 8808"]
        after = _texts(await search_b())
        assert "5521" not in after and "8808" in after

        async def left_a() -> bool:
            got = _texts(await ca.call(names.SEARCH, "ana", Q, {"tenant_id": "acme"}))
            return "5521" not in got

        await until(left_a)  # gone from recall on A too; A's session keeps the entry
        assert said_on_a in [e["id"] for e in (await ca.session_get("s1"))["entries"]]
        # bob cannot forget her entries on B, by either id
        for ref in (remote["id"], f"entry:s1#{local}"):
            with pytest.raises(MemmanError) as ei:
                await cb.memory_forget("bob", ref, {"tenant_id": "acme"})
            assert ei.value.code == NOT_FOUND
        assert "8808" in _texts(await search_b())
