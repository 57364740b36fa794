"""Crafted input that used to stop writes, break reads or leave memory the disk does not hold.

Each test is one problem an attack run found: an import with huge ids, a failed import that
was saved anyway, memory kept after a refused write, unchecked values. Every refusal is -32602
naming the path of the bad value, and afterwards the daemon still writes, and what it answers
matches what is on disk (checked across a restart).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3

import msgpack
import pytest

from memman import names
from memman.errors import INVALID_PARAMS, STORAGE_ERROR, MemmanError
from memman.protocol import pack
from tests.helpers import running_daemon, short_tmpdir
from tests.wire import RawConn

EXT = msgpack.ExtType(7, b"\x01\x02")


async def _refused(c, method: str, *params, path: str) -> MemmanError:
    with pytest.raises(MemmanError) as ei:
        await c.call(method, *params)
    assert ei.value.code == INVALID_PARAMS, ei.value
    assert f"'{path}'" in ei.value.message, ei.value.message
    return ei.value


async def _export_of_one(c) -> dict:
    await c.call(names.SESSION_OPEN, "src")
    for i in range(3):
        await c.call(names.SESSION_ADD, "src", {"content": f"m{i}"})
    return await c.call(names.SESSION_EXPORT, "src")


def _disk_entries(root, session_id: str) -> list[int]:
    db = sqlite3.connect(root / "data" / "memman.db")
    try:
        return [r[0] for r in db.execute("SELECT id FROM entries WHERE session_id=? ORDER BY id",
                                         (session_id,))]
    finally:
        db.close()


async def test_import_with_the_largest_ids_keeps_every_write_working() -> None:
    """Problem 1: ids in a file are never trusted, so 2^63-1 cannot exhaust the id space;
    2^64-1 is refused naming data.entries[0].id; writes from everyone go on."""
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        data = await _export_of_one(c)
        huge = json.loads(json.dumps(data))
        huge["entries"][0]["id"] = 2**63 - 1
        r = await c.call(names.SESSION_IMPORT, huge, {"session_id": "big"})
        assert r["ids_remapped"]
        got = await c.call(names.SESSION_GET, "big")
        assert max(e["id"] for e in got["entries"]) < 2**40
        await c.call(names.SESSION_ADD, "big", {"content": "after"})  # the writer lives
        too_big = json.loads(json.dumps(data))
        too_big["entries"][0]["id"] = 2**64 - 1
        await asyncio.wait_for(_refused(c, names.SESSION_IMPORT, too_big, {"session_id": "b2"},
                                        path="data.entries[0].id"), 10)
        await asyncio.wait_for(c.call(names.SESSION_ADD, "src", {"content": "still"}), 10)
        assert "b2" not in d.app.sessions.by_id
    async with running_daemon(root) as d, d.client() as c:  # after a restart as well
        await asyncio.wait_for(c.call(names.SESSION_ADD, "big", {"content": "restart"}), 10)
        assert _disk_entries(root, "big") == [e.id for e in d.app.sessions.get("big").entries]


async def test_the_writer_fails_the_request_and_goes_on() -> None:
    """Problem 1, at the store: a value SQLite cannot bind fails its request with -32003;
    the writer goes on serving every other write."""
    async with running_daemon() as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "s")
        store = d.app.store
        bad = ("INSERT INTO entries(id, session_id, data) VALUES (?,?,?)", (2**63, "s", "{}"))
        ok = ("INSERT INTO sessions(id, meta) VALUES (?,?)", ("x", "{}"))
        results = await asyncio.gather(store.write([bad]), store.write([ok]),
                                       return_exceptions=True)
        assert isinstance(results[0], MemmanError) and results[0].code == STORAGE_ERROR
        assert results[1] is None
        # the id sequence running out is a clear -32003, and the next write still works
        d.app.sessions._ids = iter([2**63])
        with pytest.raises(MemmanError) as ei:
            await c.call(names.SESSION_ADD, "s", {"content": "x"})
        assert ei.value.code == STORAGE_ERROR and "exhausted" in ei.value.message
        d.app.sessions._ids = iter(range(1000, 2000))
        await asyncio.wait_for(c.call(names.SESSION_ADD, "s", {"content": "y"}), 10)
        assert [e.content for e in d.app.sessions.get("s").entries] == ["y"]


async def test_a_writer_that_cannot_go_on_stops_the_daemon_non_zero() -> None:
    """If the writer task itself breaks (a fault injected here: real input can no longer do
    it), queued and later writes fail at once with -32003 and the server stops with a
    non-zero exit code instead of accepting work it cannot do."""
    async with running_daemon() as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "s")

        async def broken(batch):
            raise RuntimeError("injected writer fault")

        d.app.store._commit_batch = broken  # type: ignore[method-assign]
        with pytest.raises(MemmanError) as ei:
            await asyncio.wait_for(c.call(names.SESSION_ADD, "s", {"content": "x"}), 10)
        assert ei.value.code == STORAGE_ERROR and "writer stopped" in ei.value.message
        with pytest.raises(MemmanError) as ei:  # refused at once, not left waiting
            await asyncio.wait_for(d.app.store.write([("SELECT 1", ())]), 5)
        assert ei.value.code == STORAGE_ERROR
        assert d.server.exit_code != 0
        await asyncio.wait_for(d.server._stop.wait(), 10)


async def test_a_refused_import_changes_nothing_and_lists_keep_working() -> None:
    """Problem 2: bad meta values, bad types, duplicate ids — all refused before anything is
    stored, naming the path; session_list works for everyone, before and after a restart."""
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        data = await _export_of_one(c)
        cases = [
            ({"meta": {**data["meta"], "summary": 123}}, "data.meta.summary"),
            ({"meta": {**data["meta"], "counters": [1]}}, "data.meta.counters"),
            ({"meta": {**data["meta"], "max_tokens": "big"}}, "data.meta.max_tokens"),
            ({"meta": {**data["meta"], "updated_at": "zzz"}}, "data.meta.updated_at"),
            ({"meta": {**data["meta"], "max_tokens": True}}, "data.meta.max_tokens"),
            ({"meta": {**data["meta"], "created_at": float("nan")}}, "data.meta.created_at"),
            ({"meta": {**data["meta"], "tenant_id": ""}}, "data.meta.tenant_id"),
            ({"entries": [*data["entries"], data["entries"][0]]}, "data.entries[3].id"),
            ({"entries": [{**data["entries"][0], "metadata": {"b": b"\x00"}}]},
             "data.entries[0].metadata.b"),
            ({"entries": [{**data["entries"][0], "summary_id": 999}]}, "data.entries[0].summary_id"),
            ({"format": "other"}, "data.format"),
        ]
        for change, path in cases:
            await _refused(c, names.SESSION_IMPORT, {**data, **change}, {"session_id": "bad"},
                           path=path)
            assert "bad" not in d.app.sessions.by_id
        assert len(await c.call(names.SESSION_LIST)) == 1
    async with running_daemon(root) as d, d.client() as c:
        assert [s["session_id"] for s in await c.call(names.SESSION_LIST)] == ["src"]
        assert _disk_entries(root, "bad") == []


async def test_refused_adds_leave_nothing_in_memory() -> None:
    """Problem 6: binary or ext values in metadata or tool-call arguments are -32602 and
    nothing stays in memory; an overflowing usage report is refused and the session reads."""
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "s")
        await _refused(c, names.SESSION_ADD, "s", {"content": "x", "metadata": {"b": b"\x00"}},
                       path="entry.metadata.b")
        await _refused(c, names.SESSION_ADD, "s", {"content": "x", "metadata": {"e": EXT}},
                       path="entry.metadata.e")
        await _refused(c, names.SESSION_ADD, "s", {
            "type": "tool_call", "role": "assistant", "content": "",
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": EXT}}}]},
            path="entry.tool_calls[0].function.arguments.a")
        assert d.app.sessions.get("s").entries == []
        await c.call(names.SESSION_REPORT_USAGE, "s", 10, 1)
        await _refused(c, names.SESSION_REPORT_USAGE, "s", 2**64 - 1, 0, path="prompt_tokens")
        await _refused(c, names.SESSION_REPORT_USAGE, "s", 2**63 - 1, 0, path="prompt_tokens")
        for method in (names.SESSION_GET, names.SESSION_EXPORT, names.SESSION_REPORT):
            await c.call(method, "s")
    async with running_daemon(root) as d, d.client() as c:
        assert (await c.call(names.SESSION_GET, "s"))["usage"]["reports"] == 1
        await c.call(names.SESSION_EXPORT, "s")
        assert _disk_entries(root, "s") == []


async def test_unchecked_values_from_the_attack_run_are_refused() -> None:
    """Problem 10: the values that used to reach the code as they came."""
    async with running_daemon() as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "s")
        await _refused(c, names.CACHE_PUT, "s", "t", {}, "r", {"ttl_s": float("nan")},
                       path="opts.ttl_s")
        await _refused(c, names.SESSION_CONTEXT, "s", {"max_tokens": True}, path="opts.max_tokens")
        await _refused(c, names.SESSION_OPEN, "s2", {"max_tokens": True}, path="opts.max_tokens")
        await _refused(c, names.MEMORY_APPEND, "u", "episodic",
                       {"content": "x", "timestamp": float("nan")}, path="entry.timestamp")
        await _refused(c, names.MEMORY_LIST, "u", "episodic", {"limit": "10"}, path="opts.limit")
        await _refused(c, names.MEMORY_LIST, "u", "episodic", {"before_id": 2**64 - 1},
                       path="opts.before_id")
        await _refused(c, names.AUDIT_LIST, {"before_id": float("inf")}, path="filter.before_id")
        await _refused(c, names.AUDIT_LIST, {"limit": {"a": 1}}, path="filter.limit")
        await _refused(c, names.DOCS_SEARCH, "t", "q", {"candidates": "many"},
                       path="opts.candidates")
        await _refused(c, names.MEMORY_LEARN, "u", "k", "v", {"metadata": "str"},
                       path="opts.metadata")
        await _refused(c, names.COUNT_TOKENS, [{"role": "user", "content": b"\xff"}],
                       path="messages[0].content")
        await _refused(c, names.SESSION_PIN, "s", 1, 1, path="pinned")
        assert await c.call(names.PING) == "pong"


async def test_the_declared_schema_is_the_only_check_of_tier_parameters() -> None:
    """The tiers no longer re-check what the method's schema refuses: every refusal still
    names its parameter (-32602), and nothing is written."""
    async with running_daemon() as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "s", {"user_id": "u"})
        await _refused(c, names.SCRATCHPAD_WRITE, "s", "  ", path="text")
        await _refused(c, names.SCRATCHPAD_WRITE, "s", "x", {"salience": 2}, path="opts.salience")
        await _refused(c, names.SCRATCHPAD_WRITE, "s", "x", {"colour": 1}, path="opts.colour")
        await _refused(c, names.CACHE_PUT, "s", "", {}, "r", path="tool")
        await _refused(c, names.CACHE_PUT, "s", "t", {}, "r", {"duration": 0},
                       path="opts.duration")
        await _refused(c, names.CACHE_PUT, "s", "t", {}, "r", {"call_id": 7}, path="opts.call_id")
        await _refused(c, names.DOCS_ADD, "t", {"content": " "}, path="doc.content")
        await _refused(c, names.DOCS_ADD, "t", {"content": "x", "title": 3}, path="doc.title")
        await _refused(c, names.MEMORY_APPEND, "u", "working",
                       {"content": " ", "session_id": "s"}, path="entry.content")
        assert d.app.scratchpad.pad("s") == {}
        assert (await c.call(names.CACHE_LIST, "s"))["entries"] == []
        assert (await c.call(names.DOCS_LIST, "t"))["docs"] == []


async def test_an_empty_array_stands_for_an_empty_options_map() -> None:
    """Neovim's Lua sends an empty table {} as []: every optional options map accepts it."""
    async with running_daemon() as d, d.client() as c:
        r = await c.call(names.SESSION_OPEN, "s", [])
        assert r["created"]
        await c.call(names.SESSION_ADD, "s", {"content": "hello"})
        assert (await c.call(names.SESSION_GET, "s", []))["entries"]
        await c.call(names.SESSION_CONTEXT, "s", [])
        await c.call(names.SCRATCHPAD_WRITE, "s", "note", [])
        assert (await c.call(names.AUDIT_LIST, []))["records"] == []
        assert await c.call(names.SESSION_LIST, []) and await c.call(names.SESSION_EXPORT, "s", [])
        await _refused(c, names.SESSION_OPEN, "s", [1], path="opts")


async def test_a_map_keyed_by_an_array_is_a_parse_error() -> None:
    """A map keyed by an array or a map cannot be decoded: -32700, then the connection closes;
    the daemon serves the next connection."""
    async with running_daemon() as d:
        for key in ([1, 2], {"k": 1}):
            # msgpack-python cannot pack such a map; build the bytes by hand
            frame = (b"\x94\x00\x01" + pack(names.SESSION_LIST) + b"\x91\x81" + pack(key)
                     + pack("v"))
            async with RawConn.open(d.socket) as rc:
                await rc.send(frame)
                out = await rc.outcome(10)
                assert out.closed and -32700 in out.error_codes(), out.messages
        async with RawConn.open(d.socket) as rc:
            assert (await rc.call(1, names.PING))[3] == "pong"


def test_the_import_schema_covers_every_field_of_the_model() -> None:
    """A field added to the model must be added to the import schema too (else exports stop
    importing): every dataclass field has a declared spec."""
    import dataclasses

    from memman import schemas as sc
    from memman_daemon.model import Cycle, Entry, Exchange, SessionMeta, Summary

    pairs = [(SessionMeta, sc.META), (Exchange, sc.EXCHANGE), (Cycle, sc.CYCLE),
             (Entry, sc.ENTRY), (Summary, sc.SUMMARY)]
    for cls, spec in pairs:
        missing = {f.name for f in dataclasses.fields(cls)} - set(spec.fields)
        assert not missing, f"{cls.__name__}: {missing} not in the import schema"


async def test_a_long_word_is_answered() -> None:
    """A 200,000-character word without digits (the identifier pattern of the near-duplicate
    check used to backtrack quadratically on it: minutes with the event loop blocked). Bounded
    by a generous timeout: a hang fails, a slow machine does not."""
    async with running_daemon(docs={"watch": False}) as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "s")
        await c.call(names.SCRATCHPAD_WRITE, "s", "users usually prefer short answers")
        r = await asyncio.wait_for(c.call(names.SCRATCHPAD_WRITE, "s", "x" * 200_000), 120)
        assert r["created"]
        assert await asyncio.wait_for(c.call(names.PING), 10) == "pong"
