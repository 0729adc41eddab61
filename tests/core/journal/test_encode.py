"""The fast encoder against the layout: every kind, byte for byte, and the
all-or-nothing contract of ``append_frames`` (the writer's path).

``append_frames`` is specialised per record and payload kind for speed, so
each of its branches is checked here against a reference written from the
documented layout alone (``layout_body`` and the forger's frames), over
records with extreme field values.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier_core.journal import (
    DEFAULT_MAX_FRAME,
    FRAME_OVERHEAD,
    BytesPayload,
    Extend,
    JournalHeader,
    JsonPayload,
    Mark,
    Progress,
    Record,
    Reserve,
    Sealed,
    TokenPayload,
    decode,
    encode,
    encode_record,
    encode_records,
)
from frontier_core.journal._format import append_frames

from ._strategies import (
    FORGED_ID,
    U64,
    budget,
    forge_frame,
    forge_header_body,
    forge_key,
    headers,
    wide_records,
)

pytestmark = pytest.mark.mutation

#: The journal the frames below belong to (the forger's: ``forge_key``).
HEADER = JournalHeader("fp", "run", journal_id=FORGED_ID)
TOKENS = TokenPayload.of([5, 6, 7], [-0.5, -1.25, -3.0], [2, 2, 3], reward=1.0)


def layout_body(record: Record) -> tuple[int, bytes]:
    """The frame kind and body of ``record``, from the layout in
    ``_format``'s docstring."""
    if isinstance(record, Mark):
        return 3, struct.pack("<Q", record.checkpoint)
    if isinstance(record, Reserve):
        return 5, struct.pack("<Q", record.below)
    payload = record.payload
    if isinstance(payload, BytesPayload):
        kind, rest = 0, payload.data
    elif isinstance(payload, JsonPayload):
        kind, rest = 1, payload.text.encode("utf-8")
    else:
        reward = payload.reward
        rest = (
            struct.pack("<IIB", len(payload), len(payload.version_runs), reward is not None)
            + struct.pack("<d", 0.0 if reward is None else reward)
            + payload.token_data
            + payload.logprob_data
            + b"".join(struct.pack("<II", *run) for run in payload.version_runs)
        )
        kind = 2
    if isinstance(record, Extend):
        return 4, struct.pack(
            "<QIIIB", record.ordinal, record.sibling, record.attempt, record.start, kind
        ) + rest
    frame_kind = 1 if isinstance(record, Sealed) else 2
    return frame_kind, struct.pack(
        "<QIIB", record.ordinal, record.sibling, record.attempt, kind
    ) + rest


def forged(records: list[Record], first_seq: int, key: int | None = None) -> bytes:
    """The frames of ``records``, from the layout, keyed to ``HEADER``'s
    journal (or to ``key``)."""
    out = []
    for seq, record in enumerate(records, start=first_seq):
        kind, body = layout_body(record)
        out.append(forge_frame(kind, seq, body, key=key))
    return b"".join(out)


@budget(100)
@given(st.lists(wide_records, max_size=12), st.integers(0, U64 - 12))
def test_every_kind_is_encoded_as_the_layout_says(recs: list[Record], first_seq: int) -> None:
    assert encode_records(recs, first_seq=first_seq, header=HEADER) == forged(recs, first_seq)
    parts: list[bytes] = []
    size = append_frames(parts, recs, first_seq, DEFAULT_MAX_FRAME, HEADER.key)
    assert b"".join(parts) == forged(recs, first_seq)
    assert size == len(b"".join(parts))


@budget(30)
@given(headers, st.lists(wide_records, max_size=6))
def test_a_whole_journal_is_the_header_then_the_frames(
    header: JournalHeader, recs: list[Record]
) -> None:
    fp, lineage = header.fingerprint.encode(), header.lineage.encode()
    body = forge_header_body(fp, lineage, journal_id=header.journal_id, marks=header.marks)
    head = forge_frame(0, header.base, body)
    key = forge_key(fp, lineage, header.journal_id)
    assert encode(header, recs) == head + forged(recs, header.base + 1, key)


def test_every_payload_kind_and_many_version_runs() -> None:
    runs = TokenPayload.of(range(6), [-1.0] * 6, [0, 0, 1, 2, 2, 7])
    recs: list[Record] = [
        Sealed(1, 2, 3, TOKENS),
        Progress(1, 2, 3, runs),
        Progress(0, 0, 0, TokenPayload.of([], [], 0)),
        Sealed(4, 0, 1, BytesPayload(b"")),
        Progress(4, 1, 1, JsonPayload.of({"é": [1, None]})),
        Mark(U64),
    ]
    assert encode_records(recs, first_seq=7, header=HEADER) == forged(recs, 7)
    assert len(runs.version_runs) == 4


def test_input_of_any_iterable() -> None:
    recs: list[Record] = [Sealed(0, i, 0, TOKENS) for i in range(5)]

    def gen() -> Iterator[Record]:
        yield from recs

    assert encode_records(gen(), first_seq=1, header=HEADER) == encode_records(
        recs, first_seq=1, header=HEADER
    )
    assert encode_records(tuple(recs), first_seq=1, header=HEADER) == encode_records(
        recs, first_seq=1, header=HEADER
    )
    assert encode_records([], first_seq=1, header=HEADER) == b""


def test_subclasses_of_the_values_encode_as_their_base() -> None:
    """The kinds are looked up by exact type; a subclass takes the slow path
    to the same bytes."""

    class MySealed(Sealed):
        pass

    class MyBytes(BytesPayload):
        pass

    assert encode_record(MySealed(1, 2, 3, TOKENS), 5, header=HEADER) == encode_record(
        Sealed(1, 2, 3, TOKENS), 5, header=HEADER
    )
    mine = Progress(1, 0, 0, MyBytes(b"abc"))
    assert encode_record(mine, 5, header=HEADER) == encode_record(
        Progress(1, 0, 0, BytesPayload(b"abc")), 5, header=HEADER
    )
    decoded = decode(encode(JournalHeader("fp", "run"), [mine]))
    assert decoded.records == (Progress(1, 0, 0, BytesPayload(b"abc")),)


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        (Sealed(0, 1, 0, BytesPayload(bytes(200))), ValueError, "exceeds max_frame=100"),
        ("not a record", TypeError, "not a journal record: str"),
        (None, TypeError, "not a journal record: NoneType"),
    ],
)
def test_append_frames_is_all_or_nothing(bad: object, error: type[Exception], match: str) -> None:
    good = Sealed(0, 0, 0, BytesPayload(b"ok"))
    parts = [b"earlier"]
    with pytest.raises(error, match=match):
        append_frames(parts, [good, bad, good], 1, 100, HEADER.key)  # type: ignore[list-item]
    assert parts == [b"earlier"]


def test_sequence_numbers_past_64_bits_are_refused_whole() -> None:
    mark = Mark(0)
    assert len(encode_records([mark], first_seq=U64, header=HEADER)) == FRAME_OVERHEAD + 8
    parts: list[bytes] = []
    with pytest.raises(ValueError, match="does not fit 64 bits"):
        append_frames(parts, [mark, mark], U64, DEFAULT_MAX_FRAME, HEADER.key)
    assert parts == []
    with pytest.raises(ValueError, match="does not fit 64 bits"):
        encode_records([mark, mark], first_seq=U64, header=HEADER)
    with pytest.raises(ValueError, match="max_frame"):
        encode_records([mark], first_seq=1, header=HEADER, max_frame=0)
    with pytest.raises(ValueError, match="exceeds max_frame=7"):
        encode_record(mark, 1, header=HEADER, max_frame=7)  # a mark's body is 8 bytes


def test_small_and_large_frames_encode_alike_on_both_sides_of_the_join() -> None:
    """A small frame is joined and checked in one call, a large one checked
    part by part (``_JOIN_MAX``): every sibling kind with bodies just below,
    at and above the bound, and far above it, is the layout's frame."""
    from frontier_core.journal._format import _JOIN_MAX

    recs: list[Record] = []
    for target in (_JOIN_MAX - 9, _JOIN_MAX - 8, _JOIN_MAX, _JOIN_MAX + 1, _JOIN_MAX + 8, 70_000):
        n = max(0, (target - 38 - 16) // 8)  # a token frame: 38 fixed bytes, one run
        tokens = TokenPayload.of(range(n), [-0.25] * n, [0] * (n // 2) + [3] * (n - n // 2), 2.5)
        m = target - 17  # a bytes frame: 17 fixed bytes, so a body of exactly ``target``
        raw = BytesPayload(bytes(range(256)) * (m // 256) + bytes(m % 256))
        text = JsonPayload.of({"k": "é" * max(0, (target - 30) // 2)})
        recs += [
            Sealed(U64, 7, 9, tokens),
            Progress(3, 4, 5, tokens),
            Extend(1, 2, 3, 4, TokenPayload.of(range(n), [-1.0] * n, 6)),
            Sealed(8, 0, 1, raw),
            Progress(8, 1, 1, text),
        ]
    sizes = {len(layout_body(r)[1]) for r in recs}
    assert {_JOIN_MAX, _JOIN_MAX + 1} <= sizes  # both sides of the bound, exactly
    tokens = {len(layout_body(r)[1]) for r in recs if isinstance(r.payload, TokenPayload)}  # type: ignore[union-attr]
    assert min(tokens) <= _JOIN_MAX < max(tokens)
    assert encode_records(recs, first_seq=11, header=HEADER) == forged(recs, 11)
    parts: list[bytes] = []
    assert append_frames(parts, recs, 11, DEFAULT_MAX_FRAME, HEADER.key) == len(forged(recs, 11))
    assert b"".join(parts) == forged(recs, 11)
