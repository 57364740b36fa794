"""Each parameter is checked once, by the method's declared schema (``memman.api``): the
shapes the tiers used to check again below ``api/`` are refused before a handler runs, with
-32602 naming the parameter, and the daemon goes on serving. What needs more than one field
(a semantic entry's key, a working entry's session, a session of another user) is still the
handler's, and is shown here too so the split stays visible."""

from __future__ import annotations

import pytest

from memman import names
from memman.errors import INVALID_PARAMS, MemmanError
from tests.helpers import running_daemon

#: (method, params, the path the refusal names): each was checked a second time below api/
SCHEMA_CASES = [
    (names.MEMORY_APPEND, ("u1", "episodic", "not a map"), "entry"),
    (names.MEMORY_APPEND, ("u1", "episodic", {"content": 7}), "entry.content"),
    (names.MEMORY_APPEND, ("u1", "episodic", {"content": "x", "metadata": [1]}),
     "entry.metadata"),
    (names.MEMORY_APPEND, ("u1", "episodic", {"content": "x", "timestamp": "noon"}),
     "entry.timestamp"),
    (names.MEMORY_COMPACT, ("u1", "episodic", {"keep_last": -1}), "opts.keep_last"),
    (names.MEMORY_SEARCH, ("u1", "episodic", "tea", {"mode": "fuzzy"}), "opts.mode"),
    (names.MEMORY_SEARCH, ("u1", "procedural", "tea", {"flow": 3}), "opts.flow"),
    (names.MEMORY_SEARCH, ("u1", "procedural", "tea", {"threshold": 2}), "opts.threshold"),
    (names.MEMORY_PLAYBOOK, ("u1", "tea", {"colour": "red"}), "opts.colour"),
    (names.MEMORY_PLAYBOOK, ("u1", "tea", {"session_id": 5}), "opts.session_id"),
    (names.MEMORY_PLAYBOOK, ("u1", "tea", {"threshold": "high"}), "opts.threshold"),
    (names.SCRATCHPAD_PROMOTE, ("s1", 1, "everywhere", {}), "target"),
    (names.SCRATCHPAD_PROMOTE, ("s1", 1, "business", {"key": 9}), "opts.key"),
    (names.DOCS_SEARCH, ("t1", "   ", {}), "query"),
    (names.DOCS_REMOVE, ("t1", 2.5), "ref"),
    (names.SESSION_REPORT_USAGE, ("s1", -1, 0), "prompt_tokens"),
    (names.SESSION_REPORT_USAGE, ("s1", 1, -1), "completion_tokens"),
    (names.SESSION_ADD, ("s1", {"type": "tool_call", "content": "",
                                "tool_calls": [{"id": "c1", "function": "f()"}]}),
     "entry.tool_calls[0].function"),
]

#: what one field's schema cannot say: still refused, by the handler, naming the parameter
HANDLER_CASES = [
    (names.MEMORY_APPEND, ("u1", "semantic", {"content": "tea"}), "entry.key"),
    (names.MEMORY_APPEND, ("u1", "working", {"content": "tea"}), "entry.session_id"),
    (names.MEMORY_APPEND, ("u2", "working", {"content": "tea", "session_id": "s1"}),
     "entry.session_id"),
    (names.MEMORY_PLAYBOOK, ("u2", "tea", {"session_id": "s1"}), "opts.session_id"),
    (names.MEMORY_SEARCH, ("u1", "episodic", "  ", {}), "query"),
]


async def _refused(c, method: str, params: tuple, path: str) -> None:
    with pytest.raises(MemmanError) as ei:
        await c.call(method, *params)
    assert ei.value.code == INVALID_PARAMS, (method, params, ei.value)
    assert f"'{path}'" in ei.value.message, (method, path, ei.value.message)


async def test_each_parameter_is_refused_once_naming_it_and_the_daemon_goes_on() -> None:
    async with running_daemon() as d, d.client() as c:
        await c.call(names.SESSION_OPEN, "s1", {"user_id": "u1", "tenant_id": "t1"})
        await c.call(names.SCRATCHPAD_WRITE, "s1", "Answer refunds in days.", {})
        for method, params, path in SCHEMA_CASES + HANDLER_CASES:
            await _refused(c, method, params, path)
        # every refusal left the daemon serving, and wrote nothing
        assert (await c.call(names.SESSION_GET, "s1"))["entries"] == []
        stats = await c.call(names.MEMORY_STATS, "u1")
        assert stats["episodic_entry_count"] == stats["semantic_entry_count"] == 0
        added = await c.call(names.MEMORY_APPEND, "u1", "episodic",
                             {"content": "prefers green tea", "timestamp": 1_700_000_000})
        assert added["created"]
