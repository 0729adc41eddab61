"""``Reserve``: attempts a writer may have handed out, kept across replay,
compaction and resume, so that a resumed writer's attempts start above them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier_core.journal import (
    BytesPayload,
    JournalHeader,
    Progress,
    Record,
    Reserve,
    Sealed,
    compact,
    decode,
    encode,
    replay,
)

from ._strategies import U64, budget, records

pytestmark = pytest.mark.mutation


@budget(200)
@given(st.lists(records, max_size=30))
def test_the_state_keeps_the_highest_reservation_and_the_floor_respects_it(
    recs: list[Record],
) -> None:
    state = replay(recs)
    reserves = [r.below for r in recs if isinstance(r, Reserve)]
    assert state.reserved == max(reserves, default=0)
    attempts = [r.attempt + 1 for r in recs if isinstance(r, Sealed | Progress)]
    # The floor is at or above the reservation and every accepted attempt.
    assert state.next_attempt >= state.reserved
    for _, _, sib in state.siblings():
        assert state.next_attempt > sib.attempt
    assert state.next_attempt <= max([state.reserved, *attempts, 0])


@budget(200)
@given(st.lists(records, max_size=30), st.sets(st.integers(0, 5)))
def test_compaction_keeps_the_reservation(recs: list[Record], window: set[int]) -> None:
    compacted = compact(recs, window)
    state = replay(compacted)
    assert state.reserved == replay(recs).reserved
    assert state == replay(recs).restrict(window)
    assert sum(isinstance(r, Reserve) for r in compacted) == (1 if state.reserved else 0)


def test_a_reservation_round_trips_and_fences_nothing_by_itself() -> None:
    recs: list[Record] = [Reserve(1024), Sealed(0, 0, 3, BytesPayload(b"x")), Reserve(U64)]
    decoded = decode(encode(JournalHeader("f", "l"), recs))
    assert decoded.records == tuple(recs)
    state = replay(decoded.records)
    assert state.reserved == U64 and state.next_attempt == U64
    assert state.get(0, 0) is not None and state.fenced == 0
    with pytest.raises(ValueError):
        Reserve(-1)
    with pytest.raises(TypeError):
        Reserve(True)
