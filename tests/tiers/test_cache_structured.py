"""A structured tool result comes back from cache_lookup as the structure that was put, also
after a restart (read back from SQLite); the context still gets it as JSON text."""

from __future__ import annotations

import json

from tests.helpers import running_daemon, short_tmpdir

RESULT = {"city": "Lyon", "temps": [11.5, 13, None], "ok": True, "nested": {"k": "v"}}


async def test_structured_result_round_trips_through_the_cache_and_a_restart() -> None:
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        await c.session_open("s")
        await c.cache_put("s", "weather", {"city": "Lyon"}, RESULT)
        await c.cache_put("s", "echo", {"x": 1}, "plain text")
        await c.cache_put("s", "count", {"x": 2}, 42)
        hit = await c.cache_lookup("s", "weather", {"city": "Lyon"})
        assert hit["result"] == RESULT and isinstance(hit["result"], dict)
        assert (await c.cache_lookup("s", "echo", {"x": 1}))["result"] == "plain text"
        assert (await c.cache_lookup("s", "count", {"x": 2}))["result"] == 42
    async with running_daemon(root) as d, d.client() as c:
        hit = await c.cache_lookup("s", "weather", {"city": "Lyon"})
        assert hit["result"] == RESULT
        listed = {e["tool_name"]: e["result"] for e in (await c.cache_list("s"))["entries"]}
        assert listed["weather"] == RESULT and listed["echo"] == "plain text"
        # the tool message in the context carries the JSON text of the structure
        tool_msgs = [m for m in d.app.cache.context_messages("s") if m.get("role") == "tool"]
        assert any(json.loads(m["content"]) == RESULT for m in tool_msgs)
