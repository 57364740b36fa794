"""Parameter shapes shared by several nouns of the API (ids, models, tool names, durations),
and the helper that awaits a tier's answer whether it comes from memory or the shared store.
"""

from __future__ import annotations

import inspect
from typing import Any

from memman_daemon.params import Float, Id, Int, Map, Nullable, Stored, Str

SESSION_ID = Id("s1")
MODEL = Id("gpt-4o-mini")
TOOL = Str(min_len=1, max_bytes=1024, doc="a tool name")
TOOL_PARAMS = Map(rest=Stored(), doc="a map (the tool's parameters)", empty_array_ok=True)
DURATION = Int(1, 2**31, doc="a whole number of exchanges >= 1")
TTL = Nullable(Float(0.0, 1e10, doc="seconds (a finite number >= 0)"))
LIMIT = Int(0, 10_000, doc="an integer from 0 (the default) to 10000")


async def answer(value: Any) -> Any:
    """A tier's answer: read from memory (SQLite tiers) or from the shared store (awaited)."""
    return await value if inspect.isawaitable(value) else value
