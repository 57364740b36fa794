"""``memman_search`` from outside: one search over memory, scratchpads, documents and
sessions finds the caller's own things from every source, and nothing of another user,
another tenant, a private or recall-off entry of another session, or a forgotten one. A real
daemon on a real socket."""

from __future__ import annotations

import pytest

from memman import names
from memman.errors import INVALID_PARAMS, MemmanError
from tests.helpers import running_daemon
from tests.privacy.test_scope import T0, say

Q = "heron alarm code"


def _texts(out: dict) -> str:
    return "\n".join(h["text"] for h in out["hits"])


async def test_one_search_finds_every_source_of_its_caller_and_nothing_else() -> None:
    async with running_daemon() as d, d.client() as c:
        # ana in acme: one thing in each source
        await c.memory_append("ana", "episodic", {"content": "the heron alarm code is 4417"})
        await say(c, "ana-1", "ana", "acme", ["heron alarm code for the shed: 5521"])
        await c.scratchpad_write("ana-1", "heron alarm code note: 6630", {})
        await c.docs_add("acme", {"content": "Site manual: the heron alarm code panel is by "
                                             "the door, code 7742.", "doc_id": "manual"})
        # what she may not see: another user, another tenant, private, recall-off, forgotten
        await say(c, "bob-1", "bob", "acme", ["bob's heron alarm code is 1111"])
        await c.memory_append("bob", "episodic", {"content": "bob heron alarm code 1112"})
        await c.scratchpad_write("bob-1", "bob heron alarm code note 1113", {})
        await say(c, "ana-g", "ana", "globex", ["globex heron alarm code 2222"])
        await c.docs_add("globex", {"content": "globex heron alarm code manual 2223",
                                    "doc_id": "g"})
        await say(c, "ana-2", "ana", "acme", ["private heron alarm code 3333"], at=T0 + 10)
        await c.session_add("ana-2", {"role": "user", "content": "secret heron alarm code 3334",
                                      "metadata": {"private": True}})
        await say(c, "ana-off", "ana", "acme", ["off-record heron alarm code 3335"],
                  recall=False)
        [gone] = await say(c, "ana-3", "ana", "acme", ["old heron alarm code 3336"])
        await c.memory_forget("ana", f"entry:ana-3#{gone}", {"tenant_id": "acme"})
        assert await d.app.recall.drained(60)

        out = await c.call(names.SEARCH, "ana", Q, {"tenant_id": "acme", "limit": 50})
        got = _texts(out)
        assert {h["kind"] for h in out["hits"]} == {"memory", "snippet", "doc", "entry"}
        for mine in ("4417", "5521", "6630", "7742"):
            assert mine in got, (mine, got)
        for other in ("1111", "1112", "1113", "2222", "2223", "3334", "3335", "3336"):
            assert other not in got, (other, got)
        assert "3333" in got  # the public line of a session of hers is hers
        assert out["user_id"] == "ana" and out["tenant_id"] == "acme"
        scores = [h["score"] for h in out["hits"]]
        assert scores == sorted(scores, reverse=True)
        # every id is one the forget methods take: forgetting it removes it from the search
        entry = next(h for h in out["hits"] if h["kind"] == "entry" and "5521" in h["text"])
        await c.memory_forget("ana", entry["id"], {"tenant_id": "acme"})
        assert "5521" not in _texts(await c.call(names.SEARCH, "ana", Q,
                                                 {"tenant_id": "acme", "limit": 50}))

        # bob sees his own and none of hers
        bob = _texts(await c.call(names.SEARCH, "bob", Q, {"limit": 50}))
        assert "1111" in bob and "1112" in bob and "1113" in bob
        assert not any(x in bob for x in ("4417", "5521", "6630", "3333", "2222"))
        # a user in several tenants must name one
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SEARCH, "ana", Q, {})
        assert ei.value.code == INVALID_PARAMS and "opts.tenant_id" in ei.value.message
        # a floor of every word leaves out what carries fewer of them, and says how many
        strict = await c.call(names.SEARCH, "ana", "heron alarm code zebra",
                              {"tenant_id": "acme", "min_coverage": 1.0})
        assert strict["hits"] == [] and strict["below_floor"] > 0
