"""Layout and keys: the room used at 100x30 and 220x60, vertical keys, number keys, a stable
sort, a log that freezes and filters past lines, and pause that freezes everything."""

from __future__ import annotations

from memman_tui.screens.help import HelpScreen
from memman_tui.screens.session import SessionScreen
from memman_tui.widgets.event_log import EventLog
from tests.helpers import running_daemon
from tests.tui.conftest import connected, real_app, sample_app, wait_for


async def _session(pilot, sid: str = "demo-03") -> SessionScreen:
    await connected(pilot)
    pilot.app.open_session(sid)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SessionScreen)
                   and pilot.app.screen.loads > 0, "the session screen")
    return pilot.app.screen


def _inside(widget, screen) -> bool:
    r, s = widget.region, screen.region
    return (r.x >= s.x and r.y >= s.y and r.right <= s.right and r.bottom <= s.bottom
            and r.width > 0 and r.height > 0)


async def test_100x30_shows_the_essentials_and_the_help_unclipped():
    app = sample_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await connected(pilot)
        table = app.screen.query_one("#sessions")
        await pilot.pause()
        assert table.virtual_size.width <= table.size.width  # every column fits
        assert _inside(app.screen.query_one("Footer"), app.screen)
        screen = await _session(pilot)
        for wid in ("#context", "#chart", "#cache", "#scratch", "#summaries", "#log", "#fullness",
                    "Footer"):
            widget = screen.query_one(wid)
            assert _inside(widget, screen), wid
            assert widget.size.height >= 1, wid
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        await pilot.pause()
        dialog = app.screen.query_one(".dialog")
        assert _inside(dialog, app.screen)
        assert app.screen.query_one("#help-table").size.width <= dialog.size.width


async def test_panels_grow_with_the_terminal():
    sizes = {}
    for size in ((100, 30), (220, 60)):
        app = sample_app()
        async with app.run_test(size=size) as pilot:
            screen = await _session(pilot)
            await pilot.pause()
            sizes[size] = {w: screen.query_one(f"#{w}").size for w in
                           ("context", "chart", "cache", "summaries", "log")}
    for w, small in sizes[(100, 30)].items():
        big = sizes[(220, 60)][w]
        assert big.height > small.height and big.width > small.width, w


async def test_vertical_keys_and_number_keys():
    app = sample_app()
    async with app.run_test(size=(140, 42)) as pilot:
        screen = await _session(pilot)
        table = screen.query_one("#context")
        await pilot.press("1", "G")
        assert table.cursor_row == table.row_count - 1 and table.selected_key is not None
        await pilot.press("g")
        assert table.cursor_row == 0
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("home")
        assert table.cursor_row == 0
        for n, wid in ((2, "chart"), (3, "cache"), (4, "scratch"), (5, "summaries"),
                       (6, "log"), (1, "context")):
            await pilot.press(str(n))
            assert screen.focused is screen.query_one(f"#{wid}"), n


async def test_default_sort_is_stable_under_activity():
    async with running_daemon() as d, d.client() as c:
        for sid in ("s3", "s1", "s2"):
            await c.session_open(sid)
        app = real_app(str(d.socket))
        async with app.run_test(size=(140, 42)) as pilot:
            await connected(pilot)
            table = app.screen.query_one("#sessions")

            def order():
                return [table.coordinate_to_cell_key((i, 0)).row_key.value
                        for i in range(table.row_count)]

            assert order() == ["s1", "s2", "s3"]
            selected = table.selected_key
            for sid in ("s3", "s2", "s3"):
                await c.session_add(sid, {"role": "user", "content": "activity"})
            await wait_for(pilot, lambda: app.live.sessions["s3"]["entries"] == 2, "the events")
            await pilot.pause(0.3)
            assert order() == ["s1", "s2", "s3"] and table.selected_key == selected


async def test_log_freezes_filters_and_searches_past_lines():
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        app = real_app(str(d.socket))
        async with app.run_test(size=(140, 42)) as pilot:
            await connected(pilot)
            log = app.screen.query_one("#log", EventLog)
            await c.session_add("s1", {"role": "user", "content": "the first alpha line"})
            await c.session_add("s1", {"role": "user", "content": "a beta line"})
            await c.session_add("s1", {"role": "user", "content": "gamma arrives live"})
            await wait_for(pilot, lambda: any("gamma" in ln.text for ln in log.history),
                           "the live line")
            await pilot.press("2", "f")  # focus the log, freeze it
            assert log.frozen
            shown = len(log.lines)
            await c.session_add("s1", {"role": "user", "content": "delta while frozen"})
            await wait_for(pilot, lambda: any("delta" in ln.text for ln in log.history),
                           "the held line")
            await pilot.pause(0.3)
            assert len(log.lines) == shown and log.held >= 1
            assert "frozen" in str(log.border_subtitle)
            await pilot.press("f")
            await wait_for(pilot, lambda: any("delta" in str(line.text) for line in log.lines),
                           "the held line after unfreezing")
            await pilot.press("slash", *"beta")  # filters past lines too
            await wait_for(pilot, lambda: log.query_text == "beta" and log.lines
                           and all("beta" in line.text for line in log.lines), "the filter")
            assert "1 of" in str(log.border_subtitle)


async def test_pause_freezes_everything():
    async with running_daemon() as d, d.client() as c:
        await c.session_open("s1")
        await c.session_add("s1", {"role": "user", "content": "hello"})
        app = real_app(str(d.socket))
        async with app.run_test(size=(140, 42)) as pilot:
            await connected(pilot)
            app.open_session("s1")
            await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen)
                           and app.screen.loads > 0, "the session screen")
            screen = app.screen
            table = screen.query_one("#context")
            rows, loads = table.row_count, screen.loads
            await pilot.press("z")
            assert "PAUSED" in str(screen.query_one("#banner").render())
            for i in range(3):
                await c.session_add("s1", {"role": "user", "content": f"while paused {i}"})
            await wait_for(pilot, lambda: app.live.has_pending(), "events held")
            await pilot.pause(0.5)
            assert table.row_count == rows and screen.loads == loads
            await pilot.press("z")
            await wait_for(pilot, lambda: table.row_count == rows + 3, "the update on resume")
