"""Tests that kill mutants (scripts/mutation.sh): each pins a behaviour a
surviving mutant of the core got away with. Equivalent mutants are written
up in proofs/MUTANTS.md instead.

The first test is the mutation run's workhorse: the exhaustive checker at
bounds small enough for a few seconds a mutant.
"""

from __future__ import annotations

import pytest

from frontier_core import FailurePolicy
from frontier_core.testing import Bounds, explore


@pytest.mark.parametrize("policy", list(FailurePolicy))
def test_small_scope_exploration_keeps_every_invariant(policy: FailurePolicy) -> None:
    explore(Bounds(stream_len=3, batch=2, on_failure=policy, max_attempts=2))
