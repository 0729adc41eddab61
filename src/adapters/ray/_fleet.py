"""The driver's fleet of rollout worker actors, which turns Ray's
actor-died errors into ledger events.

``RolloutFleet`` takes ``Assignment``s from the ledger actor, fans them out
to worker actors (``generate(ledger, assignment)``), and collects the calls
with ``ray.wait``. When a call ends, every lease it carried is released:
the ledger fails those still current (a worker that died, raised, or
returned without reporting one), so a sibling is never left running with
nobody generating it. A call that ends in Ray's ``RayActorError``
(``ray.kill``, a crash with ``os._exit``, a SIGKILL, a lost node) means the
worker is gone, and it is replaced; one that ends in ``RayTaskError`` was
raised by a live worker (``errors`` keeps the message). When the *ledger*
actor is gone the fleet raises ``LedgerLostError``: the driver rebuilds it
from its last checkpoint and hands the fleet the new handle
(``set_ledger``), which voids every call in flight and, with ``rebind``,
tells the workers of the new actor (their answers for the lost
incarnation's leases are refused there as foreign).

This module imports ray, never torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from frontier_core import Lease

from .._service import Assignment
from ._actors import LEDGER_TIMEOUT, ledger_call, sigkill_local


class RolloutFleet:
    """The driver's view of the rollout worker actors (see the module doc).

    ``spawn(slot)`` starts the worker actor of a slot (again after a death).
    ``fill()`` keeps ``calls_per_worker`` assignments of ``per_call`` tasks
    in flight per worker (with ``max_ahead``, at least a training step's
    groups, at most that many groups open or buffered at once) and returns
    the tasks submitted; ``poll(timeout)`` collects finished calls, releases
    their leases, replaces dead workers and returns the sum of the calls'
    values (the seals the ledger accepted, for the workers here). Raises
    ``LedgerLostError`` when the ledger actor is gone.
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
        rebind: bool = True,
    ) -> None:
        self.ledger = ledger
        self.max_ahead = max_ahead
        self.per_call = per_call
        self.calls_per_worker = calls_per_worker
        self.rebind = rebind
        self._spawn = spawn
        self.workers: dict[int, Any] = {slot: spawn(slot) for slot in range(size)}
        #: call ref -> (slot, the leases it carries, their incarnation)
        self._calls: dict[Any, tuple[int, tuple[Lease, ...], str]] = {}
        self._orphans: list[Any] = []
        self._pids: dict[int, int] = {}
        #: Workers found dead, leases failed through ``release``, and the
        #: first line of each error a live worker's call raised.
        self.deaths = 0
        self.released = 0
        self.errors: list[str] = []
        self.exhausted = False

    @property
    def in_flight(self) -> int:
        """Calls in flight."""
        return len(self._calls)

    def leases_in_flight(self) -> int:
        """Sibling tasks in the calls in flight."""
        return sum(len(leases) for _, leases, _ in self._calls.values())

    def set_ledger(self, ledger: Any) -> None:
        """A rebuilt ledger actor: the calls in flight belong to the lost
        incarnation (what they hold is void there) and are forgotten; with
        ``rebind`` the workers that have ``set_ledger`` are told of the new
        actor, report there and are refused."""
        self.ledger = ledger
        self._orphans += list(self._calls)
        self._calls.clear()
        self.exhausted = False
        if self.rebind:
            for worker in self.workers.values():
                try:
                    method = worker.set_ledger
                except AttributeError:
                    continue  # a worker that cannot be told: its late answers fail
                self._orphans.append(method.remote(ledger))

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
        """Submit calls to workers with room; returns the tasks submitted."""
        busy: dict[int, int] = dict.fromkeys(self.workers, 0)
        for slot, _, _ in self._calls.values():
            busy[slot] += 1
        submitted = 0
        self.exhausted = False
        for slot, worker in self.workers.items():
            for _ in range(self.calls_per_worker - busy[slot]):
                got: Assignment = ledger_call(
                    self.ledger.take.remote(self.per_call, max_ahead=self.max_ahead)
                )
                if not got.tasks:
                    self.exhausted = not got.throttled
                    return submitted
                ref = worker.generate.remote(self.ledger, got)
                self._calls[ref] = (slot, got.leases, got.incarnation)
                submitted += len(got.tasks)
        return submitted

    def poll(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for calls to finish; returns the sum of
        their values. Dead workers are replaced."""
        self._reap()
        if not self._calls:
            return 0
        ready, _ = ray.wait(list(self._calls), num_returns=1, timeout=timeout)
        if not ready:
            return 0
        ready, _ = ray.wait(list(self._calls), num_returns=len(self._calls), timeout=0)
        total = 0
        dead: set[int] = set()
        ended: dict[str, list[Lease]] = {}  # by incarnation
        for ref in ready:
            slot, leases, incarnation = self._calls.pop(ref)
            ended.setdefault(incarnation, []).extend(leases)
            try:
                total += int(ray.get(ref))
            except RayTaskError as exc:
                # The worker lives; its call raised. A dead ledger actor shows
                # up here as the cause of the worker's failed report: the ping
                # raises LedgerLostError then.
                ledger_call(self.ledger.ping.remote())
                self.errors.append(f"{type(exc.cause).__name__}: {exc.cause}")
            except RayActorError:
                dead.add(slot)
        # Every other call queued on a dead worker fails too.
        for ref, (slot, leases, incarnation) in list(self._calls.items()):
            if slot in dead:
                ended.setdefault(incarnation, []).extend(leases)
                del self._calls[ref]
        # Every ended call's leases, however it ended: the ledger fails those
        # still current, so no sibling is left running with nobody on it.
        # Each with its incarnation: without a journal, a rebuilt ledger
        # deals a lost one's attempt numbers again, and only the incarnation
        # tells those leases from its own.
        for incarnation, theirs in ended.items():
            released = self.ledger.release.remote(theirs, incarnation=incarnation)
            self.released += ledger_call(released).failed
        for slot in dead:
            self._respawn(slot)
        return total

    def _respawn(self, slot: int) -> None:
        self.deaths += 1
        self._pids.pop(slot, None)
        ray.kill(self.workers[slot], no_restart=True)
        self.workers[slot] = self._spawn(slot)

    def kill(self, slot: int, *, crash: bool = False) -> None:
        """Kill a worker: ``ray.kill``, or a crash inside it (its
        ``crash()``, an ``os._exit``); the fleet finds it dead at its next
        ``poll``."""
        worker = self.workers[slot]
        if crash:
            self._orphans.append(worker.crash.remote())
        else:
            ray.kill(worker, no_restart=True)

    def pid(self, slot: int) -> int:
        """The process id of the worker in ``slot`` (its ``pid()``)."""
        if slot not in self._pids:
            self._pids[slot] = int(ray.get(self.workers[slot].pid.remote(), timeout=LEDGER_TIMEOUT))
        return self._pids[slot]

    def sigkill(self, slot: int) -> None:
        """SIGKILL the worker process of ``slot`` (a one-node cluster on this
        machine only: a pid means nothing elsewhere); the fleet finds it
        dead at its next ``poll``."""
        sigkill_local(self.pid(slot))

    def close(self) -> None:
        """Kill every worker."""
        for worker in self.workers.values():
            ray.kill(worker, no_restart=True)
