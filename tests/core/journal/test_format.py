"""The frame format: round trips, torn tails, corruption, bounded parsing.

The properties: every journal decodes to what was encoded; every truncation
decodes to a prefix of its records, reporting a torn tail unless it cut at
a frame boundary; every single flipped byte is either a torn tail (in the
last frame) or an error naming the frame's offset, never other data; and
forged frames (valid checks around bad bodies) are refused with their
offset, at a cost bounded by the input, not by the numbers inside it.
"""

from __future__ import annotations

import math
import struct
import time
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier_core import CheckpointCorruptError, CheckpointMismatchError, CheckpointVersionError
from frontier_core.journal import (
    FRAME_OVERHEAD,
    BytesPayload,
    JournalBehindError,
    JournalCorruptError,
    JournalError,
    JournalHeader,
    JournalMismatchError,
    JournalSequenceError,
    JournalVersionError,
    JsonPayload,
    Mark,
    Progress,
    Record,
    Reserve,
    Sealed,
    TokenPayload,
    decode,
    encode,
    encode_header,
    encode_record,
    encode_records,
)

from ._strategies import (
    FORGED_ID,
    U32,
    U64,
    budget,
    forge_frame,
    forge_header_body,
    forge_journal,
    frame_offsets,
    headers,
    records,
    wide_records,
)

pytestmark = pytest.mark.mutation

HEADER = JournalHeader("fp", "run", journal_id=FORGED_ID)  # the forger's journal
TOKENS = TokenPayload.of([5, 6, 7], [-0.5, -1.25, -3.0], [2, 2, 3], reward=1.0)
SAMPLE = [
    Sealed(0, 0, 0, TOKENS),
    Progress(1, 1, 2, JsonPayload.of({"turn": 3, "state": ["a", None]})),
    Mark(4),
    Sealed(2, 0, 1, BytesPayload(b"\x00opaque")),
    Progress(3, 0, 0, TokenPayload.of([], [], 0)),
]


def sibling_body(ordinal: int, sibling: int, attempt: int, kind: int, payload: bytes) -> bytes:
    return struct.pack("<QIIB", ordinal, sibling, attempt, kind) + payload


def token_body(
    n: int,
    runs: list[tuple[int, int]],
    *,
    has_reward: int = 0,
    reward: bytes = bytes(8),
    tokens: bytes | None = None,
    logprobs: bytes | None = None,
) -> bytes:
    return (
        struct.pack("<IIB", n, len(runs), has_reward)
        + reward
        + (tokens if tokens is not None else bytes(4 * n))
        + (logprobs if logprobs is not None else array("f", [-1.0] * n).tobytes())
        + b"".join(struct.pack("<II", *r) for r in runs)
    )


# -- round trips ------------------------------------------------------------------


def test_a_sample_journal_round_trips() -> None:
    data = encode(HEADER, SAMPLE)
    decoded = decode(data)
    assert decoded.header == HEADER
    assert decoded.records == tuple(SAMPLE)
    assert (decoded.end, decoded.torn) == (len(data), None)
    assert (decoded.last_seq, decoded.next_seq) == (5, 6)


@budget(60)
@given(headers, st.lists(wide_records, max_size=12))
def test_round_trip(header: JournalHeader, recs: list[Sealed | Progress | Mark]) -> None:
    data = encode(header, recs)
    decoded = decode(data, fingerprint=header.fingerprint, lineage=header.lineage)
    assert decoded.header == header
    assert decoded.records == tuple(recs)
    assert decoded.end == len(data) and decoded.torn is None
    assert decoded.last_seq == header.base + len(recs)
    # The pieces concatenate to the whole, frame by frame.
    assert data == encode_header(header) + encode_records(
        recs, first_seq=header.base + 1, header=header
    )
    assert data == encode_header(header) + b"".join(
        encode_record(r, header.base + 1 + i, header=header) for i, r in enumerate(recs)
    )


def test_the_layout_is_the_documented_one() -> None:
    """The forger (written from the documented layout) and the encoder agree
    byte for byte."""
    body = sibling_body(
        0,
        0,
        0,
        2,
        token_body(
            3,
            [(0, 2), (2, 3)],
            has_reward=1,
            reward=struct.pack("<d", 1.0),
            tokens=array("I", [5, 6, 7]).tobytes(),
            logprobs=array("f", [-0.5, -1.25, -3.0]).tobytes(),
        ),
    )
    assert encode(HEADER, SAMPLE[:1]) == forge_journal((1, body))
    assert encode(HEADER, [Mark(9)]) == forge_journal((3, struct.pack("<Q", 9)))
    assert len(encode_record(Mark(9), 1, header=HEADER)) == FRAME_OVERHEAD + 8


def test_token_payload_accessors_and_rounding() -> None:
    p = TokenPayload.of([1, 2, 3, 4], [-0.1, -0.2, -0.3, -0.4], [7, 7, 8, 8], reward=2)
    assert p.tokens().tolist() == [1, 2, 3, 4]
    assert p.versions().tolist() == [7, 7, 8, 8]
    assert p.version_runs == ((0, 7), (2, 8))
    assert p.reward == 2.0 and len(p) == 4
    # Log-probs are float32: rounded once, then stable.
    assert p.logprobs().tolist() == array("f", [-0.1, -0.2, -0.3, -0.4]).tolist()
    assert TokenPayload.of(p.tokens(), p.logprobs(), p.versions(), 2.0) == p
    assert TokenPayload.of([1, 2], [-1.0, -2.0], 5).version_runs == ((0, 5),)
    assert TokenPayload.of([], [], 5).version_runs == ()
    assert JsonPayload.of({"b": 1, "a": [1.5]}).text == '{"a":[1.5],"b":1}'
    assert JsonPayload.of({"a": 1}).value() == {"a": 1}


# -- torn tails -------------------------------------------------------------------------


@budget(30)
@given(headers, st.lists(records, min_size=1, max_size=6))
def test_any_truncation_decodes_to_a_prefix(
    header: JournalHeader, recs: list[Sealed | Progress | Mark]
) -> None:
    data = encode(header, recs)
    offsets = frame_offsets(data)
    header_end = offsets[1]
    for cut in range(header_end, len(data) + 1):
        decoded = decode(data[:cut])
        whole = sum(1 for o in offsets[2:] if o <= cut)
        assert decoded.records == tuple(recs[:whole])
        assert decoded.end == offsets[1 + whole]
        if cut in offsets:
            assert decoded.torn is None
        else:
            assert decoded.torn is not None
            assert decoded.torn.offset == decoded.end
            assert decoded.torn.offset + decoded.torn.length == cut
    for cut in range(header_end):
        with pytest.raises(JournalCorruptError) as info:
            decode(data[:cut])
        assert info.value.offset == 0


def test_the_torn_tail_shapes() -> None:
    data = encode(HEADER, SAMPLE)
    offsets = frame_offsets(data)
    last = offsets[-2]
    # A head cut short, a frame cut short.
    assert decode(data[: last + 7]).torn.reason == "an incomplete frame head"  # type: ignore[union-attr]
    assert decode(data[:-1]).torn.reason == "a frame cut short"  # type: ignore[union-attr]
    # The last frame complete but failing its check, nothing after it.
    broken = bytearray(data)
    broken[-6] ^= 0x40
    torn = decode(bytes(broken)).torn
    assert torn is not None and (torn.offset, torn.length) == (last, len(data) - last)
    assert torn.reason == "the last frame fails its check"
    # Zero bytes after the last sound frame (a power cut on some file systems).
    for zeros in (1, 19, 20, 24, 4096):
        decoded = decode(data + bytes(zeros))
        assert decoded.records == tuple(SAMPLE) and decoded.torn is not None
        assert (decoded.torn.offset, decoded.torn.length) == (len(data), zeros)


@budget(60)
@given(headers, st.lists(records, min_size=1, max_size=4), st.data())
def test_a_group_cut_short_by_zero_bytes_is_a_torn_tail(
    header: JournalHeader, recs: list[Record], data: st.DataObject
) -> None:
    """A power cut during a group commit: the group's first ``written``
    bytes persisted, zeros after them to the end of the extended file. It
    decodes to the longest run of frames the file still holds as written,
    and the rest is a torn tail; a non-zero byte after the zeros makes the
    frame cut short mid-file corruption, an error at its offset."""
    whole = encode(header, recs)
    offsets = frame_offsets(whole)
    synced = data.draw(st.integers(0, len(recs) - 1), "synced records")
    at = offsets[1 + synced]
    written = data.draw(st.integers(0, len(whole) - at - 1), "bytes of the group written")
    file = whole[: at + written] + bytes(len(whole) - at - written)
    # The frames identical to those written are sound (a frame's last bytes
    # may be zero, so one may end past the bytes written); the next is cut.
    kept = max(j for j in range(len(recs) + 1) if file[: offsets[1 + j]] == whole[: offsets[1 + j]])
    decoded = decode(file)
    assert decoded.records == tuple(recs[:kept]) and decoded.end == offsets[1 + kept]
    if kept == len(recs):
        assert decoded.torn is None
    else:
        cut = offsets[1 + kept]
        assert decoded.torn is not None
        assert (decoded.torn.offset, decoded.torn.length) == (cut, len(file) - cut)
        with pytest.raises(JournalCorruptError) as info:
            decode(file + b"\x01")
        assert info.value.offset == cut


def test_a_frame_cut_short_by_zero_bytes_is_a_torn_tail_of_its_shape() -> None:
    """The reproducer the exhaustive checker found: a progress record
    synced, then a seal and a reservation in one group, of which a power
    cut left any first bytes and zeros to the end."""
    recs = [
        Progress(0, 0, 0, TokenPayload.of([100], [-0.125], [0])),
        Sealed(0, 0, 0, TokenPayload.of([200], [-0.25], [0], reward=1.0)),
        Reserve(3),
    ]
    whole = encode(HEADER, recs)
    _, _, seal, reserve, end = frame_offsets(whole)
    head = 20
    for written in range(1, end - seal):
        decoded = decode(whole[: seal + written] + bytes(end - seal - written))
        cut = reserve if written >= reserve - seal else seal
        assert decoded.records == tuple(recs[: 1 + (cut == reserve)])
        assert decoded.torn is not None and (decoded.torn.offset, decoded.torn.length) == (
            cut,
            end - cut,
        )
        into = seal + written - cut  # bytes of the frame cut short written
        if into == 0:
            assert decoded.torn.reason == "zero bytes where a frame head belongs"
        elif cut == reserve and into >= head:  # the last frame, its head whole
            assert decoded.torn.reason == "the last frame fails its check"
        else:
            assert decoded.torn.reason == "a frame cut short by zero bytes"


def test_a_bad_head_with_nonzero_bytes_after_it_is_corruption() -> None:
    data = encode(HEADER, SAMPLE)
    with pytest.raises(JournalCorruptError) as info:
        decode(data + bytes(20) + b"\x01")
    assert info.value.offset == len(data)
    with pytest.raises(JournalCorruptError):
        decode(data + b"garbage that is not a frame")


# -- flipped bytes ----------------------------------------------------------------------


def check_flip(data: bytes, recs: tuple[object, ...], position: int, mask: int) -> None:
    offsets = frame_offsets(data)
    frame = max(i for i, o in enumerate(offsets[:-1]) if o <= position)
    flipped = bytearray(data)
    flipped[position] ^= mask
    try:
        decoded = decode(bytes(flipped))
    except JournalCorruptError as exc:
        assert exc.offset == offsets[frame], (position, exc)
        return
    # Accepted: only as the torn tail, the flip in the last frame.
    assert frame == len(offsets) - 2 and frame > 0, (position, decoded)
    assert decoded.records == recs[:-1]
    assert decoded.torn is not None and decoded.torn.offset == offsets[frame]


def test_every_single_byte_flip_of_a_journal_is_caught() -> None:
    data = encode(HEADER, SAMPLE)
    for position in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            check_flip(data, tuple(SAMPLE), position, mask)


@budget(100)
@given(
    headers,
    st.lists(records, min_size=0, max_size=6),
    st.integers(0, 10**9),
    st.integers(1, 255),
)
def test_any_single_byte_flip_is_a_torn_tail_or_an_error(
    header: JournalHeader, recs: list[Sealed | Progress | Mark], where: int, mask: int
) -> None:
    data = encode(header, recs)
    check_flip(data, tuple(recs), where % len(data), mask)


# -- sequence, foreign journals, versions ------------------------------------------------


def test_a_sequence_gap_or_decrease_is_an_error_naming_its_offset() -> None:
    data = encode(HEADER, SAMPLE)
    o = frame_offsets(data)
    gap = data[: o[2]] + data[o[3] :]  # frame 2 (seq 2) missing
    with pytest.raises(JournalSequenceError) as info:
        decode(gap)
    assert (info.value.offset, info.value.expected, info.value.found) == (o[2], 2, 3)
    assert "a gap" in str(info.value)
    repeat = data[: o[3]] + data[o[2] : o[3]] + data[o[3] :]  # frame 2 twice
    with pytest.raises(JournalSequenceError) as info:
        decode(repeat)
    assert (info.value.offset, info.value.expected, info.value.found) == (o[3], 3, 2)
    assert "repeat or decrease" in str(info.value)
    # Two journals glued together: a second header in the middle.
    with pytest.raises(JournalCorruptError, match="second header"):
        decode(data + encode(HEADER, []))


def test_a_corrupt_frame_followed_by_valid_data_names_its_offset() -> None:
    data = bytearray(encode(HEADER, SAMPLE))
    o = frame_offsets(bytes(data))
    data[o[2] + 30] ^= 0x10  # inside the body of the second record
    with pytest.raises(JournalCorruptError) as info:
        decode(bytes(data))
    assert info.value.offset == o[2]
    assert f"byte {o[2]}" in str(info.value)


def test_a_journal_of_another_run_is_refused() -> None:
    data = encode(HEADER, SAMPLE)
    with pytest.raises(JournalMismatchError) as info:
        decode(data, fingerprint="other")
    assert (info.value.field, info.value.expected, info.value.found) == (
        "fingerprint",
        "other",
        "fp",
    )
    with pytest.raises(JournalMismatchError) as info:
        decode(data, lineage="run-2")
    assert info.value.field == "lineage"
    assert decode(data, fingerprint="fp", lineage="run").records == tuple(SAMPLE)


def test_another_format_or_version_is_refused() -> None:
    with pytest.raises(JournalVersionError, match="not a frontier_core journal"):
        decode(forge_frame(0, 0, forge_header_body(tag=b"something.else")))
    with pytest.raises(JournalVersionError, match="version 4"):
        decode(forge_frame(0, 0, forge_header_body(version=4)))
    # Version 2 (before turn records) is still read.
    assert decode(forge_frame(0, 0, forge_header_body(version=2))).records == ()
    with pytest.raises(JournalCorruptError, match="no header"):
        decode(b"")
    with pytest.raises(JournalCorruptError, match="not a header"):
        decode(forge_frame(3, 0, bytes(8), key=0))
    # A record's frame (keyed to its journal) where the header belongs.
    with pytest.raises(JournalCorruptError, match="fails its check"):
        decode(encode_record(Mark(1), 0, header=HEADER))


def test_the_errors_are_checkpoint_errors_of_the_same_meaning() -> None:
    assert issubclass(JournalCorruptError, CheckpointCorruptError)
    assert issubclass(JournalSequenceError, JournalCorruptError)
    assert issubclass(JournalVersionError, CheckpointVersionError)
    assert issubclass(JournalMismatchError, CheckpointMismatchError)
    assert issubclass(JournalBehindError, CheckpointMismatchError)
    for cls in (JournalCorruptError, JournalMismatchError, JournalVersionError):
        assert issubclass(cls, JournalError) and issubclass(cls, ValueError)


def test_check_mark_ties_a_checkpoint_to_its_journal() -> None:
    header = JournalHeader("fp", "run", base=10, marks=((3, 1), (10, 2)))
    decoded = decode(encode(header, SAMPLE))
    decoded.check_mark(13, 4)  # SAMPLE[2] is Mark(4), at seq 13
    decoded.check_mark(10, 2)  # at the base: folded in by a compaction, remembered
    decoded.check_mark(3, 1)
    # At or below the base, only a remembered mark passes: another branch's
    # compacted journal is refused (it used to pass any position there).
    for position, checkpoint in ((10, 99), (3, 2), (4, 1), (0, 0)):
        with pytest.raises(JournalBehindError, match=r"remembers no such mark: .* another branch"):
            decoded.check_mark(position, checkpoint)
    assert decoded.marks() == ((3, 1), (10, 2), (13, 4))
    with pytest.raises(JournalBehindError, match="ends at 15"):
        decoded.check_mark(16, 4)
    with pytest.raises(JournalBehindError, match="another branch"):
        decoded.check_mark(12, 4)
    with pytest.raises(JournalBehindError):
        decoded.check_mark(13, 5)


# -- forged frames: structural validation --------------------------------------------


def _nan32() -> bytes:
    return struct.pack("<f", math.nan)


FORGED = {
    "reserved": (
        forge_frame(0, 0, forge_header_body())
        + forge_frame(3, 1, struct.pack("<Q", 1), reserved=b"\0\1\0")
    ),
    "unknown kind": forge_journal((9, b"")),
    "mark too long": forge_journal((3, struct.pack("<Q", 1) + b"\0")),
    "mark too short": forge_journal((3, b"\0" * 7)),
    "sibling record too short": forge_journal((1, b"\0" * 16)),
    "unknown payload kind": forge_journal((1, sibling_body(0, 0, 0, 7, b""))),
    "json not utf-8": forge_journal((1, sibling_body(0, 0, 0, 1, b"\xff"))),
    "json does not parse": forge_journal((1, sibling_body(0, 0, 0, 1, b"{"))),
    "json NaN": forge_journal((2, sibling_body(0, 0, 0, 1, b"NaN"))),
    "json too deep": forge_journal((2, sibling_body(0, 0, 0, 1, b"[" * 100_000))),
    "json huge int": forge_journal((2, sibling_body(0, 0, 0, 1, b"9" * 5000))),
    "json trailing": forge_journal((2, sibling_body(0, 0, 0, 1, b"1 2"))),
    "tokens short": forge_journal((1, sibling_body(0, 0, 0, 2, b"\0" * 16))),
    "tokens huge n": forge_journal(
        (
            1,
            sibling_body(
                0, 0, 0, 2, token_body(0, [])[:0] + struct.pack("<IIB", U32, 0, 0) + bytes(8)
            ),
        )
    ),
    "tokens huge runs": forge_journal(
        (1, sibling_body(0, 0, 0, 2, struct.pack("<IIB", 1, U32, 0) + bytes(16)))
    ),
    "tokens size off by one": forge_journal(
        (1, sibling_body(0, 0, 0, 2, token_body(2, [(0, 1)]) + b"\0"))
    ),
    "has_reward 2": forge_journal(
        (1, sibling_body(0, 0, 0, 2, token_body(1, [(0, 1)], has_reward=2)))
    ),
    "absent reward not zero": forge_journal(
        (1, sibling_body(0, 0, 0, 2, token_body(1, [(0, 1)], reward=struct.pack("<d", -0.0))))
    ),
    "reward inf": forge_journal(
        (
            1,
            sibling_body(
                0,
                0,
                0,
                2,
                token_body(1, [(0, 1)], has_reward=1, reward=struct.pack("<d", math.inf)),
            ),
        )
    ),
    "reward nan": forge_journal(
        (
            1,
            sibling_body(
                0,
                0,
                0,
                2,
                token_body(1, [(0, 1)], has_reward=1, reward=struct.pack("<d", math.nan)),
            ),
        )
    ),
    "logprob nan": forge_journal(
        (1, sibling_body(0, 0, 0, 2, token_body(1, [(0, 1)], logprobs=_nan32())))
    ),
    "logprob inf": forge_journal(
        (
            1,
            sibling_body(
                0, 0, 0, 2, token_body(1, [(0, 1)], logprobs=struct.pack("<f", -math.inf))
            ),
        )
    ),
    "no runs for tokens": forge_journal((1, sibling_body(0, 0, 0, 2, token_body(2, [])))),
    "runs for no tokens": forge_journal((1, sibling_body(0, 0, 0, 2, token_body(0, [(0, 1)])))),
    "first run not at 0": forge_journal((1, sibling_body(0, 0, 0, 2, token_body(2, [(1, 1)])))),
    "runs not ascending": forge_journal(
        (1, sibling_body(0, 0, 0, 2, token_body(3, [(0, 1), (0, 2)])))
    ),
    "run past the tokens": forge_journal(
        (1, sibling_body(0, 0, 0, 2, token_body(3, [(0, 1), (3, 2)])))
    ),
    "runs not maximal": forge_journal(
        (1, sibling_body(0, 0, 0, 2, token_body(3, [(0, 1), (1, 1)])))
    ),
}

BAD_HEADERS = {
    "empty lineage": forge_frame(0, 0, forge_header_body(lineage=b"")),
    "lineage not utf-8": forge_frame(0, 0, forge_header_body(lineage=b"\xc3")),
    "fingerprint not utf-8": forge_frame(0, 0, forge_header_body(fingerprint=b"\xed\xa0\x80")),
    "header trailing bytes": forge_frame(0, 0, forge_header_body() + b"\0"),
    "header short": forge_frame(0, 0, forge_header_body()[:-2]),
    "base at the top": forge_frame(0, U64, forge_header_body()),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_record_is_refused_naming_its_frame(name: str) -> None:
    data = FORGED[name]
    offset = frame_offsets(data)[1]
    # Followed by nothing, and followed by a sound frame: the same refusal
    # (a sound check means the frame was written so, not torn).
    for tail in (b"", encode_record(Mark(0), 2, header=HEADER)):
        with pytest.raises(JournalCorruptError) as info:
            decode(data + tail)
        assert info.value.offset == offset, info.value


@pytest.mark.parametrize("name", sorted(BAD_HEADERS))
def test_a_forged_header_is_refused(name: str) -> None:
    with pytest.raises(JournalCorruptError) as info:
        decode(BAD_HEADERS[name])
    assert info.value.offset == 0


def test_max_frame_is_checked_before_the_body_is_read() -> None:
    big = Sealed(0, 0, 0, BytesPayload(bytes(1000)))
    data = encode(HEADER, [big])
    with pytest.raises(JournalCorruptError, match="exceeds max_frame=100"):
        decode(data, max_frame=100)
    # Claimed, not present: a head saying 4 GiB followed by nothing is a
    # torn tail (the length is proven by the head check), never allocated.
    head = struct.pack("<IQB3x", U32, 1, 1)
    head += struct.pack("<I", __import__("zlib").crc32(head))
    with pytest.raises(JournalCorruptError, match="exceeds max_frame"):
        decode(encode(HEADER, []) + head)
    torn = decode(encode(HEADER, []) + head, max_frame=U32).torn
    assert torn is not None and torn.reason == "a frame cut short"
    with pytest.raises(ValueError, match="exceeds max_frame=100"):
        encode_record(big, 1, header=HEADER, max_frame=100)
    with pytest.raises(ValueError, match="max_frame"):
        decode(data, max_frame=0)


def test_decoding_costs_the_input_not_the_numbers_inside_it() -> None:
    """Counts of 2**32 - 1 in a tiny body are refused at once; a megabyte of
    forged frames decodes (to its error) in well under a second."""
    start = time.process_time()
    for name in ("tokens huge n", "tokens huge runs"):
        with pytest.raises(JournalCorruptError, match="needs"):
            decode(FORGED[name])
    many = forge_journal(*[(3, struct.pack("<Q", i)) for i in range(30_000)])
    assert len(decode(many).records) == 30_000
    with pytest.raises(JournalCorruptError):
        decode(
            many + forge_frame(1, 30_001, sibling_body(0, 0, 0, 2, token_body(0, [], has_reward=2)))
        )
    assert time.process_time() - start < 5.0


# -- values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: Sealed(True, 0, 0, TOKENS), TypeError),
        (lambda: Sealed(-1, 0, 0, TOKENS), ValueError),
        (lambda: Sealed(0, U32 + 1, 0, TOKENS), ValueError),
        (lambda: Progress(0, 0, U32 + 1, TOKENS), ValueError),
        (lambda: Sealed(U64 + 1, 0, 0, TOKENS), ValueError),
        (lambda: Sealed(0, 0, 0, {"tokens": [1]}), TypeError),
        (lambda: Sealed(0, 0, 0.0, TOKENS), TypeError),
        (lambda: Mark(False), TypeError),
        (lambda: Mark(U64 + 1), ValueError),
        (lambda: BytesPayload(3), TypeError),
        (lambda: BytesPayload("text"), TypeError),
        (lambda: JsonPayload("{"), ValueError),
        (lambda: JsonPayload("NaN"), ValueError),
        (lambda: JsonPayload.of(math.nan), ValueError),
        (lambda: JsonPayload.of({1j: 1}), TypeError),
        (lambda: JournalHeader("fp", ""), ValueError),
        (lambda: JournalHeader("fp", "x" * 256), ValueError),
        (lambda: JournalHeader("fp", "\ud800"), ValueError),
        (lambda: JournalHeader(b"fp", "run"), TypeError),
        (lambda: JournalHeader("fp", "run", base=U64), ValueError),
        (lambda: TokenPayload.of([1], [-1.0, -2.0], 0), ValueError),
        (lambda: TokenPayload.of([1, 2], [-1.0, -2.0], [0]), ValueError),
        (lambda: TokenPayload.of([True], [-1.0], 0), TypeError),
        (lambda: TokenPayload.of([-1], [-1.0], 0), ValueError),
        (lambda: TokenPayload.of([U32 + 1], [-1.0], 0), ValueError),
        (lambda: TokenPayload.of([1], [1], 0), TypeError),
        (lambda: TokenPayload.of([1], [math.nan], 0), ValueError),
        (lambda: TokenPayload.of([1], [1e39], 0), ValueError),
        (lambda: TokenPayload.of([1], [-1.0], True), TypeError),
        (lambda: TokenPayload.of([1], [-1.0], [1.0]), TypeError),
        (lambda: TokenPayload.of([1], [-1.0], 0, reward=math.inf), ValueError),
        (lambda: TokenPayload.of([1], [-1.0], 0, reward=True), TypeError),
        (lambda: TokenPayload(b"\0" * 3, b"\0" * 3, ()), ValueError),
        (lambda: TokenPayload(b"\0" * 4, b"\0" * 4, ((0, 1), (0, 2))), ValueError),
        (lambda: TokenPayload(b"\0" * 4, b"\0" * 4, [(0, True)]), TypeError),
        (lambda: TokenPayload(b"\0" * 4, b"\0" * 4, "ab"), TypeError),
    ],
)
def test_invalid_values_cannot_be_built(build: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        build()  # type: ignore[operator]


def test_encoding_refuses_what_is_not_a_record() -> None:
    with pytest.raises(TypeError, match="not a journal record"):
        encode_record("mark", 1, header=HEADER)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode_record(Mark(1), True, header=HEADER)  # type: ignore[arg-type]
