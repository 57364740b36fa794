"""memman_undo, memman_session_series and memman_clients_list on a real daemon."""

from __future__ import annotations

import os

import pytest

from memman import names
from memman.errors import INVALID_PARAMS, NOT_FOUND, MemmanError
from memman_daemon.clock import FakeClock
from tests.helpers import running_daemon, short_tmpdir


async def _session(c, sid: str = "s1") -> list[int]:
    await c.session_open(sid)
    ids = []
    for role, text in (("system", "You are a careful agent."), ("user", "hello there"),
                       ("assistant", "hi, how can I help?")):
        r = await c.call(names.SESSION_ADD, sid, {"role": role, "type": "message", "content": text})
        ids.append(r["entry"]["id"] if "entry" in r else r["id"])
    return ids


async def test_undo_reverses_unpin_then_the_pin_before_it_and_audits_both() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client("tui") as c, \
            d.client("agent") as agent:
        ids = await _session(c)
        await c.call(names.SESSION_PIN, "s1", ids[1], True)
        out = await c.call(names.SESSION_PIN, "s1", ids[1], False)
        assert isinstance(out["audit_id"], int)
        # another client's actions are not this client's to undo
        await agent.call(names.SESSION_PIN, "s1", ids[2], True)
        undo = await c.call(names.UNDO, {})
        assert undo["undone"]["action"] == "unpin" and undo["undone"]["data"]["entry_id"] == ids[1]
        assert d.app.sessions.get("s1").by_id[ids[1]].pinned is True
        assert d.app.sessions.get("s1").by_id[ids[2]].pinned is True  # untouched
        undo = await c.call(names.UNDO, {})
        assert undo["undone"]["action"] == "pin"
        assert d.app.sessions.get("s1").by_id[ids[1]].pinned is False
        with pytest.raises(MemmanError) as ei:
            await c.call(names.UNDO, {})
        assert ei.value.code == NOT_FOUND
        records = (await c.call(names.AUDIT_LIST, {"session_id": "s1", "action": "undo"}))["records"]
        assert len(records) == 2 and {r["data"]["undone_action"] for r in records} == {"pin", "unpin"}


async def test_a_pin_and_its_audit_row_commit_in_one_transaction() -> None:
    """An audit row that cannot be written takes the pin with it: no unaudited change."""
    async with running_daemon(clock=FakeClock()) as d, d.client("tui") as c:
        ids = await _session(c)
        store = d.app.store  # the fault is set on the writer's own connection, on its thread
        await store.on_writer(lambda db: db.execute(
            "CREATE TEMP TRIGGER refuse_audit BEFORE INSERT ON audit "
            "BEGIN SELECT RAISE(ABORT, 'audit refused'); END"))
        with pytest.raises(MemmanError):
            await c.call(names.SESSION_PIN, "s1", ids[1], True)
        got = await c.session_get("s1", {})
        assert not next(e for e in got["entries"] if e["id"] == ids[1]).get("pinned")
        await store.on_writer(lambda db: db.execute("DROP TRIGGER refuse_audit"))
        out = await c.call(names.SESSION_PIN, "s1", ids[1], True)
        assert out == {"entry_id": ids[1], "pinned": True, "audit_id": out["audit_id"]}
        records = (await c.call(names.AUDIT_LIST, {"session_id": "s1", "action": "pin"}))["records"]
        assert [r["id"] for r in records] == [out["audit_id"]]


async def test_undo_restores_an_evicted_snippet_and_cache_entry() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client("tui") as c:
        await c.session_open("s1")
        sn = (await c.call(names.SCRATCHPAD_WRITE, "s1", "the deploy key is K-42",
                           {"salience": 0.9}))["snippet"]
        await c.call(names.SCRATCHPAD_EVICT, "s1", sn["id"])
        assert d.app.scratchpad.peek("s1") == []
        undo = await c.call(names.UNDO, {"session_id": "s1"})
        assert undo["undone"]["action"] == "evict"
        back = d.app.scratchpad.peek("s1")
        assert [(s.id, s.text, s.salience) for s in back] == [(sn["id"], sn["text"], 0.9)]
        await c.call(names.CACHE_PUT, "s1", "weather", {"city": "Oslo"}, "rain")
        key = (await c.call(names.CACHE_LIST, "s1"))["entries"][0]["key"]
        await c.call(names.CACHE_EVICT, "s1", key)
        await c.call(names.UNDO, {})
        entries = (await c.call(names.CACHE_LIST, "s1"))["entries"]
        assert [(e["key"], e["result"]) for e in entries] == [(key, "rain")]


async def test_undo_of_a_promotion_removes_the_preference_or_restores_the_old_value() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client("tui") as c:
        await c.session_open("s1", {"user_id": "u1"})
        sn = (await c.call(names.SCRATCHPAD_WRITE, "s1", "user prefers dark mode"))["snippet"]
        await c.call(names.SCRATCHPAD_PROMOTE, "s1", sn["id"], "preference",
                     {"key": "theme", "value": "dark"})
        assert (await c.call(names.MEMORY_RECALL, "u1", "theme"))["value"] == "dark"
        await c.call(names.UNDO, {})
        assert await c.call(names.MEMORY_RECALL, "u1", "theme") is None
        assert d.app.scratchpad.peek("s1")[0].promoted == []
        await c.call(names.MEMORY_LEARN, "u1", "theme", "light")
        await c.call(names.SCRATCHPAD_PROMOTE, "s1", sn["id"], "preference",
                     {"key": "theme", "value": "dark", "replace": True})
        await c.call(names.UNDO, {})
        assert (await c.call(names.MEMORY_RECALL, "u1", "theme"))["value"] == "light"


async def test_undo_of_a_promotion_to_agent_md_takes_the_line_out_and_reingests() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client("tui") as c:
        await c.session_open("s1", {"tenant_id": "acme"})
        sn = (await c.call(names.SCRATCHPAD_WRITE, "s1", "invoices are due within 30 days"))
        await c.call(names.SCRATCHPAD_PROMOTE, "s1", sn["snippet"]["id"], "business", {})
        path = d.app.agent_md.path("acme")
        assert "- invoices are due within 30 days" in path.read_text(encoding="utf-8")
        doc = await d.app.docs.get("acme", "agent.md")
        assert doc is not None and doc.chunks >= 1
        undo = await c.call(names.UNDO, {})
        assert undo["undone"]["action"] == "promote" and undo["undone"]["target"] == "agent.md:acme"
        assert "invoices are due" not in path.read_text(encoding="utf-8")
        after = await d.app.docs.get("acme", "agent.md")
        assert after is not None and after.hash != doc.hash  # the file was ingested again


async def test_undo_bad_options_name_the_parameter() -> None:
    async with running_daemon() as d, d.client() as c:
        for opts, path in (({"nope": 1}, "opts.nope"), ({"audit_id": "x"}, "opts.audit_id"),
                           ({"client": 3}, "opts.client")):
            with pytest.raises(MemmanError) as ei:
                await c.call(names.UNDO, opts)
            assert ei.value.code == INVALID_PARAMS and path in ei.value.message


async def test_series_records_context_exchanges_and_survives_restart() -> None:
    root = short_tmpdir()
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        await _session(c)
        ctx = await c.call(names.SESSION_CONTEXT, "s1", {})
        await c.call(names.SESSION_FINALIZE, "s1", "hello there", "hi, how can I help?")
        peek = await c.call(names.SESSION_CONTEXT, "s1", {"peek": True})
        series = await c.call(names.SESSION_SERIES, "s1", {})
        kinds = [p["kind"] for p in series["points"]]
        assert kinds == ["context", "exchange"]  # a peek records nothing
        first = series["points"][0]
        assert first["sent_tokens"] == ctx["tokens"]
        assert first["history_tokens"] == ctx["history_tokens"]
        assert first["sent_usage"] == round(first["sent_tokens"] / series["budget"], 4)
        assert series["points"][1]["exchange"] == 1
        assert series["bands"] == [0.6, 0.8, 0.9, 1.0]
        assert peek["messages"] == (await c.call(names.SESSION_CONTEXT, "s1", {}))["messages"]
        await d.app.series.close()  # flush the background writes
    async with running_daemon(root, clock=FakeClock()) as d, d.client() as c:
        again = await c.call(names.SESSION_SERIES, "s1", {"limit": 2})
        assert [p["kind"] for p in again["points"]] == ["exchange", "context"]
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SESSION_SERIES, "s1", {"limit": -1})
        assert ei.value.code == INVALID_PARAMS and "opts.limit" in ei.value.message


async def test_clients_list_names_pid_requests_and_subscriptions() -> None:
    async with running_daemon() as d, d.client("watcher") as a, d.client("agent") as b:
        await a.subscribe(topics=["session"], filter={}, callback=lambda *_: None)
        await b.call(names.PING)
        out = await a.call(names.CLIENTS_LIST)
        by_name = {c["name"]: c for c in out["clients"]}
        assert set(by_name) >= {"watcher", "agent"}
        assert by_name["watcher"]["pid"] == os.getpid() and by_name["watcher"]["you"] is True
        assert by_name["agent"]["you"] is False and by_name["agent"]["requests"] >= 2
        assert by_name["watcher"]["subscriptions"][0]["topics"] == ["session"]
        assert by_name["agent"]["subscriptions"] == []
        assert by_name["watcher"]["since"] <= out["at"]


async def test_context_peek_must_be_a_boolean_and_has_no_side_effects() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await _session(c)
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SESSION_CONTEXT, "s1", {"peek": "yes"})
        assert ei.value.code == INVALID_PARAMS and "opts.peek" in ei.value.message
        published = d.app.events.published
        await c.call(names.SESSION_CONTEXT, "s1", {"peek": True, "max_tokens": 40})
        assert d.app.series.points("s1") == []  # no usage point
        assert d.app.events.published == published  # and nothing published
        await c.call(names.SESSION_CONTEXT, "s1", {"max_tokens": 40})
        assert d.app.events.published > published  # while a real request does


async def test_an_exchange_point_counts_history_as_the_context_answer_does() -> None:
    async with running_daemon(clock=FakeClock()) as d, d.client() as c:
        await _session(c)
        await c.call(names.SESSION_FINALIZE, "s1", "hello there", "hi, how can I help?")
        answer = await c.call(names.SESSION_CONTEXT, "s1", {"peek": True})
        point = (await c.call(names.SESSION_SERIES, "s1", {}))["points"][-1]
        assert point["kind"] == "exchange"
        assert point["history_tokens"] == answer["history_tokens"]


@pytest.mark.parametrize("action", ["evict snippet", "evict cache entry", "pin"])
@pytest.mark.parametrize("again", ["open", "import"])
async def test_undo_never_writes_into_a_session_deleted_after_the_action(action: str,
                                                                         again: str) -> None:
    """Issue 22: act, delete the session, open (or import) the same id again, undo: refused
    with a clear error, and the new session is left as it was. On the real clock."""
    from memman.errors import CONFLICT

    async with running_daemon() as d, d.client("tui") as c:
        await c.session_open("s1")
        export = None
        if action == "evict snippet":
            sn = (await c.call(names.SCRATCHPAD_WRITE, "s1", "the deploy key is K-42"))["snippet"]
            await c.call(names.SCRATCHPAD_EVICT, "s1", sn["id"])
        elif action == "evict cache entry":
            await c.call(names.CACHE_PUT, "s1", "weather", {"city": "Oslo"}, "rain")
            key = (await c.call(names.CACHE_LIST, "s1"))["entries"][0]["key"]
            await c.call(names.CACHE_EVICT, "s1", key)
        else:
            ids = await _session(c, "s1b")
            await c.call(names.SESSION_PIN, "s1b", ids[1], True)
            export = await c.call(names.SESSION_EXPORT, "s1b")
        sid = "s1b" if action == "pin" else "s1"
        if export is None:
            export = await c.call(names.SESSION_EXPORT, sid)
        await c.call(names.SESSION_DELETE, sid)
        if again == "open":
            await c.session_open(sid)
        else:
            await c.call(names.SESSION_IMPORT, export, {"session_id": sid})
        with pytest.raises(MemmanError) as ei:
            await c.call(names.UNDO, {})
        assert ei.value.code == CONFLICT and "deleted after this" in ei.value.message
        assert d.app.scratchpad.peek(sid) == []
        assert (await c.call(names.CACHE_LIST, sid))["entries"] == []


@pytest.mark.parametrize("target", ["preference", "rule", "business"])
async def test_undo_never_writes_into_a_scope_cleared_after_the_promotion(target: str) -> None:
    """Issue 22: promote (replacing an earlier value), then clear that layer of the user's
    memory (or remove the tenant's agent.md): undo refuses, and writes nothing back."""
    from memman.errors import CONFLICT

    async with running_daemon(docs={"watch": False}) as d, d.client("tui") as c:
        await c.session_open("s", {"user_id": "u", "tenant_id": "t"})
        if target == "preference":
            await c.call(names.MEMORY_LEARN, "u", "drink", "coffee")
        elif target == "rule":
            await c.call(names.MEMORY_APPEND, "u", "procedural",
                         {"condition": "asked for numbers", "action": "a chart"})
        sn = (await c.call(names.SCRATCHPAD_WRITE, "s", "The user prefers tea"))["snippet"]["id"]
        opts = {"preference": {"key": "drink", "replace": True},
                "rule": {"condition": "asked for numbers", "replace": True},
                "business": {"key": "drink", "replace": True}}[target]
        await c.call(names.SCRATCHPAD_PROMOTE, "s", sn, target, opts)
        if target == "business":
            await c.call(names.DOCS_DELETE, "t", "agent.md")
        else:
            await c.call(names.MEMORY_CLEAR, "u", "semantic" if target == "preference"
                         else "procedural")
        with pytest.raises(MemmanError) as ei:
            await c.call(names.UNDO, {})
        assert ei.value.code == CONFLICT and "after this promotion" in ei.value.message
        if target == "preference":
            assert await c.call(names.MEMORY_RECALL, "u", "drink") is None
        elif target == "rule":
            assert (await c.call(names.MEMORY_STATS, "u"))["procedural_rule_count"] == 0
