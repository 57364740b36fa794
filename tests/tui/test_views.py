"""Pilot tests on the real daemon for the context view as sent, "how full", usage over time,
safe hands (selection, confirmations, undo) and the clients view."""

from __future__ import annotations

import json

from memman import names
from memman_tui.screens.clients import ClientsScreen
from memman_tui.screens.context import ContextScreen, ItemScreen
from memman_tui.screens.dialogs import ConfirmScreen
from memman_tui.screens.session import SessionScreen
from memman_tui.widgets.chart import UsageChart
from tests.helpers import running_daemon, short_tmpdir
from tests.tui.conftest import connected, real_app, wait_async, wait_for
from tests.tui.test_actions import seed

SIZE = (150, 44)


async def rich_session(c, sid: str = "s1", budget: int = 900) -> None:
    """A session whose context has every kind: a system prompt, a linked summary, gaps,
    cached tool results, tool calls and results, and a rolling summary."""
    await c.session_open(sid, {"user_id": "alice", "tenant_id": "acme", "max_tokens": budget})
    await c.session_add(sid, {"type": "context", "role": "system", "pinned": True,
                              "content": "[SYSTEM: you are a careful analyst for acme]"})
    for i in range(24):
        role = "user" if i % 2 == 0 else "assistant"
        await c.session_add(sid, {"role": role, "content": f"message {i}: the plan step {i} "
                                  f"uses table t{i} and threshold {i * 7} " + "pad " * 12})
    await c.call(names.SESSION_COMPACT, sid)
    await c.session_add(sid, {"type": "tool_call", "role": "assistant", "content": "",
                              "tool_calls": [{"id": "call_1", "type": "function", "function": {
                                  "name": "db_query", "arguments": "{\"q\": 1}"}}]})
    await c.session_add(sid, {"type": "tool_result", "role": "tool", "tool_call_id": "call_1",
                              "content": "[Tool: db_query] success: 14 rows"})
    for i in range(11):  # past 10 exchanges the oldest folds into the rolling summary
        await c.call(names.SESSION_FINALIZE, sid, f"question {i}?", f"answer {i}")
    await c.call(names.CACHE_PUT, sid, "weather", {"city": "Oslo"}, "rain, 4°C",
                 {"duration": 3})
    await c.session_add(sid, {"role": "user", "content": "and what next?"})


async def open_session(pilot, sid: str = "s1") -> SessionScreen:
    await connected(pilot)
    pilot.app.open_session(sid)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SessionScreen)
                   and pilot.app.screen.loads > 0 and pilot.app.screen.view is not None,
                   "the session screen")
    return pilot.app.screen


async def test_context_view_equals_the_daemons_answer_at_the_same_moment():
    async with running_daemon() as d, d.client() as c:
        await rich_session(c)
        assert await d.server.app.recall.drained(60)  # retrieval ranks with every vector
        export = short_tmpdir()
        app = real_app(str(d.socket), export_dir=str(export))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("v")  # the selected (only) session's context as sent
            await wait_for(pilot, lambda: isinstance(app.screen, ContextScreen)
                           and app.screen.loads > 0, "the context view")
            screen = app.screen
            answer = await c.call(names.SESSION_CONTEXT, "s1", {})
            view = screen.view
            assert view.messages == answer["messages"]  # same messages, same order
            assert view.sent_tokens == answer["tokens"]
            assert view.budget == answer["budget"]
            kinds = [p.kind for p in view.parts]
            assert {"system_prompt", "cached_tool_result", "message"} <= set(kinds), kinds
            assert answer["gaps"] and answer["pruned"]  # what was left out is listed
            table = screen.query_one("#parts")
            assert table.row_count == len(answer["messages"])
            for i, msg in enumerate(answer["messages"]):  # row i is message i
                row = table.get_row_at(i)
                assert row[0] == str(i + 1) and str(row[4]).startswith(f"{msg['role']}: ")
            # breakdown: every kind, tool definitions, free space; sums to the parts
            bd = view.breakdown
            assert "tool_definitions" in bd and bd["free"] == max(0, view.budget - view.sent_tokens)
            extras = ("tool_definitions", "free", "reply_priming")
            assert sum(v for k, v in bd.items() if k not in extras) == \
                sum(p.tokens for p in view.parts)
            assert view.sent_tokens == sum(p.tokens for p in view.parts) + \
                bd.get("reply_priming", 0) + bd["tool_definitions"]  # the same token total
            assert screen.query_one("#breakdown").row_count >= len(set(kinds)) + 2
            # w writes the whole list as JSON
            await pilot.press("w")
            await wait_for(pilot, lambda: list(export.glob("*.json")), "the JSON file")
            written = json.loads(next(export.glob("*.json")).read_text())
            assert written["messages"] == answer["messages"]
            assert [p["kind"] for p in written["parts"]] == kinds
            # Enter opens the selected message in full; y copies it
            await pilot.press("G")  # the newest message
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ItemScreen), "the item")
            assert app.screen.body == "and what next?"
            await pilot.press("y")
            assert app.clipboard == "and what next?"
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.screen is screen, "back to the context view")


async def test_a_summary_opens_with_the_entries_it_replaced():
    async with running_daemon() as d, d.client() as c:
        await rich_session(c)
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            await pilot.press("5")  # the summaries panel
            tree = screen.query_one("#summaries")
            await wait_for(pilot, lambda: screen.focused is tree, "the summaries panel")
            linked = next(n for n in tree.root.children
                          if isinstance(n.data, dict) and "id" in n.data)
            tree.move_cursor(linked)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ItemScreen)
                           and app.screen.replaced is not None, "the summary in full")
            replaced = app.screen.replaced
            assert [e["id"] for e in replaced] == linked.data["entry_ids"]
            assert "message 0:" in replaced[0]["content"]


async def test_sent_and_history_are_the_daemons_figures_with_the_reserved_segment():
    async with running_daemon() as d, d.client() as c:
        await rich_session(c)
        # retrieval ranks with every vector: the window the screen shows and the one asked
        # for below are then the same (one read before the vectors and one after differ;
        # CI saw 896 against 900)
        assert await d.server.app.recall.drained(60)
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            answer = await c.call(names.SESSION_CONTEXT, "s1", {"peek": True})
            line = str(screen.query_one("#fullness").render())
            sent, history = answer["tokens"], answer["history_tokens"]
            assert "sent " in line and f"{sent:,}/{answer['budget']:,}" in line
            assert f"history {history:,}/{answer['budget']:,}" in line
            cached = answer["cached_tools"]["tokens"]
            assert cached > 0 and f"reserved {cached:,}" in line


async def test_the_chart_shows_the_past_and_thresholds_notify():
    async with running_daemon() as d, d.client() as c:
        await rich_session(c, budget=4000)
        await c.call(names.SESSION_CONTEXT, "s1", {})  # points made before the TUI starts
        await c.call(names.SESSION_FINALIZE, "s1", "q", "a")
        before = (await c.call(names.SESSION_SERIES, "s1", {}))["points"]
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await wait_for(pilot, lambda: app.live.series.get("s1"), "the overview's series")
            spark = app.screen.query_one("#sessions").get_row("s1")[4]
            assert str(spark).strip() not in ("", "-")
            screen = await open_session(pilot)
            chart = screen.query_one("#chart", UsageChart)
            assert [p["id"] for p in chart.points] == [p["id"] for p in before]
            # a smaller budget: the next context request crosses 100 % of it
            for _ in range(12):
                await c.session_add("s1", {"role": "user", "content": "more words " * 40})
            await c.call(names.SESSION_CONTEXT, "s1", {"max_tokens": 300})
            await wait_for(pilot, lambda: len(chart.points) > len(before), "the new point")
            await wait_for(pilot, lambda: any("crossed" in n.message
                                              for n in app._notifications),
                           "the threshold notification")


async def _own_row(c, sid: str, entry_id: int) -> bool:
    """Does the daemon send this entry as its own message (not folded into a summary)?"""
    answer = await c.call(names.SESSION_CONTEXT, sid, {"peek": True})
    return any(p["entry_ids"] == [entry_id] for p in answer["parts"])


async def test_recalled_lines_show_their_source_and_d_excludes_one_u_undoes():
    async with running_daemon() as d, d.client() as c:
        await c.session_open("old", {"user_id": "alice"})
        await c.session_add("old", {"role": "user", "content": "The VPN gateway is vpn-2.corp.",
                                    "created_at": 1709373600.0})
        await c.session_open("new", {"user_id": "alice"})
        await c.session_add("new", {"role": "user", "content": "Which VPN gateway do I use?"})
        assert await d.server.app.recall.drained(60)
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            app.open_context("new")
            await wait_for(pilot, lambda: isinstance(app.screen, ContextScreen)
                           and app.screen.loads > 0, "the context view")
            screen = app.screen
            table = screen.query_one("#parts")
            keys = [k.value for k in table.rows]
            rkey = f"r{(await c.session_get('old'))['entries'][0]['id']}"
            assert rkey in keys  # one row per recalled entry
            row = table.get_row(rkey)
            assert str(row[3]) == "old" and "2024-03-02" in str(row[4])
            table.select_key(rkey)
            await pilot.pause()
            assert screen.selected_recalled() is not None, table.selected_key
            await pilot.press("d")
            await wait_for(pilot, lambda: "vpn-2" not in json.dumps(screen.view.messages),
                           "the line leaves the context")
            audit = (await c.call(names.AUDIT_LIST, {"session_id": "new"}))["records"]
            assert audit[0]["action"] == "recall_exclude"
            await pilot.press("u")
            await wait_for(pilot, lambda: screen.view is not None
                           and "vpn-2" in json.dumps(screen.view.messages), "back after undo")


async def test_selection_follows_its_entry_and_is_held_when_it_leaves_the_context():
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1", {"user_id": "alice", "max_tokens": 600})
        await c.session_add("s1", {"type": "context", "role": "system", "pinned": True,
                                   "content": "[SYSTEM: keep me]"})
        ids = []
        for i in range(12):
            e = await c.session_add("s1", {"role": "user" if i % 2 == 0 else "assistant",
                                           "content": f"message number {i} about the plan"})
            ids.append(e["entry"]["id"] if "entry" in e else e["id"])
        keep, doomed = ids[8], ids[2]
        await c.call(names.SESSION_PIN, "s1", keep, True)
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            table = screen.query_one("#context")
            key = next(p.key for p in screen.view.parts if p.entry_ids == [keep])
            table.select_key(key)
            row_before = table.cursor_row
            n = 0
            while await _own_row(c, "s1", doomed) and n < 40:  # the history grows past the budget
                for _ in range(5):
                    await c.session_add("s1", {"role": "user", "content": f"later words {n} "
                                               + "filler " * 12})
                    n += 1
            assert not await _own_row(c, "s1", doomed), "the old entry never folded"
            # the refill follows the next refresh, and the daemon may still be making its
            # search model's files then (the first embedding in a data dir): more steps
            await wait_for(pilot, lambda: all(p.entry_ids != [doomed]
                                              for p in screen.view.parts), "the refill",
                           steps=1500)
            # followed its entry to its new place (rows above it folded into a summary)
            assert table.selected_key == key
            assert table.get_row_index(key) == table.cursor_row != row_before
            # a selected entry that leaves the context: the row is held, still selected, and
            # the person's key acts on it (x pins it back into the context)
            victim = next(p for p in screen.view.parts if p.kind == "message"
                          and p.entry_ids and p.entry_ids[0] not in (keep,))
            table.select_key(victim.key)
            table.focus()
            m = 0
            while await _own_row(c, "s1", victim.entry_ids[0]) and m < 60:
                for _ in range(5):
                    await c.session_add("s1", {"role": "user", "content": f"more {m} "
                                               + "filler " * 12})
                    m += 1
            await wait_for(pilot, lambda: all(p.key != victim.key for p in screen.view.parts),
                           "the entry to leave the context", steps=1500)
            await wait_for(pilot, lambda: "held" in str(table.get_row(victim.key)[3]),
                           "the held row")
            assert table.selected_key == victim.key and table.show_cursor
            assert table.get_row_index(victim.key) == table.cursor_row
            assert "held here while you act" in str(screen.query_one("#why").render())
            await pilot.press("x")
            await wait_for(pilot, lambda: any(e["id"] == victim.entry_ids[0] and e["pinned"]
                                              for e in screen.detail.session["entries"])
                           if isinstance(screen.detail.session, dict) else False, "the pin")
            await wait_for(pilot, lambda: any(p.key == victim.key and p.mark == "pinned"
                                              for p in screen.view.parts), "back in context")
            # moving on ends the hold: a row that is not in the context is not shown again
            await pilot.press("g")
            assert table.selected_key != victim.key


async def test_unpin_of_a_system_entry_asks_with_its_text_and_u_restores_it():
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        await c.session_add("s1", {"type": "context", "role": "system", "pinned": True,
                                   "content": "[SYSTEM: never fold me]"})
        await c.session_add("s1", {"role": "user", "content": "hello"})
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            table = screen.query_one("#context")
            table.select_key(screen.view.parts[0].key)
            await pilot.press("x")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
            assert "[SYSTEM: never fold me]" in app.screen.body
            await pilot.press("n")
            await wait_for(pilot, lambda: app.screen is screen, "the dialog to close")
            assert (await c.session_get("s1"))["entries"][0]["pinned"] is True
            await pilot.press("x")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
            await pilot.press("y")

            async def pinned(value: bool):
                return (await c.session_get("s1"))["entries"][0]["pinned"] is value

            await wait_async(pilot, lambda: pinned(False), "the unpin")
            await pilot.press("u")
            await wait_async(pilot, lambda: pinned(True), "the undo")


async def test_actions_need_their_panel_and_focus_is_unmistakable():
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        await c.session_add("s1", {"role": "user", "content": "hello"})
        await c.call(names.SCRATCHPAD_WRITE, "s1", "a snippet")
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            await pilot.press("4")  # the scratchpad
            scratch = screen.query_one("#scratch")
            await wait_for(pilot, lambda: screen.focused is scratch, "panel 4")
            assert scratch.styles.border_top[0] == "heavy"
            assert screen.query_one("#context").styles.border_top[0] == "round"
            await pilot.press("x")  # pin is a context-panel verb: refused here
            await pilot.pause()
            assert app.screen is screen
            assert not (await c.session_get("s1"))["entries"][0]["pinned"]
            assert any("press 1" in n.message for n in app._notifications)


async def test_evict_names_the_snippet_undo_restores_and_a_rewrite_shows():
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        sn = (await c.call(names.SCRATCHPAD_WRITE, "s1", "The deploy key rotates weekly."))
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            await pilot.press("4", "e")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
            assert "The deploy key rotates weekly." in app.screen.body
            await pilot.press("y")

            async def count():
                return len((await c.call(names.SCRATCHPAD_CANDIDATES, "s1"))["candidates"])

            await wait_async(pilot, lambda: _eq(count(), 0), "the eviction")
            await pilot.press("u")
            await wait_async(pilot, lambda: _eq(count(), 1), "the undo")
            table = screen.query_one("#scratch")
            await wait_for(pilot, lambda: table.row_count == 1 and table.selected_key is None,
                           "the restored row (the selection had cleared with the eviction)")
            await pilot.press("4", "j", "e")  # j selects it again
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
            await pilot.press("y")
            await wait_async(pilot, lambda: _eq(count(), 0), "the eviction again")
            again = await c.call(names.SCRATCHPAD_WRITE, "s1", "the deploy key  rotates weekly.")
            assert again["snippet"]["id"] != sn["snippet"]["id"]
            await wait_for(pilot, lambda: any("evicted before" in n.message
                                              for n in app._notifications), "the notification")
            await wait_for(pilot, lambda: table.row_count == 1
                           and "evicted before" in str(table.get_row_at(0)[0]), "the row mark")


async def _eq(awaitable, value) -> bool:
    return (await awaitable) == value


async def test_clients_view_lists_who_is_connected():
    async with running_daemon() as d, d.client("watcher-agent") as c:
        await c.session_open("s1")
        await c.subscribe(topics=["session"], filter={}, callback=lambda *_: None)
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("C")
            await wait_for(pilot, lambda: isinstance(app.screen, ClientsScreen)
                           and app.screen.loads > 0, "the clients view")
            names_shown = {c["name"] for c in app.screen.clients}
            assert {"watcher-agent", "memman-tui"} <= names_shown
            table = app.screen.query_one("#clients")
            rows = [table.get_row_at(i) for i in range(table.row_count)]
            watcher = next(r for r in rows if str(r[1]) == "watcher-agent")
            assert "session" in str(watcher[6])
            assert any("this TUI" in str(r[1]) for r in rows)


async def test_a_cache_expiry_is_a_notification_and_shows_as_expired():
    from memman_daemon.clock import FakeClock

    clock = FakeClock()
    async with running_daemon(clock=clock) as d, d.client() as c:
        await c.session_open("s1")
        await c.call(names.CACHE_PUT, "s1", "weather", {"city": "Oslo"}, "rain",
                     {"duration": 3, "ttl_s": 5.0})
        app = real_app(str(d.socket))
        app.clock = clock.now  # the TUI reads TTLs on the daemon's clock
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            table = screen.query_one("#cache")
            await wait_for(pilot, lambda: table.row_count == 1, "the cache row")
            clock.advance(10)
            screen.fill_cache()
            assert "expired" in str(table.get_row_at(0)[1])
            assert await c.call(names.CACHE_LOOKUP, "s1", "weather", {"city": "Oslo"}) is None
            await wait_for(pilot, lambda: any("expired" in n.message
                                              for n in app._notifications),
                           "the expiry notification")


async def test_delete_asks_naming_the_session_and_d_is_delete_everywhere():
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1", {"user_id": "alice"})
        await c.session_add("s1", {"role": "user", "content": "hello"})
        await c.session_open("s2", {"user_id": "bob"})
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("e")  # evict is not a verb here: nothing happens
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen)
            await pilot.press("d")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
            assert "s1: user alice, 1 entries" in app.screen.body
            await pilot.press("y")

            async def gone():
                return [s["session_id"] for s in await c.call(names.SESSION_LIST)] == ["s2"]

            await wait_async(pilot, gone, "the deletion")


async def test_the_header_shows_the_embedder_and_a_reembeds_progress():
    from memman_tui.widgets.daemon_header import DaemonHeader

    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        await c.call(names.MEMORY_APPEND, "ana", "episodic", {"content": "Ana wants EUR"})
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            header = app.screen.query_one(DaemonHeader)
            model_id = d.app.embedder.model_id
            await wait_for(pilot, lambda: model_id in str(header.render()), "the model in force")
            # the daemon's own stats while a re-embed runs (its progress map, as memman_stats
            # sends it mid-pass)
            stats = dict(app.stats)
            stats["embeddings"] = {**stats["embeddings"], "reembed": {
                "state": "running", "model_id": model_id, "done": 1200, "total": 5000,
                "passes": 1, "rate_per_s": 900.0}}
            header.show_stats(stats, 0.0)
            shown = str(header.render())  # read at once: the next stats tick redraws it
            assert f"{model_id}, re-embedding 1,200/5,000 (24%, 900/s)" in shown


async def test_one_number_for_how_full_after_a_request_with_its_own_budget():
    """After `memman context chat-1 --max-tokens 60` on a session of 8,000 tokens, the
    overview, the session gauge and `memman sessions --json` report the same fullness against
    the session's budget, and the small request is shown as such."""
    import asyncio
    import subprocess
    import sys

    from memman.fullness import fullness
    from memman_tui.screens.overview import OverviewScreen

    async with running_daemon() as d, d.client() as c:
        await c.session_open("chat-1", {"user_id": "ana", "max_tokens": 8000})
        await c.session_add("chat-1", {"role": "system", "content": "You are terse."})
        for i in range(6):
            await c.session_add("chat-1", {"role": "user" if i % 2 == 0 else "assistant",
                                           "content": f"turn {i}: the invoice total is {i}00"})
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            # before any request: the overview shows the preview, marked
            await wait_for(pilot, lambda: "*" in str(
                app.screen.query_one("#sessions").get_row("chat-1")[2]), "the preview")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "memman_cli.cli", "--socket", str(d.socket), "sessions",
                "--json", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, _ = await proc.communicate()
            assert json.loads(out)[0]["fullness"]["preview"] is True
            screen = await open_session(pilot, "chat-1")
            before = screen.fullness()
            assert before.preview and "sent (preview)" in str(
                screen.query_one("#fullness").render())
            small = await c.session_context("chat-1", {"max_tokens": 60})
            assert small["budget"] == 60
            await wait_for(pilot, lambda: not screen.fullness().preview, "the usage point")
            # the gauge's text follows at its next refresh
            await wait_for(pilot, lambda: "last request" in str(
                screen.query_one("#fullness").render()), "the gauge's text")
            gauge = screen.fullness()
            text = str(screen.query_one("#fullness").render())
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, OverviewScreen), "overview")
            row = app.screen.query_one("#sessions").get_row("chat-1")
            sent_cell, hist_cell = str(row[2]), str(row[3])
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "memman_cli.cli", "--socket", str(d.socket), "sessions",
            "--json", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await proc.communicate()  # the daemon runs in this loop: never block it
        assert proc.returncode == 0, err
        listed = {r["session_id"]: r for r in json.loads(out)}
        f = listed["chat-1"]["fullness"]
    assert gauge.budget == f["budget"] == 8000
    assert gauge.sent_tokens == f["sent_tokens"] == small["tokens"]
    assert gauge.history_tokens == f["history_tokens"]
    assert f["sent_usage"] == round(small["tokens"] / 8000, 4) < 0.05
    assert f["last_request"] == {"tokens": small["tokens"], "budget": 60}
    assert f"last request: {small['tokens']} / 60" in text
    assert f"{small['tokens']:,}/8,000" in text
    assert sent_cell.strip().endswith(f"{f['sent_usage']:.0%}".rjust(3)) or \
        f"{f['sent_usage'] * 100:3.0f}%".strip() in sent_cell
    assert f"{f['history_usage'] * 100:3.0f}%".strip() in hist_cell
    assert fullness(listed["chat-1"], []).sent_tokens is None  # no points: nothing claimed


async def test_a_failed_read_keeps_the_rows_and_the_selection(monkeypatch):
    """A read of the context that fails (the daemon answers an error once) leaves the panel as
    last read, says so, and keeps the person's selection: `x` still acts on it. The failure is
    injected into the TUI's read of the real daemon: a real daemon error cannot be provoked."""
    from memman.errors import INTERNAL_ERROR, MemmanError

    async with running_daemon() as d, d.client() as c:
        await seed(c, entries=8)
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            table = screen.query_one("#context")
            part = next(p for p in screen.view.parts if p.kind == "message" and p.entry_ids)
            table.select_key(part.key)
            table.focus()
            backend = screen.feed.backend
            real = backend.sent_view
            failed = []

            async def failing(sid):
                failed.append(sid)
                raise MemmanError(INTERNAL_ERROR, "internal error in memman_session_context")

            monkeypatch.setattr(backend, "sent_view", failing)
            screen.reload()
            await wait_for(pilot, lambda: failed and screen.detail.errors, "the failed read")
            assert table.selected_key == part.key and table.row_count == len(screen.view.parts)
            assert "as last read" in str(table.border_subtitle)
            await pilot.press("x")

            async def pinned():
                s = await c.session_get("s1")
                return next(e for e in s["entries"] if e["id"] == part.entry_ids[0])["pinned"]

            await wait_async(pilot, pinned, "the pin")
            monkeypatch.setattr(backend, "sent_view", real)
            screen.reload()
            await wait_for(pilot, lambda: not screen.detail.errors, "a read that works")
            assert "as last read" not in str(table.border_subtitle)
