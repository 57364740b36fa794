"""A table group's counts for ``stats`` (which is sync): each call answers what the last read
found (zeros before the first) and starts the next read in the background."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from memman.errors import MemmanError


class BackgroundCounts:
    def __init__(self, read: Callable[[], Awaitable[dict[str, int]]],
                 keys: tuple[str, ...]) -> None:
        self.read = read
        self.counts: dict[str, int] = dict.fromkeys(keys, 0)
        self._task: asyncio.Task[None] | None = None

    def current(self) -> dict[str, int]:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.refresh())
        return dict(self.counts)

    async def refresh(self) -> None:
        try:
            self.counts = {**self.counts, **await self.read()}
        except MemmanError:  # the shared store is down: the last counts stand
            return

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
