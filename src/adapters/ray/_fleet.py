"""The Ray side: the ledger actor, rollout worker actors and the driver's
fleet, which turns Ray's actor-died errors into ledger events.

``LedgerActor`` is ``LedgerService`` as a Ray actor (single-threaded, so its
calls are serialised; it needs no CPU of its own). Rollout workers are actors
with a ``generate(ledger, lease)`` method that generates the lease's prompts
and reports them to the ledger actor in batches (see
``frontier_adapters.verify.ray_workers`` for two).

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

from collections.abc import Sequence
from typing import Any

import ray

from .._service import LedgerService, PromptLease
from ._actors import Ended, Fleet, unreserved_actor
from ._actors import LedgerLostError as LedgerLostError
from ._actors import ledger_call as ledger_call

#: ``LedgerService`` as a Ray actor (no CPU reservation, no restart).
LedgerActor: Any = unreserved_actor(LedgerService)


def rollout_actor(cls: type, **kwargs: Any) -> Any:
    """A rollout worker actor of class ``cls`` (no CPU reservation, so a
    small cluster schedules as many as asked; Ray does not restart it)."""
    return unreserved_actor(cls).remote(**kwargs)


class RolloutFleet(Fleet[str]):
    """The driver's view of the rollout workers.

    ``spawn(slot)`` starts the worker actor of a slot (again after a death).
    ``fill()`` keeps ``calls_per_worker`` leases of ``per_call`` prompts in
    flight per worker, and with ``max_ahead`` (at least a training step's
    groups) at most that many prompts leased or buffered at once, and
    returns the prompts submitted; ``poll(timeout)`` collects finished
    calls, handles worker deaths, and returns the prompts that landed. A
    call that raised in a live worker fails what its lease still holds
    (``errors`` keeps the messages), and so does a dead worker's. Raises
    ``LedgerLostError`` when the ledger actor is gone.
    """

    def _carried(self, got: PromptLease) -> tuple[int, tuple[str, ...]]:
        return len(got.items), (got.id,)

    def _released(self, ended: Sequence[tuple[Ended, tuple[str, ...]]]) -> list[str]:
        # A returned call's worker reported its lease (the ``generate``
        # contract), so only raised calls and dead workers' are released,
        # the raised ones first.
        raised = [lease for how, held in ended if how is Ended.RAISED for lease in held]
        return raised + [lease for how, held in ended if how is Ended.DIED for lease in held]

    def kill(self, slot: int, *, crash: bool = False) -> None:
        """Kill a worker: ``ray.kill``, or a crash inside it (``os._exit``)."""
        worker = self.workers[slot]
        if crash:
            self._orphans.append(worker.crash.remote())
        else:
            ray.kill(worker, no_restart=True)
