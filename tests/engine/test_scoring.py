"""Seed 001 importance scores, unit-tested against the formula."""

from __future__ import annotations

import pytest

from memman.config import ScoringConfig
from memman_daemon.engine import scoring
from memman_daemon.model import Entry

CFG = ScoringConfig()


def entry(content: str, role: str = "user", etype: str = "message", **kw) -> Entry:
    return Entry(id=1, session_id="s", type=etype, role=role, content=content, tokens=10,
                 created_at=0.0, **kw)


def test_role_scores_follow_the_seed():
    assert scoring.role_score("user", CFG) == 1.0
    assert scoring.role_score("assistant", CFG) == 0.5
    assert scoring.role_score("system", CFG) == 0.3
    assert scoring.role_score("tool", CFG) == CFG.default_role_score == 0.5


@pytest.mark.parametrize("content,expected", [
    ("a plain long sentence without anything special", 0.0),
    ("the build failed with an error in module x", 0.3),
    ("[Tool: shell] produced the listing of files", 0.25),
    ("[SYSTEM: note] this is a long system marker", 0.2),
    ("waiting for approval from the duck_call module", 0.3 + 0.3),
    ("[Tool: x] error [SYSTEM: y] approval needed now", 0.3 + 0.25 + 0.2 + 0.3),
    ("error", 0.3 * 0.7),  # short content penalty (< 20 characters)
])
def test_content_rules(content, expected):
    assert scoring.content_score(content, CFG) == pytest.approx(min(expected, 1.0))


def test_total_is_weighted_sum_with_recency():
    e = entry("the task failed with an error, retry planned")
    static = scoring.static_score(e, CFG)
    assert static == pytest.approx(1.0 * 0.3 + 0.3 * 0.4)
    assert scoring.importance(static, 0, 11, CFG) == pytest.approx(static)
    assert scoring.importance(static, 10, 11, CFG) == pytest.approx(min(static + 0.3, 1.0))
    assert scoring.importance(static, 5, 11, CFG) == pytest.approx(static + 0.15)


def test_user_outranks_assistant_and_typed_tool_results_count_as_tool_output():
    u = scoring.static_score(entry("please deploy the service to staging"), CFG)
    a = scoring.static_score(entry("sure, deploying the service now", role="assistant"), CFG)
    t = scoring.static_score(entry("deployed 3 pods fine", role="tool", etype="tool_result",
                                   tool_call_id="c1"), CFG)
    assert u > a
    assert t > a  # the [Tool: marker bonus


def test_weights_come_from_config():
    cfg = ScoringConfig(role_weight=0.0, content_weight=1.0, recency_weight=0.0)
    assert scoring.static_score(entry("an error happened in the build step"), cfg) == pytest.approx(0.3)
