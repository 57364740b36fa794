"""Session basics through the real daemon, socket and SQLite file."""

import asyncio

import pytest

from memman.errors import INVALID_PARAMS, METHOD_NOT_FOUND, NOT_FOUND, MemmanError
from memman.sync_client import SyncClient
from tests.helpers import running_daemon, short_tmpdir


async def test_open_is_idempotent_and_updates_opts() -> None:
    async with running_daemon() as d, d.client() as c:
        first = await c.session_open("s1", {"user_id": "ana"})
        again = await c.session_open("s1", {"user_id": "ana"})
        assert first["created"] and not again["created"]
        changed = await c.session_open("s1", {"max_tokens": 4000})
        assert changed["max_tokens"] == 4000 and changed["user_id"] == "ana"
        assert [r["session_id"] for r in await c.session_list()] == ["s1"]


async def test_add_counts_tokens_once_and_survives_restart() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        await c.session_open("s1", {"user_id": "ana", "model": "gpt-4"})
        r = await c.session_add("s1", {"role": "user", "content": "hello"})
        assert r["tokens"] == 5
        call = await c.session_add("s1", {"type": "tool_call", "content": "", "tool_calls": [
            {"id": "c1", "function": {"name": "ls", "arguments": {"path": "/"}}}]})
        res = await c.session_add("s1", {"type": "tool_result", "tool_call_id": "c1",
                                         "content": "a b c"})
        assert call["id"] < res["id"]
    async with running_daemon(root) as d, d.client() as c:
        s = await c.session_get("s1")
        assert [e["type"] for e in s["entries"]] == ["message", "tool_call", "tool_result"]
        assert s["entries"][0]["tokens"] == 5
        assert s["entries"][1]["tool_calls"][0]["function"]["arguments"] == '{"path":"/"}'
        assert s["user_id"] == "ana" and s["active_tokens"] == sum(e["tokens"] for e in s["entries"])
        # ids continue after a restart
        r = await c.session_add("s1", {"role": "assistant", "content": "done"})
        assert r["id"] > res["id"]


@pytest.mark.parametrize("entry, field", [
    ({"type": "bogus"}, "entry.type"),
    ({"role": "robot"}, "entry.role"),
    ({"content": 5}, "entry.content"),
    ({"role": "tool", "content": "x"}, "entry.tool_call_id"),
    ({"tool_calls": [{"function": {}}]}, "entry.tool_calls"),
    ({"metadata": [1]}, "entry.metadata"),
])
async def test_bad_entries_name_the_field(entry: dict, field: str) -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        with pytest.raises(MemmanError) as exc:
            await c.session_add("s1", entry)
        assert exc.value.code == INVALID_PARAMS and field in exc.value.message
        assert (await c.session_get("s1"))["entries"] == []


async def test_errors_unknown_method_session_and_param_types() -> None:
    async with running_daemon() as d, d.client() as c:
        with pytest.raises(MemmanError) as exc:
            await c.call("memman_nope")
        assert exc.value.code == METHOD_NOT_FOUND and "unknown method 'memman_nope'" in exc.value.message
        with pytest.raises(MemmanError) as exc:
            await c.session_get("missing")
        assert exc.value.code == NOT_FOUND
        with pytest.raises(MemmanError) as exc:
            await c.session_get(42)
        assert exc.value.code == INVALID_PARAMS and "session_id" in exc.value.message
        with pytest.raises(MemmanError) as exc:  # the typed method would not even allow it
            await c.call("memman_session_open")
        assert "session_id" in exc.value.message


async def test_events_carry_sequence_numbers_and_respect_filters() -> None:
    async with running_daemon() as d, d.client() as c, d.client("other") as other:
        await c.session_open("a")
        await c.session_open("b")
        mine: list[dict] = []
        everything: list[dict] = []
        await c.subscribe(["session"], {"session_id": "a"}, lambda n, p: mine.append(p))
        await other.subscribe([], {}, lambda n, p: everything.append(p))
        for sid in ("a", "b", "a"):
            await c.session_add(sid, {"content": f"hello {sid}"})
        await c.session_delete("b")
        for _ in range(50):
            if len(everything) >= 4:
                break
            await asyncio.sleep(0.01)
        assert [p["seq"] for p in mine] == [1, 2]
        assert all(p["session_id"] == "a" and p["kind"] == "entry_added" for p in mine)
        assert [p["seq"] for p in everything] == [1, 2, 3, 4]
        assert everything[-1]["kind"] == "deleted"


async def test_many_concurrent_requests_on_one_connection() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s")
        results = await asyncio.gather(*(c.session_add("s", {"content": f"m{i}"}) for i in range(200)))
        assert len({r["id"] for r in results}) == 200
        s = await c.session_get("s")
        assert len(s["entries"]) == 200
        assert d.app.store.commits < 200  # group commit shared transactions


async def test_sync_client_and_read_only_mode() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d:
        def script() -> dict:
            with SyncClient(d.socket) as mm:
                mm.session_open("s1")
                mm.session_add("s1", {"content": "from a script"})
                return mm.session_get("s1")
        s = await asyncio.to_thread(script)
        assert s["entries"][0]["content"] == "from a script"
    async with running_daemon(root, read_only=True) as d, d.client() as c:
        assert len((await c.session_get("s1"))["entries"]) == 1
        with pytest.raises(MemmanError) as exc:
            await c.session_add("s1", {"content": "nope"})
        assert exc.value.code == -32005 and "read-only" in exc.value.message


async def test_clients_name_themselves_and_delete_takes_cache_and_scratchpad_along() -> None:
    async with running_daemon() as d, d.client("agent-7") as c:
        await c.session_open("s1")
        await c.cache_put("s1", "search", {"q": "x"}, "found", {})
        await c.scratchpad_write("s1", "Orders spike on Mondays.", {})
        assert [conn.name for conn in d.server.state.connections] == ["agent-7"]
        await c.session_delete("s1")
        await c.session_open("s1")  # a new session of the same name starts empty
        assert (await c.cache_list("s1"))["entries"] == []
        assert (await c.scratchpad_read("s1"))["snippets"] == []
        records = (await c.audit_list({"session_id": "s1"}))["records"]
        assert records and {r["client"] for r in records} == {"agent-7"}


async def test_reopening_as_another_owner_is_refused_unless_reassigned() -> None:
    from memman.errors import CONFLICT

    async with running_daemon() as d, d.client() as c:
        await c.session_open("ana-chat", {"user_id": "ana", "tenant_id": "acme"})
        await c.session_add("ana-chat", {"role": "user", "content": "my pin is 4411"})
        for opts in ({"user_id": "bob"}, {"tenant_id": "initech"},
                     {"user_id": "bob", "tenant_id": "acme"}):
            with pytest.raises(MemmanError) as err:
                await c.session_open("ana-chat", opts)
            assert err.value.code == CONFLICT
            assert "belongs to user 'ana'" in err.value.message
            assert "reassign" in err.value.message
            assert err.value.data["owner"] == {"user_id": "ana", "tenant_id": "acme"}
        s = await c.session_get("ana-chat")
        assert (s["user_id"], s["tenant_id"]) == ("ana", "acme")
        # the same owner, or no owner named, is fine
        assert not (await c.session_open("ana-chat", {"user_id": "ana"}))["created"]
        assert (await c.session_open("ana-chat", {"max_tokens": 500}))["user_id"] == "ana"
        # reassign: moved, and audited
        moved = await c.session_open("ana-chat", {"user_id": "bob", "reassign": True})
        assert moved["user_id"] == "bob" and moved["audit_id"]
        audit = await c.call("memman_audit_list", {"action": "reassign"})
        rec = audit["records"][0] if isinstance(audit, dict) else audit[0]
        assert rec["session_id"] == "ana-chat" and "ana" in rec["what"]
        with pytest.raises(MemmanError) as err:
            await c.session_open("ana-chat", {"reassign": "yes"})
        assert err.value.code == INVALID_PARAMS and "opts.reassign" in err.value.message


async def test_a_reassignment_and_its_audit_row_commit_in_one_transaction() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        await c.session_open("chat", {"user_id": "ana", "tenant_id": "acme"})
        await d.app.store.flush()
        before = d.app.store.commits
        moved = await c.session_open("chat", {"user_id": "bob", "reassign": True})
        await d.app.store.flush()
        assert d.app.store.commits - before == 1
    async with running_daemon(root) as d, d.client() as c:
        assert (await c.session_get("chat", {"entries": False}))["user_id"] == "bob"
        records = (await c.audit_list({"action": "reassign"}))["records"]
        assert [r["id"] for r in records] == [moved["audit_id"]]
        assert records[0]["user_id"] == "bob" and records[0]["target"] == "user:bob"


async def test_the_declared_schema_is_the_one_check() -> None:
    """What the schema refuses is -32602 naming the parameter (nothing below re-checks it);
    what it normalizes (a dated entry) arrives normalized."""
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        for call, path in ((c.session_open("s1", {"bogus": 1}), "opts.bogus"),
                           (c.session_open("s1", {"max_tokens": 0}), "opts.max_tokens"),
                           (c.audit_list({"nope": 1}), "filter.nope"),
                           (c.session_series("s1", {"limit": -1}), "opts.limit"),
                           (c.undo({"dry_run": "yes"}), "opts.dry_run"),
                           (c.session_add("s1", {"created_at": "yesterday"}), "entry.created_at"),
                           (c.session_add("s1", {"created_at": -5}), "entry.created_at"),
                           (c.session_inject("s1", "ctx", [{"result": 1}]),
                            "tool_results[0].tool"),
                           (c.set_client_info("x" * 129), "name")):
            with pytest.raises(MemmanError) as exc:
                await call
            assert exc.value.code == INVALID_PARAMS, (path, exc.value)
            assert f"'{path}'" in exc.value.message, (path, exc.value.message)
        dated = await c.session_add("s1", {"content": "old news", "created_at": "2024-05-01"})
        assert dated["created_at"] == 1714521600.0
        assert d.app.sessions.get("s1").entries[-1].created_at == 1714521600.0
        assert not d.app.sessions.get("s1").meta.injection_done
