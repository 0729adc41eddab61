"""Regressions of the sample-level ledger found by its users."""

from __future__ import annotations

from frontier_core import FailurePolicy, Ledger, LedgerConfig


def test_a_sibling_is_not_restarted_when_a_later_failure_in_the_event_drops_its_group() -> None:
    """Two siblings of one group fail in one event; the second failure
    reaches the attempt limit and drops the group: nothing of it is to be
    restarted (found by the Ray sample service)."""
    config = LedgerConfig(samples=3, on_failure=FailurePolicy.RETRY, max_failures=2)
    ledger = Ledger.start(config).stamp(1).ledger
    applied = ledger.dispatch([0])
    leases = applied.effect.leases
    failed = applied.ledger.fail_sample(leases[:2])
    assert failed.effect.dropped == (0,)
    assert failed.effect.restart == ()
    assert failed.ledger.cut == 1  # dropped on record: resolved
    assert failed.ledger.sibling_count() == 0
