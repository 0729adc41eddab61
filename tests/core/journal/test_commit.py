"""The group commit policy: a pure decision over what is pending."""

from __future__ import annotations

import math

import pytest

from frontier_core.journal import CommitPolicy

pytestmark = pytest.mark.mutation


def test_nothing_pending_nothing_due() -> None:
    assert CommitPolicy().due_in(pending_bytes=0, pending_records=0, elapsed=99.0) is None


def test_the_delay_bounds_the_wait_of_the_oldest_append() -> None:
    policy = CommitPolicy(max_delay=0.010, max_bytes=1000)
    assert policy.due_in(pending_bytes=10, pending_records=1, elapsed=0.0) == pytest.approx(0.010)
    assert policy.due_in(pending_bytes=10, pending_records=1, elapsed=0.004) == pytest.approx(0.006)
    assert policy.due_in(pending_bytes=10, pending_records=1, elapsed=0.010) == 0.0
    assert policy.due_in(pending_bytes=10, pending_records=1, elapsed=5.0) == 0.0


def test_the_size_bounds_the_group() -> None:
    policy = CommitPolicy(max_delay=1.0, max_bytes=1000, max_records=50)
    assert policy.due_in(pending_bytes=999, pending_records=1, elapsed=0.0) == 1.0
    assert policy.due_in(pending_bytes=1000, pending_records=1, elapsed=0.0) == 0.0
    assert policy.due_in(pending_bytes=10, pending_records=50, elapsed=0.0) == 0.0
    assert (
        CommitPolicy(max_delay=1.0).due_in(pending_bytes=10, pending_records=10**9, elapsed=0.0)
        == 1.0
    )


def test_zero_bounds_commit_every_append() -> None:
    assert CommitPolicy(max_delay=0).due_in(pending_bytes=1, pending_records=1, elapsed=0) == 0.0
    assert CommitPolicy(max_bytes=0).due_in(pending_bytes=1, pending_records=1, elapsed=0) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_delay": -1.0}, ValueError),
        ({"max_delay": math.inf}, ValueError),
        ({"max_delay": math.nan}, ValueError),
        ({"max_delay": True}, TypeError),
        ({"max_delay": "1"}, TypeError),
        ({"max_bytes": -1}, ValueError),
        ({"max_bytes": 1.5}, ValueError),
        ({"max_bytes": None}, ValueError),
        ({"max_records": 0}, ValueError),
        ({"max_records": True}, ValueError),
    ],
)
def test_invalid_policies_cannot_be_built(kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        CommitPolicy(**kwargs)  # type: ignore[arg-type]


def test_a_refused_policy_names_the_field_the_bound_and_what_it_got() -> None:
    with pytest.raises(TypeError, match=r"^max_delay must be a number of seconds, got bool$"):
        CommitPolicy(max_delay=True)
    with pytest.raises(ValueError, match=r"^max_delay must be finite and >= 0, got -0\.5$"):
        CommitPolicy(max_delay=-0.5)
    with pytest.raises(ValueError, match=r"^max_bytes must be an int >= 0, got -1$"):
        CommitPolicy(max_bytes=-1)
    with pytest.raises(ValueError, match=r"^max_bytes must be an int >= 0, got None$"):
        CommitPolicy(max_bytes=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_records must be an int >= 1, got 0$"):
        CommitPolicy(max_records=0)
    with pytest.raises(ValueError, match=r"^max_records must be an int >= 1, got 2\.0$"):
        CommitPolicy(max_records=2.0)  # type: ignore[arg-type]


def test_the_smallest_valid_bounds_are_accepted() -> None:
    """``max_bytes`` from 0, ``max_records`` from 1 or ``None``, and
    ``max_delay`` from 0, an int as well as a float."""
    policy = CommitPolicy(max_delay=0, max_bytes=0, max_records=1)
    assert (policy.max_delay, policy.max_bytes, policy.max_records) == (0, 0, 1)
    assert CommitPolicy(max_records=None).max_records is None
