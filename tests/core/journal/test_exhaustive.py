"""Exhaustive small-scope checking of the real rollout journal with torn
tails (``frontier_core.testing._explore_journal``): every sequence of
appends within each scope, every byte cut, flip, zero tail and splice of the
short ones, the counts pinned, and seeded bugs that it must find."""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable

import attrs
import pytest

import frontier_core.testing._explore_journal as explorer
from frontier_core.journal import (
    Decoded,
    Extend,
    JournalCorruptError,
    JournalHeader,
    JournalSequenceError,
    JournalState,
    Progress,
    Reserve,
    SiblingState,
    TokenPayload,
    TornTail,
    _format,
    _replay,
    _reuse,
)
from frontier_core.testing import JournalBounds, explore_journal
from frontier_core.testing._explore import InvariantViolation

#: The scopes proofs/JOURNAL.md quotes. ``siblings``: the brief's scope, two
#: prompts of two siblings under two attempts, every sequence of two appends
#: (the bytes of every sequence of one); ``deep``: one sibling per prompt,
#: every sequence of three appends (the bytes of every sequence of two);
#: ``payloads``: one sibling, two tokens per payload and an opaque snapshot,
#: every sequence of three (bytes: two).
SCOPES = {
    "siblings": JournalBounds(ordinals=2, siblings=2, attempts=2, length=2, cut_length=1),
    "deep": JournalBounds(ordinals=2, siblings=1, attempts=2, length=3, cut_length=2),
    "payloads": JournalBounds(
        ordinals=1, siblings=1, attempts=2, length=3, cut_length=2, tokens=2, opaque=True, base=41
    ),
}
#: What each reaches: (sequences, framed, cuts, flips, zero tails, splices,
#: compactions, compact-then-append splits).
CI_COUNTS = {
    "siblings": (1925, 44, 3034, 6732, 6189, 215, 7700, 7524),
    "deep": (13792, 569, 37821, 77040, 222663, 3930, 55168, 107964),
    "payloads": (3948, 249, 16013, 32712, 91847, 1706, 7896, 15262),
}
#: FRONTIER_EXPLORE_JOURNAL_LEN=N explores every sequence of up to N appends
#: in each scope instead, the bytes of those of up to N - 1, outside CI, and
#: checks no counts.
LONG = os.environ.get("FRONTIER_EXPLORE_JOURNAL_LEN")


@pytest.mark.parametrize("scope", list(SCOPES))
def test_every_journal_sequence_keeps_every_invariant(scope: str) -> None:
    bounds = SCOPES[scope]
    if LONG:
        bounds = attrs.evolve(bounds, length=int(LONG), cut_length=int(LONG) - 1)
        print(f"\n{scope}: {explore_journal(bounds)}")
        return
    report = explore_journal(bounds)
    print(f"\n{scope}: {report}")
    counts = (
        report.sequences,
        report.framed,
        report.cuts,
        report.flips,
        report.zero_tails,
        report.splices,
        report.compactions,
        report.splits,
    )
    assert counts == CI_COUNTS[scope]
    # Not vacuous: every rule fires, and every torn-tail shape is reached.
    assert report.extends_accepted and report.extends_ignored > report.extends_accepted
    assert report.fenced and report.seals_superseded
    assert report.refused > report.framed and report.torn_tails > report.cuts
    assert {reason for reason, _ in report.shapes} == {
        "an incomplete frame head",
        "a frame cut short",
        "the last frame fails its check",
        "zero bytes where a frame head belongs",
        "a frame cut short by zero bytes",
    }


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="cut_length"):
        JournalBounds(length=1, cut_length=2)
    with pytest.raises(ValueError, match="attempts"):
        JournalBounds(attempts=0)
    with pytest.raises(ValueError, match="masks"):
        JournalBounds(masks=(0,))


# -- seeded bugs -------------------------------------------------------------------

_LAST_BAD = "the last frame fails its check"


def _accepts_a_torn_frame(data: bytes, **kw: object) -> Decoded:
    """A decoder that takes the record of a last frame failing its check,
    if its body still parses."""
    got = _format.decode(data, **kw)  # type: ignore[arg-type]
    if got.torn is None or got.torn.reason != _LAST_BAD:
        return got
    view = memoryview(data)
    at = got.torn.offset
    length, _, kind, _ = _format._HEAD.unpack_from(view, at)
    body = _format._Body(view, at + _format.HEAD_SIZE, at + _format.HEAD_SIZE + length, at)
    try:
        record = _format._decode_record(body, kind)
    except JournalCorruptError:
        return got
    return Decoded(got.header, (*got.records, record), len(data), None)


def _miscounts_a_torn_tail(data: bytes, **kw: object) -> Decoded:
    got = _format.decode(data, **kw)  # type: ignore[arg-type]
    if got.torn is None or got.torn.length < 2:
        return got
    torn = got.torn
    return attrs.evolve(got, torn=TornTail(torn.offset, torn.length - 1, torn.reason))


def _zeros_only_from_the_head(view: memoryview, offset: int) -> int:
    """The rule before frames cut short by zeros: a failing frame is torn
    only if every byte from its head on is zero."""
    return offset if not view[offset:].tobytes().strip(b"\0") else len(view)


def _first_zero_byte(view: memoryview, offset: int) -> int:
    """The first zero byte from ``offset`` taken for the start of the zeros,
    whatever follows it."""
    at = view.tobytes().find(b"\0", offset)
    return len(view) if at < 0 else at


def _stops_at_a_sequence_gap(data: bytes, **kw: object) -> Decoded:
    """A decoder that ends the journal quietly before a frame out of
    sequence instead of refusing it."""
    try:
        return _format.decode(data, **kw)  # type: ignore[arg-type]
    except JournalSequenceError as exc:
        return _format.decode(data[: exc.offset], **kw)  # type: ignore[arg-type]


def _extend_at_any_offset(current: SiblingState | None, record: object) -> bool:
    if isinstance(record, Extend):
        return (
            current is not None
            and record.attempt == current.attempt
            and not current.sealed
            and isinstance(current.payload, TokenPayload)
        )
    return _ORIGINAL_ACCEPTS(current, record)  # type: ignore[arg-type]


def _second_seal_wins(current: SiblingState | None, record: object) -> bool:
    if current is not None and not isinstance(record, Extend):
        return record.attempt >= current.attempt  # type: ignore[attr-defined, no-any-return]
    return _ORIGINAL_ACCEPTS(current, record)  # type: ignore[arg-type]


def _last_not_highest(*args: object) -> object:
    """``max`` for replay's reservation (two ints) that keeps the last."""
    return args[-1] if len(args) == 2 else builtins.max(*args)  # type: ignore[call-overload]


_ORIGINAL_ACCEPTS = _replay.accepts
_ORIGINAL_TO_RECORDS = JournalState.to_records
_ORIGINAL_JOIN = TokenPayload.followed_by

#: A seeded bug: the object to patch, its attribute, the replacement, and
#: the invariants that may report it.
Seeded = tuple[object, str, Callable[..., object], set[str]]
SEEDED: dict[str, Seeded] = {
    "the decoder accepts a torn last frame": (
        explorer,
        "decode",
        _accepts_a_torn_frame,
        {"JOURNAL-PREFIX", "TORN-TAIL-ONLY"},
    ),
    "the decoder takes a failing head for zeros": (
        _format,
        "_zeros_from",
        lambda view, offset: offset,
        {"TORN-TAIL-ONLY"},
    ),
    "the decoder refuses a frame cut short by zero bytes": (
        _format,
        "_zeros_from",
        _zeros_only_from_the_head,
        {"TORN-TAIL-ONLY"},
    ),
    "the decoder ignores where the zeros start": (
        _format,
        "_zeros_from",
        _first_zero_byte,
        {"TORN-TAIL-ONLY"},
    ),
    "the decoder miscounts a torn tail": (
        explorer,
        "decode",
        _miscounts_a_torn_tail,
        {"TORN-TAIL-ONLY"},
    ),
    "the decoder stops quietly at a frame out of sequence": (
        explorer,
        "decode",
        _stops_at_a_sequence_gap,
        {"JOURNAL-PREFIX"},
    ),
    "replay takes an extend at a wrong offset": (
        _replay,
        "accepts",
        _extend_at_any_offset,
        {"CONTINUATION-EXACT"},
    ),
    "replay lets a second seal replace the first": (
        _replay,
        "accepts",
        _second_seal_wins,
        {"FENCING"},
    ),
    "replay keeps the last reservation, not the highest": (
        _replay,
        "max",
        _last_not_highest,
        {"FENCING"},
    ),
    "compaction forgets the reservation": (
        JournalState,
        "to_records",
        lambda self: tuple(r for r in _ORIGINAL_TO_RECORDS(self) if not isinstance(r, Reserve)),
        {"COMPACTION-PRESERVES-WINDOW"},
    ),
    "compaction writes a seal as progress": (
        SiblingState,
        "record",
        lambda self, o, s: Progress(o, s, self.attempt, self.payload),
        {"COMPACTION-PRESERVES-WINDOW"},
    ),
    "compaction keeps the ordinals outside the window": (
        JournalState,
        "restrict",
        lambda self, window: self,
        {"COMPACTION-PRESERVES-WINDOW"},
    ),
    "frames are not bound to their journal (one key for all)": (
        JournalHeader,
        "key",
        property(lambda self: 0),  # type: ignore[dict-item]
        {"FRAME-OF-ITS-JOURNAL", "TORN-TAIL-ONLY", "JOURNAL-PREFIX"},
    ),
    "the join of an extend loses its last token": (
        TokenPayload,
        "followed_by",
        lambda self, rest: _ORIGINAL_JOIN(self, _reuse.truncated(rest, len(rest) - 1)),
        {"CONTINUATION-EXACT"},
    ),
}


@pytest.mark.parametrize("name", list(SEEDED))
def test_the_checker_catches_a_seeded_bug(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target, attribute, replacement, invariants = SEEDED[name]
    monkeypatch.setattr(target, attribute, replacement, raising=False)
    with pytest.raises(InvariantViolation) as info:
        explore_journal(attrs.evolve(SCOPES["payloads"], cut_length=1))
    assert info.value.invariant in invariants, info.value
