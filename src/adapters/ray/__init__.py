"""The Ray binding of frontier_core (imports ray, never torch): the ledger as
the single writer behind concurrent rollout actors. Example rollout workers
(a stand-in and one on the CPU engine) are in
``frontier_adapters.verify.ray_workers``.

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

A rollout actor has ``generate(ledger, lease)``: it generates the
``PromptLease``'s ``lease.items`` (``(ordinal, row)`` pairs) and reports with
``ledger.report.remote(lease.id, landed=[(ordinal, group), ...],
failed=[...])``. ``LedgerLostError`` (from ``ledger_call`` or the fleet)
means the ledger actor is gone: reload the last checkpoint, build a new
actor from its state and pass it to ``fleet.set_ledger``. A source that
needs torch (``frontier_adapters.torch.SeekableSource``) is passed as a
factory, so that it is built inside the actor.

Sample level: ``SampleLedgerActor`` hosts a ``SampleLedgerService`` (the
sample-level ledger, the buffer, and the rollout journal and its attempt
reservation, of which it is the single writer); rollout actors take
``Assignment``s of ``SampleTask``s (one sibling each: a
``frontier_core.Lease``, the row, a durable prefix to continue) from a
``SampleFleet`` and report ``ledger.report.remote(sealed=[(lease, payload)],
failed=[lease], progress=[(lease, payload)])``::

    journal = functools.partial(RolloutJournal, "run/journal",   # built in the actor
                                fingerprint=config.fingerprint, lineage=run_id)
    ledger = SampleLedgerActor.remote(source, config, journal=journal, state=saved)
    if saved is None:
        save(ledger_call(ledger.checkpoint.remote(step=0)).state)  # before any take
    fleet = SampleFleet(ledger, lambda slot: sample_rollout_actor(MyRollout), 8, max_ahead=4 * k)
    while True:
        fleet.fill(); fleet.poll(timeout=0.05)
        if groups := ledger_call(ledger.batch.remote(k)):
            ...                                  # train on groups[i].samples
            snap = ledger_call(ledger.trained.remote([g.ordinal for g in groups], step=step))
            log.dropped(snap.dropped); save(snap.state, ...)
            ledger_call(ledger.compact.remote(snap.checkpoint_id))
"""

from __future__ import annotations

from .._sample_service import Assignment as Assignment
from .._sample_service import SampleGroup as SampleGroup
from .._sample_service import SampleLedgerService as SampleLedgerService
from .._sample_service import SampleReported as SampleReported
from .._sample_service import SampleSnapshot as SampleSnapshot
from .._sample_service import SampleTask as SampleTask
from .._service import LedgerService as LedgerService
from .._service import PromptLease as PromptLease
from .._service import Reported as Reported
from .._service import Snapshot as Snapshot
from .._sources import SequenceSource as SequenceSource
from ._actors import LedgerLostError as LedgerLostError
from ._actors import LedgerTimeoutError as LedgerTimeoutError
from ._actors import ledger_call as ledger_call
from ._fleet import LedgerActor as LedgerActor
from ._fleet import RolloutFleet as RolloutFleet
from ._fleet import rollout_actor as rollout_actor
from ._samples import SampleFleet as SampleFleet
from ._samples import SampleLedgerActor as SampleLedgerActor
from ._samples import sample_rollout_actor as sample_rollout_actor

__all__ = [
    "Assignment",
    "LedgerActor",
    "LedgerLostError",
    "LedgerTimeoutError",
    "LedgerService",
    "PromptLease",
    "Reported",
    "RolloutFleet",
    "SampleFleet",
    "SampleGroup",
    "SampleLedgerActor",
    "SampleLedgerService",
    "SampleReported",
    "SampleSnapshot",
    "SampleTask",
    "SequenceSource",
    "Snapshot",
    "ledger_call",
    "rollout_actor",
    "sample_rollout_actor",
]
