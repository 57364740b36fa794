"""What the app (``app.py``) asks of each part it holds in ``App.components``: ``load`` at
start, in the app's order, after the session log (read its state from the store, start its
background tasks); ``close`` at shutdown, in reverse (stop them, write what is pending);
``stats`` in ``memman_stats`` under ``stats_key``. A part with nothing to do for one of them
inherits the no-op here."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


class Component:
    """A part of the daemon the app loads, closes and reports."""

    stats_key = ""  #: the part's key in ``memman_stats`` ("" reports nothing)

    async def load(self) -> None:
        """Read this part's state from the store; start its background tasks."""

    async def close(self) -> None:
        """Stop this part's background tasks; write what it still holds."""

    def stats(self) -> dict[str, Any]:
        """This part's figures for ``memman_stats``."""
        return {}


async def stop_task(task: asyncio.Task[Any] | None) -> None:
    """Cancel a part's background task and wait until it has stopped (``close``)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
