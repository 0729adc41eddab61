"""The events (``_events``): what cannot be built, and the exact refusal,
for the prompt-level events and the sample-level ones. Whether a
well-formed event is legal now is the ledgers' business (test_ledger.py,
test_samples.py)."""

from __future__ import annotations

import pytest

from frontier_core import (
    Buffer,
    Dispatch,
    Evict,
    Fail,
    FailSample,
    IllegalTransitionError,
    Lease,
    Restart,
    Seal,
    Setback,
    Stamp,
    Train,
)

pytestmark = pytest.mark.mutation

ORDINAL_EVENTS = [Dispatch, Buffer, Fail, Setback, Evict, Train]


@pytest.mark.parametrize("count", [-1, -7, True, False])
def test_a_stamp_of_a_negative_or_boolean_count_cannot_be_built(count: int) -> None:
    with pytest.raises(IllegalTransitionError) as info:
        Stamp(count)
    assert info.value.event == "stamp" and info.value.ordinals == ()
    assert info.value.reason == f"count must be an int >= 0, got {count!r}"
    assert Stamp(0).count == 0 and Stamp(3).count == 3


def test_a_stamp_of_a_non_int_cannot_be_built() -> None:
    with pytest.raises(TypeError):
        Stamp(1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("event", ORDINAL_EVENTS)
@pytest.mark.parametrize("bad", [-1, True, 1.0, "2", None])
def test_an_ordinal_that_is_not_an_int_at_least_0_cannot_be_listed(
    event: type, bad: object
) -> None:
    with pytest.raises(IllegalTransitionError) as info:
        event([0, bad])
    assert info.value.event == event.name and info.value.ordinals == ()
    assert info.value.reason == f"ordinals must be ints >= 0, got {bad!r}"


@pytest.mark.parametrize("event", ORDINAL_EVENTS)
def test_an_ordinal_listed_twice_cannot_be_built_and_is_named(event: type) -> None:
    with pytest.raises(IllegalTransitionError) as info:
        event([4, 2, 4, 9, 2, 2])
    assert info.value.event == event.name
    assert info.value.ordinals == (2, 4)
    assert info.value.reason == "listed more than once"
    assert event(range(3)).ordinals == (0, 1, 2)


@pytest.mark.parametrize(("event", "width"), [(Seal, 3), (FailSample, 3), (Restart, 2)])
def test_a_sibling_listed_twice_is_named_by_its_ordinal(event: type, width: int) -> None:
    items = [(3, 1, 0), (5, 0, 1), (3, 1, 2), (5, 0, 3), (3, 0, 4)]
    with pytest.raises(IllegalTransitionError) as info:
        event([x[:width] for x in items])
    assert info.value.event == event.name
    assert info.value.ordinals == (3, 5)
    assert info.value.reason == "a sibling is listed more than once"


@pytest.mark.parametrize(("event", "width"), [(Seal, 3), (FailSample, 3), (Restart, 2)])
def test_sample_events_keep_their_items_in_order(event: type, width: int) -> None:
    items = [(7, 1, 4), (2, 0, 9), (7, 0, 5)]
    built = event(iter([list(x[:width]) for x in items]))
    got = built.siblings if event is Restart else built.leases
    assert got == tuple(x[:width] for x in items)
    if event is not Restart:
        assert all(isinstance(x, Lease) for x in got)


@pytest.mark.parametrize(("event", "width"), [(Seal, 3), (FailSample, 3), (Restart, 2)])
def test_a_malformed_item_is_refused_with_what_it_was(event: type, width: int) -> None:
    for bad in ([1] * (width + 1), [1] * (width - 1), [1, -1, 1][:width], [1, True, 1][:width]):
        with pytest.raises(IllegalTransitionError) as info:
            event([bad])
        assert info.value.event == event.name and info.value.ordinals == ()
        assert info.value.reason == f"expected {width} ints >= 0, got {bad!r}"
    long = list(range(60))
    with pytest.raises(IllegalTransitionError) as info:
        event([long])
    assert info.value.reason.startswith(f"expected {width} ints >= 0, got [0, 1, 2, ")
    assert len(info.value.reason) <= 120


@pytest.mark.parametrize(("event", "width"), [(Seal, 3), (FailSample, 3), (Restart, 2)])
@pytest.mark.parametrize("bad", [5, None, [5], [None], [{0: 0, 1: 0, 2: 0}], [{0, 1, 2}]])
def test_a_sibling_event_of_no_pairs_is_refused_by_type(
    event: type, width: int, bad: object
) -> None:
    """Not a list, or items that are not sequences (an int, a dict, a set):
    once a bare ``TypeError``."""
    with pytest.raises(IllegalTransitionError) as info:
        event(bad)
    assert info.value.event == event.name


@pytest.mark.parametrize(
    "huge", [2**64, 2**5000, 2**20000, -(2**20000)], ids=["2^64", "2^5000", "2^20000", "-2^20000"]
)
def test_events_refuse_ordinals_past_2_64_with_a_bounded_message(huge: int) -> None:
    """No ledger holds an ordinal at or past 2**64; an int of 20,000 bits
    once raised ``ValueError`` from the message's own formatting."""
    for build in (
        lambda: Dispatch([huge]),
        lambda: Stamp(huge + 1 if huge > 0 else huge),  # a count may be 2**64
        lambda: Seal([(huge, 0, 0)]),
        lambda: Restart([(0, huge)]),
    ):
        with pytest.raises(IllegalTransitionError) as info:
            build()
        assert len(str(info.value)) < 200
    assert Dispatch([2**64 - 1]).ordinals == (2**64 - 1,)
