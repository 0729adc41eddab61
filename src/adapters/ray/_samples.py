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

import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

import ray

from frontier_core import Lease

from .._sample_service import Assignment, SampleLedgerService
from ._actors import LEDGER_TIMEOUT, Ended, Fleet, unreserved_actor

#: ``SampleLedgerService`` as a Ray actor (no CPU reservation, no restart).
SampleLedgerActor: Any = unreserved_actor(SampleLedgerService)


def sample_rollout_actor(cls: type, *, max_concurrency: int = 4, **kwargs: Any) -> Any:
    """A rollout worker actor of class ``cls`` for sibling tasks: no CPU
    reservation, no restart, and ``max_concurrency`` threads, so that
    ``set_ledger`` reaches a worker in the middle of a ``generate``."""
    actor: Any = unreserved_actor(cls)
    return actor.options(max_concurrency=max_concurrency).remote(**kwargs)


def sigkill_local(pid: int) -> None:
    """SIGKILL the actor process ``pid`` of this machine's one-node cluster;
    refused (``RuntimeError``) on a cluster of several nodes, where the pid
    of a remote actor could name a local process. An actor already dead
    (its process gone before the fleet noticed) is not an error: the kill
    wanted it dead."""
    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    alive = [node for node in nodes if node.get("Alive")]
    if len(alive) != 1:
        raise RuntimeError(f"SIGKILL by pid needs a one-node local cluster, not {len(alive)} nodes")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


class SampleFleet(Fleet[Lease]):
    """The driver's view of the rollout workers taking sibling tasks.

    ``spawn(slot)`` starts the worker actor of a slot (again after a death).
    ``fill()`` keeps ``calls_per_worker`` assignments of ``per_call`` tasks in
    flight per worker (with ``max_ahead``, at most that many groups open or
    buffered) and returns the tasks submitted; ``poll(timeout)`` collects
    finished calls, releases their leases, replaces dead workers and returns
    the seals the ledger accepted. ``rebind`` tells the workers of a rebuilt
    ledger actor (``set_ledger``). Raises ``LedgerLostError`` when the
    ledger actor is gone.
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
        super().__init__(
            ledger,
            spawn,
            size,
            per_call=per_call,
            calls_per_worker=calls_per_worker,
            max_ahead=max_ahead,
        )
        self.rebind = rebind
        self._pids: dict[int, int] = {}

    def _carried(self, got: Assignment) -> tuple[int, tuple[Lease, ...]]:
        return len(got.tasks), got.leases

    def _released(self, ended: Sequence[tuple[Ended, tuple[Lease, ...]]]) -> list[Lease]:
        # Every ended call's leases, however it ended: the ledger fails those
        # still current (a worker that died, raised, or returned without
        # reporting one), so no sibling is left running with nobody on it.
        return [lease for _, held in ended for lease in held]

    def leases_in_flight(self) -> int:
        """Sibling tasks in the calls in flight."""
        return sum(len(leases) for _, leases in self._calls.values())

    def set_ledger(self, ledger: Any) -> None:
        """A rebuilt ledger actor: the calls in flight belong to the lost
        incarnation and are forgotten (their workers, told of the new actor
        if ``rebind``, report there and are refused)."""
        super().set_ledger(ledger)
        if self.rebind:
            for worker in self.workers.values():
                try:
                    method = worker.set_ledger
                except AttributeError:
                    continue  # a worker that cannot be told: its late answers fail
                self._orphans.append(method.remote(ledger))

    def _respawn(self, slot: int) -> None:
        self._pids.pop(slot, None)
        super()._respawn(slot)

    def pid(self, slot: int) -> int:
        """The process id of the worker in ``slot``."""
        if slot not in self._pids:
            self._pids[slot] = int(ray.get(self.workers[slot].pid.remote(), timeout=LEDGER_TIMEOUT))
        return self._pids[slot]

    def sigkill(self, slot: int) -> None:
        """SIGKILL the worker process of ``slot`` (a one-node cluster on this
        machine only: a pid means nothing elsewhere); the fleet finds it
        dead at its next ``poll``."""
        sigkill_local(self.pid(slot))

    def close(self) -> None:
        for worker in self.workers.values():
            ray.kill(worker, no_restart=True)
