"""Named scenarios: the seed's regression cases and the edges of each rule."""

from __future__ import annotations

import pytest

from frontier_core import (
    TRANSITIONS,
    CheckpointMismatchError,
    Dispatch,
    FailurePolicy,
    FingerprintMismatchError,
    FrontierError,
    IllegalTransitionError,
    Ledger,
    LedgerConfig,
    Stamp,
    Status,
)

from ._model import roundtrip


def run(ledger: Ledger, *, stamp: int = 0, dispatch=(), buffer=(), train=()) -> Ledger:
    if stamp:
        ledger = ledger.stamp(stamp).ledger
    return ledger.dispatch(dispatch).ledger.buffer(buffer).ledger.train(train)


def seed_16() -> Ledger:
    """The seed's A/B miniature: 16 prompts in batches of 4; trained {0..4},
    retained {6, 7, 10}, in flight {5, 8, 9, 11}."""
    ledger = Ledger.start(LedgerConfig(stream_len=16))
    for _ in range(3):
        ledger = ledger.stamp(4).ledger
    ledger = ledger.dispatch(range(12)).ledger.buffer([0, 1, 2, 3, 4, 6, 7, 10]).ledger
    return ledger.train([0, 1, 2, 3, 4])


def test_seed_16_prompt_scenario_frontier_regenerates_exactly_the_lost_four() -> None:
    ledger = seed_16()
    checkpoint = roundtrip(ledger.checkpoint())
    assert checkpoint.cut == 5
    assert list(checkpoint.retained_ordinals()) == [6, 7, 10]
    resumed = Ledger.resume(ledger.config, checkpoint)
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
    resumed = Ledger.resume(config, checkpoint)
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
    resumed = Ledger.resume(ledger.config, roundtrip(ledger.checkpoint()))
    assert resumed.rewind_to == 2
    assert resumed.ledger.stamp(30).effect.kept == tuple(range(2, 32))


def test_transitions_table_lists_every_legal_move() -> None:
    assert {(e.name, s) for e, s in TRANSITIONS} == {
        ("dispatch", Status.PENDING),
        ("buffer", Status.OUTSTANDING),
        ("fail", Status.OUTSTANDING),
        ("evict", Status.BUFFERED),
        ("train", Status.BUFFERED),
    }


@pytest.mark.parametrize(
    ("event", "ordinal", "words"),
    [
        ("dispatch", 0, "0 is outstanding"),
        ("train", 1, "1 is pending"),
        ("buffer", 99, "99 is not yet yielded"),
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
def test_malformed_yield_cannot_be_constructed(count: object) -> None:
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


def test_retry_requeues_until_max_attempts_then_drops() -> None:
    config = LedgerConfig(on_failure=FailurePolicy.RETRY, max_attempts=3, stream_len=1)
    ledger = Ledger.start(config).stamp(1).ledger
    for attempt in (1, 2):
        step = ledger.dispatch([0]).ledger.fail([0])
        assert step.effect.requeued == (0,) and step.effect.dropped == ()
        ledger = step.ledger
        assert ledger.status(0) == Status.PENDING and ledger.attempts(0) == attempt
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
    config = LedgerConfig(on_failure=FailurePolicy.RETRY, max_attempts=2, stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch([2]).ledger
    ledger = ledger.fail([2]).ledger
    checkpoint = roundtrip(ledger.checkpoint())
    assert checkpoint.attempts == ((2, 1),)
    resumed = Ledger.resume(config, checkpoint).ledger
    assert resumed.status(2) == Status.UNSTAMPED and resumed.attempts(2) == 1
    resumed = resumed.stamp(4).ledger
    assert resumed.attempts(2) == 1
    step = resumed.dispatch([2]).ledger.fail([2])
    assert step.effect.dropped == (2,)  # the second attempt overall


def test_evicting_a_restored_group_before_its_reyield_waits_for_the_source() -> None:
    config = LedgerConfig(on_failure=FailurePolicy.RETRY, stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch(range(4)).ledger.buffer([3]).ledger
    resumed = Ledger.resume(config, roundtrip(ledger.checkpoint())).ledger
    assert resumed.status(3) == Status.BUFFERED
    step = resumed.evict([3])
    assert step.effect.requeued == () and step.effect.unstamped == (3,)
    assert step.ledger.status(3) == Status.UNSTAMPED
    assert step.ledger.stamp(4).effect.kept == (0, 1, 2, 3)


def test_evicted_on_restore_is_regenerated_without_counting_an_attempt() -> None:
    config = LedgerConfig(on_failure=FailurePolicy.RETRY, stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch(range(4)).ledger.buffer([1, 3]).ledger
    checkpoint = roundtrip(ledger.checkpoint())
    resumed = Ledger.resume(config, checkpoint, evicted_on_restore=[3])
    assert resumed.covered == (1,)
    assert resumed.ledger.attempts(3) == 0
    assert resumed.ledger.stamp(4).effect.kept == (0, 2, 3)


def test_resume_refuses_inconsistent_options() -> None:
    config = LedgerConfig(stream_len=4)
    ledger = Ledger.start(config).stamp(4).ledger.dispatch(range(4)).ledger.buffer([1]).ledger
    checkpoint = ledger.checkpoint()
    with pytest.raises(IllegalTransitionError, match="did not retain"):
        Ledger.resume(config, checkpoint, evicted_on_restore=[2])
    with pytest.raises(IllegalTransitionError, match="not restored"):
        Ledger.resume(config, checkpoint, load_replay_buffer=False, evicted_on_restore=[1])
    with pytest.raises(IllegalTransitionError, match="rewind_to"):
        Ledger.resume(config, checkpoint, rewind_to=1)


def test_resume_refuses_another_stream() -> None:
    ledger = Ledger.start(LedgerConfig(stream_len=8, fingerprint="a")).stamp(8).ledger
    ledger = run(ledger, dispatch=range(8), buffer=range(8), train=[0, 1, 2, 5, 6])
    checkpoint = ledger.checkpoint()
    with pytest.raises(FingerprintMismatchError) as info:
        Ledger.resume(LedgerConfig(stream_len=8, fingerprint="b"), checkpoint)
    assert info.value.expected == "b" and info.value.found == "a"
    with pytest.raises(CheckpointMismatchError, match="beyond this stream's length 5"):
        Ledger.resume(LedgerConfig(stream_len=5, fingerprint="a"), checkpoint)
    # A longer stream (more epochs) is fine.
    assert Ledger.resume(LedgerConfig(stream_len=80, fingerprint="a"), checkpoint).rewind_to == 3


def test_rewind_below_the_cut_filters_the_resolved_prefix() -> None:
    """A loader restored from a snapshot taken before an earlier pull."""
    ledger = run(Ledger.start(), stamp=8, dispatch=range(8), buffer=range(8), train=[0, 1, 2, 4])
    checkpoint = ledger.checkpoint()
    resumed = Ledger.resume(ledger.config, checkpoint, rewind_to=0)
    assert resumed.rewind_to == 0 and resumed.ledger.filtering
    step = resumed.ledger.stamp(10)
    assert list(step.effect.stamped) == list(range(10))
    assert step.effect.kept == (8, 9)  # 3, 5, 6, 7 are in the restored buffer
    unrestored = Ledger.resume(ledger.config, checkpoint, rewind_to=0, load_replay_buffer=False)
    assert unrestored.ledger.stamp(10).effect.kept == (3, 5, 6, 7, 8, 9)


def test_the_cut_can_pass_the_source_position_and_yield_still_filters() -> None:
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


def test_finite_stream_yields_fewer_at_its_end() -> None:
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
