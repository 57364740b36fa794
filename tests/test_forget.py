"""Forgetting one thing through the real daemon: one session entry, the newest one, one
user-memory record, one business document — each audited with the client that asked,
announced to subscribers, and listed in memman_get_api_info."""

from __future__ import annotations

import asyncio

import pytest

from memman import names
from memman.errors import INVALID_PARAMS, NOT_FOUND, MemmanError
from tests.helpers import running_daemon, short_tmpdir


def _events(c) -> tuple[list, object]:
    got: list = []
    return got, lambda name, payload: got.append((name, payload))


async def _wait(pred, what: str, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.01)


async def test_api_info_lists_the_forget_methods() -> None:
    async with running_daemon() as d, d.client() as c:
        info = await c.get_api_info()
        by_name = {m["name"]: m for m in info["methods"]}
        assert by_name[names.SESSION_REMOVE]["params"] == ["session_id", "entry_id"]
        assert by_name[names.SESSION_POP]["params"] == ["session_id"]
        assert by_name[names.MEMORY_FORGET]["params"] == ["user_id", "record_id", "opts"]
        assert by_name[names.DOCS_REMOVE]["params"] == ["tenant_id", "ref"]
        assert all(by_name[n]["writes"] for n in (names.SESSION_REMOVE, names.SESSION_POP,
                                                  names.MEMORY_FORGET, names.DOCS_REMOVE))


async def test_remove_and_pop_one_entry_audited_with_event_and_durable() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client("agent-7") as c:
        await c.session_open("s1", {"user_id": "ana", "tenant_id": "acme"})
        ids = [(await c.session_add("s1", {"role": r, "content": t}))["id"]
               for r, t in [("user", "my card is 4111"), ("assistant", "noted"),
                            ("user", "thanks"), ("assistant", "bye")]]
        got, cb = _events(c)
        await c.subscribe(["session"], {"session_id": "s1"}, callback=cb)
        out = await c.session_remove("s1", ids[0])
        assert out["removed"]["id"] == ids[0] and out["removed"]["content"] == "my card is 4111"
        popped = await c.session_pop("s1")
        assert popped["removed"]["id"] == ids[3] and popped["removed"]["content"] == "bye"
        s = await c.session_get("s1")
        assert [e["id"] for e in s["entries"]] == [ids[1], ids[2]]
        assert s["active_tokens"] == sum(e["tokens"] for e in s["entries"])
        ctx = await c.session_context("s1")
        assert all("4111" not in (m.get("content") or "") for m in ctx["messages"])
        await _wait(lambda: len([g for g in got if g[1]["kind"] == "entry_removed"]) == 2,
                    "events")
        ev = [p for _, p in got if p["kind"] == "entry_removed"]
        assert [e["entry_id"] for e in ev] == [ids[0], ids[3]]
        assert ev[0]["client"] == "agent-7" and ev[0]["audit_id"] == out["audit_id"]
        audit = (await c.audit_list({"session_id": "s1", "action": "remove"}))["records"]
        assert [(r["source"], r["client"]) for r in audit] == [
            (f"session:s1#{ids[3]}", "agent-7"), (f"session:s1#{ids[0]}", "agent-7")]
        assert audit[1]["what"] == "my card is 4111" and audit[0]["data"]["pop"] is True
        # errors: unknown entry, wrong type; the daemon keeps serving
        with pytest.raises(MemmanError) as exc:
            await c.session_remove("s1", ids[0])
        assert exc.value.code == NOT_FOUND
        with pytest.raises(MemmanError) as exc:
            await c.session_remove("s1", "one")
        assert exc.value.code == INVALID_PARAMS and "entry_id" in exc.value.message
        with pytest.raises(MemmanError) as exc:
            await c.session_pop("nope")
        assert exc.value.code == NOT_FOUND
    async with running_daemon(root) as d, d.client() as c:  # committed before the answer
        s = await c.session_get("s1")
        assert [e["id"] for e in s["entries"]] == [ids[1], ids[2]]
        await c.session_pop("s1")
        await c.session_pop("s1")
        empty = await c.session_pop("s1")
        assert empty["removed"] is None and empty["session"]["entries"] == 0


async def test_a_summary_that_linked_a_removed_entry_drops_the_link_and_says_so() -> None:
    async with running_daemon(compression={"recent_window": 2, "min_entries": 3,
                                           "auto_compress": False}) as d, d.client("ops") as c:
        await c.session_open("s")
        ids = [(await c.session_add("s", {"role": "user" if i % 2 == 0 else "assistant",
                                          "content": f"fact number {i} is {i * 11}"}))["id"]
               for i in range(8)]
        done = await c.session_compact("s")
        sm = done["summary"]
        assert ids[1] in sm["entry_ids"]
        out = await c.session_remove("s", ids[1])
        assert out["summaries"] == [{"summary_id": sm["id"],
                                     "entry_ids": [i for i in sm["entry_ids"] if i != ids[1]],
                                     "removed_entry_ids": [ids[1]]}]
        ex = await c.session_expand("s", sm["id"])
        assert ids[1] not in ex["summary"]["entry_ids"]
        assert ex["summary"]["removed_entry_ids"] == [ids[1]]
        assert f"Entry {ids[1]} (assistant message) was removed on request" in \
            ex["summary"]["content"]
        assert [e["id"] for e in ex["entries"]] == ex["summary"]["entry_ids"]
        audit = (await c.audit_list({"session_id": "s"}))["records"][0]
        assert audit["data"]["summary_ids"] == [sm["id"]] and audit["client"] == "ops"


async def test_forget_one_user_memory_record_and_edits_keep_history() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client("mcp-x") as c:
        await c.memory_learn("ana", "theme", "dark")
        first = await c.memory_learn("ana", "theme", "light")
        await c.memory_learn("ana", "theme", "solarized")
        edits = (await c.audit_list({"user_id": "ana", "action": "edit"}))["records"]
        assert [(r["data"]["previous"], r["what"]) for r in edits] == [
            ("light", "solarized"), ("dark", "light")]
        assert edits[0]["client"] == "mcp-x" and edits[0]["target"] == "preference:theme"
        ep = await c.memory_append("ana", "episodic", {"content": "deployed the zebra service"})
        await c.memory_append("ana", "episodic", {"content": "zebra rollback on friday"})
        got, cb = _events(c)
        await c.subscribe(["memory"], {"user_id": "ana"}, callback=cb)
        hits = (await c.memory_search("ana", "", "zebra"))["results"]
        assert ep["record"]["id"] in [h["id"] for h in hits]
        out = await c.memory_forget("ana", ep["record"]["id"])
        assert out["forgotten"]["content"] == "deployed the zebra service"
        hits = (await c.memory_search("ana", "", "zebra"))["results"]
        assert [h["content"] for h in hits] == ["zebra rollback on friday"]
        pref_id = first["record"]["id"]
        await c.memory_forget("ana", pref_id)
        assert await c.memory_recall("ana", "theme") is None
        await _wait(lambda: len([g for g in got if g[1]["kind"] == "forgotten"]) == 2, "events")
        assert (await c.memory_stats("ana"))["episodic_entry_count"] == 1
        audit = (await c.audit_list({"user_id": "ana", "action": "forget"}))["records"]
        assert [r["client"] for r in audit] == ["mcp-x", "mcp-x"]
        assert audit[1]["what"] == "deployed the zebra service"
        with pytest.raises(MemmanError) as exc:
            await c.memory_forget("bob", ep["record"]["id"])  # another user's id: not found
        assert exc.value.code == NOT_FOUND
    async with running_daemon(root) as d, d.client() as c:
        assert await c.memory_recall("ana", "theme") is None
        assert (await c.memory_stats("ana"))["episodic_entry_count"] == 1


async def test_forget_an_archived_entry_relinks_its_memory_summary() -> None:
    async with running_daemon() as d, d.client() as c:
        recs = [(await c.memory_append("u", "episodic", {"content": f"event {i} happened"}))
                ["record"]["id"] for i in range(4)]
        comp = await c.memory_compact("u", "episodic", {"keep_last": 1})
        out = await c.memory_forget("u", recs[0])
        assert out["summary_id"] == comp["summary_id"]
        summ = [r for r in (await c.memory_list("u", "episodic"))["records"]
                if r["kind"] == "summary"][0]
        assert recs[0] not in summ["metadata"]["entry_ids"]
        assert summ["metadata"]["removed_entry_ids"] == [recs[0]]
        assert f"Entry {recs[0]} was removed on request" in summ["content"]
        gone = await c.memory_forget("u", summ["id"])
        assert gone["unlinked"] == 2


async def test_docs_remove_by_doc_id_or_by_chunk_audited() -> None:
    async with running_daemon() as d, d.client("curator") as c:
        await c.docs_add("acme", {"doc_id": "refunds", "content": "Refunds take 14 days."})
        await c.docs_add("acme", {"doc_id": "ship", "content": "Shipping takes 3 days."})
        got, cb = _events(c)
        await c.subscribe(["docs"], {"tenant_id": "acme"}, callback=cb)
        hit = (await c.docs_search("acme", "shipping"))["results"][0]
        out = await c.docs_remove("acme", hit["chunk_id"])
        assert out["removed"]["doc_id"] == "ship"
        out2 = await c.docs_remove("acme", "refunds")
        assert out2["chunks"] == 1
        assert (await c.docs_list("acme"))["docs"] == []
        assert (await c.docs_search("acme", "shipping"))["results"] == []
        await _wait(lambda: len(got) == 2, "events")
        assert [p["doc_id"] for _, p in got] == ["ship", "refunds"]
        audit = (await c.audit_list({"tenant_id": "acme", "action": "remove"}))["records"]
        assert [(r["source"], r["client"]) for r in audit] == [
            ("docs:acme/refunds", "curator"), ("docs:acme/ship", "curator")]
        for bad, code in [("refunds", NOT_FOUND), (99999, NOT_FOUND), ("", INVALID_PARAMS),
                          (1.5, INVALID_PARAMS)]:
            with pytest.raises(MemmanError) as exc:
                await c.docs_remove("acme", bad)
            assert exc.value.code == code
        assert await c.ping() == "pong"
