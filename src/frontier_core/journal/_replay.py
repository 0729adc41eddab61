"""Replay: the journal folded into the state a resume needs.

For every sibling ``(ordinal, sibling)`` the journal mentions, the state is
its *current attempt* (the highest attempt any accepted record named) and
one payload of that attempt: the sealed sample if that attempt sealed it,
else that attempt's latest progress. Nothing of an older attempt survives.

Fencing rules, applied record by record in journal order (``a`` is the
record's attempt, ``c`` the sibling's current attempt, if any):

* no state yet: accepted; the sibling is at attempt ``a``.
* ``a > c``: a newer attempt; accepted, and it supersedes the sibling's
  state, a seal included (the ledger re-generates a sealed sibling only when
  its whole group failed, and then under a new attempt).
* ``a < c``: a result of an attempt that is no longer current (a worker
  declared dead, a request that timed out and answered late, a pre-crash
  attempt): *fenced*, ignored.
* ``a == c`` and the sibling is sealed: a second seal, or progress after
  the seal: fenced. Exactly one record seals an attempt, the first.
* ``a == c``, not sealed: accepted; a ``Progress`` replaces the previous
  progress (each is a whole snapshot), a ``Sealed`` seals.
* an ``Extend`` is accepted only when ``a == c``, the sibling is not sealed
  and holds exactly ``start`` tokens of that attempt: its tokens are
  appended. Any other ``Extend`` is ignored (it cannot begin an attempt, and
  it never leaves a gap or an overlap in a sample).

Episodes (``Turn`` and ``Answer`` records) keep, besides the payload, the
sibling's durable turns: each turn's tokens, its call (with the call's
idempotency key) and, once it came, the answer and the environment's state.
Only the last turn can be *pending* (a call without an answer). With the
fencing rules above deciding which attempt a record belongs to (``a < c``,
or ``a == c`` after a seal: fenced, ignored):

* a ``Turn`` of the current attempt is appended when the episode holds
  exactly ``turn`` turns, none is pending and the last one made a call (a
  turn without a call is the episode's last: nothing follows it);
* a ``Turn`` of a newer attempt (or of a sibling with no state) continues
  the episode: it keeps the first ``turn`` turns, which must be answered
  turns that made a call (``turn`` at most the answered turns, and not
  past a turn without a call: 0 restarts the episode), and becomes the
  sibling's state under the new attempt;
* an ``Answer`` of the current or a newer attempt answers the pending call
  of its turn, with its key: the episode's turns (all of them) continue
  under the answer's attempt (a newer attempt retried the call under the
  same key);
* anything else of an accepted attempt (a turn out of order, an answer for
  an unknown key or turn) raises ``JournalEpisodeError``: the single
  writer checks with this same rule (``advance``) before it journals.

A ``Sealed`` of the current attempt ends the episode and keeps its turns:
the sealed state holds the finished sample (the policy's tokens, joined,
with the reward) *and* the transcript a trainer masks (each turn's tokens,
call, answer and state), so a seal that was not trained before a crash
gives both back. A ``Sealed`` or a ``Progress`` of a newer attempt drops the
turns (a newer progress restarts the sibling); a ``Progress`` or ``Extend``
of the current attempt changes only the payload (the tokens of a turn being
generated), not the turns.

Fenced records (and ignored extends) are ignored rather than refused: they are the expected trace
of a race the single writer lost (the journal is a log of what was said, not
a proof that it was current), and refusing them would make a journal
unusable for a reason that loses nothing. Their count is reported. A
``Mark`` carries no sibling state and changes nothing; of the ``Reserve``
records the state keeps the highest (``reserved``).

The fold is a pure function of the records, each key's state depends only
on that key's records, and each record costs O(1): replay is linear in the
journal.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Final

import attrs

from .._events import Lease
from ._errors import JournalEpisodeError
from ._records import (
    Answer,
    Extend,
    Mark,
    Payload,
    Progress,
    Record,
    Reserve,
    Sealed,
    TokenPayload,
    ToolCall,
    Turn,
)

Key = tuple[int, int]

#: The payload of a sibling whose latest record is a turn or an answer: no
#: tokens of the next turn yet (an ``Extend`` from 0 may add them).
NO_TOKENS: Final = TokenPayload(b"", b"", ())


@attrs.frozen
class TurnState:
    """One durable turn of an episode: the policy's ``tokens``, the ``call``
    they made (``None``: the episode's last turn), and the tool's
    ``answer`` and the environment's ``state`` after it, once journaled."""

    tokens: TokenPayload
    call: ToolCall | None = None
    answer: Payload | None = None
    state: Payload | None = None

    @property
    def pending(self) -> bool:
        """A call was made (its intent is durable) and no answer is."""
        return self.call is not None and self.answer is None


@attrs.frozen
class SiblingState:
    """One sibling after replay: its current ``attempt`` and ``payload``,
    which is that attempt's sealed sample if ``sealed``, else its latest
    progress; and, for an episode, its durable ``turns`` (kept by the
    attempt's seal: the sealed episode's transcript)."""

    attempt: int
    payload: Payload
    sealed: bool
    turns: tuple[TurnState, ...] = ()

    @property
    def pending(self) -> ToolCall | None:
        """The call of the last turn if it has no durable answer: it may or
        may not have run (the crash came between the intent and the
        answer's record). ``None`` if no call is pending."""
        last = self.turns[-1] if self.turns else None
        return last.call if last is not None and last.pending else None

    @property
    def answered(self) -> int:
        """How many leading turns are settled (answered, or without a call):
        the turns a continuation may keep."""
        return len(self.turns) - (self.pending is not None)

    def record(self, ordinal: int, sibling: int) -> Sealed | Progress:
        """The single record whose replay from nothing is this state, for a
        sibling without turns."""
        cls = Sealed if self.sealed else Progress
        return cls(ordinal, sibling, self.attempt, self.payload)

    def records(self, ordinal: int, sibling: int) -> tuple[Record, ...]:
        """The records whose replay from nothing is this state: ``record``
        for a sibling without turns; else each turn and its answer under
        the current attempt (the keys stay those the calls were made
        with), then the seal, or the payload's progress if it holds tokens
        of the next turn."""
        if not self.turns:
            return (self.record(ordinal, sibling),)
        out: list[Record] = []
        a = self.attempt
        for i, t in enumerate(self.turns):
            out.append(Turn(ordinal, sibling, a, i, t.tokens, t.call))
            if t.call is not None and t.answer is not None:
                out.append(Answer(ordinal, sibling, a, i, t.call.key, t.answer, t.state))
        if self.sealed:
            out.append(Sealed(ordinal, sibling, a, self.payload))
        elif self.payload != NO_TOKENS:
            out.append(Progress(ordinal, sibling, a, self.payload))
        return tuple(out)


_EMPTY: Final[Mapping[int, Mapping[int, SiblingState]]] = MappingProxyType({})


@attrs.frozen
class JournalState:
    """The replayed journal: ``groups[ordinal][sibling]`` is a sibling's
    state, for every sibling some accepted record named. Read-only mappings.

    Two states are equal when their groups are: ``fenced`` (how many
    records the fencing rules ignored) is a statistic of the journal that
    produced the state, not part of it, so a compacted journal (which holds
    no fenced record) replays to an equal state.
    """

    groups: Mapping[int, Mapping[int, SiblingState]] = _EMPTY
    fenced: int = attrs.field(default=0, eq=False)
    #: The highest ``Reserve``: attempts below it may have been handed out.
    reserved: int = 0

    def get(self, ordinal: int, sibling: int) -> SiblingState | None:
        group = self.groups.get(ordinal)
        return None if group is None else group.get(sibling)

    def siblings(self) -> Iterator[tuple[int, int, SiblingState]]:
        """``(ordinal, sibling, state)`` for every sibling, ascending."""
        for ordinal in sorted(self.groups):
            group = self.groups[ordinal]
            for sibling in sorted(group):
                yield ordinal, sibling, group[sibling]

    def sealed(self) -> tuple[Lease, ...]:
        """The sealed siblings ``(ordinal, sibling, attempt)``, ascending:
        what ``Ledger.resume`` takes as ``sealed``."""
        return tuple(Lease(o, s, st.attempt) for o, s, st in self.siblings() if st.sealed)

    def progress(self) -> tuple[Lease, ...]:
        """The unsealed siblings with a progress record, ascending, under
        the attempt that made it: the ones a resume can continue."""
        return tuple(Lease(o, s, st.attempt) for o, s, st in self.siblings() if not st.sealed)

    @property
    def next_attempt(self) -> int:
        """A floor for the attempts of a resumed run (``Ledger.resume``'s
        ``attempt_floor``): one above every attempt the state names, and at
        least ``reserved``; 0 if neither."""
        attempts = [st.attempt + 1 for g in self.groups.values() for st in g.values()]
        return max([self.reserved, *attempts])

    def restrict(self, window: Container[int]) -> JournalState:
        """The state of the ordinals in ``window`` only (cost: one membership
        test per ordinal of the state)."""
        kept = {o: g for o, g in self.groups.items() if o in window}
        return JournalState(MappingProxyType(kept), self.fenced, self.reserved)

    def to_records(self) -> tuple[Record, ...]:
        """One record per sibling (an episode's: its turns and answers, and
        its progress), ascending by (ordinal, sibling), then the
        reservation if any: the records that replay to exactly this state
        (``fenced`` aside)."""
        records: list[Record] = [r for o, s, state in self.siblings() for r in state.records(o, s)]
        if self.reserved:
            records.append(Reserve(self.reserved))
        return tuple(records)


def accepts(current: SiblingState | None, record: Sealed | Progress | Extend) -> bool:
    """Whether the fencing rules accept ``record`` for a sibling in state
    ``current`` (``None``: no state yet). The whole rule, in one place."""
    if isinstance(record, Extend):
        return (
            current is not None
            and record.attempt == current.attempt
            and not current.sealed
            and isinstance(current.payload, TokenPayload)
            and len(current.payload) == record.start
        )
    if current is None or record.attempt > current.attempt:
        return True
    return record.attempt == current.attempt and not current.sealed


SiblingRecord = Sealed | Progress | Extend | Turn | Answer


def _episode(current: SiblingState | None, record: Turn | Answer) -> SiblingState | None:
    """The episode rules (the module doc) for a turn or an answer."""
    a = record.attempt
    if current is not None and (a < current.attempt or (a == current.attempt and current.sealed)):
        return None  # fenced
    same = current is not None and a == current.attempt
    turns = () if current is None else current.turns
    t = record.turn
    if isinstance(record, Turn):
        if same:
            last = turns[-1] if turns else None
            if t != len(turns) or (last is not None and (last.pending or last.call is None)):
                raise JournalEpisodeError(
                    record.ordinal,
                    record.sibling,
                    f"turn {t} of attempt {a}, but the episode holds {len(turns)} turns"
                    + (" and a call pending" if last is not None and last.pending else "")
                    + (", the last without a call" if last is not None and not last.call else ""),
                )
        else:
            held = 0 if current is None else current.answered
            if t > held or (t and turns[t - 1].call is None):
                raise JournalEpisodeError(
                    record.ordinal,
                    record.sibling,
                    f"attempt {a} continues the episode at turn {t}, but it holds only "
                    f"{held} answered turns"
                    + (f", turn {t - 1} without a call" if t and t <= held else ""),
                )
        return SiblingState(
            a, NO_TOKENS, False, (*turns[:t], TurnState(record.payload, record.call))
        )
    pending = turns[-1].call if turns and turns[-1].pending else None
    if pending is None or t != len(turns) - 1 or pending.key != record.key:
        raise JournalEpisodeError(
            record.ordinal,
            record.sibling,
            f"an answer for key {record.key!r:.80} at turn {t}, but "
            + (
                "no call is pending"
                if pending is None
                else f"the pending call is turn {len(turns) - 1}'s, key {pending.key!r:.80}"
            ),
        )
    answered = TurnState(turns[-1].tokens, pending, record.payload, record.state)
    # No tokens of the next turn yet: it is generated from this answer.
    return SiblingState(a, NO_TOKENS, False, (*turns[:-1], answered))


def advance(current: SiblingState | None, record: SiblingRecord) -> SiblingState | None:
    """The state of a sibling in state ``current`` (``None``: none yet)
    after ``record``, by the rules of this module; ``None`` when fencing
    ignores the record. Raises ``JournalEpisodeError`` for a turn or answer
    that contradicts the episode. ``replay`` is this, record by record; the
    single writer calls it before it journals a turn or an answer, so it
    never writes one replay would refuse."""
    if isinstance(record, Turn | Answer):
        return _episode(current, record)
    if not accepts(current, record):
        return None
    if isinstance(record, Extend):
        assert current is not None and isinstance(current.payload, TokenPayload)
        return SiblingState(
            record.attempt,
            current.payload.followed_by(record.payload),
            False,
            current.turns,
        )
    # A record of the current attempt keeps the episode's turns (a seal: as
    # the sealed episode's transcript); any record of a newer attempt ends
    # them.
    keep = current is not None and record.attempt == current.attempt
    return SiblingState(
        record.attempt,
        record.payload,
        isinstance(record, Sealed),
        current.turns if keep and current is not None else (),
    )


def replay(records: Iterable[Record]) -> JournalState:
    """Fold ``records`` (a journal's, in order) into its ``JournalState``,
    by the fencing and episode rules of this module. Linear in the number
    of records (a turn or an answer costs its episode's turn count: the
    turns are kept as a tuple). Raises ``JournalEpisodeError`` (with the
    record's ``index``) for a turn or answer that contradicts its episode."""
    groups: dict[int, dict[int, SiblingState]] = {}
    fenced = 0
    reserved = 0
    for index, record in enumerate(records):
        if isinstance(record, Mark):
            continue
        if isinstance(record, Reserve):
            reserved = max(reserved, record.below)
            continue
        if not isinstance(record, Sealed | Progress | Extend | Turn | Answer):
            raise TypeError(f"not a journal record: {type(record).__name__}")
        group = groups.get(record.ordinal)
        current = None if group is None else group.get(record.sibling)
        try:
            state = advance(current, record)
        except JournalEpisodeError as exc:
            raise JournalEpisodeError(exc.ordinal, exc.sibling, exc.reason, index) from None
        if state is None:
            fenced += 1
            continue
        if group is None:
            group = groups[record.ordinal] = {}
        group[record.sibling] = state
    # Every group holds a sibling: one is made only for an accepted record.
    return JournalState(
        MappingProxyType({o: MappingProxyType(g) for o, g in groups.items()}), fenced, reserved
    )
