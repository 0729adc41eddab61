"""Exhaustive small-scope checking of the real ledger's group table
(frontier_core.testing.explore; the ledger itself at n = 1 is
test_exhaustive_samples.py's)."""

from __future__ import annotations

import os

import attrs
import pytest

import frontier_core._groups as groups_module
from frontier_core import Checkpoint, FailurePolicy
from frontier_core._groups import GroupTable
from frontier_core.testing import Bounds, InvariantViolation, explore

# The bounds proofs/INVARIANTS.md quotes; FRONTIER_EXPLORE_LEN raises them
# for a longer run outside CI.
STREAM_LEN = int(os.environ.get("FRONTIER_EXPLORE_LEN", "5"))


@pytest.mark.mutation
@pytest.mark.parametrize("policy", list(FailurePolicy))
def test_small_scope_exploration_keeps_every_invariant(policy: FailurePolicy) -> None:
    """The mutation run's workhorse: the same checker at bounds small enough
    for a few seconds a mutant."""
    explore(Bounds(stream_len=3, batch=2, on_failure=policy, max_attempts=2))


@pytest.mark.parametrize("policy", list(FailurePolicy))
def test_every_reachable_state_keeps_every_invariant(policy: FailurePolicy) -> None:
    bounds = Bounds(stream_len=STREAM_LEN, batch=2, on_failure=policy, max_attempts=2)
    report = explore(bounds)
    print(f"\n{policy.value}: {report}")
    # The exploration is not vacuous: it reaches drained ends, crosses
    # resumes from many distinct checkpoints and refuses illegal events.
    assert report.states > 1_000
    assert report.transitions > 10 * report.states
    assert report.drained_states >= 1
    assert report.checkpoints_checked > 100
    assert report.illegal_events_checked > report.states


def _mutants() -> dict[str, object]:
    original_checkpoint = GroupTable.checkpoint
    original_resume = GroupTable.resume.__func__  # type: ignore[attr-defined]

    def cut_one_too_high(self: GroupTable, *, save_buffer: bool = True) -> Checkpoint:
        c = original_checkpoint(self, save_buffer=save_buffer)
        if not self.count(groups_module.Status.OUTSTANDING):
            return c
        return attrs.evolve(
            c, cut=c.cut + 1, trained_above_cut=(), dropped_above_cut=(), retained=(), attempts=()
        )

    def forget_trained(cls: type[GroupTable], config, checkpoint, **kw):  # type: ignore[no-untyped-def]
        return original_resume(cls, config, attrs.evolve(checkpoint, trained_above_cut=()), **kw)

    def forget_attempts(self: GroupTable, *, save_buffer: bool = True) -> Checkpoint:
        return attrs.evolve(original_checkpoint(self, save_buffer=save_buffer), attempts=())

    return {
        "checkpoint cuts above an outstanding prompt": ("checkpoint", cut_one_too_high),
        "resume forgets what was trained above the cut": ("resume", classmethod(forget_trained)),
        "checkpoint forgets failed attempts": ("checkpoint", forget_attempts),
    }


@pytest.mark.parametrize("name", list(_mutants()))
def test_the_checker_catches_a_seeded_bug(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker is not vacuous: each seeded bug is found, with a trace."""
    attribute, replacement = _mutants()[name]  # type: ignore[misc]
    monkeypatch.setattr(GroupTable, attribute, replacement)
    with pytest.raises(InvariantViolation) as info:
        explore(Bounds(stream_len=3, batch=2, on_failure=FailurePolicy.RETRY))
    assert info.value.invariant in {
        "NO-SKIP",
        "NO-DUP",
        "CUT-LOWER-BOUND",
        "RESUME-EXACT",
        "RETRY-BOUND",
    }
    assert info.value.trace
