"""The Ray side: the ledger actor, rollout worker actors and the driver's
fleet, which turns Ray's actor-died errors into ledger events.

``LedgerActor`` is ``LedgerService`` as a Ray actor (single-threaded, so its
calls are serialised; it needs no CPU of its own). Rollout workers are actors
with a ``generate(ledger, lease)`` method that generates the lease's prompts
and reports them to the ledger actor in batches (see
``frontier_adapters.examples.ray_workers`` for two).

``RolloutFleet`` runs in the driver. It takes leases from the ledger actor,
fans them out, and collects the calls with ``ray.wait``. When a call ends in
Ray's ``RayActorError`` (``ray.kill``, a crash with ``os._exit``, a lost
node), the worker is gone: the fleet releases every lease that worker held
(the ledger fails what they still hold, so ``retry`` regenerates it) and
starts a replacement. When the *ledger* actor is gone the fleet raises
``LedgerLostError``: the driver rebuilds it from its last checkpoint and hands
the fleet the new handle (``set_ledger``), which voids every lease in flight.

This module imports ray, never torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from .._service import Lease, LedgerService, Reported


class LedgerLostError(RuntimeError):
    """The ledger actor died (or its node did): rebuild it from the last
    checkpoint."""


#: ``LedgerService`` as a Ray actor. It holds no CPU: it sleeps between
#: calls, and a CPU reservation would only starve the rollout workers.
LedgerActor: Any = ray.remote(num_cpus=0, max_restarts=0)(LedgerService)


def ledger_call(ref: Any, timeout: float | None = None) -> Any:
    """``ray.get`` a ledger actor call; its death becomes ``LedgerLostError``.
    An exception raised inside the call (a bug, an illegal transition) is
    re-raised as Ray's ``RayTaskError``."""
    try:
        return ray.get(ref, timeout=timeout)
    except RayTaskError:
        raise
    except RayActorError as exc:
        raise LedgerLostError(str(exc).splitlines()[0]) from exc


def rollout_actor(cls: type, **kwargs: Any) -> Any:
    """A rollout worker actor of class ``cls`` (no CPU reservation, so a
    small cluster schedules as many as asked; Ray does not restart it)."""
    return ray.remote(num_cpus=0, max_restarts=0)(cls).remote(**kwargs)


class RolloutFleet:
    """The driver's view of the rollout workers.

    ``spawn(slot)`` starts the worker actor of a slot (again after a death).
    ``fill()`` keeps ``calls_per_worker`` leases of ``per_call`` prompts in
    flight per worker, and with ``max_ahead`` (at least a training step's
    groups) at most that many prompts leased or buffered at once;
    ``poll(timeout)`` collects finished calls, handles
    worker deaths, and returns the prompts that landed. A call that raised
    in a live worker fails what its lease still holds (``errors`` keeps the
    messages). Raises ``LedgerLostError`` when the ledger actor is gone.
    """

    def __init__(
        self,
        ledger: Any,
        spawn: Callable[[int], Any],
        size: int,
        *,
        per_call: int = 4,
        calls_per_worker: int = 1,
        max_ahead: int | None = None,
    ) -> None:
        self.ledger = ledger
        self.max_ahead = max_ahead
        self._spawn = spawn
        self.per_call = per_call
        self.calls_per_worker = calls_per_worker
        self.workers: dict[int, Any] = {slot: spawn(slot) for slot in range(size)}
        #: call ref -> (slot, lease id)
        self._calls: dict[Any, tuple[int, str]] = {}
        self._orphans: list[Any] = []
        #: Workers found dead, ordinals failed because of deaths or errors,
        #: and the first line of each error a live worker's call raised.
        self.deaths = 0
        self.released = 0
        self.errors: list[str] = []
        self.exhausted = False

    @property
    def in_flight(self) -> int:
        return len(self._calls)

    def set_ledger(self, ledger: Any) -> None:
        """A rebuilt ledger actor: the calls in flight belong to the lost
        one (their leases are void, their reports fail) and are forgotten."""
        self.ledger = ledger
        self._orphans += list(self._calls)
        self._calls.clear()
        self.exhausted = False

    def _reap(self) -> None:
        # Collect the voided calls as they end, so that their errors are
        # consumed here rather than reported by Ray as unhandled.
        if not self._orphans:
            return
        ready, self._orphans = ray.wait(self._orphans, num_returns=len(self._orphans), timeout=0)
        for ref in ready:
            try:
                ray.get(ref)
            except Exception:
                pass

    def fill(self) -> int:
        """Submit leases to workers with room; returns prompts submitted."""
        busy: dict[int, int] = dict.fromkeys(self.workers, 0)
        for slot, _ in self._calls.values():
            busy[slot] += 1
        submitted = 0
        self.exhausted = False
        for slot, worker in self.workers.items():
            for _ in range(self.calls_per_worker - busy[slot]):
                lease: Lease = ledger_call(
                    self.ledger.take.remote(self.per_call, max_ahead=self.max_ahead)
                )
                if not lease.items:
                    self.exhausted = not lease.throttled
                    return submitted
                ref = worker.generate.remote(self.ledger, lease)
                self._calls[ref] = (slot, lease.id)
                submitted += len(lease.items)
        return submitted

    def poll(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for calls to finish; returns the prompts
        their workers reported landed. Dead workers are replaced and their
        leases released through the ledger."""
        self._reap()
        if not self._calls:
            return 0
        ready, _ = ray.wait(list(self._calls), num_returns=1, timeout=timeout)
        if not ready:
            return 0
        ready, _ = ray.wait(list(self._calls), num_returns=len(self._calls), timeout=0)
        landed = 0
        dead: set[int] = set()
        lost: list[str] = []
        failed: list[str] = []
        for ref in ready:
            slot, lease = self._calls.pop(ref)
            try:
                landed += int(ray.get(ref))
            except RayTaskError as exc:
                # The worker lives; its call raised. A dead ledger actor shows
                # up here as the cause of the worker's failed report: the ping
                # raises LedgerLostError then. Otherwise generation failed:
                # what the lease still holds fails through the ledger.
                ledger_call(self.ledger.ping.remote())
                failed.append(lease)
                self.errors.append(f"{type(exc.cause).__name__}: {exc.cause}")
            except RayActorError:
                dead.add(slot)
                lost.append(lease)
        if failed:
            self.released += ledger_call(self.ledger.release.remote(failed)).failed
        if dead:
            self._replace(dead, lost)
        return landed

    def kill(self, slot: int, *, crash: bool = False) -> None:
        """Kill a worker: ``ray.kill``, or a crash inside it (``os._exit``)."""
        worker = self.workers[slot]
        if crash:
            self._orphans.append(worker.crash.remote())
        else:
            ray.kill(worker, no_restart=True)

    def _replace(self, slots: set[int], leases: list[str]) -> Reported:
        # Every other call queued on a dead worker fails too: release all.
        for ref, (slot, lease) in list(self._calls.items()):
            if slot in slots:
                leases.append(lease)
                del self._calls[ref]
        result: Reported = ledger_call(self.ledger.release.remote(leases))
        self.released += result.failed
        for slot in slots:
            self.deaths += 1
            ray.kill(self.workers[slot], no_restart=True)
            self.workers[slot] = self._spawn(slot)
        return result
