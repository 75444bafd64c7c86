"""Unit: the group audit's resume check (`_group_audit.check_resumes`) on made-up histories.

A member may resume a partition past its last answered commit only at the offset of a commit
whose answer was lost (which the group stored after all), and the check says which; anywhere
else it fails.
"""

from __future__ import annotations

import pytest

from tests.kafka_server._group_audit import Commit, Episode, Event, check_resumes


def _episode(start: float, first_offset: int, records: int = 3) -> Episode:
    events = [Event(start + 1 + i, "record", (0,), first_offset + i) for i in range(records)]
    return Episode("b", 0, start, start + 100, events)


ANSWERED = [Commit("a", 1.0, 2.0, {0: 10}), Commit("a", 3.0, 4.0, {0: 20})]
LOST = [Commit("a", 5.0, 15.0, {0: 30}, "Local: Timed out")]


def test_a_resume_at_an_answered_commit_needs_no_lost_one() -> None:
    assert check_resumes([_episode(10.0, 20)], ANSWERED, LOST) == []
    assert check_resumes([_episode(10.0, 0)], [], []) == []  # nothing committed: earliest


def test_a_resume_past_the_last_answered_commit_is_proven_by_a_lost_answer() -> None:
    (resume,) = check_resumes([_episode(20.0, 30)], ANSWERED, LOST)
    assert (resume.member, resume.partition, resume.offset, resume.answered) == ("b", 0, 30, 20)
    assert resume.commit == LOST[0]


def test_a_resume_past_the_last_answered_commit_at_a_commit_answered_later_is_allowed() -> None:
    late = Commit("a", 5.0, 30.0, {0: 30})
    assert check_resumes([_episode(20.0, 30)], [*ANSWERED, late], []) == []


@pytest.mark.parametrize(
    ("first_offset", "lost"),
    [
        (30, []),  # no commit was attempted at 30
        (31, LOST),  # the lost commit made 30, not 31
        (30, [Commit("a", 25.0, 26.0, {0: 30}, "Local: Timed out")]),  # sent after the resume
    ],
)
def test_a_resume_past_the_last_answered_commit_that_no_commit_made_is_caught(
    first_offset: int, lost: list[Commit]
) -> None:
    with pytest.raises(AssertionError, match="past its last answered commit"):
        check_resumes([_episode(20.0, first_offset)], ANSWERED, lost)


def test_a_resume_below_an_answered_commit_is_caught() -> None:
    with pytest.raises(AssertionError, match="below 20 committed"):
        check_resumes([_episode(10.0, 10)], ANSWERED, LOST)
