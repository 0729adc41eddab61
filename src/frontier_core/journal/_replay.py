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
from ._records import Extend, Mark, Payload, Progress, Record, Reserve, Sealed, TokenPayload

Key = tuple[int, int]


@attrs.frozen
class SiblingState:
    """One sibling after replay: its current ``attempt`` and ``payload``,
    which is that attempt's sealed sample if ``sealed``, else its latest
    progress."""

    attempt: int
    payload: Payload
    sealed: bool

    def record(self, ordinal: int, sibling: int) -> Sealed | Progress:
        """The single record whose replay from nothing is this state."""
        cls = Sealed if self.sealed else Progress
        return cls(ordinal, sibling, self.attempt, self.payload)


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

    def to_records(self) -> tuple[Sealed | Progress | Reserve, ...]:
        """One record per sibling, ascending by (ordinal, sibling), then the
        reservation if any: the records that replay to exactly this state
        (``fenced`` aside)."""
        records: list[Sealed | Progress | Reserve] = [
            state.record(o, s) for o, s, state in self.siblings()
        ]
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


def replay(records: Iterable[Record]) -> JournalState:
    """Fold ``records`` (a journal's, in order) into its ``JournalState``,
    by the fencing rules of this module. Linear in the number of records."""
    groups: dict[int, dict[int, SiblingState]] = {}
    fenced = 0
    reserved = 0
    for record in records:
        if isinstance(record, Mark):
            continue
        if isinstance(record, Reserve):
            reserved = max(reserved, record.below)
            continue
        if not isinstance(record, Sealed | Progress | Extend):
            raise TypeError(f"not a journal record: {type(record).__name__}")
        group = groups.get(record.ordinal)
        current = None if group is None else group.get(record.sibling)
        if not accepts(current, record):
            fenced += 1
            continue
        if group is None:
            group = groups[record.ordinal] = {}
        if isinstance(record, Extend):
            assert current is not None and isinstance(current.payload, TokenPayload)
            group[record.sibling] = SiblingState(
                record.attempt, current.payload.followed_by(record.payload), False
            )
        else:
            group[record.sibling] = SiblingState(
                record.attempt, record.payload, isinstance(record, Sealed)
            )
    # Every group holds a sibling: one is made only for an accepted record.
    return JournalState(
        MappingProxyType({o: MappingProxyType(g) for o, g in groups.items()}), fenced, reserved
    )
