"""Exhaustive small-scope checking of the real rollout journal, torn tails included.

The companion of ``_explore`` (the ledger's) for the journal's
core (``frontier_core.journal``): not a model of the journal, but its real
encoder, decoder, replay and compaction, driven through EVERY sequence of
appends up to a length over a small alphabet, breadth first (the search the
explorers share, ``_explore.breadth_first``; here no two sequences are the
same state), so that the first violation comes with a shortest sequence.

The alphabet, for every sibling ``(ordinal, sibling)`` and attempt within
the bounds: a ``Progress`` snapshot of no tokens (the attempt started) and
one of ``tokens`` tokens, optionally an opaque one (bytes, which no extend
may follow), a ``Sealed`` sample with a reward, and an ``Extend`` of
``tokens`` tokens at the right offset (``start`` is the number of tokens the
sibling holds, whatever its attempt), one past it (a gap) and one before it
(an overlap); then two ``Reserve`` records (one no higher than the floor
the attempts set, one above it) and a ``Mark``. The record at position ``i`` carries tokens
of its own (ids ``100 * (i + 1) + j``, log-probs ``-(i + 1 + j) / 8``, exact
in float32, policy version ``i // 2``, so that some extends go on in the
last version run and some start a new one), and a seal the reward
``float(i)`` (0.0 included, which must stay apart from no reward): a token
duplicated, lost or taken from the wrong record cannot go unseen.

Episodes (``JournalBounds.turns``, issue 24) have an alphabet of their
own, for every sibling and attempt, resolved against the model as extends
are: a ``Turn`` with a call at the index of the episode's next turn, at the
index of its last (for its own attempt a turn out of order; for a newer
attempt a continuation that keeps the turns before it and replaces that
one) and one past the next (a gap); a ``Turn`` without a call (the
episode's last) at the next index; an ``Answer`` at the last turn under its
call's key (a pending call answered, or one answered again), and an
``Answer`` that names no pending call (a key no call has, at even
positions; the pending call's key at the turn after it, at odd ones); and
the sample records an episode meets: a ``Progress`` of tokens and an
``Extend`` at the right offset (the tokens of a turn being generated) and a
``Sealed``. Every call's key is ``call_key`` of its writer's identity, every
answer position ``i``'s own JSON, with a state at even positions and none at
odd ones. With two attempts this reaches an episode answered turn by turn,
a call left pending (the answer lost in a crash), the pending call answered
by a newer attempt under its stored key, a newer attempt continuing at any
durable turn, an answer of the stale attempt landing after it (fenced), a
turn after a turn without a call, and the seal that keeps the transcript.
Reservations and marks touch no episode and stay out of this alphabet.

The expected results come from a naive model written here, not from the
code under test: the fencing and continuation rules of proofs/JOURNAL.md
and the episode rules of docs/agents.md (TURN-CONTINUATION-EXACT,
FENCED-ANSWER-NEVER-TRAINED) restated over plain tuples (``_Model``),
``Reuse``'s rule restated (``_Model.reuse``), and the frame sizes restated
from the layout in ``_format``'s docstring (``_frame_size``). For every
sequence ``r`` of up to ``length`` records:

* EPISODES: when the model refuses the last record (a turn that is not the
  episode's next, a turn while a call is pending or after a turn without a
  call, a continuation past the answered turns, an answer with no call
  pending, for an unknown key or for another turn), ``replay(r)`` and
  ``compact(r, W)`` raise ``JournalEpisodeError`` naming that record's index
  and episode, and nothing is appended after it (the journal is damaged
  from there; its writer checks first and never appends one). Otherwise the
  state's episodes are the model's turn by turn (tokens, call and key,
  answer, state), its ``pending`` call is the one made, under the key it
  was made with, and ``answered`` counts the settled turns
  (TURN-CONTINUATION-EXACT, TOOL-AT-MOST-ONCE: the key a retry re-issues
  is the stored one); no episode holds an answer of a fenced attempt
  (FENCED-ANSWER-NEVER-TRAINED). Of episodes, nothing is appended after a
  record replay ignores either: replay is a fold over the state, which the
  check of that sequence found unchanged, so what may follow it is what
  may follow the sequence before it (an argument about replay, not a
  check; the sample alphabets do append after ignored records).
* REUSE: ``reusable(replay(r), Reuse.within(k), fork, step)`` is the
  model's, at a fork past every version and at one whose later versions
  are of the dead branch: a sample's young prefix, an episode's leading
  young turns (REUSE-OFF-POLICY in proofs/SAMPLES.md).

* FENCING and CONTINUATION-EXACT: ``replay(r)`` is the model's state: the
  same siblings, each with the model's attempt, seal and payload (for a
  running attempt, exactly its snapshot's tokens, log-probs and versions
  and then each accepted extend's, every extend at a wrong offset ignored),
  the same count of ignored records, reservation, ``next_attempt`` and
  leases; a running sample continued after a resume (``continue_sample``)
  is its tokens and then exactly the new ones, in the version each was made
  by, and a sealed one is refused.
* COMPACTION-PRESERVES-WINDOW: for every window (every set of ordinals),
  ``compact(r, W)`` is exactly one record per sibling of ``W`` that has a
  state, ascending, carrying that state (a sealed sibling's seal, a running
  one's whole snapshot, the attempt kept), then the highest reservation if
  any, and nothing else; it replays to the model's state on ``W`` (and to
  the real ``replay(r).restrict(W)``); and for every split ``r = J + K``,
  ``replay(compact(J, W) + K)`` agrees with the model of ``r`` on ``W``: a
  compacted journal that is appended to loses nothing the window needs
  (``K`` less the turns and answers of ordinals outside ``W``: a
  compaction dropped their episodes, and nothing of an ordinal a resume
  no longer needs is appended after it; replay would refuse them).
  Compaction keeps an episode as its turns and answers under the current
  attempt, each call with the key it was made with (TOOL-AT-MOST-ONCE).

For every sequence of up to ``cut_length`` records, over the bytes ``F`` of
``encode(header, r)`` (frames ``0..n``, the header first):

* JOURNAL-PREFIX: ``F`` begins with the encoding of ``r[:-1]`` and its last
  frame has the size the layout gives; ``F`` decodes to exactly ``r``;
  every cut of ``F`` inside its last frame decodes to exactly ``r[:-1]``,
  whose replay is the model's state of ``r[:-1]`` (what is durable replays
  to a prefix of what was appended, in order); the last frame repeated, or
  the frame before it dropped or moved after it, is a
  ``JournalSequenceError`` at its offset, naming the sequence numbers due
  and found (the header dropped or moved: an error at offset 0).
* TORN-TAIL-ONLY: each such cut is reported as a torn tail at the last
  frame's offset, of the cut's byte count and its shape; a cut of the
  header is an error at offset 0 (the header is never a torn tail); every
  byte of the last frame flipped (by each of ``masks``) is a torn tail when
  it is in the body or the frame check, an error at the frame's offset when
  it is in the head; every byte of the frame before it flipped, or that
  frame zeroed, is an error at that frame's offset, never a shorter
  journal. Group commit: for every split of ``r`` into the records synced
  and the group after them (written with one ``write``), a kill leaves any
  byte prefix of the group (the cuts), and a power cut may leave any byte
  prefix of the group with zeros after it to the end (none of it included),
  or zero bytes past the end: each decodes to the synced records and the
  group's frames left whole, and a torn tail of exactly the bytes from the
  first frame cut, in the shape the rule gives (``_Bytes.expect``); the
  same file with its last byte written after the zeros (data after a zeroed
  region) is an error at that frame, unless that frame is the last (a last
  frame failing its check).

Why the last frame only: the encoding is checked to be prefix-closed, so a
cut anywhere in the file of ``r`` is a cut inside the last frame of the file
of a prefix of ``r``, and every cut of every file is checked once. A flip in
frame ``k`` is checked with no frame after ``k`` and with one; with more,
the decoder, which must stop at ``k``, reads past ``k`` only to learn
whether ``k`` is the last frame and where the zeros at the end begin
(inside ``k`` or past it), which one frame answers as many would (an
argument about the decoder, not a check). Likewise a group is checked with
up to ``cut_length`` frames: the frames of a group after the one cut short
are zero, and the decoder never reads them as frames.

Why a second length: the decoder does not read what the records mean, so
every kind of frame after every other kind is reached by short sequences,
while fencing, continuation and compaction need longer ones, and every byte
operation costs a decode of the whole file; ``cut_length`` keeps the byte
checks where they reach something new at a cost CI can pay.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Final, NamedTuple

import attrs

from .._events import Lease
from ..journal._compact import compact
from ..journal._errors import JournalCorruptError, JournalEpisodeError, JournalSequenceError
from ..journal._format import FORMAT, Decoded, TornTail, decode, encode
from ..journal._records import (
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
    call_key,
)
from ..journal._replay import JournalState, TurnState, replay
from ..journal._reuse import Reuse, continue_sample, reusable
from ._explore import InvariantViolation, _Trace, breadth_first

Key = tuple[int, int]

# The frame layout, restated from ``_format``'s docstring (not imported: the
# sizes the checker expects must not come from the code it checks).
_HEAD: Final = 20  # body length u32, sequence u64, kind u8, 3 reserved, head check u32
_OVERHEAD: Final = _HEAD + 4  # and the frame check after the body
_SIBLING_FIELDS: Final = 8 + 4 + 4 + 1  # ordinal, sibling, attempt, payload kind
_EXTEND_FIELDS: Final = _SIBLING_FIELDS + 4  # and start
_TOKEN_COUNTS: Final = 4 + 4 + 1 + 8  # n, runs, has_reward, reward
_EPISODE_FIELDS: Final = 8 + 4 + 4 + 4  # ordinal, sibling, attempt, turn

#: The torn-tail shapes, as ``TornTail.reason`` names them.
_SHORT_HEAD: Final = "an incomplete frame head"
_CUT_SHORT: Final = "a frame cut short"
_BAD_LAST: Final = "the last frame fails its check"
_ZERO_HEAD: Final = "zero bytes where a frame head belongs"
_CUT_BY_ZEROS: Final = "a frame cut short by zero bytes"
#: Zero bytes past the end that a power cut may leave (the file extended,
#: its data not written): fewer than a head, one, and more.
_ZERO_TAILS: Final = (1, _HEAD - 1, _HEAD, _HEAD + 1, _OVERHEAD + 8)
#: The token a resumed engine generates next (``_Checker.continuation``).
_NEXT_ID: Final = 7


@attrs.frozen
class JournalBounds:
    """The small scope: the siblings ``(o, s)`` for ``o < ordinals`` and
    ``s < siblings``, attempts ``0..attempts-1``, every sequence of up to
    ``length`` appends, the byte checks for those of up to ``cut_length``
    (at most ``length``), ``tokens`` tokens in each non-empty payload, an
    opaque ``Progress`` in the alphabet when ``opaque``, every flipped byte
    XORed with each of ``masks``, and the header's ``base``.

    ``turns``: 0 for the alphabet of samples; else the alphabet of episodes
    of up to ``turns`` turns (turn indexes ``0..turns-1``): ``Turn`` and
    ``Answer`` records and the sample records that meet an episode (the
    module docstring). ``voids``: the episode alphabet also holds an empty
    ``Progress`` of each attempt, the record a failure journals to void
    what an older attempt held (``Run.fail``, ``failed``, ``evicted``), so
    every episode sequence meets a failure at every point."""

    ordinals: int = 2
    siblings: int = 2
    attempts: int = 2
    length: int = 2
    cut_length: int = 1
    tokens: int = 1
    opaque: bool = False
    masks: tuple[int, ...] = (0xFF,)
    base: int = 0
    turns: int = 0
    voids: bool = False

    def __attrs_post_init__(self) -> None:
        for name in ("ordinals", "siblings", "attempts", "tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.cut_length <= self.length:
            raise ValueError(f"cut_length must be in [0, length], got {self.cut_length}")
        if not self.masks or not all(0 < m < 256 for m in self.masks):
            raise ValueError(f"masks must be non-zero bytes, got {self.masks}")
        if self.turns < 0:
            raise ValueError(f"turns must be at least 0, got {self.turns}")


@attrs.frozen
class JournalReport:
    """What an exploration covered: the ``sequences`` of appends (the empty
    one included), of which ``framed`` had their bytes checked; the decodes
    of a cut, of a flipped byte, of zero bytes (a group's first bytes and
    zeros after them, the same with the last byte after the zeros, a frame
    zeroed, zeros past the end) and of spliced frames checked
    (``torn_tails`` and ``refused`` count them by what was expected: a torn
    tail reported, or an error naming its offset), and the torn tails of
    each shape (``TornTail.reason``); the compactions checked, and the
    ``splits`` ``J + K`` checked with ``J`` compacted; and how often the
    rules under test fired (extends accepted and ignored, other records
    fenced, seals superseded by a newer attempt), so that a vacuous run
    shows.

    Episodes (``JournalBounds.turns``): the turns appended by their own
    attempt, the answers attached to their pending call, the episodes
    continued by a newer attempt (a turn keeping the leading answered
    turns, or an answer to the pending call), the answers of a fenced
    attempt ignored, the sequences that leave a call pending (a lost
    answer, as a crash leaves it), and the sequences whose last record
    replay must refuse (``JournalEpisodeError``), counted by the rule it
    breaks (``episode_errors``). ``reuses``: the states whose
    ``Reuse.within`` was checked, once per limit."""

    bounds: JournalBounds
    sequences: int
    framed: int
    cuts: int
    flips: int
    zero_tails: int
    splices: int
    torn_tails: int
    refused: int
    shapes: tuple[tuple[str, int], ...]
    compactions: int
    splits: int
    extends_accepted: int
    extends_ignored: int
    fenced: int
    seals_superseded: int
    turns_appended: int = 0
    answers_accepted: int = 0
    continuations: int = 0
    answers_fenced: int = 0
    pending: int = 0
    episode_errors: tuple[tuple[str, int], ...] = ()
    reuses: int = 0


# -- the naive model -------------------------------------------------------------


class _Tokens(NamedTuple):
    """A token payload as plain values, one entry per token."""

    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    versions: tuple[int, ...]
    reward: float | None


class _Opaque(NamedTuple):
    """A bytes or JSON payload."""

    kind: str
    value: bytes | str


_Plain = _Tokens | _Opaque

#: What a sibling holds after a turn or an answer: no tokens of the next
#: turn yet.
_NOTHING: Final = _Tokens((), (), (), None)


class _Call(NamedTuple):
    """A tool call: the tool's name, its JSON args' text, its idempotency key."""

    name: str
    args: str
    key: str


class _Turn(NamedTuple):
    """A durable turn: the policy's tokens, its call (``None``: the
    episode's last turn), and the answer and environment state once an
    answer was accepted."""

    tokens: _Tokens
    call: _Call | None
    answer: _Plain | None = None
    state: _Plain | None = None


class _Answered(NamedTuple):
    """An ``Answer`` record's answer and state."""

    answer: _Plain
    state: _Plain | None


class _Sibling(NamedTuple):
    attempt: int
    sealed: bool
    payload: _Plain
    turns: tuple[_Turn, ...] = ()


#: The episode rules a record can break, by name (``JournalReport.episode_errors``).
_OUT_OF_ORDER: Final = "a turn that is not the episode's next"
_AFTER_LAST: Final = "a turn after a turn without a call"
_AFTER_PENDING: Final = "a turn while a call is pending"
_PAST_ANSWERED: Final = "a continuation past the answered turns"
_NOT_PENDING: Final = "an answer with no call pending"
_UNKNOWN_KEY: Final = "an answer for an unknown key"
_WRONG_TURN: Final = "an answer for another turn"
_REFUSED: Final = "refused: "


@attrs.frozen
class _Model:
    """Replay restated over plain values: each sibling's attempt, seal,
    payload and episode, the highest reservation, the records ignored, and
    the answers of fenced attempts (which no episode may hold)."""

    siblings: Mapping[Key, _Sibling] = attrs.field(factory=dict)
    reserved: int = 0
    fenced: int = 0
    stale: frozenset[_Plain] = frozenset()

    def step(self, record: Record, plain: _Plain | _Turn | _Answered | None) -> tuple[_Model, str]:
        """The model after ``record`` (whose payload is ``plain``), and what
        happened to the record (``_REFUSED`` and the rule it breaks, for a
        record replay must refuse: the model is then unchanged)."""
        if isinstance(record, Mark):
            return self, "mark"
        if isinstance(record, Reserve):
            return attrs.evolve(self, reserved=max(self.reserved, record.below)), "reserve"
        key = (record.ordinal, record.sibling)
        current = self.siblings.get(key)
        if isinstance(record, Turn | Answer):
            return self._episode(key, current, record, plain)
        assert isinstance(plain, _Tokens | _Opaque)
        ignored = attrs.evolve(self, fenced=self.fenced + 1)
        # A record of the sibling's own attempt keeps its episode (a seal:
        # as its transcript); one of a newer attempt starts afresh.
        turns = current.turns if current is not None and current.attempt == record.attempt else ()
        if isinstance(record, Extend):
            # Only the next tokens of the same running attempt, exactly.
            if (
                current is None
                or current.attempt != record.attempt
                or current.sealed
                or not isinstance(current.payload, _Tokens)
                or len(current.payload.ids) != record.start
                or not isinstance(plain, _Tokens)
            ):
                return ignored, "extend ignored"
            held = current.payload
            joined = _Tokens(
                held.ids + plain.ids,
                held.logprobs + plain.logprobs,
                held.versions + plain.versions,
                None,
            )
            return self._with(key, _Sibling(record.attempt, False, joined, turns)), "extended"
        if current is None or record.attempt > current.attempt:
            outcome = "superseded" if current is not None and current.sealed else "accepted"
        elif record.attempt == current.attempt and not current.sealed:
            outcome = "accepted"
        else:
            return ignored, "fenced"
        sibling = _Sibling(record.attempt, isinstance(record, Sealed), plain, turns)
        return self._with(key, sibling), outcome

    def _episode(
        self,
        key: Key,
        current: _Sibling | None,
        record: Turn | Answer,
        plain: _Plain | _Turn | _Answered | None,
    ) -> tuple[_Model, str]:
        """The episode rules of docs/agents.md and proofs/JOURNAL.md
        (TURN-CONTINUATION-EXACT, FENCED-ANSWER-NEVER-TRAINED), restated."""
        a, t = record.attempt, record.turn
        if current is not None and (
            a < current.attempt or (current.sealed and a == current.attempt)
        ):
            # A stale attempt, or the sealed one: ignored like any of its records.
            if isinstance(plain, _Answered):
                stale = self.stale | {plain.answer}
                return attrs.evolve(self, fenced=self.fenced + 1, stale=stale), "answer fenced"
            return attrs.evolve(self, fenced=self.fenced + 1), "fenced"
        turns = current.turns if current is not None else ()
        newer = current is not None and a > current.attempt
        last = turns[-1] if turns else None
        if isinstance(record, Turn):
            assert isinstance(plain, _Turn)
            if current is not None and not newer:
                # Its own attempt: the next turn, after a call that was answered.
                if t != len(turns):
                    return self, _REFUSED + _OUT_OF_ORDER
                if last is not None and last.call is None:
                    return self, _REFUSED + _AFTER_LAST
                if last is not None and last.answer is None:
                    return self, _REFUSED + _AFTER_PENDING
            else:
                # A newer attempt (or the first) continues the episode: it
                # keeps the first t turns, each a call that was answered.
                if t > len(turns):
                    return self, _REFUSED + _PAST_ANSWERED
                if any(x.call is None for x in turns[:t]):
                    return self, _REFUSED + _AFTER_LAST
                if any(x.answer is None for x in turns[:t]):
                    return self, _REFUSED + _PAST_ANSWERED
            outcome = "continued" if newer and t else "turn"
            return self._with(key, _Sibling(a, False, _NOTHING, (*turns[:t], plain))), outcome
        assert isinstance(plain, _Answered)
        # The pending call of the last turn, under the key it was made with,
        # by its attempt or a newer one (which takes the episode over).
        if last is None or last.call is None or last.answer is not None:
            return self, _REFUSED + _NOT_PENDING
        if t != len(turns) - 1:
            return self, _REFUSED + _WRONG_TURN
        if record.key != last.call.key:
            return self, _REFUSED + _UNKNOWN_KEY
        answered = last._replace(answer=plain.answer, state=plain.state)
        sibling = _Sibling(a, False, _NOTHING, (*turns[:-1], answered))
        return self._with(key, sibling), "continued" if newer else "answered"

    def _with(self, key: Key, sibling: _Sibling) -> _Model:
        siblings = dict(self.siblings)
        siblings[key] = sibling
        return attrs.evolve(self, siblings=siblings)

    def on(self, window: frozenset[int]) -> dict[Key, _Sibling]:
        return {k: v for k, v in self.siblings.items() if k[0] in window}

    @property
    def next_attempt(self) -> int:
        return max([self.reserved, *(v.attempt + 1 for v in self.siblings.values())])

    def leases(self, sealed: bool) -> tuple[Lease, ...]:
        return tuple(
            Lease(o, s, v.attempt)
            for (o, s), v in sorted(self.siblings.items())
            if v.sealed is sealed
        )

    def reuse(self, max_age: int, fork: int, step: int) -> dict[Key, _Sibling]:
        """What ``Reuse.within(max_age)`` lets a resume at ``fork``, training
        ``step`` next, take (``Reuse``'s docstring, restated): of a sample,
        its young prefix (the whole sample, a seal included, if every token
        is young; a prefix to continue, no reward, if only some leading ones
        are; nothing if the first is old, or if it has no versions); of an
        episode, the leading turns whose every token is young, each whole
        (and, if all are, the young prefix of the turn in progress), unless
        the episode is sealed and young throughout, its sample and every
        turn: then it is kept as it is, like a sealed sample."""

        def young(tokens: _Plain) -> int:
            if not isinstance(tokens, _Tokens):
                return -1  # no versions to age
            for n, v in enumerate(tokens.versions):
                # The age along the lineage: a token of the branch that died
                # at the fork counts its distance through the fork.
                if step - (v if v <= fork else 2 * fork - v) > max_age:
                    return n
            return len(tokens.ids)

        def prefix(tokens: _Plain) -> _Tokens:
            n = max(young(tokens), 0)
            assert isinstance(tokens, _Tokens) or n == 0
            if not isinstance(tokens, _Tokens):
                return _NOTHING
            return _Tokens(tokens.ids[:n], tokens.logprobs[:n], tokens.versions[:n], None)

        def whole(tokens: _Plain) -> bool:
            return isinstance(tokens, _Tokens) and young(tokens) == len(tokens.ids)

        out: dict[Key, _Sibling] = {}
        for key, v in self.siblings.items():
            if not v.turns:
                if whole(v.payload):
                    out[key] = v
                elif young(v.payload) > 0:
                    out[key] = _Sibling(v.attempt, False, prefix(v.payload))
                continue
            if v.sealed and whole(v.payload) and all(whole(t.tokens) for t in v.turns):
                out[key] = v
                continue
            kept = next((n for n, t in enumerate(v.turns) if not whole(t.tokens)), len(v.turns))
            if kept == 0:
                continue
            held = prefix(v.payload) if kept == len(v.turns) and not v.sealed else _NOTHING
            out[key] = _Sibling(v.attempt, False, held, v.turns[:kept])
        return out

    def compaction(self, window: frozenset[int]) -> list[tuple[object, ...]]:
        """COMPACTION-PRESERVES-WINDOW's records, as ``_Checker.record``
        views them: one per sibling of the window, ascending (for an
        episode: each turn and its answer under the current attempt, the
        keys those the calls were made with, then its seal, or its progress
        if it holds tokens), then the reservation if any."""
        out: list[tuple[object, ...]] = []
        for (o, s), v in sorted(self.on(window).items()):
            a = v.attempt
            for t, x in enumerate(v.turns):
                out.append(("turn", o, s, a, t, x.tokens, x.call))
                if x.call is not None and x.answer is not None:
                    out.append(("answer", o, s, a, t, x.call.key, x.answer, x.state))
            if v.sealed or not v.turns or v.payload != _NOTHING:
                out.append(("sealed" if v.sealed else "progress", o, s, a, v.payload))
        if self.reserved:
            out.append(("reserve", self.reserved))
        return out


# -- the alphabet ----------------------------------------------------------------


class _Symbol(NamedTuple):
    """A move: what to append, resolved against the model (an extend's
    offset is relative to what its sibling holds, a turn's to the turns its
    episode holds)."""

    kind: str
    ordinal: int = 0
    sibling: int = 0
    attempt: int = 0
    arg: int = 0  # progress: tokens; extend, turn: offset from the next one; reserve: below


#: The calls' tool and the namespace of their keys (``call_key``).
_TOOL: Final = "tool"
_NAMESPACE: Final = "explore"
#: The key of an answer that names no call of the episode.
_UNKNOWN: Final = "unknown"


def _alphabet(bounds: JournalBounds) -> tuple[_Symbol, ...]:
    out: list[_Symbol] = []
    for o, s, a in itertools.product(
        range(bounds.ordinals), range(bounds.siblings), range(bounds.attempts)
    ):
        if bounds.turns:
            # Episodes: the next turn with a call, the same turn again (out
            # of order for its attempt; for a newer one, a continuation
            # that replaces it) and the one after it (a gap); the next turn
            # without a call (the last); the answer to the last call, under
            # its key, and one under a key no call has; and the sample
            # records an episode meets: the tokens of a turn being
            # generated (a snapshot, an extend), and the seal.
            out += [_Symbol("turn", o, s, a, d) for d in (0, -1, 1)]
            out += [_Symbol("last turn", o, s, a), _Symbol("answer", o, s, a)]
            out += [_Symbol("unknown answer", o, s, a), _Symbol("progress", o, s, a, bounds.tokens)]
            out += [_Symbol("extend", o, s, a, 0), _Symbol("sealed", o, s, a)]
            if bounds.voids:
                out.append(_Symbol("progress", o, s, a, 0))
            continue
        out += [_Symbol("progress", o, s, a, 0), _Symbol("progress", o, s, a, bounds.tokens)]
        if bounds.opaque:
            out.append(_Symbol("opaque", o, s, a))
        out.append(_Symbol("sealed", o, s, a))
        out += [_Symbol("extend", o, s, a, d) for d in (0, 1, -1)]
    if bounds.turns:
        return tuple(out)  # reservations and marks touch no episode
    reserves = [_Symbol("reserve", arg=b) for b in (1, bounds.attempts + 1)]
    return (*out, *reserves, _Symbol("mark"))


def _tokens(i: int, n: int, reward: float | None) -> tuple[TokenPayload, _Tokens]:
    """Position ``i``'s own ``n`` tokens, packed and plain."""
    ids = tuple(100 * (i + 1) + j for j in range(n))
    logprobs = tuple(-(i + 1 + j) / 8 for j in range(n))
    versions = (i // 2,) * n
    return TokenPayload.of(ids, logprobs, versions, reward), _Tokens(
        ids, logprobs, versions, reward
    )


def _resolve(
    symbol: _Symbol, model: _Model, i: int, bounds: JournalBounds
) -> tuple[Record, _Plain | _Turn | _Answered | None] | None:
    """The record ``symbol`` appends at position ``i``, with its payload as
    plain values; ``None`` for an overlapping extend of a sibling that holds
    no token, and for a turn before the first or past the bounds."""
    kind, o, s, a, arg = symbol
    if kind == "reserve":
        return Reserve(arg), None
    if kind == "mark":
        return Mark(i), None
    if kind == "opaque":
        data = bytes([i])
        return Progress(o, s, a, BytesPayload(data)), _Opaque("bytes", data)
    if kind == "progress":
        payload, plain = _tokens(i, arg, None)
        return Progress(o, s, a, payload), plain
    if kind == "sealed":
        payload, plain = _tokens(i, bounds.tokens, float(i))
        return Sealed(o, s, a, payload), plain
    current = model.siblings.get((o, s))
    turns = current.turns if current is not None else ()
    if kind in ("turn", "last turn"):
        t = len(turns) + arg
        if not 0 <= t < bounds.turns:
            return None
        payload, plain = _tokens(i, bounds.tokens, None)
        if kind == "last turn":
            return Turn(o, s, a, t, payload), _Turn(plain, None)
        # Each call's own args and its writer's key (the key depends on the
        # attempt: a continuation that re-issues a call keeps the stored one).
        key = call_key(_NAMESPACE, o, s, a, t)
        call = ToolCall(_TOOL, JsonPayload.of(i), key)
        return Turn(o, s, a, t, payload, call), _Turn(plain, _Call(_TOOL, str(i), key))
    if kind in ("answer", "unknown answer"):
        # At the last turn, under its call's key (the tool answers the key
        # it was called with); an unknown answer: under a key no call has
        # (at even positions), or at the turn after the last (at odd ones).
        t = max(len(turns) - 1, 0)
        last = turns[-1].call if turns else None
        key = last.key if last is not None else call_key(_NAMESPACE, o, s, a, t)
        if kind == "unknown answer" and i % 2 == 0:
            key = _UNKNOWN
        elif kind == "unknown answer":
            t = len(turns)
        # Position i's own answer, and a state every other answer (an
        # answer's state is optional).
        state = BytesPayload(bytes([i])) if i % 2 == 0 else None
        answered = _Answered(
            _Opaque("json", str(i)), None if state is None else _Opaque("bytes", state.data)
        )
        return Answer(o, s, a, t, key, JsonPayload.of(i), state), answered
    held = current.payload if current is not None else None
    start = (len(held.ids) if isinstance(held, _Tokens) else 0) + arg
    if start < 0:
        return None
    payload, plain = _tokens(i, bounds.tokens, None)
    return Extend(o, s, a, start, payload), plain


def _label(record: Record, plain: _Plain | _Turn | _Answered | None) -> str:
    if isinstance(record, Turn):
        call = f" call {record.call.key}" if record.call is not None else " no call"
        what = f"Turn(o{record.ordinal} s{record.sibling} a{record.attempt} t{record.turn}"
        assert isinstance(plain, _Turn)
        return f"append {what} tokens {list(plain.tokens.ids)}{call})"
    if isinstance(record, Answer):
        what = f"Answer(o{record.ordinal} s{record.sibling} a{record.attempt} t{record.turn}"
        return f"append {what} key {record.key} {plain})"
    if not isinstance(record, Sealed | Progress | Extend):
        return f"append {record!r}"
    what = f"{type(record).__name__}(o{record.ordinal} s{record.sibling} a{record.attempt}"
    if isinstance(record, Extend):
        what += f" start {record.start}"
    if isinstance(plain, _Tokens):
        what += f" tokens {list(plain.ids)} v{list(plain.versions)}"
        if plain.reward is not None:
            what += f" reward {plain.reward}"
    else:
        what += f" {plain}"
    return f"append {what})"


def _payload_size(payload: Payload) -> int:
    """A payload's bytes in a body, by the layout."""
    if isinstance(payload, TokenPayload):
        versions = list(payload.versions())
        runs = sum(1 for j, v in enumerate(versions) if j == 0 or v != versions[j - 1])
        return _TOKEN_COUNTS + 8 * len(versions) + 8 * runs
    if isinstance(payload, BytesPayload):
        return len(payload.data)
    return len(payload.text.encode("utf-8"))


def _frame_size(record: Record) -> int:
    """A record's frame size by the layout: the head, the body, the check."""
    if isinstance(record, Mark | Reserve):
        return _OVERHEAD + 8
    if isinstance(record, Turn):
        call = record.call
        called = 1
        if call is not None:
            name, key = call.name.encode("utf-8"), call.key.encode("utf-8")
            called += 1 + len(name) + 1 + len(key) + 4 + len(call.args.text.encode("utf-8"))
        return _OVERHEAD + _EPISODE_FIELDS + called + _payload_size(record.payload)
    if isinstance(record, Answer):
        key = record.key.encode("utf-8")
        state = 0 if record.state is None else _payload_size(record.state)
        answer = 1 + 4 + _payload_size(record.payload)  # kind, length, bytes
        return _OVERHEAD + _EPISODE_FIELDS + 1 + len(key) + answer + 1 + state
    fields = _EXTEND_FIELDS if isinstance(record, Extend) else _SIBLING_FIELDS
    return _OVERHEAD + fields + _payload_size(record.payload)


def _header_size(header: JournalHeader) -> int:
    fingerprint, lineage = header.fingerprint.encode("utf-8"), header.lineage.encode("utf-8")
    identity = 1 + len(FORMAT) + 2 + 2 + len(fingerprint) + 1 + len(lineage) + 16
    return _OVERHEAD + identity + 4 + 16 * len(header.marks)


# -- the exploration -------------------------------------------------------------

#: A compaction as the checks hold it: its records, or what it raised (a
#: seeded bug may raise anything), per window; ``None`` for a sequence
#: replay must refuse (it has no compaction, and nothing is appended to it).
_Compacted = Mapping[frozenset[int], "tuple[Record, ...] | Exception"] | None


@attrs.frozen
class _Node:
    """A sequence of appends (its identity) and what the checks need of it:
    the model after it and after all but its last record (``durable``),
    what its last record did, its file (within ``cut_length``) and its
    parent's, and for every prefix ``r[:j]`` its compaction to every window."""

    records: tuple[Record, ...]
    model: _Model = attrs.field(eq=False)
    durable: _Model = attrs.field(eq=False)
    outcome: str = attrs.field(eq=False)
    file: bytes | None = attrs.field(eq=False)
    parent_file: bytes | None = attrs.field(eq=False)
    compacted: tuple[_Compacted, ...] = attrs.field(eq=False)


_COUNTERS: Final = (
    "framed cuts flips zero_tails splices torn_tails refused compactions splits "
    "extended ignored fenced superseded turn answered continued stale pending reuses"
).split()


#: What the model calls a record replay ignores.
_IGNORED: Final = frozenset({"fenced", "answer fenced", "extend ignored"})


def _compaction(
    records: tuple[Record, ...], window: frozenset[int]
) -> tuple[Record, ...] | Exception:
    try:
        return compact(records, window)
    except Exception as exc:  # a seeded bug may raise anything: report it
        return exc


def explore_journal(bounds: JournalBounds) -> JournalReport:
    """Check every sequence of appends within ``bounds`` (module docstring);
    raise ``InvariantViolation`` at the first broken invariant, with the
    shortest sequence that breaks it and, in ``detail``, the byte operation
    if there was one."""
    checker = _Checker(bounds)
    alphabet = _alphabet(bounds)

    def node(
        records: tuple[Record, ...],
        model: _Model,
        durable: _Model,
        outcome: str,
        parent: _Node | None,
    ) -> _Node:
        compacted: _Compacted = None
        if not outcome.startswith(_REFUSED):
            compacted = {w: _compaction(records, w) for w in checker.windows}
        return _Node(
            records,
            model,
            durable,
            outcome,
            encode(checker.header, records) if len(records) <= bounds.cut_length else None,
            parent.file if parent else None,
            (*(parent.compacted if parent else ()), compacted),
        )

    def successors(parent: _Node, trace: _Trace) -> Iterator[tuple[str, _Node]]:
        # Nothing follows a record replay refuses: the journal is damaged
        # from there on (and its writer never appends one). Of episodes,
        # nothing follows a record replay ignores either (module docstring).
        if len(parent.records) == bounds.length or parent.outcome.startswith(_REFUSED):
            return
        if bounds.turns and parent.outcome in _IGNORED:
            return
        i = len(parent.records)
        for symbol in alphabet:
            resolved = _resolve(symbol, parent.model, i, bounds)
            if resolved is None:
                continue
            record, plain = resolved
            model, outcome = parent.model.step(record, plain)
            child = node((*parent.records, record), model, parent.model, outcome, parent)
            yield _label(record, plain), child

    empty = _Model()
    sequences, _ = breadth_first(
        node((), empty, empty, "", None), successors, checker.visit, lambda n: n.records
    )
    c = checker.counters
    return JournalReport(
        bounds=bounds,
        sequences=sequences,
        framed=c["framed"],
        cuts=c["cuts"],
        flips=c["flips"],
        zero_tails=c["zero_tails"],
        splices=c["splices"],
        torn_tails=c["torn_tails"],
        refused=c["refused"],
        shapes=tuple(sorted(checker.shapes.items())),
        compactions=c["compactions"],
        splits=c["splits"],
        extends_accepted=c["extended"],
        extends_ignored=c["ignored"],
        fenced=c["fenced"],
        seals_superseded=c["superseded"],
        turns_appended=c["turn"],
        answers_accepted=c["answered"],
        continuations=c["continued"],
        answers_fenced=c["stale"],
        pending=c["pending"],
        episode_errors=tuple(sorted(checker.errors.items())),
        reuses=c["reuses"],
    )


class _Checker:
    """The checks of one exploration, with its counters and a cache of the
    plain views of the payloads it has read (a pure function of a payload's
    value, kept per exploration so that a patched method is always read)."""

    def __init__(self, bounds: JournalBounds) -> None:
        self.bounds = bounds
        # Fixed journal ids: an exploration is a pure function of its bounds.
        self.header = JournalHeader("explore", "journal", bounds.base, bytes(range(16)))
        #: Journals a frame may be copied from: the same run's journal
        #: created anew (another id), and another run's (another lineage).
        self.foreign = (
            attrs.evolve(self.header, journal_id=bytes(range(16, 32))),
            attrs.evolve(self.header, lineage="journaX"),
        )
        self.windows = tuple(
            frozenset(w)
            for r in range(bounds.ordinals + 1)
            for w in itertools.combinations(range(bounds.ordinals), r)
        )
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.shapes: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self._plain: dict[Payload, _Plain] = {}
        # The limits under which reuse is checked: at a fork past every
        # version (the oldest tokens dropped, the youngest kept), and at a
        # fork before the last versions, whose tokens are then of a dead
        # branch (their age counted through the fork).
        top = (bounds.length - 1) // 2
        self.reuses = ((0, top, top), (1, max(top - 1, 0), top))
        self._next = {
            v: TokenPayload.of([_NEXT_ID], [-0.5], v) for v in range(bounds.length // 2 + 2)
        }

    # What the code under test returned, as plain values.

    def plain(self, payload: Payload) -> _Plain:
        known = self._plain.get(payload)
        if known is not None:
            return known
        if isinstance(payload, TokenPayload):
            plain: _Plain = _Tokens(
                tuple(payload.tokens()),
                tuple(payload.logprobs()),
                tuple(payload.versions()),
                payload.reward,
            )
        elif isinstance(payload, BytesPayload):
            plain = _Opaque("bytes", payload.data)
        else:
            assert isinstance(payload, JsonPayload)
            plain = _Opaque("json", payload.text)
        self._plain[payload] = plain
        return plain

    def view(self, state: JournalState) -> dict[Key, _Sibling]:
        return {
            (o, s): _Sibling(
                x.attempt, x.sealed, self.plain(x.payload), tuple(self.turn(t) for t in x.turns)
            )
            for o, s, x in state.siblings()
        }

    def turn(self, turn: TurnState) -> _Turn:
        tokens = self.plain(turn.tokens)
        assert isinstance(tokens, _Tokens)
        return _Turn(
            tokens,
            self.call(turn.call),
            None if turn.answer is None else self.plain(turn.answer),
            None if turn.state is None else self.plain(turn.state),
        )

    @staticmethod
    def call(call: ToolCall | None) -> _Call | None:
        return None if call is None else _Call(call.name, call.args.text, call.key)

    def record(self, record: Record) -> tuple[object, ...]:
        if isinstance(record, Reserve):
            return ("reserve", record.below)
        if isinstance(record, Mark):
            return ("mark", record.checkpoint)
        o, s, a = record.ordinal, record.sibling, record.attempt
        if isinstance(record, Turn):
            return (
                "turn",
                o,
                s,
                a,
                record.turn,
                self.plain(record.payload),
                self.call(record.call),
            )
        if isinstance(record, Answer):
            state = None if record.state is None else self.plain(record.state)
            return ("answer", o, s, a, record.turn, record.key, self.plain(record.payload), state)
        kind = "extend" if isinstance(record, Extend) else type(record).__name__.lower()
        return (kind, o, s, a, self.plain(record.payload))

    # The checks.

    def visit(self, n: _Node, trace: _Trace) -> None:
        c = self.counters
        c["extended"] += n.outcome == "extended"
        c["ignored"] += n.outcome == "extend ignored"
        c["fenced"] += n.outcome in ("fenced", "answer fenced")
        c["stale"] += n.outcome == "answer fenced"
        c["superseded"] += n.outcome == "superseded"
        c["turn"] += n.outcome == "turn"
        c["answered"] += n.outcome == "answered"
        c["continued"] += n.outcome == "continued"
        if n.outcome.startswith(_REFUSED):
            self.refusal(n, trace)
        else:
            c["pending"] += any(
                v.turns and v.turns[-1].call and v.turns[-1].answer is None
                for v in n.model.siblings.values()
            )
            state = self.replay(n.records, n.model, trace)
            self.continuation(state, n.model, trace)
            self.reuse(state, n.model, trace)
            self.compaction(n, state, trace)
        if n.file is not None:
            c["framed"] += 1
            _Bytes(self, n, trace).check()

    def refusal(self, n: _Node, trace: _Trace) -> None:
        """The episode rules: a turn or an answer the model refuses is a
        ``JournalEpisodeError`` naming its index and its episode, from
        replay and from compaction alike (nothing of a damaged journal is
        replayed)."""
        reason = n.outcome[len(_REFUSED) :]
        self.errors[reason] = self.errors.get(reason, 0) + 1
        last = n.records[-1]
        assert isinstance(last, Turn | Answer)
        everything = frozenset(range(self.bounds.ordinals))
        for what, run in (("replay", replay), ("compact", lambda r: compact(r, everything))):
            try:
                run(n.records)
            except JournalEpisodeError as exc:
                where = (exc.index, exc.ordinal, exc.sibling)
                if where == (len(n.records) - 1, last.ordinal, last.sibling):
                    continue
                detail = f"raised {exc!r}, expected the index {len(n.records) - 1}"
            except Exception as exc:  # a seeded bug may raise anything: report it
                detail = f"raised {exc!r}, not a JournalEpisodeError"
            else:
                detail = "accepted it"
            raise InvariantViolation(
                "TURN-CONTINUATION-EXACT", f"{what} of {reason}: {detail}", trace()
            )

    def replay(self, records: tuple[Record, ...], model: _Model, trace: _Trace) -> JournalState:
        """FENCING, CONTINUATION-EXACT and the episode invariants: replay is
        the model; a pending call is the one made, under its stored key."""
        try:
            state = replay(records)
        except Exception as exc:  # a seeded bug may raise anything: report it
            invariant = (
                "TURN-CONTINUATION-EXACT" if isinstance(exc, JournalEpisodeError) else "FENCING"
            )
            raise InvariantViolation(invariant, f"replay raised {exc!r}", trace()) from None
        got = self.view(state)
        if got != model.siblings:
            raise InvariantViolation(
                _which(got, model.siblings, model.stale), _difference(got, model.siblings), trace()
            )
        facts = (state.fenced, state.reserved, state.next_attempt, state.sealed(), state.progress())
        want = (
            model.fenced,
            model.reserved,
            model.next_attempt,
            model.leases(True),
            model.leases(False),
        )
        if facts != want:
            raise InvariantViolation(
                "FENCING",
                f"replay's (fenced, reserved, next_attempt, sealed, progress) is {facts}, "
                f"expected {want}",
                trace(),
            )
        for o, s, x in state.siblings():
            turns = model.siblings[(o, s)].turns
            last = turns[-1] if turns else None
            pending = last.call if last is not None and last.answer is None else None
            if self.call(x.pending) != pending or x.answered != len(turns) - (pending is not None):
                raise InvariantViolation(
                    "TOOL-AT-MOST-ONCE",
                    f"sibling {(o, s)}: pending {x.pending}, {x.answered} turns settled; "
                    f"expected {pending}, {len(turns) - (pending is not None)}",
                    trace(),
                )
        return state

    def continuation(self, state: JournalState, model: _Model, trace: _Trace) -> None:
        """CONTINUATION-EXACT after a resume: a running sample continued is
        its durable tokens then exactly the new one, in the version each was
        made by, whether the new one goes on in the last version or not; a
        sealed sample is not a prefix."""
        for o, s, x in state.siblings():
            held = model.siblings[(o, s)].payload
            if not isinstance(x.payload, TokenPayload) or not isinstance(held, _Tokens):
                continue
            if x.sealed:
                try:
                    continue_sample(x.payload, self._next[0])
                except ValueError:
                    continue
                raise InvariantViolation(
                    "CONTINUATION-EXACT", f"sealed sibling {(o, s)} was continued", trace()
                )
            last = held.versions[-1] if held.versions else 0
            for version in (last, last + 1):
                got = self.plain(continue_sample(x.payload, self._next[version]))
                want = _Tokens(
                    (*held.ids, _NEXT_ID),
                    (*held.logprobs, -0.5),
                    (*held.versions, version),
                    None,
                )
                if got != want:
                    raise InvariantViolation(
                        "CONTINUATION-EXACT",
                        f"sibling {(o, s)} continued by one token of version {version} is "
                        f"{got}, expected {want}",
                        trace(),
                    )

    def reuse(self, state: JournalState, model: _Model, trace: _Trace) -> None:
        """REUSE-OFF-POLICY (proofs/SAMPLES.md) and, of an episode,
        TURN-CONTINUATION-EXACT: what ``Reuse.within`` keeps is the model's,
        for each of ``_REUSES``."""
        for max_age, fork, step in self.reuses:
            self.counters["reuses"] += 1
            got = self.view(reusable(state, Reuse.within(max_age), fork=fork, step=step))
            want = model.reuse(max_age, fork, step)
            if got != want:
                episode = any(v.turns for v in (*got.values(), *want.values()))
                raise InvariantViolation(
                    "TURN-CONTINUATION-EXACT" if episode else "REUSE-OFF-POLICY",
                    f"Reuse.within({max_age}) at fork {fork}, step {step}: "
                    + _difference(got, want),
                    trace(),
                )

    def compaction(self, n: _Node, state: JournalState, trace: _Trace) -> None:
        """COMPACTION-PRESERVES-WINDOW for every window and every split."""
        records, model = n.records, n.model
        compactions = n.compacted[-1]
        assert compactions is not None
        for window in self.windows:
            self.counters["compactions"] += 1
            compacted = compactions[window]
            if isinstance(compacted, Exception):
                raise InvariantViolation(
                    "COMPACTION-PRESERVES-WINDOW",
                    f"compact(records, {set(window)}) raised {compacted!r}",
                    trace(),
                )
            got = [self.record(r) for r in compacted]
            want = model.compaction(window)
            if got != want:
                raise InvariantViolation(
                    _compaction_invariant(got, want),
                    f"compact(records, {set(window)}) is {got}, expected {want}",
                    trace(),
                )
            again = self.replay_of(compacted, f"compact(records, {set(window)})", trace)
            if self.view(again) != model.on(window) or again.reserved != model.reserved:
                raise InvariantViolation(
                    "COMPACTION-PRESERVES-WINDOW",
                    f"compact(records, {set(window)}) replays to {self.view(again)}, "
                    f"reserved {again.reserved}",
                    trace(),
                )
            if again != state.restrict(window):
                raise InvariantViolation(
                    "COMPACTION-PRESERVES-WINDOW",
                    f"replay(compact(records, {set(window)})) is not replay(records).restrict",
                    trace(),
                )
            # Compacted after the first j records, then appended to: the
            # same state on the window as the whole journal. A turn or an
            # answer of an ordinal the compaction dropped is never appended
            # after it (the window holds every ordinal a resume can still
            # need): replay would refuse it, its episode gone.
            for j in range(1, len(records)):
                self.counters["splits"] += 1
                before = n.compacted[j]
                assert before is not None
                prefix = before[window]
                assert not isinstance(prefix, Exception)  # checked when it was visited
                after = tuple(
                    r
                    for r in records[j:]
                    if not isinstance(r, Turn | Answer) or r.ordinal in window
                )
                what = f"compacted to {set(window)} after {j} records, then appended to"
                later = self.replay_of(prefix + after, what, trace)
                on = {k: v for k, v in self.view(later).items() if k[0] in window}
                if on != model.on(window) or later.reserved != model.reserved:
                    raise InvariantViolation(
                        "COMPACTION-PRESERVES-WINDOW",
                        f"{what}: "
                        + _difference(on, model.on(window))
                        + f", reserved {later.reserved}",
                        trace(),
                    )

    @staticmethod
    def replay_of(records: tuple[Record, ...], what: str, trace: _Trace) -> JournalState:
        try:
            return replay(records)
        except Exception as exc:  # a seeded bug may raise anything: report it
            raise InvariantViolation(
                "COMPACTION-PRESERVES-WINDOW", f"{what}: replay raised {exc!r}", trace()
            ) from None


def _difference(got: Mapping[Key, _Sibling], want: Mapping[Key, _Sibling]) -> str:
    for key in sorted(set(got) | set(want)):
        if got.get(key) != want.get(key):
            return f"sibling {key} is {got.get(key)}, expected {want.get(key)}"
    return "the siblings agree"


def _keyless(turns: tuple[_Turn, ...]) -> tuple[_Turn, ...]:
    """``turns`` with every call's key blanked."""
    return tuple(t if t.call is None else t._replace(call=t.call._replace(key="")) for t in turns)


def _which(
    got: Mapping[Key, _Sibling], want: Mapping[Key, _Sibling], stale: frozenset[_Plain]
) -> str:
    """The invariant a replay that is not the model's breaks:
    FENCED-ANSWER-NEVER-TRAINED when an episode holds an answer of a fenced
    attempt; when every sibling has its expected attempt and seal,
    TOOL-AT-MOST-ONCE when a call's key is not the one it was made with,
    TURN-CONTINUATION-EXACT when an episode differs otherwise, and
    CONTINUATION-EXACT when only running samples differ; FENCING otherwise."""
    if any(t.answer in stale for v in got.values() for t in v.turns):
        return "FENCED-ANSWER-NEVER-TRAINED"
    if set(got) != set(want) or any(got[k][:2] != want[k][:2] for k in want):
        return "FENCING"
    differ = [k for k in want if got[k].turns != want[k].turns]
    if differ:
        if all(_keyless(got[k].turns) == _keyless(want[k].turns) for k in differ):
            return "TOOL-AT-MOST-ONCE"
        return "TURN-CONTINUATION-EXACT"
    if all(got[k] == want[k] or not want[k].sealed for k in want):
        return "CONTINUATION-EXACT"
    return "FENCING"


def _compaction_invariant(got: list[tuple[object, ...]], want: list[tuple[object, ...]]) -> str:
    """TOOL-AT-MOST-ONCE when a compaction keeps the calls and answers but
    not under the keys they were made with; COMPACTION-PRESERVES-WINDOW
    otherwise."""

    def keyless(records: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
        out = []
        for r in records:
            if r[0] == "turn" and isinstance(r[6], _Call):
                r = (*r[:6], r[6]._replace(key=""))
            elif r[0] == "answer":
                r = (*r[:5], "", *r[6:])
            out.append(r)
        return out

    if got != want and keyless(got) == keyless(want):
        return "TOOL-AT-MOST-ONCE"
    return "COMPACTION-PRESERVES-WINDOW"


def _decoded(data: bytes) -> Decoded | Exception:
    try:
        return decode(data)
    except Exception as exc:  # a seeded bug may raise anything: report it
        return exc


class _Bytes:
    """JOURNAL-PREFIX and TORN-TAIL-ONLY over one sequence's file (module
    docstring): its last frame starts at ``last``, the frame before it at
    ``previous``. Each decode is named by a format string and its
    arguments, formatted only for a violation (there are many decodes)."""

    def __init__(self, checker: _Checker, n: _Node, trace: _Trace) -> None:
        assert n.file is not None
        self.checker = checker
        self.counters = checker.counters
        self.header = checker.header
        self.n = n
        self.trace = trace
        self.data = n.file
        self.records = n.records
        self.kept = n.records[:-1]
        self.last = len(n.parent_file) if n.parent_file is not None else 0
        self.previous = self.last - _frame_size(n.records[-2]) if len(n.records) >= 2 else 0

    def fail(
        self, invariant: str, what: str, args: tuple[object, ...], detail: str
    ) -> InvariantViolation:
        return InvariantViolation(invariant, f"{what.format(*args)}: {detail}", self.trace())

    def torn(
        self, data: bytes, kept: tuple[Record, ...], tail: TornTail | None, what: str, *args: object
    ) -> Decoded:
        """``data`` decodes to ``kept`` and reports ``tail``."""
        got = _decoded(data)
        if tail is not None:
            self.counters["torn_tails"] += 1
            shapes = self.checker.shapes
            shapes[tail.reason] = shapes.get(tail.reason, 0) + 1
        if isinstance(got, Exception):
            raise self.fail(
                "TORN-TAIL-ONLY",
                what,
                args,
                f"raised {got!r}, expected {len(kept)} records and {tail}",
            )
        if got.records != kept or got.header != self.header:
            raise self.fail(
                "JOURNAL-PREFIX",
                what,
                args,
                f"decoded {len(got.records)} records {got.records!r:.300}, expected the first "
                f"{len(kept)} appended",
            )
        end = len(data) - (tail.length if tail else 0)
        if got.torn != tail or got.end != end:
            raise self.fail(
                "TORN-TAIL-ONLY",
                what,
                args,
                f"reported end {got.end} and torn tail {got.torn}, expected {end} and {tail}",
            )
        return got

    def refused(
        self,
        data: bytes,
        offset: int,
        what: str,
        *args: object,
        due: tuple[int, int] | None = None,
        invariant: str = "TORN-TAIL-ONLY",
    ) -> None:
        """``data`` is an error naming ``offset`` (a sequence error with
        ``due`` = (expected, found), if given)."""
        got = _decoded(data)
        self.counters["refused"] += 1
        if not isinstance(got, JournalCorruptError):
            raise self.fail(
                invariant,
                what,
                args,
                f"decoded as {got!r:.300}, expected an error naming byte {offset}",
            )
        wrong = got.offset != offset
        if due is not None:
            wrong = wrong or not (
                isinstance(got, JournalSequenceError) and (got.expected, got.found) == due
            )
        if wrong:
            expected = f"an error at byte {offset}"
            if due is not None:
                expected += f", sequence number {due[1]} where {due[0]} was due"
            raise self.fail(invariant, what, args, f"{got!r}, expected {expected}")

    def check(self) -> None:
        data, records, last = self.data, self.records, self.last
        n = self.n
        if n.parent_file is not None and not data.startswith(n.parent_file):
            raise InvariantViolation(
                "JOURNAL-PREFIX",
                "the encoding does not begin with the encoding of all records but the last",
                self.trace(),
            )
        size = _frame_size(records[-1]) if records else _header_size(self.header)
        if len(data) - last != size:
            raise InvariantViolation(
                "JOURNAL-PREFIX",
                f"the last frame is {len(data) - last} bytes, the layout says {size}",
                self.trace(),
            )
        self.torn(data, records, None, "the whole file")
        self.cuts()
        self.flips()
        self.zeros()
        if records:
            self.splices()

    def cuts(self) -> None:
        """Every cut inside the last frame (a kill during its group's write)."""
        data, last = self.data, self.last
        if not self.records:
            for cut in range(len(data)):
                self.counters["cuts"] += 1
                self.refused(data[:cut], 0, "the header cut at byte {}", cut)
            return
        durable: tuple[Record, ...] = ()
        for cut in range(last + 1, len(data)):
            self.counters["cuts"] += 1
            left = cut - last
            tail = TornTail(last, left, _SHORT_HEAD if left < _HEAD else _CUT_SHORT)
            got = self.torn(data[:cut], self.kept, tail, "cut at byte {} of {}", cut, len(data))
            durable = got.records
        # What is durable replays to the state of a prefix of what was appended.
        state = self.checker.view(replay(durable))
        if state != self.n.durable.siblings:
            raise InvariantViolation(
                "JOURNAL-PREFIX",
                "the durable records replay to another state: "
                + _difference(state, self.n.durable.siblings),
                self.trace(),
            )

    def flips(self) -> None:
        """Every byte of the last frame, and of the frame before it, flipped;
        that frame zeroed."""
        data, last, previous = self.data, self.last, self.previous
        masks = self.checker.bounds.masks
        whole = TornTail(last, len(data) - last, _BAD_LAST)
        for at, mask in itertools.product(range(last, len(data)), masks):
            self.counters["flips"] += 1
            bad = bytearray(data)
            bad[at] ^= mask
            what = "byte {} XOR {:#04x}, in the last frame (at {})"
            if self.records and at >= last + _HEAD:
                self.torn(bytes(bad), self.kept, whole, what, at, mask, last)
            else:
                self.refused(bytes(bad), last, what, at, mask, last)
        if not self.records:
            return
        for at, mask in itertools.product(range(previous, last), masks):
            self.counters["flips"] += 1
            bad = bytearray(data)
            bad[at] ^= mask
            what = "byte {} XOR {:#04x}, in the frame at {}, not the last"
            self.refused(bytes(bad), previous, what, at, mask, previous)
        self.counters["zero_tails"] += 1
        zeroed = data[:previous] + bytes(last - previous) + data[last:]
        self.refused(zeroed, previous, "the frame at {} zeroed, not the last", previous)

    def expect(self, damaged: bytes, at: int, synced: int, what: str, *args: object) -> None:
        """TORN-TAIL-ONLY's rule, restated: ``damaged`` is this file with
        bytes changed only from ``at`` on, where the frame of record
        ``synced`` begins. The frames from there identical to those written
        are sound; the first that differs fails a check (no byte is assumed
        to differ in a way CRC-32 misses). With ``zeros`` where the file's
        all-zero suffix begins, it is a torn tail of all the bytes from it
        when its head differs and the zeros begin at it or inside the head;
        when its head is intact and it ends at the end of the file or the
        zeros begin inside it; otherwise an error at its offset."""
        kept = self.records[:synced]
        for record in self.records[synced:]:
            size = _frame_size(record)
            if damaged[at : at + size] != self.data[at : at + size]:
                break
            kept += (record,)
            at += size
        else:
            self.torn(damaged, kept, None, what, *args)
            return
        zeros = len(damaged.rstrip(b"\0"))
        end = at + _frame_size(self.records[len(kept)])
        if damaged[at : at + _HEAD] != self.data[at : at + _HEAD]:
            shape = _ZERO_HEAD if zeros <= at else _CUT_BY_ZEROS if zeros < at + _HEAD else None
        else:
            shape = _BAD_LAST if end == len(damaged) else _CUT_BY_ZEROS if zeros < end else None
        if shape is None:
            self.refused(damaged, at, what, *args)
        else:
            self.torn(damaged, kept, TornTail(at, len(damaged) - at, shape), what, *args)

    def zeros(self) -> None:
        """Group commit: the records after any synced prefix were one group,
        of which a power cut may leave any first bytes (none included) and
        zeros after them to the end; the same with the file's last byte
        written after the zeros is data after a zeroed region, a torn tail
        only as a last frame failing its check. Or zero bytes past the end."""
        data, records = self.data, self.records
        at = _header_size(self.header)
        for synced in range(len(records)):
            for written in range(len(data) - at):
                self.counters["zero_tails"] += 1
                zeroed = data[: at + written] + bytes(len(data) - at - written)
                what = "records {}.. written {} bytes, then zeros to the end (a power cut)"
                self.expect(zeroed, at, synced, what, synced, written)
                if zeroed[-1] != data[-1]:
                    self.counters["zero_tails"] += 1
                    what = "records {}.. written {} bytes, then zeros, then the last byte"
                    self.expect(zeroed[:-1] + data[-1:], at, synced, what, synced, written)
            at += _frame_size(records[synced])
        for zeros in _ZERO_TAILS:
            self.counters["zero_tails"] += 1
            tail = TornTail(len(data), zeros, _ZERO_HEAD if zeros >= _HEAD else _SHORT_HEAD)
            self.torn(data + bytes(zeros), records, tail, "{} zero bytes past the end", zeros)

    def splices(self) -> None:
        """The last frame repeated; the frame before it dropped, or moved
        after it (the header, when it is the one before); the last frame, and
        the one before it, replaced by the same record's frame (same sequence
        number, same bytes but for the check) in another journal of the same
        run (another journal id) and in another run's (another lineage): a
        torn tail when it is the last frame (a last frame failing its
        check), an error at its offset otherwise, never a record replayed."""
        data, last, previous = self.data, self.last, self.previous
        count, base = len(self.records), self.header.base
        for foreign in self.checker.foreign:
            other = encode(foreign, self.records)
            what = "the last frame copied from the journal of {}"
            self.counters["splices"] += 1
            bad_last = TornTail(last, len(data) - last, _BAD_LAST)
            self.torn(data[:last] + other[last:], self.kept, bad_last, what, foreign)
            if count >= 2:
                self.counters["splices"] += 1
                spliced = data[:previous] + other[previous:last] + data[last:]
                what = "the frame before the last copied from the journal of {}"
                self.refused(spliced, previous, what, foreign, invariant="FRAME-OF-ITS-JOURNAL")
        self.counters["splices"] += 3
        repeat = (base + count + 1, base + count)
        self.refused(
            data + data[last:],
            len(data),
            "the last frame repeated",
            due=repeat,
            invariant="JOURNAL-PREFIX",
        )
        due = (base + count - 1, base + count) if count >= 2 else None
        dropped = data[:previous] + data[last:]
        what = "the frame before the last dropped"
        self.refused(dropped, previous, what, due=due, invariant="JOURNAL-PREFIX")
        swapped = data[:previous] + data[last:] + data[previous:last]
        what = "the last two frames swapped"
        self.refused(swapped, previous, what, due=due, invariant="JOURNAL-PREFIX")
