"""``Extend``: a running sample's next tokens, journaled once.

Against a naive model that keeps each sibling's tokens as a Python list: an
extend is taken only when it continues its attempt's current tokens exactly
(same attempt, not sealed, ``start`` equal to the tokens held), so a sample
never has a gap or an overlap; anything else about fencing is as before."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier_core.journal import (
    Extend,
    JournalCorruptError,
    JournalHeader,
    Progress,
    Record,
    Sealed,
    TokenPayload,
    compact,
    decode,
    encode,
    replay,
)

from ._strategies import U32, U64, budget, forge_journal, frame_offsets

pytestmark = pytest.mark.mutation


def tp(tokens: list[int], version: int = 0, reward: float | None = None) -> TokenPayload:
    return TokenPayload.of(tokens, [-0.5] * len(tokens), version, reward)


@st.composite
def extend_journals(draw: st.DrawFn) -> list[Record]:
    """Records over 2 siblings and 3 attempts: snapshots, seals, and
    extends whose ``start`` is often, not always, the right one."""
    out: list[Record] = []
    held: dict[tuple[int, int], int] = {}
    for _ in range(draw(st.integers(0, 25))):
        key = (0, draw(st.integers(0, 1)))
        attempt = draw(st.integers(0, 2))
        kind = draw(st.sampled_from(["progress", "sealed", "extend", "extend", "extend"]))
        n = draw(st.integers(0, 3))
        tokens = [draw(st.integers(0, 99)) for _ in range(n)]
        version = draw(st.integers(0, 2))
        if kind == "extend":
            start = draw(st.one_of(st.just(held.get(key, 0)), st.integers(0, 6)))
            out.append(Extend(*key, attempt, start, tp(tokens, version)))
            held[key] = held.get(key, 0) + n
        elif kind == "progress":
            out.append(Progress(*key, attempt, tp(tokens, version)))
            held[key] = n
        else:
            out.append(Sealed(*key, attempt, tp(tokens, version, reward=1.0)))
    return out


def model(records: list[Record]) -> dict[tuple[int, int], tuple[int, bool, list[int], list[int]]]:
    """Per sibling: (attempt, sealed, tokens, versions), as plain lists."""
    state: dict[tuple[int, int], tuple[int, bool, list[int], list[int]]] = {}
    for r in records:
        if not isinstance(r, Sealed | Progress | Extend):
            continue
        key = (r.ordinal, r.sibling)
        tokens = list(r.payload.tokens())
        versions = list(r.payload.versions())
        cur = state.get(key)
        if isinstance(r, Extend):
            if cur and cur[0] == r.attempt and not cur[1] and len(cur[2]) == r.start:
                state[key] = (r.attempt, False, cur[2] + tokens, cur[3] + versions)
            continue
        if cur is None or r.attempt > cur[0] or (r.attempt == cur[0] and not cur[1]):
            state[key] = (r.attempt, isinstance(r, Sealed), tokens, versions)
    return state


@budget(300)
@given(extend_journals())
def test_replay_with_extends_matches_the_model(records: list[Record]) -> None:
    got = {
        (o, s): (
            st_.attempt,
            st_.sealed,
            list(st_.payload.tokens()),  # type: ignore[union-attr]
            list(st_.payload.versions()),  # type: ignore[union-attr]
        )
        for o, s, st_ in replay(records).siblings()
    }
    assert got == model(records)


@budget(200)
@given(extend_journals())
def test_extends_round_trip_and_compact_to_the_same_state(records: list[Record]) -> None:
    data = encode(JournalHeader("fp", "run"), records)
    decoded = decode(data)
    assert decoded.records == tuple(records)
    state = replay(records)
    compacted = compact(records, range(0, 10))
    assert not any(isinstance(r, Extend) for r in compacted)  # snapshots only
    assert replay(compacted) == state


def test_a_long_sample_costs_its_tokens_once() -> None:
    """32 extends of 256 tokens: the journal holds the sample once (plus a
    frame per extend), where whole snapshots would hold it 16 times over."""
    records: list[Record] = [Progress(0, 0, 1, tp([]))]
    for i in range(32):
        records.append(Extend(0, 0, 1, 256 * i, tp(list(range(256)), version=i // 8)))
    deltas = len(encode(JournalHeader("fp", "run"), records))
    snapshots = len(
        encode(
            JournalHeader("fp", "run"),
            [
                Progress(0, 0, 1, replay(records[: i + 2]).get(0, 0).payload)  # type: ignore[union-attr]
                for i in range(32)
            ],
        )
    )
    assert deltas < 8 * 256 * 32 * 1.1
    assert snapshots > 10 * deltas
    whole = replay(records).get(0, 0)
    assert whole is not None and len(whole.payload) == 256 * 32  # type: ignore[arg-type]
    assert list(whole.payload.versions()) == [i // 8 for i in range(32) for _ in range(256)]  # type: ignore[union-attr]


def test_an_extend_never_begins_an_attempt_nor_leaves_a_gap() -> None:
    base = Progress(0, 0, 2, tp([1, 2]))
    state = replay([base, Extend(0, 0, 2, 3, tp([9]))])  # a gap: ignored
    assert list(state.get(0, 0).payload.tokens()) == [1, 2]  # type: ignore[union-attr]
    assert state.fenced == 1
    state = replay([base, Extend(0, 0, 2, 1, tp([9]))])  # an overlap: ignored
    assert list(state.get(0, 0).payload.tokens()) == [1, 2]  # type: ignore[union-attr]
    state = replay([base, Extend(0, 0, 3, 2, tp([9]))])  # another attempt: ignored
    assert state.get(0, 0).attempt == 2  # type: ignore[union-attr]
    assert replay([Extend(0, 0, 0, 0, tp([9]))]).groups == {}  # no base at all
    sealed = Sealed(0, 0, 2, tp([1, 2], reward=0.5))
    assert replay([sealed, Extend(0, 0, 2, 2, tp([9]))]).get(0, 0).sealed  # type: ignore[union-attr]


def test_an_extend_is_validated() -> None:
    with pytest.raises(ValueError, match="no reward"):
        Extend(0, 0, 0, 0, tp([1], reward=1.0))
    with pytest.raises(TypeError, match="TokenPayload"):
        Extend(0, 0, 0, 0, b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Extend(0, 0, 0, U32 + 1, tp([1]))
    wide = Extend(U64, U32, U32, U32, tp([U32], version=U32))
    assert decode(encode(JournalHeader("f", "l"), [wide])).records == (wide,)


def test_a_forged_extend_with_a_reward_or_another_payload_is_corruption() -> None:
    good = encode(JournalHeader("f", "l"), [Extend(1, 2, 3, 4, tp([7]))])
    body = good[frame_offsets(good)[1] + 20 : -4]
    # has_reward is the byte after the u32 counts, which follow the 21-byte fixed part.
    flag_at = 21 + 8
    with_reward = body[:flag_at] + b"\x01" + body[flag_at + 1 :]
    bad_kind = body[:20] + b"\x00" + body[21:]
    for forged in (with_reward, bad_kind):
        data = forge_journal((4, forged), base=0)
        with pytest.raises(JournalCorruptError):
            decode(data)
