"""The journal's bytes: frames, their checks, and the bounded decoder.

Frame layout
------------
A journal is a sequence of frames, all little-endian::

    offset  size  field
    0       4     B, the body's length in bytes (u32), at most ``max_frame``
    4       8     sequence number (u64): the header's is the base, then +1 per frame
    12      1     kind (u8): 0 header, 1 sealed, 2 progress, 3 mark, 4 extend,
                  5 reserve, 6 turn, 7 answer
    13      3     reserved, zero
    16      4     head check: CRC-32 of bytes 0..16
    20      B     body (per kind, below)
    20+B    4     frame check: CRC-32 of bytes 0..20+B (head, head check and
                  body), its register seeded with the journal's key (a
                  record's frame; the header's is unseeded, ``crc32(x, 0)``)

The head has a check of its own so that its length is proven before it is
used: a corrupt length can never make the decoder skip valid frames, or
take the middle of the journal for a torn tail. Bodies::

    header    u8 n, n bytes of format tag "frontier_core.journal", u16 schema
              version (3; 2 is read too), u16 n + n bytes of UTF-8 stream fingerprint,
              u8 n (>= 1) + n bytes of UTF-8 lineage id, 16 bytes journal id,
              u32 m (<= 256) + m x (u64 position, u64 checkpoint): the marks
              a compaction folded into the base, positions strictly
              ascending, each at or below the base
    sealed,   u64 ordinal, u32 sibling, u32 attempt, u8 payload kind, payload:
    progress    0 bytes: the rest of the body, as is
                1 JSON: the rest of the body, UTF-8 JSON text
                2 tokens: u32 n, u32 r, u8 has_reward (0/1), f64 reward (0.0
                  when absent), n x u32 token ids, n x f32 log-probs, r x
                  (u32 first token, u32 version): the per-token policy
                  versions as maximal runs (a sample spans few versions),
                  the first starting at token 0
    extend    u64 ordinal, u32 sibling, u32 attempt, u32 start, u8 payload
              kind (2: tokens), a token payload as above without a reward
              (has_reward 0): a running sample's tokens from ``start`` on
    mark      u64 checkpoint
    reserve   u64 below: attempts below it may be in use
    turn      u64 ordinal, u32 sibling, u32 attempt, u32 turn, u8 has_call
              (0/1); if 1: u8 n + n bytes of UTF-8 tool name (n >= 1), u8 n +
              n bytes of UTF-8 idempotency key (n >= 1), u32 n + n bytes of
              UTF-8 JSON args; then the policy's tokens, a token payload as
              above without a reward (has_reward 0)
    answer    u64 ordinal, u32 sibling, u32 attempt, u32 turn, u8 n + n bytes
              of UTF-8 idempotency key (n >= 1), u8 answer payload kind, u32 n
              + n bytes of answer payload (as a sibling record's payload), u8
              state payload kind (255: no state), the rest of the body: the
              state payload

Versions: 3 added the turn and answer kinds, and is what this library
writes. A version-2 journal (written before them) is read as it was; a
version-2 journal that this library continues keeps its header (the header
is not rewritten in place) and may then hold turn and answer frames until
its next compaction rewrites the header at version 3. A reader of version 2
refuses a version-3 journal by its header (``JournalVersionError``); it
refuses such a continued version-2 journal only at its first turn or answer
frame, as a malformed body (an unknown kind: ``JournalCorruptError`` naming
its offset), never by skipping it: a downgrade fails loudly either way, but
by header only after a compaction.

The key is ``JournalHeader.key``: the CRC-32 of the fingerprint's UTF-8, a
zero byte, the lineage id's UTF-8, a zero byte and the 16 bytes of the
journal id (random, drawn when the journal is created, kept by its
compactions). A frame copied from another journal (another run, or
the same run's journal created anew) fails its frame check as a damaged one
does: a frame belongs to its journal, and nothing of another is replayed.

Each body must be consumed exactly, and strictly: trailing bytes, a reserved
byte that is not zero, an unknown kind, a flag that is not 0/1, an absent
reward not stored as +0.0, a log-prob or reward that is not finite, a run
that is not maximal or not ascending are all refused.

Why CRC-32 (``zlib.crc32``)
---------------------------
The checks guard against accidents (torn writes, bit rot, a truncated copy),
not forgers: a forger recomputes any unkeyed digest, so a truncated blake2b
buys nothing there, and structural validation is the boundary (as for the
checkpoint). Against accidents CRC-32 is the better tool: it detects with
certainty every error burst of up to 32 bits, every flipped byte among them,
where a 32-bit truncated hash misses any error with probability 2**-32; and
zlib's CRC-32 runs about five times as fast as hashlib's blake2b (7.3 GB/s
against 1.45 GB/s on the 2-core CI machine), which matters when frames hold
megabytes of tokens.

Torn tails
----------
An append is one ``write`` of whole frames; a crash can leave a prefix of it
(a kill mid-write) or, after a power cut on some file systems, zero bytes
where the write's data was not persisted: the file extended, and either
none of the group written or its first pages written and zeros after them
to the end. So the decoder treats as a *torn tail*, discarded and reported,
exactly these ends: fewer bytes than a head; a sound head whose body and
check run past the end; a complete last frame whose frame check fails with
nothing after it; a head that fails its check where every byte from it to
the end is zero; and a frame cut short by zero bytes: a frame that fails
(its head's check, or a sound head's frame check) where the file's all-zero
suffix begins before the end of what failed (before the end of the head
when the head fails, its length being unproven; before the end of the frame
when the head is sound). Everything else that fails a check, or a sound
frame out of sequence or malformed, raises ``JournalCorruptError`` naming
its offset: a frame that fails with a non-zero byte past its end (mid-file
corruption, or zeros followed by data), a head written whole that fails.

Why dropping a frame cut short by zeros is safe: no sound frame is dropped
(every byte from the zeros on is zero, and a frame of zeros fails its head
check), and the frame that failed is taken for unfinished, not damaged:
its zeros begin before its end. That is a judgement, not a proof: a frame
written whole whose check happens to end in zero bytes (one in 256 for the
last byte), damaged, and followed by zeros only, looks the same, and is
dropped as a torn tail, as a damaged last frame is. Under the power-cut
model the frame is the unsynced group's first not written whole, which the
crash could have lost with the rest of the group; a synced frame is whole
on disk and passes. If a file system lost synced data as well, the
loss still shows: a checkpoint saves the journal position of its ``Mark``,
and ``Decoded.check_mark`` raises ``JournalBehindError`` at resume when the
journal decodes to fewer records than that, so records a checkpoint
counted as durable are never silently dropped.

Bounded parsing
---------------
Every length is checked against ``max_frame`` and against the bytes present
before anything is sliced or allocated (bodies are sliced from a
``memoryview``; a token payload's arrays are copied out only once its counts
add up to the body's length exactly), so decoding costs time and memory
proportional to the input, never to a number inside it.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from ._errors import (
    JournalBehindError,
    JournalCorruptError,
    JournalMismatchError,
    JournalSequenceError,
    JournalVersionError,
)
from ._records import (
    JOURNAL_ID_SIZE,
    MAX_MARKS,
    MAX_U32,
    MAX_U64,
    Answer,
    BytesPayload,
    Extend,
    JournalHeader,
    JsonPayload,
    Mark,
    Payload,
    Progress,
    Record,
    Reserve,
    Sealed,
    TokenPayload,
    ToolCall,
    Turn,
    check_token_fields,
    check_uint,
    trusted,
)

FORMAT: Final = "frontier_core.journal"
#: 2: frames bound to their journal (the keyed frame check), the header's
#: journal id and marks. 3: the turn and answer records (episodes). A
#: version-1 journal is refused (``decode``); version 2 is read.
VERSION: Final = 3
#: The schema versions ``decode`` reads.
_READS: Final = frozenset({2, VERSION})
#: The default bound on a frame's body: a 2M-token sample, with room to spare.
DEFAULT_MAX_FRAME: Final = 16 << 20

KIND_HEADER: Final = 0
KIND_SEALED: Final = 1
KIND_PROGRESS: Final = 2
KIND_MARK: Final = 3
KIND_EXTEND: Final = 4
KIND_RESERVE: Final = 5
KIND_TURN: Final = 6
KIND_ANSWER: Final = 7

_RECORD_KINDS: Final = frozenset(
    {KIND_SEALED, KIND_PROGRESS, KIND_MARK, KIND_EXTEND, KIND_RESERVE, KIND_TURN, KIND_ANSWER}
)

PAYLOAD_BYTES: Final = 0
PAYLOAD_JSON: Final = 1
PAYLOAD_TOKENS: Final = 2
#: An answer's state kind when it has none.
PAYLOAD_NONE: Final = 255

_HEAD: Final = struct.Struct("<IQB3s")  # length, seq, kind, reserved
_CHECK: Final = struct.Struct("<I")
HEAD_SIZE: Final = _HEAD.size + _CHECK.size  # 20
#: Bytes a frame adds to its body.
FRAME_OVERHEAD: Final = HEAD_SIZE + _CHECK.size  # 24
_ZERO3: Final = bytes(3)
_ZERO8: Final = bytes(8)

_SIBLING: Final = struct.Struct("<QIIB")  # ordinal, sibling, attempt, payload kind
_EXTEND: Final = struct.Struct("<QIIIB")  # ordinal, sibling, attempt, start, payload kind
_TOKENS: Final = struct.Struct("<IIBd")  # n, runs, has_reward, reward
_MARK: Final = struct.Struct("<Q")
_RUN: Final = struct.Struct("<II")  # first token, version
_U8: Final = struct.Struct("<B")
_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_HEADER_MARK: Final = struct.Struct("<QQ")  # position, checkpoint
_EPISODE: Final = struct.Struct("<QIII")  # ordinal, sibling, attempt, turn
_FORMAT_BYTES: Final = FORMAT.encode("ascii")


def _check_max_frame(max_frame: object) -> int:
    if type(max_frame) is not int or not 1 <= max_frame <= MAX_U32:
        raise ValueError(f"max_frame must be an int in [1, {MAX_U32}], got {max_frame!r}")
    return max_frame


# -- encoding -------------------------------------------------------------------
#
# Encoding is on the path of every append, and for a small record CPython's
# per-operation costs are all there is: a C call (a pack, a CRC) costs 25 to
# 90 ns, and so does a tuple built per record, a method bound per call or
# one Python call more. So ``append_frame`` is one function specialised for
# the hot kinds (sibling records with a token payload, or with bytes or
# JSON): the kinds are looked up by exact type in one dict, the head check
# and the fixed fields after it are packed in one call, and the frame check
# takes one CRC call per frame where it can. A small frame (a body of at
# most ``_JOIN_MAX`` bytes) is joined into one byte string and checked in
# one call: a copy of a few hundred bytes costs less than the three more
# CRC calls over its parts. A large one is handed out as its parts, a
# payload's arrays as they are, its check chained over them (starting from
# the head check, which is the CRC of the head): the one copy of a large
# payload is the ``b"".join`` that makes the group the writer hands to
# ``write``, and ``zlib.crc32`` releases the GIL over large buffers, so the
# writer's commit thread can run meanwhile. Nothing is validated again that
# the values' constructors proved (``_records``: every int fits its field,
# the arrays are whole and of equal length, the reward is finite); only
# what no value knows is checked: the body against ``max_frame``, the
# sequence numbers against 64 bits. The header and marks, rare, take the
# plain path (``_frame_parts``) that the specialised branches unroll; the
# tests check every kind against a forger written from the layout above.

#: The head check and the fixed fields after it, packed in one call: the
#: check is the CRC of the 16 bytes before it, known before the rest.
_CHECKED_SIBLING: Final = struct.Struct("<I" + _SIBLING.format[1:])
_CHECKED_TOKENS: Final = struct.Struct("<I" + _SIBLING.format[1:] + _TOKENS.format[1:])
_TOKENS_FIXED: Final = _SIBLING.size + _TOKENS.size
_CHECKED_EXTEND: Final = struct.Struct("<I" + _EXTEND.format[1:] + _TOKENS.format[1:])
_EXTEND_FIXED: Final = _EXTEND.size + _TOKENS.size
#: The largest body joined into one byte string before its check (see above):
#: below about 2 KiB the copy costs less than the CRC calls it saves.
_JOIN_MAX: Final = 2048

_RECORD_KIND: Final[dict[type, int]] = {
    Sealed: KIND_SEALED,
    Progress: KIND_PROGRESS,
    Mark: KIND_MARK,
    Extend: KIND_EXTEND,
    Reserve: KIND_RESERVE,
    Turn: KIND_TURN,
    Answer: KIND_ANSWER,
}
_PAYLOAD_KIND: Final[dict[type, int]] = {
    BytesPayload: PAYLOAD_BYTES,
    JsonPayload: PAYLOAD_JSON,
    TokenPayload: PAYLOAD_TOKENS,
}


def _kind_of(value: object, kinds: dict[type, int], what: str) -> int:
    """The kind of a value whose exact type is not in ``kinds`` (a subclass's
    instance), or ``TypeError``."""
    for cls, kind in kinds.items():
        if isinstance(value, cls):
            return kind
    raise TypeError(f"not a journal {what}: {type(value).__name__}")


def _too_large(size: int, max_frame: int) -> ValueError:
    return ValueError(
        f"record of {size} bytes exceeds max_frame={max_frame}: a reader with the "
        "same bound would refuse it, so it is not written"
    )


def _frame_parts(kind: int, seq: int, body: bytes, max_frame: int, key: int) -> tuple[bytes, ...]:
    """The frame of ``body`` in parts, its check seeded with ``key``: the
    layout in its plainest form, for the header (key 0) and marks."""
    if len(body) > max_frame:
        raise _too_large(len(body), max_frame)
    head = _HEAD.pack(len(body), seq, kind, _ZERO3)
    fixed = _CHECK.pack(zlib.crc32(head))
    return (
        head,
        fixed,
        body,
        _CHECK.pack(zlib.crc32(body, zlib.crc32(fixed, zlib.crc32(head, key)))),
    )


def _seq_overflow(seq: int) -> ValueError:
    return ValueError(f"sequence number {seq} does not fit 64 bits")


def append_frame(parts: list[bytes], record: Record, seq: int, max_frame: int, key: int) -> int:
    """Append to ``parts`` the frame of ``record`` at sequence number ``seq``
    in the journal whose key is ``key`` (``JournalHeader.key``), as byte
    strings whose concatenation is the frame, and return its size.
    Appends nothing when it raises: ``ValueError`` for a body over
    ``max_frame`` or a ``seq`` past 64 bits, ``TypeError`` for something
    that is not a record.

    The caller's own state must prove ``seq`` an int >= 0 and ``max_frame``
    valid (``_check_max_frame``): those checks would cost as much as
    encoding half a small record, and the journal writer makes them once,
    when it opens the journal."""
    if seq > MAX_U64:
        raise _seq_overflow(seq)
    crc32 = zlib.crc32
    # ``record`` is ``Any`` below: the kind dispatches it, and mypy cannot
    # follow a kind looked up in a dict.
    rec: Any = record
    kind = _RECORD_KIND.get(type(rec))
    if kind is None:
        kind = _kind_of(rec, _RECORD_KIND, "record")
    if kind == KIND_MARK or kind == KIND_RESERVE:
        value = rec.checkpoint if kind == KIND_MARK else rec.below
        parts += _frame_parts(kind, seq, _MARK.pack(value), max_frame, key)
        return FRAME_OVERHEAD + _MARK.size
    if kind == KIND_TURN or kind == KIND_ANSWER:
        # Episodes: a turn or an answer per tool call, not per token, so the
        # plain path (one joined body) is fast enough.
        body = _turn_body(rec) if kind == KIND_TURN else _answer_body(rec)
        parts += _frame_parts(kind, seq, body, max_frame, key)
        return FRAME_OVERHEAD + len(body)
    payload = rec.payload
    pkind = _PAYLOAD_KIND.get(type(payload))
    if pkind is None:
        pkind = _kind_of(payload, _PAYLOAD_KIND, "payload")
    if pkind == PAYLOAD_TOKENS:
        data = payload.token_data
        logprobs = payload.logprob_data  # as long as data: the constructor checked
        runs = payload.version_runs
        reward = payload.reward
        # A sample usually spans one policy version: one run, one pack (of
        # the run unpacked: a call with ``*`` costs half as much again).
        if len(runs) == 1:
            ((first, version),) = runs
            flat = _RUN.pack(first, version)
        else:
            flat = b"".join([_RUN.pack(*run) for run in runs])
        extend = kind == KIND_EXTEND
        size = (_EXTEND_FIXED if extend else _TOKENS_FIXED) + 2 * len(data) + len(flat)
        if size > max_frame:
            raise _too_large(size, max_frame)
        head = _HEAD.pack(size, seq, kind, _ZERO3)
        check = crc32(head)
        if extend:
            fixed = _CHECKED_EXTEND.pack(
                check,
                rec.ordinal,
                rec.sibling,
                rec.attempt,
                rec.start,
                PAYLOAD_TOKENS,
                len(data) >> 2,
                len(runs),
                False,  # an Extend has no reward (its constructor checked)
                0.0,
            )
        else:
            fixed = _CHECKED_TOKENS.pack(
                check,
                rec.ordinal,
                rec.sibling,
                rec.attempt,
                PAYLOAD_TOKENS,
                len(data) >> 2,
                len(runs),
                reward is not None,
                0.0 if reward is None else reward,
            )
        if size <= _JOIN_MAX:
            frame = b"".join((head, fixed, data, logprobs, flat))
            parts += (frame, _CHECK.pack(crc32(frame, key)))
        else:
            crc = crc32(flat, crc32(logprobs, crc32(data, crc32(fixed, crc32(head, key)))))
            parts += (head, fixed, data, logprobs, flat, _CHECK.pack(crc))
        return FRAME_OVERHEAD + size
    data = payload.data if pkind == PAYLOAD_BYTES else payload.text.encode("utf-8")
    size = _SIBLING.size + len(data)
    if size > max_frame:
        raise _too_large(size, max_frame)
    head = _HEAD.pack(size, seq, kind, _ZERO3)
    check = crc32(head)
    fixed = _CHECKED_SIBLING.pack(check, rec.ordinal, rec.sibling, rec.attempt, pkind)
    if size <= _JOIN_MAX:
        frame = b"".join((head, fixed, data))
        parts += (frame, _CHECK.pack(crc32(frame, key)))
    else:
        parts += (head, fixed, data, _CHECK.pack(crc32(data, crc32(fixed, crc32(head, key)))))
    return FRAME_OVERHEAD + size


def _payload_body(payload: Payload) -> tuple[int, bytes]:
    """A payload's kind and bytes as a sibling record stores them."""
    if isinstance(payload, BytesPayload):
        return PAYLOAD_BYTES, payload.data
    if isinstance(payload, JsonPayload):
        return PAYLOAD_JSON, payload.text.encode("utf-8")
    if isinstance(payload, TokenPayload):
        reward = payload.reward
        fixed = _TOKENS.pack(
            len(payload), len(payload.version_runs), reward is not None, reward or 0.0
        )
        runs = b"".join([_RUN.pack(*run) for run in payload.version_runs])
        return PAYLOAD_TOKENS, b"".join((fixed, payload.token_data, payload.logprob_data, runs))
    raise TypeError(f"not a journal payload: {type(payload).__name__}")


def _short(text: str) -> bytes:
    data = text.encode("utf-8")
    return _U8.pack(len(data)) + data


def _turn_body(rec: Turn) -> bytes:
    head = _EPISODE.pack(rec.ordinal, rec.sibling, rec.attempt, rec.turn)
    call = rec.call
    if call is None:
        called = _U8.pack(0)
    else:
        args = call.args.text.encode("utf-8")
        called = b"".join(
            (_U8.pack(1), _short(call.name), _short(call.key), _U32.pack(len(args)), args)
        )
    return b"".join((head, called, _payload_body(rec.payload)[1]))


def _answer_body(rec: Answer) -> bytes:
    kind, answer = _payload_body(rec.payload)
    if rec.state is None:
        state_kind, state = PAYLOAD_NONE, b""
    else:
        state_kind, state = _payload_body(rec.state)
    return b"".join(
        (
            _EPISODE.pack(rec.ordinal, rec.sibling, rec.attempt, rec.turn),
            _short(rec.key),
            _U8.pack(kind),
            _U32.pack(len(answer)),
            answer,
            _U8.pack(state_kind),
            state,
        )
    )


def append_frames(
    parts: list[bytes], records: Sequence[Record], seq: int, max_frame: int, key: int
) -> int:
    """``append_frame`` of each of ``records``, numbered from ``seq``; return
    how many bytes that is. All or nothing: when one record is refused
    (``append_frame``'s errors), ``parts`` is left as it was. Same
    obligations on ``seq`` and ``max_frame`` as ``append_frame``."""
    last = seq + len(records) - 1
    if last > MAX_U64:
        raise _seq_overflow(last)
    start = len(parts)
    total = 0
    try:
        for record in records:
            total += append_frame(parts, record, seq, max_frame, key)
            seq += 1
    except BaseException:
        del parts[start:]
        raise
    return total


def _encode_records(
    records: Iterable[Record], first_seq: int, header: JournalHeader, max_frame: int
) -> list[bytes]:
    _check_max_frame(max_frame)
    check_uint("first_seq", first_seq, MAX_U64)
    if not isinstance(header, JournalHeader):
        raise TypeError(f"header must be a JournalHeader, got {type(header).__name__}")
    parts: list[bytes] = []
    append_frames(parts, tuple(records), first_seq, max_frame, header.key)
    return parts


def _header_body(header: JournalHeader) -> bytes:
    fp = header.fingerprint.encode("utf-8")
    lineage = header.lineage.encode("utf-8")
    return b"".join(
        (
            _U8.pack(len(_FORMAT_BYTES)),
            _FORMAT_BYTES,
            _U16.pack(VERSION),
            _U16.pack(len(fp)),
            fp,
            _U8.pack(len(lineage)),
            lineage,
            header.journal_id,
            _U32.pack(len(header.marks)),
            *(_HEADER_MARK.pack(*mark) for mark in header.marks),
        )
    )


def encode_header(header: JournalHeader, *, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """The header frame of a journal (sequence number ``header.base``)."""
    _check_max_frame(max_frame)
    return b"".join(_frame_parts(KIND_HEADER, header.base, _header_body(header), max_frame, 0))


def encode_record(
    record: Record, seq: int, *, header: JournalHeader, max_frame: int = DEFAULT_MAX_FRAME
) -> bytes:
    """One record's frame at sequence number ``seq`` in the journal of
    ``header`` (its check is keyed to that journal). Raises ``ValueError``
    for a record whose body exceeds ``max_frame`` (nothing is written that a
    reader with the same bound would refuse)."""
    check_uint("seq", seq, MAX_U64)
    return b"".join(_encode_records((record,), seq, header, max_frame))


def encode_records(
    records: Iterable[Record],
    *,
    first_seq: int,
    header: JournalHeader,
    max_frame: int = DEFAULT_MAX_FRAME,
) -> bytes:
    """The frames of ``records`` in the journal of ``header``, numbered from
    ``first_seq``, concatenated."""
    return b"".join(_encode_records(records, first_seq, header, max_frame))


def encode(
    header: JournalHeader, records: Iterable[Record], *, max_frame: int = DEFAULT_MAX_FRAME
) -> bytes:
    """A whole journal: the header frame, then ``records`` in order."""
    head = encode_header(header, max_frame=max_frame)
    return b"".join([head, *_encode_records(records, header.base + 1, header, max_frame)])


# -- decoding -------------------------------------------------------------------

#: The torn-tail shape of a frame a power cut left unfinished, zeros after.
_CUT_BY_ZEROS: Final = "a frame cut short by zero bytes"


@attrs.frozen
class TornTail:
    """The incomplete or unchecked end of a journal: ``length`` bytes from
    byte ``offset`` to the end, discarded. ``reason`` says which of the
    torn-tail shapes it was."""

    offset: int
    length: int
    reason: str


@attrs.frozen
class Decoded:
    """A decoded journal: its header, its records in order (the record at
    index ``i`` has sequence number ``header.base + 1 + i``), ``end``, the
    byte offset just past the last sound frame (where the next append
    goes), and ``torn``, the torn tail past ``end`` or ``None``."""

    header: JournalHeader
    records: tuple[Record, ...]
    end: int
    torn: TornTail | None

    @property
    def last_seq(self) -> int:
        """The sequence number of the last record (the base if none)."""
        return self.header.base + len(self.records)

    @property
    def next_seq(self) -> int:
        return self.last_seq + 1

    def marks(self) -> tuple[tuple[int, int], ...]:
        """Every ``(position, checkpoint)`` mark of this journal's history,
        ascending: those its header remembers (folded in by compactions),
        then its ``Mark`` records. What a compaction of it carries forward
        (the newest ``MAX_MARKS``)."""
        base = self.header.base
        held = [(base + 1 + i, r.checkpoint) for i, r in enumerate(self.records) if type(r) is Mark]
        return (*self.header.marks, *held)[-MAX_MARKS:]

    def check_mark(self, position: int, checkpoint: int) -> None:
        """Check that this journal holds checkpoint ``checkpoint``'s mark at
        sequence number ``position`` (what the checkpoint saved).

        A position at or below the base must be one of the marks the
        header remembers (a compaction folded it in). Raises
        ``JournalBehindError`` when the journal ends before ``position``, or
        another record (or no remembered mark) stands there: the journal is
        not the one the checkpoint was taken with (a stale copy, another
        branch), and records the checkpoint counted as durable may be
        missing.
        """
        check_uint("position", position, MAX_U64)
        check_uint("checkpoint", checkpoint, MAX_U64)
        if position <= self.header.base:
            marks = self.header.marks
            if (position, checkpoint) in marks:
                return
            older = len(marks) == MAX_MARKS and position < marks[0][0]
            raise JournalBehindError(
                position,
                self.last_seq,
                f"the checkpoint {checkpoint} saved journal position {position}, which this "
                f"journal compacted into its base {self.header.base}, and "
                + (
                    f"it remembers only its newest {MAX_MARKS} marks: the checkpoint is too "
                    "old to be proven against this journal"
                    if older
                    else "it remembers no such mark: a journal of another branch (or one "
                    "rewritten after it was lost with its node, at a later checkpoint's mark: "
                    "resume that later checkpoint)"
                ),
            )
        if position > self.last_seq:
            raise JournalBehindError(
                position,
                self.last_seq,
                f"the checkpoint {checkpoint} saved journal position {position}, but the "
                f"journal ends at {self.last_seq}: records it counted as durable are missing",
            )
        found = self.records[position - self.header.base - 1]
        if found != Mark(checkpoint):
            raise JournalBehindError(
                position,
                self.last_seq,
                f"the checkpoint {checkpoint} saved journal position {position}, but the "
                f"journal holds {found!r:.80} there: a journal of another branch",
            )


class _Body:
    """A cursor over one frame's body that refuses to read past it."""

    __slots__ = ("at", "data", "offset", "stop")

    def __init__(self, data: memoryview, start: int, stop: int, offset: int) -> None:
        self.data = data
        self.at = start
        self.stop = stop
        self.offset = offset  # the frame's, for errors

    def fail(self, reason: str) -> JournalCorruptError:
        return JournalCorruptError(self.offset, reason)

    def need(self, size: int, what: str) -> int:
        at = self.at
        if size > self.stop - at:
            raise self.fail(f"{what} needs {size} bytes, the body has {self.stop - at} left")
        self.at = at + size
        return at

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        return fmt.unpack_from(self.data, self.need(fmt.size, what))

    def take(self, size: int, what: str) -> memoryview:
        at = self.need(size, what)
        return self.data[at : at + size]

    def rest(self) -> memoryview:
        return self.take(self.stop - self.at, "")

    def part(self, size: int, what: str) -> _Body:
        """A cursor over the next ``size`` bytes of this body (a nested,
        length-prefixed value), consumed here at once."""
        at = self.need(size, what)
        return _Body(self.data, at, at + size, self.offset)

    def done(self, what: str) -> None:
        if self.at != self.stop:
            raise self.fail(f"{self.stop - self.at} unexpected bytes after the {what}")


def _utf8(body: _Body, raw: memoryview, what: str) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        raise body.fail(f"{what} is not UTF-8") from None


def _decode_tokens(body: _Body) -> TokenPayload:
    reward_at = body.at + 9
    n, r, has_reward, reward = body.unpack(_TOKENS, "a token payload's counts")
    # The sizes must add up to the bytes present *before* anything is
    # sliced: ``n`` and ``r`` are numbers inside the input.
    size = 8 * n + 8 * r
    if size != body.stop - body.at:
        raise body.fail(
            f"a token payload of {n} tokens and {r} version runs needs {size} bytes, "
            f"the body has {body.stop - body.at}"
        )
    if has_reward not in (0, 1):
        raise body.fail(f"has_reward is {has_reward}, not 0 or 1")
    if not has_reward and body.data[reward_at : reward_at + 8] != _ZERO8:
        raise body.fail("an absent reward must be stored as +0.0")
    tokens = body.take(4 * n, "token ids").tobytes()
    logprobs = body.take(4 * n, "log-probs").tobytes()
    runs = tuple(_RUN.iter_unpack(body.take(8 * r, "version runs")))
    check_token_fields(tokens, logprobs, runs)
    if has_reward and not math.isfinite(reward):
        raise body.fail(f"the reward is {reward!r}, not finite")
    return trusted(TokenPayload, tokens, logprobs, runs, reward if has_reward else None)


def _decode_payload(body: _Body, kind: int) -> Payload:
    if kind == PAYLOAD_BYTES:
        return trusted(BytesPayload, body.rest().tobytes())
    if kind == PAYLOAD_JSON:
        return JsonPayload(_utf8(body, body.rest(), "the JSON payload"))  # parses it, once
    if kind == PAYLOAD_TOKENS:
        return _decode_tokens(body)
    raise body.fail(f"unknown payload kind {kind}")


def _text_field(body: _Body, what: str) -> str:
    """A u8-length-prefixed, non-empty UTF-8 string (a name or a key)."""
    (n,) = body.unpack(_U8, f"{what}'s length")
    if n == 0:
        raise body.fail(f"{what} is empty")
    return _utf8(body, body.take(n, what), what)


def _decode_turn(body: _Body) -> Turn:
    ordinal, sibling, attempt, turn = body.unpack(_EPISODE, "a turn")
    (has_call,) = body.unpack(_U8, "a turn's call flag")
    call = None
    if has_call == 1:
        name = _text_field(body, "the tool name")
        key = _text_field(body, "the idempotency key")
        (n,) = body.unpack(_U32, "the args' length")
        args = JsonPayload(_utf8(body, body.take(n, "the args"), "the args"))  # parses them
        call = trusted(ToolCall, name, args, key)
    elif has_call != 0:
        raise body.fail(f"has_call is {has_call}, not 0 or 1")
    tokens = _decode_tokens(body)
    body.done("turn")
    if tokens.reward is not None:
        raise body.fail("a turn's tokens carry no reward")
    return trusted(Turn, ordinal, sibling, attempt, turn, tokens, call)


def _decode_answer(body: _Body) -> Answer:
    ordinal, sibling, attempt, turn = body.unpack(_EPISODE, "an answer")
    key = _text_field(body, "the idempotency key")
    (kind,) = body.unpack(_U8, "the answer's payload kind")
    (n,) = body.unpack(_U32, "the answer's length")
    part = body.part(n, "the answer")
    answer = _decode_payload(part, kind)
    part.done("answer payload")
    (state_kind,) = body.unpack(_U8, "the state's payload kind")
    state: Payload | None = None
    if state_kind != PAYLOAD_NONE:
        state = _decode_payload(body, state_kind)
    body.done("answer")
    return trusted(Answer, ordinal, sibling, attempt, turn, key, answer, state)


def _decode_record(body: _Body, kind: int) -> Record:
    try:
        return _decode_fields(body, kind)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, JournalCorruptError):
            raise
        # A value the constructors refuse: sound framing, bad content.
        raise body.fail(str(exc)) from None


def _decode_fields(body: _Body, kind: int) -> Record:
    if kind == KIND_MARK:
        (checkpoint,) = body.unpack(_MARK, "a mark")
        body.done("mark")
        return trusted(Mark, checkpoint)
    if kind == KIND_RESERVE:
        (below,) = body.unpack(_MARK, "a reservation")
        body.done("reservation")
        return trusted(Reserve, below)
    if kind == KIND_TURN:
        return _decode_turn(body)
    if kind == KIND_ANSWER:
        return _decode_answer(body)
    if kind == KIND_EXTEND:
        ordinal, sibling, attempt, start, payload_kind = body.unpack(_EXTEND, "an extend")
        if payload_kind != PAYLOAD_TOKENS:
            raise body.fail(f"an extend carries tokens (payload kind 2), not kind {payload_kind}")
        tokens = _decode_tokens(body)
        body.done("payload")
        if tokens.reward is not None:
            raise body.fail("an extend carries no reward")
        return trusted(Extend, ordinal, sibling, attempt, start, tokens)
    ordinal, sibling, attempt, payload_kind = body.unpack(_SIBLING, "a sibling record")
    payload = _decode_payload(body, payload_kind)
    body.done("payload")
    if kind == KIND_SEALED:
        return trusted(Sealed, ordinal, sibling, attempt, payload)
    return trusted(Progress, ordinal, sibling, attempt, payload)


def _decode_header(body: _Body, base: int) -> JournalHeader:
    (n,) = body.unpack(_U8, "the format tag's length")
    tag = body.take(n, "the format tag")
    if tag != _FORMAT_BYTES:
        raise JournalVersionError(
            f"not a frontier_core journal: format tag {bytes(tag)!r:.60}, expected {FORMAT!r}"
        )
    (version,) = body.unpack(_U16, "the schema version")
    if version not in _READS:
        why = (
            ": version 1 was written before frames were bound to their journal; finish "
            "that run with the release that wrote it, or remove the journal to start afresh"
            if version == 1
            else ""
        )
        raise JournalVersionError(
            f"journal schema version {version} is not supported (this library reads "
            f"{sorted(_READS)}){why}"
        )
    (n,) = body.unpack(_U16, "the fingerprint's length")
    fingerprint = _utf8(body, body.take(n, "the fingerprint"), "the fingerprint")
    (n,) = body.unpack(_U8, "the lineage's length")
    if n == 0:
        raise body.fail("the lineage id is empty")
    lineage = _utf8(body, body.take(n, "the lineage id"), "the lineage id")
    journal_id = body.take(JOURNAL_ID_SIZE, "the journal id").tobytes()
    (m,) = body.unpack(_U32, "the count of marks")
    if m > MAX_MARKS:
        raise body.fail(f"the header remembers {m} marks, more than {MAX_MARKS}")
    marks = tuple(_HEADER_MARK.iter_unpack(body.take(m * _HEADER_MARK.size, "the marks")))
    body.done("header")
    try:
        return JournalHeader(fingerprint, lineage, base, journal_id, marks)
    except (TypeError, ValueError) as exc:
        raise body.fail(str(exc)) from None


def _zeros_from(view: memoryview, offset: int) -> int:
    """Where the all-zero suffix of ``view`` begins, ``offset`` at the
    least: the end of its last non-zero byte from ``offset`` on. Linear in
    the bytes from ``offset``; called once, when a frame fails there."""
    return offset + len(view[offset:].tobytes().rstrip(b"\0"))


def decode(
    data: bytes | bytearray | memoryview,
    *,
    fingerprint: str | None = None,
    lineage: str | None = None,
    max_frame: int = DEFAULT_MAX_FRAME,
) -> Decoded:
    """Decode a whole journal.

    The header must be complete and sound (a journal file is created with
    its header in place, atomically); a torn tail after it is discarded and
    reported in ``Decoded.torn`` (see the module's docstring for its exact
    shapes). Raises ``JournalCorruptError`` naming the byte offset of the
    first frame that is malformed or fails a check anywhere else,
    ``JournalSequenceError`` for a sequence gap, repeat or decrease,
    ``JournalVersionError`` for another format or schema version, and
    ``JournalMismatchError`` when ``fingerprint`` or ``lineage`` is given
    and the header's differs. A frame whose body exceeds ``max_frame`` is an
    error, never read. Time and memory are linear in ``len(data)``.
    """
    _check_max_frame(max_frame)
    view = memoryview(data).cast("B")
    total = len(view)
    offset = 0
    header: JournalHeader | None = None
    records: list[Record] = []
    expected = 0
    key = 0  # the header's frame check is unseeded; the records', the header's key
    torn: TornTail | None = None
    while offset < total:
        left = total - offset
        if left < HEAD_SIZE:
            if header is None:
                raise JournalCorruptError(offset, "the header frame is incomplete")
            torn = TornTail(offset, left, "an incomplete frame head")
            break
        length, seq, kind, reserved = _HEAD.unpack_from(view, offset)
        (head_check,) = _CHECK.unpack_from(view, offset + _HEAD.size)
        start = offset + HEAD_SIZE
        if zlib.crc32(view[offset : offset + _HEAD.size]) != head_check:
            # The length is unproven: never use it to find the frame's end.
            # Torn only if the zeros begin before the head's end (the head
            # was not all written); a head written whole that fails is corrupt.
            if header is not None:
                zeros = _zeros_from(view, offset)
                if zeros == offset:
                    torn = TornTail(offset, left, "zero bytes where a frame head belongs")
                    break
                if zeros < start:
                    torn = TornTail(offset, left, _CUT_BY_ZEROS)
                    break
            raise JournalCorruptError(offset, "the frame head fails its check")
        if reserved != _ZERO3:
            raise JournalCorruptError(offset, f"reserved bytes {reserved.hex()} are not zero")
        if length > max_frame:
            raise JournalCorruptError(
                offset,
                f"a frame body of {length} bytes exceeds max_frame={max_frame} "
                "(raise max_frame if the journal's writer used a larger bound)",
            )
        stop = start + length
        if stop + _CHECK.size > total:
            if header is None:
                raise JournalCorruptError(offset, "the header frame is incomplete")
            torn = TornTail(offset, left, "a frame cut short")
            break
        (frame_check,) = _CHECK.unpack_from(view, stop)
        if zlib.crc32(view[start:stop], zlib.crc32(view[offset:start], key)) != frame_check:
            if kind == KIND_HEADER and header is not None:
                # A header's check is unseeded: a sound one here is a second
                # journal glued on, not a torn or damaged frame.
                unseeded = zlib.crc32(view[start:stop], zlib.crc32(view[offset:start]))
                if unseeded == frame_check:
                    raise JournalCorruptError(
                        offset, "a second header in the middle of the journal"
                    )
            if header is not None:
                if stop + _CHECK.size == total:
                    torn = TornTail(offset, left, "the last frame fails its check")
                    break
                # Torn only if the zeros begin inside the frame: a non-zero
                # byte past its end is data after a corrupt frame.
                if _zeros_from(view, offset) < stop + _CHECK.size:
                    torn = TornTail(offset, left, _CUT_BY_ZEROS)
                    break
            raise JournalCorruptError(
                offset, "the frame fails its check (damaged, or a frame of another journal)"
            )
        body = _Body(view, start, stop, offset)
        if header is None:
            if kind != KIND_HEADER:
                raise JournalCorruptError(
                    offset, f"the first frame is of kind {kind}, not a header"
                )
            if seq == MAX_U64:
                raise JournalCorruptError(offset, "the base leaves no room for a record")
            header = _decode_header(body, seq)
            key = header.key
            if fingerprint is not None and header.fingerprint != fingerprint:
                raise JournalMismatchError("fingerprint", fingerprint, header.fingerprint)
            if lineage is not None and header.lineage != lineage:
                raise JournalMismatchError("lineage", lineage, header.lineage)
        else:
            if kind not in _RECORD_KINDS:
                what = "a second header" if kind == KIND_HEADER else f"unknown frame kind {kind}"
                raise JournalCorruptError(offset, f"{what} in the middle of the journal")
            if seq != expected:
                raise JournalSequenceError(offset, expected, seq)
            records.append(_decode_record(body, kind))
        expected = seq + 1
        offset = stop + _CHECK.size
    if header is None:
        raise JournalCorruptError(0, "no header frame: an empty or truncated journal")
    return Decoded(header, tuple(records), offset, torn)
