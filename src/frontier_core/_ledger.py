"""The coverage ledger: every state transition of the library lives here.

Theory of operation
-------------------
A source (a data loader) yields prompts one stream position at a time; the
ledger stamps each with its *ordinal*, its position in the global stream,
monotonic across epochs. From then on an ordinal moves through

    PENDING --dispatch--> OUTSTANDING --buffer--> BUFFERED --train--> TRAINED

and a failure (``fail`` while outstanding, ``evict`` while buffered) sends it
either to DROPPED or, under the ``retry`` policy and below ``max_attempts``,
back to be generated again. TRAINED and DROPPED are *resolved*.

The *cut* is the lowest ordinal that is not resolved, yielded or not. All
ordinals below it are resolved and forgotten; the ledger keeps an entry only
for ordinals at or above the cut, so its size is that of the in-flight window
plus what was resolved out of order above it, never that of the run. A
buffered ordinal is *not* resolved and holds the cut down: whether the buffer
is restored is decided at resume time, not at save time.

A checkpoint records the cut and, above it, the trained, dropped and retained
(buffered) ordinals plus the attempts of the unresolved ones. A resume
rewinds the source to the cut exactly and filters the re-yielded stream:
an ordinal that is resolved, or retained in the restored buffer, is dropped
at yield; every other ordinal becomes pending again. Nothing below the cut is
re-yielded, nothing at or above it is lost, so across any number of crashes
each ordinal is trained once or dropped on purpose.

Rules of the house
------------------
* Everything that changes state is in ``Ledger.apply`` and ``Ledger.resume``;
  the moves an ordinal can make are the table ``TRANSITIONS``.
* Values are immutable. A transition validates the whole event before it
  builds anything, so an illegal event raises ``IllegalTransitionError`` and
  the ledger it was applied to is untouched (it could not be otherwise).
* This module does no I/O and knows nothing of torch, asyncio or files.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import attrs

from ._checkpoint import Checkpoint
from ._errors import CheckpointMismatchError, FingerprintMismatchError, IllegalTransitionError
from ._events import (
    Buffer,
    Dispatch,
    Effect,
    Event,
    Evict,
    Fail,
    FailurePolicy,
    Stamp,
    Status,
    Train,
)
from ._ranges import expand, to_ranges
from ._trie import IntMap


class _Outcome(enum.Enum):
    """A move whose target the failure policy picks."""

    FAILURE = "failure"


FAILURE: Final = _Outcome.FAILURE

#: (event type, current status) -> next status. A pair that is absent is an
#: illegal transition. ``Stamp`` is not here: it creates ordinals rather than
#: moving them (see ``Ledger._stamp``).
TRANSITIONS: Final[dict[tuple[type[Event], Status], Status | _Outcome]] = {
    (Dispatch, Status.PENDING): Status.OUTSTANDING,
    (Buffer, Status.OUTSTANDING): Status.BUFFERED,
    (Fail, Status.OUTSTANDING): FAILURE,
    (Evict, Status.BUFFERED): FAILURE,
    (Train, Status.BUFFERED): Status.TRAINED,
}

_RESOLVED: Final = frozenset({Status.TRAINED, Status.DROPPED})

# The same table with plain ints, for the hot loop of ``Ledger._move``.
_ABSENT: Final = -1
_ILLEGAL: Final = -2
_FAILURE: Final = -3
_UNSTAMPED: Final = int(Status.UNSTAMPED)
_PENDING: Final = int(Status.PENDING)
_TRAINED: Final = int(Status.TRAINED)
_DROPPED: Final = int(Status.DROPPED)
_MOVES_BY_EVENT: Final[dict[type[Event], dict[int, int]]] = {}
#: Events after which the ordinals they name are recorded by a checkpoint
#: (buffered, or failed: dropped or carrying an attempt).
_NOTING: Final = frozenset({Buffer, Fail, Evict})
for (_event, _source), _target in TRANSITIONS.items():
    _MOVES_BY_EVENT.setdefault(_event, {})[int(_source)] = (
        _FAILURE if _target is FAILURE else int(_target)
    )
del _event, _source, _target
#: What each moving event needs, for its error message.
_WANTED: Final = {
    kind: " or ".join(sorted({s.name.lower() for (k, s) in TRANSITIONS if k is kind}))
    for kind in _MOVES_BY_EVENT
}
_LIVE: Final = (Status.PENDING, Status.OUTSTANDING, Status.BUFFERED)

# Trie values pack the status (3 bits) with the failed-attempt count above it.
_STATUS_BITS: Final = 3
_STATUS_MASK: Final = (1 << _STATUS_BITS) - 1


def _pack(status: Status, attempts: int) -> int:
    return int(status) | (attempts << _STATUS_BITS)


def _positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, got {value!r}")


def _stream_len(_inst: object, _attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise ValueError(f"stream_len must be None or an int >= 0, got {value!r}")


@attrs.frozen
class LedgerConfig:
    """What the ledger must know about the stream and the failure policy.

    ``stream_len`` is the number of ordinals the source will ever yield
    (epochs times dataset length), or ``None`` for an unbounded stream.
    ``fingerprint`` identifies the stream (dataset and order); a checkpoint
    written under another fingerprint is refused at resume.
    """

    on_failure: FailurePolicy = attrs.field(default=FailurePolicy.DROP, converter=FailurePolicy)
    max_attempts: int = attrs.field(default=3, validator=_positive)
    stream_len: int | None = attrs.field(default=None, validator=_stream_len)
    fingerprint: str = attrs.field(default="", validator=attrs.validators.instance_of(str))


@attrs.frozen
class Applied:
    """A transition's result: the new ledger and what the event did."""

    ledger: Ledger
    effect: Effect


@attrs.frozen
class Resumed:
    """What a resume did: the source must restart at ``rewind_to``; the
    ``covered`` ordinals at or above it will be dropped at yield."""

    ledger: Ledger
    rewind_to: int
    covered: tuple[int, ...]


@attrs.frozen(eq=False)
class Ledger:
    """The immutable coverage state of one stream.

    Build one with ``Ledger.start(config)`` or ``Ledger.resume(...)``; every
    other instance comes from a transition. Two ledgers compare equal when
    they hold the same state.
    """

    config: LedgerConfig
    #: The next ordinal the source will yield: its position.
    next_ordinal: int
    #: The lowest ordinal that is neither trained nor dropped.
    cut: int
    #: One past the highest ordinal the resume filter may drop; the filter is
    #: active while ``next_ordinal`` is below it.
    filter_horizon: int
    _entries: IntMap = attrs.field(repr=False, alias="entries")
    #: The ordinals a checkpoint records (buffered, trained, dropped, or
    #: carrying failed attempts), keyed to 1: an index into ``_entries`` so
    #: that a checkpoint costs what it writes, not the whole in-flight window
    #: (which is mostly pending and outstanding prompts it does not record).
    _noted: IntMap = attrs.field(repr=False, alias="noted")
    _counts: tuple[int, ...] = attrs.field(repr=False, alias="counts")
    # Value identity, computed on first use: equality and hashing walk the
    # whole trie, which only tests and the exhaustive checker ask for.
    _identity: tuple[object, ...] | None = attrs.field(
        default=None, init=False, repr=False, eq=False
    )

    # -- construction -----------------------------------------------------

    @classmethod
    def start(cls, config: LedgerConfig | None = None) -> Ledger:
        """A ledger for a fresh run: nothing yielded, the cut at 0."""
        return cls(
            config=config or LedgerConfig(),
            next_ordinal=0,
            cut=0,
            filter_horizon=0,
            entries=IntMap(),
            noted=IntMap(),
            counts=(0,) * len(Status),
        )

    @classmethod
    def resume(
        cls,
        config: LedgerConfig,
        checkpoint: Checkpoint,
        *,
        load_replay_buffer: bool = True,
        evicted_on_restore: Iterable[int] = (),
        rewind_to: int | None = None,
    ) -> Resumed:
        """The ledger after a restart from ``checkpoint``.

        ``load_replay_buffer`` says whether the saved buffer was restored;
        ``evicted_on_restore`` lists retained ordinals that the restored
        buffer discarded (its age filter): they are generated again, and the
        eviction is not counted as a failed attempt, since the trajectory did
        not fail. Retained ordinals of an unrestored buffer are generated
        again too. Raises ``FingerprintMismatchError`` for a checkpoint of
        another stream, ``CheckpointMismatchError`` when it refers to
        ordinals beyond ``config.stream_len``, and ``IllegalTransitionError``
        when ``evicted_on_restore`` names ordinals the checkpoint did not
        retain (or any at all when the buffer was not restored).

        ``rewind_to`` is for sources that cannot seek to the cut exactly (a
        data loader restored from a snapshot taken before an earlier pull):
        the source restarts at that ordinal, which must not exceed the cut,
        and the ordinals it re-yields below the cut are filtered as resolved.
        By default the source restarts at the cut itself.
        """
        if rewind_to is None:
            rewind_to = checkpoint.cut
        if type(rewind_to) is not int or not 0 <= rewind_to <= checkpoint.cut:
            raise IllegalTransitionError(
                "resume",
                (),
                f"rewind_to must be an int in [0, cut={checkpoint.cut}], got {rewind_to!r}: "
                "a source restarted above the cut would skip unresolved prompts",
            )
        if checkpoint.fingerprint != config.fingerprint:
            raise FingerprintMismatchError(
                expected=config.fingerprint, found=checkpoint.fingerprint
            )
        if config.stream_len is not None and (
            checkpoint.cut > config.stream_len or checkpoint.highest_ordinal() >= config.stream_len
        ):
            raise CheckpointMismatchError(
                f"checkpoint refers to ordinals up to {checkpoint.highest_ordinal()} "
                f"(cut {checkpoint.cut}), beyond this stream's length {config.stream_len}"
            )
        evicted = frozenset(evicted_on_restore)
        retained = frozenset(checkpoint.retained_ordinals())
        if evicted and not load_replay_buffer:
            raise IllegalTransitionError(
                "resume", evicted, "evicted_on_restore given but the buffer was not restored"
            )
        strangers = evicted - retained
        if strangers:
            raise IllegalTransitionError(
                "resume",
                strangers,
                "evicted_on_restore names ordinals the checkpoint did not retain",
            )
        restored = retained - evicted if load_replay_buffer else frozenset()

        attempts = dict(checkpoint.attempts)
        changes: list[tuple[int, int | None]] = []
        counts = [0] * len(Status)
        for o in checkpoint.trained():
            changes.append((o, int(Status.TRAINED)))
        counts[Status.TRAINED] = len(changes)
        for o in checkpoint.dropped():
            changes.append((o, int(Status.DROPPED)))
        counts[Status.DROPPED] = len(changes) - counts[Status.TRAINED]
        for o in restored:
            changes.append((o, _pack(Status.BUFFERED, attempts.pop(o, 0))))
        counts[Status.BUFFERED] = len(restored)
        # Unresolved ordinals that carry attempts but were not restored wait
        # for the source to re-yield them.
        for o, n in attempts.items():
            changes.append((o, _pack(Status.UNSTAMPED, n)))
        counts[Status.UNSTAMPED] = len(attempts)

        covered = tuple(
            sorted(
                set(expand(checkpoint.trained_above_cut))
                | set(expand(checkpoint.dropped_above_cut))
                | restored
            )
        )
        horizon = covered[-1] + 1 if covered else checkpoint.cut
        ledger = cls(
            config=config,
            next_ordinal=rewind_to,
            cut=checkpoint.cut,
            filter_horizon=horizon,
            entries=IntMap().updated(changes),
            # Everything a resume creates is something a checkpoint records.
            noted=IntMap().updated([(o, 1) for o, _ in changes]),
            counts=tuple(counts),
        )
        return Resumed(ledger=ledger, rewind_to=rewind_to, covered=covered)

    # -- queries ----------------------------------------------------------

    def status(self, ordinal: int) -> Status | None:
        """The status of ``ordinal``; ``None`` below the cut (resolved and
        forgotten). An ordinal the source has not reached is ``UNSTAMPED``."""
        if ordinal < self.cut:
            return None
        value = self._entries.get(ordinal)
        if value is None:
            # Every ordinal in [cut, next_ordinal) has an entry (LIVE-ENTRY).
            return Status.UNSTAMPED
        return Status(value & _STATUS_MASK)

    def attempts(self, ordinal: int) -> int:
        """Failed attempts so far of an unresolved ``ordinal`` (0 if none)."""
        value = self._entries.get(ordinal)
        return 0 if value is None else value >> _STATUS_BITS

    def count(self, status: Status) -> int:
        """How many ordinals at or above the cut are in ``status``. For
        ``UNSTAMPED``, only those the ledger holds an entry for."""
        return self._counts[status]

    def ordinals(self, status: Status) -> Iterator[int]:
        """The ordinals in ``status`` (at or above the cut), ascending.
        O(entries): for inspection and checkpoints, not for hot loops."""
        for key, value in self._entries.items(self.cut):
            if value & _STATUS_MASK == status:
                yield key

    def in_flight(self) -> int:
        """Pending, outstanding and buffered ordinals: the live window."""
        return sum(self._counts[s] for s in _LIVE)

    @property
    def filtering(self) -> bool:
        """Whether the resume filter may still drop re-yielded ordinals."""
        return self.next_ordinal < self.filter_horizon

    @property
    def exhausted(self) -> bool:
        """Whether a finite source has yielded its last ordinal."""
        n = self.config.stream_len
        return n is not None and self.next_ordinal >= n

    @property
    def drained(self) -> bool:
        """Whether every ordinal of a finite stream is resolved."""
        n = self.config.stream_len
        return n is not None and self.cut >= n

    def size(self) -> int:
        """Entries held: O(unresolved + resolved above the cut)."""
        return len(self._entries)

    def node_count(self) -> int:
        return self._entries.node_count()

    def _key(self) -> tuple[object, ...]:
        if self._identity is None:
            key = (
                self.config,
                self.next_ordinal,
                self.cut,
                self.filter_horizon,
                tuple(self._entries.items()),
            )
            object.__setattr__(self, "_identity", key)
            return key
        return self._identity

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ledger):
            return NotImplemented
        return self is other or self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    # -- transitions ------------------------------------------------------

    def apply(self, event: Event) -> Applied:
        """Apply ``event`` and return the new ledger with its effect.

        Raises ``IllegalTransitionError`` naming the event and the ordinals
        that made it illegal; ``self`` is unchanged either way.
        """
        if isinstance(event, Stamp):
            return self._stamp(event.count)
        return self._move(event)

    def stamp(self, count: int) -> Applied:
        """The source yielded its next ``count`` prompts: stamp them.

        ``effect.stamped`` are their ordinals (fewer than ``count`` at the
        end of a finite stream); ``effect.kept`` those that became pending.
        The others are covered by a checkpoint and must not be generated."""
        return self.apply(Stamp(count))

    def dispatch(self, ordinals: Iterable[int]) -> Applied:
        """These pending ordinals were handed to rollout workers."""
        return self.apply(Dispatch(ordinals))

    def buffer(self, ordinals: Iterable[int]) -> Applied:
        """These outstanding ordinals' groups landed in the replay buffer."""
        return self.apply(Buffer(ordinals))

    def train(self, ordinals: Iterable[int]) -> Applied:
        """One training step consumed these buffered groups."""
        return self.apply(Train(ordinals))

    def fail(self, ordinals: Iterable[int]) -> Applied:
        """Generation failed for these outstanding ordinals. ``effect``
        says which were requeued and which dropped."""
        return self.apply(Fail(ordinals))

    def evict(self, ordinals: Iterable[int]) -> Applied:
        """The buffer discarded these groups as stale. ``effect`` says which
        were requeued and which dropped."""
        return self.apply(Evict(ordinals))

    def checkpoint(self, *, save_buffer: bool = True) -> Checkpoint:
        """The durable state at this moment.

        ``save_buffer`` says whether the replay buffer is saved with it; if
        not, its groups are not retained and a resume regenerates them.
        O(what it records): pending and outstanding prompts without failed
        attempts are not visited."""
        trained: list[int] = []
        dropped: list[int] = []
        retained: list[int] = []
        attempts: list[tuple[int, int]] = []
        noted = list(self._noted)
        for o, value in zip(noted, self._entries.get_many(noted), strict=True):
            assert value is not None  # NOTED-INDEX: every noted ordinal has an entry
            status = value & _STATUS_MASK
            if status == Status.TRAINED:
                trained.append(o)
            elif status == Status.DROPPED:
                dropped.append(o)
            else:
                if status == Status.BUFFERED and save_buffer:
                    retained.append(o)
                n = value >> _STATUS_BITS
                if n:
                    attempts.append((o, n))
        return Checkpoint(
            cut=self.cut,
            trained_above_cut=to_ranges(trained),
            dropped_above_cut=to_ranges(dropped),
            retained=to_ranges(retained),
            attempts=tuple(attempts),
            fingerprint=self.config.fingerprint,
            stream_len=self.config.stream_len,
        )

    # -- internals --------------------------------------------------------

    def _replace(
        self,
        *,
        next_ordinal: int,
        cut: int,
        entries: IntMap,
        noted: IntMap,
        counts: tuple[int, ...],
    ) -> Ledger:
        # attrs.evolve introspects the class on every call; transitions are
        # the hot path, so they build the successor directly.
        return Ledger(
            config=self.config,
            next_ordinal=next_ordinal,
            cut=cut,
            filter_horizon=self.filter_horizon,
            entries=entries,
            noted=noted,
            counts=counts,
        )

    def _stamp(self, count: int) -> Applied:
        start = self.next_ordinal
        stop = start + count
        if self.config.stream_len is not None:
            stop = max(start, min(stop, self.config.stream_len))
        yielded = range(start, stop)
        entries = self._entries
        top = entries.max_key()
        if start >= self.cut and (top is None or top < start):
            # Fast path: the ledger knows nothing at or above the source's
            # position, so every yielded ordinal is new and kept.
            kept: Sequence[int] = yielded
            changes: list[tuple[int, int | None]] = [(o, int(Status.PENDING)) for o in yielded]
            unyielded_consumed = 0
            held: list[int] = []
        else:
            kept_list: list[int] = []
            changes = []
            unyielded_consumed = 0
            held = []
            for o in yielded:
                if o < self.cut:
                    continue  # resolved; the cut passed it while it was unyielded
                value = entries.get(o)
                if value is None:
                    changes.append((o, int(Status.PENDING)))
                elif value & _STATUS_MASK == Status.UNSTAMPED:
                    changes.append((o, _pack(Status.PENDING, value >> _STATUS_BITS)))
                    unyielded_consumed += 1
                else:
                    # Trained, dropped, or retained in the restored buffer:
                    # covered, so filtered out (FILTER-COVERED).
                    if value & _STATUS_MASK == Status.BUFFERED:
                        held.append(o)
                    continue
                kept_list.append(o)
            kept = kept_list
        counts = list(self._counts)
        counts[Status.PENDING] += len(kept)
        counts[Status.UNSTAMPED] -= unyielded_consumed
        ledger = self._replace(
            next_ordinal=stop,
            cut=self.cut,
            entries=entries.updated(changes),
            noted=self._noted,
            counts=tuple(counts),
        )
        return Applied(
            ledger,
            Effect(event=Stamp.name, stamped=yielded, kept=tuple(kept), buffered=tuple(held)),
        )

    def _move(self, event: Dispatch | Buffer | Fail | Evict | Train) -> Applied:
        entries = self._entries
        kind = type(event)
        policy = self.config.on_failure
        max_attempts = self.config.max_attempts
        counts = list(self._counts)
        changes: list[tuple[int, int | None]] = []
        illegal: list[tuple[int, str]] = []
        requeued: list[int] = []
        unstamped: list[int] = []
        dropped: list[int] = []
        # The table for this event, keyed by packed status: the hot loop
        # below works on ints and builds no enum members.
        moves = _MOVES_BY_EVENT[kind]
        next_ordinal = self.next_ordinal
        for o, value in zip(event.ordinals, entries.get_many(event.ordinals), strict=True):
            current = _ABSENT if value is None else value & _STATUS_MASK
            target = moves.get(current, _ILLEGAL)
            if target == _ILLEGAL:
                found = self._describe(o, value)
                illegal.append((o, found.name.lower() if isinstance(found, Status) else found))
                continue
            assert value is not None
            attempts = value >> _STATUS_BITS
            if target == _FAILURE:
                attempts += 1
                if policy is FailurePolicy.RETRY and attempts < max_attempts:
                    # Back to pending if the source already yielded it; an
                    # ordinal restored from a checkpoint but not yet re-yielded
                    # waits for the source instead (its row is not here).
                    if o < next_ordinal:
                        target = _PENDING
                        requeued.append(o)
                    else:
                        target = _UNSTAMPED
                        unstamped.append(o)
                else:
                    target = _DROPPED
                    dropped.append(o)
            # Resolved ordinals forget their attempts: nobody asks again.
            changes.append(
                (o, target if target >= _TRAINED else target | (attempts << _STATUS_BITS))
            )
            counts[current] -= 1
            counts[target] += 1
        if illegal:
            detail = ", ".join(f"{o} is {what}" for o, what in illegal[:10])
            raise IllegalTransitionError(
                event.name,
                (o for o, _ in illegal),
                f"{event.name} needs {_WANTED[kind]} ordinals; {detail}",
            )
        cut = self.cut
        noted = self._noted
        if kind in _NOTING:
            # Landed, failed or evicted: from now on a checkpoint records it.
            noted = noted.updated([(o, 1) for o, _ in changes])
        # Advance the cut over the resolved prefix and forget it (CUT-MONO,
        # BOUNDED-SIZE), in the same trie update as the moves themselves.
        # Only an event that resolves the cut itself can move it.
        new = dict(changes)
        value = new[cut] if cut in new else entries.get(cut)
        if value is not None and value & _STATUS_MASK in _RESOLVED:
            forget: list[tuple[int, int | None]] = []
            while value is not None and value & _STATUS_MASK in _RESOLVED:
                counts[value & _STATUS_MASK] -= 1
                new[cut] = None
                forget.append((cut, None))
                cut += 1
                value = new[cut] if cut in new else entries.get(cut)
            noted = noted.updated(forget)
            changes = list(new.items())
        ledger = self._replace(
            next_ordinal=self.next_ordinal,
            cut=cut,
            entries=entries.updated(changes),
            noted=noted,
            counts=tuple(counts),
        )
        return Applied(
            ledger,
            Effect(
                event=event.name,
                requeued=tuple(requeued),
                unstamped=tuple(unstamped),
                dropped=tuple(dropped),
            ),
        )

    def _describe(self, ordinal: int, value: int | None) -> Status | str:
        if value is not None:
            return Status(value & _STATUS_MASK)
        if ordinal < self.cut:
            return "resolved below the cut"
        if ordinal >= self.next_ordinal:
            return "not yet yielded"
        raise AssertionError(f"ordinal {ordinal} in the live window has no entry")  # LIVE-ENTRY
