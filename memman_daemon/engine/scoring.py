"""Importance scores (0.0-1.0) of the context window's units.

Two profiles (``[scoring] profile``): ``salience`` (the default) weighs recency, role, content
keywords, salience (what an entry carries: identifiers, numbers, instructions, decisions) and
relevance to the current question, less a part for superseded values; ``seed001`` is the
original formula, as its section 6 implementation computes it:

    total = recency * recency_weight + role * role_weight + content * content_weight

``recency = index / max(total - 1, 1)`` over the timeline being pruned (oldest 0.0, newest 1.0);
the role and content parts do not depend on position, so they are computed once per entry
(``static_score``) and cached by the context builder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


# --- the default profile: what an entry carries, and what the question is about -------------
@dataclass(slots=True)
class Parts:
    """One unit's score and its parts (each 0..1; ``superseded`` is subtracted)."""

    recency: float
    role: float
    content: float
    salience: float
    relevance: float
    superseded: float
    total: float

    def priority(self, tokens: int) -> float:
        """Value per room: a long unit must score higher to be kept whole (its facts survive
        in a summary when it is not)."""
        return self.total / (1.0 + tokens / 300.0) ** 0.5

    def wire(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 4) for k in
                ("recency", "role", "content", "salience", "relevance", "superseded")}

    def explain(self) -> str:
        parts = self.wire()
        return ", ".join(f"{k} {v:.2f}" for k, v in parts.items() if v)


def score_units(units: list, tl: Any, relevance: dict[int, float],
                cfg: ScoringConfig) -> dict[int, Parts]:
    """Score parts of every unit of a timeline. ``profile = "seed001"`` keeps seed 001's
    formula for the total (the other parts are still reported)."""
    n = len(units)
    denom = max(n - 1, 1)
    seed = cfg.profile == "seed001"
    out: dict[int, Parts] = {}
    w = cfg.weights
    for u in units:
        rec = u.index / denom
        role = cfg.salience_role_scores.get(u.items[0].role, cfg.default_role_score)
        content = 0.0
        sal = 0.0
        sup_n = val_n = 0
        rel = 0.0
        static = 0.0
        for e in u.items:
            cands = tl.cands.get(e.id, ())
            for k, c in enumerate(cands):
                if c.salience > sal:
                    sal = c.salience
                if c.salience >= 0.3:
                    val_n += 1
                    if (e.id, k) in tl.sup.by:
                        sup_n += 1
            r = relevance.get(e.id, 0.0)
            if r > rel:
                rel = r
            if seed:
                static = max(static, static_score(e, cfg))
            else:
                tool = cfg.typed_tools_count_as_marker and e.type in ("tool_call", "tool_result")
                content = max(content, content_score(entry_text(e), cfg, tool=tool))
        sup = sup_n / val_n if val_n else 0.0
        if seed:
            total = min(rec * cfg.recency_weight + static, 1.0)
            content = static
        else:
            total = (w["recency"] * rec + w["role"] * role + w["content"] * content
                     + w["salience"] * sal + w["relevance"] * rel - w["superseded"] * sup)
            total = min(max(total, 0.0), 1.0)
        out[u.index] = Parts(rec, role, content, sal, rel, sup, total)
    return out
