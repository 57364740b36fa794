"""Short human-readable lines for daemon figures, shared by ``memman status`` and the TUI."""

from __future__ import annotations

from typing import Any


def embeddings_label(emb: dict[str, Any], short: bool = False) -> str:
    """The embedder in force and a running re-embed's progress, from ``stats.embeddings``:
    ``local minilm/all-MiniLM-L6-v2@384, re-embedding 1,200/5,000 (24%, 900/s)``.
    ``short`` (the TUI's header line) leaves out the provider and the last pass's count."""
    if emb.get("error"):
        return f"off ({emb['error']})"
    if not emb.get("enabled"):
        return "none (FTS5 only)"
    line = str(emb.get("model_id")) if short else f"{emb.get('provider')} {emb.get('model_id')}"
    re_ = emb.get("reembed") or {}
    if re_.get("state") == "running":
        done, total = re_.get("done", 0), re_.get("total", 0) or 1
        rate = re_.get("rate_per_s")
        line += (f", re-embedding {done:,}/{total:,} ({done / total:.0%}"
                 + (f", {rate:,.0f}/s" if rate else "") + ")")
    elif re_.get("passes") and not short:
        line += f", vectors up to date ({re_.get('done', 0):,} embedded in the last pass)"
    return line
