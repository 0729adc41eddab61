"""Every refusal of the codec by its exact reason and offset, and the bounds
of the encoder at their edges.

``JournalCorruptError`` carries ``offset`` (the frame's first byte) and
``reason`` (what is wrong with it); the torn tail carries its ``reason``;
the other errors carry the fields they name. The frames here are forged
from the layout in ``_format``'s docstring (``_strategies.forge_frame``),
and each expected reason is the rule the frame breaks, as the decoder
states it. Mutation testing (scripts/mutation.sh) pinned these; the
equivalent mutants are in proofs/MUTANTS_JOURNAL.md.
"""

from __future__ import annotations

import math
import re
import struct
from array import array

import pytest

from frontier_core.journal import (
    FRAME_OVERHEAD,
    BytesPayload,
    Extend,
    JournalBehindError,
    JournalCorruptError,
    JournalHeader,
    JournalMismatchError,
    JournalSequenceError,
    JournalVersionError,
    JsonPayload,
    Mark,
    Progress,
    Record,
    Sealed,
    TokenPayload,
    TornTail,
    decode,
    encode,
    encode_header,
    encode_record,
    encode_records,
)
from frontier_core.journal._format import append_frame, append_frames

from ._strategies import FORGED_ID, U32, U64, forge_frame, forge_header_body, forge_journal

pytestmark = pytest.mark.mutation

TAG = b"frontier_core.journal"
HEADER_FRAME = forge_frame(0, 0, forge_header_body())  # fingerprint "fp", lineage "run"
HEADER = JournalHeader("fp", "run", journal_id=FORGED_ID)  # the journal of HEADER_FRAME
H = len(HEADER_FRAME)  # the offset of the first record's frame


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


def sibling(kind: int, payload: bytes, ordinal: int = 0) -> bytes:
    """A sealed or progress body: u64 ordinal, u32 sibling, u32 attempt, u8 kind."""
    return struct.pack("<QIIB", ordinal, 0, 0, kind) + payload


def extend(kind: int, payload: bytes) -> bytes:
    """An extend body: u64 ordinal, u32 sibling, u32 attempt, u32 start, u8 kind."""
    return struct.pack("<QIIIB", 0, 0, 0, 0, kind) + payload


def tokens(
    n: int,
    runs: list[tuple[int, int]],
    *,
    has_reward: int = 0,
    reward: bytes = bytes(8),
    logprobs: bytes | None = None,
) -> bytes:
    """A token payload: u32 n, u32 r, u8 has_reward, f64 reward, the arrays."""
    return (
        struct.pack("<IIB", n, len(runs), has_reward)
        + reward
        + bytes(4 * n)
        + (logprobs if logprobs is not None else array("f", [-1.0] * n).tobytes())
        + b"".join(struct.pack("<II", *r) for r in runs)
    )


def header_body(*parts: bytes) -> bytes:
    return b"".join(parts)


TAG_PART = struct.pack("<B", len(TAG)) + TAG
VERSION_PART = struct.pack("<H", 2)
FP_PART = struct.pack("<H", 2) + b"fp"

#: A mark whose body byte is flipped: a whole frame failing its check, its
#: last byte (of the frame check) not zero.
_MARK = forge_frame(3, 1, bytes(8))
_MARK_BAD = _MARK[:20] + b"\1" + _MARK[21:]
assert _MARK_BAD[-1] != 0


#: A record frame (at offset ``H``, after a sound header) and the reason it
#: is refused: the body rules of the layout, one broken per entry.
BAD_RECORDS: dict[str, tuple[bytes, str]] = {
    "mark short": (forge_journal((3, bytes(7))), "a mark needs 8 bytes, the body has 7 left"),
    "mark long": (forge_journal((3, bytes(9))), "1 unexpected bytes after the mark"),
    "reservation short": (
        forge_journal((5, bytes(7))),
        "a reservation needs 8 bytes, the body has 7 left",
    ),
    "reservation long": (forge_journal((5, bytes(9))), "1 unexpected bytes after the reservation"),
    "sibling short": (
        forge_journal((1, bytes(16))),
        "a sibling record needs 17 bytes, the body has 16 left",
    ),
    "extend short": (
        forge_journal((4, bytes(20))),
        "an extend needs 21 bytes, the body has 20 left",
    ),
    "extend of bytes": (
        forge_journal((4, extend(0, tokens(1, [(0, 1)])))),
        "an extend carries tokens (payload kind 2), not kind 0",
    ),
    "extend with a reward": (
        forge_journal(
            (4, extend(2, tokens(1, [(0, 1)], has_reward=1, reward=struct.pack("<d", 1.0))))
        ),
        "an extend carries no reward",
    ),
    "unknown payload kind": (forge_journal((1, sibling(7, b""))), "unknown payload kind 7"),
    "json not utf-8": (forge_journal((2, sibling(1, b'"\xff"'))), "the JSON payload is not UTF-8"),
    "json NaN": (
        forge_journal((2, sibling(1, b"NaN"))),
        "text is not strict JSON: NaN is not JSON",
    ),
    "token counts short": (
        forge_journal((1, sibling(2, bytes(16)))),
        "a token payload's counts needs 17 bytes, the body has 16 left",
    ),
    "token sizes off by one": (
        forge_journal((1, sibling(2, tokens(2, [(0, 1)]) + b"\0"))),
        "a token payload of 2 tokens and 1 version runs needs 24 bytes, the body has 25",
    ),
    "token counts huge": (
        forge_journal((1, sibling(2, struct.pack("<IIB", U32, U32, 0) + bytes(8)))),
        f"a token payload of {U32} tokens and {U32} version runs needs {16 * U32} bytes, "
        "the body has 0",
    ),
    "has_reward 2": (
        forge_journal((1, sibling(2, tokens(1, [(0, 1)], has_reward=2)))),
        "has_reward is 2, not 0 or 1",
    ),
    "absent reward -0.0": (
        forge_journal((1, sibling(2, tokens(1, [(0, 1)], reward=struct.pack("<d", -0.0))))),
        "an absent reward must be stored as +0.0",
    ),
    "reward inf": (
        forge_journal(
            (1, sibling(2, tokens(1, [(0, 1)], has_reward=1, reward=struct.pack("<d", math.inf))))
        ),
        "the reward is inf, not finite",
    ),
    "reward nan": (
        forge_journal(
            (1, sibling(2, tokens(1, [(0, 1)], has_reward=1, reward=struct.pack("<d", math.nan))))
        ),
        "the reward is nan, not finite",
    ),
    "logprob -inf": (
        forge_journal((1, sibling(2, tokens(1, [(0, 1)], logprobs=struct.pack("<f", -math.inf))))),
        "logprobs must be finite (as float32: no NaN, no inf)",
    ),
    "no runs for tokens": (
        forge_journal((1, sibling(2, tokens(2, [])))),
        "0 version runs for 2 tokens: the first run must start at token 0",
    ),
    "runs not maximal": (
        forge_journal((1, sibling(2, tokens(3, [(0, 1), (1, 1)])))),
        "version runs 0 and 1 repeat version 1",
    ),
    "run past the tokens": (
        forge_journal((1, sibling(2, tokens(3, [(0, 1), (3, 2)])))),
        "version run 1 starts at 3: runs ascend below 3",
    ),
    "reserved bytes": (
        HEADER_FRAME + forge_frame(3, 1, bytes(8), reserved=b"\0\1\0"),
        "reserved bytes 000100 are not zero",
    ),
    "a second header": (
        HEADER_FRAME + forge_frame(0, 1, forge_header_body()),
        "a second header in the middle of the journal",
    ),
    "unknown frame kind": (
        forge_journal((9, b"")),
        "unknown frame kind 9 in the middle of the journal",
    ),
    "head fails its check": (
        HEADER_FRAME + b"\1" * 24,
        "the frame head fails its check",
    ),
    "head fails, X bytes after": (
        HEADER_FRAME + b"X" * 24,  # not zero bytes: not a torn tail
        "the frame head fails its check",
    ),
    # Written to the head's last byte, then zeros: the head was written
    # whole, so its failure is corruption, not a power cut's zeros.
    "head fails, zeros after its last byte": (
        HEADER_FRAME + b"\1" * 20 + bytes(30),
        "the frame head fails its check",
    ),
    # Written to the frame's last byte, then zeros: a whole frame failing.
    "frame fails, zeros after its last byte": (
        HEADER_FRAME + _MARK_BAD + bytes(10),
        "the frame fails its check (damaged, or a frame of another journal)",
    ),
}

#: A header frame (at offset 0) and the reason it is refused.
BAD_HEADERS: dict[str, tuple[bytes, str]] = {
    "too short for a head": (b"\1" * 10, "the header frame is incomplete"),
    "cut short": (HEADER_FRAME[:-1], "the header frame is incomplete"),
    "empty": (b"", "no header frame: an empty or truncated journal"),
    "a mark first": (
        forge_frame(3, 0, bytes(8), key=0),
        "the first frame is of kind 3, not a header",
    ),
    "base at the top": (
        forge_frame(0, U64, forge_header_body()),
        "the base leaves no room for a record",
    ),
    "no tag length": (
        forge_frame(0, 0, b""),
        "the format tag's length needs 1 bytes, the body has 0 left",
    ),
    "tag cut": (
        forge_frame(0, 0, header_body(TAG_PART[:9])),
        "the format tag needs 21 bytes, the body has 8 left",
    ),
    "no version": (
        forge_frame(0, 0, header_body(TAG_PART)),
        "the schema version needs 2 bytes, the body has 0 left",
    ),
    "no fingerprint length": (
        forge_frame(0, 0, header_body(TAG_PART, VERSION_PART)),
        "the fingerprint's length needs 2 bytes, the body has 0 left",
    ),
    "fingerprint cut": (
        forge_frame(0, 0, header_body(TAG_PART, VERSION_PART, struct.pack("<H", 5), b"fp")),
        "the fingerprint needs 5 bytes, the body has 2 left",
    ),
    "fingerprint not utf-8": (
        forge_frame(0, 0, forge_header_body(fingerprint=b"\xff")),
        "the fingerprint is not UTF-8",
    ),
    "no lineage length": (
        forge_frame(0, 0, header_body(TAG_PART, VERSION_PART, FP_PART)),
        "the lineage's length needs 1 bytes, the body has 0 left",
    ),
    "lineage empty": (forge_frame(0, 0, forge_header_body(lineage=b"")), "the lineage id is empty"),
    "lineage cut": (
        forge_frame(0, 0, header_body(TAG_PART, VERSION_PART, FP_PART, b"\3r")),
        "the lineage id needs 3 bytes, the body has 1 left",
    ),
    "lineage not utf-8": (
        forge_frame(0, 0, forge_header_body(lineage=b"\xc3")),
        "the lineage id is not UTF-8",
    ),
    "trailing bytes": (
        forge_frame(0, 0, forge_header_body() + b"\0"),
        "1 unexpected bytes after the header",
    ),
    "journal id cut": (
        forge_frame(0, 0, header_body(TAG_PART, VERSION_PART, FP_PART, b"\3run", bytes(15))),
        "the journal id needs 16 bytes, the body has 15 left",
    ),
    "no count of marks": (
        forge_frame(0, 0, header_body(TAG_PART, VERSION_PART, FP_PART, b"\3run", bytes(16))),
        "the count of marks needs 4 bytes, the body has 0 left",
    ),
    "too many marks": (
        forge_frame(
            0, 0, header_body(TAG_PART, VERSION_PART, FP_PART, b"\3run", bytes(16), b"\1\1\0\0")
        ),
        "the header remembers 257 marks, more than 256",
    ),
    "marks cut": (
        forge_frame(0, 0, forge_header_body(marks=((1, 0),))[:-1]),
        "the marks needs 16 bytes, the body has 15 left",
    ),
    "a mark above the base": (
        forge_frame(0, 4, forge_header_body(marks=((5, 0),))),
        "a mark at position 5 is out of order or above the base 4: marks ascend strictly, "
        "each at or below the base",
    ),
    "marks not ascending": (
        forge_frame(0, 9, forge_header_body(marks=((5, 0), (5, 1)))),
        "a mark at position 5 is out of order or above the base 9: marks ascend strictly, "
        "each at or below the base",
    ),
    "a mark at position 0": (
        forge_frame(0, 9, forge_header_body(marks=((0, 0),))),
        "a mark at position 0 is out of order or above the base 9: marks ascend strictly, "
        "each at or below the base",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_RECORDS))
def test_a_bad_record_frame_is_refused_with_its_exact_reason(name: str) -> None:
    data, reason = BAD_RECORDS[name]
    with pytest.raises(JournalCorruptError) as info:
        decode(data)
    assert (info.value.offset, info.value.reason) == (H, reason)
    assert str(info.value) == f"journal corrupt at byte {H}: {reason}"
    assert type(info.value) is JournalCorruptError


@pytest.mark.parametrize("name", sorted(BAD_HEADERS))
def test_a_bad_header_frame_is_refused_with_its_exact_reason(name: str) -> None:
    data, reason = BAD_HEADERS[name]
    with pytest.raises(JournalCorruptError) as info:
        decode(data)
    assert (info.value.offset, info.value.reason) == (0, reason)


def test_a_frame_over_max_frame_is_refused_naming_both_sizes() -> None:
    data = forge_journal((1, sibling(0, bytes(1000 - 17))))
    with pytest.raises(JournalCorruptError) as info:
        decode(data, max_frame=100)
    assert info.value.offset == H
    assert info.value.reason == (
        "a frame body of 1000 bytes exceeds max_frame=100 "
        "(raise max_frame if the journal's writer used a larger bound)"
    )
    assert len(decode(data, max_frame=1000).records) == 1  # the bound is inclusive


def test_a_frame_failing_its_check_before_more_frames_is_refused() -> None:
    mark = forge_frame(3, 1, bytes(8))
    broken = mark[:-1] + bytes([mark[-1] ^ 1])
    with pytest.raises(JournalCorruptError) as info:
        decode(HEADER_FRAME + broken + forge_frame(3, 2, bytes(8)))
    assert (info.value.offset, info.value.reason) == (
        H,
        "the frame fails its check (damaged, or a frame of another journal)",
    )


def test_zero_bytes_after_the_last_frame_are_a_torn_tail_by_name() -> None:
    decoded = decode(HEADER_FRAME + bytes(30))
    assert decoded.torn == TornTail(H, 30, "zero bytes where a frame head belongs")
    assert decoded.end == H and decoded.records == ()


def test_a_frame_cut_short_by_zero_bytes_is_a_torn_tail_by_name() -> None:
    """The zeros begin before the end of what failed: inside a head that
    fails its check (its length never used), or inside a frame whose sound
    head says where it ends, at any byte up to the frame check's last."""
    cut = "a frame cut short by zero bytes"
    decoded = decode(HEADER_FRAME + b"\1" * 19 + bytes(31))
    assert decoded.torn == TornTail(H, 50, cut)
    assert (decoded.end, decoded.records) == (H, ())
    mark = forge_frame(3, 1, bytes(8))
    for written in range(20, len(mark)):  # the head whole, the rest zeros
        zeroed = mark[:written] + bytes(len(mark) - written)
        if zeroed == mark:
            continue
        for after in (1, 4, 40):  # the file extended past the frame
            decoded = decode(HEADER_FRAME + zeroed + bytes(after))
            assert decoded.torn == TornTail(H, len(mark) + after, cut), written
    # The frame's check cut at its last byte, zeros after.
    assert mark[-1] != 0
    decoded = decode(HEADER_FRAME + mark[:-1] + bytes(5))
    assert decoded.torn == TornTail(H, len(mark) + 4, cut)


def test_a_frame_that_fails_before_zeros_then_data_is_refused() -> None:
    """Zeros in the middle are not a power cut's: a frame cut short by
    zeros with a non-zero byte after them is an error at its offset."""
    mark = forge_frame(3, 1, bytes(8))
    for damaged, reason in (
        (b"\1" * 19 + bytes(31), "the frame head fails its check"),
        (
            mark[:-1] + bytes(5),
            "the frame fails its check (damaged, or a frame of another journal)",
        ),
        (
            mark[:25] + bytes(7),
            "the frame fails its check (damaged, or a frame of another journal)",
        ),
    ):
        with pytest.raises(JournalCorruptError) as info:
            decode(HEADER_FRAME + damaged + b"\1")
        assert (info.value.offset, info.value.reason) == (H, reason)
        with pytest.raises(JournalCorruptError) as info:
            decode(HEADER_FRAME + damaged + forge_frame(3, 2, bytes(8)))
        assert (info.value.offset, info.value.reason) == (H, reason)


def test_a_sequence_error_says_gap_or_repeat_and_carries_both_numbers() -> None:
    with pytest.raises(JournalSequenceError) as info:
        decode(HEADER_FRAME + forge_frame(3, 2, bytes(8)))
    error = info.value
    assert (error.offset, error.expected, error.found) == (H, 1, 2)
    assert error.reason == "sequence number 2 where 1 was due (a gap in the journal)"
    with pytest.raises(JournalSequenceError) as info:
        decode(HEADER_FRAME + forge_frame(3, 0, bytes(8)))
    assert info.value.reason == (
        "sequence number 0 where 1 was due (a repeat or decrease in the journal)"
    )


def test_another_format_or_version_is_refused_by_name() -> None:
    with pytest.raises(JournalVersionError) as info:
        decode(forge_frame(0, 0, forge_header_body(tag=b"something.else")))
    assert str(info.value) == (
        "not a frontier_core journal: format tag b'something.else', "
        "expected 'frontier_core.journal'"
    )
    with pytest.raises(JournalVersionError) as info:
        decode(forge_frame(0, 0, forge_header_body(version=4)))
    assert str(info.value) == (
        "journal schema version 4 is not supported (this library reads [2, 3])"
    )
    with pytest.raises(JournalVersionError) as info:
        decode(forge_frame(0, 0, forge_header_body(version=1)))
    assert str(info.value) == (
        "journal schema version 1 is not supported (this library reads [2, 3]): version 1 was "
        "written before frames were bound to their journal; finish that run with the release "
        "that wrote it, or remove the journal to start afresh"
    )


def test_a_journal_of_another_run_names_the_field_and_both_values() -> None:
    for field, kwargs in (
        ("fingerprint", {"fingerprint": "other"}),
        ("lineage", {"lineage": "l2"}),
    ):
        with pytest.raises(JournalMismatchError) as info:
            decode(HEADER_FRAME, **kwargs)
        found = "fp" if field == "fingerprint" else "run"
        error = info.value
        assert (error.field, error.expected, error.found) == (field, kwargs[field], found)
        assert str(error) == (
            f"journal was written for {field} {found!r}, but this run's {field} is "
            f"{kwargs[field]!r}: it belongs to another run"
        )


# -- check_mark -----------------------------------------------------------------------


def test_check_mark_accepts_the_mark_at_the_journal_s_last_position() -> None:
    decoded = decode(encode(JournalHeader("fp", "run", base=10), [Mark(1), Mark(2)]))
    decoded.check_mark(12, 2)  # the last record
    decoded.check_mark(11, 1)


def test_check_mark_refusals_carry_the_positions_and_say_why() -> None:
    p = BytesPayload(b"x" * 100)
    decoded = decode(encode(JournalHeader("fp", "run", base=10), [Progress(0, 0, 0, p), Mark(4)]))
    with pytest.raises(JournalBehindError) as info:
        decoded.check_mark(13, 4)
    assert (info.value.position, info.value.last) == (13, 12)
    assert str(info.value) == (
        "the checkpoint 4 saved journal position 13, but the journal ends at 12: "
        "records it counted as durable are missing"
    )
    with pytest.raises(JournalBehindError) as info:
        decoded.check_mark(11, 4)
    assert (info.value.position, info.value.last) == (11, 12)
    assert str(info.value) == (
        f"the checkpoint 4 saved journal position 11, but the journal holds "
        f"{Progress(0, 0, 0, p)!r:.80} there: a journal of another branch"
    )
    for position, checkpoint, name, bad in [
        (-1, 0, "position", -1),
        (11, U64 + 1, "checkpoint", U64 + 1),
    ]:
        with pytest.raises(
            ValueError, match=exactly(f"{name} must be an int in [0, {U64}], got {bad}")
        ):
            decoded.check_mark(position, checkpoint)


# -- the encoder's bounds ----------------------------------------------------------------


def layout_size(record: Record) -> int:
    """A record's body size, from the layout."""
    if isinstance(record, Mark):
        return 8
    payload = record.payload
    fixed = 21 if isinstance(record, Extend) else 17
    if isinstance(payload, TokenPayload):
        return fixed + 17 + 8 * len(payload) + 8 * len(payload.version_runs)
    if isinstance(payload, BytesPayload):
        return fixed + len(payload.data)
    return fixed + len(payload.text.encode())


def too_large(size: int, bound: int) -> str:
    return exactly(
        f"record of {size} bytes exceeds max_frame={bound}: a reader with the same bound "
        "would refuse it, so it is not written"
    )


EVERY_PATH: list[Record] = [
    Mark(7),
    Sealed(1, 2, 3, BytesPayload(b"abc")),
    Progress(1, 2, 3, JsonPayload.of({"é": 1})),
    Sealed(1, 2, 3, TokenPayload.of([5, 6, 7], [-0.5] * 3, [2, 2, 3], reward=1.0)),
    Progress(1, 2, 3, TokenPayload.of([5], [-0.5], 2)),
    Extend(1, 2, 3, 4, TokenPayload.of([5, 6], [-0.5] * 2, [1, 2])),
]


@pytest.mark.parametrize("record", EVERY_PATH, ids=lambda r: type(r).__name__)
def test_a_record_may_fill_max_frame_exactly_and_not_one_byte_more(record: Record) -> None:
    size = layout_size(record)
    frame = encode_record(record, 1, header=HEADER, max_frame=size)
    assert len(frame) == FRAME_OVERHEAD + size
    # (A header frame's body is 52 bytes: the bound covers it too.)
    assert decode(HEADER_FRAME + frame, max_frame=max(size, 52)).records == (record,)
    with pytest.raises(ValueError, match=too_large(size, size - 1)):
        encode_record(record, 1, header=HEADER, max_frame=size - 1)
    parts = [b"before"]
    with pytest.raises(ValueError, match=too_large(size, size - 1)):
        append_frames(parts, [record], 1, size - 1, HEADER.key)
    assert parts == [b"before"]


def test_the_header_is_bounded_by_max_frame_too() -> None:
    header = JournalHeader("fp", "run")
    size = 1 + len(TAG) + 2 + 2 + 2 + 1 + 3 + 16 + 4  # ... the journal id, no marks
    assert len(encode_header(header, max_frame=size)) == FRAME_OVERHEAD + size
    assert len(encode(header, [], max_frame=size)) == FRAME_OVERHEAD + size
    for build in (encode_header, lambda h, max_frame: encode(h, [], max_frame=max_frame)):
        with pytest.raises(ValueError, match=too_large(size, size - 1)):
            build(header, max_frame=size - 1)


def test_max_frame_is_an_int_from_1_to_2_to_the_32_minus_1() -> None:
    for bound in (1, U32):
        assert encode_records([], first_seq=1, header=HEADER, max_frame=bound) == b""
    assert decode(HEADER_FRAME, max_frame=U32).records == ()
    with pytest.raises(JournalCorruptError, match="exceeds max_frame=1 "):
        decode(HEADER_FRAME, max_frame=1)  # a valid bound, which the header exceeds
    for bad in (0, U32 + 1, 1.5, True, -1):
        with pytest.raises(
            ValueError, match=exactly(f"max_frame must be an int in [1, {U32}], got {bad!r}")
        ):
            encode_records([], first_seq=1, header=HEADER, max_frame=bad)  # type: ignore[arg-type]
        with pytest.raises(
            ValueError, match=exactly(f"max_frame must be an int in [1, {U32}], got {bad!r}")
        ):
            decode(HEADER_FRAME, max_frame=bad)  # type: ignore[arg-type]


def test_a_sequence_number_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=exactly(f"seq must be an int in [0, {U64}], got -1")):
        encode_record(Mark(0), -1, header=HEADER)
    with pytest.raises(
        ValueError, match=exactly(f"first_seq must be an int in [0, {U64}], got -1")
    ):
        encode_records([Mark(0)], first_seq=-1, header=HEADER)
    for first, count in ((U64, 2), (U64 - 1, 3), (U64 - 5, 9)):
        last = first + count - 1
        with pytest.raises(
            ValueError, match=exactly(f"sequence number {last} does not fit 64 bits")
        ):
            append_frames([], [Mark(0)] * count, first, 100, HEADER.key)


def test_append_frame_refuses_a_sequence_number_past_64_bits_by_number() -> None:
    """The writer's own path (``JournalWriter.append``): a journal whose
    last record is at ``2**64 - 1`` has no room for one more, and the
    refusal names the number; the last number that fits is written."""
    parts: list[bytes] = []
    with pytest.raises(
        ValueError, match=exactly(f"sequence number {U64 + 1} does not fit 64 bits")
    ):
        append_frame(parts, Mark(0), U64 + 1, 100, HEADER.key)
    assert parts == []
    size = append_frame(parts, Mark(0), U64, 100, HEADER.key)
    assert b"".join(parts) == forge_frame(3, U64, bytes(8)) and size == FRAME_OVERHEAD + 8
