"""The supersession rules on their own (engine/supersede.py): which earlier statement a later
one replaces, on plain and on dated, speaker-labelled transcript lines."""

from __future__ import annotations

import pytest

from memman_daemon.engine import facts
from memman_daemon.engine.supersede import Supersession


def replaced(lines: list[str]) -> dict[int, int]:
    """Entry index -> the index of the entry that replaced a value of it."""
    sup = Supersession()
    for i, text in enumerate(lines):
        sup.feed(i, facts.analyse(text, structured=False), "message")
    return {old: new for (old, _k), (new, _t) in sup.by.items()}


@pytest.mark.parametrize("stamp", ["", "[Tue 5 Mar 2024 18:41] Tom: "])
@pytest.mark.parametrize(("old", "new"), [
    ("The birthday party is on Thursday, at our place.",
     "Change of plan: we moved the party to Friday, the hall was taken."),
    ("The exporter listens on port 9100.", "I changed the port to 9200 this morning."),
    ("Dinner at Dosa Corner, table at 7:30.",
     "Dosa Corner called back, they could only do 8:15, so it's 8:15 now."),
    ("Pin the CI toolchain: set go-version to 1.21.13", "no, I meant 1.22.6, sorry"),
])
def test_a_later_statement_replaces_the_value_it_changes(stamp: str, old: str, new: str) -> None:
    lines = [stamp + old, stamp.replace("18:41", "18:52") + "Sounds good to me.",
             stamp.replace("18:41", "19:03") + new]
    assert replaced(lines) == {0: 2}


def test_the_time_a_line_was_said_is_not_a_value_it_states() -> None:
    # the only other "9:99" before the correction is a stamp: nothing is replaced
    lines = ["[Tue 5 Mar 2024 18:41] Tom: Sounds good to me.",
             "[Tue 5 Mar 2024 18:52] Tom: so it's 8:15 now."]
    assert replaced(lines) == {}


def test_a_change_that_names_no_new_value_replaces_nothing() -> None:
    lines = ["The plan for the offsite is ready, 12 people.",
             "We changed the plan to include more people from sales."]
    assert replaced(lines) == {}


def test_a_bare_correction_replaces_the_most_alike_value_wherever_it_was_repeated() -> None:
    # a tool printed another version between the request and the correction: the newest value
    # of the same shape is the linter's, but the corrected one is the request's, repeated in
    # the edit and in the answer
    lines = ["Pin the CI toolchain: set go-version to 1.22.5 in the workflow.",
             "golangci-lint has version 1.57.2 built with go1.22.1",
             '{"path": "ci.yml", "new": "go-version: 1.22.5"}',
             "Done; go-version is 1.22.5 and the linter 1.57.2 is compatible.",
             "no, I meant 1.22.6"]
    assert replaced(lines) == {0: 4, 2: 4, 3: 4}
