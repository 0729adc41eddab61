"""The stamping collector: the façade that binds a prompt source to the ledger.

It owns a ``frontier_core.Ledger`` and a ``StreamSource``. It pulls batches,
stamps them, holds the rows of live ordinals, hands out gap-fill slices while
keeping the remainder, forwards what happens to each ordinal, and produces the
checkpoint state (the ledger record plus the stream position at the cut) in
one call, so the two can never be read out of step.

Its unit is the ledger's: a prompt's group of ``config.samples`` siblings
(n = 1 by default). A caller that reports whole groups uses ``take`` (the
``(ordinal, row)`` pairs, dispatched) and ``landed``/``failed``/``evicted``/
``trained``; one that reports sibling by sibling uses ``take_samples`` (each
group with its leases and the siblings reused from a journal or a
checkpoint, see ``Taken``), ``sealed``, ``failed_samples`` and ``restart``.
Bound to a rollout journal (``journal=``, a ``RolloutJournal`` that was
recovered), it reserves attempts in the journal before it deals them
(``RolloutJournal.cover``, before every dispatch and restart), so no attempt
leaves it that a later life does not start above.

Rules of the house: every coverage decision is the ledger's. The collector
keeps exactly the rows of ``Effect.kept`` (and of ``Effect.buffered``, which
an eviction may send back), re-offers exactly ``Effect.requeued`` and forgets
exactly what is trained or dropped. ``Effect.unstamped`` ordinals have no row
here by definition: the source brings them back when it re-yields them. A
requeued ordinal whose row the collector does not hold is never skipped
silently (nobody could generate it, and it would hold the cut forever): the
failure or eviction is refused with ``IllegalTransitionError`` and nothing
changes. After a snapshot resume the source restarts below the cut; the
ledger is resumed with ``rewind_to`` set to the snapshot's base and filters
those rows itself. The collector only checks that every batch sits where the
ledger says the source is, and raises ``StreamMisalignedError`` otherwise.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Concatenate, Final, ParamSpec, Protocol, TypeVar

import attrs

from frontier_core import (
    Checkpoint,
    CheckpointMismatchError,
    Effect,
    IllegalTransitionError,
    Lease,
    Ledger,
    LedgerConfig,
    Resumed,
    Sibling,
    Status,
)
from frontier_core._errors import shown

from ._errors import ConcurrentUseError, StreamMisalignedError
from ._state import KEY_FORMAT, KEY_VERSION, check_state
from .journal import RolloutJournal

_P = ParamSpec("_P")
_R = TypeVar("_R")
_C = TypeVar("_C", bound="StreamCollector")


def _exclusive(
    method: Callable[Concatenate[_C, _P], _R],
) -> Callable[Concatenate[_C, _P], _R]:
    """Refuse a call that overlaps a call from another thread.

    The collector is a mutable façade with no lock of its own; two threads
    inside it at once could hand the same row out twice or lose one. The
    guard is a re-entrant lock taken without blocking: a nested call from
    the same thread passes, an overlapping call from another thread raises
    ``ConcurrentUseError`` instead of corrupting the state."""

    @functools.wraps(method)
    def guarded(self: _C, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not self._entry.acquire(blocking=False):
            raise ConcurrentUseError(
                f"StreamCollector.{method.__name__} called from thread "
                f"{threading.current_thread().name!r} while another thread is inside the "
                "collector: it is not thread-safe; use one thread or serialise calls with a lock"
            )
        try:
            return method(self, *args, **kwargs)
        finally:
            self._entry.release()

    return guarded


FORMAT: Final = "frontier_adapters.collector"
VERSION: Final = 1
KEY_LEDGER: Final = "ledger"
KEY_STREAM: Final = "stream"
_KEYS: Final = frozenset({KEY_FORMAT, KEY_VERSION, KEY_LEDGER, KEY_STREAM})


class Pull:
    """One pull from a source: ``rows[i]`` sits at ordinal ``first + i``;
    ``carried`` are the ordinals the batch itself carries, if any."""

    __slots__ = ("carried", "first", "rows")

    def __init__(self, first: int, rows: list[Any], carried: tuple[int, ...] | None) -> None:
        self.first = first
        self.rows = rows
        self.carried = carried


@attrs.frozen
class Taken:
    """One group ``take_samples`` handed out: ``ordinal`` and ``row``; the
    ``leases`` to generate (the group is dispatched); the ``reused``
    siblings, whose samples come from where the resume found them. A group
    whose siblings are all reused is ``complete`` and not dispatched yet:
    add it to the buffer, then report it with ``land_complete`` (so that a
    buffer that refuses it leaves it unresolved, never covered)."""

    ordinal: int
    row: Any
    leases: tuple[Lease, ...]
    reused: tuple[Lease, ...]
    complete: bool


class StreamSource(Protocol):
    """What the collector needs of a prompt source."""

    #: Ordinals the source will ever yield, ``None`` if unbounded.
    @property
    def stream_len(self) -> int | None: ...

    def pull(self) -> Pull | None:
        """The next batch, ``None`` at the end of the stream."""

    def position(self, cut: int) -> dict[str, Any]:
        """The JSON state that restarts the stream at or below ``cut``."""

    def base(self, state: Mapping[str, Any], cut: int) -> int:
        """Validate ``state`` (saved at ``cut``) without side effects and
        return the ordinal the source restarts at (at or below ``cut``).
        Raises ``CheckpointError`` subclasses."""

    def restore(self, state: Mapping[str, Any], cut: int) -> None:
        """Restart from ``state``, already validated by ``base``."""

    def prune(self, cut: int) -> None:
        """The cut reached ``cut``: positions below it will never be needed."""


#: What a ``StreamSource`` has (checked when a collector is built).
_SOURCE_MEMBERS: Final = ("stream_len", "pull", "position", "base", "restore", "prune")


def check_inputs(source: object, config: object) -> None:
    """Refuse a ``source`` that is no ``StreamSource`` and a ``config``
    (``None`` allowed) that is no ``LedgerConfig`` with a ``TypeError``
    naming them, before anything is built or written (not an
    ``AttributeError`` at the first pull)."""
    if config is not None and not isinstance(config, LedgerConfig):
        raise TypeError(f"config must be a LedgerConfig, got a {type(config).__name__:.60}")
    missing = [m for m in _SOURCE_MEMBERS if not hasattr(source, m)]
    if missing:
        raise TypeError(
            f"source must be a StreamSource ({', '.join(_SOURCE_MEMBERS)}; e.g. "
            f"SequenceSource(rows)): a {type(source).__name__:.60} has no {', '.join(missing)}"
        )


class StreamCollector:
    """Pulls, stamps, slices and checkpoints a prompt stream whose prompts
    are groups of ``config.samples`` siblings (mutable façade over an
    immutable ledger; see the module doc). torchdata ``Stateful``:
    ``state_dict`` and ``load_state_dict`` are JSON-typed
    (``load_state_dict`` restores as if neither the replay buffer nor any
    sealed sibling was restored); ``resume`` says what was restored.

    ``journal`` (optional) is the run's rollout journal, already recovered
    (``recover``, with ``None`` on a fresh start): attempts are then
    reserved in it, ``reserve`` at a time, before they are dealt.

    Not thread-safe: use it from one thread (the asyncio rollout loop does),
    or serialise every call with a lock of your own. A call that overlaps a
    call from another thread raises ``ConcurrentUseError`` rather than
    corrupting the state.
    """

    def __init__(
        self,
        source: StreamSource,
        config: LedgerConfig | None = None,
        *,
        journal: RolloutJournal | None = None,
        reserve: int = 1024,
    ) -> None:
        if type(reserve) is not int or reserve < 1:
            raise ValueError(f"reserve must be an int >= 1, got {reserve!r:.40}")
        check_inputs(source, config)
        self._entry = threading.RLock()
        if config is None:
            config = LedgerConfig(stream_len=source.stream_len)
        if config.stream_len != source.stream_len and source.stream_len is not None:
            raise ValueError(
                f"config.stream_len {config.stream_len} differs from the source's "
                f"{source.stream_len}"
            )
        self.source = source
        self.config = config
        self.journal = journal
        self.reserve = reserve
        self._ledger = Ledger.start(config)
        self._rows: dict[int, Any] = {}
        self._pending: deque[int] = deque()
        self._retry: deque[int] = deque()
        #: Groups not dispatched since a resume kept sealed siblings of them:
        #: the only ones a dispatch may find siblings of already sealed.
        self._kept: set[int] = set()
        self._source_done = False

    # -- queries ------------------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        """The current ledger, an immutable value."""
        return self._ledger

    @property
    def pending(self) -> int:
        """Ordinals ready to be taken (retried ones included)."""
        return len(self._pending) + len(self._retry)

    @property
    def exhausted(self) -> bool:
        """The source is done and nothing is left to take."""
        return self._source_done and not self._pending and not self._retry

    @property
    def drained(self) -> bool:
        """Every ordinal of a finite stream is trained or dropped."""
        return self._ledger.drained

    @_exclusive
    def row(self, ordinal: int) -> Any:
        """The row of a live ordinal the collector holds."""
        return self._rows[ordinal]

    @_exclusive
    def failures(self, ordinal: int) -> int:
        """The ledger's count of failed attempts (failures and stale
        evictions) of an unresolved ``ordinal``; checkpointed, so it carries
        on across a resume. 0 for one that never failed."""
        return self._ledger.failures(ordinal)

    # -- the stream ---------------------------------------------------------

    @_exclusive
    def pull(self) -> bool:
        """Pull one batch and stamp it; ``False`` at the end of the stream.

        Raises ``StreamMisalignedError`` when the batch's ordinals are not
        the ones the ledger stamps."""
        if self._source_done:
            return False
        if self._ledger.exhausted:
            self._source_done = True
            return False
        got = self.source.pull()
        if got is None:
            self._source_done = True
            return False
        first, rows = got.first, got.rows
        if got.carried is not None and got.carried != tuple(range(first, first + len(rows))):
            raise StreamMisalignedError(
                f"the batch carries ordinals {list(got.carried)[:8]}... but the source "
                f"counts it at {first}..{first + len(rows) - 1}"
            )
        expected = self._ledger.next_ordinal
        if first != expected:
            raise StreamMisalignedError(
                f"the loader yielded ordinal {first} but the ledger expects {expected}: "
                "the loader was not positioned at the checkpoint's cut"
            )
        step = self._ledger.stamp(len(rows))
        yielded = step.effect.stamped
        if len(yielded) != len(rows):
            raise StreamMisalignedError(
                f"the loader yielded ordinals up to {first + len(rows) - 1}, past the "
                f"stream's end {self.config.stream_len}"
            )
        self._ledger = step.ledger
        kept = set(step.effect.kept)
        for o, row in zip(yielded, rows, strict=True):
            if o in kept:
                self._rows[o] = row
                self._pending.append(o)
            elif self._ledger.status(o) is Status.BUFFERED:
                # Retained in the restored buffer: hold its row in case the
                # buffer evicts it and the ledger requeues it.
                self._rows[o] = row
        return True

    @_exclusive
    def take(self, n: int) -> list[tuple[int, Any]]:
        """Up to ``n`` pending ``(ordinal, row)`` items, retried ordinals
        first, pulling batches as needed; the rest of a batch stays pending.
        The items are reported dispatched, as whole groups (for a caller
        that reports ``landed``/``failed``; the siblings' leases are not
        returned). Fewer than ``n`` only at the end. Raises
        ``IllegalTransitionError``, changing nothing, for a group with
        siblings a resume kept (their samples come back only through
        ``take_samples``), and what ``take_samples`` raises."""
        return [(t.ordinal, t.row) for t in self._take_groups(n, whole=True)]

    @_exclusive
    def take_samples(self, n: int) -> list[Taken]:
        """Up to ``n`` pending groups (see ``Taken``), retried ones first.
        Raises ``IllegalTransitionError`` when the attempts they need would
        pass the ledger's ``attempt_limit`` (a collector bound to a journal
        reserves them first), what the journal raises, and ``ValueError``
        (taking nothing) unless ``n`` is an int >= 0."""
        return self._take_groups(n, whole=False)

    def _take_groups(self, n: int, *, whole: bool) -> list[Taken]:
        if type(n) is not int or n < 0:
            raise ValueError(f"take: n must be an int >= 0, got {shown(n)}")
        chosen, retried = self._choose(n)
        try:
            return self._take(chosen, whole=whole)
        except BaseException:
            self._unchoose(chosen, retried)  # nothing dispatched: the queues as they were
            raise

    def _take(self, chosen: list[int], *, whole: bool) -> list[Taken]:
        ledger = self._ledger
        k = self.config.samples
        kept = [o for o in chosen if o in self._kept] if self._kept else []
        held = {o: [ledger.sibling(o, s) for s in range(k)] for o in kept}
        sealed = {o: sum(d is not None and d[0] is Sibling.SEALED for d in held[o]) for o in kept}
        if whole and any(sealed.values()):
            raise IllegalTransitionError(
                "take",
                [o for o in kept if sealed[o]],
                "these groups hold siblings a resume kept: take them with take_samples, "
                "which hands their samples back",
            )
        complete = {o for o in kept if sealed[o] == k}
        rest = [o for o in chosen if o not in complete]
        leases: dict[int, list[Lease]] = {o: [] for o in chosen}
        reused: dict[int, list[Lease]] = {o: [] for o in chosen}
        if rest:
            ledger = self._cover(k * len(rest) - sum(sealed.get(o, 0) for o in rest))
            applied = ledger.dispatch(rest)
            self._ledger = applied.ledger
            self._kept.difference_update(rest)
            for lease in applied.effect.leases:
                leases[lease.ordinal].append(lease)
            for lease in applied.effect.reused:
                reused[lease.ordinal].append(lease)
        for o in complete:
            reused[o] = [Lease(o, s, d[1]) for s, d in enumerate(held[o]) if d and d[1] is not None]
        return [
            Taken(o, self._rows[o], tuple(leases[o]), tuple(reused[o]), o in complete)
            for o in chosen
        ]

    @_exclusive
    def land_complete(self, ordinals: Iterable[int]) -> None:
        """These ``complete`` groups are in the buffer now: dispatch them,
        which lands them (every sibling is sealed already)."""
        ordinals = list(ordinals)
        applied = self._ledger.dispatch(ordinals)
        if set(applied.effect.landed) != set(ordinals):
            raise IllegalTransitionError(
                "land_complete", ordinals, "not every sibling of these groups is sealed"
            )
        self._ledger = applied.ledger
        self._kept.difference_update(ordinals)

    def _choose(self, n: int) -> tuple[list[int], int]:
        """Up to ``n`` pending ordinals, retried ones first, pulling batches
        as needed (not yet dispatched); and how many of them were retried."""
        chosen: list[int] = []
        retried = 0
        while len(chosen) < n:
            if self._retry:
                chosen.append(self._retry.popleft())
                retried += 1
            elif self._pending:
                chosen.append(self._pending.popleft())
            elif not self.pull():
                break
        return chosen, retried

    def _unchoose(self, chosen: list[int], retried: int) -> None:
        """Put back what ``_choose`` took, where it was (a refused dispatch
        leaves the queues as they were)."""
        self._pending.extendleft(reversed(chosen[retried:]))
        self._retry.extendleft(reversed(chosen[:retried]))

    # -- what happened to the groups ------------------------------------------

    @_exclusive
    def landed(self, ordinals: Iterable[int]) -> None:
        """These ordinals' groups landed in the replay buffer."""
        self._ledger = self._ledger.buffer(ordinals).ledger

    @_exclusive
    def trained(self, ordinals: Iterable[int]) -> None:
        """One training step consumed these buffered groups."""
        ordinals = list(ordinals)
        self._ledger = self._ledger.train(ordinals).ledger
        for o in ordinals:
            self._rows.pop(o, None)
        self.source.prune(self._ledger.cut)

    @_exclusive
    def failed(self, ordinals: Iterable[int]) -> Effect:
        """Generation failed for these outstanding ordinals; the effect says
        which the ledger requeued (taken again first, their rows are held),
        which wait for the source to re-yield them (``unstamped``) and which
        it dropped. Raises ``IllegalTransitionError``, changing nothing, for
        an illegal failure or a requeued ordinal whose row is not held."""
        step = self._ledger.fail(ordinals)
        return self._settle(step.ledger, step.effect)

    @_exclusive
    def evicted(self, ordinals: Iterable[int]) -> Effect:
        """The buffer discarded these groups; see ``failed``. A restored
        group evicted before the source re-yielded its prompt is
        ``unstamped``: it is taken again once the stream reaches it."""
        step = self._ledger.evict(ordinals)
        return self._settle(step.ledger, step.effect)

    # -- what happened to the siblings ------------------------------------------

    @_exclusive
    def sealed(self, leases: Iterable[Iterable[int]]) -> Effect:
        """These attempts finished their samples (``Ledger.seal``):
        ``effect.sealed`` accepted, ``effect.fenced`` ignored,
        ``effect.landed`` the groups now buffered."""
        applied = self._ledger.seal(leases)
        self._ledger = applied.ledger
        return applied.effect

    @_exclusive
    def failed_samples(self, leases: Iterable[Iterable[int]]) -> Effect:
        """These attempts failed (``Ledger.fail_sample``):
        ``effect.restart`` are siblings to ``restart``; groups that failed
        whole are requeued, waiting for the source, or dropped, as for
        ``failed``. Raises like ``failed``, changing nothing."""
        applied = self._ledger.fail_sample(leases)
        return self._settle(applied.ledger, applied.effect)

    @_exclusive
    def restart(self, siblings: Iterable[Iterable[int]]) -> tuple[Lease, ...]:
        """Start these unstarted siblings again; returns their new leases
        (reserved first, as in ``take_samples``)."""
        siblings = list(siblings)
        applied = self._cover(len(siblings)).restart(siblings)
        self._ledger = applied.ledger
        return applied.effect.leases

    def _cover(self, count: int) -> Ledger:
        """The ledger, with ``count`` more attempts reserved in the bound
        journal (kept: the reservation is durable whatever follows)."""
        if self.journal is not None:
            self._ledger = self.journal.cover(self._ledger, count, reserve=self.reserve)
        return self._ledger

    def current(self, lease: Lease) -> bool:
        """Whether ``lease`` is its sibling's current attempt: a seal of it
        would be accepted. (A query: no event, nothing changes.)"""
        if not isinstance(lease, Lease):
            raise TypeError(f"a lease must be a Lease, got {type(lease).__name__:.60}")
        return self._ledger.sibling(lease.ordinal, lease.sibling) == (
            Sibling.RUNNING,
            lease.attempt,
        )

    def completes(self, lease: Lease) -> bool:
        """Whether sealing ``lease`` now would land its group: it is current
        and every other sibling of the group is sealed."""
        if not self.current(lease):
            return False
        ledger = self._ledger
        for s in range(self.config.samples):
            detail = ledger.sibling(lease.ordinal, s)
            if s != lease.sibling and (detail is None or detail[0] is not Sibling.SEALED):
                return False
        return True

    def _settle(self, ledger: Ledger, effect: Effect) -> Effect:
        missing = [o for o in effect.requeued if o not in self._rows]
        if missing:
            # Validate before committing anything, as the ledger does: the
            # ordinals stay where they were (unresolved, holding the cut).
            raise IllegalTransitionError(
                effect.event,
                missing,
                "the ledger requeued them to be generated again, but the collector "
                "holds no row for them (they were stamped, so their rows should be "
                "here: the collector's rows and its ledger are out of step); "
                "refused rather than skip them, nothing was applied",
            )
        self._ledger = ledger
        self._retry.extend(effect.requeued)
        for o in effect.dropped:
            self._rows.pop(o, None)
        self.source.prune(ledger.cut)
        return effect

    # -- checkpoints ----------------------------------------------------------

    @_exclusive
    def checkpoint_state(
        self, *, save_buffer: bool = True, save_sealed: bool = False
    ) -> dict[str, Any]:
        """The ledger record and the stream position at its cut, JSON types
        only, from one moment. ``save_buffer`` as in ``Ledger.checkpoint``;
        ``save_sealed`` records the sealed siblings of outstanding groups
        (save their samples with it if you set it)."""
        checkpoint = self._ledger.checkpoint(save_buffer=save_buffer, save_sealed=save_sealed)
        return {
            KEY_FORMAT: FORMAT,
            KEY_VERSION: VERSION,
            KEY_LEDGER: checkpoint.state_dict(),
            KEY_STREAM: self.source.position(checkpoint.cut),
        }

    @_exclusive
    def state_dict(self) -> dict[str, Any]:
        return self.checkpoint_state()

    @_exclusive
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """torchdata ``Stateful``: restore ``state_dict`` as a resume whose
        replay buffer and sealed siblings were not restored (they are not
        part of this state): they are generated again, nothing is lost and
        nothing waits for groups that will never come back. Call
        ``resume(state, load_replay_buffer=True)`` when you restore it."""
        self.resume(state_dict, load_replay_buffer=False, sealed=())

    @_exclusive
    def resumable(self, state: Mapping[str, Any]) -> None:
        """Raise what ``resume`` would raise for ``state`` itself (its
        format, its stream against this source and config, its ledger
        record), changing nothing: a caller that must not act on a state
        this collector would refuse (``Run.open``, before it claims the
        run) asks first."""
        state, checkpoint, base = self._resumable(state)
        Ledger.resume(self.config, checkpoint, load_replay_buffer=False, rewind_to=base)

    def _resumable(self, state: Mapping[str, Any]) -> tuple[Mapping[str, Any], Checkpoint, int]:
        state = check_state(state, what="collector state", fmt=FORMAT, version=VERSION, keys=_KEYS)
        checkpoint = Checkpoint.from_state_dict(state[KEY_LEDGER])
        saved, now = checkpoint.stream_len, self.config.stream_len
        # A longer stream (more epochs) continues the saved one: an
        # ordinal's row does not depend on the stream's length. A shorter
        # one would leave saved ordinals beyond its end.
        if now is not None and (saved is None or now < saved):
            raise CheckpointMismatchError(
                f"checkpoint was written for a stream of {saved} ordinals, this one has "
                f"{now}: a resume may lengthen the stream, never shorten it"
            )
        return state, checkpoint, self.source.base(state[KEY_STREAM], checkpoint.cut)

    def resume(
        self,
        state: Mapping[str, Any],
        *,
        load_replay_buffer: bool,
        sealed: Iterable[Iterable[int]] | None = None,
        evicted_on_restore: Iterable[int] = (),
        attempt_floor: int = 0,
        attempt_limit: int | None = None,
    ) -> Resumed:
        """Restart from ``state``: resume the ledger (options as in
        ``Ledger.resume``) and rewind the source to the saved position.
        Everything the collector held is discarded.

        ``sealed`` are the sealed siblings whose samples the caller still
        holds (``Recovered.sealed``), kept for the groups that need
        generation; required (``()`` for none) for groups of several
        siblings or a bound journal, where forgetting them silently would
        generate again what was kept. ``attempt_floor`` and
        ``attempt_limit``: attempts start at or above the floor and are
        dealt below the limit (pass ``Recovered``'s).

        ``load_replay_buffer`` is required: say whether the groups the state
        retained are back in your buffer. With ``True`` they are covered and
        never generated again, so a buffer that was in fact not restored
        would hold the cut forever (a run that never drains); with
        ``False`` they are generated again. Raises the core's
        ``CheckpointError`` subclasses for a bad, foreign or mismatched state,
        and leaves the collector unchanged then."""
        if sealed is None:
            if self.config.samples > 1 or self.journal is not None:
                raise TypeError(
                    "resume needs sealed= (the sealed siblings you hold; () for none) for "
                    "groups of several samples or a collector bound to a journal"
                )
            sealed = ()
        if not isinstance(load_replay_buffer, bool):
            raise TypeError(
                f"load_replay_buffer must be a bool, got {type(load_replay_buffer).__name__}"
            )
        state, checkpoint, base = self._resumable(state)
        resumed = Ledger.resume(
            self.config,
            checkpoint,
            load_replay_buffer=load_replay_buffer,
            evicted_on_restore=evicted_on_restore,
            rewind_to=base,
            sealed=tuple(tuple(x) for x in sealed),
            attempt_floor=attempt_floor,
            attempt_limit=attempt_limit,
        )
        self.source.restore(state[KEY_STREAM], checkpoint.cut)
        self._ledger = resumed.ledger
        self._rows.clear()
        self._pending.clear()
        self._retry.clear()
        self._kept = {x.ordinal for x in resumed.reused}
        self._source_done = False
        return resumed
