"""Export / import / clear, the usage ledger, and token counts vs billed prompt tokens."""

from __future__ import annotations

from memman.errors import CONFLICT, MemmanError
from memman_daemon.clock import FakeClock
from tests.engine.test_context import FILLER, add, tool_pair
from tests.helpers import running_daemon


async def _rich_session(c) -> None:
    await c.call("memman_session_open", "s", {"max_tokens": 3000})
    await add(c, "s", "You are terse.", role="system")
    for i in range(30):
        await add(c, "s", f"{FILLER} {i}")
        if i % 10 == 5:
            await tool_pair(c, "s", i, f"out {i}")
    for i in range(12):
        await c.call("memman_session_finalize", "s", f"q{i}", f"a{i}")
    await c.call("memman_session_compact", "s")
    await c.call("memman_session_context", "s", {"max_tokens": 150})
    await c.call("memman_session_report_usage", "s", 1234, 56)


def _ids_renumbered(export: dict) -> dict:
    """The export with every entry / summary id replaced by its rank (imports take fresh ids)."""
    ids = sorted({e["id"] for e in export["entries"]} | {sm["id"] for sm in export["summaries"]})
    rank = {old: i + 1 for i, old in enumerate(ids)}
    cycle = export["cycle"]
    start = cycle["start_id"]
    later = [rank[i] for i in ids if i >= start]
    norm_cycle = {**cycle, "start_id": min(later) if later else "past-the-end",
                  "agent_message_ids": [rank[i] for i in cycle["agent_message_ids"]]}
    out = dict(export)
    out["entries"] = [{**e, "id": rank[e["id"]],
                       "summary_id": rank.get(e["summary_id"], e["summary_id"])}
                      for e in export["entries"]]
    out["summaries"] = [{**sm, "id": rank[sm["id"]], "entry_ids": [rank[i] for i in sm["entry_ids"]]}
                        for sm in export["summaries"]]
    out["links"] = [{"summary_id": rank[x["summary_id"]], "entry_ids": [rank[i] for i in x["entry_ids"]]}
                    for x in export["links"]]
    out["cycle"] = norm_cycle
    exchanges = [{**x, **{k: rank.get(x[k], x[k]) for k in ("first_id", "last_id") if k in x}}
                 for x in export["exchanges"]]
    out["exchanges"] = exchanges
    out["meta"] = {**export["meta"], "cycle": norm_cycle, "exchanges": exchanges}
    return out


async def test_export_import_export_is_identical():
    clock = FakeClock()
    async with running_daemon(clock=clock, compression={"auto_compress": False}) as d, \
            d.client() as c:
        await _rich_session(c)
        first = await c.call("memman_session_export", "s")
        assert first["summaries"] and first["links"] and first["exchanges"]
        assert set(first) >= {"entries", "summaries", "links", "exchanges", "cycle", "stats"}
        await c.call("memman_session_delete", "s")
        r = await c.call("memman_session_import", first, {})
        assert r["ids_remapped"]  # ids in a file are never trusted: always fresh ones
        again = await c.call("memman_session_export", "s")
        assert _ids_renumbered(again) == _ids_renumbered(first)
        assert min(e["id"] for e in again["entries"]) > max(e["id"] for e in first["entries"])
        # into another daemon as well
        async with running_daemon(clock=clock) as d2, d2.client() as c2:
            await c2.call("memman_session_import", first, {})
            assert _ids_renumbered(await c2.call("memman_session_export", "s")) == \
                _ids_renumbered(first)
        # under a new name while the ids are taken: fresh ids, same content
        r = await c.call("memman_session_import", first, {"session_id": "copy"})
        assert r["ids_remapped"]
        copy = await c.call("memman_session_export", "copy")
        assert [e["content"] for e in copy["entries"]] == [e["content"] for e in first["entries"]]
        ex = await c.call("memman_session_expand", "copy", copy["summaries"][0]["id"])
        assert len(ex["entries"]) == len(first["summaries"][0]["entry_ids"])
        try:
            await c.call("memman_session_import", first, {})
        except MemmanError as exc:
            assert exc.code == CONFLICT and "replace" in exc.message
        else:
            raise AssertionError("import over an existing session must fail without replace")


async def test_clear_keeps_the_session_and_removes_its_data():
    async with running_daemon(compression={"auto_compress": False}) as d, d.client() as c:
        events: list[dict] = []
        await c.subscribe(["session"], {"session_id": "s"}, lambda n, p: events.append(p))
        await _rich_session(c)
        r = await c.call("memman_session_clear", "s")
        assert r["entries_removed"] > 0 and r["summaries_removed"] == 1
        exp = await c.call("memman_session_export", "s")
        assert exp["entries"] == [] and exp["summaries"] == [] and exp["meta"]["summary"] == ""
        assert exp["meta"]["max_tokens"] == 3000
        await c.call("memman_ping")
        kinds = {e["kind"] for e in events}
        assert kinds >= {"entry_added", "cycle_finalized", "summary_updated", "compressed",
                         "pruned", "usage", "cleared"}
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


async def test_usage_drift_against_memmans_count():
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {})
        await add(c, "s", "hello there, how are you doing today?")
        ctx = await c.call("memman_session_context", "s", {})
        r = await c.call("memman_session_report_usage", "s", ctx["tokens"] + 2, 10)
        assert r["record"]["memman_tokens"] == ctx["tokens"] and r["record"]["drift"] == 2
        r = await c.call("memman_session_report_usage", "s", ctx["tokens"], 5)
        u = r["usage"]
        assert u["reports"] == 2 and u["last_drift"] == 0 and u["mean_drift"] == 1.0
        exp = await c.call("memman_session_export", "s")
        assert exp["stats"]["usage"]["reports"] == 2


async def test_context_tokens_equal_billed_prompt_tokens_for_published_example():
    """OpenAI cookbook 'How to count tokens with tiktoken': this example bills 129 prompt
    tokens on gpt-3.5-turbo-0613 / gpt-4 (cl100k_base)."""
    example = [
        {"role": "system", "content": "You are a helpful, pattern-following assistant that "
         "translates corporate jargon into plain English."},
        {"role": "system", "name": "example_user", "content": "New synergies will help drive "
         "top-line growth."},
        {"role": "system", "name": "example_assistant", "content": "Things working well together "
         "will increase revenue."},
        {"role": "system", "name": "example_user", "content": "Let's circle back when we have "
         "more bandwidth to touch base on opportunities for increased leverage."},
        {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're "
         "less busy about how to do better."},
        {"role": "user", "content": "This late pivot means we don't have time to boil the ocean "
         "for the client deliverable."},
    ]
    async with running_daemon() as d, d.client() as c:
        await c.call("memman_session_open", "s", {"model": "gpt-4"})
        for m in example:
            await add(c, "s", m["content"], role=m["role"], **({"name": m["name"]} if "name" in m else {}))
        ctx = await c.call("memman_session_context", "s", {})
        assert ctx["messages"] == example
        assert ctx["tokens"] == 129
