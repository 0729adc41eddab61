"""The sample-level ledger: a prompt's group of n samples, sibling by sibling.

Theory of operation
-------------------
GRPO generates ``n`` samples (siblings) per prompt and trains on the group
only when all of them are done. The prompt-level ``Ledger`` tracks the group
as one ordinal; ``SampleLedger`` wraps it and adds, for each outstanding
group only, the status of each sibling (``Sibling``: unstarted, running,
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
  the prompt-level ledger's, unchanged; a group's buffer or fail discards its
  siblings' detail, which fences their running attempts.

A checkpoint (``SampleCheckpoint``) adds to the prompt-level record the
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
record. With ``samples=1`` and only the prompt-level events it is the
prompt-level ledger (``proofs/SAMPLES.md`` has the invariants).

Rules of the house
------------------
* The sibling moves are ``_transitions.SAMPLE_TRANSITIONS`` and the rules
  beside it; the group moves are the prompt-level table's, applied by the
  wrapped ``Ledger``. Nothing here decides a group's fate by itself.
* Values are immutable; an illegal event raises ``IllegalTransitionError``
  and changes nothing. A fenced result is not an error: it is the expected
  trace of a race, reported in ``effect.fenced``.
* Per-sibling detail exists only for outstanding groups and for the sealed
  siblings a resume keeps for groups not yet dispatched again: O(window).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from ._checkpoint import Checkpoint, _checksum, _contains
from ._errors import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointVersionError,
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
)
from ._ledger import Ledger, LedgerConfig
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
#: The attempt counter's bound: an attempt is a u32 in the journal.
MAX_ATTEMPT: Final = (1 << 32) - 1
#: An ordinal is a u64 in the journal.
_MAX_ORDINAL: Final = (1 << 64) - 1


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
class SampleApplied:
    """A transition's result: the new sample-level ledger and what the
    event did."""

    ledger: SampleLedger
    effect: Effect


@attrs.frozen
class SampleResumed:
    """What a resume did: the source restarts at ``rewind_to``; the
    ``covered`` ordinals at or above it are dropped at their stamp; the
    ``reused`` siblings (of groups that need generation) come back sealed
    when their group is dispatched, the ``ignored`` ones were not needed
    (their group is resolved or in the restored buffer)."""

    ledger: SampleLedger
    rewind_to: int
    covered: tuple[int, ...]
    reused: tuple[Lease, ...]
    ignored: tuple[Lease, ...]


@attrs.frozen(eq=False)
class SampleLedger:
    """The immutable coverage state of one stream, sample by sample.

    ``ledger`` is the prompt-level state of the groups; ``next_attempt`` the
    number the next attempt gets; ``attempt_limit`` (``None``: none) the
    number no attempt reaches: attempts below it are the ones reserved
    durably (a rollout journal's ``Reserve``), and a ``dispatch`` or
    ``restart`` that would deal one at or above it is refused
    (``IllegalTransitionError``), so a run with a journal cannot deal an
    attempt a later life does not know of. Build one with
    ``SampleLedger.start`` or ``SampleLedger.resume``. Two compare equal
    when they hold the same state (the prompt-level state, the counter, the
    limit and every sibling's detail).
    """

    ledger: Ledger
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
    ) -> SampleLedger:
        """A ledger for a fresh run: nothing stamped, attempts numbered from
        ``attempt_floor`` and below ``attempt_limit`` (a rollout journal's
        ``recover(None, ...)`` gives both; see ``resume``)."""
        _check_attempts(attempt_floor, attempt_limit, "start")
        if attempt_limit is not None and attempt_floor > attempt_limit:
            raise IllegalTransitionError(
                "start", (), f"attempt_limit {attempt_limit} is below attempt_floor {attempt_floor}"
            )
        return cls(
            ledger=Ledger.start(config),
            next_attempt=attempt_floor,
            siblings=IntMap(),
            attempt_limit=attempt_limit,
        )

    @classmethod
    def resume(
        cls,
        config: LedgerConfig,
        checkpoint: SampleCheckpoint,
        *,
        load_replay_buffer: bool,
        sealed: Iterable[Iterable[int]],
        evicted_on_restore: Iterable[int] = (),
        rewind_to: int | None = None,
        attempt_floor: int = 0,
        attempt_limit: int | None = None,
    ) -> SampleResumed:
        """The ledger after a restart from ``checkpoint``.

        The prompt-level arguments are ``Ledger.resume``'s. ``sealed``
        (required: a resume must say what it holds, ``()`` for nothing)
        lists the sealed siblings ``(ordinal, sibling, attempt)`` whose
        samples the framework holds: those the checkpoint saved
        (``checkpoint.sealed``) if it restored them, and those a rollout
        journal replayed (``JournalState.sealed``), each sibling once. They
        are kept for the groups that need generation and ignored for the
        others. ``attempt_floor`` is a number no attempt of the crashed run
        reached (the journal's ``next_attempt``), so that no result of before
        the crash can pass for a new attempt; the counter starts at or above
        it, the checkpoint's counter and every held attempt. ``attempt_limit``
        bounds the attempts this life deals (``SampleLedger``): the journal's
        reservation (``Recovered.attempt_limit``), raised with
        ``with_attempt_limit`` after a new one.

        Raises what ``Ledger.resume`` raises, ``CheckpointMismatchError``
        when the checkpoint's group size is not ``config.samples``, and
        ``IllegalTransitionError`` for a sealed sibling outside the groups
        (a sibling index >= n, an ordinal beyond the window or the stream)
        or listed twice, or for an ``attempt_limit`` below the counter the
        resume starts at.
        """
        if not isinstance(config, LedgerConfig):
            raise IllegalTransitionError(
                "resume", (), f"config must be a LedgerConfig, got {type(config).__name__}"
            )
        if not isinstance(checkpoint, SampleCheckpoint):
            raise IllegalTransitionError(
                "resume",
                (),
                f"checkpoint must be a SampleCheckpoint, got {type(checkpoint).__name__}",
            )
        n = config.samples
        if checkpoint.samples != n:
            raise CheckpointMismatchError(
                f"checkpoint has groups of {checkpoint.samples} samples, this run {n}"
            )
        _check_attempts(attempt_floor, attempt_limit, "resume")
        resumed = Ledger.resume(
            config,
            checkpoint.ledger,
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
        return SampleResumed(
            ledger=cls(
                ledger=ledger, next_attempt=floor, siblings=siblings, attempt_limit=attempt_limit
            ),
            rewind_to=resumed.rewind_to,
            covered=resumed.covered,
            reused=tuple(reused),
            ignored=tuple(ignored),
        )

    # -- queries ----------------------------------------------------------

    @property
    def config(self) -> LedgerConfig:
        return self.ledger.config

    @property
    def cut(self) -> int:
        return self.ledger.cut

    @property
    def next_ordinal(self) -> int:
        return self.ledger.next_ordinal

    @property
    def exhausted(self) -> bool:
        return self.ledger.exhausted

    @property
    def drained(self) -> bool:
        return self.ledger.drained

    def status(self, ordinal: int) -> Status | None:
        """The group's status (``Ledger.status``)."""
        return self.ledger.status(ordinal)

    def attempts(self, ordinal: int) -> int:
        """The group's failed attempts (``Ledger.attempts``), failed samples
        included."""
        return self.ledger.attempts(ordinal)

    def sibling(self, ordinal: int, sibling: int) -> tuple[Sibling, int | None] | None:
        """``(status, attempt)`` of one sibling of an outstanding group
        (attempt ``None`` while it is unstarted), or of a sealed sibling a
        resume keeps; ``None`` if the ledger holds no detail of it."""
        n = self.config.samples
        if not 0 <= sibling < n:
            raise ValueError(f"sibling must be in [0, {n}), got {sibling!r}")
        value = self._siblings.get(ordinal)
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
        for o, value in self._siblings.items():
            for s in range(n):
                status, attempt = _field(value, s)
                if status == wanted:
                    yield Lease(o, s, attempt)

    def size(self) -> int:
        """Sibling details held: the siblings of outstanding groups and the
        sealed ones a resume keeps; O(outstanding groups x n), never the run.
        (A query: it walks them.)"""
        n = self.config.samples
        return sum(
            1
            for _, value in self._siblings.items()
            for s in range(n)
            if _field(value, s)[0] != _ABSENT
        )

    def with_attempt_limit(self, limit: int | None, *, floor: int = 0) -> SampleLedger:
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
        return SampleLedger(
            ledger=self.ledger, next_attempt=attempt, siblings=self._siblings, attempt_limit=limit
        )

    def _key(self) -> tuple[object, ...]:
        if self._identity is None:
            key = (
                self.ledger,
                self.next_attempt,
                self.attempt_limit,
                tuple(self._siblings.items()),
            )
            object.__setattr__(self, "_identity", key)
            return key
        return self._identity

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SampleLedger):
            return NotImplemented
        return self is other or self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    # -- transitions ------------------------------------------------------

    def apply(self, event: Event | SampleEvent) -> SampleApplied:
        """Apply ``event``; raises ``IllegalTransitionError`` and changes
        nothing if it is illegal. Prompt-level events act on whole groups."""
        if isinstance(event, Seal):
            return self._seal(event.leases)
        if isinstance(event, FailSample):
            return self._fail_sample(event.leases)
        if isinstance(event, Restart):
            return self._start(event.siblings)
        if isinstance(event, Dispatch):
            return self._dispatch(event.ordinals)
        applied = self.ledger.apply(event)
        siblings = self._siblings
        if isinstance(event, Buffer | Fail | Setback):
            # The group moved as a whole (a setback only when it dropped the
            # group): its siblings' detail goes, which fences their running
            # attempts from now on.
            gone = [o for o in event.ordinals if applied.ledger.status(o) is not Status.OUTSTANDING]
            siblings = self._forget(siblings, gone)
        return SampleApplied(
            self._replace(applied.ledger, self.next_attempt, siblings), applied.effect
        )

    def stamp(self, count: int) -> SampleApplied:
        """The source yielded its next ``count`` prompts (``Ledger.stamp``)."""
        return self.apply(Stamp(count))

    def dispatch(self, ordinals: Iterable[int]) -> SampleApplied:
        """These pending groups were handed to rollout: every sibling not
        sealed already starts under a new attempt (``effect.leases``); the
        sealed ones are ``effect.reused``; a group with all n sealed lands
        at once (``effect.landed``)."""
        return self.apply(Dispatch(ordinals))

    def restart(self, siblings: Iterable[Iterable[int]]) -> SampleApplied:
        """Restart these unstarted siblings ``(ordinal, sibling)`` under new
        attempts (``effect.leases``)."""
        return self.apply(Restart(siblings))

    def seal(self, leases: Iterable[Iterable[int]]) -> SampleApplied:
        """These attempts ``(ordinal, sibling, attempt)`` finished their
        samples: ``effect.sealed`` were accepted, ``effect.fenced`` ignored,
        ``effect.landed`` the groups that became complete."""
        return self.apply(Seal(leases))

    def fail_sample(self, leases: Iterable[Iterable[int]]) -> SampleApplied:
        """These attempts failed. ``effect.restart`` are the siblings to
        generate again (``sibling`` granularity); ``effect.requeued``,
        ``unstamped`` and ``dropped`` the groups that failed as a whole;
        ``effect.fenced`` the results ignored."""
        return self.apply(FailSample(leases))

    def buffer(self, ordinals: Iterable[int]) -> SampleApplied:
        """These outstanding groups landed whole (``Ledger.buffer``)."""
        return self.apply(Buffer(ordinals))

    def train(self, ordinals: Iterable[int]) -> SampleApplied:
        """``Ledger.train``."""
        return self.apply(Train(ordinals))

    def fail(self, ordinals: Iterable[int]) -> SampleApplied:
        """These outstanding groups failed whole (``Ledger.fail``)."""
        return self.apply(Fail(ordinals))

    def evict(self, ordinals: Iterable[int]) -> SampleApplied:
        """``Ledger.evict``."""
        return self.apply(Evict(ordinals))

    def checkpoint(self, *, save_buffer: bool = True, save_sealed: bool = True) -> SampleCheckpoint:
        """The durable state at this moment. ``save_buffer`` is
        ``Ledger.checkpoint``'s; ``save_sealed`` says whether the framework
        saves the samples of the sealed siblings of outstanding groups with
        it (if not, a resume gets them from a journal, or regenerates them).
        O(what it records)."""
        sealed = tuple(self.held()) if save_sealed else ()
        return SampleCheckpoint(
            ledger=self.ledger.checkpoint(save_buffer=save_buffer),
            samples=self.config.samples,
            next_attempt=self.next_attempt,
            sealed=sealed,
        )

    # -- internals --------------------------------------------------------

    def _replace(self, ledger: Ledger, next_attempt: int, siblings: IntMap) -> SampleLedger:
        return SampleLedger(
            ledger=ledger,
            next_attempt=next_attempt,
            siblings=siblings,
            attempt_limit=self.attempt_limit,
        )

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

    def _dispatch(self, ordinals: tuple[int, ...]) -> SampleApplied:
        applied = self.ledger.apply(Dispatch(ordinals))
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
        return SampleApplied(self._replace(ledger, attempt, siblings), effect)

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
        values = self._siblings.get_many([x.ordinal for x in leases])
        current: list[Lease] = []
        fenced: list[Lease] = []
        for lease, value in zip(leases, values, strict=True):
            status, attempt = _field(value, lease.sibling) if value is not None else (_ABSENT, 0)
            ok = current_attempt(
                None if status == _ABSENT else Sibling(status), attempt, lease.attempt
            )
            (current if ok else fenced).append(lease)
        return current, fenced

    def _seal(self, leases: tuple[Lease, ...]) -> SampleApplied:
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
        ledger = self.ledger.buffer(complete).ledger if complete else self.ledger
        effect = Effect(
            event=Seal.name, sealed=tuple(current), fenced=tuple(fenced), landed=tuple(complete)
        )
        return SampleApplied(self._replace(ledger, self.next_attempt, siblings), effect)

    def _fail_sample(self, leases: tuple[Lease, ...]) -> SampleApplied:
        self._check_leases(FailSample.name, leases)
        current, fenced = self._current(leases)
        move = sample_failure(self.config.granularity)
        ledger = self.ledger
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
            for o, x in this_round.items():
                if o not in gone:
                    value = siblings.get(o)
                    assert value is not None  # still outstanding: it has detail
                    back.append((o, _with(value, x.sibling, _UNSTARTED, x.attempt)))
            siblings = siblings.updated(back) if back else siblings
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
        return SampleApplied(self._replace(ledger, self.next_attempt, siblings), effect)

    def _start(self, pairs: tuple[tuple[int, int], ...]) -> SampleApplied:
        n = self.config.samples
        values = self._siblings.get_many([o for o, _ in pairs])
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
        siblings = self._siblings.updated(list(groups.items()))
        effect = Effect(event=Restart.name, leases=tuple(leases))
        return SampleApplied(self._replace(self.ledger, attempt + len(leases), siblings), effect)


# -- the checkpoint ---------------------------------------------------------------

FORMAT: Final = "frontier_core.samples"
VERSION: Final = 1
KEY_FORMAT: Final = "format"
KEY_VERSION: Final = "version"
KEY_SAMPLES: Final = "samples"
KEY_NEXT_ATTEMPT: Final = "next_attempt"
KEY_LEDGER: Final = "ledger"
KEY_SEALED: Final = "sealed"
KEY_CHECKSUM: Final = "checksum"
_BODY_KEYS: Final = frozenset(
    {KEY_FORMAT, KEY_VERSION, KEY_SAMPLES, KEY_NEXT_ATTEMPT, KEY_LEDGER, KEY_SEALED}
)


def _sealed_leases(value: Any) -> tuple[Lease, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise CheckpointCorruptError(f"sealed must be a sequence of leases, got {shown(value)}")
    out = []
    for item in value:
        if not isinstance(item, tuple | list) or len(item) != 3:
            raise CheckpointCorruptError(
                f"sealed holds {shown(item)}, not (ordinal, sibling, attempt)"
            )
        out.append(Lease(*item))
    return tuple(out)


@attrs.frozen
class SampleCheckpoint:
    """The sample-level ledger's durable state: the prompt-level
    ``Checkpoint`` of the groups (``ledger``), the group size, the attempt
    counter, and the sealed siblings of outstanding groups whose samples the
    framework saved with it (``sealed``, ascending; empty unless
    ``save_sealed``).

    Checked whenever one is built, so that no value that breaks these
    exists: ``1 <= samples <= 2**32`` and ``0 <= next_attempt <= 2**32``
    (sibling indices and attempts are u32 in the journal, so a record the
    ledger could not deal from is refused here, not at the first dispatch);
    every sealed sibling is an index below ``samples``, of an ordinal below
    ``2**64``, at or above the cut that the
    record does not resolve or retain (its group was outstanding), under an
    attempt below ``next_attempt``, listed once and ascending. A group may
    have all its siblings sealed: a resume keeps them for a group that waits
    for its stamp, and it lands at its dispatch. ``CheckpointCorruptError``
    names the broken rule. The record (``state_dict``) is JSON with its own
    format tag, version and SHA-256 checksum, around the prompt-level record.
    """

    ledger: Checkpoint
    samples: int = 1
    next_attempt: int = 0
    sealed: tuple[Lease, ...] = attrs.field(default=(), converter=_sealed_leases)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.ledger, Checkpoint):
            raise CheckpointCorruptError(
                f"ledger must be a Checkpoint, got {type(self.ledger).__name__}"
            )
        # Bounded to what the ledger and the journal can deal: sibling
        # indices and attempts are u32 there, ordinals u64.
        _check_count(KEY_SAMPLES, self.samples, least=1, most=MAX_ATTEMPT + 1)
        _check_count(KEY_NEXT_ATTEMPT, self.next_attempt, least=0, most=MAX_ATTEMPT + 1)
        cut = self.ledger.cut
        resolved_or_retained = (
            self.ledger.trained_above_cut,
            self.ledger.dropped_above_cut,
            self.ledger.retained,
        )
        previous: tuple[int, int] | None = None
        for lease in self.sealed:
            for name, x in zip(("ordinal", "sibling", "attempt"), lease, strict=True):
                _check_count(f"a sealed sibling's {name}", x, least=0)
            o, s, a = lease
            # (Sibling and attempt are bounded by samples and next_attempt, below.)
            _check_count("a sealed sibling's ordinal", o, least=0, most=_MAX_ORDINAL)
            if previous is not None and (o, s) <= previous:
                raise CheckpointCorruptError(
                    f"sealed siblings must ascend, {lease} follows {previous}"
                )
            previous = (o, s)
            if o < cut or s >= self.samples or a >= self.next_attempt:
                raise CheckpointCorruptError(
                    f"sealed sibling {lease}: ordinals >= the cut {cut}, siblings < "
                    f"{self.samples}, attempts < next_attempt {self.next_attempt}"
                )
            if any(_contains(r, o) for r in resolved_or_retained):
                raise CheckpointCorruptError(
                    f"sealed sibling {lease} belongs to a group the record resolves or retains"
                )
            if self.ledger.stream_len is not None and o >= self.ledger.stream_len:
                raise CheckpointCorruptError(f"sealed sibling {lease} lies beyond the stream")

    @property
    def cut(self) -> int:
        return self.ledger.cut

    @property
    def stream_len(self) -> int | None:
        return self.ledger.stream_len

    def state_dict(self) -> dict[str, Any]:
        """The record: JSON types only, checksummed."""
        sealed: list[list[int]] = []
        floor = self.ledger.cut
        for o, s, a in self.sealed:
            sealed.append([o - floor, s, a])
            floor = o
        body: dict[str, Any] = {
            KEY_FORMAT: FORMAT,
            KEY_VERSION: VERSION,
            KEY_SAMPLES: self.samples,
            KEY_NEXT_ATTEMPT: self.next_attempt,
            KEY_LEDGER: self.ledger.state_dict(),
            KEY_SEALED: sealed,
        }
        body[KEY_CHECKSUM] = _checksum(body)
        return body

    @classmethod
    def from_state_dict(
        cls, record: Mapping[str, Any], *, fingerprint: str | None = None
    ) -> SampleCheckpoint:
        """Validate ``record`` and return its checkpoint; raises as
        ``Checkpoint.from_state_dict`` does (its inner record is read by it)."""
        if not isinstance(record, Mapping):
            raise CheckpointCorruptError(
                f"checkpoint record must be a dict, got {type(record).__name__}"
            )
        if record.get(KEY_FORMAT) != FORMAT:
            raise CheckpointVersionError(
                f"not a frontier_core sample checkpoint: {KEY_FORMAT!r} is "
                f"{shown(record.get(KEY_FORMAT))}, expected {FORMAT!r}"
            )
        version = record.get(KEY_VERSION)
        if version != VERSION or type(version) is not int:
            raise CheckpointVersionError(
                f"sample checkpoint schema version {shown(version, 20)} is not supported "
                f"(this library reads version {VERSION})"
            )
        keys = set(record)
        missing = sorted((_BODY_KEYS | {KEY_CHECKSUM}) - keys)
        extra = sorted(map(str, keys - _BODY_KEYS - {KEY_CHECKSUM}))
        if missing or extra:
            raise CheckpointCorruptError(
                f"sample checkpoint record has missing keys {missing} and unknown keys {extra}"
            )
        body = {k: record[k] for k in _BODY_KEYS}
        try:
            expected = _checksum(body)
        except (TypeError, ValueError, RecursionError) as exc:
            raise CheckpointCorruptError(
                f"sample checkpoint record is not JSON data: {str(exc)[:200]}"
            ) from None
        if record[KEY_CHECKSUM] != expected:
            raise CheckpointCorruptError(
                "sample checkpoint checksum mismatch: the record was altered or truncated"
            )
        ledger = Checkpoint.from_state_dict(record[KEY_LEDGER], fingerprint=fingerprint)
        raw = record[KEY_SEALED]
        if not isinstance(raw, list):
            raise CheckpointCorruptError(
                f"{KEY_SEALED!r} must be a list of [gap, sibling, attempt]"
            )
        sealed = []
        floor = ledger.cut
        for item in raw:
            if not (isinstance(item, list) and len(item) == 3):
                raise CheckpointCorruptError(
                    f"{KEY_SEALED!r} holds {shown(item)}, not [gap, sibling, attempt]"
                )
            gap, s, a = (_check_count(KEY_SEALED, x, least=0) for x in item)
            floor += gap
            sealed.append(Lease(floor, s, a))
        return cls(
            ledger=ledger,
            samples=record[KEY_SAMPLES],
            next_attempt=record[KEY_NEXT_ATTEMPT],
            sealed=tuple(sealed),
        )


def _check_count(name: str, value: object, *, least: int, most: int | None = None) -> int:
    if type(value) is not int or value < least or (most is not None and value > most):
        upper = "" if most is None else f" and <= {most}"
        raise CheckpointCorruptError(
            f"{name!r} must be an int >= {least}{upper}, got {shown(value)}"
        )
    return value


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
