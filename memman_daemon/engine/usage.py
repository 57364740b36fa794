"""The usage ledger: what the provider billed against memman's own count.

An agent reports ``usage.prompt_tokens`` / ``completion_tokens`` after each chat call; memman
compares the prompt tokens with the token count of the last context it assembled for that
session. ``drift`` = billed - counted (tokens); ``drift_ratio`` = drift / counted.
"""

from __future__ import annotations

from typing import Any

from memman_daemon.model import SessionMeta


def record(meta: SessionMeta, at: float, prompt_tokens: int, completion_tokens: int,
           counted: int | None, keep: int) -> dict[str, Any]:
    rec: dict[str, Any] = {"at": at, "prompt_tokens": prompt_tokens,
                           "completion_tokens": completion_tokens, "memman_tokens": counted,
                           "drift": None if counted is None else prompt_tokens - counted}
    meta.usage.append(rec)
    if len(meta.usage) > keep:
        del meta.usage[: len(meta.usage) - keep]
    return rec


_NONE = {"reports": 0, "prompt_tokens": 0, "completion_tokens": 0, "last_drift": None,
         "mean_drift": None, "max_abs_drift": None, "drift_ratio": None}


def stats(meta: SessionMeta) -> dict[str, Any]:
    recs = meta.usage
    if not recs:  # the common case, on the read path of memman_session_get
        return dict(_NONE)
    drifts = [r["drift"] for r in recs if r.get("drift") is not None]
    counted = [r["memman_tokens"] for r in recs if r.get("memman_tokens")]
    return {
        "reports": len(recs),
        "prompt_tokens": sum(r["prompt_tokens"] for r in recs),
        "completion_tokens": sum(r["completion_tokens"] for r in recs),
        "last_drift": drifts[-1] if drifts else None,
        "mean_drift": round(sum(drifts) / len(drifts), 2) if drifts else None,
        "max_abs_drift": max((abs(d) for d in drifts), default=None),
        "drift_ratio": round(sum(drifts) / sum(counted), 4) if drifts and counted else None,
    }
