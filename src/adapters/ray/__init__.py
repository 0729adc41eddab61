"""The Ray binding of frontier_core (imports ray, never torch): the ledger as
the single writer behind concurrent rollout actors. Example rollout workers
(a stand-in and one on the CPU engine) are in
``frontier_adapters.examples.ray_workers``.

One ``LedgerActor`` hosts the ledger, the prompt stream and the replay buffer.
Rollout actors generate *leases* of prompts and report to it in batches; the
driver trains and reports each step with ``trained``, which returns the
checkpoint state after it in the same call. ``RolloutFleet`` turns Ray's
actor-died errors into ledger failures::

    import ray
    from frontier_core import FailurePolicy, LedgerConfig
    from frontier_adapters.ray import LedgerActor, RolloutFleet, SequenceSource, ledger_call

    ray.init(address="HEAD:6379")
    config = LedgerConfig(stream_len=len(prompts), on_failure=FailurePolicy.RETRY)
    ledger = LedgerActor.remote(SequenceSource(prompts), config, state=saved)  # None at first
    fleet = RolloutFleet(ledger, lambda slot: MyRollout.remote(), 8, max_ahead=4 * k)
    while True:
        fleet.fill(); fleet.poll(timeout=0.05)      # dead workers: leases failed, replaced
        batch = ledger_call(ledger.batch.remote(k))
        if batch:
            ...                                     # train; log.step(step, ordinals)
            snap = ledger_call(ledger.trained.remote([o for o, _ in batch]))
            log.dropped(snap.dropped); save(snap.state, log.records, model)
            if snap.drained: break

A rollout actor has ``generate(ledger, lease)``: it generates
``lease.items`` (``(ordinal, row)`` pairs) and reports with
``ledger.report.remote(lease.id, landed=[(ordinal, group), ...],
failed=[...])``. ``LedgerLostError`` (from ``ledger_call`` or the fleet)
means the ledger actor is gone: reload the last checkpoint, build a new
actor from its state and pass it to ``fleet.set_ledger``. A source that
needs torch (``frontier_adapters.torch.SeekableSource``) is passed as a
factory, so that it is built inside the actor.
"""

from __future__ import annotations

from .._service import Lease as Lease
from .._service import LedgerService as LedgerService
from .._service import Reported as Reported
from .._service import Snapshot as Snapshot
from .._sources import SequenceSource as SequenceSource
from ._fleet import LedgerActor as LedgerActor
from ._fleet import LedgerLostError as LedgerLostError
from ._fleet import RolloutFleet as RolloutFleet
from ._fleet import ledger_call as ledger_call
from ._fleet import rollout_actor as rollout_actor

__all__ = [
    "Lease",
    "LedgerActor",
    "LedgerLostError",
    "LedgerService",
    "Reported",
    "RolloutFleet",
    "SequenceSource",
    "Snapshot",
    "ledger_call",
    "rollout_actor",
]
