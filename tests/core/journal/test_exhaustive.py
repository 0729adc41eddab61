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
    NO_TOKENS,
    Answer,
    Decoded,
    Extend,
    JournalCorruptError,
    JournalEpisodeError,
    JournalHeader,
    JournalSequenceError,
    JournalState,
    Progress,
    Record,
    Reserve,
    Sealed,
    SiblingState,
    TokenPayload,
    ToolCall,
    TornTail,
    Turn,
    TurnState,
    _format,
    _replay,
    _reuse,
    call_key,
)
from frontier_core.testing import JournalBounds, explore_journal
from frontier_core.testing._explore import InvariantViolation

#: The scopes proofs/JOURNAL.md quotes. ``siblings``: the brief's scope, two
#: prompts of two siblings under two attempts, every sequence of two appends
#: (the bytes of every sequence of one); ``deep``: one sibling per prompt,
#: every sequence of three appends (the bytes of every sequence of two);
#: ``payloads``: one sibling, two tokens per payload and an opaque snapshot,
#: every sequence of three (bytes: two). Episodes (issue 24): ``episodes``,
#: one sibling under two attempts, episodes of up to three turns, every
#: sequence of five appends (a whole three-turn episode; bytes: one);
#: ``episode pairs``: two prompts of one sibling, episodes of up to two
#: turns, every sequence of three (compaction windows that drop an episode);
#: ``episode voids``: one sibling, episodes of up to two turns and the empty
#: snapshot a failure journals (``Run.fail``) among the records, every
#: sequence of four.
SCOPES = {
    "siblings": JournalBounds(ordinals=2, siblings=2, attempts=2, length=2, cut_length=1),
    "deep": JournalBounds(ordinals=2, siblings=1, attempts=2, length=3, cut_length=2),
    "payloads": JournalBounds(
        ordinals=1, siblings=1, attempts=2, length=3, cut_length=2, tokens=2, opaque=True, base=41
    ),
    "episodes": JournalBounds(ordinals=1, siblings=1, attempts=2, length=5, cut_length=1, turns=3),
    "episode pairs": JournalBounds(
        ordinals=2, siblings=1, attempts=2, length=3, cut_length=0, turns=2
    ),
    "episode voids": JournalBounds(
        ordinals=1, siblings=1, attempts=2, length=4, cut_length=0, turns=2, voids=True
    ),
}
EPISODES = {"episodes", "episode pairs", "episode voids"}
MUTATION = {"episodes", "episode pairs"}
#: What each reaches: (sequences, framed, cuts, flips, zero tails, splices,
#: compactions, compact-then-append splits, reuse limits).
CI_COUNTS = {
    "siblings": (1925, 44, 3034, 6732, 6189, 215, 7700, 7524, 3850),
    "deep": (13792, 569, 37821, 77040, 222663, 3930, 55168, 107964, 27584),
    "payloads": (3948, 249, 16013, 32712, 91847, 1706, 7896, 15262, 7896),
    "episodes": (14731, 17, 1349, 2725, 2661, 80, 22424, 82958, 22424),
    "episode pairs": (7089, 1, 85, 85, 5, 0, 19964, 38424, 9982),
    "episode voids": (7827, 1, 85, 85, 5, 0, 12480, 35006, 12480),
}
#: For the episode scopes: (turns appended, answers accepted, episodes
#: continued by a newer attempt, answers of a fenced attempt, sequences
#: leaving a call pending, sequences replay must refuse).
EPISODE_COUNTS = {
    "episodes": (666, 234, 134, 1754, 3795, 3519),
    "episode pairs": (798, 88, 46, 548, 1966, 2098),
    "episode voids": (484, 109, 56, 683, 1737, 1587),
}
#: FRONTIER_EXPLORE_JOURNAL_LEN=N explores every sequence of up to N appends
#: in each sample scope instead, the bytes of those of up to N - 1, outside
#: CI, and checks no counts; FRONTIER_EXPLORE_EPISODES_LEN=N every sequence
#: of up to N appends in each episode scope (the bytes as in CI).
LONG = os.environ.get("FRONTIER_EXPLORE_JOURNAL_LEN")
LONG_EPISODES = os.environ.get("FRONTIER_EXPLORE_EPISODES_LEN")

#: Every episode rule replay enforces, as ``JournalReport.episode_errors``
#: names them.
EPISODE_RULES = {
    "a continuation past the answered turns",
    "a turn after a turn without a call",
    "a turn that is not the episode's next",
    "a turn while a call is pending",
    "an answer for an unknown key",
    "an answer for another turn",
    "an answer with no call pending",
}


# The episode scopes (about 13 s together) are among the tests mutmut runs
# (scripts/mutation.sh): they kill the episode code's mutants that no
# single-case test reaches.
@pytest.mark.parametrize(
    "scope", [pytest.param(s, marks=pytest.mark.mutation) if s in MUTATION else s for s in SCOPES]
)
def test_every_journal_sequence_keeps_every_invariant(scope: str) -> None:
    bounds = SCOPES[scope]
    if scope in EPISODES and LONG_EPISODES:
        bounds = attrs.evolve(bounds, length=int(LONG_EPISODES))
        print(f"\n{scope}: {explore_journal(bounds)}")
        return
    if scope not in EPISODES and LONG:
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
        report.reuses,
    )
    assert counts == CI_COUNTS[scope]
    # Not vacuous: every rule fires, and every torn-tail shape is reached.
    assert report.extends_accepted and report.extends_ignored
    assert report.fenced and report.seals_superseded
    if scope in EPISODES:
        episodes = (
            report.turns_appended,
            report.answers_accepted,
            report.continuations,
            report.answers_fenced,
            report.pending,
            sum(n for _, n in report.episode_errors),
        )
        assert episodes == EPISODE_COUNTS[scope]
        assert all(episodes)
        assert {rule for rule, _ in report.episode_errors} == EPISODE_RULES
        if scope != "episodes":
            return  # no bytes
    else:
        assert report.extends_ignored > report.extends_accepted
        assert not report.turns_appended and not report.episode_errors
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
    with pytest.raises(ValueError, match="turns"):
        JournalBounds(turns=-1)
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
_ORIGINAL_EPISODE = _replay._episode
_ORIGINAL_ADVANCE = _replay.advance
_ORIGINAL_RECORDS = SiblingState.records
_ORIGINAL_ALL_YOUNG = _reuse._all_young


def _stale_answer_taken(current: SiblingState | None, record: Turn | Answer) -> object:
    """An answer of an older attempt taken as the current attempt's."""
    if isinstance(record, Answer) and current is not None and record.attempt < current.attempt:
        record = attrs.evolve(record, attempt=current.attempt)
    return _ORIGINAL_EPISODE(current, record)


def _continuation_keeps_every_turn(current: SiblingState | None, record: Turn | Answer) -> object:
    """A newer attempt's turn appended after every turn held, not at its index."""
    got = _ORIGINAL_EPISODE(current, record)
    if isinstance(record, Turn) and current is not None and record.attempt > current.attempt:
        assert isinstance(got, SiblingState)
        return attrs.evolve(got, turns=(*current.turns, got.turns[-1]))
    return got


def _forgiving(words: str) -> Callable[..., object]:
    """An episode rule dropped: the refusal whose reason holds ``words``
    taken as a turn at its index, or as the answer of the last turn."""

    def episode(current: SiblingState | None, record: Turn | Answer) -> object:
        try:
            return _ORIGINAL_EPISODE(current, record)
        except JournalEpisodeError as exc:
            if words not in exc.reason or current is None or not current.turns:
                raise
            turns = current.turns
            if isinstance(record, Turn):
                kept = (*turns[: record.turn], TurnState(record.payload, record.call))
            else:
                last = attrs.evolve(turns[-1], answer=record.payload, state=record.state)
                kept = (*turns[:-1], last)
            return SiblingState(record.attempt, NO_TOKENS, False, kept)

    return episode


def _seal_drops_the_turns(current: SiblingState | None, record: object) -> object:
    got = _ORIGINAL_ADVANCE(current, record)  # type: ignore[arg-type]
    if isinstance(record, Sealed) and isinstance(got, SiblingState):
        return attrs.evolve(got, turns=())
    return got


def _keys_made_again(self: SiblingState, o: int, s: int) -> tuple[Record, ...]:
    """Compaction that derives each call's key again, under the current
    attempt, instead of keeping the key the call was made with."""
    out: list[Record] = []
    for r in _ORIGINAL_RECORDS(self, o, s):
        if isinstance(r, Turn) and r.call is not None:
            key = call_key("explore", o, s, r.attempt, r.turn)
            r = attrs.evolve(r, call=ToolCall(r.call.name, r.call.args, key))
        elif isinstance(r, Answer):
            r = attrs.evolve(r, key=call_key("explore", o, s, r.attempt, r.turn))
        out.append(r)
    return tuple(out)


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
    "replay takes the answer of a fenced attempt": (
        _replay,
        "_episode",
        _stale_answer_taken,
        {"FENCED-ANSWER-NEVER-TRAINED"},
    ),
    "a continuation keeps every turn, not the first t": (
        _replay,
        "_episode",
        _continuation_keeps_every_turn,
        {"TURN-CONTINUATION-EXACT"},
    ),
    "replay takes a turn after a turn without a call": (
        _replay,
        "_episode",
        _forgiving("without a call"),
        {"TURN-CONTINUATION-EXACT"},
    ),
    "replay takes a turn while a call is pending": (
        _replay,
        "_episode",
        _forgiving("a call pending"),
        {"TURN-CONTINUATION-EXACT"},
    ),
    "replay attaches an answer for an unknown key": (
        _replay,
        "_episode",
        _forgiving("an answer for key"),
        {"TURN-CONTINUATION-EXACT"},
    ),
    "a seal drops the episode's transcript": (
        _replay,
        "advance",
        _seal_drops_the_turns,
        {"TURN-CONTINUATION-EXACT"},
    ),
    "compaction derives the calls' keys again": (
        SiblingState,
        "records",
        _keys_made_again,
        {"TOOL-AT-MOST-ONCE"},
    ),
    "reuse keeps a sealed episode whole when only its sample is young": (
        _reuse,
        "_young_whole",
        lambda st, *limits: _ORIGINAL_ALL_YOUNG(st.payload, *limits),
        {"TURN-CONTINUATION-EXACT"},
    ),
    "reuse keeps a sample whose last token is old": (
        _reuse,
        "_young_prefix",
        lambda payload, *limits: len(payload),
        {"REUSE-OFF-POLICY", "TURN-CONTINUATION-EXACT"},
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
    # Each bug in the scope whose alphabet reaches it, shortened.
    episodic = target is _replay and attribute in ("_episode", "advance")
    episodic = episodic or (target is SiblingState and attribute == "records")
    episodic = episodic or attribute == "_young_whole"
    scope = (
        attrs.evolve(SCOPES["episodes"], length=4, cut_length=0)
        if episodic
        else attrs.evolve(SCOPES["payloads"], cut_length=1)
    )
    with pytest.raises(InvariantViolation) as info:
        explore_journal(scope)
    assert info.value.invariant in invariants, info.value
