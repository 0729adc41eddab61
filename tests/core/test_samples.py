"""The sample-level ledger (``Ledger``), against the semantics of
issue 13 item 1 as ``_ledger.py``'s docstring states them: a group of n
siblings, each unstarted, running under one attempt, or sealed by exactly
one; fencing of every result that is not from its sibling's current attempt;
``sibling`` and ``group`` granularity under both failure policies; reuse of
held sealed siblings across a resume; and the n = 1 case, which must be the
prompt-level ledger.

Every expected value below is derived from that statement (which attempts
were handed out, which ones are current), never copied from a run.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frontier_core import (
    Buffer,
    Checkpoint,
    CheckpointMismatchError,
    Dispatch,
    Effect,
    Evict,
    Fail,
    FailSample,
    FailurePolicy,
    Granularity,
    IllegalTransitionError,
    Lease,
    Ledger,
    LedgerConfig,
    Restart,
    Seal,
    Setback,
    Sibling,
    Status,
    Train,
)
from frontier_core._groups import GroupTable

pytestmark = pytest.mark.mutation

DROP, RETRY = FailurePolicy.DROP, FailurePolicy.RETRY
SIBLING, GROUP = Granularity.SIBLING, Granularity.GROUP
RUNNING, SEALED, UNSTARTED = Sibling.RUNNING, Sibling.SEALED, Sibling.UNSTARTED


def config(
    n: int = 2,
    *,
    policy: FailurePolicy = RETRY,
    granularity: Granularity = SIBLING,
    max_failures: int = 3,
    stream_len: int | None = 8,
) -> LedgerConfig:
    return LedgerConfig(
        on_failure=policy,
        max_failures=max_failures,
        stream_len=stream_len,
        fingerprint="fp",
        samples=n,
        granularity=granularity,
    )


def dispatched(
    cfg: LedgerConfig, groups: Iterable[int], stamp: int | None = None
) -> tuple[Ledger, dict[tuple[int, int], Lease]]:
    """A fresh ledger with ``groups`` stamped and dispatched, and the lease
    of each sibling by ``(ordinal, sibling)``."""
    groups = list(groups)
    ledger = Ledger.start(cfg).stamp(stamp if stamp is not None else max(groups) + 1).ledger
    step = ledger.dispatch(groups)
    return step.ledger, {(x.ordinal, x.sibling): x for x in step.effect.leases}


def roundtrip(checkpoint: Checkpoint) -> Checkpoint:
    record = json.loads(json.dumps(checkpoint.state_dict()))
    return Checkpoint.from_state_dict(record, fingerprint="fp")


def detail(ledger: Ledger, ordinal: int) -> list[tuple[Sibling, int | None] | None]:
    return [ledger.sibling(ordinal, s) for s in range(ledger.config.samples)]


def fingerprint(ledger: Ledger) -> tuple[object, ...]:
    """Everything observable of a sample ledger, to tell "unchanged"."""
    return (
        ledger._groups,
        ledger.filter_horizon,
        ledger.next_attempt,
        tuple(ledger.running()),
        tuple(ledger.held()),
        ledger.sibling_count(),
        ledger.checkpoint().state_dict(),
    )


# -- dispatch and leases ----------------------------------------------------------


def test_dispatch_starts_one_lease_per_sibling_under_distinct_fresh_attempts() -> None:
    ledger = Ledger.start(config(3)).stamp(4).ledger
    assert ledger.next_attempt == 0
    step = ledger.dispatch([2, 0])
    leases = step.effect.leases
    # n leases per group, one per sibling, every attempt new and distinct.
    assert sorted((x.ordinal, x.sibling) for x in leases) == [
        (o, s) for o in (0, 2) for s in range(3)
    ]
    attempts = [x.attempt for x in leases]
    assert len(set(attempts)) == 6
    assert all(0 <= a < step.ledger.next_attempt for a in attempts)
    assert step.ledger.next_attempt == 6  # one counter, six attempts handed out
    assert step.effect.reused == () and step.effect.landed == ()
    assert step.ledger.status(0) is step.ledger.status(2) is Status.OUTSTANDING
    assert step.ledger.status(1) is Status.PENDING
    assert sorted(step.ledger.running()) == sorted(leases)
    assert list(step.ledger.running()) == sorted(leases)  # ascending, as documented
    for x in leases:
        assert step.ledger.sibling(x.ordinal, x.sibling) == (RUNNING, x.attempt)
    assert detail(step.ledger, 1) == [None, None, None]
    assert step.ledger.sibling_count() == 6
    # The next dispatch numbers on from the counter: no attempt is reused.
    later = step.ledger.dispatch([1])
    assert {x.attempt for x in later.effect.leases} == {6, 7, 8}
    assert later.ledger.next_attempt == 9
    # The old value is untouched.
    assert ledger.next_attempt == 0 and ledger.sibling_count() == 0


def test_sibling_refuses_an_index_outside_the_group() -> None:
    ledger, _ = dispatched(config(2), [0])
    for bad in (-1, 2, 5):
        with pytest.raises(ValueError, match=rf"sibling must be in \[0, 2\), got {bad}"):
            ledger.sibling(0, bad)


def test_a_dispatch_of_a_group_that_is_not_pending_is_illegal_and_changes_nothing() -> None:
    ledger, _ = dispatched(config(2), [0], stamp=2)
    before = fingerprint(ledger)
    # Outstanding already; a legal group next to an illegal one; unstamped.
    for ordinals, offending in (([0], 0), ([1, 0], 0), ([5], 5)):
        with pytest.raises(IllegalTransitionError) as info:
            ledger.dispatch(ordinals)
        assert info.value.event == "dispatch"
        assert info.value.ordinals == (offending,)
    assert fingerprint(ledger) == before
    # Group 1, legal in the refused event, was not dispatched by it.
    assert ledger.status(1) is Status.PENDING


# -- seal and fencing -------------------------------------------------------------


def test_a_seal_from_the_current_attempt_is_accepted_and_a_second_one_fenced() -> None:
    ledger, leases = dispatched(config(3), [0])
    x = leases[(0, 1)]
    step = ledger.seal([x])
    assert step.effect.event == "seal"
    assert step.effect.sealed == (x,) and step.effect.fenced == () and step.effect.landed == ()
    assert step.ledger.sibling(0, 1) == (SEALED, x.attempt)
    assert step.ledger.status(0) is Status.OUTSTANDING
    assert list(step.ledger.held()) == [x]
    assert x not in set(step.ledger.running())
    # A second seal of the same attempt: exactly one result seals it.
    again = step.ledger.seal([x])
    assert again.effect.sealed == () and again.effect.fenced == (x,)
    assert fingerprint(again.ledger) == fingerprint(step.ledger)


def test_a_seal_under_another_attempt_of_the_sibling_is_fenced() -> None:
    ledger, leases = dispatched(config(2), [0, 1])
    mine, other = leases[(0, 0)], leases[(1, 0)]
    # (0, 0) under the attempt that was handed to (1, 0): not its attempt.
    wrong = Lease(0, 0, other.attempt)
    step = ledger.seal([wrong])
    assert step.effect.fenced == (wrong,) and step.effect.sealed == ()
    assert fingerprint(step.ledger) == fingerprint(ledger)
    assert step.ledger.sibling(0, 0) == (RUNNING, mine.attempt)


def test_a_late_answer_after_a_sibling_failure_is_fenced_before_and_after_the_restart() -> None:
    ledger, leases = dispatched(config(2, policy=RETRY, granularity=SIBLING), [0])
    old = leases[(0, 1)]
    failed = ledger.fail_sample([old])
    assert failed.effect.restart == ((0, 1),)
    ledger = failed.ledger
    assert ledger.sibling(0, 1) == (UNSTARTED, None)
    # The timed-out request answers late, before the sibling was restarted.
    late = ledger.seal([old])
    assert late.effect.fenced == (old,) and late.effect.sealed == ()
    assert fingerprint(late.ledger) == fingerprint(ledger)
    restarted = ledger.restart([(0, 1)])
    (new,) = restarted.effect.leases
    assert restarted.effect.event == "restart"
    assert new[:2] == (0, 1) and new.attempt != old.attempt
    assert new.attempt == ledger.next_attempt  # a fresh attempt from the counter
    assert restarted.ledger.next_attempt == ledger.next_attempt + 1
    ledger = restarted.ledger
    assert ledger.sibling(0, 1) == (RUNNING, new.attempt)
    # And after the restart: the old attempt is still not current.
    late = ledger.seal([old])
    assert late.effect.fenced == (old,)
    assert ledger.seal([new]).effect.sealed == (new,)


@pytest.mark.parametrize("how", ["group granularity", "prompt-level fail"])
def test_a_late_answer_after_the_whole_group_failed_is_fenced(how: str) -> None:
    cfg = config(2, policy=RETRY, granularity=GROUP if how == "group granularity" else SIBLING)
    ledger, leases = dispatched(cfg, [0])
    sealed = leases[(0, 0)]
    running = leases[(0, 1)]
    ledger = ledger.seal([sealed]).ledger
    if how == "group granularity":
        step = ledger.fail_sample([running])
    else:
        step = ledger.fail([0])
    assert step.effect.requeued == (0,)
    ledger = step.ledger
    assert ledger.status(0) is Status.PENDING
    # The whole group is generated again: nothing of its siblings is kept.
    assert detail(ledger, 0) == [None, None]
    assert ledger.sibling_count() == 0
    for old in (sealed, running):
        assert ledger.seal([old]).effect.fenced == (old,)
    again = ledger.dispatch([0])
    assert again.effect.reused == ()
    assert {x.sibling for x in again.effect.leases} == {0, 1}
    assert not {x.attempt for x in again.effect.leases} & {sealed.attempt, running.attempt}
    for old in (sealed, running):
        assert again.ledger.seal([old]).effect.fenced == (old,)


def test_a_seal_for_a_group_that_landed_or_was_never_dispatched_is_fenced() -> None:
    ledger, leases = dispatched(config(1), [0], stamp=3)
    x = leases[(0, 0)]
    landed = ledger.seal([x]).ledger
    assert landed.status(0) is Status.BUFFERED
    assert landed.seal([x]).effect.fenced == (x,)
    # Group 1 is pending: no attempt of it is running; attempt 0 was (0, 0)'s.
    stray = Lease(1, 0, 0)
    assert landed.seal([stray]).effect.fenced == (stray,)
    trained = landed.train([0]).ledger
    assert trained.seal([x]).effect.fenced == (x,)
    assert fingerprint(trained.seal([x]).ledger) == fingerprint(trained)


def test_a_pre_crash_attempt_is_fenced_after_the_resume() -> None:
    cfg = config(2)
    ledger = Ledger.start(cfg).stamp(2).ledger
    saved = roundtrip(ledger.checkpoint())  # before any attempt
    step = ledger.dispatch([0, 1])
    pre_crash = step.effect.leases
    crashed = step.ledger.seal([pre_crash[0]]).ledger
    # The crashed run reached this counter (a journal knows it).
    floor = crashed.next_attempt
    resumed = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=(), attempt_floor=floor)
    ledger = resumed.ledger
    assert ledger.next_attempt >= floor
    ledger = ledger.stamp(2).ledger
    redo = ledger.dispatch([0, 1])
    assert all(x.attempt >= floor for x in redo.effect.leases)
    ledger = redo.ledger
    for old in pre_crash:
        # Not an error (the attempt was handed out once) and not accepted.
        step = ledger.seal([old])
        assert step.effect.fenced == (old,) and step.effect.sealed == ()
        step = ledger.fail_sample([old])
        assert step.effect.fenced == (old,) and step.effect.restart == ()
        assert fingerprint(step.ledger) == fingerprint(ledger)


def test_without_a_floor_a_pre_crash_attempt_above_the_counter_is_refused() -> None:
    """The reason for ``attempt_floor``: a resume that is not told how far
    the crashed run counted starts from the checkpoint's counter, so the
    crashed run's later attempts name attempts this run never started."""
    cfg = config(2)
    ledger = Ledger.start(cfg).stamp(1).ledger
    saved = ledger.checkpoint()
    pre_crash = ledger.dispatch([0]).effect.leases
    resumed = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=())
    # The least counter the rules allow: the checkpoint's, 0.
    assert resumed.ledger.next_attempt == saved.next_attempt == 0
    with pytest.raises(IllegalTransitionError) as info:
        resumed.ledger.seal([pre_crash[0]])
    assert info.value.event == "seal" and info.value.ordinals == (0,)


def test_a_seal_event_mixing_current_and_stale_leases_accepts_exactly_the_current() -> None:
    ledger, leases = dispatched(config(2), [0, 1])
    ledger = ledger.seal([leases[(1, 1)]]).ledger  # (1, 1) sealed already
    stale = Lease(0, 1, leases[(1, 0)].attempt)
    step = ledger.seal([leases[(0, 0)], stale, leases[(1, 1)], leases[(1, 0)]])
    assert step.effect.sealed == (leases[(0, 0)], leases[(1, 0)])
    assert step.effect.fenced == (stale, leases[(1, 1)])
    assert step.effect.landed == (1,)
    assert step.ledger.status(1) is Status.BUFFERED
    assert step.ledger.status(0) is Status.OUTSTANDING
    assert step.ledger.sibling(0, 1) == (RUNNING, leases[(0, 1)].attempt)


# -- landing ----------------------------------------------------------------------


def test_a_group_lands_exactly_when_its_last_sibling_seals() -> None:
    ledger, leases = dispatched(config(3), [0, 1])
    for s in (2, 0):
        step = ledger.seal([leases[(0, s)]])
        assert step.effect.landed == ()
        ledger = step.ledger
        assert ledger.status(0) is Status.OUTSTANDING
    step = ledger.seal([leases[(0, 1)]])
    assert step.effect.landed == (0,)
    ledger = step.ledger
    assert ledger.status(0) is Status.BUFFERED
    # A landed group keeps no sibling detail; group 1 still has its three.
    assert detail(ledger, 0) == [None, None, None]
    assert ledger.sibling_count() == 3
    assert list(ledger.held()) == []
    trained = ledger.train([0]).ledger
    assert trained.status(0) is None and trained.cut == 1


def test_one_seal_event_can_land_several_groups_each_once() -> None:
    ledger, leases = dispatched(config(2), [0, 1, 2])
    step = ledger.seal([leases[(o, s)] for o in (2, 0) for s in (1, 0)])
    assert sorted(step.effect.landed) == [0, 2]
    assert len(step.effect.landed) == 2
    assert step.ledger.status(1) is Status.OUTSTANDING
    assert step.ledger.sibling_count() == 2


def test_a_prompt_level_buffer_lands_the_group_whole_and_fences_its_attempts() -> None:
    ledger, leases = dispatched(config(2), [0])
    step = ledger.buffer([0])
    assert step.ledger.status(0) is Status.BUFFERED
    assert step.ledger.sibling_count() == 0 and list(step.ledger.running()) == []
    assert step.ledger.seal([leases[(0, 0)]]).effect.fenced == (leases[(0, 0)],)


# -- failures ---------------------------------------------------------------------


def test_sibling_granularity_under_retry_regenerates_only_the_failed_sibling() -> None:
    ledger, leases = dispatched(config(3, policy=RETRY, granularity=SIBLING), [0])
    ledger = ledger.seal([leases[(0, 0)]]).ledger
    step = ledger.fail_sample([leases[(0, 1)]])
    assert step.effect.event == "fail_sample"
    assert step.effect.restart == ((0, 1),)
    assert step.effect.requeued == step.effect.dropped == step.effect.unstamped == ()
    assert step.effect.fenced == () and step.effect.leases == ()
    ledger = step.ledger
    # The group stays outstanding with one failed attempt counted.
    assert ledger.status(0) is Status.OUTSTANDING
    assert ledger.failures(0) == 1
    assert roundtrip(ledger.checkpoint()).failures == ((0, 1),)
    # Its other siblings go on: the sealed one stays sealed, the running one runs.
    assert detail(ledger, 0) == [
        (SEALED, leases[(0, 0)].attempt),
        (UNSTARTED, None),
        (RUNNING, leases[(0, 2)].attempt),
    ]
    new = ledger.restart([(0, 1)]).effect.leases[0]
    ledger = ledger.restart([(0, 1)]).ledger
    assert ledger.seal([leases[(0, 2)]]).effect.landed == ()
    ledger = ledger.seal([leases[(0, 2)]]).ledger
    done = ledger.seal([new])
    assert done.effect.landed == (0,)


@pytest.mark.parametrize("granularity", list(Granularity))
def test_under_drop_a_failed_sample_drops_its_group_at_once(granularity: Granularity) -> None:
    ledger, leases = dispatched(config(2, policy=DROP, granularity=granularity), [0, 1])
    ledger = ledger.seal([leases[(1, 0)]]).ledger
    step = ledger.fail_sample([leases[(1, 1)]])
    assert step.effect.dropped == (1,)
    assert step.effect.restart == () and step.effect.requeued == ()
    ledger = step.ledger
    assert ledger.status(1) is Status.DROPPED
    assert detail(ledger, 1) == [None, None]
    assert list(ledger.held()) == []
    assert ledger.seal([leases[(1, 0)]]).effect.fenced == (leases[(1, 0)],)
    # Group 0 is untouched.
    assert detail(ledger, 0) == [(RUNNING, leases[(0, s)].attempt) for s in (0, 1)]


def test_sibling_granularity_at_the_attempt_limit_drops_the_group() -> None:
    ledger, leases = dispatched(config(2, policy=RETRY, granularity=SIBLING, max_failures=2), [0])
    ledger = ledger.seal([leases[(0, 0)]]).ledger
    first = ledger.fail_sample([leases[(0, 1)]])
    assert first.effect.restart == ((0, 1),) and first.effect.dropped == ()
    ledger = first.ledger
    retry = ledger.restart([(0, 1)])
    (new,) = retry.effect.leases
    second = retry.ledger.fail_sample([new])
    # Two failed samples are two failed attempts of the group: the limit.
    assert second.effect.dropped == (0,) and second.effect.restart == ()
    ledger = second.ledger
    assert ledger.status(0) is None and ledger.cut == 1  # dropped, resolved
    assert ledger.sibling_count() == 0
    assert ledger.seal([leases[(0, 0)]]).effect.fenced == (leases[(0, 0)],)


def test_two_failed_siblings_of_one_group_in_one_event_are_two_attempts() -> None:
    ledger, leases = dispatched(config(3, policy=RETRY, granularity=SIBLING, max_failures=3), [0])
    step = ledger.fail_sample([leases[(0, 2)], leases[(0, 0)]])
    assert sorted(step.effect.restart) == [(0, 0), (0, 2)]
    assert step.effect.fenced == ()
    assert step.ledger.failures(0) == 2
    assert step.ledger.status(0) is Status.OUTSTANDING
    assert detail(step.ledger, 0) == [
        (UNSTARTED, None),
        (RUNNING, leases[(0, 1)].attempt),
        (UNSTARTED, None),
    ]
    # One more failure reaches the limit of 3.
    last = step.ledger.fail_sample([leases[(0, 1)]])
    assert last.effect.dropped == (0,)


def test_a_failure_that_drops_the_group_fences_its_other_failures_in_the_event() -> None:
    ledger, leases = dispatched(config(2, policy=RETRY, granularity=SIBLING, max_failures=2), [0])
    ledger = ledger.fail_sample([leases[(0, 0)]]).ledger  # attempts 1 of 2
    new = ledger.restart([(0, 0)]).effect.leases[0]
    ledger = ledger.restart([(0, 0)]).ledger
    step = ledger.fail_sample([new, leases[(0, 1)]])
    assert step.effect.dropped == (0,)
    # The first failure dropped the group; the second is of a gone group.
    assert len(step.effect.fenced) == 1
    assert step.effect.fenced[0] in (new, leases[(0, 1)])
    assert step.effect.restart == ()


@pytest.mark.parametrize("granularity", list(Granularity))
@pytest.mark.parametrize("policy", list(FailurePolicy))
def test_one_event_is_the_sequence_of_its_failures(
    granularity: Granularity, policy: FailurePolicy
) -> None:
    """Failures listed in one event act as if reported one after another."""
    cfg = config(2, policy=policy, granularity=granularity, max_failures=3)
    ledger, leases = dispatched(cfg, [0, 1])
    batch = [leases[(0, 1)], leases[(1, 0)], leases[(0, 0)]]
    together = ledger.fail_sample(batch)
    apart = ledger
    for x in batch:
        apart = apart.fail_sample([x]).ledger
    assert together.ledger == apart
    assert fingerprint(together.ledger) == fingerprint(apart)


def test_group_granularity_under_retry_fails_the_whole_group_and_regenerates_it() -> None:
    ledger, leases = dispatched(config(3, policy=RETRY, granularity=GROUP, max_failures=2), [0])
    ledger = ledger.seal([leases[(0, 0)]]).ledger
    step = ledger.fail_sample([leases[(0, 1)]])
    assert step.effect.requeued == (0,) and step.effect.restart == ()
    assert step.effect.dropped == ()
    ledger = step.ledger
    assert ledger.status(0) is Status.PENDING and ledger.failures(0) == 1
    assert ledger.sibling_count() == 0  # the sealed sibling went with its group
    again = ledger.dispatch([0])
    assert again.effect.reused == () and len(again.effect.leases) == 3
    # The second failure reaches max_failures 2: dropped, on record.
    dropped = again.ledger.fail_sample([again.effect.leases[2]])
    assert dropped.effect.dropped == (0,)
    assert dropped.ledger.status(0) is None and dropped.ledger.cut == 1


def test_group_granularity_counts_two_failed_siblings_in_one_event_once() -> None:
    ledger, leases = dispatched(config(2, policy=RETRY, granularity=GROUP), [0])
    step = ledger.fail_sample([leases[(0, 0)], leases[(0, 1)]])
    assert step.effect.requeued == (0,)
    assert step.ledger.failures(0) == 1
    assert len(step.effect.fenced) == 1


def test_a_fenced_failure_changes_nothing() -> None:
    ledger, leases = dispatched(config(2, policy=RETRY, granularity=SIBLING), [0])
    ledger = ledger.seal([leases[(0, 0)]]).ledger
    step = ledger.fail_sample([leases[(0, 0)]])  # sealed already
    assert step.effect.fenced == (leases[(0, 0)],)
    assert step.ledger.failures(0) == 0
    assert fingerprint(step.ledger) == fingerprint(ledger)


def test_a_failure_reported_twice_counts_once() -> None:
    ledger, leases = dispatched(config(2, policy=RETRY, granularity=SIBLING), [0])
    once = ledger.fail_sample([leases[(0, 1)]]).ledger
    twice = once.fail_sample([leases[(0, 1)]])
    assert twice.effect.fenced == (leases[(0, 1)],)
    assert twice.ledger.failures(0) == 1


# -- restart ----------------------------------------------------------------------


def test_restart_gives_each_unstarted_sibling_a_new_attempt() -> None:
    ledger, leases = dispatched(
        config(3, policy=RETRY, granularity=SIBLING, max_failures=5), [0, 1]
    )
    ledger = ledger.fail_sample([leases[(0, 2)], leases[(1, 0)], leases[(0, 0)]]).ledger
    counter = ledger.next_attempt
    step = ledger.restart([(1, 0), (0, 0), (0, 2)])
    got = step.effect.leases
    assert [x[:2] for x in got] == [(1, 0), (0, 0), (0, 2)]  # in the order asked
    assert sorted(x.attempt for x in got) == [counter, counter + 1, counter + 2]
    assert step.ledger.next_attempt == counter + 3
    for x in got:
        assert step.ledger.sibling(x.ordinal, x.sibling) == (RUNNING, x.attempt)
    assert step.effect.dropped == step.effect.requeued == ()


@pytest.mark.parametrize(
    "target",
    ["running", "sealed", "pending group", "buffered group", "sibling >= n", "unstamped group"],
)
def test_restart_of_a_sibling_that_is_not_unstarted_is_illegal(target: str) -> None:
    ledger, leases = dispatched(config(2, policy=RETRY), [0, 1], stamp=3)
    ledger = ledger.seal([leases[(0, 1)]]).ledger
    ledger = ledger.seal([leases[(1, 0)], leases[(1, 1)]]).ledger  # group 1 landed
    ledger = ledger.fail_sample([leases[(0, 0)]]).ledger  # (0, 0) unstarted
    pair = {
        "running": None,
        "sealed": (0, 1),
        "pending group": (2, 0),
        "buffered group": (1, 0),
        "sibling >= n": (0, 2),
        "unstamped group": (5, 0),
    }[target]
    if pair is None:
        ledger = ledger.restart([(0, 0)]).ledger
        pair = (0, 0)
    before = fingerprint(ledger)
    # Listed after a legal restart: the event applies none of it.
    legal = [(0, 0)] if target != "running" else []
    with pytest.raises(IllegalTransitionError) as info:
        ledger.restart([*legal, pair])
    assert info.value.event == "restart"
    assert info.value.ordinals == (pair[0],)
    assert "restart needs unstarted siblings of outstanding groups" in info.value.reason
    assert str(pair) in info.value.reason
    assert fingerprint(ledger) == before


# -- malformed and illegal sample events -------------------------------------------


@pytest.mark.parametrize("method", ["seal", "fail_sample"])
def test_a_result_of_an_attempt_never_handed_out_is_illegal_and_changes_nothing(
    method: str,
) -> None:
    ledger, leases = dispatched(config(2), [0, 1])
    before = fingerprint(ledger)
    good = leases[(0, 0)]
    for bad in (Lease(1, 0, ledger.next_attempt), Lease(1, 1, ledger.next_attempt + 40)):
        with pytest.raises(IllegalTransitionError) as info:
            getattr(ledger, method)([good, bad])
        assert info.value.event == method
        assert info.value.ordinals == (1,)
        assert "never started" in info.value.reason
        assert f"attempts < {ledger.next_attempt}" in info.value.reason
        assert str(bad) in info.value.reason
    assert fingerprint(ledger) == before
    # The good lease was not consumed by the refused event.
    assert ledger.seal([good]).effect.sealed == (good,)


@pytest.mark.parametrize("method", ["seal", "fail_sample"])
def test_a_result_for_a_sibling_outside_the_group_is_illegal(method: str) -> None:
    ledger, leases = dispatched(config(2), [0, 3], stamp=4)
    before = fingerprint(ledger)
    bad = Lease(3, 2, leases[(3, 0)].attempt)
    with pytest.raises(IllegalTransitionError) as info:
        getattr(ledger, method)([leases[(0, 0)], bad])
    assert info.value.event == method and info.value.ordinals == (3,)
    assert "siblings < 2" in info.value.reason
    assert fingerprint(ledger) == before


@pytest.mark.parametrize(
    ("event", "item"),
    [(Seal, (0, 0, 0)), (FailSample, (0, 0, 0)), (Restart, (0, 0))],
)
def test_a_sibling_listed_twice_is_a_malformed_event(event: type, item: tuple[int, ...]) -> None:
    twin = (*item[:2], 7)[: len(item)]  # the same sibling, another attempt
    with pytest.raises(IllegalTransitionError) as info:
        event([item, (1, 0, 0)[: len(item)], twin])
    assert info.value.event == event.name and info.value.ordinals == (0,)
    assert "listed more than once" in info.value.reason
    # The same ordinal with another sibling is fine.
    event([item, (0, 1, 0)[: len(item)]])


_BAD_TRIPLES = [(-1, 0, 0), (0, -1, 0), (0, 0, -1), (True, 0, 0), (0, 0.0, 0), (0, 0), (0, 0, 0, 0)]
_BAD_PAIRS = [(-1, 0), (0, -1), (0, True), (1.0, 0), (0,), (0, 0, 0)]


@pytest.mark.parametrize(
    ("event", "item"),
    [(Seal, x) for x in _BAD_TRIPLES]
    + [(FailSample, x) for x in _BAD_TRIPLES]
    + [(Restart, x) for x in _BAD_PAIRS],
)
def test_a_lease_that_is_not_ints_of_the_right_width_cannot_be_built(
    event: type, item: tuple[object, ...]
) -> None:
    width = 2 if event is Restart else 3
    with pytest.raises(IllegalTransitionError) as info:
        event([item])
    assert info.value.event == event.name
    assert f"expected {width} ints >= 0" in info.value.reason


# -- checkpoint and resume ----------------------------------------------------------


def test_a_checkpoint_saves_the_counter_and_the_sealed_siblings_of_outstanding_groups() -> None:
    ledger, leases = dispatched(config(3), [0, 1], stamp=3)
    ledger = ledger.seal([leases[(1, 2)], leases[(0, 1)]]).ledger
    saved = roundtrip(ledger.checkpoint())
    assert saved.samples == 3
    assert saved.next_attempt == ledger.next_attempt == 6
    assert saved.sealed == (leases[(0, 1)], leases[(1, 2)])
    groups = ledger._groups
    assert attrs.evolve(saved, samples=1, next_attempt=0, sealed=()) == groups.checkpoint()
    # Without the samples saved, the record says nothing of them.
    bare = ledger.checkpoint(save_sealed=False)
    assert bare.sealed == () and bare.next_attempt == 6
    assert attrs.evolve(bare, samples=1, next_attempt=0) == groups.checkpoint()
    unbuffered = ledger.checkpoint(save_buffer=False)
    assert attrs.evolve(unbuffered, samples=1, next_attempt=0, sealed=()) == groups.checkpoint(
        save_buffer=False
    )


def test_sealed_siblings_held_at_resume_are_reused_not_regenerated() -> None:
    cfg = config(3)
    ledger, leases = dispatched(cfg, [0, 1], stamp=3)
    ledger = ledger.seal([leases[(0, 0)], leases[(0, 2)]]).ledger
    saved = roundtrip(ledger.checkpoint())
    resumed = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=saved.sealed)
    assert resumed.rewind_to == 0 and resumed.covered == ()
    assert resumed.reused == (leases[(0, 0)], leases[(0, 2)]) and resumed.ignored == ()
    ledger = resumed.ledger
    assert ledger.status(0) is Status.UNSTAMPED
    assert list(ledger.held()) == [leases[(0, 0)], leases[(0, 2)]]
    assert list(ledger.running()) == []
    ledger = ledger.stamp(3).ledger
    step = ledger.dispatch([0, 1])
    assert step.effect.reused == (leases[(0, 0)], leases[(0, 2)])
    # Only sibling 1 of group 0 and all of group 1 are generated again.
    assert sorted(x[:2] for x in step.effect.leases) == [(0, 1), (1, 0), (1, 1), (1, 2)]
    assert all(x.attempt >= saved.next_attempt for x in step.effect.leases)
    assert step.effect.landed == ()
    ledger = step.ledger
    assert ledger.sibling(0, 0) == (SEALED, leases[(0, 0)].attempt)
    new = next(x for x in step.effect.leases if x[:2] == (0, 1))
    done = ledger.seal([new])
    assert done.effect.landed == (0,)
    # A reused sibling is sealed: its old attempt does not seal it twice.
    assert ledger.seal([leases[(0, 0)]]).effect.fenced == (leases[(0, 0)],)


def test_a_group_with_all_its_siblings_held_lands_at_its_dispatch() -> None:
    cfg = config(2)
    ledger, leases = dispatched(cfg, [0, 1], stamp=2)
    saved = roundtrip(ledger.checkpoint())  # nothing sealed yet
    ledger = ledger.seal([leases[(0, 0)], leases[(0, 1)], leases[(1, 0)]]).ledger
    # Crash; the journal made the three seals durable.
    journal = [leases[(0, 0)], leases[(0, 1)], leases[(1, 0)]]
    resumed = Ledger.resume(
        cfg, saved, load_replay_buffer=True, sealed=journal, attempt_floor=ledger.next_attempt
    )
    assert resumed.reused == tuple(journal)
    after = resumed.ledger
    # The state with a whole group held checkpoints and reads back.
    record = roundtrip(after.checkpoint())
    assert record.sealed == tuple(journal)
    again = Ledger.resume(cfg, record, load_replay_buffer=True, sealed=record.sealed)
    assert again.ledger == after
    counter = after.next_attempt
    step = after.stamp(2).ledger.dispatch([0, 1])
    assert step.effect.landed == (0,)
    assert step.ledger.status(0) is Status.BUFFERED
    assert step.effect.reused == tuple(journal)
    assert [x[:2] for x in step.effect.leases] == [(1, 1)]
    assert step.ledger.next_attempt == counter + 1  # group 0 took no attempt
    assert step.ledger.sibling(1, 0) == (SEALED, leases[(1, 0)].attempt)
    assert detail(step.ledger, 0) == [None, None]


@pytest.mark.parametrize("load", [True, False])
def test_held_siblings_of_covered_groups_are_ignored(load: bool) -> None:
    cfg = config(2, stream_len=6)
    ledger, leases = dispatched(cfg, range(5), stamp=5)
    # Group 0 trained (the cut passes it), 2 trained above the cut, 3
    # buffered (retained), 1 and 4 outstanding.
    ledger = ledger.seal([leases[(o, s)] for o in (0, 2, 3) for s in (0, 1)]).ledger
    ledger = ledger.train([0, 2]).ledger
    assert ledger.cut == 1
    saved = roundtrip(ledger.checkpoint())
    journal = [leases[(o, s)] for o in range(5) for s in (0, 1) if (o, s) != (4, 1)]
    resumed = Ledger.resume(cfg, saved, load_replay_buffer=load, sealed=journal)
    by_group = {o: [x for x in journal if x.ordinal == o] for o in range(5)}
    # Needing generation: 1 and 4 (in flight), and 3 when the buffer is not
    # restored. Covered: 0 (below the cut), 2 (trained), 3 if restored.
    needed = [1, 3, 4] if not load else [1, 4]
    assert resumed.reused == tuple(x for o in needed for x in by_group[o])
    assert resumed.ignored == tuple(x for o in range(5) if o not in needed for x in by_group[o])
    ledger = resumed.ledger
    assert {x.ordinal for x in ledger.held()} == set(needed)
    step = ledger.stamp(6)
    assert set(step.effect.kept) == {*needed, 5}
    step = step.ledger.dispatch(step.effect.kept)
    landed = {1, 3} if not load else {1}
    assert set(step.effect.landed) == landed
    assert {x[:2] for x in step.effect.leases} == {(4, 1), (5, 0), (5, 1)}
    # The attempt counter is above every attempt held, ignored ones included.
    assert resumed.ledger.next_attempt >= max(x.attempt for x in journal) + 1


def test_the_attempt_counter_never_goes_down_across_a_resume() -> None:
    cfg = config(2)
    ledger, leases = dispatched(cfg, [0, 1], stamp=2)
    saved = roundtrip(ledger.checkpoint())
    assert saved.next_attempt == 4
    # The checkpoint's counter.
    plain = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=())
    assert plain.ledger.next_attempt >= 4
    # A floor above it (the crashed run counted on).
    floored = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=(), attempt_floor=50)
    assert floored.ledger.next_attempt >= 50
    # A held attempt above both (a journaled seal after the checkpoint).
    late = Lease(1, 1, 70)
    held = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=[late], attempt_floor=50)
    assert held.ledger.next_attempt >= 71
    # And the attempts handed out next are above all of these.
    for resumed, floor in ((plain, 4), (floored, 50), (held, 71)):
        step = resumed.ledger.stamp(2).ledger.dispatch([0, 1])
        assert all(x.attempt >= floor for x in step.effect.leases)
        assert not {x.attempt for x in step.effect.leases} & {x.attempt for x in leases.values()}
    # An ignored held attempt counts too: group 0 trained.
    ledger = ledger.seal([leases[(0, 0)], leases[(0, 1)]]).ledger.train([0]).ledger
    saved = roundtrip(ledger.checkpoint())
    ignored = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=[Lease(0, 0, 90)])
    assert ignored.ignored == (Lease(0, 0, 90),)
    assert ignored.ledger.next_attempt >= 91


def test_a_resume_then_a_checkpoint_is_a_fixed_point() -> None:
    cfg = config(3)
    ledger, leases = dispatched(cfg, [0, 1, 2], stamp=4)
    ledger = ledger.seal([leases[(0, 1)], leases[(2, 0)], leases[(2, 2)]]).ledger
    ledger = ledger.seal([leases[(1, s)] for s in range(3)]).ledger
    saved = roundtrip(ledger.checkpoint())
    resumed = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=saved.sealed)
    assert resumed.ledger.checkpoint() == saved
    assert roundtrip(resumed.ledger.checkpoint()) == saved


def test_resume_refuses_another_group_size() -> None:
    saved = Ledger.start(config(2)).checkpoint()
    with pytest.raises(CheckpointMismatchError, match="groups of 2 samples, this run 3"):
        Ledger.resume(config(3), saved, load_replay_buffer=True, sealed=())


@pytest.mark.parametrize(
    ("sealed", "words"),
    [
        ([(0, 2, 0)], "n=2"),
        ([(8, 0, 0)], "ordinals below 8"),
        ([(3, 0, 0), (9, 1, 1)], "Lease(ordinal=9, sibling=1, attempt=1)"),
    ],
)
def test_resume_refuses_held_siblings_outside_the_groups(
    sealed: list[tuple[int, int, int]], words: str
) -> None:
    cfg = config(2, stream_len=8)
    saved = Ledger.start(cfg).checkpoint()
    with pytest.raises(IllegalTransitionError) as info:
        Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=sealed)
    assert info.value.event == "resume"
    assert words in info.value.reason
    assert info.value.ordinals == (sealed[-1][0],)


def test_resume_refuses_held_siblings_beyond_the_window() -> None:
    cfg = LedgerConfig(samples=2, max_window=4, fingerprint="fp")
    saved = Ledger.start(cfg).checkpoint()
    ok = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=[(3, 1, 0)])
    assert ok.reused == (Lease(3, 1, 0),)
    with pytest.raises(IllegalTransitionError, match="ordinals below 4"):
        Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=[(4, 0, 0)])


def test_resume_refuses_a_sibling_held_twice_and_a_bad_floor() -> None:
    cfg = config(2)
    saved = Ledger.start(cfg).checkpoint()
    with pytest.raises(IllegalTransitionError) as info:
        Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=[(1, 0, 0), (1, 0, 3)])
    assert info.value.event == "resume" and info.value.ordinals == (1,)
    for floor in (-1, True, 1.0, None):
        with pytest.raises(IllegalTransitionError, match="attempt_floor must be an int >= 0"):
            Ledger.resume(
                cfg,
                saved,
                load_replay_buffer=True,
                sealed=(),
                attempt_floor=floor,  # type: ignore[arg-type]
            )


def test_resume_passes_the_prompt_level_arguments_through() -> None:
    cfg = config(2, stream_len=6)
    ledger, leases = dispatched(cfg, range(4), stamp=4)
    ledger = ledger.seal([leases[(o, s)] for o in (0, 2, 3) for s in (0, 1)]).ledger
    ledger = ledger.train([0]).ledger
    saved = roundtrip(ledger.checkpoint())
    assert saved.cut == 1
    resumed = Ledger.resume(
        cfg, saved, load_replay_buffer=True, sealed=(), evicted_on_restore=[3], rewind_to=0
    )
    assert resumed.rewind_to == 0
    assert resumed.covered == (2,)
    assert resumed.ledger.status(2) is Status.BUFFERED
    assert resumed.ledger.status(3) is Status.UNSTAMPED
    assert (
        resumed.ledger._groups
        == GroupTable.resume(
            cfg, saved, load_replay_buffer=True, evicted_on_restore=[3], rewind_to=0
        ).ledger
    )


# -- size ---------------------------------------------------------------------------


def test_sibling_detail_is_bounded_by_the_outstanding_groups_over_a_long_run() -> None:
    """A long run with failures, restarts, fenced answers and resumes: the
    detail held never exceeds n per outstanding group plus the sealed
    siblings a resume holds for groups not dispatched again, the
    checkpoint's sealed list likewise, and a drained run holds none."""
    n = 4
    cfg = config(n, policy=RETRY, granularity=SIBLING, max_failures=4, stream_len=1200)
    ledger = Ledger.start(cfg)
    saved = roundtrip(ledger.checkpoint())
    tick = 0
    while not ledger.drained:
        tick += 1
        assert tick < 2_000
        ledger = ledger.stamp(8).ledger
        ledger = ledger.dispatch(list(ledger.ordinals(Status.PENDING))).ledger
        running = list(ledger.running())
        # Every seventh attempt fails; some answers come twice.
        failed = [x for x in running if x.attempt % 7 == 3]
        good = [x for x in running if x.attempt % 7 != 3]
        ledger = ledger.fail_sample(failed).ledger
        ledger = ledger.seal(good[: len(good) // 2]).ledger
        ledger = ledger.seal(good[: len(good) // 5] + good[len(good) // 2 :]).ledger
        unstarted = [x[:2] for x in failed if ledger.sibling(*x[:2]) == (UNSTARTED, None)]
        ledger = ledger.restart(unstarted).ledger
        outstanding = ledger.count(Status.OUTSTANDING)
        waiting = [x for x in ledger.held() if ledger.status(x.ordinal) is not Status.OUTSTANDING]
        assert ledger.sibling_count() <= n * outstanding + len(waiting)
        assert len(ledger.checkpoint().sealed) <= n * outstanding + len(waiting)
        ledger = ledger.train(list(ledger.ordinals(Status.BUFFERED))).ledger
        if tick % 40 == 0:
            saved = roundtrip(ledger.checkpoint())
        if tick % 100 == 0:
            resumed = Ledger.resume(
                cfg,
                saved,
                load_replay_buffer=True,
                sealed=saved.sealed,
                attempt_floor=ledger.next_attempt,
            )
            ledger = resumed.ledger
            # Only the held siblings, each of a group that needs generation.
            assert ledger.sibling_count() == len(saved.sealed) == len(resumed.reused)
    assert tick > 100  # it crossed resumes
    assert ledger.sibling_count() == 0 and ledger.size() == 0
    assert ledger.checkpoint().sealed == ()


# -- n = 1 is the prompt-level ledger ------------------------------------------------

_SOURCE = {
    "dispatch": Status.PENDING,
    "buffer": Status.OUTSTANDING,
    "fail": Status.OUTSTANDING,
    "setback": Status.OUTSTANDING,
    "evict": Status.BUFFERED,
    "train": Status.BUFFERED,
}
_EVENT: dict[str, type[Dispatch | Buffer | Fail | Setback | Evict | Train]] = {
    "dispatch": Dispatch,
    "buffer": Buffer,
    "fail": Fail,
    "setback": Setback,
    "evict": Evict,
    "train": Train,
}


def _prompt_part(effect: Effect) -> tuple[object, ...]:
    return (
        effect.event,
        effect.stamped,
        effect.kept,
        effect.buffered,
        effect.requeued,
        effect.unstamped,
        effect.dropped,
    )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=st.data(),
    policy=st.sampled_from(FailurePolicy),
    max_failures=st.integers(1, 3),
    stream_len=st.one_of(st.none(), st.integers(0, 12)),
    granularity=st.sampled_from(Granularity),
)
def test_with_one_sample_and_prompt_events_it_is_the_prompt_level_ledger(
    data: st.DataObject,
    policy: FailurePolicy,
    max_failures: int,
    stream_len: int | None,
    granularity: Granularity,
) -> None:
    """N1-EQUIVALENCE: driven by prompt-level events only, a one-sample
    ledger has the same statuses, cut, effects, refusals and checkpoints
    (the inner record) as the prompt-level ledger, across crashes."""
    cfg = LedgerConfig(
        on_failure=policy,
        max_failures=max_failures,
        stream_len=stream_len,
        fingerprint="fp",
        samples=1,
        granularity=granularity,
    )
    plain = GroupTable.start(cfg)
    sampled = Ledger.start(cfg)
    saves = [(plain.checkpoint(), sampled.checkpoint())]
    ops = ["stamp", *_EVENT, "illegal", "checkpoint", "crash"]
    for _ in range(data.draw(st.integers(0, 40), label="steps")):
        op = data.draw(st.sampled_from(ops), label="op")
        if op == "stamp":
            count = data.draw(st.integers(0, 5), label="count")
            a, b = plain.stamp(count), sampled.stamp(count)
            assert _prompt_part(a.effect) == _prompt_part(b.effect)
            plain, sampled = a.ledger, b.ledger
        elif op == "checkpoint":
            save_buffer = data.draw(st.booleans(), label="save_buffer")
            c1 = plain.checkpoint(save_buffer=save_buffer)
            c2 = roundtrip(sampled.checkpoint(save_buffer=save_buffer))
            assert attrs.evolve(c2, next_attempt=0) == c1 and c2.sealed == () and c2.samples == 1
            saves.append((c1, c2))
        elif op == "crash":
            c1, c2 = data.draw(st.sampled_from(saves), label="from")
            load = data.draw(st.booleans(), label="load_replay_buffer")
            retained = sorted(c1.retained_ordinals())
            evicted = (
                data.draw(st.lists(st.sampled_from(retained), unique=True), label="evicted")
                if load and retained
                else []
            )
            r1 = GroupTable.resume(cfg, c1, load_replay_buffer=load, evicted_on_restore=evicted)
            r2 = Ledger.resume(
                cfg, c2, load_replay_buffer=load, evicted_on_restore=evicted, sealed=()
            )
            assert (r1.rewind_to, r1.covered) == (r2.rewind_to, r2.covered)
            assert r2.reused == r2.ignored == ()
            plain, sampled = r1.ledger, r2.ledger
        else:
            if op == "illegal":
                kind = data.draw(st.sampled_from(sorted(_EVENT)), label="event")
                top = plain.next_ordinal + 3
                chosen = data.draw(st.lists(st.integers(0, top), max_size=3, unique=True))
            else:
                kind = op
                candidates = list(plain.ordinals(_SOURCE[kind]))
                chosen = data.draw(
                    st.lists(st.sampled_from(candidates), unique=True)
                    if candidates
                    else st.just([]),
                    label=kind,
                )
            event = _EVENT[kind](chosen)
            try:
                a = plain.apply(event)
            except IllegalTransitionError as exc:
                with pytest.raises(IllegalTransitionError) as info:
                    sampled.apply(event)
                assert str(info.value) == str(exc)
                continue
            b = sampled.apply(event)
            assert _prompt_part(a.effect) == _prompt_part(b.effect)
            plain, sampled = a.ledger, b.ledger
        assert (sampled.cut, sampled.next_ordinal) == (plain.cut, plain.next_ordinal)
        assert sampled.filter_horizon == plain.filter_horizon
        assert sampled.filtering == plain.filtering
        assert attrs.evolve(sampled.checkpoint(), next_attempt=0) == plain.checkpoint()
        assert sampled.size() == plain.size() and sampled.in_flight() == plain.in_flight()
        for status in Status:
            assert sampled.count(status) == plain.count(status)
            assert list(sampled.ordinals(status)) == list(plain.ordinals(status))
        top = plain.next_ordinal + 3
        assert [sampled.status(o) for o in range(top)] == [plain.status(o) for o in range(top)]
        assert [sampled.failures(o) for o in range(top)] == [plain.failures(o) for o in range(top)]
        # The only detail: one running attempt per outstanding group.
        assert sampled.sibling_count() == plain.count(Status.OUTSTANDING)
        assert list(sampled.held()) == []


# -- queries, identity and the attempt counter's width -----------------------------------


def test_the_group_queries_are_the_prompt_level_ledgers() -> None:
    cfg = config(2, policy=RETRY, granularity=SIBLING, stream_len=3)
    ledger, leases = dispatched(cfg, [0, 1], stamp=3)
    ledger = ledger.fail_sample([leases[(1, 0)]]).ledger
    inner = ledger._groups
    assert ledger.config is cfg
    assert (ledger.cut, ledger.next_ordinal) == (inner.cut, inner.next_ordinal) == (0, 3)
    assert ledger.failures(1) == inner.failures(1) == 1 and ledger.failures(0) == 0
    assert [ledger.status(o) for o in range(4)] == [inner.status(o) for o in range(4)]
    assert ledger.exhausted and not ledger.drained
    assert not Ledger.start(cfg).exhausted
    ledger = ledger.restart([(1, 0)]).ledger
    ledger = ledger.seal(list(ledger.running())).ledger.stamp(1).ledger
    ledger = ledger.dispatch([2]).ledger
    ledger = ledger.seal(list(ledger.running())).ledger.train([0, 1, 2]).ledger
    assert ledger.drained and ledger.cut == 3


def test_start_without_a_config_is_the_default_one() -> None:
    ledger = Ledger.start()
    assert ledger.config == LedgerConfig()
    assert ledger.config.samples == 1 and ledger.next_attempt == 0 and ledger.sibling_count() == 0


def test_ledgers_are_equal_exactly_when_their_states_are() -> None:
    cfg = config(2)
    a, leases = dispatched(cfg, [0])
    b, _ = dispatched(cfg, [0])
    assert a == b and hash(a) == hash(b) and a is not b
    sealed = a.seal([leases[(0, 0)]]).ledger
    states = {
        Ledger.start(cfg),
        a,
        sealed,
        a.fail_sample([leases[(0, 1)]]).ledger,  # the same groups, one sibling unstarted
        Ledger.resume(  # the same groups and detail, another counter
            cfg,
            sealed.checkpoint(),
            load_replay_buffer=True,
            sealed=[leases[(0, 0)]],
            attempt_floor=9,
        ).ledger,
    }
    assert len(states) == 5
    assert len({hash(x) for x in states}) == 5
    for x, y in itertools.combinations(states, 2):
        assert x != y and not x == y
    for x in states:
        assert x == x and x == attrs.evolve(x)
    assert a != "a ledger" and (a == object()) is False


def test_attempts_up_to_the_journal_width_keep_their_siblings_apart() -> None:
    """An attempt is a u32: the largest one is held exactly, and a big
    attempt of one sibling leaves its neighbours' detail alone."""
    top = 2**32 - 1
    cfg = config(3)
    saved = Ledger.start(cfg).checkpoint()
    held = [Lease(0, 0, top), Lease(0, 2, 2**31), Lease(1, 1, top - 1)]
    resumed = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=held)
    ledger = resumed.ledger
    assert ledger.next_attempt == 2**32
    assert detail(ledger, 0) == [(SEALED, top), None, (SEALED, 2**31)]
    assert detail(ledger, 1) == [None, (SEALED, top - 1), None]
    assert list(ledger.held()) == sorted(held)
    with pytest.raises(IllegalTransitionError) as info:
        Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=[Lease(0, 1, top + 1)])
    assert info.value.event == "resume" and info.value.ordinals == (0,)
    assert info.value.reason == f"attempt {top + 1} exceeds 2**32 - 1"


def test_the_attempt_counter_stops_at_the_journal_width() -> None:
    top = 2**32 - 1
    cfg = config(2, policy=RETRY, granularity=SIBLING, max_failures=5)
    saved = Ledger.start(cfg).checkpoint()

    def at(floor: int) -> Ledger:
        return (
            Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=(), attempt_floor=floor)
            .ledger.stamp(2)
            .ledger
        )

    # A dispatch may hand out the last attempt, not one more.
    step = at(top - 1).dispatch([0])
    assert [x.attempt for x in step.effect.leases] == [top - 1, top]
    assert detail(step.ledger, 0) == [(RUNNING, top - 1), (RUNNING, top)]
    # One attempt past the last is refused, and so are more, changing nothing.
    ledger = at(top)
    for groups in ([0], [0, 1]):
        with pytest.raises(IllegalTransitionError) as info:
            ledger.dispatch(groups)
        assert info.value.event == "dispatch" and info.value.ordinals == tuple(groups)
        assert info.value.reason == "the attempt counter would pass 2**32 - 1"
    assert ledger.status(0) is Status.PENDING and ledger.next_attempt == top
    # So may a restart.
    ledger = at(top - 2).dispatch([0]).ledger
    (x, y) = sorted(ledger.running())
    ledger = ledger.fail_sample([x, y]).ledger
    with pytest.raises(IllegalTransitionError) as info:
        ledger.restart([(0, 0), (0, 1)])
    assert info.value.event == "restart" and info.value.ordinals == (0,)
    assert info.value.reason == "the attempt counter would pass 2**32 - 1"
    step = ledger.restart([(0, 1)])
    assert step.effect.leases == (Lease(0, 1, top),)
    assert step.ledger.next_attempt == top + 1


def test_a_prompt_level_setback_forgets_the_group_only_when_it_drops_it() -> None:
    cfg = config(2, policy=RETRY, max_failures=2)
    ledger, leases = dispatched(cfg, [0])
    kept = ledger.apply(Setback([0]))
    assert kept.ledger.status(0) is Status.OUTSTANDING
    assert detail(kept.ledger, 0) == detail(ledger, 0)
    gone = kept.ledger.apply(Setback([0]))
    assert gone.effect.dropped == (0,)
    assert gone.ledger.sibling_count() == 0
    assert gone.ledger.seal([leases[(0, 0)]]).effect.fenced == (leases[(0, 0)],)


def test_a_prompt_level_fail_or_evict_leaves_other_groups_detail_alone() -> None:
    cfg = config(2, policy=RETRY)
    ledger, leases = dispatched(cfg, [0, 1, 2], stamp=3)
    ledger = ledger.seal([leases[(2, 0)], leases[(2, 1)]]).ledger  # 2 landed
    ledger = ledger.seal([leases[(1, 1)]]).ledger
    step = ledger.fail([0])
    assert step.effect.requeued == (0,)
    assert detail(step.ledger, 0) == [None, None]
    assert detail(step.ledger, 1) == [
        (RUNNING, leases[(1, 0)].attempt),
        (SEALED, leases[(1, 1)].attempt),
    ]
    evicted = step.ledger.evict([2])
    assert evicted.effect.requeued == (2,)
    assert detail(evicted.ledger, 1) == detail(step.ledger, 1)
    assert evicted.ledger.dispatch([2]).effect.reused == ()


# -- the refusals' exact words -------------------------------------------------------------


def test_a_refused_result_names_what_was_wrong_and_at_most_five_of_them() -> None:
    ledger, _ = dispatched(config(2, stream_len=None), range(4), stamp=4)
    counter = ledger.next_attempt
    bad = [Lease(o, 0, counter + o) for o in range(6)]
    for method in ("seal", "fail_sample"):
        with pytest.raises(IllegalTransitionError) as info:
            getattr(ledger, method)(bad)
        assert info.value.ordinals == tuple(range(6))
        assert info.value.reason == (
            f"{method} names attempts this run never started (siblings < 2, attempts < "
            f"{counter}): " + ", ".join(map(str, bad[:5]))
        )


def test_a_refused_restart_names_the_first_five_siblings() -> None:
    ledger, _ = dispatched(config(2, stream_len=None), range(3), stamp=3)
    pairs = [(o, s) for o in range(3) for s in range(2)]  # all six running
    with pytest.raises(IllegalTransitionError) as info:
        ledger.restart(pairs)
    assert info.value.ordinals == (0, 1, 2)
    assert info.value.reason == (
        "restart needs unstarted siblings of outstanding groups: "
        "(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)"
    )


def test_a_refused_resume_names_the_first_five_strangers() -> None:
    cfg = config(2, stream_len=10)
    saved = Ledger.start(cfg).checkpoint()
    held = [Lease(o, 2, 0) for o in range(6)]
    with pytest.raises(IllegalTransitionError) as info:
        Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=held)
    assert info.value.ordinals == tuple(range(6))
    assert info.value.reason == (
        "sealed names siblings outside the groups (n=2, ordinals below 10): "
        + ", ".join(map(str, held[:5]))
    )


# -- the attempt limit: only reserved attempts are dealt ----------------------------------


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(0, 9),
    floor=st.integers(0, 3),
    moves=st.lists(st.sampled_from(["dispatch", "fail", "seal", "train"]), max_size=12),
)
def test_a_ledger_deals_exactly_the_attempts_below_its_limit(
    limit: int, floor: int, moves: list[str]
) -> None:
    """Every attempt dealt is in [floor, limit); a dispatch or restart that
    would deal one at or past the limit is refused with the ledger
    unchanged, and one that fits is never refused; every other transition
    keeps the limit."""
    cfg = config(2, max_failures=10)
    if floor > limit:
        with pytest.raises(IllegalTransitionError, match="below attempt_floor"):
            Ledger.start(cfg, attempt_floor=floor, attempt_limit=limit)
        return
    ledger = Ledger.start(cfg, attempt_floor=floor, attempt_limit=limit)
    assert (ledger.next_attempt, ledger.attempt_limit) == (floor, limit)
    dealt: list[int] = []
    for move in moves:
        before = ledger
        if move == "dispatch" and not ledger.exhausted:
            step = ledger.stamp(1)
            o = step.effect.kept[0]
            try:
                applied = step.ledger.dispatch([o])
            except IllegalTransitionError as exc:
                assert step.ledger.next_attempt + 2 > limit, exc
                assert exc.event == "dispatch" and "attempt_limit" in str(exc)
                assert step.ledger.next_attempt == before.next_attempt
                continue
            assert before.next_attempt + 2 <= limit
            dealt += [x.attempt for x in applied.effect.leases]
            ledger = applied.ledger
        elif move == "fail" and list(ledger.running()):
            lease = next(iter(ledger.running()))
            applied = ledger.fail_sample([lease])
            ledger = applied.ledger
            if applied.effect.restart:
                try:
                    restarted = ledger.restart(applied.effect.restart)
                except IllegalTransitionError as exc:
                    assert ledger.next_attempt + 1 > limit and exc.event == "restart"
                    continue
                assert ledger.next_attempt + 1 <= limit
                dealt += [x.attempt for x in restarted.effect.leases]
                ledger = restarted.ledger
        elif move == "seal" and list(ledger.running()):
            ledger = ledger.seal([next(iter(ledger.running()))]).ledger
        elif move == "train":
            ledger = ledger.train(list(ledger.ordinals(Status.BUFFERED))).ledger
        assert ledger.attempt_limit == limit
    assert all(floor <= a < limit for a in dealt) and len(set(dealt)) == len(dealt)


def test_a_group_of_held_siblings_lands_at_the_limit() -> None:
    """A dispatch that deals nothing is not refused, whatever the limit."""
    cfg = config(2)
    saved = Ledger.start(cfg).stamp(1).ledger.dispatch([0]).ledger.checkpoint()
    resumed = Ledger.resume(
        cfg,
        saved,
        load_replay_buffer=True,
        sealed=[(0, 0, 0), (0, 1, 1)],
        attempt_limit=2,
    ).ledger
    assert (resumed.next_attempt, resumed.attempt_limit) == (2, 2)
    applied = resumed.stamp(1).ledger.dispatch([0])
    assert applied.effect.landed == (0,) and applied.effect.leases == ()


def test_with_attempt_limit_raises_the_counter_and_the_limit_only_as_asked() -> None:
    cfg = config(2)
    ledger = Ledger.start(cfg, attempt_limit=2).stamp(2).ledger
    ledger = ledger.dispatch([0]).ledger  # attempts 0, 1
    with pytest.raises(IllegalTransitionError):
        ledger.dispatch([1])
    raised = ledger.with_attempt_limit(9, floor=5)
    assert (raised.next_attempt, raised.attempt_limit) == (5, 9)
    assert [x.attempt for x in raised.dispatch([1]).effect.leases] == [5, 6]
    # The counter never goes down, and the detail stays.
    kept = ledger.with_attempt_limit(4, floor=0)
    assert kept.next_attempt == 2 and list(kept.running()) == list(ledger.running())
    assert kept != ledger and kept.with_attempt_limit(2) == ledger  # the limit is state
    assert ledger.with_attempt_limit(None).dispatch([1]).effect.leases[-1].attempt == 3
    # By default the counter stays where it is, even at 0.
    assert Ledger.start(cfg).with_attempt_limit(5).next_attempt == 0
    # Every refusal names the event, ``reserve``.
    with pytest.raises(IllegalTransitionError, match="below the counter") as info:
        ledger.with_attempt_limit(1)
    assert info.value.event == "reserve"
    with pytest.raises(IllegalTransitionError, match="below the counter") as info:
        ledger.with_attempt_limit(6, floor=7)
    assert info.value.event == "reserve"
    for bad in (-1, True, 2**32 + 1, 1.0):
        with pytest.raises(IllegalTransitionError, match="attempt_limit") as info:
            ledger.with_attempt_limit(bad)  # type: ignore[arg-type]
        assert info.value.event == "reserve"
        with pytest.raises(IllegalTransitionError, match="attempt_limit"):
            Ledger.start(cfg, attempt_limit=bad)  # type: ignore[arg-type]
    with pytest.raises(IllegalTransitionError, match="attempt_floor"):
        Ledger.start(cfg, attempt_floor=2**32 + 1)
    assert Ledger.start(cfg, attempt_floor=2**32, attempt_limit=2**32).next_attempt == 2**32


def test_resume_refuses_a_limit_below_its_counter_and_keeps_a_good_one() -> None:
    cfg = config(2)
    saved = Ledger.start(cfg).stamp(1).ledger.dispatch([0]).ledger.checkpoint()
    assert saved.next_attempt == 2
    for floor, limit in ((0, 1), (3, 2)):
        with pytest.raises(IllegalTransitionError, match="below the counter") as info:
            Ledger.resume(
                cfg,
                saved,
                load_replay_buffer=True,
                sealed=(),
                attempt_floor=floor,
                attempt_limit=limit,
            )
        assert info.value.event == "resume"
    ledger = Ledger.resume(
        cfg, saved, load_replay_buffer=True, sealed=(), attempt_floor=3, attempt_limit=5
    ).ledger
    assert (ledger.next_attempt, ledger.attempt_limit) == (3, 5)
    ledger = ledger.stamp(1).ledger
    assert [x.attempt for x in ledger.dispatch([0]).effect.leases] == [3, 4]
    assert (
        Ledger.resume(
            cfg, saved, load_replay_buffer=True, sealed=(), attempt_limit=2
        ).ledger.attempt_limit
        == 2
    )


def test_node_count_counts_the_groups_and_the_siblings_detail() -> None:
    """The trie nodes held: the group table's, plus those of the siblings'
    detail, which n > 1 keeps apart and n = 1 keeps in the groups' entries."""
    single = Ledger.start(config(1)).stamp(3).ledger.dispatch([0, 1]).ledger
    assert single.node_count() == single._groups.node_count() > 0
    ledger = Ledger.start(config(2)).stamp(3).ledger
    dispatched = ledger.dispatch([0, 1]).ledger
    assert dispatched._groups.node_count() > 0
    assert dispatched.node_count() > dispatched._groups.node_count()


def test_single_sample_seals_name_their_event_and_land_every_current_lease() -> None:
    """At n = 1 a seal of one lease and a seal of several take different
    paths; both land every current lease, fence the others and name the
    event ``seal`` (in the effect and in a refusal)."""
    ledger = Ledger.start(config(1)).stamp(4).ledger.dispatch([0, 1, 2]).ledger
    leases = sorted(ledger.running())
    one = ledger.seal([leases[0]])
    assert one.effect.event == "seal" and one.effect.landed == (0,)
    again = one.ledger.seal([leases[0]])
    assert again.effect.event == "seal" and again.effect.fenced == (leases[0],)
    both = ledger.seal(leases[1:])
    assert both.effect.event == "seal"
    assert both.effect.sealed == tuple(leases[1:]) and both.effect.landed == (1, 2)
    assert both.ledger.status(1) is both.ledger.status(2) is Status.BUFFERED
    mixed = one.ledger.seal([leases[0], leases[2]])
    assert mixed.effect.fenced == (leases[0],) and mixed.effect.landed == (2,)
    with pytest.raises(IllegalTransitionError) as info:
        ledger.seal([leases[1], Lease(2, 0, ledger.next_attempt)])
    assert info.value.event == "seal" and info.value.ordinals == (2,)


def test_single_sample_seals_of_several_fence_a_superseded_attempt() -> None:
    """At n = 1 a seal of several leases checks each against its group's
    current attempt: a failed attempt's late answer is fenced while the
    restart's attempt runs, and the other group's current one lands."""
    cfg = config(1, policy=FailurePolicy.RETRY)
    ledger = Ledger.start(cfg).stamp(2).ledger.dispatch([0, 1]).ledger
    old, other = sorted(ledger.running())
    ledger = ledger.fail_sample([old]).ledger.restart([(0, 0)]).ledger
    step = ledger.seal([old, other])
    assert step.effect.fenced == (old,) and step.effect.landed == (1,)
    assert step.ledger.status(0) is Status.OUTSTANDING
    (new,) = [x for x in step.ledger.running() if x.ordinal == 0]
    assert new.attempt == 2 and ledger.seal([new, other]).effect.landed == (0, 1)
