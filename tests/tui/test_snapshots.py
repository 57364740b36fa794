"""SVG snapshots of each screen at 140x42, and of the main views at 100x30 and 220x60, with a
frozen clock and canned data (memman_tui.sample).

Update after an intended change: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from memman_tui.screens.clients import ClientsScreen
from memman_tui.screens.context import ContextScreen, ItemScreen
from memman_tui.screens.memory import MemoryScreen
from memman_tui.screens.session import SessionScreen
from tests.tui.conftest import connected, sample_app, wait_for

SIZE = (140, 42)


async def _overview(pilot) -> None:
    await connected(pilot)
    pilot.app.sample_client.replay()
    await wait_for(pilot, lambda: pilot.app.screen.query_one("#log").lines, "the event log")
    await pilot.pause()
    pilot.app.clear_notifications()  # toasts time out: keep them out of the pictures
    await wait_for(pilot, lambda: "clients" in str(pilot.app.screen.query_one("#daemon").render()),
                   "the daemon header")


async def _session(pilot) -> None:
    await _overview(pilot)
    pilot.app.open_session("demo-03")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SessionScreen)
                   and pilot.app.screen.loads > 0, "the session screen")


async def _memory(pilot) -> None:
    await _overview(pilot)
    pilot.app.push_screen(MemoryScreen(pilot.app.feed, "alice", "acme"))
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, MemoryScreen)
                   and pilot.app.screen.loads > 0, "the memory screen")


def test_overview(snap_compare):
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=_overview)


def test_overview_filtered_and_sorted(snap_compare):
    async def run(pilot):
        await _overview(pilot)
        await pilot.press("s", "s", "s", "slash", "a", "l", "i")
        await wait_for(pilot, lambda: pilot.app.screen.query_one("#sessions").row_count == 2,
                       "the filter")

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=run)


def test_session(snap_compare):
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=_session)


def test_session_summary_expanded(snap_compare):
    async def run(pilot):
        await _session(pilot)
        tree = pilot.app.screen.query_one("#summaries")
        tree.focus()
        tree.move_cursor(tree.root.children[1])
        await pilot.press("space")
        await wait_for(pilot, lambda: tree.root.children[1].children, "the expanded summary")

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=run)


def test_memory(snap_compare):
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=_memory)


def test_help(snap_compare):
    async def run(pilot):
        await _session(pilot)
        await pilot.press("question_mark")

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=run)


def test_paused_read_only_banner(snap_compare):
    async def run(pilot):
        await _overview(pilot)
        await pilot.press("z")

    assert snap_compare(sample_app(read_only=True), terminal_size=SIZE, run_before=run)


def test_promote_dialog(snap_compare):
    async def run(pilot):
        await _session(pilot)
        await pilot.press("4", "p")
        await pilot.press("enter")

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=run)


def test_unavailable_panels(snap_compare):
    from memman import names
    from memman_tui.sample import SampleClient

    client = SampleClient(missing={names.CACHE_LIST, names.SCRATCHPAD_CANDIDATES,
                                   names.SESSION_CONTEXT, names.SESSION_SERIES})
    assert snap_compare(sample_app(client), terminal_size=SIZE, run_before=_session)


SIZES = [(100, 30), (220, 60)]


async def _context(pilot) -> None:
    await _overview(pilot)
    pilot.app.open_context("demo-03")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ContextScreen)
                   and pilot.app.screen.loads > 0, "the context view")


async def _clients(pilot) -> None:
    await _overview(pilot)
    await pilot.press("C")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ClientsScreen)
                   and pilot.app.screen.loads > 0, "the clients view")


@pytest.mark.parametrize("size", SIZES, ids=["100x30", "220x60"])
def test_overview_at(snap_compare, size):
    assert snap_compare(sample_app(), terminal_size=size, run_before=_overview)


@pytest.mark.parametrize("size", SIZES, ids=["100x30", "220x60"])
def test_session_at(snap_compare, size):
    assert snap_compare(sample_app(), terminal_size=size, run_before=_session)


@pytest.mark.parametrize("size", SIZES, ids=["100x30", "220x60"])
def test_context_view_at(snap_compare, size):
    assert snap_compare(sample_app(), terminal_size=size, run_before=_context)


@pytest.mark.parametrize("size", SIZES, ids=["100x30", "220x60"])
def test_clients_at(snap_compare, size):
    assert snap_compare(sample_app(), terminal_size=size, run_before=_clients)


@pytest.mark.parametrize("size", SIZES, ids=["100x30", "220x60"])
def test_help_at(snap_compare, size):
    async def run(pilot):
        await _session(pilot)
        await pilot.press("question_mark")

    assert snap_compare(sample_app(), terminal_size=size, run_before=run)


def test_item_in_full_at_100x30(snap_compare):
    async def run(pilot):
        await _context(pilot)
        await pilot.press("j", "j", "enter")  # message 3: the linked summary
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ItemScreen)
                       and pilot.app.screen.replaced is not None, "the summary in full")

    assert snap_compare(sample_app(), terminal_size=(100, 30), run_before=run)
