"""The Ray binding of frontier_core (imports ray; torch only for the CPU
engine worker): the ledger as the single writer behind concurrent rollout
actors.

Host the ledger, the prompt stream and the replay buffer in one actor, fan
leases out to rollout actors, and let the fleet turn Ray's actor-died errors
into ledger failures::

    import ray
    from frontier_core import FailurePolicy, LedgerConfig
    from frontier_adapters.ray import LedgerActor, RolloutFleet, SequenceSource, ledger_call

    ray.init(address="auto")
    config = LedgerConfig(stream_len=len(prompts), on_failure=FailurePolicy.RETRY)
    ledger = LedgerActor.remote(SequenceSource(prompts), config, state=saved_state_or_None)
    fleet = RolloutFleet(ledger, spawn=lambda slot: MyRollout.remote(...), size=8)
    while True:
        fleet.fill(); fleet.poll(timeout=0.05)      # dead workers: leases failed, replaced
        batch = ledger_call(ledger.batch.remote(groups_per_step))
        if batch:
            ...train on batch, log the step...
            snap = ledger_call(ledger.trained.remote([o for o, _ in batch]))
            log.dropped(snap.dropped); save(snap.state)    # one call, no torn view
            if snap.drained: break

A rollout actor has ``generate(ledger, lease)``: it generates
``lease.items`` (``(ordinal, row)`` pairs) and reports them with
``ledger.report.remote(lease.id, landed=[(ordinal, group), ...],
failed=[...])``, in batches. ``LedgerLostError`` from ``ledger_call`` or the
fleet means the ledger actor is gone: rebuild it from the last saved state and
pass the new handle to ``fleet.set_ledger``.
"""

from __future__ import annotations

from ._ray_fleet import CpuEngineRollout as CpuEngineRollout
from ._ray_fleet import LedgerActor as LedgerActor
from ._ray_fleet import LedgerLostError as LedgerLostError
from ._ray_fleet import RolloutFleet as RolloutFleet
from ._ray_fleet import StandInRollout as StandInRollout
from ._ray_fleet import ledger_call as ledger_call
from ._ray_fleet import rollout_actor as rollout_actor
from ._ray_ledger import Lease as Lease
from ._ray_ledger import LedgerService as LedgerService
from ._ray_ledger import Reported as Reported
from ._ray_ledger import SequenceSource as SequenceSource
from ._ray_ledger import Snapshot as Snapshot

__all__ = [
    "CpuEngineRollout",
    "Lease",
    "LedgerActor",
    "LedgerLostError",
    "LedgerService",
    "Reported",
    "RolloutFleet",
    "SequenceSource",
    "Snapshot",
    "StandInRollout",
    "ledger_call",
    "rollout_actor",
]
