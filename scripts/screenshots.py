"""Regenerate the SVG screenshots of each TUI screen into docs/screenshots/.

    .venv/bin/python scripts/screenshots.py

Uses the canned daemon (memman_tui.sample) and a frozen clock, so the pictures only change
when the app does. docs/tui.md shows them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memman_tui.app import MemmanApp  # noqa: E402
from memman_tui.sample import NOW, SampleClient, sample_factory  # noqa: E402
from memman_tui.screens.clients import ClientsScreen  # noqa: E402
from memman_tui.screens.context import ContextScreen, ItemScreen  # noqa: E402
from memman_tui.screens.dialogs import ConflictScreen  # noqa: E402
from memman_tui.screens.memory import MemoryScreen  # noqa: E402
from memman_tui.screens.session import SessionScreen  # noqa: E402
from memman_tui.settings import Settings  # noqa: E402

OUT = ROOT / "docs" / "screenshots"
SIZE = (140, 42)


async def until(pilot: Any, cond: Callable[[], Any]) -> None:
    for _ in range(500):
        if cond():
            await pilot.pause()
            return
        await pilot.pause(0.02)
    raise RuntimeError("screen did not load")


async def overview(pilot: Any) -> None:
    app = pilot.app
    await until(pilot, lambda: app.backend is not None and app.screen.query("#sessions")
                and app.screen.query_one("#sessions").row_count > 0)
    app.sample_client.replay()
    await until(pilot, lambda: app.screen.query_one("#log").lines)
    await pilot.pause()
    app.clear_notifications()


async def session(pilot: Any) -> None:
    await overview(pilot)
    pilot.app.open_session("demo-03")
    await until(pilot, lambda: isinstance(pilot.app.screen, SessionScreen)
                and pilot.app.screen.loads > 0)


async def session_expanded(pilot: Any) -> None:
    await session(pilot)
    tree = pilot.app.screen.query_one("#summaries")
    tree.focus()
    tree.move_cursor(tree.root.children[1])
    await pilot.press("space")
    await until(pilot, lambda: tree.root.children[1].children)


async def memory(pilot: Any) -> None:
    await overview(pilot)
    pilot.app.push_screen(MemoryScreen(pilot.app.feed, "alice", "acme"))
    await until(pilot, lambda: isinstance(pilot.app.screen, MemoryScreen)
                and pilot.app.screen.loads > 0)


async def help_screen(pilot: Any) -> None:
    await session(pilot)
    await pilot.press("question_mark")


async def promote(pilot: Any) -> None:
    await session(pilot)
    await pilot.press("4", "p", "enter")


async def conflict(pilot: Any) -> None:
    await session(pilot)
    pilot.app.push_screen(ConflictScreen(
        "currency", "USD", "EUR, two decimals",
        "preference 'currency' of user 'alice' is already 'USD'; the new value differs"))
    await pilot.pause(0.2)


async def context_view(pilot: Any) -> None:
    await overview(pilot)
    pilot.app.open_context("demo-03")
    await until(pilot, lambda: isinstance(pilot.app.screen, ContextScreen)
                and pilot.app.screen.loads > 0)


async def item(pilot: Any) -> None:
    await context_view(pilot)
    await pilot.press("j", "j", "enter")  # message 3: the linked summary
    await until(pilot, lambda: isinstance(pilot.app.screen, ItemScreen)
                and pilot.app.screen.replaced is not None)


async def chart(pilot: Any) -> None:
    await session(pilot)
    await pilot.press("2")


async def clients(pilot: Any) -> None:
    await overview(pilot)
    await pilot.press("C")
    await until(pilot, lambda: isinstance(pilot.app.screen, ClientsScreen)
                and pilot.app.screen.loads > 0)


async def paused(pilot: Any) -> None:
    await overview(pilot)
    await pilot.press("z")


SHOTS: dict[str, tuple[Callable[[Any], Awaitable[None]], dict[str, Any]]] = {
    "overview": (overview, {}),
    "overview-100x30": (overview, {"size": (100, 30)}),
    "session": (session, {}),
    "session-100x30": (session, {"size": (100, 30)}),
    "context-as-sent": (context_view, {}),
    "context-item": (item, {}),
    "chart-220x60": (chart, {"size": (220, 60)}),
    "clients": (clients, {}),
    "session-summary-expanded": (session_expanded, {}),
    "memory": (memory, {}),
    "help": (help_screen, {}),
    "promote": (promote, {}),
    "conflict": (conflict, {}),
    "paused-read-only": (paused, {"read_only": True}),
}


async def shoot(name: str, steps: Callable[[Any], Awaitable[None]], settings: dict) -> Path:
    client = SampleClient()
    settings = dict(settings)
    size = settings.pop("size", SIZE)
    app = MemmanApp(Settings(**settings), factory=sample_factory(client), clock=lambda: NOW)
    app.sample_client = client  # type: ignore[attr-defined]
    async with app.run_test(size=size) as pilot:
        await steps(pilot)
        await pilot.pause(0.1)
        path = OUT / f"{name}.svg"
        path.write_text(app.export_screenshot(title=f"memman tui — {name}"))
    return path


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (steps, settings) in SHOTS.items():
        print(asyncio.run(shoot(name, steps, settings)).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
