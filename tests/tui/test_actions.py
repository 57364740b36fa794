"""Pilot tests against the real daemon (in-process, real socket, real SQLite): press keys, then
ask the daemon whether its state really changed."""

from __future__ import annotations

from memman import names
from memman_tui.screens.dialogs import ConflictScreen, NoDaemonScreen, PromoteScreen
from memman_tui.screens.session import SessionScreen
from tests.helpers import running_daemon, short_tmpdir
from tests.tui.conftest import connected, real_app, wait_async, wait_for

SIZE = (150, 44)


async def seed(c, sid: str = "s1", user: str = "alice", entries: int = 6) -> None:
    await c.session_open(sid, {"user_id": user, "tenant_id": "acme"})
    await c.session_add(sid, {"type": "context", "role": "system",
                              "content": "[SYSTEM: you are a careful analyst]"})
    for i in range(entries):
        role = "user" if i % 2 == 0 else "assistant"
        await c.session_add(sid, {"role": role, "content": f"message number {i} about the plan"})


async def open_session(pilot, sid: str = "s1") -> SessionScreen:
    await connected(pilot)
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SessionScreen)
                   and pilot.app.screen.loads > 0, "the session screen")
    screen = pilot.app.screen
    assert screen.session_id == sid
    return screen


async def test_evict_snippet_with_keys():
    async with running_daemon() as d, d.client() as c:
        await seed(c)
        keep = await c.call(names.SCRATCHPAD_WRITE, "s1", "The events table is partitioned by day.")
        gone = await c.call(names.SCRATCHPAD_WRITE, "s1", "This one is noise and should go.", {})
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            await pilot.press("4")  # panel 4: the scratchpad
            table = screen.query_one("#scratch")
            await wait_for(pilot, lambda: screen.focused is table, "the scratchpad panel")
            table.select_key(str(gone["snippet"]["id"]))
            await pilot.press("e")
            await wait_for(pilot, lambda: app.screen.query("#yes"), "the confirmation")
            await pilot.press("y")

            async def evicted():
                cands = await c.call(names.SCRATCHPAD_CANDIDATES, "s1")
                return {x["snippet_id"] for x in cands["candidates"]} == {keep["snippet"]["id"]}

            await wait_async(pilot, evicted, "the snippet to be evicted")


async def test_evict_cache_entries_marked_with_space():
    async with running_daemon() as d, d.client() as c:
        await seed(c)
        for i in range(3):
            await c.call(names.CACHE_PUT, "s1", "db_query", {"q": i}, f"rows {i}", {"duration": 3})
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            table = screen.query_one("#cache")
            await wait_for(pilot, lambda: table.row_count == 3, "the cache rows")
            await pilot.press("3")  # panel 3: the tool cache
            await wait_for(pilot, lambda: screen.focused is table, "the cache panel")
            await pilot.press("space", "space")  # mark the first two rows
            await wait_for(pilot, lambda: len(screen.marks.get("cache", ())) == 2, "two marks")
            await pilot.press("delete")
            await wait_for(pilot, lambda: app.screen.query("#yes"), "the confirmation")
            await pilot.press("y")

            async def one_left():
                return len((await c.call(names.CACHE_LIST, "s1"))["entries"]) == 1

            await wait_async(pilot, one_left, "two cache entries to be evicted")


async def test_cancelled_evict_changes_nothing():
    async with running_daemon() as d, d.client() as c:
        await seed(c)
        await c.call(names.SCRATCHPAD_WRITE, "s1", "Keep me around please.")
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            await pilot.press("4", "e")
            await wait_for(pilot, lambda: app.screen.query("#yes"), "the confirmation")
            await pilot.press("n")
            await wait_for(pilot, lambda: app.screen is screen, "the dialog to close")
        assert len((await c.call(names.SCRATCHPAD_CANDIDATES, "s1"))["candidates"]) == 1


async def test_promote_snippet_to_user_preference():
    async with running_daemon() as d, d.client() as c:
        await seed(c)
        await c.call(names.SCRATCHPAD_WRITE, "s1", "Always show money in EUR with two decimals.",
                     {"explicit": True})
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await open_session(pilot)
            await pilot.press("4", "p")  # panel 4: the scratchpad
            await wait_for(pilot, lambda: isinstance(app.screen, PromoteScreen), "the dialog")
            await pilot.press("enter")  # first target: user preference
            box = app.screen.query_one("#promote-field")
            await wait_for(pilot, lambda: box.has_focus, "the key input")
            box.value = ""
            await pilot.press(*"currency", "enter")

            async def promoted():
                return await c.call(names.MEMORY_RECALL, "alice", "currency")

            got = await wait_async(pilot, promoted, "the preference in user memory")
            assert "EUR" in str(got)


async def test_promotion_conflict_shows_both_values_and_overwrites():
    async with running_daemon() as d, d.client() as c:
        await seed(c)
        await c.call(names.MEMORY_LEARN, "alice", "currency", "USD", {})
        await c.call(names.SCRATCHPAD_WRITE, "s1", "Always show money in EUR.")
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await open_session(pilot)
            await pilot.press("4", "p", "enter")
            box = app.screen.query_one("#promote-field")
            await wait_for(pilot, lambda: box.has_focus, "the key input")
            box.value = "currency"
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, ConflictScreen), "the conflict")
            conflict = app.screen
            assert "USD" in str(conflict.query_one("#existing").render())
            assert "EUR" in str(conflict.query_one("#proposed").render())
            await pilot.press("o")

            async def replaced():
                got = await c.call(names.MEMORY_RECALL, "alice", "currency")
                return got and "EUR" in str(got)

            await wait_async(pilot, replaced, "the preference to be replaced")


async def test_pin_survives_compaction():
    async with running_daemon() as d, d.client() as c:
        await seed(c, entries=30)
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            table = screen.query_one("#context")
            msgs = [p for p in screen.view.parts if p.kind == "message" and p.entry_ids]
            target, neighbour_id = msgs[2].entry_ids[0], msgs[3].entry_ids[0]
            table.select_key(msgs[2].key)
            await pilot.press("x")  # a plain message: no question, u undoes it

            async def pinned():
                s = await c.session_get("s1")
                return next(e for e in s["entries"] if e["id"] == target)["pinned"]

            await wait_async(pilot, pinned, "the pin")
            await pilot.press("c")
            await wait_for(pilot, lambda: app.screen.query("#yes"), "the compaction question")
            assert "entries would fold" in str(app.screen.query_one(".dialog-body").render())
            await pilot.press("y")

            async def compacted():
                s = await c.session_get("s1")
                return s["summaries"] and s

            s = await wait_async(pilot, compacted, "the compaction")
            entry = next(e for e in s["entries"] if e["id"] == target)
            assert entry["pinned"] and entry["summary_id"] is None
            neighbour = next(e for e in s["entries"] if e["id"] == neighbour_id)
            assert neighbour["summary_id"] is not None  # the unpinned one was compressed


async def test_read_only_disables_every_change():
    async with running_daemon() as d, d.client() as c:
        await seed(c, entries=30)
        await c.call(names.SCRATCHPAD_WRITE, "s1", "Always show money in EUR.")
        app = real_app(str(d.socket), read_only=True)
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_session(pilot)
            assert "read-only" in str(screen.query_one("#banner").render())
            await pilot.press("x", "c", "p", "4", "e")
            await pilot.pause()
            assert screen is app.screen  # no dialog opened
        s = await c.session_get("s1")
        assert not s["summaries"] and not any(e["pinned"] for e in s["entries"][1:])
        assert len((await c.call(names.SCRATCHPAD_CANDIDATES, "s1"))["candidates"]) == 1


async def test_live_overview_follows_events_and_filter_sort():
    async with running_daemon() as d, d.client() as c:
        await seed(c, "s1", "alice")
        await seed(c, "s2", "bob")
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            table = app.screen.query_one("#sessions")
            await seed(c, "s3", "carol")
            await wait_for(pilot, lambda: table.row_count == 3, "the new session row")
            await pilot.press("slash", *"bob")
            await wait_for(pilot, lambda: table.row_count == 1, "the filter")
            await pilot.press("escape")
            await wait_for(pilot, lambda: table.row_count == 3, "the filter to clear")
            await pilot.press("z")
            assert "PAUSED" in str(app.screen.query_one("#banner").render())
            await c.session_add("s1", {"role": "user", "content": "while paused"})
            await pilot.pause(0.1)
            await pilot.press("z")
            assert not app.screen.query_one("#banner").display


async def test_no_daemon_offers_to_start_one():
    root = short_tmpdir()
    app = real_app(str(root / "nothing.sock"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, NoDaemonScreen), "the offer")
        assert "No memman daemon" in str(app.screen.query_one(".dialog-title").render())
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, "the app to exit")


async def test_banner_and_reconnect_when_the_daemon_restarts():
    root = short_tmpdir()
    async with running_daemon(root) as d, d.client() as c:
        await seed(c)
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            # stop the daemon under the app
            d.server.request_stop()
            await wait_for(pilot, lambda: app.backend is None, "the disconnect")
            await wait_for(pilot, lambda: "reconnect" in app.connection_text, "the banner")
            assert app.screen.query_one("#banner").display
            # the figures from before the loss are greyed out while disconnected
            assert app.screen.query_one("#daemon").has_class("-stale")
            assert app.screen.query_one("#sessions").has_class("-stale")
            async with running_daemon(root) as d2:
                await wait_for(pilot, lambda: app.backend is not None and not app.connection_text,
                               "the reconnect", steps=1000)
                assert not app.screen.query_one("#daemon").has_class("-stale")
                assert "s1" in app.live.sessions
                assert d2.socket == d.socket


async def test_start_a_daemon_from_the_no_daemon_dialog(monkeypatch):
    import sys

    from tests.helpers import daemon_env

    root = short_tmpdir()
    for key, value in daemon_env(root).items():
        if key.startswith(("MEMMAN_", "TIKTOKEN_")):
            monkeypatch.setenv(key, value)
    cmd = (sys.executable, "-m", "memman_daemon", "--data-dir", str(root / "data"))
    app = real_app(str(root / "s.sock"), start_daemon_cmd=cmd)
    async with app.run_test(size=SIZE) as pilot:
        try:
            await wait_for(pilot, lambda: isinstance(app.screen, NoDaemonScreen), "the offer")
            await pilot.press("s")
            await wait_for(pilot, lambda: app.backend is not None, "the started daemon",
                           steps=2000)
            assert app.started_daemon is not None and app.started_daemon.poll() is None
        finally:
            if app.started_daemon is not None:
                app.started_daemon.terminate()
                app.started_daemon.wait(30)


async def test_palette_help_and_refresh_rate():
    from memman_tui import keymap
    from memman_tui.screens.help import HelpScreen

    async with running_daemon() as d, d.client() as c:
        await seed(c, "s1")
        await seed(c, "s2", "bob")
        app = real_app(str(d.socket), refresh_s=1.0)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("plus")
            assert app.settings.refresh_s == 0.5
            await pilot.press("minus", "minus")
            assert app.settings.refresh_s == 2.0
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
            table = app.screen.table
            listed = {str(cell).split(":")[0] for cell in table.columns[2]._cells}
            for _key, _action, description, _tip, _show in keymap.GLOBAL + keymap.OVERVIEW:
                assert description in listed
            await pilot.press("escape")
            await pilot.press("ctrl+p")
            await pilot.pause()
            await pilot.press(*"Open session s2")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen)
                           and app.screen.session_id == "s2", "the session from the palette")


async def test_memory_screen_lists_and_searches_then_esc_goes_back():
    from memman_tui.screens.memory import MemoryScreen
    from memman_tui.screens.overview import OverviewScreen

    async with running_daemon() as d, d.client() as c:
        await seed(c, "s1", "alice")
        await c.call(names.MEMORY_LEARN, "alice", "currency", "EUR", {})
        await c.call(names.MEMORY_LEARN, "alice", "answer_style", "terse", {})
        await c.call(names.MEMORY_APPEND, "alice", "episodic",
                     {"content": "Answered the churn question for the sales team"})
        app = real_app(str(d.socket))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("m")
            await wait_for(pilot, lambda: isinstance(app.screen, MemoryScreen)
                           and app.screen.loads > 0, "the memory screen")
            screen = app.screen
            assert screen.user_id == "alice"
            prefs = screen.query_one("#preferences")
            assert prefs.row_count == 2
            assert screen.query_one("#episodic").row_count == 1
            loads = screen.loads
            await pilot.press("slash", *"currency")
            await wait_for(pilot, lambda: screen.loads > loads and prefs.row_count == 1,
                           "the search")
            assert "currency" in str(prefs.get_row_at(0)[0])
            await pilot.press("escape")  # clears the search
            await wait_for(pilot, lambda: prefs.row_count == 2, "the full list again")
            await pilot.press("escape")  # back
            await wait_for(pilot, lambda: isinstance(app.screen, OverviewScreen), "overview")
