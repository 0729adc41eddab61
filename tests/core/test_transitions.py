"""The transition table and the rules beside it (``_transitions``), against
an independent statement of the lifecycle written out below: exhaustively
over statuses x events x policies x attempts, first the rules alone, then
the ledger applying them to one ordinal."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from frontier_core import (
    TRANSITIONS,
    Buffer,
    Checkpoint,
    Dispatch,
    Evict,
    Fail,
    FailurePolicy,
    IllegalTransitionError,
    Ledger,
    LedgerConfig,
    Setback,
    Status,
    Train,
)
from frontier_core._transitions import (
    COVERED,
    FAILURE,
    LIVE,
    NOTING,
    RESOLVED,
    SETBACK,
    STAMPABLE,
    Move,
    failure_outcome,
    recorded,
    resume_outcome,
    setback_outcome,
    stamp_outcome,
)

pytestmark = pytest.mark.mutation

U, P, OUT, B, T, D = (
    Status.UNSTAMPED,
    Status.PENDING,
    Status.OUTSTANDING,
    Status.BUFFERED,
    Status.TRAINED,
    Status.DROPPED,
)
DROP, RETRY = FailurePolicy.DROP, FailurePolicy.RETRY
EVENTS: tuple[type[Move], ...] = (Dispatch, Buffer, Fail, Setback, Evict, Train)

# -- the statement ---------------------------------------------------------------

#: The lifecycle as docs/ledger.md tells it: pending -> outstanding (dispatch) ->
#: buffered (buffer) -> trained (train); a failure while outstanding or an
#: eviction while buffered is up to the policy; so is a failed sample of an
#: outstanding group ("sample policy"). Everything else is illegal.
LIFECYCLE: dict[tuple[type[Move], Status], Status | str] = {
    (Dispatch, P): OUT,
    (Buffer, OUT): B,
    (Train, B): T,
    (Fail, OUT): "policy",
    (Setback, OUT): "sample policy",
    (Evict, B): "policy",
}


def expected_failure(
    policy: FailurePolicy, max_failures: int, attempts: int, stamped: bool
) -> tuple[Status, int]:
    """Each failure is an attempt; ``retry`` generates the prompt again while
    attempts are left, from the source if the caller has no row for it."""
    left = max_failures - (attempts + 1)
    if policy is RETRY and left > 0:
        return (P, attempts + 1) if stamped else (U, attempts + 1)
    return (D, 0)  # dropped, on record; a resolved ordinal keeps no count


def expected_setback(policy: FailurePolicy, max_failures: int, attempts: int) -> tuple[Status, int]:
    """A failed sample is an attempt of its group, which goes on generating
    its other samples while attempts are left and is dropped after."""
    if policy is RETRY and attempts + 1 < max_failures:
        return (OUT, attempts + 1)
    return (D, 0)


def expected_move(
    event: type[Move],
    status: Status,
    policy: FailurePolicy,
    max_failures: int,
    attempts: int,
    stamped: bool,
) -> tuple[Status, int] | None:
    """(status, attempts) after the move, or None if it is illegal."""
    target = LIFECYCLE.get((event, status))
    if target is None:
        return None
    if target == "policy":
        return expected_failure(policy, max_failures, attempts, stamped)
    if target == "sample policy":
        return expected_setback(policy, max_failures, attempts)
    assert isinstance(target, Status)
    return (target, 0) if target is T else (target, attempts)


#: What a stamp does, by status before (None: below the cut): "kept" makes
#: it pending with its attempts; "filtered" leaves it as it is; "never": a
#: pending or outstanding ordinal is not stamped twice in a life.
STAMPS: dict[Status | None, str] = {
    None: "filtered",
    U: "kept",
    P: "never",
    OUT: "never",
    B: "filtered",
    T: "filtered",
    D: "filtered",
}

#: What a resume makes of an ordinal, by (what the record says of it, the
#: restored buffer holds it, it carries attempts). None: no entry.
RESUMES: dict[tuple[Status | None, bool, bool], Status | None] = {
    (T, False, False): T,
    (T, True, False): T,
    (D, False, False): D,
    (D, True, False): D,
    (B, True, False): B,
    (B, True, True): B,
    (B, False, False): None,  # not restored, never failed: generated anew
    (B, False, True): U,  # not restored, carries attempts: waits for the source
    (None, False, True): U,  # in flight at the checkpoint, carries attempts
    (None, True, True): U,
    (None, False, False): None,  # the record says nothing of it
    (None, True, False): None,
}


def cases() -> Iterator[tuple[type[Move], Status, FailurePolicy, int, int, bool]]:
    for event, status, policy, stamped in itertools.product(
        EVENTS, Status, FailurePolicy, (True, False)
    ):
        for max_failures in range(1, 5):
            for attempts in range(max_failures):
                yield event, status, policy, max_failures, attempts, stamped


# -- the rules alone -------------------------------------------------------------


def test_the_table_lists_exactly_the_lifecycle() -> None:
    assert set(TRANSITIONS) == set(LIFECYCLE)
    for key, target in LIFECYCLE.items():
        marker = {"policy": FAILURE, "sample policy": SETBACK}
        assert TRANSITIONS[key] == marker.get(target, target)


def test_every_move_is_the_stated_one() -> None:
    checked = 0
    for event, status, policy, max_failures, attempts, stamped in cases():
        target = TRANSITIONS.get((event, status))
        got: tuple[Status, int] | None
        if target is None:
            got = None
        elif target is FAILURE:
            got = failure_outcome(policy, max_failures, attempts, stamped=stamped)
        elif target is SETBACK:
            got = setback_outcome(policy, max_failures, attempts)
        else:
            assert isinstance(target, Status)
            got = (target, 0 if target in RESOLVED else attempts)
        want = expected_move(event, status, policy, max_failures, attempts, stamped)
        assert got == want, (event.name, status, policy, max_failures, attempts, stamped)
        checked += 1
    assert checked == len(EVENTS) * len(Status) * 2 * 2 * (1 + 2 + 3 + 4)


def test_the_failure_outcome_under_each_policy() -> None:
    for policy, stamped in itertools.product(FailurePolicy, (True, False)):
        for max_failures in range(1, 6):
            for attempts in range(max_failures + 2):
                got = failure_outcome(policy, max_failures, attempts, stamped=stamped)
                assert got == expected_failure(policy, max_failures, attempts, stamped)
    # Spelled out: retry with 3 attempts requeues twice, then drops.
    assert failure_outcome(RETRY, 3, 0, stamped=True) == (P, 1)
    assert failure_outcome(RETRY, 3, 1, stamped=True) == (P, 2)
    assert failure_outcome(RETRY, 3, 2, stamped=True) == (D, 0)
    assert failure_outcome(RETRY, 3, 1, stamped=False) == (U, 2)
    assert failure_outcome(RETRY, 1, 0, stamped=True) == (D, 0)
    assert failure_outcome(DROP, 3, 0, stamped=True) == (D, 0)
    assert failure_outcome(DROP, 3, 0, stamped=False) == (D, 0)


def test_the_setback_outcome_under_each_policy() -> None:
    for policy in FailurePolicy:
        for max_failures in range(1, 6):
            for attempts in range(max_failures + 2):
                got = setback_outcome(policy, max_failures, attempts)
                assert got == expected_setback(policy, max_failures, attempts)
    assert setback_outcome(RETRY, 3, 0) == (OUT, 1)
    assert setback_outcome(RETRY, 3, 2) == (D, 0)
    assert setback_outcome(DROP, 3, 0) == (D, 0)


def test_the_stamp_outcome_keeps_the_unstamped_and_filters_the_covered() -> None:
    for status, what in STAMPS.items():
        if what == "never":
            assert status is not None
            with pytest.raises(ValueError, match=f"a {status.name.lower()} ordinal was stamped"):
                stamp_outcome(status)
        else:
            assert stamp_outcome(status) == (P if what == "kept" else None), status
    assert set(STAMPS) == {None, *Status}
    assert COVERED == {s for s in Status if STAMPS[s] == "filtered"}


def test_the_resume_outcome_of_every_recorded_ordinal() -> None:
    for (saved, restored, carries), want in RESUMES.items():
        for attempts in (1, 2, 5) if carries else (0,):
            got = resume_outcome(saved, restored=restored, failures=attempts)
            assert got == want, (saved, restored, attempts)
    for status in (U, P, OUT):
        for restored in (True, False):
            with pytest.raises(ValueError, match=f"records no {status.name.lower()} ordinals"):
                resume_outcome(status, restored=restored, failures=1)


def test_a_checkpoint_records_the_covered_and_the_attempts() -> None:
    for status, attempts in itertools.product(Status, range(3)):
        assert recorded(status, attempts) == (status in (B, T, D) or attempts >= 1)


def test_the_status_sets() -> None:
    assert RESOLVED == {T, D}
    assert LIVE == {P, OUT, B}
    assert COVERED == {B, T, D}
    assert STAMPABLE == {U, B, T, D}


def test_noting_is_derived_from_the_table() -> None:
    """A checkpoint starts recording an ordinal when it lands in the buffer
    or fails; every other move stays inside or outside what it records."""
    assert NOTING == {Buffer, Fail, Setback}
    for event, status, policy, max_failures, attempts, stamped in cases():
        after = expected_move(event, status, policy, max_failures, attempts, stamped)
        if after is None or recorded(status, attempts):
            continue
        # Dispatch keeps the attempts (zero here), so nothing new is recorded.
        assert recorded(*after) == (event in NOTING), (event.name, status, after)


# -- the ledger applies them -------------------------------------------------------


def ledger_with(
    status: Status, attempts: int, stamped: bool, policy: FailurePolicy, max_failures: int
) -> Ledger | None:
    """A ledger whose ordinal 1 is in ``status`` with ``attempts``, stamped in
    this life or not (ordinal 0 pending, so that the cut stays at 0); None if
    no such ledger exists (a pending or outstanding ordinal was stamped)."""
    config = LedgerConfig(on_failure=policy, max_failures=max_failures, stream_len=4)
    carried = ((1, attempts),) if attempts else ()
    one = ((1, 2),)
    saved = {
        U: Checkpoint(cut=0, failures=carried, stream_len=4),
        P: Checkpoint(cut=0, failures=carried, stream_len=4),
        OUT: Checkpoint(cut=0, failures=carried, stream_len=4),
        B: Checkpoint(cut=0, retained=one, failures=carried, stream_len=4),
        T: Checkpoint(cut=0, trained_above_cut=one, stream_len=4),
        D: Checkpoint(cut=0, dropped_above_cut=one, stream_len=4),
    }[status]
    ledger = Ledger.resume(config, saved, load_replay_buffer=True).ledger
    if status in (P, OUT) and not stamped:
        return None
    if stamped:
        ledger = ledger.stamp(2).ledger
        assert ledger.status(0) is P
        if status is U:
            return None  # stamping makes it pending
    if status is OUT:
        ledger = ledger.dispatch([1]).ledger
    return ledger


def test_the_ledger_moves_an_ordinal_exactly_as_stated() -> None:
    checked = 0
    for event, status, policy, max_failures, attempts, stamped in cases():
        if status in RESOLVED and attempts:
            continue  # a resolved ordinal keeps no attempts
        ledger = ledger_with(status, attempts, stamped, policy, max_failures)
        if ledger is None:
            continue
        assert (ledger.status(1), ledger.failures(1)) == (status, attempts)
        want = expected_move(event, status, policy, max_failures, attempts, stamped)
        case = (event.name, status, policy, max_failures, attempts, stamped)
        if want is None:
            with pytest.raises(IllegalTransitionError) as info:
                ledger.apply(event([1]))
            assert (info.value.event, info.value.ordinals) == (event.name, (1,)), case
            continue
        step = ledger.apply(event([1]))
        assert (step.ledger.status(1), step.ledger.failures(1)) == want, case
        also_pending = 1 if stamped and want[0] is P else 0  # ordinal 0
        assert step.ledger.cut == 0 and step.ledger.count(want[0]) == 1 + also_pending, case
        if event in (Fail, Evict):
            reported = {P: step.effect.requeued, U: step.effect.unstamped, D: step.effect.dropped}
            assert {s: ids for s, ids in reported.items() if ids} == {want[0]: (1,)}, case
        checked += 1
    assert checked > 100


def test_the_ledger_stamps_each_status_as_stated() -> None:
    """Resumed at 0 below a cut of 1: ordinal 0 lies below the cut, 1 is new,
    and 2..5 are trained, dropped, retained, carrying attempts."""
    saved = Checkpoint(
        cut=1,
        trained_above_cut=((2, 3),),
        dropped_above_cut=((3, 4),),
        retained=((4, 5),),
        failures=((4, 1), (5, 2)),
        stream_len=8,
    )
    config = LedgerConfig(on_failure=RETRY, stream_len=8)
    ledger = Ledger.resume(config, saved, rewind_to=0, load_replay_buffer=True).ledger
    before = [None, *(ledger.status(o) for o in range(1, 6))]
    assert before == [None, U, T, D, B, U]
    step = ledger.stamp(6)
    kept = tuple(o for o, s in enumerate(before) if STAMPS[s] == "kept")
    assert step.effect.kept == kept == (1, 5)
    assert step.effect.buffered == (4,)  # filtered, yet live
    assert [step.ledger.status(o) for o in range(1, 6)] == [P, T, D, B, P]
    assert [step.ledger.failures(o) for o in range(1, 6)] == [0, 0, 0, 1, 2]
    assert step.ledger.count(U) == 0 and step.ledger.count(P) == 2


def test_the_ledger_resumes_each_recorded_ordinal_as_stated() -> None:
    config = LedgerConfig(on_failure=RETRY, max_failures=9, stream_len=4)
    for (said, restored, carries), want in RESUMES.items():
        if said in RESOLVED and carries:
            continue  # a record keeps no attempts for resolved ordinals
        attempts = ((2, 3),) if carries else ()
        fields: dict[str, object] = {
            T: {"trained_above_cut": ((2, 3),)},
            D: {"dropped_above_cut": ((2, 3),)},
            B: {"retained": ((2, 3),)},
            None: {},
        }[said]
        saved = Checkpoint(cut=1, failures=attempts, stream_len=4, **fields)  # type: ignore[arg-type]
        options = [{"load_replay_buffer": restored}]
        if said is B and not restored:
            options.append({"load_replay_buffer": True, "evicted_on_restore": [2]})
        for kw in options:
            resumed = Ledger.resume(config, saved, **kw)  # type: ignore[arg-type]
            ledger = resumed.ledger
            if want is None:
                assert ledger.size() == 0 and ledger.status(2) is U, (said, restored, kw)
            else:
                assert ledger.status(2) is want and ledger.size() == 1, (said, restored, kw)
            assert ledger.failures(2) == (3 if carries else 0)
            assert resumed.covered == ((2,) if want in COVERED else ())
            assert ledger.filter_horizon == (3 if want in COVERED else 1)
            # What the resume created is what a checkpoint records again.
            assert set(ledger._groups._noted) == ({2} if want is not None else set())


def test_an_ordinal_the_resume_drops_does_not_stop_it_restoring_the_rest() -> None:
    """Every retained ordinal gets its own outcome: evicting one on restore
    (no entry: generated anew) leaves those after it buffered."""
    config = LedgerConfig(stream_len=10)
    saved = Checkpoint(cut=2, retained=((3, 7),), stream_len=10)
    for evicted in ([3], [4], [3, 5]):
        resumed = Ledger.resume(config, saved, evicted_on_restore=evicted, load_replay_buffer=True)
        kept = [o for o in range(3, 7) if o not in evicted]
        assert list(resumed.ledger.ordinals(B)) == kept
        assert resumed.covered == tuple(kept)
        assert resumed.ledger.count(B) == len(kept) and resumed.ledger.size() == len(kept)
