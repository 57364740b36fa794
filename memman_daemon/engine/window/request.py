"""One context request with its defaults resolved once (``SessionEngine.request``), and the
usage bands it is reported in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BANDS = ("ok", "warn", "prune", "aggressive", "emergency")


@dataclass(frozen=True)
class Request:
    budget: int  #: tokens the whole prompt may take
    model: str
    query: str = ""  #: what the window is retrieved for ("" = the newest user message)
    tool_tokens: int = 0  #: tokens of the function definitions sent with the request
    cached: list[dict[str, Any]] = field(default_factory=list)  #: cached tool results to send
    cached_tokens: int = 0
    cached_note: str = ""
    recall: bool = True  #: bring back past sessions' entries (``opts.recall``)


def band_for(usage: float, cfg: Any) -> str:
    if usage > 1.0:
        return "emergency"
    if usage >= cfg.aggressive_threshold:
        return "aggressive"
    if usage >= cfg.prune_threshold:
        return "prune"
    if usage >= cfg.warn_threshold:
        return "warn"
    return "ok"
