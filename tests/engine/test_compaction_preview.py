"""The preview names exactly what `compact` folds next (the TUI's ▸next marks come from it)."""

from tests.helpers import running_daemon


async def test_compaction_preview_matches_what_compact_folds() -> None:
    async with running_daemon(compression={"recent_window": 4, "min_entries": 3,
                                           "auto_compress": False}) as d, d.client() as c:
        await c.session_open("s")
        sys_id = (await c.session_add("s", {"role": "system", "content": "You are terse."}))["id"]
        ids = [(await c.session_add("s", {"role": "user" if i % 2 == 0 else "assistant",
                                          "content": f"message number {i}"}))["id"]
               for i in range(9)]
        await c.session_pin("s", ids[1], True)
        planned = (await c.session_preview("s"))["compaction"]
        # older than the newest 4, minus the pinned entry and the system prompt
        assert planned["entry_ids"] == [ids[0], *ids[2:5]]
        assert planned["automatic"] is False and sys_id not in planned["entry_ids"]
        done = await c.session_compact("s")
        assert done["summary"]["entry_ids"] == planned["entry_ids"]
        after = (await c.session_preview("s"))["compaction"]
        assert after["entry_ids"] == [] and "fewer than 3" in after["reason"]
