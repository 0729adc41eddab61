"""The sample-level Ray side: the sample ledger actor and a fleet of rollout
actors taking sibling tasks.

``SampleLedgerActor`` is ``SampleLedgerService`` as a Ray actor: the single
writer of the ledger, the replay buffer, the rollout journal and the attempt
reservation (the journal's directory must be on the actor's node: a local
disk of a node the actor is pinned to, or a shared file system). It is given
the journal as a factory (``functools.partial(RolloutJournal, path, ...)``
from ``frontier_adapters.rollout``), which it calls inside the actor. Rollout
actors have ``generate(ledger, assignment)``: they generate the
assignment's ``SampleTask``s (continuing each one's ``prefix``, if any) and
report to the ledger actor, ``ledger.report.remote(sealed=[(lease, payload)],
failed=[lease], progress=[(lease, payload)])``; the return value is the
number of seals the ledger accepted. A worker that also has
``set_ledger(ledger)`` (and runs with ``max_concurrency > 1``, so that the
call reaches it while it generates) is told of a rebuilt ledger actor and
reports there from then on, as a worker that looks its ledger up by name
would: its answers for the lost incarnation's leases reach the new one and
are refused (``SampleReported.foreign``), which the reservation guarantees.

``SampleFleet`` runs in the driver. It takes assignments from the ledger
actor, fans them out, and collects the calls with ``ray.wait``. When a call
ends, every lease it carried is released (the ledger fails those still
current: a worker that died, raised, or returned without reporting one), so
a sibling is never left running with nobody generating it; a dead worker is
replaced. ``LedgerLostError`` means the ledger actor is gone: rebuild it
from the last checkpoint (the journal supplies the rest) and pass it to
``set_ledger``.

This module imports ray, never torch.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from frontier_core import Lease

from .._sample_service import Assignment, SampleLedgerService
from ._fleet import ledger_call

#: ``SampleLedgerService`` as a Ray actor (no CPU reservation: it sleeps
#: between calls; Ray does not restart it, the driver rebuilds it).
SampleLedgerActor: Any = ray.remote(num_cpus=0, max_restarts=0)(SampleLedgerService)


def sample_rollout_actor(cls: type, *, max_concurrency: int = 4, **kwargs: Any) -> Any:
    """A rollout worker actor of class ``cls`` for sibling tasks: no CPU
    reservation, no restart, and ``max_concurrency`` threads, so that
    ``set_ledger`` reaches a worker in the middle of a ``generate``."""
    actor: Any = ray.remote(num_cpus=0, max_restarts=0)(cls)
    return actor.options(max_concurrency=max_concurrency).remote(**kwargs)


def sigkill_local(pid: int) -> None:
    """SIGKILL the actor process ``pid`` of this machine's one-node cluster;
    refused (``RuntimeError``) on a cluster of several nodes, where the pid
    of a remote actor could name a local process."""
    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    alive = [node for node in nodes if node.get("Alive")]
    if len(alive) != 1:
        raise RuntimeError(f"SIGKILL by pid needs a one-node local cluster, not {len(alive)} nodes")
    os.kill(pid, signal.SIGKILL)


class SampleFleet:
    """The driver's view of the rollout workers taking sibling tasks.

    ``spawn(slot)`` starts the worker actor of a slot (again after a death).
    ``fill()`` keeps ``calls_per_worker`` assignments of ``per_call`` tasks in
    flight per worker (with ``max_ahead``, at most that many groups open or
    buffered); ``poll(timeout)`` collects finished calls, releases their
    leases, replaces dead workers and returns the seals the ledger accepted.
    ``rebind`` tells the workers of a rebuilt ledger actor
    (``set_ledger``). Raises ``LedgerLostError`` when the ledger actor is
    gone.
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
        self._pids: dict[int, int] = {}
        #: call ref -> (slot, the leases it carries)
        self._calls: dict[Any, tuple[int, tuple[Lease, ...]]] = {}
        self._orphans: list[Any] = []
        #: Workers found dead, leases released (failed: their worker died,
        #: raised, or returned without reporting them), errors of live workers.
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
        return sum(len(leases) for _, leases in self._calls.values())

    def set_ledger(self, ledger: Any) -> None:
        """A rebuilt ledger actor: the calls in flight belong to the lost
        incarnation and are forgotten (their workers, told of the new actor
        if ``rebind``, report there and are refused)."""
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
        if not self._orphans:
            return
        ready, self._orphans = ray.wait(self._orphans, num_returns=len(self._orphans), timeout=0)
        for ref in ready:
            try:
                ray.get(ref)
            except Exception:
                pass

    def fill(self) -> int:
        """Submit assignments to workers with room; returns tasks submitted."""
        busy: dict[int, int] = dict.fromkeys(self.workers, 0)
        for slot, _ in self._calls.values():
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
                self._calls[ref] = (slot, got.leases)
                submitted += len(got.tasks)
        return submitted

    def poll(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for calls to finish; returns the seals
        their workers had accepted. Every finished call's leases are
        released; dead workers are replaced."""
        self._reap()
        if not self._calls:
            return 0
        ready, _ = ray.wait(list(self._calls), num_returns=1, timeout=timeout)
        if not ready:
            return 0
        ready, _ = ray.wait(list(self._calls), num_returns=len(self._calls), timeout=0)
        sealed = 0
        dead: set[int] = set()
        done: list[Lease] = []
        for ref in ready:
            slot, leases = self._calls.pop(ref)
            done += leases
            try:
                sealed += int(ray.get(ref))
            except RayTaskError as exc:
                # A live worker's call raised; a dead ledger actor shows up
                # here as the cause of a failed report: the ping raises then.
                ledger_call(self.ledger.ping.remote())
                self.errors.append(f"{type(exc.cause).__name__}: {exc.cause}")
            except RayActorError:
                dead.add(slot)
        if dead:
            # Every other call queued on a dead worker fails too.
            for ref, (slot, leases) in list(self._calls.items()):
                if slot in dead:
                    done += leases
                    del self._calls[ref]
        if done:
            self.released += ledger_call(self.ledger.release.remote(done)).failed
        for slot in dead:
            self.deaths += 1
            ray.kill(self.workers[slot], no_restart=True)
            self._pids.pop(slot, None)
            self.workers[slot] = self._spawn(slot)
        return sealed

    def pid(self, slot: int) -> int:
        """The process id of the worker in ``slot``."""
        if slot not in self._pids:
            self._pids[slot] = int(ray.get(self.workers[slot].pid.remote()))
        return self._pids[slot]

    def sigkill(self, slot: int) -> None:
        """SIGKILL the worker process of ``slot`` (a one-node cluster on this
        machine only: a pid means nothing elsewhere); the fleet finds it
        dead at its next ``poll``."""
        sigkill_local(self.pid(slot))

    def close(self) -> None:
        for worker in self.workers.values():
            ray.kill(worker, no_restart=True)
