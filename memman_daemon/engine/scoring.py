"""Seed 001 importance scores (0.0-1.0), as its section 6 implementation computes them.

    total = recency * recency_weight + role * role_weight + content * content_weight

``recency = index / max(total - 1, 1)`` over the timeline being pruned (oldest 0.0, newest 1.0);
the role and content parts do not depend on position, so they are computed once per entry
(``static_score``) and cached by the context builder.
"""

from __future__ import annotations

from memman.config import ScoringConfig
from memman_daemon.model import Entry, Summary


def role_score(role: str, cfg: ScoringConfig) -> float:
    return cfg.role_scores.get(role, cfg.default_role_score)


def content_score(content: str, cfg: ScoringConfig, *, tool: bool = False) -> float:
    """Keyword and marker rules, then the short-content penalty, capped at 1.0.

    ``tool`` marks a typed tool call or result: it counts as carrying the ``[Tool:`` marker
    (seed 001 recognised tool output by that marker in free text; memman knows the type).
    """
    score = 0.0
    lower = content.lower()
    if any(kw in lower for kw in cfg.important_keywords):
        score += cfg.keyword_bonus
    if tool or cfg.tool_marker in content:
        score += cfg.tool_marker_bonus
    if any(m in content for m in cfg.system_markers):
        score += cfg.system_marker_bonus
    if any(w in lower for w in cfg.approval_words):
        score += cfg.approval_bonus
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


def static_score(e: Entry, cfg: ScoringConfig) -> float:
    """role * role_weight + content * content_weight for one entry."""
    tool = cfg.typed_tools_count_as_marker and e.type in ("tool_call", "tool_result")
    return (role_score(e.role, cfg) * cfg.role_weight
            + content_score(entry_text(e), cfg, tool=tool) * cfg.content_weight)


def summary_static_score(sm: Summary, cfg: ScoringConfig) -> float:
    """A compression summary is a system message (role system) with its text as content."""
    return (role_score("system", cfg) * cfg.role_weight
            + content_score(sm.content, cfg) * cfg.content_weight)


def recency(index: int, total: int) -> float:
    return index / max(total - 1, 1)


def importance(static: float, index: int, total: int, cfg: ScoringConfig) -> float:
    return min(recency(index, total) * cfg.recency_weight + static, 1.0)
