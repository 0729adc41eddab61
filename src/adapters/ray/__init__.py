"""The Ray binding of frontier_core (imports ray, never torch): the ledger as
the single writer behind concurrent rollout actors. Example rollout workers
(stand-ins and one on the CPU engine) are in
``frontier_adapters.verify.ray_workers``.

One ``LedgerActor`` hosts a ``LedgerService``: the ledger of groups of
``config.samples`` siblings (n = 1 by default), the prompt stream, the
replay buffer and, if given one, the rollout journal and its attempt
reservation, of which it is the single writer. Rollout actors take
``Assignment``s of ``SampleTask``s (one sibling each: a
``frontier_core.Lease``, the row, a durable prefix to continue) from a
``RolloutFleet`` and report ``ledger.report.remote(sealed=[(lease,
payload)], failed=[lease], progress=[(lease, payload)],
incarnation=assignment.incarnation)``; the driver trains on complete groups
and reports each step with ``trained``, which returns the checkpoint state
after it in the same call. The fleet turns Ray's actor-died errors into
ledger failures::

    import functools, ray
    from frontier_core import FailurePolicy, LedgerConfig
    from frontier_adapters.journal import RolloutJournal
    from frontier_adapters.ray import (LedgerActor, RolloutFleet, SequenceSource, ledger_call,
                                       rollout_actor)

    ray.init(address="HEAD:6379")
    config = LedgerConfig(stream_len=len(prompts), samples=8, on_failure=FailurePolicy.RETRY)
    journal = functools.partial(RolloutJournal, "run/journal",   # optional; built in the actor
                                fingerprint=config.fingerprint, lineage=run_id)
    ledger = LedgerActor.remote(SequenceSource(prompts), config, journal=journal, state=saved)
    if saved is None:
        save(ledger_call(ledger.checkpoint.remote(step=0)).state)  # before any take
    fleet = RolloutFleet(ledger, lambda slot: rollout_actor(MyRollout), 8, max_ahead=4 * k)
    while True:
        fleet.fill(); fleet.poll(timeout=0.05)   # dead workers: leases failed, replaced
        if groups := ledger_call(ledger.batch.remote(k)):
            ...                                  # train on groups[i].samples
            snap = ledger_call(ledger.trained.remote([g.ordinal for g in groups], step=step))
            log.dropped(snap.dropped); save(snap.state, ...)
            ledger_call(ledger.compact.remote(snap.checkpoint_id))
            if snap.drained: break

A rollout actor has ``generate(ledger, assignment)``: it generates the
assignment's tasks (continuing each one's ``prefix``, if any), reports them
and returns the number of seals the ledger accepted. A worker that also has
``set_ledger(ledger)`` (``rollout_actor`` gives it threads, so the call
reaches it while it generates) is told of a rebuilt ledger actor and
reports there from then on: its answers for the lost incarnation's leases
are refused (``Reported.foreign``). ``LedgerLostError`` (from
``ledger_call`` or the fleet) means the ledger actor is gone: reload the
last checkpoint, build a new actor from its state (the journal, if any,
supplies the rest) and pass it to ``fleet.set_ledger``. A source that needs
torch (``frontier_adapters.torch.SeekableSource``) is passed as a factory,
so that it is built inside the actor.
"""

from __future__ import annotations

from .._service import Assignment as Assignment
from .._service import LedgerService as LedgerService
from .._service import Reported as Reported
from .._service import SampleGroup as SampleGroup
from .._service import SampleTask as SampleTask
from .._service import Snapshot as Snapshot
from .._sources import SequenceSource as SequenceSource
from ._actors import LedgerActor as LedgerActor
from ._actors import LedgerLostError as LedgerLostError
from ._actors import LedgerTimeoutError as LedgerTimeoutError
from ._actors import ledger_call as ledger_call
from ._actors import rollout_actor as rollout_actor
from ._fleet import RolloutFleet as RolloutFleet

__all__ = [
    "Assignment",
    "LedgerActor",
    "LedgerLostError",
    "LedgerService",
    "LedgerTimeoutError",
    "Reported",
    "RolloutFleet",
    "SampleGroup",
    "SampleTask",
    "SequenceSource",
    "Snapshot",
    "ledger_call",
    "rollout_actor",
]
