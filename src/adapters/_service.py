"""The ledger service: the single writer behind leases, as a Ray actor hosts it.

``LedgerService`` owns a ``StreamCollector`` (the ledger plus its prompt
source) and the replay buffer of landed groups. ``frontier_adapters.ray``
wraps it as an actor (``LedgerActor``); this module imports no Ray, so the
same object runs in-process for tests and for a framework that has its own
actor wrapper.

Theory of operation
-------------------
Work leaves the service in *leases* (``PromptLease``, a batch of prompts;
not ``frontier_core.Lease``, one attempt at one sibling): ``take(n)``
dispatches up to ``n`` prompts through the collector and records them
under a fresh lease id. A rollout worker generates them and reports back
with ``report(lease, landed=..., failed=...)`` in batches; a landed group is
stored in the buffer and reported buffered in the same call. When Ray says a
worker is dead, the driver calls ``release(leases)``: every ordinal those
leases still hold is failed through the ledger, which requeues it
(``retry``) or drops it.

Every result keeps the ledger's three outcomes of a failure apart
(``Reported``): ``requeued`` ordinals are generated again now (the service
holds their rows and the next ``take`` offers them first); ``unstamped``
ones are restored groups evicted before the source re-yielded their prompt,
so nobody holds their row yet and they come back, pending, when the stream
reaches them again; ``dropped`` ones are resolved and must be logged. A
failed or released ordinal was leased, hence stamped, so it is never
unstamped; only ``evict`` after a resume with the buffer can produce those.

Leases are fences. An ordinal is held by exactly one lease while it is
outstanding, and a report is applied only to the ordinals its lease still
holds; the rest are *stale* and ignored (a worker declared dead whose last
report arrives late, a duplicate report). So a late report can never land a
group twice nor land one whose ordinal was already failed and handed out
again. A lease's id carries a random token of the service instance, so a
lease of a lost service means nothing to its successor.

The driver trains on ``batch(k)`` and reports the step with ``trained``,
which returns the checkpoint state *after* the step (ledger record, stream
position at the cut, buffered groups) and the drops to log, from one moment,
in one call: the view cannot be torn, because the ledger and the buffer live
in the same single-threaded object. ``LedgerService(..., state=...)``
rebuilds the service from such a state; everything outstanding at that
moment is regenerated.

Rules of the house: every coverage decision is the ledger's. The service
fences reports and schedules batches; it never decides what is covered.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, cast

import attrs

from frontier_core import CheckpointCorruptError, LedgerConfig, Status

from ._collector import StreamCollector, StreamSource
from ._sources import SequenceSource as SequenceSource
from ._state import KEY_FORMAT, KEY_VERSION, check_state

FORMAT: Final = "frontier_adapters.ray_ledger"
VERSION: Final = 1
KEY_COLLECTOR: Final = "collector"
KEY_BUFFER: Final = "buffer"
_KEYS: Final = frozenset({KEY_FORMAT, KEY_VERSION, KEY_COLLECTOR, KEY_BUFFER})


@attrs.frozen
class PromptLease:
    """Prompts handed to one worker: ``items`` are ``(ordinal, row)``.
    An empty lease is ``throttled`` when ``max_ahead`` held it back (ask
    again after a training step), else nothing was ready to take."""

    id: str
    items: tuple[tuple[int, Any], ...]
    throttled: bool = False

    @property
    def ordinals(self) -> tuple[int, ...]:
        return tuple(o for o, _ in self.items)


@attrs.frozen
class Reported:
    """What a report, a release or an eviction did. ``stale`` ordinals were
    not held by the lease and were ignored. The rest is the ledger's effect
    on the failed (or evicted) ones, kept apart as the core keeps it:
    ``requeued`` are generated again now (the next ``take`` offers them
    first), ``unstamped`` come back when the source re-yields them (restored
    groups evicted before their prompt was re-read), ``dropped`` are
    resolved (log them)."""

    landed: int = 0
    failed: int = 0
    stale: tuple[int, ...] = ()
    requeued: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    unstamped: tuple[int, ...] = ()


@attrs.frozen
class Snapshot:
    """The service at one moment: ``state`` is the checkpoint state (JSON
    types), ``dropped`` the ordinals dropped since the previous snapshot (log
    them before the checkpoint commits), ``drained`` whether every ordinal
    is resolved."""

    state: dict[str, Any]
    dropped: tuple[int, ...]
    drained: bool
    cut: int
    buffered: int


def _token() -> str:
    return os.urandom(4).hex()


class LedgerService:
    """The ledger, its prompt source and the replay buffer, behind batch
    methods. Not thread-safe: host it in a single-threaded actor (the
    default for a Ray actor), which serialises the calls.

    ``source`` is a ``StreamSource``, or a callable building one (so that a
    torch loader is built inside the actor). ``state`` (from
    ``Snapshot.state``) resumes a lost service or job; ``load_replay_buffer``
    says whether its saved groups come back (else they are regenerated).
    Raises the core's ``CheckpointError`` subclasses for a bad state.
    """

    def __init__(
        self,
        source: StreamSource | Callable[[], StreamSource],
        config: LedgerConfig | None = None,
        *,
        state: Mapping[str, Any] | None = None,
        load_replay_buffer: bool = True,
    ) -> None:
        if hasattr(source, "pull"):
            built = cast(StreamSource, source)
        else:
            built = source()
        self._collector = StreamCollector(built, config)
        #: ordinal -> landed group, in landing order.
        self._buffer: dict[int, Any] = {}
        #: lease id -> ordinals it still holds; ordinal -> its lease id.
        self._leases: dict[str, set[int]] = {}
        self._holder: dict[int, str] = {}
        self._token = _token()
        self._next_lease = 0
        self._dropped: list[int] = []
        self.stats: dict[str, int] = dict.fromkeys(
            ("taken", "landed", "failed", "released", "stale", "trained", "evicted"), 0
        )
        if state is not None:
            self._restore(state, load_replay_buffer)

    # -- rollout side ---------------------------------------------------------

    def take(self, n: int, *, max_ahead: int | None = None) -> PromptLease:
        """Dispatch up to ``n`` prompts (retried ones first) under a new
        lease; an empty lease when none is ready. With ``max_ahead``, at
        most that many prompts are leased or buffered at once (back pressure
        from the trainer)."""
        lease_id = f"{self._token}-{self._next_lease}"
        self._next_lease += 1
        if max_ahead is not None:
            room = max_ahead - len(self._holder) - len(self._buffer)
            if room < n and not self._collector.exhausted:
                n = max(0, room)
                if n == 0:
                    return PromptLease(lease_id, (), throttled=True)
        items = self._collector.take(n)
        if items:
            held = {o for o, _ in items}
            self._leases[lease_id] = held
            for o in held:
                self._holder[o] = lease_id
            self.stats["taken"] += len(items)
        return PromptLease(lease_id, tuple(items))

    def report(
        self,
        lease: str,
        landed: Sequence[tuple[int, Any]] = (),
        failed: Iterable[int] = (),
    ) -> Reported:
        """Land ``(ordinal, group)`` pairs in the buffer and fail ordinals,
        for the ordinals ``lease`` still holds; others are stale."""
        held = self._leases.get(lease, set())
        stale: list[int] = []
        groups: dict[int, Any] = {}
        for o, group in landed:
            if o in held and o not in groups:
                groups[o] = group
            else:
                stale.append(o)
        failures: list[int] = []
        for o in failed:
            if o in held and o not in groups and o not in failures:
                failures.append(o)
            else:
                stale.append(o)
        if groups:
            self._collector.landed(list(groups))
            self._buffer.update(groups)
            self.stats["landed"] += len(groups)
        self._unhold(lease, held, groups.keys())
        self.stats["stale"] += len(stale)
        requeued, unstamped, dropped = self._fail(lease, held, failures)
        self.stats["failed"] += len(failures)
        return Reported(
            landed=len(groups),
            failed=len(failures),
            stale=tuple(stale),
            requeued=requeued,
            unstamped=unstamped,
            dropped=dropped,
        )

    def release(self, leases: Iterable[str]) -> Reported:
        """Fail every ordinal these leases still hold (their worker died);
        ``requeued`` and ``dropped`` say what the ledger did with them."""
        failed: list[int] = []
        requeued: list[int] = []
        unstamped: list[int] = []
        dropped: list[int] = []
        for lease in leases:
            held = self._leases.get(lease, set())
            ordinals = sorted(held)
            r, u, d = self._fail(lease, held, ordinals)
            failed += ordinals
            requeued += r
            unstamped += u
            dropped += d
        self.stats["released"] += len(failed)
        return Reported(
            failed=len(failed),
            requeued=tuple(requeued),
            unstamped=tuple(unstamped),
            dropped=tuple(dropped),
        )

    def _unhold(self, lease: str, held: set[int], ordinals: Iterable[int]) -> None:
        for o in ordinals:
            held.discard(o)
            del self._holder[o]
        if not held:
            self._leases.pop(lease, None)

    def _fail(
        self, lease: str, held: set[int], ordinals: Sequence[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Fail ``ordinals`` of ``lease``: (requeued, unstamped, dropped)."""
        if not ordinals:
            return (), (), ()
        effect = self._collector.failed(ordinals)
        self._unhold(lease, held, ordinals)
        self._dropped += effect.dropped
        return effect.requeued, effect.unstamped, effect.dropped

    # -- trainer side -----------------------------------------------------------

    def batch(self, k: int) -> list[tuple[int, Any]]:
        """The ``k`` oldest buffered groups, or fewer once no more can come
        (the stream is exhausted and nothing is leased); ``[]`` otherwise.
        They stay buffered until ``trained``."""
        if len(self._buffer) >= k or (self._buffer and self.idle):
            return list(itertools.islice(self._buffer.items(), k))
        return []

    def trained(self, ordinals: Iterable[int], *, save_buffer: bool = True) -> Snapshot:
        """One training step consumed these buffered groups; returns the
        snapshot after it (see ``snapshot``)."""
        ordinals = list(ordinals)
        self._collector.trained(ordinals)
        for o in ordinals:
            del self._buffer[o]
        self.stats["trained"] += len(ordinals)
        return self.snapshot(save_buffer=save_buffer)

    def evict(self, ordinals: Iterable[int]) -> Reported:
        """The trainer discarded these buffered groups as stale. ``requeued``
        ones are leased again first; ``unstamped`` ones (restored groups
        whose prompt the source has not re-yielded since the resume) are
        leased when the stream reaches them again."""
        ordinals = list(ordinals)
        effect = self._collector.evicted(ordinals)
        for o in ordinals:
            del self._buffer[o]
        self._dropped += effect.dropped
        self.stats["evicted"] += len(ordinals)
        return Reported(
            requeued=effect.requeued, unstamped=effect.unstamped, dropped=effect.dropped
        )

    def snapshot(self, *, save_buffer: bool = True) -> Snapshot:
        """The checkpoint state and the drops not yet returned, in one call.
        With ``save_buffer=False`` the groups are not saved and a resume
        regenerates them."""
        collector = self._collector.checkpoint_state(save_buffer=save_buffer)
        buffer = [[o, g] for o, g in self._buffer.items()] if save_buffer else []
        dropped, self._dropped = tuple(self._dropped), []
        return Snapshot(
            state={
                KEY_FORMAT: FORMAT,
                KEY_VERSION: VERSION,
                KEY_COLLECTOR: collector,
                KEY_BUFFER: buffer,
            },
            dropped=dropped,
            drained=self._collector.drained,
            cut=self._collector.ledger.cut,
            buffered=len(self._buffer),
        )

    # -- queries ------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing is leased and nothing is left to take: no group can land."""
        return not self._leases and self._collector.exhausted

    def status(self) -> dict[str, Any]:
        """Counters and sizes, for progress and tests."""
        ledger = self._collector.ledger
        return {
            **self.stats,
            "cut": ledger.cut,
            "next_ordinal": ledger.next_ordinal,
            "leased": len(self._holder),
            "leases": len(self._leases),
            "buffered": len(self._buffer),
            "pending": self._collector.pending,
            "drained": self._collector.drained,
            "idle": self.idle,
        }

    def leased(self) -> dict[str, tuple[int, ...]]:
        """Each lease's id -> the ordinals it still holds."""
        return {lease: tuple(sorted(held)) for lease, held in self._leases.items()}

    def ping(self) -> bool:
        return True

    # -- resume -------------------------------------------------------------------

    def _restore(self, state: Mapping[str, Any], load_replay_buffer: bool) -> None:
        state = check_state(state, what="ledger state", fmt=FORMAT, version=VERSION, keys=_KEYS)
        buffer = state[KEY_BUFFER]
        if not isinstance(buffer, list) or not all(
            isinstance(e, list | tuple) and len(e) == 2 and type(e[0]) is int for e in buffer
        ):
            raise CheckpointCorruptError("ledger state 'buffer' must be [[ordinal, group], ...]")
        resumed = self._collector.resume(
            state[KEY_COLLECTOR], load_replay_buffer=load_replay_buffer
        )
        if load_replay_buffer:
            groups = {o: g for o, g in buffer}
            retained = set(resumed.ledger.ordinals(Status.BUFFERED))
            if set(groups) != retained:
                raise CheckpointCorruptError(
                    f"the saved buffer holds {len(groups)} groups, the ledger retained "
                    f"{len(retained)} other ordinals"
                )
            self._buffer = groups
