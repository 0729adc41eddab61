"""frontier_adapters.run: one training run, safe by construction.

``Run.open(root, source, config)`` owns the ledger (through a
``StreamCollector`` over your prompt source), the rollout journal
(``root/journal``), the checkpoints (``root/checkpoints``) and the attempt
reservations. It recovers on every start, writes the first checkpoint
before anything is generated, reserves attempts before it deals them,
journals only what the ledger accepted, and marks, syncs and compacts the
journal around every checkpoint, so an integration is three calls: open,
report what happened (``take``, ``seal``, ``progress``, ``fail``,
``trained``), ``checkpoint``. Live counters: ``metrics()``.

A caller that stores the run's state inside its own checkpoint splits
``checkpoint`` in two: ``prepare(step)`` (the journal's mark, the run's
state as ``Prepared.part``), then, once stored, ``published(prepared)``.

The lower layers (``StreamCollector``, ``frontier_adapters.journal``,
``frontier_adapters.checkpoints``) stay public for integrations that need
to arrange these steps themselves.
"""

from ._run import Drained as Drained
from ._run import Prepared as Prepared
from ._run import Run as Run

__all__ = ["Drained", "Prepared", "Run"]
