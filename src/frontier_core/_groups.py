"""The group table: the ledger's state of whole groups (prompts).

The public ``Ledger`` (``_ledger``) tracks a prompt's group of n samples;
this module is its private group table, the prompt-level machine that
decides every group's fate (``proofs/SAMPLES.md`` proves that the ledger at
n = 1 with the group events only is this machine). Every state transition
of a group is applied here.

Theory of operation
-------------------
A source (a data loader) yields prompts one stream position at a time; the
ledger stamps each with its *ordinal*, its position in the global stream,
monotonic across epochs. From then on an ordinal moves through

    PENDING --dispatch--> OUTSTANDING --buffer--> BUFFERED --train--> TRAINED

and a failure (``fail`` while outstanding, ``evict`` while buffered) sends it
either to DROPPED or, under the ``retry`` policy and below ``max_failures``,
back to be generated again. TRAINED and DROPPED are *resolved*. Before its
stamp an ordinal is UNSTAMPED: the source has not stamped it in this life of
the run, so nobody holds its row. Most UNSTAMPED ordinals are just ahead of
the source and have no entry; the ledger keeps one only for an ordinal that
carries failures (restored from a checkpoint, or sent back by a retry
after a resume and before the source re-stamped it), and the stamp makes it
PENDING with its failures. (A group's *failures* count its failed
generations, against ``max_failures``; an *attempt* is the run-wide identity
of one try of one sibling, the ledger's.) ``_transitions`` holds every move and the rules
that pick its target.

The *cut* is the lowest ordinal that is not resolved, stamped or not. All
ordinals below it are resolved and forgotten; the ledger keeps an entry only
for ordinals at or above the cut, so its size is that of the in-flight window
plus what was resolved out of order above it, never that of the run. A
buffered ordinal is *not* resolved and holds the cut down: whether the buffer
is restored is decided at resume time, not at save time.

A checkpoint records the cut and, above it, the trained, dropped and retained
(buffered) ordinals plus the failures of the unresolved ones. A resume
rewinds the source to the cut, or below it (``rewind_to``, for a source that
can only restart from an earlier position), and filters the re-yielded
stream: an ordinal below the cut, resolved, or retained in the restored
buffer is filtered at its stamp; every other one becomes pending again. So
nothing below the cut is generated again, nothing at or above it is lost,
and across any number of crashes each ordinal is trained once or dropped on
purpose.

Rules of the house
------------------
* Everything that changes a group's state is in ``GroupTable.apply`` and
  ``GroupTable.resume``;
  the moves an ordinal can make, and the rules that pick their targets, are
  in ``_transitions`` (the table ``TRANSITIONS`` and the functions beside
  it). The hot loops here precompute integer tables from them.
* Values are immutable. A transition validates the whole event before it
  builds anything, so an illegal event raises ``IllegalTransitionError`` and
  the ledger it was applied to is untouched (it could not be otherwise).
* This module does no I/O and knows nothing of torch, asyncio or files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import attrs

from ._checkpoint import Checkpoint
from ._errors import (
    CheckpointMismatchError,
    FingerprintMismatchError,
    IllegalTransitionError,
    shown,
)
from ._events import (
    Buffer,
    Dispatch,
    Effect,
    Event,
    Evict,
    Fail,
    FailurePolicy,
    Granularity,
    Setback,
    Stamp,
    Status,
    Train,
)
from ._ranges import LIMIT, to_ranges
from ._transitions import (
    FAILURE,
    LIVE,
    NOTING,
    RESOLVED,
    SETBACK,
    STAMPABLE,
    Move,
    failure_outcome,
    recorded,
    resume_outcome,
    setback_outcome,
    stamp_outcome,
)
from ._transitions import TRANSITIONS as TRANSITIONS
from ._trie import IntMap

# The rules of ``_transitions`` as plain ints, for the hot loops of
# ``GroupTable._move`` and ``GroupTable._stamp``: computed once from the table and the
# functions, so that the loops build no enum members and copy no rule.
_ABSENT: Final = -1  # no entry: below the cut, or not yet stamped
_ILLEGAL: Final = -2  # no move of this event from this status
_FAILURE: Final = -3  # the target is ``failure_outcome``'s
_FILTERED: Final = -4  # a stamp filters the ordinal out
_SETBACK: Final = -5  # the target is ``setback_outcome``'s
_UNSTAMPED: Final = int(Status.UNSTAMPED)
_RESOLVED_INTS: Final = frozenset(int(s) for s in RESOLVED)
#: event type -> {source status: target status, or _FAILURE}.
_MOVES_BY_EVENT: Final[dict[type[Move], dict[int, int]]] = {}
for (_event, _source), _target in TRANSITIONS.items():
    _MOVES_BY_EVENT.setdefault(_event, {})[int(_source)] = (
        _FAILURE if _target is FAILURE else _SETBACK if _target is SETBACK else int(_target)
    )
del _event, _source, _target
#: What each moving event needs, for its error message.
_WANTED: Final = {
    kind: " or ".join(sorted({s.name.lower() for (k, s) in TRANSITIONS if k is kind}))
    for kind in _MOVES_BY_EVENT
}
#: status before a stamp (_ABSENT: below the cut) -> status after, or _FILTERED.
_ON_STAMP: Final = {
    _ABSENT if status is None else int(status): _FILTERED if target is None else int(target)
    for status in (None, *STAMPABLE)
    for target in (stamp_outcome(status),)
}
#: The status a stamp gives an ordinal with no entry at or above the cut.
_NEW: Final = _ON_STAMP[_UNSTAMPED]
#: Filtered at a stamp, yet live: the caller keeps their rows (``Effect.buffered``).
_HELD: Final = frozenset(
    s for s, t in _ON_STAMP.items() if t == _FILTERED and s >= 0 and Status(s) in LIVE
)

# Trie values pack the status (3 bits), the detail of a single-sample
# group's sibling above it (``_DETAIL_BITS``, 0 for none: the ledger's fast
# path for n = 1 keeps it here, in the group's own entry, instead of in a
# second map), and the failure count above both. Only an outstanding
# group carries detail: every move clears it except one that leaves the
# group outstanding (a setback), and the group's identity (``_key``, what
# the exhaustive checkers merge states by) leaves it out.
_STATUS_BITS: Final = 3
_STATUS_MASK: Final = (1 << _STATUS_BITS) - 1
_DETAIL_BITS: Final = 35
_DETAIL_MASK: Final = ((1 << _DETAIL_BITS) - 1) << _STATUS_BITS
_FAIL_SHIFT: Final = _STATUS_BITS + _DETAIL_BITS
_OUTSTANDING: Final = int(Status.OUTSTANDING)


def _pack(status: Status, failures: int) -> int:
    return int(status) | (failures << _FAIL_SHIFT)


def _positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, got {shown(value)}")


def _stream_len(_inst: object, _attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise ValueError(f"stream_len must be None or an int >= 0, got {shown(value)}")
    if value is not None and value > LIMIT:
        # A longer stream could not be checkpointed.
        raise ValueError(f"stream_len must be at most 2**64, got {shown(value)}")


def _evicted(value: Iterable[int]) -> frozenset[int]:
    """``evicted_on_restore`` as a set of ordinals, each checked before any
    set is built: an item that is not an int ordinal (a string, a bool, a
    list) is refused by name, not by the ``TypeError`` of hashing or
    sorting it."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise IllegalTransitionError(
            "resume",
            (),
            f"evicted_on_restore must be an iterable of ordinals, got {type(value).__name__}",
        )
    out: set[int] = set()
    for o in value:
        if type(o) is not int or not 0 <= o < LIMIT:
            raise IllegalTransitionError(
                "resume", (), f"evicted_on_restore must hold ints in [0, 2**64), got {shown(o)}"
            )
        out.add(o)
    return frozenset(out)


@attrs.frozen
class LedgerConfig:
    """What the ledger must know about the stream and the failure policy.

    ``stream_len`` is the number of ordinals the source will ever yield
    (epochs times dataset length), or ``None`` for an unbounded stream.
    ``fingerprint`` identifies the stream (dataset and order); a checkpoint
    written under another fingerprint is refused at resume. ``max_window``
    bounds the span from the cut to the source's position (the in-flight
    window plus what resolved out of order above the cut): a stamp that would
    pass it is refused, and so is a record that spans more, at resume and
    before anything is expanded, so that the work of a resume follows the
    record's size and never a number written in it (a forged record of a few
    hundred bytes cannot ask for 10**12 ordinals). Raise it if a real run
    needs more than about a million prompts in flight.

    ``samples`` is the size of a prompt's group (GRPO's n, 1 by default) and
    ``granularity`` what a failed sample fails; the group table does not
    read them, the ledger does. ``max_failures`` bounds the failures of
    a group, a failed sample being one.
    """

    on_failure: FailurePolicy = attrs.field(default=FailurePolicy.DROP, converter=FailurePolicy)
    max_failures: int = attrs.field(default=3, validator=_positive)
    stream_len: int | None = attrs.field(default=None, validator=_stream_len)
    fingerprint: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    max_window: int = attrs.field(default=1 << 20, validator=_positive)
    samples: int = attrs.field(default=1, validator=_positive)
    granularity: Granularity = attrs.field(default=Granularity.SIBLING, converter=Granularity)


@attrs.frozen
class GroupApplied:
    """A group transition's result: the new table and what the event did."""

    ledger: GroupTable
    effect: Effect


@attrs.frozen
class GroupResumed:
    """What a resume of the group table did (``Resumed`` without the
    siblings)."""

    ledger: GroupTable
    rewind_to: int
    covered: tuple[int, ...]


@attrs.frozen(eq=False)
class GroupTable:
    """The immutable coverage state of one stream's groups: the ledger's
    private group table (the prompt-level ledger of before issue 22).

    Build one with ``GroupTable.start(config)`` or ``GroupTable.resume(...)``; every
    other instance comes from a transition. Two ledgers compare equal when
    they hold the same state: the same configuration, source position, cut
    and entries, so that every transition, checkpoint and resume treats them
    alike (``filter_horizon``, a bound no transition reads, is not part of
    it).
    """

    config: LedgerConfig
    #: The next ordinal the source will yield: its position.
    next_ordinal: int
    #: The lowest ordinal that is neither trained nor dropped.
    cut: int
    #: One past the highest ordinal the resume filter may drop (the resume
    #: sets it; nothing else changes it); the filter is active while
    #: ``next_ordinal`` is below it. A bound for ``filtering``, not state: what
    #: a stamp filters is decided by the entries alone (FILTER-COVERED).
    filter_horizon: int
    _entries: IntMap = attrs.field(repr=False, alias="entries")
    #: The ordinals a checkpoint records (buffered, trained, dropped, or
    #: carrying failures), keyed to 1: an index into ``_entries`` so
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
    def start(cls, config: LedgerConfig | None = None) -> GroupTable:
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
        load_replay_buffer: bool,
        evicted_on_restore: Iterable[int] = (),
        rewind_to: int | None = None,
    ) -> GroupResumed:
        """The ledger after a restart from ``checkpoint``.

        ``load_replay_buffer`` (required: a resume must know) says whether
        the saved buffer was restored; a retained group reported restored
        but absent would hold the cut forever;
        ``evicted_on_restore`` lists retained ordinals that the restored
        buffer discarded (its age filter): they are generated again, and the
        eviction is not counted as a failure, since the trajectory did
        not fail. Retained ordinals of an unrestored buffer are generated
        again too. Raises ``FingerprintMismatchError`` for a checkpoint of
        another stream, ``CheckpointMismatchError`` when it refers to
        ordinals beyond ``config.stream_len``, and ``IllegalTransitionError``
        when ``evicted_on_restore`` names ordinals the checkpoint did not
        retain (or any at all when the buffer was not restored), or for an
        argument of the wrong type or range (a ``config`` that is not a
        ``LedgerConfig``, a ``checkpoint`` that is not a ``Checkpoint``, a
        ``load_replay_buffer`` that is not a bool, an ``evicted_on_restore``
        that is not an iterable of ints in ``[0, 2**64)``).

        ``rewind_to`` is for sources that cannot seek to the cut exactly (a
        data loader restored from a snapshot taken before an earlier pull):
        the source restarts at that ordinal, which must not exceed the cut,
        and the ordinals it re-yields below the cut are filtered as resolved.
        By default the source restarts at the cut itself.
        """
        if not isinstance(config, LedgerConfig):
            raise IllegalTransitionError(
                "resume", (), f"config must be a LedgerConfig, got {type(config).__name__}"
            )
        if not isinstance(checkpoint, Checkpoint):
            raise IllegalTransitionError(
                "resume", (), f"checkpoint must be a Checkpoint, got {type(checkpoint).__name__}"
            )
        if rewind_to is None:
            rewind_to = checkpoint.cut
        if type(rewind_to) is not int or not 0 <= rewind_to <= checkpoint.cut:
            raise IllegalTransitionError(
                "resume",
                (),
                f"rewind_to must be an int in [0, cut={checkpoint.cut}], got {shown(rewind_to)}: "
                "a source restarted above the cut would skip unresolved prompts",
            )
        if checkpoint.fingerprint != config.fingerprint:
            raise FingerprintMismatchError(
                expected=config.fingerprint, found=checkpoint.fingerprint
            )
        if type(load_replay_buffer) is not bool:
            raise IllegalTransitionError(
                "resume",
                (),
                f"load_replay_buffer must be a bool, got {type(load_replay_buffer).__name__}",
            )
        evicted = _evicted(evicted_on_restore)
        span = checkpoint.highest_ordinal() + 1 - checkpoint.cut
        if span > config.max_window:
            raise CheckpointMismatchError(
                f"checkpoint spans {span} ordinals above its cut {checkpoint.cut}, more than "
                f"max_window={config.max_window}: refused before expanding it (raise "
                "LedgerConfig.max_window if a real run had that many in flight)"
            )
        if config.stream_len is not None and (
            checkpoint.cut > config.stream_len or checkpoint.highest_ordinal() >= config.stream_len
        ):
            raise CheckpointMismatchError(
                f"checkpoint refers to ordinals up to {checkpoint.highest_ordinal()} "
                f"(cut {checkpoint.cut}), beyond this stream's length {config.stream_len}"
            )
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

        failures = dict(checkpoint.failures)
        changes: list[tuple[int, int | None]] = []
        noted: list[tuple[int, int | None]] = []
        counts = [0] * len(Status)
        covered: list[int] = []
        # What the record says of each ordinal it names (None: only its
        # failures; a record keeps none for resolved ordinals).
        said: dict[int, Status | None] = dict.fromkeys(failures)
        said.update(dict.fromkeys(checkpoint.trained(), Status.TRAINED))
        said.update(dict.fromkeys(checkpoint.dropped(), Status.DROPPED))
        said.update(dict.fromkeys(retained, Status.BUFFERED))
        for o, what in said.items():
            n = failures.get(o, 0)
            status = resume_outcome(what, restored=o in restored, failures=n)
            if status is None:
                continue  # nothing to hold: the source stamps it as new
            changes.append((o, _pack(status, n)))
            counts[status] += 1
            if recorded(status, n):
                noted.append((o, 1))
            if stamp_outcome(status) is None:
                covered.append(o)
        covered.sort()
        horizon = covered[-1] + 1 if covered else checkpoint.cut
        ledger = cls(
            config=config,
            next_ordinal=rewind_to,
            cut=checkpoint.cut,
            filter_horizon=horizon,
            entries=IntMap().updated(changes),
            noted=IntMap().updated(noted),
            counts=tuple(counts),
        )
        return GroupResumed(ledger=ledger, rewind_to=rewind_to, covered=tuple(covered))

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

    def failures(self, ordinal: int) -> int:
        """Failures so far of an unresolved ``ordinal`` (0 if none)."""
        value = self._entries.get(ordinal)
        return 0 if value is None else value >> _FAIL_SHIFT

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
        return sum(self._counts[s] for s in LIVE)

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
            # ``filter_horizon`` is left out on purpose. No transition reads
            # it (a stamp filters by the entries; the checkpoint does not
            # record it; a resume computes a new one from the record), so two
            # ledgers that differ only in it have the same future under every
            # event: they are one state. It only bounds the ``filtering``
            # query (FILTER-CLEARS); the exhaustive checker, which checks that
            # bound, keeps it beside the ledger in its own state. So is the
            # siblings' detail: the ledger's identity holds it.
            key = (
                self.config,
                self.next_ordinal,
                self.cut,
                tuple((o, v & ~_DETAIL_MASK) for o, v in self._entries.items()),
            )
            object.__setattr__(self, "_identity", key)
            return key
        return self._identity

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupTable):
            return NotImplemented
        return self is other or self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    # -- transitions ------------------------------------------------------

    def apply(self, event: Event) -> GroupApplied:
        """Apply ``event`` and return the new ledger with its effect.

        Raises ``IllegalTransitionError`` naming the event and the ordinals
        that made it illegal; ``self`` is unchanged either way.
        """
        if isinstance(event, Stamp):
            return self._stamp(event.count)
        return self._move(event)

    def stamp(self, count: int) -> GroupApplied:
        """The source yielded its next ``count`` prompts: stamp them.

        ``effect.stamped`` are their ordinals (fewer than ``count`` at the
        end of a finite stream); ``effect.kept`` those that became pending.
        The others are covered by a checkpoint and must not be generated."""
        return self.apply(Stamp(count))

    def dispatch(self, ordinals: Iterable[int]) -> GroupApplied:
        """These pending ordinals were handed to rollout workers."""
        return self.apply(Dispatch(ordinals))

    def buffer(self, ordinals: Iterable[int]) -> GroupApplied:
        """These outstanding ordinals' groups landed in the replay buffer."""
        return self.apply(Buffer(ordinals))

    def train(self, ordinals: Iterable[int]) -> GroupApplied:
        """One training step consumed these buffered groups."""
        return self.apply(Train(ordinals))

    def fail(self, ordinals: Iterable[int]) -> GroupApplied:
        """Generation failed for these outstanding ordinals. ``effect``
        says which were requeued and which dropped."""
        return self.apply(Fail(ordinals))

    def setback(self, ordinals: Iterable[int]) -> GroupApplied:
        """One sample of each of these outstanding groups failed and only it
        is generated again; ``effect.dropped`` names the groups the failure
        policy dropped instead (``Ledger.fail_sample``'s move)."""
        return self.apply(Setback(ordinals))

    def evict(self, ordinals: Iterable[int]) -> GroupApplied:
        """The buffer discarded these groups as stale. ``effect`` says which
        were requeued and which dropped."""
        return self.apply(Evict(ordinals))

    def checkpoint(self, *, save_buffer: bool = True) -> Checkpoint:
        """The durable state at this moment.

        ``save_buffer`` says whether the replay buffer is saved with it; if
        not, its groups are not retained and a resume regenerates them.
        O(what it records): pending and outstanding prompts without failures
        are not visited."""
        trained: list[int] = []
        dropped: list[int] = []
        retained: list[int] = []
        failures: list[tuple[int, int]] = []
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
                n = value >> _FAIL_SHIFT
                if n:
                    failures.append((o, n))
        return Checkpoint(
            cut=self.cut,
            trained_above_cut=to_ranges(trained),
            dropped_above_cut=to_ranges(dropped),
            retained=to_ranges(retained),
            failures=tuple(failures),
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
    ) -> GroupTable:
        # attrs.evolve introspects the class on every call; transitions are
        # the hot path, so they build the successor directly.
        return GroupTable(
            config=self.config,
            next_ordinal=next_ordinal,
            cut=cut,
            filter_horizon=self.filter_horizon,
            entries=entries,
            noted=noted,
            counts=counts,
        )

    def _stamp(self, count: int) -> GroupApplied:
        start = self.next_ordinal
        stop = start + count
        if self.config.stream_len is not None:
            stop = max(start, min(stop, self.config.stream_len))
        if stop - self.cut > self.config.max_window:
            raise IllegalTransitionError(
                Stamp.name,
                (),
                f"stamping to {stop} would span {stop - self.cut} ordinals above the cut "
                f"{self.cut}, more than max_window={self.config.max_window}",
            )
        if stop > LIMIT:
            # No record could hold these ordinals (nor the journal's u64).
            raise IllegalTransitionError(
                Stamp.name, (), f"stamping to {stop} would pass the last ordinal, 2**64 - 1"
            )
        stamped = range(start, stop)
        entries = self._entries
        counts = list(self._counts)
        top = entries.max_key()
        if start >= self.cut and (top is None or top < start):
            # Fast path: the ledger knows nothing at or above the source's
            # position, so every stamped ordinal is new (UNSTAMPED, no entry).
            kept: Sequence[int] = stamped
            changes: list[tuple[int, int | None]] = [(o, _NEW) for o in stamped]
            counts[_NEW] += len(stamped)
            held: list[int] = []
        else:
            kept_list: list[int] = []
            changes = []
            held = []
            cut = self.cut
            for o in stamped:
                value = entries.get(o)
                if value is not None:
                    current = value & _STATUS_MASK
                elif o < cut:
                    # No entry lies below the cut (CUT-LOWER-BOUND): resolved,
                    # the cut passed it while it was unstamped.
                    current = _ABSENT
                else:
                    current = _UNSTAMPED
                target = _ON_STAMP[current]
                if target == _FILTERED:
                    # Covered, so filtered out (FILTER-COVERED); a buffered
                    # one is still live.
                    if current in _HELD:
                        held.append(o)
                    continue
                if value is None:
                    changes.append((o, target))
                else:
                    # A carried UNSTAMPED entry keeps its failures.
                    changes.append((o, target | (value & ~_STATUS_MASK)))
                    counts[current] -= 1
                counts[target] += 1
                kept_list.append(o)
            kept = kept_list
        ledger = self._replace(
            next_ordinal=stop,
            cut=self.cut,
            entries=entries.updated(changes),
            noted=self._noted,
            counts=tuple(counts),
        )
        return GroupApplied(
            ledger,
            Effect(event=Stamp.name, stamped=stamped, kept=tuple(kept), buffered=tuple(held)),
        )

    def _detail(self, ordinals: Sequence[int]) -> list[int]:
        """The detail each of ``ordinals`` carries (0: none), for the
        ledger's single-sample groups."""
        return [
            0 if v is None else (v & _DETAIL_MASK) >> _STATUS_BITS
            for v in self._entries.get_many(ordinals)
        ]

    def _details(self) -> Iterator[tuple[int, int]]:
        """Every ``(ordinal, detail)`` with detail, ascending. O(entries)."""
        for o, v in self._entries.items(self.cut):
            if v & _DETAIL_MASK:
                yield o, (v & _DETAIL_MASK) >> _STATUS_BITS

    def _with_detail(self, changes: Sequence[tuple[int, int]]) -> GroupTable:
        """This table with the detail of these outstanding groups replaced
        (0: cleared); their status, counts and record are unchanged."""
        values = self._entries.get_many([o for o, _ in changes])
        updates: list[tuple[int, int | None]] = []
        for (o, detail), v in zip(changes, values, strict=True):
            assert v is not None and v & _STATUS_MASK == _OUTSTANDING
            updates.append((o, (v & ~_DETAIL_MASK) | (detail << _STATUS_BITS)))
        return self._replace(
            next_ordinal=self.next_ordinal,
            cut=self.cut,
            entries=self._entries.updated(updates),
            noted=self._noted,
            counts=self._counts,
        )

    def _move(self, event: Move, details: Sequence[int] | None = None) -> GroupApplied:
        """``event``'s move; ``details`` (a dispatch's only) is the detail
        each of its ordinals gets, in order."""
        table, requeued, unstamped, dropped = self._moved(
            type(event), event.name, event.ordinals, details
        )
        return GroupApplied(
            table,
            Effect(
                event=event.name,
                requeued=tuple(requeued),
                unstamped=tuple(unstamped),
                dropped=tuple(dropped),
            ),
        )

    def _moved(
        self,
        kind: type[Move],
        name: str,
        ordinals: tuple[int, ...],
        details: Sequence[int] | None = None,
        values: Sequence[int | None] | None = None,
    ) -> tuple[GroupTable, list[int], list[int], list[int]]:
        """The move of ``kind`` over ``ordinals`` (valid as its event's, by
        the event or by the caller): the new table and the requeued,
        unstamped and dropped ordinals. ``values`` are the ordinals' entries
        if the caller has read them already."""
        entries = self._entries
        policy = self.config.on_failure
        max_failures = self.config.max_failures
        counts = list(self._counts)
        changes: list[tuple[int, int | None]] = []
        illegal: list[tuple[int, str]] = []
        requeued: list[int] = []
        unstamped: list[int] = []
        dropped: list[int] = []
        # Where ``failure_outcome`` sends an ordinal, the list that reports it.
        reported = {
            int(Status.PENDING): requeued,
            int(Status.UNSTAMPED): unstamped,
            int(Status.DROPPED): dropped,
        }
        # The table for this event, keyed by packed status: the hot loop
        # below works on ints and builds no enum members.
        moves = _MOVES_BY_EVENT[kind]
        next_ordinal = self.next_ordinal
        if values is None:
            values = entries.get_many(ordinals)
        for o, value in zip(ordinals, values, strict=True):
            current = _ABSENT if value is None else value & _STATUS_MASK
            target = moves.get(current, _ILLEGAL)
            if target == _ILLEGAL:
                found = self._describe(o, value)
                illegal.append((o, found.name.lower() if isinstance(found, Status) else found))
                continue
            assert value is not None
            failures = value >> _FAIL_SHIFT
            if target == _FAILURE:
                # An ordinal below the source's position was stamped in this
                # life; one at or above it was restored and not re-stamped.
                status, failures = failure_outcome(
                    policy, max_failures, failures, stamped=o < next_ordinal
                )
                target = int(status)
                reported[target].append(o)
            elif target == _SETBACK:
                status, failures = setback_outcome(policy, max_failures, failures)
                target = int(status)
                if status is Status.DROPPED:
                    dropped.append(o)
            elif target in _RESOLVED_INTS:
                failures = 0  # resolved ordinals keep no failures
            if target == _OUTSTANDING:
                # A setback keeps the group outstanding, and the detail of
                # its sibling (a dispatch finds none).
                changes.append((o, target | (value & _DETAIL_MASK) | (failures << _FAIL_SHIFT)))
            else:
                changes.append((o, target | (failures << _FAIL_SHIFT)))
            counts[current] -= 1
            counts[target] += 1
        if illegal:
            detail = ", ".join(f"{o} is {what}" for o, what in illegal[:10])
            raise IllegalTransitionError(
                name,
                (o for o, _ in illegal),
                f"{name} needs {_WANTED[kind]} ordinals; {detail}",
            )
        if details is not None:
            changes = [
                (o, None if v is None else v | (d << _STATUS_BITS))
                for (o, v), d in zip(changes, details, strict=True)
            ]
        cut = self.cut
        noted = self._noted
        if kind in NOTING:
            # From now on a checkpoint records these ordinals.
            noted = noted.updated([(o, 1) for o, _ in changes])
        # Advance the cut over the resolved prefix and forget it (CUT-MONO,
        # BOUNDED-SIZE), in the same trie update as the moves themselves.
        # Only an event that resolves the cut itself can move it.
        new = dict(changes)
        value = new[cut] if cut in new else entries.get(cut)
        if value is not None and value & _STATUS_MASK in _RESOLVED_INTS:
            forget: list[tuple[int, int | None]] = []
            while value is not None and value & _STATUS_MASK in _RESOLVED_INTS:
                counts[value & _STATUS_MASK] -= 1
                new[cut] = None
                forget.append((cut, None))
                cut += 1
                value = new[cut] if cut in new else entries.get(cut)
            noted = noted.updated(forget)
            changes = list(new.items())
        table = self._replace(
            next_ordinal=self.next_ordinal,
            cut=cut,
            entries=entries.updated(changes),
            noted=noted,
            counts=tuple(counts),
        )
        return table, requeued, unstamped, dropped

    def _describe(self, ordinal: int, value: int | None) -> Status | str:
        if value is not None:
            return Status(value & _STATUS_MASK)
        if ordinal < self.cut:
            return "resolved below the cut"
        if ordinal >= self.next_ordinal:
            return "not yet stamped"
        raise AssertionError(f"ordinal {ordinal} in the live window has no entry")  # LIVE-ENTRY
