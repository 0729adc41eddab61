"""Tests that kill mutants (scripts/mutation.sh): each pins a behaviour a
surviving mutant of the core got away with. Equivalent mutants are written
up in proofs/MUTANTS.md instead.

The first test is the mutation run's workhorse: the exhaustive checker at
bounds small enough for a few seconds a mutant.
"""

from __future__ import annotations

import hashlib
import json

import attrs
import pytest

from frontier_core import (
    Buffer,
    Checkpoint,
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointVersionError,
    Dispatch,
    Effect,
    Evict,
    Fail,
    FailurePolicy,
    FingerprintMismatchError,
    IllegalTransitionError,
    Ledger,
    LedgerConfig,
    Status,
    Train,
)
from frontier_core.testing import Bounds, explore


@pytest.mark.parametrize("policy", list(FailurePolicy))
def test_small_scope_exploration_keeps_every_invariant(policy: FailurePolicy) -> None:
    explore(Bounds(stream_len=3, batch=2, on_failure=policy, max_attempts=2))


# -- resume: every refusal names the event, the ordinals and the reason -------

CONFIG = LedgerConfig(stream_len=10, on_failure=FailurePolicy.RETRY, max_attempts=3)


def _refusal(checkpoint: Checkpoint, **kw: object) -> IllegalTransitionError:
    with pytest.raises(IllegalTransitionError) as info:
        Ledger.resume(CONFIG, checkpoint, **kw)  # type: ignore[arg-type]
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
            Ledger.resume(CONFIG, Checkpoint(cut=4, stream_len=10), rewind_to=good).rewind_to
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
            Ledger.resume(CONFIG, saved)
        assert str(info.value) == (
            f"checkpoint refers to ordinals up to {saved.highest_ordinal()} "
            f"(cut {saved.cut}), beyond this stream's length 10"
        )
    for fits in (
        Checkpoint(cut=2, trained_above_cut=((9, 10),), stream_len=10),
        Checkpoint(cut=10, stream_len=10),
    ):
        assert Ledger.resume(CONFIG, fits).ledger.cut == fits.cut


def test_a_resumed_ledger_holds_exactly_what_the_record_says() -> None:
    saved = Checkpoint(
        cut=2,
        trained_above_cut=((3, 5),),
        dropped_above_cut=((6, 7),),
        retained=((7, 9),),
        attempts=((2, 1), (8, 2), (9, 1)),
        stream_len=12,
    )
    config = attrs.evolve(CONFIG, stream_len=12)
    resumed = Ledger.resume(config, saved, evicted_on_restore=[7])
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
    assert [ledger.attempts(o) for o in range(2, 12)] == [1, 0, 0, 0, 0, 0, 2, 1, 0, 0]
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
    plain = Ledger.resume(config, Checkpoint(cut=5, stream_len=12)).ledger
    assert (plain.filter_horizon, plain.filtering, plain.size()) == (5, False, 0)
    # The buffer not restored: retained ordinals are regenerated, attempts kept.
    unrestored = Ledger.resume(config, saved, load_replay_buffer=False)
    assert unrestored.covered == (3, 4, 6)
    assert unrestored.ledger.status(8) is Status.UNSTAMPED
    assert unrestored.ledger.attempts(8) == 2
    # And the checkpoint it writes is the record it came from.
    assert Ledger.resume(config, saved).ledger.checkpoint() == saved


# -- moves: the refusal message, the effect, the cut ---------------------------


def _ledger(**kw: object) -> Ledger:
    return Ledger.start(attrs.evolve(CONFIG, **kw))


def test_an_illegal_move_names_what_it_needs_and_what_it_found() -> None:
    ledger = _ledger().stamp(4).ledger.dispatch([0, 1]).ledger.buffer([1]).ledger
    ledger = ledger.train([1]).ledger.dispatch([2]).ledger
    cases = {
        Dispatch: (
            [2, 5],
            "dispatch needs pending ordinals; 2 is outstanding, 5 is not yet yielded",
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
    ledger = _ledger(max_attempts=2).stamp(3).ledger.dispatch([0, 1, 2]).ledger
    step = ledger.fail([2, 0])
    assert step.effect == Effect(event="fail", requeued=(2, 0))
    assert [step.ledger.attempts(o) for o in range(3)] == [1, 0, 1]
    step = step.ledger.dispatch([0]).ledger.fail([0])
    assert step.effect == Effect(event="fail", dropped=(0,))
    assert step.ledger.status(0) is None and step.ledger.cut == 1  # dropped, passed
    assert step.ledger.count(Status.DROPPED) == 0  # forgotten below the cut
    evict = step.ledger.buffer([1]).ledger.evict([1])
    assert evict.effect == Effect(event="evict", requeued=(1,))
    assert evict.ledger.attempts(1) == 1 and evict.ledger.status(1) is Status.PENDING
    # Under drop, the first failure drops, and the attempt is not kept.
    dropped = _ledger(on_failure=FailurePolicy.DROP).stamp(2).ledger.dispatch([1]).ledger.fail([1])
    assert dropped.effect == Effect(event="fail", dropped=(1,))
    assert dropped.ledger.status(1) is Status.DROPPED and dropped.ledger.attempts(1) == 0
    assert dropped.ledger.count(Status.DROPPED) == 1 and dropped.ledger.cut == 0


def test_a_restored_ordinal_that_fails_before_its_reyield_is_deferred() -> None:
    saved = Checkpoint(cut=0, retained=((0, 2),), attempts=((1, 1),), stream_len=10)
    ledger = Ledger.resume(CONFIG, saved).ledger
    step = ledger.evict([1, 0])
    assert step.effect == Effect(event="evict", unstamped=(1, 0))
    assert [step.ledger.status(o) for o in (0, 1)] == [Status.UNSTAMPED] * 2
    assert [step.ledger.attempts(o) for o in (0, 1)] == [1, 2]
    assert step.ledger.count(Status.UNSTAMPED) == 2
    again = step.ledger.stamp(1)
    assert again.effect.kept == (0,) and again.ledger.count(Status.UNSTAMPED) == 1
    assert again.ledger.attempts(0) == 1


def test_the_cut_passes_exactly_the_resolved_prefix() -> None:
    ledger = _ledger().stamp(6).ledger.dispatch(range(6)).ledger.buffer(range(6)).ledger
    ledger = ledger.train([1, 2, 4]).ledger
    assert ledger.cut == 0 and ledger.count(Status.TRAINED) == 3
    ledger = ledger.train([0]).ledger
    assert ledger.cut == 3 and ledger.count(Status.TRAINED) == 1 and ledger.size() == 3
    assert ledger.checkpoint() == Checkpoint(
        cut=3, trained_above_cut=((4, 5),), retained=((3, 4), (5, 6)), stream_len=10
    )
    ledger = ledger.train([3, 5]).ledger
    assert ledger.cut == 6 and ledger.size() == 0 and ledger.count(Status.TRAINED) == 0


# -- yield: the clamp at the stream's end and the filter -----------------------


def test_yield_clamps_to_the_stream_and_never_moves_back() -> None:
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
        attempts=((3, 2),),
        stream_len=10,
    )
    resumed = Ledger.resume(CONFIG, saved, rewind_to=0).ledger
    step = resumed.stamp(4)
    assert step.effect == Effect(event="stamp", stamped=range(4), kept=(1, 3), buffered=())
    assert step.ledger.attempts(3) == 2 and step.ledger.count(Status.UNSTAMPED) == 0
    assert step.ledger.count(Status.PENDING) == 2 and step.ledger.filtering
    step = step.ledger.stamp(3)
    assert step.effect == Effect(event="stamp", stamped=range(4, 7), kept=(6,), buffered=(5,))
    assert not step.ledger.filtering and step.ledger.count(Status.PENDING) == 3


def test_a_resolved_ordinal_forgets_its_attempts() -> None:
    """Resolved ordinals hold no attempts, so two runs that reach the same
    state by different histories hold equal ledgers (value identity: the
    exhaustive checker merges such states)."""
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
    assert retried.status(1) is Status.TRAINED and retried.attempts(1) == 0
    assert retried == direct and hash(retried) == hash(direct)
    evicted = fresh.dispatch([1]).ledger.buffer([1]).ledger.evict([1]).ledger
    evicted = evicted.dispatch([1]).ledger.buffer([1]).ledger.train([1]).ledger
    assert evicted == direct


# -- the checkpoint record -----------------------------------------------------


def test_record_size_and_resolved_count_are_exact() -> None:
    """``size`` is the number of integers in the record (what BOUNDED-SIZE
    bounds): two per range or attempt pair, plus the cut and the length."""
    saved = Checkpoint(
        cut=0,
        trained_above_cut=((1, 3),),
        dropped_above_cut=((4, 5), (6, 9)),
        retained=((10, 11), (12, 13), (14, 15)),
        attempts=((16, 1), (17, 2), (18, 1), (19, 3)),
    )
    assert saved.size() == 2 * (1 + 2 + 3 + 4) + 2
    assert Checkpoint(cut=7).size() == 2
    assert saved.resolved_count == 2 + 1 + 3
    assert Checkpoint(cut=3).resolved_count == 0


def test_a_record_keeping_attempts_of_a_resolved_ordinal_is_refused() -> None:
    """The ordinal at the very start of a resolved range counts as resolved."""
    for field in ("trained_above_cut", "dropped_above_cut"):
        for o in (5, 6):
            bad = attrs.evolve(Checkpoint(cut=0), **{field: ((5, 7),), "attempts": ((o, 1),)})
            with pytest.raises(CheckpointCorruptError) as info:
                Checkpoint.from_state_dict(bad.state_dict())
            assert str(info.value) == (
                f"checkpoint keeps attempts for ordinal {o}, which is already resolved"
            )
    fine = Checkpoint(cut=0, trained_above_cut=((5, 7),), attempts=((4, 1), (7, 1)))
    assert Checkpoint.from_state_dict(fine.state_dict()) == fine


def _signed(**fields: object) -> dict[str, object]:
    """A record with these fields, checksummed by an independent writer."""
    body = Checkpoint(cut=3, stream_len=20, fingerprint="fp").state_dict()
    del body["checksum"]
    body.update(fields)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {**body, "checksum": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()}


def test_the_checksum_is_the_documented_canonical_form() -> None:
    """Records written by one version must read back in the next: the
    checksum is SHA-256 over compact, key-sorted, ASCII-escaped JSON."""
    for fingerprint in ("fp", "données-v2"):
        record = Checkpoint(cut=3, stream_len=20, fingerprint=fingerprint).state_dict()
        assert record == _signed(fingerprint=fingerprint)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"format": "x"}, CheckpointVersionError,
         "not a frontier_core checkpoint: 'format' is 'x', expected 'frontier_core.checkpoint'"),
        ({"version": 2}, CheckpointVersionError,
         "checkpoint schema version 2 is not supported (this library reads version 1)"),
        ({"x": 1}, CheckpointCorruptError,
         "checkpoint record has missing keys [] and unknown keys ['x']"),
        ({"trained_above_cut": [[5]]}, CheckpointCorruptError,
         "'trained_above_cut' holds [5], not a [gap, n] pair"),
        ({"trained_above_cut": [[-1, 5]]}, CheckpointCorruptError,
         "'trained_above_cut' must be an int >= 0, got -1"),
        ({"dropped_above_cut": [[5, "6"]]}, CheckpointCorruptError,
         "'dropped_above_cut' must be an int >= 0, got '6'"),
        ({"dropped_above_cut": [[3, 0]]}, CheckpointCorruptError,
         "'dropped_above_cut' holds [3, 0]: n must be >= 1"),
        ({"retained": [[0, 0]]}, CheckpointCorruptError,
         "'retained' holds [0, 0]: n must be >= 1"),
        ({"retained": [[5, 6.0]]}, CheckpointCorruptError,
         "'retained' must be an int >= 0, got 6.0"),
        ({"attempts": {}}, CheckpointCorruptError,
         "'attempts' must be a list of [gap, n] pairs"),
        ({"attempts": [[5, 1, 2]]}, CheckpointCorruptError,
         "'attempts' holds [5, 1, 2], not a [gap, n] pair"),
        ({"attempts": [[-5, 1]]}, CheckpointCorruptError,
         "'attempts' must be an int >= 0, got -5"),
        ({"attempts": [[5, None]]}, CheckpointCorruptError,
         "'attempts' must be an int >= 0, got None"),
        ({"attempts": [[5, 0]]}, CheckpointCorruptError,
         "'attempts' holds [5, 0]: n must be >= 1"),
        ({"trained_above_cut": [[0, 2]], "dropped_above_cut": [[1, 1]]},
         CheckpointCorruptError,
         "checkpoint lists ordinal 5 in both 'trained_above_cut' and 'dropped_above_cut'"),
        ({"trained_above_cut": [[15, 2]]}, CheckpointCorruptError,
         "checkpoint refers to ordinal 20 beyond its own stream length 20"),
    ],
)  # fmt: skip
def test_a_bad_record_is_refused_with_its_exact_reason(
    fields: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        Checkpoint.from_state_dict(_signed(**fields))
    assert type(info.value) is error and str(info.value) == message


def test_the_record_level_refusals_say_what_they_found() -> None:
    cases = [
        ([], "checkpoint record must be a dict, got list"),
        ({k: v for k, v in _signed().items() if k != "attempts"},
         "checkpoint record has missing keys ['attempts'] and unknown keys []"),
    ]  # fmt: skip
    for record, message in cases:
        with pytest.raises(CheckpointCorruptError) as info:
            Checkpoint.from_state_dict(record)  # type: ignore[arg-type]
        assert str(info.value) == message
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint.from_state_dict({**_signed(), "fingerprint": float("nan")})
    assert str(info.value).startswith("checkpoint record is not JSON data: Out of range float")
    altered = {**_signed(), "cut": 4}
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint.from_state_dict(altered)
    assert str(info.value) == (
        "checkpoint checksum mismatch: the record was altered or truncated "
        f"(stored {altered['checksum']!r}, computed {_signed(cut=4)['checksum']!r})"
    )
    with pytest.raises(FingerprintMismatchError) as mismatch:
        Checkpoint.from_state_dict(_signed(), fingerprint="other")
    assert (mismatch.value.expected, mismatch.value.found) == ("other", "fp")


def test_the_highest_ordinal_of_an_empty_record_is_below_the_cut() -> None:
    assert Checkpoint(cut=11).highest_ordinal() == 10
    assert Checkpoint(cut=0).highest_ordinal() == -1
    assert Checkpoint(cut=2, retained=((4, 6),), attempts=((3, 1),)).highest_ordinal() == 5
    assert Checkpoint(cut=2, attempts=((9, 1),), dropped_above_cut=((3, 4),)).highest_ordinal() == 9


def test_to_ranges_refuses_unsorted_input_by_ordinal() -> None:
    from frontier_core._ranges import to_ranges

    assert to_ranges([0, 1, 2, 5, 7, 8]) == ((0, 3), (5, 6), (7, 9))
    for bad, at in (([3, 1], 1), ([0, 1, 1], 1)):
        with pytest.raises(ValueError) as info:
            to_ranges(bad)
        assert str(info.value) == f"ordinals not ascending and distinct at {at}"


def test_attempts_are_delta_coded_one_ordinal_apart() -> None:
    saved = Checkpoint(cut=3, attempts=((5, 2), (9, 1), (10, 3)))
    assert saved.state_dict()["attempts"] == [[2, 2], [3, 1], [0, 3]]
    assert Checkpoint.from_state_dict(saved.state_dict()) == saved


def test_an_overlap_past_a_skipped_range_is_found() -> None:
    """The overlap scan advances one range at a time: here the clash is in
    the second range of each list, after one that overlaps nothing."""
    bad = Checkpoint(cut=2, trained_above_cut=((4, 5), (7, 8)), dropped_above_cut=((5, 6), (7, 8)))
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint.from_state_dict(bad.state_dict())
    assert str(info.value) == (
        "checkpoint lists ordinal 7 in both 'trained_above_cut' and 'dropped_above_cut'"
    )


# -- the rest of the ledger: configuration, queries, value identity ------------


def test_config_refuses_bad_values_by_name() -> None:
    for kw, message in (
        ({"max_attempts": 0}, "max_attempts must be an int >= 1, got 0"),
        ({"max_attempts": True}, "max_attempts must be an int >= 1, got True"),
        ({"stream_len": -1}, "stream_len must be None or an int >= 0, got -1"),
        ({"stream_len": 2.0}, "stream_len must be None or an int >= 0, got 2.0"),
    ):
        with pytest.raises(ValueError) as info:
            LedgerConfig(**kw)  # type: ignore[arg-type]
        assert str(info.value) == message
    assert LedgerConfig(max_attempts=1, stream_len=0).stream_len == 0


def test_a_fresh_ledger_filters_nothing_and_counts_its_window() -> None:
    ledger = _ledger()
    assert (ledger.filter_horizon, ledger.filtering, ledger.in_flight()) == (0, False, 0)
    ledger = ledger.stamp(5).ledger.dispatch([0, 1]).ledger.buffer([1]).ledger.train([1]).ledger
    assert ledger.in_flight() == 3 + 1 + 0 and ledger.count(Status.TRAINED) == 1
    with pytest.raises(IllegalTransitionError) as info:
        _ledger().dispatch([0])
    assert info.value.reason == "dispatch needs pending ordinals; 0 is not yet yielded"


def test_ledgers_are_equal_exactly_when_their_states_are() -> None:
    a = _ledger().stamp(3).ledger
    b = _ledger().stamp(2).ledger.stamp(1).ledger
    c = _ledger().stamp(3).ledger.dispatch([0]).ledger
    assert a == b and hash(a) == hash(b) and a == a
    assert a != c and b != c and (a == c) is False
    assert len({a, b, c}) == 2
    assert a != "a ledger"


def test_intmap_truth_membership_and_construction() -> None:
    from frontier_core._trie import IntMap

    empty = IntMap()
    one = IntMap.from_items([(7, 3)])
    assert not empty and one and IntMap.from_items([(0, 1), (40, 2)])
    assert 7 in one and 6 not in one and -1 not in one and "7" not in one
    assert list(one.items()) == [(7, 3)]


def test_intmap_get_many_switches_leaves_correctly() -> None:
    """``get_many`` caches the last leaf: keys whose leaf ids collide under
    a wrong shift (1 and 1024, 0 and 32) must still read their own leaf."""
    from frontier_core._trie import IntMap

    m = IntMap.from_items([(0, 9), (1, 5), (32, 6), (1024, 7), (1025, 8)])
    assert m.get_many([1024, 1, 1025, 0, 32, 33]) == [7, 5, 8, 9, 6, None]
    assert m.get_many([1, 1024, 32, 0]) == [5, 7, 6, 9]


def test_intmap_node_count_counts_each_node_once() -> None:
    """One leaf; a root over two leaves; two levels over two leaves."""
    from frontier_core._trie import IntMap

    assert IntMap.from_items([(0, 1)]).node_count() == 1
    assert IntMap.from_items([(0, 1), (32, 2)]).node_count() == 3
    assert IntMap.from_items([(0, 1), (1024, 2)]).node_count() == 5


def test_intmap_bulk_update_groups_keys_by_child() -> None:
    from frontier_core._trie import IntMap

    keys = list(range(0, 3000, 7))
    m = IntMap().updated([(k, k + 1) for k in keys])
    assert list(m.items()) == [(k, k + 1) for k in keys]
    m = m.updated([(k, None) for k in keys[::2]] + [(5000, 1)])
    assert list(m.items()) == [(k, k + 1) for k in keys[1::2]] + [(5000, 1)]
