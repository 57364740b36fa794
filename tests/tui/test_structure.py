"""The TUI's shape: data down, messages up, and no import cycle (type-only imports included)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import grimp

from memman import api, names
from memman_tui.backend import Backend
from memman_tui.feed import Reads
from memman_tui.sample import SampleClient
from tests.tui.conftest import connected, sample_app, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _check_cycles():
    spec = importlib.util.spec_from_file_location("check_cycles", ROOT / "scripts/check_cycles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycle_in_the_tui_and_no_screen_names_the_app():
    graph = grimp.build_graph("memman_tui", exclude_type_checking_imports=False, cache_dir=None)
    assert _check_cycles().cycles(graph, "memman_tui") == []
    # screens and widgets post messages; only the app acts (memman_tui/actions.py)
    shown = [m for m in graph.modules if m.startswith(("memman_tui.screens", "memman_tui.widgets"))]
    for module in shown:
        imported = graph.find_modules_directly_imported_by(module)
        assert not imported & {"memman_tui.app", "memman_tui.actions"}, module


def test_screens_get_reads_only():
    """What a screen fetches through has no method that writes: a change is a message."""
    reads = vars(Reads(Backend(SampleClient(), {})))
    writes = {m.name for m in api.METHODS if m.writes}
    assert reads and not {f"memman_{name}" for name in reads} & writes


async def test_a_gap_in_the_events_reloads_the_sessions(sample_client):
    """The client library's sequence check (the one check) reaches the app: a resync."""
    app = sample_app(sample_client)

    def lists() -> int:
        return sum(1 for method, _ in sample_client.calls if method == names.SESSION_LIST)

    def deliver(seq: int) -> None:  # as the client delivers: checked, then to the callback
        sid = sorted(app.live.sessions)[0]
        payload = {"kind": "entry_added", "seq": seq, "subscription": 1, "session_id": sid,
                   "session": dict(app.live.sessions[sid])}  # a row: nothing to re-read
        if sample_client.subscriptions.event(payload, names.SESSION_EVENT) is not None:
            sample_client.callback(names.SESSION_EVENT, payload)

    async with app.run_test(size=(140, 42)) as pilot:
        await connected(pilot)
        before = lists()
        for seq in (1, 2):
            deliver(seq)
            await wait_for(pilot, lambda: not app.live.has_pending(), "the event applied")
        assert lists() == before  # in order: no reload
        deliver(5)  # 3 and 4 went missing
        await wait_for(pilot, lambda: lists() > before, "the resync's session list")
