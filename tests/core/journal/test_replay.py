"""Replay and its fencing rules, against a naive model.

The model restates the rules declaratively, per sibling: the current
attempt is the highest attempt among the sibling's records; the state is
that attempt's first seal, or else its last progress. A record is fenced
when, at its turn, a higher attempt was already seen, or its own attempt had
already sealed.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier_core import Lease
from frontier_core.journal import (
    BytesPayload,
    JournalHeader,
    JournalState,
    Mark,
    Progress,
    Record,
    Sealed,
    SiblingState,
    accepts,
    decode,
    encode,
    replay,
)

from ._strategies import budget, fold_records

pytestmark = pytest.mark.mutation


def p(tag: str) -> BytesPayload:
    return BytesPayload(tag.encode())


def model(recs: list[Record]) -> tuple[dict[tuple[int, int], SiblingState], int]:
    by_key: dict[tuple[int, int], list[Sealed | Progress]] = defaultdict(list)
    fenced = 0
    highest: dict[tuple[int, int], int] = {}
    sealed_attempts: dict[tuple[int, int], set[int]] = defaultdict(set)
    for r in recs:
        if isinstance(r, Mark):
            continue
        key = (r.ordinal, r.sibling)
        if key in highest and (r.attempt < highest[key] or r.attempt in sealed_attempts[key]):
            fenced += 1
        if isinstance(r, Sealed):
            sealed_attempts[key].add(r.attempt)
        highest[key] = max(highest.get(key, r.attempt), r.attempt)
        by_key[key].append(r)
    states = {}
    for key, rs in by_key.items():
        top = max(r.attempt for r in rs)
        mine = [r for r in rs if r.attempt == top]
        seals = [r for r in mine if isinstance(r, Sealed)]
        if seals:
            states[key] = SiblingState(top, seals[0].payload, True)
        else:
            states[key] = SiblingState(top, mine[-1].payload, False)
    return states, fenced


@budget(200)
@given(st.lists(fold_records, max_size=40))
def test_replay_matches_the_model(recs: list[Record]) -> None:
    state = replay(recs)
    expected, fenced = model(recs)
    assert {(o, s): st_ for o, s, st_ in state.siblings()} == expected
    assert state.fenced == fenced
    # A result from a non-current attempt is never in the state.
    for (o, s), sib in expected.items():
        top = max(
            r.attempt for r in recs if not isinstance(r, Mark) and (r.ordinal, r.sibling) == (o, s)
        )
        assert sib.attempt == top


@budget(100)
@given(st.lists(fold_records, max_size=20))
def test_replay_of_the_decoded_journal_is_the_replay_of_the_records(recs: list[Record]) -> None:
    decoded = decode(encode(JournalHeader("fp", "run"), recs))
    assert replay(decoded.records) == replay(recs)


def test_a_late_result_of_an_older_attempt_is_fenced() -> None:
    state = replay(
        [
            Progress(7, 1, 0, p("a0 partial")),
            Progress(7, 1, 1, p("a1 started")),  # attempt 0 declared dead
            Sealed(7, 1, 0, p("a0 answers late")),  # fenced
            Progress(7, 1, 0, p("a0 still streaming")),  # fenced
        ]
    )
    assert state.get(7, 1) == SiblingState(1, p("a1 started"), False)
    assert state.fenced == 2


def test_exactly_one_record_seals_an_attempt() -> None:
    state = replay(
        [
            Progress(0, 0, 2, p("partial")),
            Sealed(0, 0, 2, p("first seal")),
            Sealed(0, 0, 2, p("second seal")),  # fenced
            Progress(0, 0, 2, p("progress after the seal")),  # fenced
        ]
    )
    assert state.get(0, 0) == SiblingState(2, p("first seal"), True)
    assert state.fenced == 2


def test_a_newer_attempt_supersedes_a_seal() -> None:
    """A group failure regenerates sealed siblings under a new attempt: the
    old seal must not survive it."""
    state = replay([Sealed(3, 0, 0, p("old")), Progress(3, 0, 1, p("")), Sealed(3, 0, 0, p("x"))])
    assert state.get(3, 0) == SiblingState(1, p(""), False)
    assert state.fenced == 1


def test_progress_supersedes_progress_and_siblings_are_independent() -> None:
    state = replay(
        [
            Progress(1, 0, 0, p("10 tokens")),
            Progress(1, 1, 5, p("other sibling")),
            Mark(3),
            Progress(1, 0, 0, p("20 tokens")),
            Sealed(2, 0, 0, p("done")),
        ]
    )
    assert state.get(1, 0) == SiblingState(0, p("20 tokens"), False)
    assert state.get(1, 1) == SiblingState(5, p("other sibling"), False)
    assert state.get(2, 0) == SiblingState(0, p("done"), True)
    assert state.get(2, 1) is None and state.get(9, 0) is None
    assert sorted(state.groups) == [1, 2] and state.fenced == 0
    assert [r.ordinal for r in state.to_records()] == [1, 1, 2]


def test_the_state_is_read_only_and_fenced_is_not_part_of_its_value() -> None:
    a = replay([Sealed(0, 0, 1, p("x")), Sealed(0, 0, 0, p("late"))])
    b = replay([Sealed(0, 0, 1, p("x"))])
    assert a == b and a.fenced == 1 and b.fenced == 0
    with pytest.raises(TypeError):
        a.groups[1] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        a.groups[0][1] = a.groups[0][0]  # type: ignore[index]
    assert replay([]) == JournalState()


def test_accepts_is_the_whole_rule() -> None:
    running = SiblingState(2, p(""), False)
    sealed = SiblingState(2, p(""), True)
    assert accepts(None, Sealed(0, 0, 0, p("")))
    assert accepts(running, Progress(0, 0, 2, p("")))
    assert accepts(running, Sealed(0, 0, 2, p("")))
    assert accepts(sealed, Progress(0, 0, 3, p("")))
    assert not accepts(running, Sealed(0, 0, 1, p("")))
    assert not accepts(sealed, Sealed(0, 0, 2, p("")))
    assert not accepts(sealed, Progress(0, 0, 2, p("")))


def test_replay_refuses_what_is_not_a_record() -> None:
    with pytest.raises(TypeError, match="not a journal record"):
        replay([("sealed", 0)])  # type: ignore[list-item]


def test_replay_is_linear() -> None:
    """80k records over 20k siblings replay in well under the budget a
    quadratic fold would need (a smoke bound, not a benchmark)."""
    import time

    recs: list[Record] = []
    for i in range(20_000):
        recs += [Progress(i, 0, 0, p("")), Progress(i, 0, 1, p("")), Sealed(i, 0, 1, p(""))]
        recs.append(Sealed(i, 0, 0, p("late")))
    start = time.process_time()
    state = replay(recs)
    assert state.fenced == 20_000 and len(state.groups) == 20_000
    assert time.process_time() - start < 10


def test_sealed_and_progress_list_the_leases_ascending_under_their_current_attempt() -> None:
    state = replay(
        [
            Progress(4, 1, 0, p("running")),
            Sealed(2, 3, 5, p("done")),
            Progress(4, 0, 2, p("old")),
            Sealed(4, 0, 3, p("done too")),
            Progress(2, 0, 1, p("running")),
            Progress(2, 0, 6, p("newer attempt")),
            Sealed(2, 0, 1, p("late, fenced")),
        ]
    )
    assert state.sealed() == (Lease(2, 3, 5), Lease(4, 0, 3))
    assert state.progress() == (Lease(2, 0, 6), Lease(4, 1, 0))
    assert replay([]).sealed() == () and replay([]).progress() == ()


def test_a_restricted_state_keeps_the_journal_fenced_count() -> None:
    """``fenced`` is the statistic of the journal that produced the state;
    restricting the state does not change the journal."""
    state = replay([Sealed(0, 0, 1, p("x")), Sealed(0, 0, 0, p("late")), Sealed(5, 0, 0, p("y"))])
    assert state.fenced == 1
    assert state.restrict({5}).fenced == 1
    assert state.restrict(range(0)).fenced == 1


def test_replay_names_the_type_of_what_is_not_a_record() -> None:
    with pytest.raises(TypeError, match=r"^not a journal record: tuple$"):
        replay([("sealed", 0)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"^not a journal record: BytesPayload$"):
        replay([Progress(0, 0, 0, p("")), p("a payload, not a record")])  # type: ignore[list-item]
