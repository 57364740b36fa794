"""Importance scores (0.0-1.0) of the context window's units.

Two profiles (``[scoring] profile``): ``salience`` (the default) weighs recency, role, content
keywords, salience (what an entry carries: identifiers, numbers, instructions, decisions) and
relevance to the current question, less a part for superseded values; ``keyword`` is the
original formula, as its section 6 implementation computes it:

    total = recency * recency_weight + role * role_weight + content * content_weight

``recency = index / max(total - 1, 1)`` over the timeline being pruned (oldest 0.0, newest 1.0);
the role and content parts do not depend on position, so they are computed once per entry
(``static_score``) and cached by the context builder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memman.config import ScoringConfig
from memman_daemon.model import Entry


def role_score(role: str, cfg: ScoringConfig) -> float:
    return cfg.role_scores.get(role, cfg.default_role_score)


def content_score(content: str, cfg: ScoringConfig, *, tool: bool = False) -> float:
    """Keyword and marker rules, then the short-content penalty, capped at 1.0.

    ``tool`` marks a typed tool call or result: it counts as carrying the ``[Tool:`` marker
    (the keyword-scoring design recognised tool output by that marker in free text; memman knows the type).
    """
    # plain loops, not ``any()`` over a generator: every entry of a log is scored at start
    # (60,000 entries: 0.35 -> 0.16 s)
    score = 0.0
    lower = content.lower()
    for kw in cfg.important_keywords:
        if kw in lower:
            score += cfg.keyword_bonus
            break
    if tool or cfg.tool_marker in content:
        score += cfg.tool_marker_bonus
    for m in cfg.system_markers:
        if m in content:
            score += cfg.system_marker_bonus
            break
    for w in cfg.approval_words:
        if w in lower:
            score += cfg.approval_bonus
            break
    if len(content) < cfg.min_content_length:
        score *= cfg.short_content_penalty
    return min(score, 1.0)


def entry_text(e: Entry) -> str:
    """The text the content rules look at: content plus tool-call names and arguments."""
    if not e.tool_calls:
        return e.content
    parts = [e.content] if e.content else []
    for c in e.tool_calls:
        fn = c.get("function", {})
        parts.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
    return " ".join(parts)


def static_score(e: Entry, cfg: ScoringConfig, content: float | None = None) -> float:
    """role * role_weight + content * content_weight for one entry (``content``: its content
    score when the caller has it, from a bounded head of its text)."""
    if content is None:
        tool = cfg.typed_tools_count_as_marker and e.type in ("tool_call", "tool_result")
        content = content_score(entry_text(e), cfg, tool=tool)
    return role_score(e.role, cfg) * cfg.role_weight + content * cfg.content_weight


def recency(index: int, total: int) -> float:
    return index / max(total - 1, 1)


def importance(static: float, index: int, total: int, cfg: ScoringConfig) -> float:
    return min(recency(index, total) * cfg.recency_weight + static, 1.0)


# --- the default profile: what an entry carries, and what the question is about -------------
def unit_constant(role: str, content: float, salience: float, cfg: ScoringConfig) -> float:
    """The parts of a unit's total that do not depend on the request (cached per unit)."""
    w = cfg.weights
    role_part = cfg.salience_role_scores.get(role, cfg.default_role_score)
    return w["role"] * role_part + w["content"] * content + w["salience"] * salience


def totals(arr: Any, relevance: Any, cfg: ScoringConfig) -> Any:
    """Every unit's importance (a numpy array indexed like the units): recency by position, the
    cached constant, relevance to the question (per unit, 0..1), less the superseded share.
    ``profile = "keyword"`` is the keyword-scoring design's formula. ``arr`` holds the per-unit
    columns. The window orders by it what no question decides (``select``)."""
    n = arr.n
    pos = np.arange(n) / max(n - 1, 1)
    if cfg.profile == "keyword":
        return np.minimum(pos * cfg.recency_weight + arr["keyword_total"], 1.0)
    w = cfg.weights
    t = (w["recency"] * pos + arr["const"] + w["relevance"] * relevance
         - w["superseded"] * arr["supf"])
    return np.clip(t, 0.0, 1.0)
