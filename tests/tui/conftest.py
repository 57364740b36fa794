"""Helpers for the TUI tests: apps on the canned sample daemon or on a real one, and waits
that poll the app's own state (never a fixed sleep)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from memman_tui.app import MemmanApp
from memman_tui.sample import NOW, SampleClient, sample_factory
from memman_tui.settings import Settings


async def wait_for(pilot: Any, condition: Callable[[], Any], what: str,
                   steps: int = 400) -> None:
    """Let the app run until ``condition()`` holds (bounded by steps, not by wall time)."""
    for _ in range(steps):
        if condition():
            await pilot.pause()
            return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def sample_app(client: SampleClient | None = None, **settings: Any) -> MemmanApp:
    client = client or SampleClient()
    app = MemmanApp(Settings(**{"refresh_s": 1.0, **settings}),
                    factory=sample_factory(client), clock=lambda: NOW)
    app.sample_client = client  # type: ignore[attr-defined]
    return app


def real_app(socket: str, **settings: Any) -> MemmanApp:
    return MemmanApp(Settings(socket=socket, **{"refresh_s": 0.25, **settings}),
                     reconnect_delay=0.1)


async def connected(pilot: Any) -> None:
    app = pilot.app
    await wait_for(pilot, lambda: app.backend is not None and app.live.sessions is not None
                   and app.screen.query("#sessions")
                   and app.screen.query_one("#sessions").row_count == len(app.live.sessions)
                   and app.live.sessions, "the overview to load")


@pytest.fixture
def sample_client() -> SampleClient:
    return SampleClient()


async def wait_async(pilot: Any, condition: Callable[[], Any], what: str,
                     steps: int = 400) -> Any:
    """Like wait_for, with an async condition (e.g. asking the daemon); returns its value."""
    for _ in range(steps):
        value = await condition()
        if value:
            return value
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")
