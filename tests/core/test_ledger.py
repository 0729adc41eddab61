"""The ledger: the seed's regression cases, the edges of each rule, and the
exact refusals, effects and counts that pin the mutants of ``_groups.py``
(scripts/mutation.sh; the equivalent ones are in proofs/MUTANTS.md)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from frontier_core import (
    TRANSITIONS,
    Buffer,
    Checkpoint,
    CheckpointMismatchError,
    Dispatch,
    Effect,
    Evict,
    Fail,
    FailurePolicy,
    FingerprintMismatchError,
    FrontierError,
    IllegalTransitionError,
    Ledger,
    LedgerConfig,
    Stamp,
    Status,
    Train,
)

from ._model import roundtrip

pytestmark = pytest.mark.mutation


def run(ledger: Ledger, *, stamp: int = 0, dispatch=(), buffer=(), train=()) -> Ledger:
    if stamp:
        ledger = ledger.stamp(stamp).ledger
    return ledger.dispatch(dispatch).ledger.buffer(buffer).ledger.train(train).ledger


def seed_16() -> Ledger:
    """The seed's A/B miniature: 16 prompts in batches of 4; trained {0..4},
    retained {6, 7, 10}, in flight {5, 8, 9, 11}."""
    ledger = Ledger.start(LedgerConfig(stream_len=16))
    for _ in range(3):
        ledger = ledger.stamp(4).ledger
    ledger = ledger.dispatch(range(12)).ledger.buffer([0, 1, 2, 3, 4, 6, 7, 10]).ledger
    return ledger.train([0, 1, 2, 3, 4]).ledger


def test_seed_16_prompt_scenario_frontier_regenerates_exactly_the_lost_four() -> None:
    ledger = seed_16()
    checkpoint = roundtrip(ledger.checkpoint())
    assert checkpoint.cut == 5
    assert list(checkpoint.retained_ordinals()) == [6, 7, 10]
    resumed = Ledger.resume(ledger.config, checkpoint, load_replay_buffer=True)
    assert resumed.rewind_to == 5
    assert resumed.covered == (6, 7, 10)
    step = resumed.ledger.stamp(100)
    # The legacy resume restarts at the live cursor (12) and loses 5, 8, 9, 11.
    assert list(step.effect.stamped) == list(range(5, 16))
    assert step.effect.kept == (5, 8, 9, 11, 12, 13, 14, 15)
    assert step.effect.buffered == (6, 7, 10)  # filtered, but still live
    after = step.ledger.dispatch(step.effect.kept).ledger.buffer(step.effect.kept).ledger
    after = after.train(range(5, 16)).ledger
    assert after.drained and after.size() == 0


def test_seed_16_prompt_scenario_without_buffer_regenerates_the_buffered_window() -> None:
    checkpoint = roundtrip(seed_16().checkpoint())
    resumed = Ledger.resume(seed_16().config, checkpoint, load_replay_buffer=False)
    assert resumed.covered == ()
    assert resumed.ledger.stamp(100).effect.kept == tuple(range(5, 16))


def test_seed_24_prompt_interleaving_cut_is_8_not_21() -> None:
    """A target lost {3..7} to a tolerated failure and was refilled from
    {16..20}; {8..15} still generate. The trained frontier is 21, the cut 8."""
    config = LedgerConfig(stream_len=24, on_failure=FailurePolicy.DROP)
    ledger = Ledger.start(config)
    for _ in range(3):
        ledger = ledger.stamp(8).ledger
    ledger = ledger.dispatch(range(16)).ledger
    ledger = ledger.buffer(range(3)).ledger.fail(range(3, 8)).ledger
    ledger = ledger.dispatch(range(16, 21)).ledger.buffer(range(16, 21)).ledger
    ledger = ledger.train([0, 1, 2, 16, 17, 18, 19, 20]).ledger
    checkpoint = roundtrip(ledger.checkpoint())
    assert checkpoint.cut == 8
    assert list(checkpoint.trained()) == [16, 17, 18, 19, 20]
    assert list(checkpoint.dropped()) == []  # 3..7 lie below the cut, resolved
    resumed = Ledger.resume(config, checkpoint, load_replay_buffer=True)
    kept = resumed.ledger.stamp(24).effect.kept
    assert kept == (*range(8, 16), 21, 22, 23)


def test_seed_outstanding_and_buffered_hold_the_cut_below_the_frontier() -> None:
    """Outstanding {13, 14, 15}, buffered {8..12}, trained frontier 21: cut 8."""
    ledger = Ledger.start(LedgerConfig(stream_len=24)).stamp(24).ledger
    ledger = (
        ledger.dispatch(range(24)).ledger.buffer([*range(8), *range(8, 13), *range(16, 21)]).ledger
    )
    ledger = ledger.train([*range(8), *range(16, 21)]).ledger
    assert ledger.cut == 8
    checkpoint = ledger.checkpoint(save_buffer=False)
    resumed = Ledger.resume(ledger.config, roundtrip(checkpoint), load_replay_buffer=False)
    # Nothing buffered is lost although the buffer is not restored.
    assert resumed.ledger.stamp(24).effect.kept == (*range(8, 16), 21, 22, 23)


def test_pending_remainder_of_a_gap_fill_survives_a_checkpoint() -> None:
    """The seed's tail discard: a target takes 2 of a 32-prompt batch."""
    ledger = Ledger.start(LedgerConfig(stream_len=64)).stamp(32).ledger
    ledger = run(ledger, dispatch=[0, 1], buffer=[0, 1], train=[0, 1])
    assert list(ledger.ordinals(Status.PENDING)) == list(range(2, 32))
    resumed = Ledger.resume(ledger.config, roundtrip(ledger.checkpoint()), load_replay_buffer=True)
    assert resumed.rewind_to == 2
    assert resumed.ledger.stamp(30).effect.kept == tuple(range(2, 32))


def test_transitions_table_lists_every_legal_move() -> None:
    assert {(e.name, s) for e, s in TRANSITIONS} == {
        ("dispatch", Status.PENDING),
        ("buffer", Status.OUTSTANDING),
        ("fail", Status.OUTSTANDING),
        ("setback", Status.OUTSTANDING),
        ("evict", Status.BUFFERED),
        ("train", Status.BUFFERED),
    }


@pytest.mark.parametrize("policy", list(FailurePolicy))
def test_a_setback_keeps_the_group_outstanding_until_the_attempt_limit(
    policy: FailurePolicy,
) -> None:
    """A failed sample is one failed attempt of its group: under retry the
    group stays outstanding (and a checkpoint counts the attempt); at the
    limit, or at once under drop, the group is dropped on record."""
    config = LedgerConfig(on_failure=policy, max_failures=3, stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch([0, 1]).ledger
    step = ledger.setback([1])
    if policy is FailurePolicy.DROP:
        assert step.effect.dropped == (1,)
        assert step.ledger.status(1) is Status.DROPPED
        return
    assert step.effect.dropped == ()
    ledger = step.ledger
    assert ledger.status(1) is Status.OUTSTANDING and ledger.failures(1) == 1
    assert roundtrip(ledger.checkpoint()).failures == ((1, 1),)
    ledger = ledger.setback([1]).ledger
    assert ledger.failures(1) == 2
    # A group failure counts on the same attempts.
    step = ledger.setback([1])
    assert step.effect.dropped == (1,) and step.ledger.status(1) is Status.DROPPED
    with pytest.raises(IllegalTransitionError, match="setback needs outstanding"):
        step.ledger.setback([2])


@pytest.mark.parametrize(
    ("event", "ordinal", "words"),
    [
        ("dispatch", 0, "0 is outstanding"),
        ("train", 1, "1 is pending"),
        ("buffer", 99, "99 is not yet stamped"),
        ("fail", 2, "2 is pending"),
        ("evict", 0, "0 is outstanding"),
    ],
)
def test_illegal_events_name_the_event_and_ordinal_and_change_nothing(
    event: str, ordinal: int, words: str
) -> None:
    ledger = Ledger.start().stamp(3).ledger.dispatch([0]).ledger
    before = ledger.checkpoint().state_dict()
    method = getattr(ledger, event)
    with pytest.raises(IllegalTransitionError) as info:
        method([ordinal])
    assert info.value.event == event
    assert info.value.ordinals == (ordinal,)
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)
    assert ledger.checkpoint().state_dict() == before


def test_an_event_with_one_bad_ordinal_applies_none_of_it() -> None:
    ledger = Ledger.start().stamp(4).ledger
    with pytest.raises(IllegalTransitionError):
        ledger.dispatch([0, 1, 7])
    assert list(ledger.ordinals(Status.PENDING)) == [0, 1, 2, 3]


def test_resolved_below_the_cut_is_illegal_to_touch_again() -> None:
    ledger = run(Ledger.start(), stamp=2, dispatch=[0, 1], buffer=[0, 1], train=[0, 1])
    with pytest.raises(IllegalTransitionError, match="resolved below the cut"):
        ledger.train([0])


@pytest.mark.parametrize("bad", [[-1], [True], ["3"], [1.0], [2, 2]])
def test_malformed_events_cannot_be_constructed(bad: list[object]) -> None:
    with pytest.raises(IllegalTransitionError):
        Dispatch(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [-1, True])
def test_malformed_stamp_cannot_be_constructed(count: object) -> None:
    with pytest.raises((IllegalTransitionError, TypeError)):
        Stamp(count)  # type: ignore[arg-type]


def test_frontier_error_is_abstract() -> None:
    with pytest.raises(TypeError):
        FrontierError("x")


def test_transitions_never_change_the_value_they_start_from() -> None:
    ledger = Ledger.start().stamp(5).ledger
    snapshot = ledger.checkpoint().state_dict()
    ledger.dispatch([0, 1]).ledger.buffer([0]).ledger.train([0])
    ledger.stamp(3)
    assert ledger.checkpoint().state_dict() == snapshot
    assert list(ledger.ordinals(Status.PENDING)) == [0, 1, 2, 3, 4]


def test_retry_requeues_until_max_failures_then_drops() -> None:
    config = LedgerConfig(on_failure=FailurePolicy.RETRY, max_failures=3, stream_len=1)
    ledger = Ledger.start(config).stamp(1).ledger
    for attempt in (1, 2):
        step = ledger.dispatch([0]).ledger.fail([0])
        assert step.effect.requeued == (0,) and step.effect.dropped == ()
        ledger = step.ledger
        assert ledger.status(0) == Status.PENDING and ledger.failures(0) == attempt
    step = ledger.dispatch([0]).ledger.fail([0])
    assert step.effect.dropped == (0,)
    assert step.ledger.drained


def test_drop_policy_drops_at_the_first_failure_and_the_drop_resolves() -> None:
    """TRL #7274: a dropped prompt must not pin the cut."""
    ledger = Ledger.start(LedgerConfig(stream_len=3)).stamp(3).ledger.dispatch([0, 1, 2]).ledger
    step = ledger.fail([0])
    assert step.effect.dropped == (0,)
    ledger = step.ledger.buffer([1, 2]).ledger.train([1, 2]).ledger
    assert ledger.cut == 3 and ledger.drained


def test_attempts_survive_a_crash() -> None:
    config = LedgerConfig(on_failure=FailurePolicy.RETRY, max_failures=2, stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch([2]).ledger
    ledger = ledger.fail([2]).ledger
    checkpoint = roundtrip(ledger.checkpoint())
    assert checkpoint.failures == ((2, 1),)
    resumed = Ledger.resume(config, checkpoint, load_replay_buffer=True).ledger
    assert resumed.status(2) == Status.UNSTAMPED and resumed.failures(2) == 1
    resumed = resumed.stamp(4).ledger
    assert resumed.failures(2) == 1
    step = resumed.dispatch([2]).ledger.fail([2])
    assert step.effect.dropped == (2,)  # the second attempt overall


def test_evicting_a_restored_group_before_its_reyield_waits_for_the_source() -> None:
    config = LedgerConfig(on_failure=FailurePolicy.RETRY, stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch(range(4)).ledger.buffer([3]).ledger
    resumed = Ledger.resume(config, roundtrip(ledger.checkpoint()), load_replay_buffer=True).ledger
    assert resumed.status(3) == Status.BUFFERED
    step = resumed.evict([3])
    assert step.effect.requeued == () and step.effect.unstamped == (3,)
    assert step.ledger.status(3) == Status.UNSTAMPED
    assert step.ledger.stamp(4).effect.kept == (0, 1, 2, 3)


def test_evicted_on_restore_is_regenerated_without_counting_an_attempt() -> None:
    config = LedgerConfig(on_failure=FailurePolicy.RETRY, stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch(range(4)).ledger.buffer([1, 3]).ledger
    checkpoint = roundtrip(ledger.checkpoint())
    resumed = Ledger.resume(config, checkpoint, evicted_on_restore=[3], load_replay_buffer=True)
    assert resumed.covered == (1,)
    assert resumed.ledger.failures(3) == 0
    assert resumed.ledger.stamp(4).effect.kept == (0, 2, 3)


def test_resume_refuses_inconsistent_options() -> None:
    config = LedgerConfig(stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch(range(4)).ledger.buffer([1]).ledger
    checkpoint = ledger.checkpoint()
    with pytest.raises(IllegalTransitionError, match="did not retain"):
        Ledger.resume(config, checkpoint, evicted_on_restore=[2], load_replay_buffer=True)
    with pytest.raises(IllegalTransitionError, match="not restored"):
        Ledger.resume(config, checkpoint, load_replay_buffer=False, evicted_on_restore=[1])
    with pytest.raises(IllegalTransitionError, match="rewind_to"):
        Ledger.resume(config, checkpoint, rewind_to=1, load_replay_buffer=True)


def test_resume_refuses_another_stream() -> None:
    ledger = Ledger.start(LedgerConfig(stream_len=8, fingerprint="a")).stamp(8).ledger
    ledger = run(ledger, dispatch=range(8), buffer=range(8), train=[0, 1, 2, 5, 6])
    checkpoint = ledger.checkpoint()
    with pytest.raises(FingerprintMismatchError) as info:
        Ledger.resume(
            LedgerConfig(stream_len=8, fingerprint="b"), checkpoint, load_replay_buffer=True
        )
    assert info.value.expected == "b" and info.value.found == "a"
    with pytest.raises(CheckpointMismatchError, match="beyond this stream's length 5"):
        Ledger.resume(
            LedgerConfig(stream_len=5, fingerprint="a"), checkpoint, load_replay_buffer=True
        )
    # A longer stream (more epochs) is fine.
    assert (
        Ledger.resume(
            LedgerConfig(stream_len=80, fingerprint="a"), checkpoint, load_replay_buffer=True
        ).rewind_to
        == 3
    )


def test_rewind_below_the_cut_filters_the_resolved_prefix() -> None:
    """A loader restored from a snapshot taken before an earlier pull."""
    ledger = run(Ledger.start(), stamp=8, dispatch=range(8), buffer=range(8), train=[0, 1, 2, 4])
    checkpoint = ledger.checkpoint()
    resumed = Ledger.resume(ledger.config, checkpoint, rewind_to=0, load_replay_buffer=True)
    assert resumed.rewind_to == 0 and resumed.ledger.filtering
    step = resumed.ledger.stamp(10)
    assert list(step.effect.stamped) == list(range(10))
    assert step.effect.kept == (8, 9)  # 3, 5, 6, 7 are in the restored buffer
    unrestored = Ledger.resume(ledger.config, checkpoint, rewind_to=0, load_replay_buffer=False)
    assert unrestored.ledger.stamp(10).effect.kept == (3, 5, 6, 7, 8, 9)


def test_the_cut_can_pass_the_source_position_and_stamp_still_filters() -> None:
    """Resumed at 5 with {6, 7} trained above the cut: training 5 moves the
    cut to 8 while the source is at 6; re-yielding 6 and 7 must not revive
    them."""
    ledger = run(
        Ledger.start(), stamp=8, dispatch=range(8), buffer=range(8), train=[0, 1, 2, 3, 4, 6, 7]
    )
    resumed = Ledger.resume(ledger.config, ledger.checkpoint(), load_replay_buffer=False).ledger
    step = resumed.stamp(1)
    assert step.effect.kept == (5,)
    ledger = run(step.ledger, dispatch=[5], buffer=[5], train=[5])
    assert ledger.cut == 8 and ledger.next_ordinal == 6
    assert ledger.stamp(3).effect.kept == (8,)


def test_unbounded_stream_never_drains() -> None:
    ledger = run(Ledger.start(), stamp=3, dispatch=range(3), buffer=range(3), train=range(3))
    assert ledger.cut == 3 and not ledger.drained and not ledger.exhausted
    assert ledger.size() == 0


def test_finite_stream_stamps_fewer_at_its_end() -> None:
    step = Ledger.start(LedgerConfig(stream_len=5)).stamp(3).ledger.stamp(3)
    assert list(step.effect.stamped) == [3, 4]
    assert step.ledger.exhausted
    assert list(step.ledger.stamp(3).effect.stamped) == []


def test_healthy_long_run_checkpoints_as_a_handful_of_integers() -> None:
    """BOUNDED-SIZE on the healthy path: the record does not grow with the run."""
    ledger = Ledger.start()
    sizes = []
    for _ in range(200):
        step = ledger.stamp(32)
        batch = step.effect.kept
        ledger = run(step.ledger, dispatch=batch, buffer=batch, train=batch)
        sizes.append(len(str(ledger.checkpoint().state_dict())))
    assert ledger.cut == 6400 and ledger.size() == 0
    assert max(sizes) - min(sizes) <= 4  # only the digits of the cut grow


# -- resume: every refusal names the event, the ordinals and the reason -------

CONFIG = LedgerConfig(stream_len=10, on_failure=FailurePolicy.RETRY, max_failures=3)


def _refusal(checkpoint: Checkpoint, **kw: object) -> IllegalTransitionError:
    with pytest.raises(IllegalTransitionError) as info:
        Ledger.resume(CONFIG, checkpoint, **{"load_replay_buffer": True, **kw})  # type: ignore[arg-type]
    return info.value


def test_resume_refuses_a_rewind_above_the_cut_by_name() -> None:
    error = _refusal(Checkpoint(cut=4, stream_len=10), rewind_to=5)
    assert (error.event, error.ordinals) == ("resume", ())
    assert error.reason == (
        "rewind_to must be an int in [0, cut=4], got 5: "
        "a source restarted above the cut would skip unresolved prompts"
    )
    for bad in (-1, 4.0, True, "3"):
        assert _refusal(Checkpoint(cut=4, stream_len=10), rewind_to=bad).event == "resume"
    for good in (0, 4):
        assert (
            Ledger.resume(
                CONFIG, Checkpoint(cut=4, stream_len=10), rewind_to=good, load_replay_buffer=True
            ).rewind_to
            == good
        )


def test_resume_refuses_evictions_from_an_unrestored_buffer_by_name() -> None:
    saved = Checkpoint(cut=2, retained=((3, 5),), stream_len=10)
    error = _refusal(saved, load_replay_buffer=False, evicted_on_restore=[4, 3])
    assert (error.event, error.ordinals) == ("resume", (3, 4))
    assert error.reason == "evicted_on_restore given but the buffer was not restored"


def test_resume_refuses_evictions_of_unretained_ordinals_by_name() -> None:
    saved = Checkpoint(cut=2, retained=((3, 5),), stream_len=10)
    error = _refusal(saved, evicted_on_restore=[3, 6, 2])
    assert (error.event, error.ordinals) == ("resume", (2, 6))
    assert error.reason == "evicted_on_restore names ordinals the checkpoint did not retain"


def test_resume_refuses_ordinals_at_the_stream_length_exactly() -> None:
    """The last ordinal of a stream of 10 is 9: a record naming 10 belongs
    to a longer stream (the boundary the ``>=`` decides)."""
    for saved in (
        Checkpoint(cut=2, trained_above_cut=((10, 11),), stream_len=11),
        Checkpoint(cut=11, stream_len=11),
    ):
        with pytest.raises(CheckpointMismatchError) as info:
            Ledger.resume(CONFIG, saved, load_replay_buffer=True)
        assert str(info.value) == (
            f"checkpoint refers to ordinals up to {saved.highest_ordinal()} "
            f"(cut {saved.cut}), beyond this stream's length 10"
        )
    for fits in (
        Checkpoint(cut=2, trained_above_cut=((9, 10),), stream_len=10),
        Checkpoint(cut=10, stream_len=10),
    ):
        assert Ledger.resume(CONFIG, fits, load_replay_buffer=True).ledger.cut == fits.cut


def test_a_resumed_ledger_holds_exactly_what_the_record_says() -> None:
    saved = Checkpoint(
        cut=2,
        trained_above_cut=((3, 5),),
        dropped_above_cut=((6, 7),),
        retained=((7, 9),),
        failures=((2, 1), (8, 2), (9, 1)),
        stream_len=12,
    )
    config = attrs.evolve(CONFIG, stream_len=12)
    resumed = Ledger.resume(config, saved, evicted_on_restore=[7], load_replay_buffer=True)
    ledger = resumed.ledger
    assert resumed.rewind_to == ledger.next_ordinal == 2
    assert resumed.covered == (3, 4, 6, 8)
    assert ledger.filter_horizon == 9 and ledger.filtering
    statuses = {o: ledger.status(o) for o in range(2, 12)}
    assert statuses == {
        2: Status.UNSTAMPED,
        3: Status.TRAINED,
        4: Status.TRAINED,
        5: Status.UNSTAMPED,
        6: Status.DROPPED,
        7: Status.UNSTAMPED,
        8: Status.BUFFERED,
        9: Status.UNSTAMPED,
        10: Status.UNSTAMPED,
        11: Status.UNSTAMPED,
    }
    assert [ledger.failures(o) for o in range(2, 12)] == [1, 0, 0, 0, 0, 0, 2, 1, 0, 0]
    expected = {
        Status.UNSTAMPED: 2,  # 2 and 9 carry attempts; 7 was evicted on restore with none
        Status.PENDING: 0,
        Status.OUTSTANDING: 0,
        Status.BUFFERED: 1,
        Status.TRAINED: 2,
        Status.DROPPED: 1,
    }
    assert {s: ledger.count(s) for s in Status} == expected
    # Nothing covered: the filter horizon is the cut and the filter is off.
    plain = Ledger.resume(config, Checkpoint(cut=5, stream_len=12), load_replay_buffer=True).ledger
    assert (plain.filter_horizon, plain.filtering, plain.size()) == (5, False, 0)
    # The buffer not restored: retained ordinals are regenerated, attempts kept.
    unrestored = Ledger.resume(config, saved, load_replay_buffer=False)
    assert unrestored.covered == (3, 4, 6)
    assert unrestored.ledger.status(8) is Status.UNSTAMPED
    assert unrestored.ledger.failures(8) == 2
    # And the checkpoint it writes is the record it came from.
    assert Ledger.resume(config, saved, load_replay_buffer=True).ledger.checkpoint() == saved


# -- moves: the refusal message, the effect, the cut ---------------------------


def _ledger(**kw: object) -> Ledger:
    return Ledger.start(attrs.evolve(CONFIG, **kw))


def test_an_illegal_move_names_what_it_needs_and_what_it_found() -> None:
    ledger = _ledger().stamp(4).ledger.dispatch([0, 1]).ledger.buffer([1]).ledger
    ledger = ledger.train([1]).ledger.dispatch([2]).ledger
    cases = {
        Dispatch: (
            [2, 5],
            "dispatch needs pending ordinals; 2 is outstanding, 5 is not yet stamped",
        ),
        Buffer: ([3], "buffer needs outstanding ordinals; 3 is pending"),
        Fail: ([3], "fail needs outstanding ordinals; 3 is pending"),
        Evict: ([0], "evict needs buffered ordinals; 0 is outstanding"),
        Train: ([1], "train needs buffered ordinals; 1 is trained"),
    }
    for event, (ordinals, reason) in cases.items():
        with pytest.raises(IllegalTransitionError) as info:
            ledger.apply(event(ordinals))
        assert (info.value.event, info.value.reason) == (event.name, reason)
        assert info.value.ordinals == tuple(ordinals)
    # Below the cut, and the detail stops at ten ordinals.
    done = _ledger().stamp(10).ledger
    done = done.dispatch(range(10)).ledger.buffer(range(10)).ledger.train([0]).ledger
    with pytest.raises(IllegalTransitionError) as info:
        done.dispatch([0])
    assert info.value.reason == "dispatch needs pending ordinals; 0 is resolved below the cut"
    with pytest.raises(IllegalTransitionError) as info:
        done.dispatch(range(1, 10))
    assert info.value.reason.count(" is buffered") == 9
    with pytest.raises(IllegalTransitionError) as info:
        _ledger(stream_len=20).stamp(20).ledger.dispatch([]).ledger.buffer(range(12))
    assert info.value.reason.count(" is pending") == 10
    assert len(info.value.ordinals) == 12


def test_failure_effects_and_attempts_are_exact() -> None:
    ledger = _ledger(max_failures=2).stamp(3).ledger.dispatch([0, 1, 2]).ledger
    step = ledger.fail([2, 0])
    assert step.effect == Effect(event="fail", requeued=(2, 0))
    assert [step.ledger.failures(o) for o in range(3)] == [1, 0, 1]
    step = step.ledger.dispatch([0]).ledger.fail([0])
    assert step.effect == Effect(event="fail", dropped=(0,))
    assert step.ledger.status(0) is None and step.ledger.cut == 1  # dropped, passed
    assert step.ledger.count(Status.DROPPED) == 0  # forgotten below the cut
    evict = step.ledger.buffer([1]).ledger.evict([1])
    assert evict.effect == Effect(event="evict", requeued=(1,))
    assert evict.ledger.failures(1) == 1 and evict.ledger.status(1) is Status.PENDING
    # Under drop, the first failure drops, and the attempt is not kept.
    dropped = _ledger(on_failure=FailurePolicy.DROP).stamp(2).ledger.dispatch([1]).ledger.fail([1])
    assert dropped.effect == Effect(event="fail", dropped=(1,))
    assert dropped.ledger.status(1) is Status.DROPPED and dropped.ledger.failures(1) == 0
    assert dropped.ledger.count(Status.DROPPED) == 1 and dropped.ledger.cut == 0


def test_a_restored_ordinal_that_fails_before_its_restamp_waits_unstamped() -> None:
    saved = Checkpoint(cut=0, retained=((0, 2),), failures=((1, 1),), stream_len=10)
    ledger = Ledger.resume(CONFIG, saved, load_replay_buffer=True).ledger
    step = ledger.evict([1, 0])
    assert step.effect == Effect(event="evict", unstamped=(1, 0))
    assert [step.ledger.status(o) for o in (0, 1)] == [Status.UNSTAMPED] * 2
    assert [step.ledger.failures(o) for o in (0, 1)] == [1, 2]
    assert step.ledger.count(Status.UNSTAMPED) == 2
    again = step.ledger.stamp(1)
    assert again.effect.kept == (0,) and again.ledger.count(Status.UNSTAMPED) == 1
    assert again.ledger.failures(0) == 1


def test_the_cut_passes_exactly_the_resolved_prefix() -> None:
    ledger = _ledger().stamp(6).ledger.dispatch(range(6)).ledger.buffer(range(6)).ledger
    ledger = ledger.train([1, 2, 4]).ledger
    assert ledger.cut == 0 and ledger.count(Status.TRAINED) == 3
    ledger = ledger.train([0]).ledger
    assert ledger.cut == 3 and ledger.count(Status.TRAINED) == 1 and ledger.size() == 3
    assert ledger.checkpoint() == Checkpoint(
        cut=3,
        trained_above_cut=((4, 5),),
        retained=((3, 4), (5, 6)),
        stream_len=10,
        next_attempt=6,
    )
    ledger = ledger.train([3, 5]).ledger
    assert ledger.cut == 6 and ledger.size() == 0 and ledger.count(Status.TRAINED) == 0


# -- stamp: the clamp at the stream's end and the filter -----------------------


def test_stamp_clamps_to_the_stream_and_never_moves_back() -> None:
    step = _ledger(stream_len=5).stamp(3)
    assert step.effect == Effect(event="stamp", stamped=range(3), kept=(0, 1, 2))
    step = step.ledger.stamp(4)
    assert step.effect.stamped == range(3, 5) and step.ledger.next_ordinal == 5
    step = step.ledger.stamp(2)
    assert step.effect.stamped == range(5, 5) and step.ledger.next_ordinal == 5
    assert step.ledger.exhausted and step.ledger.count(Status.PENDING) == 5
    unbounded = Ledger.start().stamp(0).ledger.stamp(7)
    assert unbounded.effect.kept == tuple(range(7)) and unbounded.ledger.next_ordinal == 7


def test_the_filter_drops_covered_and_holds_buffered_ordinals() -> None:
    saved = Checkpoint(
        cut=1,
        trained_above_cut=((2, 3),),
        dropped_above_cut=((4, 5),),
        retained=((5, 6),),
        failures=((3, 2),),
        stream_len=10,
    )
    resumed = Ledger.resume(CONFIG, saved, rewind_to=0, load_replay_buffer=True).ledger
    step = resumed.stamp(4)
    assert step.effect == Effect(event="stamp", stamped=range(4), kept=(1, 3), buffered=())
    assert step.ledger.failures(3) == 2 and step.ledger.count(Status.UNSTAMPED) == 0
    assert step.ledger.count(Status.PENDING) == 2 and step.ledger.filtering
    step = step.ledger.stamp(3)
    assert step.effect == Effect(event="stamp", stamped=range(4, 7), kept=(6,), buffered=(5,))
    assert not step.ledger.filtering and step.ledger.count(Status.PENDING) == 3


def test_a_resolved_ordinal_forgets_its_attempts() -> None:
    """Resolved ordinals hold no attempts, so two runs that reach the same
    state by different histories hold equal ledgers once their attempt
    counters agree (value identity: the exhaustive checkers merge such
    states, renaming attempts)."""
    fresh = _ledger().stamp(3).ledger
    direct = fresh.dispatch([1]).ledger.buffer([1]).ledger.train([1]).ledger
    retried = (
        fresh.dispatch([1])
        .ledger.fail([1])
        .ledger.dispatch([1])
        .ledger.buffer([1])
        .ledger.train([1])
        .ledger
    )
    assert retried.status(1) is Status.TRAINED and retried.failures(1) == 0
    assert retried != direct and retried.next_attempt == 2 and direct.next_attempt == 1
    direct = direct.with_attempt_limit(None, floor=2)
    assert retried == direct and hash(retried) == hash(direct)
    evicted = fresh.dispatch([1]).ledger.buffer([1]).ledger.evict([1]).ledger
    evicted = evicted.dispatch([1]).ledger.buffer([1]).ledger.train([1]).ledger
    assert evicted == direct


# -- the rest of the ledger: configuration, queries, value identity ------------


def test_config_refuses_bad_values_by_name() -> None:
    for kw, message in (
        ({"max_failures": 0}, "max_failures must be an int >= 1, got 0"),
        ({"max_failures": True}, "max_failures must be an int >= 1, got True"),
        ({"stream_len": -1}, "stream_len must be None or an int >= 0, got -1"),
        ({"stream_len": 2.0}, "stream_len must be None or an int >= 0, got 2.0"),
    ):
        with pytest.raises(ValueError) as info:
            LedgerConfig(**kw)  # type: ignore[arg-type]
        assert str(info.value) == message
    assert LedgerConfig(max_failures=1, stream_len=0).stream_len == 0


def test_a_fresh_ledger_filters_nothing_and_counts_its_window() -> None:
    ledger = _ledger()
    assert (ledger.filter_horizon, ledger.filtering, ledger.in_flight()) == (0, False, 0)
    ledger = ledger.stamp(5).ledger.dispatch([0, 1]).ledger.buffer([1]).ledger.train([1]).ledger
    assert ledger.in_flight() == 3 + 1 + 0 and ledger.count(Status.TRAINED) == 1
    with pytest.raises(IllegalTransitionError) as info:
        _ledger().dispatch([0])
    assert info.value.reason == "dispatch needs pending ordinals; 0 is not yet stamped"


def test_ledgers_are_equal_exactly_when_their_states_are() -> None:
    a = _ledger().stamp(3).ledger
    b = _ledger().stamp(2).ledger.stamp(1).ledger
    c = _ledger().stamp(3).ledger.dispatch([0]).ledger
    assert a == b and hash(a) == hash(b) and a == a
    assert a != c and b != c and (a == c) is False
    assert len({a, b, c}) == 2
    assert a != "a ledger"
    # Distinct states hash apart (the exhaustive checker keys dicts by them).
    distinct = [_ledger().stamp(n).ledger for n in range(8)]
    assert len({hash(ledger) for ledger in distinct}) == len(distinct)


def test_ledgers_that_differ_only_in_the_filter_horizon_are_equal() -> None:
    """No transition reads the horizon, so it is not part of the state: here
    one resume covered 3 (evicted since, under retry, with one attempt) and
    the other never did, and every event treats them alike."""
    wider = Ledger.resume(
        CONFIG, Checkpoint(cut=0, retained=((1, 2), (3, 4)), stream_len=10), load_replay_buffer=True
    )
    wider_ledger = wider.ledger.evict([3]).ledger
    narrower = Ledger.resume(
        CONFIG,
        Checkpoint(cut=0, retained=((1, 2),), failures=((3, 1),), stream_len=10),
        load_replay_buffer=True,
    ).ledger
    assert (wider_ledger.filter_horizon, narrower.filter_horizon) == (4, 2)
    assert wider_ledger == narrower and hash(wider_ledger) == hash(narrower)
    a, b = wider_ledger.stamp(3), narrower.stamp(3)
    assert a.effect == b.effect and a.ledger == b.ledger
    assert a.ledger.filtering and not b.ledger.filtering


# -- max_window: a resume's work follows the record's size --------------------------


def test_a_tiny_record_asking_for_a_trillion_ordinals_is_refused_before_expanding() -> None:
    """A forged record of a few hundred bytes (checksum recomputed) with one
    range of 10**12 trained ordinals: refused by the span, at once, instead
    of a hang and a MemoryError."""
    forged = Checkpoint(cut=0, trained_above_cut=((1, 10**12),), fingerprint="fp")
    record = json.dumps(forged.state_dict())
    assert len(record) < 600
    saved = Checkpoint.from_state_dict(json.loads(record))
    with pytest.raises(CheckpointMismatchError, match="max_window=1048576"):
        Ledger.resume(LedgerConfig(fingerprint="fp"), saved, load_replay_buffer=True)
    roomy = LedgerConfig(fingerprint="fp", max_window=4)
    with pytest.raises(CheckpointMismatchError, match="spans 10"):
        Ledger.resume(
            roomy,
            Checkpoint(cut=0, trained_above_cut=((1, 10),), fingerprint="fp"),
            load_replay_buffer=True,
        )
    fits = Checkpoint(cut=0, trained_above_cut=((1, 4),), fingerprint="fp")  # spans 4 exactly
    assert Ledger.resume(roomy, fits, load_replay_buffer=True).covered == (1, 2, 3)


def test_a_stamp_past_max_window_is_refused_and_changes_nothing() -> None:
    ledger = Ledger.start(LedgerConfig(max_window=5)).stamp(4).ledger
    with pytest.raises(IllegalTransitionError, match="more than max_window=5"):
        ledger.stamp(2)
    assert ledger.next_ordinal == 4
    ledger = ledger.stamp(1).ledger.dispatch([0]).ledger.buffer([0]).ledger.train([0]).ledger
    assert ledger.stamp(1).effect.kept == (5,)  # the cut moved: the window slid


def test_resume_requires_saying_whether_the_buffer_came_back() -> None:
    with pytest.raises(TypeError):
        Ledger.resume(LedgerConfig(), Checkpoint(cut=0))  # type: ignore[call-arg]
    with pytest.raises(IllegalTransitionError, match="must be a bool"):
        Ledger.resume(LedgerConfig(), Checkpoint(cut=0), load_replay_buffer=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "evicted",
    [["a", 5], [5, "a"], [True], [1.0], [[1]], [None], [-1], [2**64], [2**20000], 5, "ab", None],
    ids=lambda v: type(v).__name__ + str(len(str(v)) if not isinstance(v, list) else len(v)),
)
def test_resume_refuses_an_evicted_on_restore_of_no_ordinals(evicted: object) -> None:
    """Mixed types once raised ``TypeError`` from sorting them for the
    message; a bool, a float or a list item, ``TypeError`` or worse."""
    checkpoint = Checkpoint(cut=0, retained=((0, 6),))
    with pytest.raises(IllegalTransitionError) as info:
        Ledger.resume(
            LedgerConfig(),
            checkpoint,
            load_replay_buffer=True,
            evicted_on_restore=evicted,  # type: ignore[arg-type]
        )
    assert info.value.event == "resume" and len(str(info.value)) < 200
    resumed = Ledger.resume(
        LedgerConfig(), checkpoint, load_replay_buffer=True, evicted_on_restore=iter([5])
    )
    assert resumed.ledger.checkpoint().retained == ((0, 5),)


@pytest.mark.parametrize(
    "args",
    [
        {"config": None},
        {"config": {"max_window": 5}},
        {"checkpoint": None},
        {"checkpoint": Checkpoint(cut=3).state_dict()},
        {"rewind_to": 2**20000},
        {"rewind_to": "0"},
    ],
    ids=["config-None", "config-dict", "checkpoint-None", "checkpoint-record", "rewind-huge",
         "rewind-str"],
)  # fmt: skip
def test_resume_refuses_arguments_of_the_wrong_type_by_name(args: dict[str, object]) -> None:
    """Once an ``AttributeError``, or a ``ValueError`` from printing the int."""
    kwargs: dict[str, Any] = {
        "config": LedgerConfig(),
        "checkpoint": Checkpoint(cut=3),
        "load_replay_buffer": False,
        **args,
    }
    with pytest.raises(IllegalTransitionError) as info:
        Ledger.resume(**kwargs)
    assert info.value.event == "resume" and len(str(info.value)) < 300


def test_no_ordinal_at_or_past_2_64_is_ever_stamped() -> None:
    """Every record reader refuses a number past 2**64, so a ledger stamps
    no ordinal there either: its own checkpoint would be unreadable."""
    last = 2**64 - 1
    resumed = Ledger.resume(LedgerConfig(), Checkpoint(cut=last - 1), load_replay_buffer=False)
    ledger = resumed.ledger
    with pytest.raises(IllegalTransitionError, match="2\\*\\*64 - 1"):
        ledger.stamp(3)
    step = ledger.stamp(2)
    assert tuple(step.effect.kept) == (last - 1, last)
    done = step.ledger.dispatch([last - 1, last]).ledger.buffer([last - 1, last]).ledger
    record = done.train([last - 1, last]).ledger.checkpoint().state_dict()
    assert Checkpoint.from_state_dict(record).cut == 2**64
    with pytest.raises(IllegalTransitionError):
        Ledger.resume(
            LedgerConfig(), Checkpoint.from_state_dict(record), load_replay_buffer=False
        ).ledger.stamp(1)
