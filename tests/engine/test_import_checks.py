"""Imports validated like live input (issue 22): the same per-field schema as session_add,
nested tool calls included; links checked; refused whole with -32602 naming the path; the
import's own limit; its rows written in batches, all or nothing; the session stays usable."""

from __future__ import annotations

import pytest

from memman.errors import INVALID_PARAMS, LIMIT_EXCEEDED, MemmanError
from tests.helpers import running_daemon


def _file(entries: list[dict], **extra) -> dict:
    return {"format": "memman.session/1", "session_id": "imp", "entries": entries, **extra}


def _entry(i: int, **kw) -> dict:
    return {"id": i, "type": "message", "role": "user", "content": f"entry {i}", "tokens": 3,
            "created_at": 1.0, **kw}


def _call(fn) -> dict:
    return {"id": "c1", "type": "function", "function": fn}


POISONED = [
    ("function is an integer", _entry(2, role="assistant", tool_calls=[_call(5)]),
     "data.entries[1].tool_calls[0].function"),
    ("function is nil", _entry(2, role="assistant", tool_calls=[_call(None)]),
     "data.entries[1].tool_calls[0].function"),
    ("function is a string", _entry(2, role="assistant", tool_calls=[_call("f")]),
     "data.entries[1].tool_calls[0].function"),
    ("function name is an integer", _entry(2, role="assistant", tool_calls=[_call({"name": 7})]),
     "data.entries[1].tool_calls[0].function.name"),
    ("tool call without an id", _entry(2, role="assistant", tool_calls=[{"type": "function"}]),
     "data.entries[1].tool_calls[0].id"),
    ("tool calls not an array", _entry(2, role="assistant", tool_calls={"id": "x"}),
     "data.entries[1].tool_calls"),
    ("tool result without its call's id", _entry(2, role="tool", type="tool_result"),
     "data.entries[1].tool_call_id"),
    ("name over 1024 bytes", _entry(2, name="n" * 1025), "data.entries[1].name"),
]


@pytest.mark.parametrize("name,bad,path", POISONED, ids=[p[0] for p in POISONED])
async def test_a_poisoned_import_is_refused_whole(name: str, bad: dict, path: str) -> None:
    async with running_daemon() as d, d.client() as c:
        with pytest.raises(MemmanError) as err:
            await c.call("memman_session_import", _file([_entry(1), bad]), {})
        assert err.value.code == INVALID_PARAMS, err.value
        assert path in err.value.message, err.value.message
        assert "imp" not in d.app.sessions.by_id  # nothing of it was kept
        assert await c.ping() == "pong"


LINKS = [
    ("a link to a summary not in the file",
     {"links": [{"summary_id": 99, "entry_ids": [1]}]}, "data.links[0].summary_id"),
    ("a link to an entry not in the file",
     {"summaries": [{"id": 10, "content": "s", "entry_ids": [1], "tokens": 1,
                     "original_tokens": 3, "ratio": 0.3, "start": 1.0, "end": 1.0,
                     "created_at": 1.0}],
      "links": [{"summary_id": 10, "entry_ids": [1, 77]}]}, "data.links[0].entry_ids[1]"),
    ("a summary naming an entry not in the file",
     {"summaries": [{"id": 10, "content": "s", "entry_ids": [55], "tokens": 1,
                     "original_tokens": 3, "ratio": 0.3, "start": 1.0, "end": 1.0,
                     "created_at": 1.0}]}, "data.summaries[0].entry_ids[0]"),
]


@pytest.mark.parametrize("name,extra,path", LINKS, ids=[x[0] for x in LINKS])
async def test_links_outside_the_file_are_refused(name: str, extra: dict, path: str) -> None:
    async with running_daemon() as d, d.client() as c:
        with pytest.raises(MemmanError) as err:
            await c.call("memman_session_import", _file([_entry(1)], **extra), {})
        assert err.value.code == INVALID_PARAMS and path in err.value.message, err.value
        assert "imp" not in d.app.sessions.by_id


async def test_an_imported_tool_call_is_usable_everywhere() -> None:
    """A valid file with tool calls: context, preview, report and compact all answer (before
    issue 22 a crafted function value made every one of them -32603, for good)."""
    calls = [{"id": "c1", "function": {"name": "search", "arguments": {"q": "x"}}}]
    entries = [_entry(1), _entry(2, role="assistant", type="tool_call", content="",
                                 tool_calls=calls),
               _entry(3, role="tool", type="tool_result", tool_call_id="c1", content="found")]
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_import", _file(entries), {})
        ctx = await c.call("memman_session_context", "imp", {})
        sent = [m for m in ctx["messages"] if m.get("tool_calls")]
        assert sent and sent[0]["tool_calls"][0]["function"] == {
            "name": "search", "arguments": '{"q":"x"}'}  # shaped as session_add shapes it
        await c.call("memman_session_preview", "imp", {})
        await c.call("memman_session_report", "imp")
        await c.call("memman_session_compact", "imp")


async def test_the_import_limit_is_its_own() -> None:
    async with running_daemon(limits={"import_max_entries": 50, "import_max_bytes": 10_000}) as d, \
            d.client() as c:
        with pytest.raises(MemmanError) as err:
            await c.call("memman_session_import", _file([_entry(i) for i in range(1, 52)]), {})
        assert err.value.code == LIMIT_EXCEEDED and "limits.import_max_entries" in err.value.message
        with pytest.raises(MemmanError) as err:
            await c.call("memman_session_import",
                         _file([_entry(1, content="x" * 6000), _entry(2, content="y" * 6000)]), {})
        assert err.value.code == LIMIT_EXCEEDED and "limits.import_max_bytes" in err.value.message
        r = await c.call("memman_session_import", _file([_entry(i) for i in range(1, 51)]), {})
        assert r["entries"] == 50


async def test_an_import_is_written_in_batches_all_or_nothing(tmp_path_factory) -> None:
    """1,200 entries with storage.batch_max_rows = 100: at least 12 commits carry them (no
    one transaction holds the whole file), the old session is replaced only by the last one,
    and the session read back after a restart is the import."""
    from tests.helpers import short_tmpdir

    root = short_tmpdir()
    entries = [_entry(i) for i in range(1, 1201)]
    async with running_daemon(root, storage={"batch_max_rows": 100}) as d, d.client() as c:
        await c.call("memman_session_open", "imp", {})
        await c.call("memman_session_add", "imp", {"content": "the old one"})
        before = d.app.store.commits
        r = await c.call("memman_session_import", _file(entries), {"replace": True})
        assert r["entries"] == 1200
        assert d.app.store.commits - before >= 12
        got = await c.call("memman_session_get", "imp", {"limit": 2000})
        assert [e["content"] for e in got["entries"]] == [f"entry {i}" for i in range(1, 1201)]
    async with running_daemon(root) as d, d.client() as c:
        got = await c.call("memman_session_get", "imp", {"limit": 2000})
        assert len(got["entries"]) == 1200 and got["entries"][0]["content"] == "entry 1"


async def test_rows_of_an_unfinished_import_are_not_loaded() -> None:
    """Rows staged by an import that never finished (the daemon was killed between batches)
    are not loaded into the session of that name, and the next import of it drops them."""
    from memman_daemon.storage.sqlite import sessions as rows
    from tests.helpers import short_tmpdir

    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        await c.call("memman_session_open", "imp", {})
        await c.call("memman_session_add", "imp", {"content": "kept"})
        s = d.app.sessions.by_id["imp"]
        stray = d.app.sessions.build_entry(s, {"content": "half-imported"})
        await d.app.store.write(rows.staged_ops("imp", [stray], []))
    async with running_daemon(root) as d, d.client() as c:
        got = await c.call("memman_session_get", "imp", {})
        assert [e["content"] for e in got["entries"]] == ["kept"]
        await c.call("memman_session_import", _file([_entry(1)]), {"replace": True})
        left = await d.app.store.fetchall("SELECT count(*) FROM entries WHERE session_id=?",
                                          (rows.STAGING + "imp",))
        assert left[0][0] == 0


CREATED_AT = [  # value, accepted (by add and import alike), unix seconds when accepted
    (1_700_000_000, True, 1_700_000_000.0),
    ("2024-05-01T10:00:00Z", True, 1_714_557_600.0),
    ("2024-05-01", True, 1_714_521_600.0),
    (32503679999.0, True, 32503679999.0),
    (32503680000.0, False, None),  # exactly year 3000
    (1e11, False, None),
    (-1, False, None),
    ("yesterday", False, None),
]


@pytest.mark.parametrize("value,ok,ts", CREATED_AT, ids=[repr(c[0]) for c in CREATED_AT])
async def test_created_at_follows_one_rule_for_add_and_import(value, ok: bool, ts) -> None:
    async with running_daemon() as d, d.client() as c:
        await c.session_open("live")
        outcomes = []
        for how in ("add", "import"):
            try:
                if how == "add":
                    await c.session_add("live", {"role": "user", "content": "x",
                                                 "created_at": value})
                    got = (await c.session_get("live", {}))["entries"][-1]["created_at"]
                else:
                    await c.call("memman_session_import",
                                 _file([_entry(1, created_at=value)]), {"replace": True})
                    got = (await c.session_get("imp", {}))["entries"][-1]["created_at"]
                outcomes.append(("ok", got))
            except MemmanError as exc:
                assert exc.code == INVALID_PARAMS and "created_at" in exc.message, exc
                outcomes.append(("refused", None))
        want = ("ok", ts) if ok else ("refused", None)
        assert outcomes == [want, want], outcomes
