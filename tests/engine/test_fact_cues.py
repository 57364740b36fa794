"""The cheap substring checks in front of facts.py's patterns never hide a match: for every
phrase a pattern matches (each alternative, in odd cases), the checked search agrees with the
plain pattern, and so does the salience of the whole line."""

from __future__ import annotations

import pytest

from memman_daemon.engine import facts

DECISIONS = ["moved to", "move to", "renamed", "rename", "instead of", "switch to", "switched to",
             "switching to", "change to", "changed to", "replace by", "replaced with", "decided",
             "decision", "we'll go with", "well go with", "let's use", "lets use", "going with",
             "no longer", "deprecated", "from now", "agreed", "chose", "chosen", "pick",
             "picked", "set to", "bump to", "bumped to", "postponed", "rescheduled",
             "pushed to", "pushed back to", "i meant", "correction", "actually", "root cause",
             "the cause is", "the culprit was", "the fix is", "the problem was", "the issue is"]
INSTRUCTIONS = ["remember", "from now on", "going forward", "always", "never", "dont", "don't",
                "do not", "must", "make sure", "please use", "prefer", "prefers", "preferred",
                "want", "wants", "likes", "hates", "shouldnt", "shouldn't", "needs to",
                "important", "note that", "keep in mind", "only use", "avoid", "require",
                "required", "requires"]
OUTCOMES = ["success", "successful", "successfully", "succeeded", "passed", "failed", "failure",
            "error", "errors", "exception", "denied", "approved", "completed", "warning",
            "timed out", "time out", "timeout", "timedout", "crash", "crashed", "panic",
            "refused", "rejected", "fixed"]
DATES = ["jan", "January", "feb", "March", "apr", "may", "June", "jul", "Aug", "sept",
         "September", "oct", "Nov", "december", "Monday", "sunday", "2024-03-09", "Q3"]


@pytest.mark.parametrize("phrases, pattern, checked", [
    (DECISIONS, facts._DECISION, facts._has_decision),
    (INSTRUCTIONS, facts._INSTRUCTION, facts._has_instruction),
    (OUTCOMES, facts._OUTCOME, facts._has_outcome),
])
def test_checked_search_agrees_with_the_pattern(phrases, pattern, checked) -> None:
    for phrase in phrases:
        for text in (f"So {phrase} here.", f"{phrase.upper()} NOW", phrase.title()):
            assert pattern.search(text), text  # the list names real matches
            assert checked(text, text.lower()), text


def test_salience_sees_dates_and_plain_lines_alike() -> None:
    for word in DATES:
        text = f"The review is on {word} with Ana"
        assert facts._DATE.search(text)
        assert facts.salience(text) > facts.salience("The review is on the list with Ana")
    plain = "a short agent message about the plan, the tool it called and what came back"
    assert not any(p.search(plain) for p in (facts._DECISION, facts._INSTRUCTION,
                                             facts._OUTCOME))
    assert facts.salience(plain) == pytest.approx(0.1)


def test_wrapped_prose_and_list_items_are_whole_candidates() -> None:
    # a pasted design note wraps its sentences; the value sits on the line after the words
    # that say what it is, so a line-by-line split would leave each half without the other
    text = ("## Layout\n"
            "- Keys are hashed onto a fixed array of shards to keep lock contention low:\n"
            "  `DefaultShards = 16`. Each shard has its own mutex and map; each key has its own\n"
            "  mutex for the counters.\n"
            "- The in-memory store evicts idle keys.\n"
            "Counters are written with the prefix `thr:v2:` so v1 and\n"
            "v2 keys never collide.\n\n"
            "1. Land the limiter.\n"
            "2. Land the Redis store.\n")
    got = facts.split_candidates(text, structured=False)
    assert "- Keys are hashed onto a fixed array of shards to keep lock contention low: " \
           "`DefaultShards = 16`." in got
    assert "Each shard has its own mutex and map; each key has its own mutex for the " \
           "counters." in got
    assert "- The in-memory store evicts idle keys." in got
    assert "Counters are written with the prefix `thr:v2:` so v1 and v2 keys never " \
           "collide." in got
    assert "1. Land the limiter." in got and "2. Land the Redis store." in got
    # tool output keeps one candidate per line
    assert facts.split_candidates("a\n  b", structured=True) == ["a", "b"]


def test_camel_case_identifiers_are_found_by_their_parts() -> None:
    got = facts.terms("BenchmarkSlidingAllow-2 parseHTTPHeader")
    for word in ("benchmark", "slid", "allow", "parse", "http", "head"):
        assert facts.stem(word) in got, word
    assert "benchmarkslidingallow" in got  # the whole identifier still matches itself
    assert facts.terms("plain words only") == ["plain", "word", "only"]
