"""The ledger: a prompt's group of n samples, sibling by sibling.

Theory of operation
-------------------
GRPO generates ``n`` samples (siblings) per prompt and trains on the group
only when all of them are done (``LedgerConfig.samples``; n = 1 by default,
a prompt-level integration). The private group table (``_groups.GroupTable``)
tracks the group as one ordinal; ``Ledger`` wraps it and adds, for each
outstanding group only, the status of each sibling (``Sibling``: unstarted, running,
sealed) and the *attempt* it runs under or was sealed by. So a crash, a dead
worker or a failed sample costs only the samples that were not yet done:

* ``dispatch`` moves a group to outstanding and starts every sibling that is
  not sealed already under a new attempt (``effect.leases``): one counter
  numbers the attempts of the whole run, upwards across resumes, so an
  attempt names one try of one sibling for good. A ledger with an
  ``attempt_limit`` (the attempts a rollout journal reserved) refuses to
  deal one at or past it, so no attempt leaves it that a later life's
  floor does not cover.
* ``seal`` accepts a sample from its sibling's current attempt and ignores
  (*fences*) any other: a worker declared dead, a request that timed out and
  answered late, an attempt of before a crash. When a group's last sibling
  seals, the group lands in the buffer (``effect.landed``).
* ``fail_sample`` fails one attempt. Under ``sibling`` granularity the
  group's failure count grows by one (``Setback``) and only that sibling is
  generated again (``effect.restart``; ``restart`` it), or the policy drops the
  group. Under ``group`` granularity the whole group fails (``Fail``).
* Everything else (stamp, a whole group's buffer or fail, evict, train) is
  the group table's, unchanged; a group's buffer or fail discards its
  siblings' detail, which fences their running attempts.

A checkpoint (``Checkpoint``) adds to the groups' record the
attempt counter and, when the framework saves their samples with it, the
sealed siblings of outstanding groups (``save_sealed``: NeMo-RL keeps these
at the train boundary). A resume is given the sealed siblings whose samples
the framework still holds (from that checkpoint, or from a rollout journal:
``frontier_core.journal``) and keeps them for the groups that need
generation; when such a group is dispatched again those siblings come back
as ``effect.reused`` and only the others are generated. A group whose n
siblings are all held lands at its dispatch without generating anything.

Exactly-once, per sample: every prompt is trained once per lineage with
exactly its n samples, each sealed by exactly one attempt, or dropped on
record. With ``samples=1`` and only the group events it is the group table
(``proofs/SAMPLES.md`` has the invariants), whose queries it answers too.

Rules of the house
------------------
* The sibling moves are ``_transitions.SAMPLE_TRANSITIONS`` and the rules
  beside it; the group moves are the group table's (``TRANSITIONS``),
  applied by the wrapped ``GroupTable``. Nothing here decides a group's fate by itself.
* Values are immutable; an illegal event raises ``IllegalTransitionError``
  and changes nothing. A fenced result is not an error: it is the expected
  trace of a race, reported in ``effect.fenced``.
* Per-sibling detail exists only for outstanding groups and for the sealed
  siblings a resume keeps for groups not yet dispatched again: O(window).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from typing import Final

import attrs

from ._checkpoint import MAX_ATTEMPT as MAX_ATTEMPT
from ._checkpoint import Checkpoint
from ._errors import (
    CheckpointMismatchError,
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
    FailSample,
    Lease,
    Restart,
    SampleEvent,
    Seal,
    Setback,
    Sibling,
    Stamp,
    Status,
    Train,
    _distinct,
    _seal_leases,
)
from ._groups import _DETAIL_MASK, GroupTable, LedgerConfig
from ._groups import _STATUS_BITS as _GROUP_STATUS_BITS
from ._transitions import SAMPLE_TRANSITIONS, current_attempt, sample_failure
from ._trie import IntMap

# One trie value per group packs its n siblings, ``_WIDTH`` bits each: the
# status (2 bits; ``_ABSENT`` for a sibling without detail) and the attempt
# (32 bits, the journal's width) above it. So a seal reads and writes one
# entry, and whether the group is complete is one mask test, whatever n.
_STATUS_BITS: Final = 2
_STATUS_MASK: Final = (1 << _STATUS_BITS) - 1
_WIDTH: Final = _STATUS_BITS + 32
_FIELD_MASK: Final = (1 << _WIDTH) - 1
_RUNNING: Final = int(Sibling.RUNNING)
_SEALED: Final = int(Sibling.SEALED)
_UNSTARTED: Final = int(Sibling.UNSTARTED)
_ABSENT: Final = 3


@functools.lru_cache(maxsize=64)
def _masks(n: int) -> tuple[int, int, int]:
    """For groups of ``n``: every status field, all of them sealed, all of
    them absent."""
    every = sum(_STATUS_MASK << (s * _WIDTH) for s in range(n))
    sealed = sum(_SEALED << (s * _WIDTH) for s in range(n))
    return every, sealed, every  # absent is all status bits set


def _field(value: int, sibling: int) -> tuple[int, int]:
    """``(status, attempt)`` of ``sibling`` in a group's packed value."""
    f = (value >> (sibling * _WIDTH)) & _FIELD_MASK
    return f & _STATUS_MASK, f >> _STATUS_BITS


def _with(value: int, sibling: int, status: int, attempt: int) -> int:
    shift = sibling * _WIDTH
    return (value & ~(_FIELD_MASK << shift)) | ((status | attempt << _STATUS_BITS) << shift)


@attrs.frozen
class Applied:
    """A transition's result: the new ledger and what the event did."""

    ledger: Ledger
    effect: Effect


_NEW: Final = object.__new__
_SET: Final = object.__setattr__


def _applied(ledger: Ledger, effect: Effect) -> Applied:
    """``Applied(ledger, effect)``, built as ``Ledger._replace`` builds."""
    new = _NEW(Applied)
    _SET(new, "ledger", ledger)
    _SET(new, "effect", effect)
    return new


@attrs.frozen
class Resumed:
    """What a resume did: the source restarts at ``rewind_to``; the
    ``covered`` ordinals at or above it are dropped at their stamp; the
    ``reused`` siblings (of groups that need generation) come back sealed
    when their group is dispatched, the ``ignored`` ones were not needed
    (their group is resolved or in the restored buffer)."""

    ledger: Ledger
    rewind_to: int
    covered: tuple[int, ...]
    reused: tuple[Lease, ...]
    ignored: tuple[Lease, ...]


@attrs.frozen(eq=False)
class Ledger:
    """The immutable coverage state of one stream, sample by sample.

    The groups' state is a private group table; its queries (``status``,
    ``attempts``, ``count``, ``ordinals``, ``cut``...) are the ledger's.
    ``next_attempt`` is the
    number the next attempt gets; ``attempt_limit`` (``None``: none) the
    number no attempt reaches: attempts below it are the ones reserved
    durably (a rollout journal's ``Reserve``), and a ``dispatch`` or
    ``restart`` that would deal one at or above it is refused
    (``IllegalTransitionError``), so a run with a journal cannot deal an
    attempt a later life does not know of. Build one with
    ``Ledger.start`` or ``Ledger.resume``. Two compare equal
    when they hold the same state (the prompt-level state, the counter, the
    limit and every sibling's detail).
    """

    _groups: GroupTable = attrs.field(alias="groups")
    next_attempt: int
    #: ordinal -> its siblings' statuses and attempts, packed (``_with``).
    _siblings: IntMap = attrs.field(repr=False, alias="siblings")
    attempt_limit: int | None = attrs.field(default=None, kw_only=True)
    _identity: tuple[object, ...] | None = attrs.field(
        default=None, init=False, repr=False, eq=False
    )

    # -- construction -----------------------------------------------------

    @classmethod
    def start(
        cls,
        config: LedgerConfig | None = None,
        *,
        attempt_floor: int = 0,
        attempt_limit: int | None = None,
    ) -> Ledger:
        """A ledger for a fresh run: nothing stamped, attempts numbered from
        ``attempt_floor`` and below ``attempt_limit`` (a rollout journal's
        ``recover(None, ...)`` gives both; see ``resume``)."""
        _check_attempts(attempt_floor, attempt_limit, "start")
        if attempt_limit is not None and attempt_floor > attempt_limit:
            raise IllegalTransitionError(
                "start", (), f"attempt_limit {attempt_limit} is below attempt_floor {attempt_floor}"
            )
        return cls(
            groups=GroupTable.start(config),
            next_attempt=attempt_floor,
            siblings=IntMap(),
            attempt_limit=attempt_limit,
        )

    @classmethod
    def resume(
        cls,
        config: LedgerConfig,
        checkpoint: Checkpoint,
        *,
        load_replay_buffer: bool,
        sealed: Iterable[Iterable[int]] = (),
        evicted_on_restore: Iterable[int] = (),
        rewind_to: int | None = None,
        attempt_floor: int = 0,
        attempt_limit: int | None = None,
    ) -> Resumed:
        """The ledger after a restart from ``checkpoint``.

        ``load_replay_buffer`` (required: a resume must know) says whether
        the saved buffer was restored; a retained group reported restored
        but absent would hold the cut forever; ``evicted_on_restore`` lists
        retained ordinals that the restored buffer discarded (its age
        filter): they are generated again, and the eviction is not counted
        as a failure, since the trajectory did not fail. Retained
        ordinals of an unrestored buffer are generated again too.
        ``rewind_to`` is for sources that cannot seek to the cut exactly (a
        data loader restored from a snapshot taken before an earlier pull):
        the source restarts at that ordinal, which must not exceed the cut,
        and the ordinals it re-yields below the cut are filtered as resolved.
        By default the source restarts at the cut itself.

        ``sealed`` (``()``, nothing, by default) lists the sealed siblings
        ``(ordinal, sibling, attempt)`` whose samples the framework holds:
        those the checkpoint saved
        (``checkpoint.sealed``) if it restored them, and those a rollout
        journal replayed (``JournalState.sealed``), each sibling once. They
        are kept for the groups that need generation and ignored for the
        others. ``attempt_floor`` is a number no attempt of the crashed run
        reached (the journal's ``next_attempt``), so that no result of before
        the crash can pass for a new attempt; the counter starts at or above
        it, the checkpoint's counter and every held attempt. ``attempt_limit``
        bounds the attempts this life deals (``Ledger``): the journal's
        reservation (``Recovered.attempt_limit``), raised with
        ``with_attempt_limit`` after a new one.

        Raises ``FingerprintMismatchError`` for a checkpoint of another
        stream, ``CheckpointMismatchError`` when it refers to ordinals
        beyond ``config.stream_len`` or spans more than ``max_window``, or
        when its group size is not ``config.samples``, and
        ``IllegalTransitionError`` when ``evicted_on_restore`` names ordinals
        the checkpoint did not retain (or any at all when the buffer was not
        restored), for a sealed sibling outside the groups (a sibling index
        >= n, an ordinal beyond the window or the stream) or listed twice,
        for an ``attempt_limit`` below the counter the resume starts at, or
        for an argument of the wrong type or range (a ``config`` that is not
        a ``LedgerConfig``, a ``checkpoint`` that is not a ``Checkpoint``, a
        ``load_replay_buffer`` that is not a bool, an ``evicted_on_restore``
        that is not an iterable of ints in ``[0, 2**64)``).
        """
        if not isinstance(config, LedgerConfig):
            raise IllegalTransitionError(
                "resume", (), f"config must be a LedgerConfig, got {type(config).__name__}"
            )
        if not isinstance(checkpoint, Checkpoint):
            raise IllegalTransitionError(
                "resume",
                (),
                f"checkpoint must be a Checkpoint, got {type(checkpoint).__name__}",
            )
        n = config.samples
        if checkpoint.samples != n:
            raise CheckpointMismatchError(
                f"checkpoint has groups of {checkpoint.samples} samples, this run {n}"
            )
        _check_attempts(attempt_floor, attempt_limit, "resume")
        resumed = GroupTable.resume(
            config,
            checkpoint,
            load_replay_buffer=load_replay_buffer,
            evicted_on_restore=evicted_on_restore,
            rewind_to=rewind_to,
        )
        ledger = resumed.ledger
        # Shape checks: ints >= 0, each sibling once.
        held = tuple(Lease(*x) for x in _distinct("resume", sealed, 3))
        top = ledger.cut + config.max_window
        if config.stream_len is not None:
            top = min(top, config.stream_len)
        bad = [lease for lease in held if lease.sibling >= n or lease.ordinal >= top]
        if bad:
            raise IllegalTransitionError(
                "resume",
                (lease.ordinal for lease in bad),
                f"sealed names siblings outside the groups (n={n}, ordinals below {top}): "
                + ", ".join(map(str, bad[:5])),
            )
        reused: list[Lease] = []
        ignored: list[Lease] = []
        for lease in held:
            status = ledger.status(lease.ordinal)
            # Only a group that waits for the source needs generation: the
            # others are resolved (None, trained, dropped) or restored.
            (reused if status is Status.UNSTAMPED else ignored).append(lease)
        reused.sort()
        ignored.sort()
        absent = _masks(n)[2]
        groups: dict[int, int] = {}
        for o, s, a in reused:
            if a > MAX_ATTEMPT:
                raise IllegalTransitionError("resume", (o,), f"attempt {a} exceeds 2**32 - 1")
            groups[o] = _with(groups.get(o, absent), s, _SEALED, a)
        changes: list[tuple[int, int | None]] = list(groups.items())
        floor = max([checkpoint.next_attempt, attempt_floor] + [a + 1 for _, _, a in held])
        if attempt_limit is not None and floor > attempt_limit:
            raise IllegalTransitionError(
                "resume",
                (),
                f"attempt_limit {attempt_limit} is below the counter the resume starts at "
                f"({floor}): reserve attempts above it first",
            )
        siblings = IntMap().updated(changes)
        return Resumed(
            ledger=cls(
                groups=ledger, next_attempt=floor, siblings=siblings, attempt_limit=attempt_limit
            ),
            rewind_to=resumed.rewind_to,
            covered=resumed.covered,
            reused=tuple(reused),
            ignored=tuple(ignored),
        )

    # -- queries ----------------------------------------------------------

    @property
    def config(self) -> LedgerConfig:
        return self._groups.config

    @property
    def cut(self) -> int:
        return self._groups.cut

    @property
    def next_ordinal(self) -> int:
        return self._groups.next_ordinal

    @property
    def exhausted(self) -> bool:
        return self._groups.exhausted

    @property
    def drained(self) -> bool:
        return self._groups.drained

    @property
    def filter_horizon(self) -> int:
        """One past the highest ordinal the resume filter may drop (the
        resume sets it; nothing else changes it)."""
        return self._groups.filter_horizon

    @property
    def filtering(self) -> bool:
        """Whether the resume filter may still drop re-yielded ordinals."""
        return self._groups.filtering

    def status(self, ordinal: int) -> Status | None:
        """The status of the group ``ordinal``; ``None`` below the cut
        (resolved and forgotten). An ordinal the source has not reached is
        ``UNSTAMPED``."""
        return self._groups.status(ordinal)

    def failures(self, ordinal: int) -> int:
        """The failures so far of an unresolved group (0 if none), its
        failed samples included: the count ``max_failures`` bounds (not an
        attempt number, which names one try of one sibling)."""
        return self._groups.failures(ordinal)

    def count(self, status: Status) -> int:
        """How many groups at or above the cut are in ``status``. For
        ``UNSTAMPED``, only those the ledger holds an entry for."""
        return self._groups.count(status)

    def ordinals(self, status: Status) -> Iterator[int]:
        """The groups in ``status`` (at or above the cut), ascending.
        O(entries): for inspection and checkpoints, not for hot loops."""
        return self._groups.ordinals(status)

    def in_flight(self) -> int:
        """Pending, outstanding and buffered groups: the live window."""
        return self._groups.in_flight()

    def size(self) -> int:
        """Group entries held: O(unresolved + resolved above the cut)."""
        return self._groups.size()

    def node_count(self) -> int:
        return self._groups.node_count() + self._siblings.node_count()

    def sibling(self, ordinal: int, sibling: int) -> tuple[Sibling, int | None] | None:
        """``(status, attempt)`` of one sibling of an outstanding group
        (attempt ``None`` while it is unstarted), or of a sealed sibling a
        resume keeps; ``None`` if the ledger holds no detail of it."""
        n = self.config.samples
        if not 0 <= sibling < n:
            raise ValueError(f"sibling must be in [0, {n}), got {sibling!r}")
        value = self._read(self._groups, self._siblings, [ordinal])[0]
        if value is None:
            return None
        status, attempt = _field(value, sibling)
        if status == _ABSENT:
            return None
        # An unstarted sibling keeps its failed attempt only to fence it.
        return Sibling(status), (None if status == _UNSTARTED else attempt)

    def running(self) -> Iterator[Lease]:
        """The current attempts of the running siblings, ascending."""
        yield from self._with_status(_RUNNING)

    def held(self) -> Iterator[Lease]:
        """The sealed siblings of groups that have not landed (outstanding,
        or kept by a resume until their group is dispatched), ascending."""
        yield from self._with_status(_SEALED)

    def _with_status(self, wanted: int) -> Iterator[Lease]:
        n = self.config.samples
        # A single-sample group with a sealed sibling has landed, unless a
        # resume keeps it (in the map): ``held`` (so a checkpoint) costs
        # what it records.
        every = self._siblings.items() if n == 1 and wanted == _SEALED else self._all()
        for o, value in every:
            for s in range(n):
                status, attempt = _field(value, s)
                if status == wanted:
                    yield Lease(o, s, attempt)

    def sibling_count(self) -> int:
        """Sibling details held: the siblings of outstanding groups and the
        sealed ones a resume keeps; O(outstanding groups x n), never the run.
        (A query: it walks them.)"""
        n = self.config.samples
        return sum(
            1 for _, value in self._all() for s in range(n) if _field(value, s)[0] != _ABSENT
        )

    def with_attempt_limit(self, limit: int | None, *, floor: int = 0) -> Ledger:
        """This ledger dealing attempts below ``limit`` only (``None``: no
        limit), its counter raised to ``floor`` if it is below: call it
        after reserving attempts below ``limit`` durably (a rollout journal's
        ``cover`` does both). Raising the counter skips numbers, never
        reuses one. Raises ``IllegalTransitionError`` for a limit below the
        counter."""
        _check_attempts(floor, limit, "reserve")
        attempt = max(self.next_attempt, floor)
        if limit is not None and attempt > limit:
            raise IllegalTransitionError(
                "reserve", (), f"attempt_limit {limit} is below the counter {attempt}"
            )
        return Ledger(
            groups=self._groups, next_attempt=attempt, siblings=self._siblings, attempt_limit=limit
        )

    def _key(self) -> tuple[object, ...]:
        if self._identity is None:
            key = (
                self._groups,
                self.next_attempt,
                self.attempt_limit,
                tuple(self._all()),
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

    def apply(self, event: Event | SampleEvent) -> Applied:
        """Apply ``event``; raises ``IllegalTransitionError`` and changes
        nothing if it is illegal. Prompt-level events act on whole groups."""
        single = self.config.samples == 1
        if isinstance(event, Seal):
            return self._seal_single(event.leases) if single else self._seal(event.leases)
        if isinstance(event, FailSample):
            return self._fail_sample(event.leases)
        if isinstance(event, Restart):
            return self._start(event.siblings)
        if isinstance(event, Dispatch):
            return self._dispatch_single(event) if single else self._dispatch(event.ordinals)
        applied = self._groups.apply(event)
        siblings = self._siblings
        if isinstance(event, Buffer | Fail | Setback):
            # The group moved as a whole (a setback only when it dropped the
            # group): its siblings' detail goes, which fences their running
            # attempts from now on.
            # (A single-sample group's detail, in its entry, went with the move.)
            if siblings:
                gone = [
                    o for o in event.ordinals if applied.ledger.status(o) is not Status.OUTSTANDING
                ]
                siblings = self._forget(siblings, gone)
        return _applied(self._replace(applied.ledger, self.next_attempt, siblings), applied.effect)

    def stamp(self, count: int) -> Applied:
        """The source yielded its next ``count`` prompts: stamp them.

        ``effect.stamped`` are their ordinals (fewer than ``count`` at the
        end of a finite stream); ``effect.kept`` those that became pending.
        The others are covered by a checkpoint and must not be generated."""
        return self.apply(Stamp(count))

    def dispatch(self, ordinals: Iterable[int]) -> Applied:
        """These pending groups were handed to rollout: every sibling not
        sealed already starts under a new attempt (``effect.leases``); the
        sealed ones are ``effect.reused``; a group with all n sealed lands
        at once (``effect.landed``)."""
        return self.apply(Dispatch(ordinals))

    def restart(self, siblings: Iterable[Iterable[int]]) -> Applied:
        """Restart these unstarted siblings ``(ordinal, sibling)`` under new
        attempts (``effect.leases``)."""
        return self.apply(Restart(siblings))

    def seal(self, leases: Iterable[Iterable[int]]) -> Applied:
        """These attempts ``(ordinal, sibling, attempt)`` finished their
        samples: ``effect.sealed`` were accepted, ``effect.fenced`` ignored,
        ``effect.landed`` the groups that became complete."""
        # ``Seal``'s own validation (its converter), without the event value.
        checked = _seal_leases(leases)
        if self._groups.config.samples == 1:
            return self._seal_single(checked)
        return self._seal(checked)

    def fail_sample(self, leases: Iterable[Iterable[int]]) -> Applied:
        """These attempts failed. ``effect.restart`` are the siblings to
        generate again (``sibling`` granularity); ``effect.requeued``,
        ``unstamped`` and ``dropped`` the groups that failed as a whole;
        ``effect.fenced`` the results ignored."""
        return self.apply(FailSample(leases))

    def buffer(self, ordinals: Iterable[int]) -> Applied:
        """These outstanding groups landed whole in the replay buffer."""
        return self.apply(Buffer(ordinals))

    def train(self, ordinals: Iterable[int]) -> Applied:
        """One training step consumed these buffered groups."""
        return self.apply(Train(ordinals))

    def fail(self, ordinals: Iterable[int]) -> Applied:
        """Generation failed for these outstanding groups as a whole.
        ``effect`` says which were requeued and which dropped."""
        return self.apply(Fail(ordinals))

    def setback(self, ordinals: Iterable[int]) -> Applied:
        """One sample of each of these outstanding groups failed and only it
        is generated again; ``effect.dropped`` names the groups the failure
        policy dropped instead (``fail_sample`` reports it with the
        sibling)."""
        return self.apply(Setback(ordinals))

    def evict(self, ordinals: Iterable[int]) -> Applied:
        """The buffer discarded these groups as stale. ``effect`` says which
        were requeued and which dropped."""
        return self.apply(Evict(ordinals))

    def checkpoint(self, *, save_buffer: bool = True, save_sealed: bool = True) -> Checkpoint:
        """The durable state at this moment.

        ``save_buffer`` says whether the replay buffer is saved with it; if
        not, its groups are not retained and a resume regenerates them.
        ``save_sealed`` says whether the framework saves the samples of the
        sealed siblings of outstanding groups with it (if not, a resume gets
        them from a journal, or regenerates them). O(what it records):
        pending and outstanding groups without failures are not visited."""
        sealed = tuple(self.held()) if save_sealed else ()
        return attrs.evolve(
            self._groups.checkpoint(save_buffer=save_buffer),
            samples=self.config.samples,
            next_attempt=self.next_attempt,
            sealed=sealed,
        )

    # -- internals --------------------------------------------------------

    def _replace(self, groups: GroupTable, next_attempt: int, siblings: IntMap) -> Ledger:
        # Transitions are the hot path (a seal per sample): the successor is
        # built without the generated ``__init__``'s alias and default
        # handling, field by field, as attrs itself sets a frozen one.
        new = _NEW(Ledger)
        _SET(new, "_groups", groups)
        _SET(new, "next_attempt", next_attempt)
        _SET(new, "_siblings", siblings)
        _SET(new, "attempt_limit", self.attempt_limit)
        _SET(new, "_identity", None)
        return new

    def _check_limit(self, name: str, ordinals: Iterable[int], after: int) -> None:
        """Refuse to deal attempts up to ``after - 1`` past the limit."""
        if self.attempt_limit is not None and after > self.attempt_limit:
            raise IllegalTransitionError(
                name,
                ordinals,
                f"attempts up to {after - 1} would pass attempt_limit {self.attempt_limit}: "
                "only attempts reserved in the journal may be dealt (reserve more first: "
                "RolloutJournal.cover, or with_attempt_limit after RolloutJournal.reserve)",
            )

    def _forget(self, siblings: IntMap, ordinals: Iterable[int]) -> IntMap:
        gone: list[tuple[int, int | None]] = [(o, None) for o in ordinals if o in siblings]
        return siblings.updated(gone) if gone else siblings

    # Where the siblings' detail lives. For n > 1, in ``_siblings``: one
    # packed value per group (``_with``). For n = 1 (the fast path), an
    # outstanding group's lives in its own entry of the group table, as
    # ``1 + packed`` (0: none), so that a dispatch and a seal cost one trie
    # update, the group move's; ``_siblings`` keeps only the sealed siblings
    # a resume holds for groups not yet dispatched again. ``_read``,
    # ``_write`` and ``_all`` hide the difference from the rest.

    def _read(
        self, groups: GroupTable, siblings: IntMap, ordinals: Sequence[int]
    ) -> list[int | None]:
        """The packed detail of each of these groups (``None``: none)."""
        held: list[int | None] = siblings.get_many(ordinals) if siblings else [None] * len(ordinals)
        if self.config.samples != 1:
            return held
        return [h if d == 0 else d - 1 for d, h in zip(groups._detail(ordinals), held, strict=True)]

    def _write(
        self, groups: GroupTable, siblings: IntMap, changes: list[tuple[int, int | None]]
    ) -> tuple[GroupTable, IntMap]:
        """``groups`` and ``siblings`` with these groups' packed detail
        replaced (``None``: forgotten)."""
        if not changes:
            return groups, siblings
        if self.config.samples != 1:
            return groups, siblings.updated(changes)
        inline: list[tuple[int, int]] = []
        apart: list[tuple[int, int | None]] = []
        for o, v in changes:
            if groups.status(o) is Status.OUTSTANDING:
                inline.append((o, 0 if v is None else v + 1))
            elif v is not None or o in siblings:
                apart.append((o, v))
        if inline:
            groups = groups._with_detail(inline)
        return groups, siblings.updated(apart) if apart else siblings

    def _all(self) -> Iterator[tuple[int, int]]:
        """Every group with detail and its packed detail, ascending."""
        if self.config.samples != 1:
            return self._siblings.items()
        inline = [(o, d - 1) for o, d in self._groups._details()]
        return iter(sorted(inline + list(self._siblings.items())) if self._siblings else inline)

    def _dispatch_single(self, event: Dispatch) -> Applied:
        """``_dispatch`` for single-sample groups: each sibling's detail goes
        into its group's entry, in the group move itself."""
        ordinals = event.ordinals
        attempt = self.next_attempt
        held = self._siblings.get_many(ordinals) if self._siblings else None
        if held is None:
            end = attempt + len(ordinals)
            # Attempts ``attempt, attempt + 1, ...`` in order: their packed
            # details step by one attempt.
            first = (attempt << _STATUS_BITS | _RUNNING) + 1
            step = 1 << _STATUS_BITS
            applied = self._groups._move(event, range(first, first + step * len(ordinals), step))
            self._check_dealt(ordinals, end)
            leases = tuple(map(Lease._make, zip(ordinals, repeat(0), range(attempt, end))))
            effect = Effect(event=Dispatch.name, leases=leases)
            return _applied(self._replace(applied.ledger, end, self._siblings), effect)
        detail = []
        leases_list: list[Lease] = []
        reused: list[Lease] = []
        complete: list[int] = []
        for o, value in zip(ordinals, held, strict=True):
            if value is not None and _field(value, 0)[0] == _SEALED:
                # Kept by the resume (REUSE): its sample exists.
                reused.append(Lease(o, 0, _field(value, 0)[1]))
                complete.append(o)
                detail.append(0)
            else:
                leases_list.append(Lease(o, 0, attempt))
                detail.append((attempt << _STATUS_BITS | _RUNNING) + 1)
                attempt += 1
        applied = self._groups._move(event, detail)
        self._check_dealt(ordinals, attempt)
        groups = applied.ledger.buffer(complete).ledger if complete else applied.ledger
        siblings = self._forget(self._siblings, complete)
        effect = Effect(
            event=Dispatch.name,
            leases=tuple(leases_list),
            reused=tuple(reused),
            landed=tuple(complete),
        )
        return _applied(self._replace(groups, attempt, siblings), effect)

    def _check_dealt(self, ordinals: tuple[int, ...], end: int) -> None:
        """Refuse a dispatch that would deal attempts up to ``end - 1``
        past the counter's bound or the limit."""
        if end - 1 > MAX_ATTEMPT:
            raise IllegalTransitionError(
                Dispatch.name, ordinals, "the attempt counter would pass 2**32 - 1"
            )
        self._check_limit(Dispatch.name, ordinals, end)

    def _seal_single(self, leases: tuple[Lease, ...]) -> Applied:
        """``_seal`` for single-sample groups: a current seal completes its
        group, which lands with one group move."""
        groups = self._groups
        if len(leases) == 1:
            # The hot case, a rollout loop's one result: no lists.
            x = leases[0]
            if x.sibling or x.attempt >= self.next_attempt:
                self._check_leases(Seal.name, leases)  # raises
            value = groups._entries.get(x.ordinal)
            if (
                value is not None
                and value & _DETAIL_MASK
                == ((x.attempt << _STATUS_BITS | _RUNNING) + 1) << _GROUP_STATUS_BITS
            ):
                table = groups._moved(Buffer, Buffer.name, (x.ordinal,), values=(value,))[0]
                effect = Effect(event=Seal.name, sealed=leases, landed=(x.ordinal,))
            else:
                table, effect = groups, Effect(event=Seal.name, fenced=leases)
            return _applied(self._replace(table, self.next_attempt, self._siblings), effect)
        self._check_leases(Seal.name, leases)
        current: list[Lease] = []
        fenced: list[Lease] = []
        details = groups._detail([x.ordinal for x in leases])
        for x, d in zip(leases, details, strict=True):
            # Only a running sibling's attempt is current (``current_attempt``).
            (current if d == (x.attempt << _STATUS_BITS | _RUNNING) + 1 else fenced).append(x)
        landed = tuple([x.ordinal for x in current])
        # The landed ordinals are a seal's, distinct ints: a buffer's as they are.
        groups = groups._moved(Buffer, Buffer.name, landed)[0] if landed else groups
        effect = Effect(event=Seal.name, sealed=tuple(current), fenced=tuple(fenced), landed=landed)
        return _applied(self._replace(groups, self.next_attempt, self._siblings), effect)

    def _dispatch(self, ordinals: tuple[int, ...]) -> Applied:
        applied = self._groups.apply(Dispatch(ordinals))
        n = self.config.samples
        attempt = self.next_attempt
        changes: list[tuple[int, int | None]] = []
        leases: list[Lease] = []
        reused: list[Lease] = []
        complete: list[int] = []
        held_values = (
            self._siblings.get_many(ordinals) if self._siblings else [None] * len(ordinals)
        )
        for o, held in zip(ordinals, held_values, strict=True):
            value = 0
            sealed = 0
            for s in range(n):
                status, old = _field(held, s) if held is not None else (_ABSENT, 0)
                if status == _SEALED:
                    # Kept by the resume (REUSE): its sample exists.
                    reused.append(Lease(o, s, old))
                    value |= (_SEALED | old << _STATUS_BITS) << (s * _WIDTH)
                    sealed += 1
                else:
                    leases.append(Lease(o, s, attempt))
                    value |= (_RUNNING | attempt << _STATUS_BITS) << (s * _WIDTH)
                    attempt += 1
            if sealed == n:
                complete.append(o)
                changes.append((o, None))
            else:
                changes.append((o, value))
        if attempt - 1 > MAX_ATTEMPT:
            raise IllegalTransitionError(
                Dispatch.name, ordinals, "the attempt counter would pass 2**32 - 1"
            )
        self._check_limit(Dispatch.name, ordinals, attempt)
        siblings = self._siblings.updated(changes) if changes else self._siblings
        ledger = applied.ledger
        if complete:
            ledger = ledger.buffer(complete).ledger
        effect = attrs.evolve(
            applied.effect, leases=tuple(leases), reused=tuple(reused), landed=tuple(complete)
        )
        return _applied(self._replace(ledger, attempt, siblings), effect)

    def _check_leases(self, name: str, leases: tuple[Lease, ...]) -> None:
        n = self.config.samples
        bad = [x for x in leases if x.sibling >= n or x.attempt >= self.next_attempt]
        if bad:
            raise IllegalTransitionError(
                name,
                (x.ordinal for x in bad),
                f"{name} names attempts this run never started (siblings < {n}, attempts < "
                f"{self.next_attempt}): " + ", ".join(map(str, bad[:5])),
            )

    def _current(self, leases: tuple[Lease, ...]) -> tuple[list[Lease], list[Lease]]:
        """``leases`` split into the current attempts and the fenced ones."""
        values = self._read(self._groups, self._siblings, [x.ordinal for x in leases])
        current: list[Lease] = []
        fenced: list[Lease] = []
        for lease, value in zip(leases, values, strict=True):
            status, attempt = _field(value, lease.sibling) if value is not None else (_ABSENT, 0)
            ok = current_attempt(
                None if status == _ABSENT else Sibling(status), attempt, lease.attempt
            )
            (current if ok else fenced).append(lease)
        return current, fenced

    def _seal(self, leases: tuple[Lease, ...]) -> Applied:
        self._check_leases(Seal.name, leases)
        current, fenced = self._current(leases)
        every, all_sealed, _ = _masks(self.config.samples)
        groups: dict[int, int] = {}
        for x in current:
            value = groups.get(x.ordinal)
            if value is None:
                value = self._siblings.get(x.ordinal)
                assert value is not None  # current: it has detail
            # SAMPLE_TRANSITIONS[(Seal, RUNNING)] is SEALED.
            groups[x.ordinal] = _with(value, x.sibling, _SEALED, x.attempt)
        complete = [o for o, v in groups.items() if v & every == all_sealed]
        done = set(complete)
        changes: list[tuple[int, int | None]] = [
            (o, None if o in done else v) for o, v in groups.items()
        ]
        siblings = self._siblings.updated(changes) if changes else self._siblings
        ledger = self._groups.buffer(complete).ledger if complete else self._groups
        effect = Effect(
            event=Seal.name, sealed=tuple(current), fenced=tuple(fenced), landed=tuple(complete)
        )
        return _applied(self._replace(ledger, self.next_attempt, siblings), effect)

    def _fail_sample(self, leases: tuple[Lease, ...]) -> Applied:
        self._check_leases(FailSample.name, leases)
        current, fenced = self._current(leases)
        move = sample_failure(self.config.granularity)
        ledger = self._groups
        siblings = self._siblings
        requeued: list[int] = []
        unstamped: list[int] = []
        dropped: list[int] = []
        restart: list[tuple[int, int]] = []
        # Apply in rounds: an event lists a group once, and two failed
        # siblings of one group are two failures of it (under ``sibling``
        # granularity); a group the first one failed or dropped fences the rest.
        pending = list(current)
        while pending:
            this_round: dict[int, Lease] = {}
            later: list[Lease] = []
            for lease in pending:
                if lease.ordinal in this_round:
                    later.append(lease)
                elif ledger.status(lease.ordinal) is not Status.OUTSTANDING:
                    fenced.append(lease)  # its group failed earlier in this event
                else:
                    this_round[lease.ordinal] = lease
            step = ledger.apply(move(this_round))
            ledger = step.ledger
            requeued += step.effect.requeued
            unstamped += step.effect.unstamped
            dropped += step.effect.dropped
            gone = [o for o in this_round if ledger.status(o) is not Status.OUTSTANDING]
            siblings = self._forget(siblings, gone)
            back: list[tuple[int, int | None]] = []
            stay = [o for o in this_round if o not in gone]
            for o, value in zip(stay, self._read(ledger, siblings, stay), strict=True):
                assert value is not None  # still outstanding: it has detail
                x = this_round[o]
                back.append((o, _with(value, x.sibling, _UNSTARTED, x.attempt)))
            ledger, siblings = self._write(ledger, siblings, back)
            restart += [(x.ordinal, x.sibling) for o, x in this_round.items() if o not in gone]
            pending = later
        # A sibling sent back in one round whose group a later round failed
        # or dropped whole is not restarted: the group went with it.
        restart = [x for x in restart if ledger.status(x[0]) is Status.OUTSTANDING]
        effect = Effect(
            event=FailSample.name,
            requeued=tuple(requeued),
            unstamped=tuple(unstamped),
            dropped=tuple(dropped),
            fenced=tuple(fenced),
            restart=tuple(restart),
        )
        return _applied(self._replace(ledger, self.next_attempt, siblings), effect)

    def _start(self, pairs: tuple[tuple[int, int], ...]) -> Applied:
        n = self.config.samples
        values = self._read(self._groups, self._siblings, [o for o, _ in pairs])
        illegal = []
        for (o, s), v in zip(pairs, values, strict=True):
            status = _field(v, s)[0] if v is not None and s < n else _ABSENT
            if status == _ABSENT or (Restart, Sibling(status)) not in SAMPLE_TRANSITIONS:
                illegal.append((o, s))
        if illegal:
            raise IllegalTransitionError(
                Restart.name,
                (o for o, _ in illegal),
                "restart needs unstarted siblings of outstanding groups: "
                + ", ".join(map(str, illegal[:5])),
            )
        attempt = self.next_attempt
        if attempt + len(pairs) - 1 > MAX_ATTEMPT:
            raise IllegalTransitionError(
                Restart.name, (o for o, _ in pairs), "the attempt counter would pass 2**32 - 1"
            )
        self._check_limit(Restart.name, (o for o, _ in pairs), attempt + len(pairs))
        leases = [Lease(o, s, attempt + i) for i, (o, s) in enumerate(pairs)]
        groups: dict[int, int] = {}
        for (o, s, a), v in zip(leases, values, strict=True):
            assert v is not None
            groups[o] = _with(groups.get(o, v), s, _RUNNING, a)
        table, siblings = self._write(self._groups, self._siblings, list(groups.items()))
        effect = Effect(event=Restart.name, leases=tuple(leases))
        return _applied(self._replace(table, attempt + len(leases), siblings), effect)


def _check_attempts(floor: object, limit: object, event: str) -> None:
    """``attempt_floor`` and ``attempt_limit`` are counters of u32 attempts:
    ``IllegalTransitionError`` otherwise (they come from a journal's
    recovery, i.e. from input), quoting the value bounded."""
    if type(floor) is not int or not 0 <= floor <= MAX_ATTEMPT + 1:
        raise IllegalTransitionError(
            event, (), f"attempt_floor must be an int >= 0 (at most 2**32), got {shown(floor, 40)}"
        )
    if limit is not None and (type(limit) is not int or not 0 <= limit <= MAX_ATTEMPT + 1):
        raise IllegalTransitionError(
            event,
            (),
            f"attempt_limit must be None or an int in [0, 2**32], got {shown(limit, 40)}",
        )
