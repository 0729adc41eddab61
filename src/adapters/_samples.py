"""The sample-level collector: a ``StreamCollector`` over a ``Ledger``.

Everything a ``StreamCollector`` does (pulling, stamping, gap-fill slices,
held rows, retries, the checkpoint state with the stream position) works the
same; in addition each prompt is a group of ``config.samples`` siblings, and
what the ledger says of them reaches the caller:

* ``take_samples(n)`` dispatches up to ``n`` groups and returns, for each,
  its row, the leases to generate (one per sibling not sealed already) and
  the siblings reused from a journal or a checkpoint; a group whose siblings
  are all reused has ``landed`` set (it is buffered already: add it to the
  buffer without generating anything).
* ``sealed(leases)``, ``failed_samples(leases)`` and ``restart(siblings)``
  forward the sample-level events; the effects say what was accepted, what
  was fenced, which groups landed, and which siblings to generate again.
* ``checkpoint_state(save_buffer=, save_sealed=)`` holds a
  ``Checkpoint`` record; ``resume`` takes the sealed siblings the
  caller still holds (``sealed``) and the journal's ``attempt_floor`` and
  ``attempt_limit`` (``Recovered``'s).
* Bound to a rollout journal (``journal=``, a ``RolloutJournal`` that was
  recovered), it reserves attempts in the journal before it deals them
  (``RolloutJournal.cover``, before every dispatch and restart), so no
  attempt leaves it that a later life does not start above.

Rules of the house: as ``StreamCollector``'s; every decision is the
ledger's, and this class only forwards and keeps rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from frontier_core import (
    Effect,
    IllegalTransitionError,
    Lease,
    Ledger,
    LedgerConfig,
    Resumed,
    Sibling,
)

from ._collector import StreamCollector, StreamSource, _exclusive
from .journal import RolloutJournal


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


class SampleCollector(StreamCollector):
    """A stamping collector whose prompts are groups of ``config.samples``
    siblings (see the module doc). ``journal`` (optional) is the run's
    rollout journal, already recovered (``recover``, with ``None`` on a
    fresh start): attempts are then reserved in it, ``reserve`` at a time,
    before they are dealt. Not thread-safe, as ``StreamCollector``."""

    def __init__(
        self,
        source: StreamSource,
        config: LedgerConfig | None = None,
        *,
        journal: RolloutJournal | None = None,
        reserve: int = 1024,
    ) -> None:
        super().__init__(source, config)
        if type(reserve) is not int or reserve < 1:
            raise ValueError(f"reserve must be an int >= 1, got {reserve!r:.40}")
        self.journal = journal
        self.reserve = reserve

    @property
    def samples(self) -> Ledger:
        """The current sample-level ledger (an immutable value)."""
        return self._ledger

    # -- the groups -----------------------------------------------------------

    @_exclusive
    def take_samples(self, n: int) -> list[Taken]:
        """Up to ``n`` pending groups (see ``Taken``), retried ones first.
        Raises ``IllegalTransitionError`` when the attempts they need would
        pass the ledger's ``attempt_limit`` (a collector bound to a journal
        reserves them first), and what the journal raises."""
        chosen, retried = self._choose(n)
        try:
            return self._take(chosen)
        except BaseException:
            self._unchoose(chosen, retried)  # nothing dispatched: the queues as they were
            raise

    def _take(self, chosen: list[int]) -> list[Taken]:
        ledger = self.samples
        k = self.config.samples
        held = {o: [ledger.sibling(o, s) for s in range(k)] for o in chosen}
        sealed = {o: sum(d is not None and d[0] is Sibling.SEALED for d in held[o]) for o in chosen}
        complete = [o for o in chosen if sealed[o] == k]
        rest = [o for o in chosen if o not in set(complete)]
        leases: dict[int, list[Lease]] = {o: [] for o in chosen}
        reused: dict[int, list[Lease]] = {o: [] for o in chosen}
        if rest:
            ledger = self._cover(sum(k - sealed[o] for o in rest))
            applied = ledger.dispatch(rest)
            self._ledger = applied.ledger
            for lease in applied.effect.leases:
                leases[lease.ordinal].append(lease)
            for lease in applied.effect.reused:
                reused[lease.ordinal].append(lease)
        for o in complete:
            reused[o] = [Lease(o, s, d[1]) for s, d in enumerate(held[o]) if d and d[1] is not None]
        done = set(complete)
        return [
            Taken(o, self._rows[o], tuple(leases[o]), tuple(reused[o]), o in done) for o in chosen
        ]

    @_exclusive
    def land_complete(self, ordinals: Iterable[int]) -> None:
        """These ``complete`` groups are in the buffer now: dispatch them,
        which lands them (every sibling is sealed already)."""
        ordinals = list(ordinals)
        applied = self.samples.dispatch(ordinals)
        if set(applied.effect.landed) != set(ordinals):
            raise IllegalTransitionError(
                "land_complete", ordinals, "not every sibling of these groups is sealed"
            )
        self._ledger = applied.ledger

    @_exclusive
    def take(self, n: int) -> list[tuple[int, Any]]:
        """Refused: a sample-level caller needs the leases (``take_samples``)."""
        raise TypeError("SampleCollector hands out groups with their leases: use take_samples(n)")

    # -- the samples ----------------------------------------------------------

    @_exclusive
    def sealed(self, leases: Iterable[Iterable[int]]) -> Effect:
        """These attempts finished their samples (``Ledger.seal``):
        ``effect.sealed`` accepted, ``effect.fenced`` ignored,
        ``effect.landed`` the groups now buffered."""
        applied = self.samples.seal(leases)
        self._ledger = applied.ledger
        return applied.effect

    @_exclusive
    def failed_samples(self, leases: Iterable[Iterable[int]]) -> Effect:
        """These attempts failed (``Ledger.fail_sample``):
        ``effect.restart`` are siblings to ``restart``; groups that failed
        whole are requeued, waiting for the source, or dropped, as for
        ``failed``. Raises like ``failed``, changing nothing."""
        applied = self.samples.fail_sample(leases)
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
            self._ledger = self.journal.cover(self.samples, count, reserve=self.reserve)
        return self.samples

    def current(self, lease: Lease) -> bool:
        """Whether ``lease`` is its sibling's current attempt: a seal of it
        would be accepted. (A query: no event, nothing changes.)"""
        return self.samples.sibling(lease.ordinal, lease.sibling) == (
            Sibling.RUNNING,
            lease.attempt,
        )

    def completes(self, lease: Lease) -> bool:
        """Whether sealing ``lease`` now would land its group: it is current
        and every other sibling of the group is sealed."""
        if not self.current(lease):
            return False
        ledger = self.samples
        for s in range(self.config.samples):
            detail = ledger.sibling(lease.ordinal, s)
            if s != lease.sibling and (detail is None or detail[0] is not Sibling.SEALED):
                return False
        return True

    # -- checkpoints ----------------------------------------------------------

    @_exclusive
    def checkpoint_state(
        self, *, save_buffer: bool = True, save_sealed: bool = False
    ) -> dict[str, Any]:
        """As ``StreamCollector.checkpoint_state``, with a ``Checkpoint``
        record; ``save_sealed`` records the sealed siblings of outstanding
        groups (save their samples with it if you set it)."""
        return self._envelope(
            self.samples.checkpoint(save_buffer=save_buffer, save_sealed=save_sealed)
        )

    @_exclusive
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """torchdata ``Stateful``: restore as a resume with neither the
        buffer nor any sealed sibling restored."""
        self.resume(state_dict, load_replay_buffer=False, sealed=())

    @_exclusive
    def resume(  # type: ignore[override]
        self,
        state: Mapping[str, Any],
        *,
        load_replay_buffer: bool,
        sealed: Iterable[Iterable[int]],
        evicted_on_restore: Iterable[int] = (),
        attempt_floor: int = 0,
        attempt_limit: int | None = None,
    ) -> Resumed:
        """Restart from ``state`` (``StreamCollector.resume``), keeping the
        ``sealed`` siblings the caller holds (required: ``()`` for none),
        starting attempts at or above ``attempt_floor`` and dealing them
        below ``attempt_limit`` (``Ledger.resume``; pass
        ``Recovered``'s)."""
        return self._resume(
            state,
            load_replay_buffer=load_replay_buffer,
            evicted_on_restore=evicted_on_restore,
            sealed=tuple(tuple(x) for x in sealed),
            attempt_floor=attempt_floor,
            attempt_limit=attempt_limit,
        )
