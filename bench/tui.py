"""TUI update cost with 200 sessions and an event flood (headless Textual, canned daemon).

    .venv/bin/python bench/tui.py [--sessions 200] [--rate 50] [--seconds 4]

Measures, on the real app with a fake client (no socket, so only the TUI's own cost counts):
- the subscription callback per event (LiveState.on_event + the coalescing message),
- one refresh tick that repaints N changed overview rows (in place, and with a re-sort),
- a full rebuild of the 200-row table (filter / sort change, resync),
- a flood at --rate events/s for --seconds: repaints done vs events received, and the
  longest any single repaint took.
Figures go to stdout; docs/performance.md (## TUI) quotes them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memman import names  # noqa: E402
from memman_tui.app import MemmanApp  # noqa: E402
from memman_tui.rows import OVERVIEW_COLUMNS  # noqa: E402
from memman_tui.sample import NOW, SampleClient, sample_factory  # noqa: E402
from memman_tui.screens.overview import OverviewScreen  # noqa: E402
from memman_tui.settings import Settings  # noqa: E402

#: the "last activity" column (its position moved when sent / history / trend were added)
ACTIVITY = [key for key, _ in OVERVIEW_COLUMNS].index("updated_at")


class BenchClient(SampleClient):
    def __init__(self, sessions: int) -> None:
        super().__init__()
        self.rows = [{"session_id": f"bench-{i:03d}", "user_id": f"user{i % 17}",
                      "tenant_id": f"t{i % 5}", "model": "gpt-4o-mini", "max_tokens": 8000,
                      "entries": i, "active_entries": i, "active_tokens": 40 * i,
                      "summaries": 0, "exchanges": i % 11, "summary_bytes": 0,
                      "created_at": NOW - 3600, "updated_at": NOW - i, "counters": {}}
                     for i in range(sessions)]

    async def call(self, method: str, *params: Any) -> Any:
        if method == names.SESSION_LIST:
            return [dict(r) for r in self.rows]
        return await super().call(method, *params)


def event(client: BenchClient, seq: int, i: int) -> dict[str, Any]:
    row = client.rows[i % len(client.rows)]
    row = {**row, "active_tokens": row["active_tokens"] + seq % 97, "updated_at": NOW + seq}
    return {"kind": "entry_added", "seq": seq, "subscription": 1,
            "session_id": row["session_id"], "session": row,
            "entry": {"role": "user", "type": "message", "tokens": 12, "content": "bench"}}


def ms(samples: list[float]) -> str:
    return (f"p50 {statistics.median(samples) * 1000:7.3f} ms  "
            f"max {max(samples) * 1000:7.3f} ms")


async def run(sessions: int, rate: float, seconds: float, quiet: bool = False) -> dict[str, float]:
    """Measure; print unless quiet; return the figures (seconds)."""
    figures: dict[str, float] = {}
    say = (lambda *a, **k: None) if quiet else print
    client = BenchClient(sessions)
    app = MemmanApp(Settings(refresh_s=1.0), factory=sample_factory(client), clock=lambda: NOW)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(500):
            await pilot.pause(0.01)
            if app.backend and isinstance(app.screen, OverviewScreen) and \
                    app.screen.query_one("#sessions").row_count == sessions:
                break
        screen = app.screen
        assert isinstance(screen, OverviewScreen)
        seq = 0

        # 1. the callback, per event
        n = 20_000
        t0 = time.perf_counter()
        for i in range(n):
            seq += 1
            app.on_daemon_event(names.SESSION_EVENT, event(client, seq, i))
        per_event = (time.perf_counter() - t0) / n
        app.live.drain()
        await pilot.pause()
        figures["callback"] = per_event
        say(f"sessions {sessions}")
        say(f"callback per event (state + coalescing message): {per_event * 1e6:6.2f} µs")

        # 2. one tick repainting N changed rows, sorted by session id (order stable: in place)
        #    and by last activity (every event reorders: rebuild)
        for label, sort_index, reverse in (("in place (sort: session)", 0, False),
                                           ("re-sorted (sort: last activity)", ACTIVITY, True)):
            screen.sort_index, screen.sort_reverse = sort_index, reverse
            screen.rebuild()
            for changed in (1, 50, sessions):
                samples = []
                for _ in range(10):
                    for i in range(changed):
                        seq += 1
                        app.live.on_event(names.SESSION_EVENT, event(client, seq, i))
                    changes = app.live.drain()
                    t0 = time.perf_counter()
                    screen.apply(changes)
                    samples.append(time.perf_counter() - t0)
                    await pilot.pause()
                figures[f"tick_{changed}_{sort_index}"] = statistics.median(samples)
                say(f"tick, {changed:3d} rows changed, {label:32}: {ms(samples)}")

        samples = []
        for _ in range(10):
            t0 = time.perf_counter()
            screen.rebuild()
            samples.append(time.perf_counter() - t0)
            await pilot.pause()
        figures["rebuild"] = statistics.median(samples)
        say(f"full rebuild of {sessions} rows (filter / sort / resync):    {ms(samples)}")

        # 3. a flood at `rate` events/s over all sessions for `seconds`
        screen.sort_index, screen.sort_reverse = ACTIVITY, True
        screen.rebuild()
        repaints: list[float] = []
        original = screen.apply

        def timed(changes):
            t = time.perf_counter()
            original(changes)
            repaints.append(time.perf_counter() - t)

        screen.apply = timed  # type: ignore[method-assign]
        received = app.live.received
        interval = 1.0 / rate
        start = time.perf_counter()
        i = 0
        while time.perf_counter() - start < seconds:
            seq += 1
            i += 1
            app.on_daemon_event(names.SESSION_EVENT, event(client, seq, i * 7))
            await asyncio.sleep(interval)
        await pilot.pause(1.2)
        got = app.live.received - received
        say(f"flood {rate:g} events/s for {seconds:g} s: {got} events -> {len(repaints)} "
            f"repaints (refresh 1 s); longest repaint {max(repaints) * 1000:.1f} ms, "
            f"mean {statistics.mean(repaints) * 1000:.1f} ms")
        figures["flood_events"] = got
        figures["flood_repaints"] = len(repaints)
        figures["flood_repaint_s"] = sum(repaints)
        figures["flood_seconds"] = seconds
        await app.action_quit()
    return figures


def rows(quick: bool = False) -> list[dict]:
    """For bench/run_all.py: UI work per second under a 50 events/s flood on 200 sessions,
    coalesced (what the app does) against repainting once per event (the baseline)."""
    f = asyncio.run(run(200, 50.0, 2.0 if quick else 4.0, quiet=True))
    coalesced = (f["flood_repaint_s"] + f["flood_events"] * f["callback"]) / f["flood_seconds"]
    # without coalescing: every event repaints its row and re-sorts (last-activity order)
    naive = f["flood_events"] / f["flood_seconds"] * (f[f"tick_1_{ACTIVITY}"] + f["callback"])
    return [
        {"benchmark": "tui", "what": "UI ms per second, 200 sessions, 50 events/s",
         "value": f"{coalesced * 1000:.1f}", "baseline": f"{naive * 1000:.1f}",
         "ratio": f"{naive / coalesced:.1f}x less" if coalesced else "-",
         "target": "< 100 ms/s (10 % of a core)"},
        {"benchmark": "tui", "what": "tick with all 200 rows changed (ms)",
         "value": f"{f[f'tick_200_{ACTIVITY}'] * 1000:.1f}",
         "baseline": f"{f['rebuild'] * 1000:.1f} (bare rebuild)", "ratio": "-",
         "target": "< 50 ms (one frame at 20 fps)"},
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=4.0)
    args = p.parse_args(argv)
    asyncio.run(run(args.sessions, args.rate, args.seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
