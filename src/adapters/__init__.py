"""frontier_adapters: bindings of frontier_core to the frameworks that
train with it.

Start with ``Run`` (``frontier_adapters.run``): one training run's ledger,
rollout journal, checkpoints and attempt reservations behind one object that
is safe by construction (open, report what happened, checkpoint).

The package root holds what every binding shares and what needs no
framework: the stamping collector (``StreamCollector``, whose prompts are groups
of n samples, n = 1 by default) and its source protocol, an in-memory source, the
single-writer ledger service behind leases, and the errors; the rollout
journal (its file with group commit and torn-tail recovery, and the run's
single writer, ``RolloutJournal``) is the root package
``frontier_adapters.journal``. The bindings
are subpackages, each importing its framework only when it is itself
imported:

* ``frontier_adapters.torch``: seekable and snapshot data loaders, checkpoint
  directories;
* ``frontier_adapters.rollout``: the asyncio rollout loop over an engine with
  vLLM's ``AsyncLLM`` contract, and its replay buffer;
* ``frontier_adapters.ray``: the ledger service as a Ray actor and a fleet of
  rollout actors.

``frontier_adapters.examples`` (the CPU engine, the toy GRPO trainer, the
tiny Llama), ``frontier_adapters.verify`` (the verification rig: tortures,
kill points, audits, the demo) and ``frontier_adapters.bench``
(``frontier bench``) are not library API.
Installed as ``frontier_adapters``; the directory is ``src/adapters``.
Adapters hold handles and translate events; every coverage decision is the
ledger's.
"""

from ._collector import Pull as Pull
from ._collector import StreamCollector as StreamCollector
from ._collector import StreamSource as StreamSource
from ._collector import Taken as Taken
from ._errors import ConcurrentUseError as ConcurrentUseError
from ._errors import JournalWithoutCheckpointError as JournalWithoutCheckpointError
from ._service import Assignment as Assignment
from ._service import LedgerService as LedgerService
from ._service import Reported as Reported
from ._service import SampleGroup as SampleGroup
from ._service import SampleTask as SampleTask
from ._service import Snapshot as Snapshot
from ._sources import SequenceSource as SequenceSource
from .run import Run as Run

__all__ = [
    "Assignment",
    "ConcurrentUseError",
    "JournalWithoutCheckpointError",
    "LedgerService",
    "Pull",
    "Reported",
    "Run",
    "SampleGroup",
    "SampleTask",
    "SequenceSource",
    "Snapshot",
    "StreamCollector",
    "StreamSource",
    "Taken",
]
