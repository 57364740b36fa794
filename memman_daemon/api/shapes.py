"""The helper that awaits a tier's answer whether it comes from memory or the shared store.
(The parameter shapes are declared with the methods: ``memman.schemas``, ``memman.api``.)
"""

from __future__ import annotations

import inspect
from typing import Any


async def answer(value: Any) -> Any:
    """A tier's answer: read from memory (SQLite tiers) or from the shared store (awaited)."""
    return await value if inspect.isawaitable(value) else value
