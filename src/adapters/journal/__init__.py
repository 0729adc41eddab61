"""frontier_adapters.journal: the rollout journal of a run, in one room.

``frontier_core.journal`` decides everything about the journal's bytes
(framing, checks, torn tails, replay, fencing, compaction, reuse,
continuation) and does no I/O. This package owns the rest, once:

* ``JournalWriter`` (``_files``): the append-only file, group commit with
  its fsync on a commit thread, torn-tail truncation at open, atomic
  compaction, one writer per file (``flock``); ``read_journal`` decodes a
  journal file read-only;
* ``RolloutJournal`` (``_rollout``): the single writer of a run's journal
  and its glue to a ``Ledger``: seals and progress as they happen, a
  mark before each checkpoint, compaction after it, and ``recover`` at
  every start, which checks the journal against the checkpoint, applies
  the reuse policy and reserves this life's attempts (``Recovered``);
* ``Shipper`` (``_ship``): the journal off the node. Given to
  ``RolloutJournal(ship_to=...)``, it ships every written group to a store
  (``frontier_adapters.store``: a bucket or a shared directory) as
  immutable segments rolled by size and time, on its own thread, and waits
  for them at every mark and reservation; a compaction ships a base and
  deletes what it supersedes. What waits for the store is bounded
  (``max_queued_bytes``): past it the writer is held back, for at most
  ``backlog_timeout`` s. A life whose node was lost restores the
  local file from the shipped objects (``restore``; ``Restored`` says which
  copy a life started from).

Every binding (the rollout loop, the ledger service and its Ray actor,
the verification rig) imports the journal from here; nothing restates its API.
Errors: the core's ``JournalError`` family, ``JournalFileError`` for the
file itself (a directory, a symlink, a FIFO, a second writer at the path),
``JournalWriterError`` for a writer a failed write or fsync left unusable,
``JournalShipError`` for a journal the store could not take in time
(``JournalShipBacklogError`` when the bounded queue stayed full,
``JournalFencedError`` for the shipper of a life a newer one fenced),
and ``frontier_adapters.JournalWithoutCheckpointError`` for a journal that
holds samples when there is no checkpoint.
"""

from ._files import JournalFileError as JournalFileError
from ._files import JournalHold as JournalHold
from ._files import JournalWriter as JournalWriter
from ._files import JournalWriterError as JournalWriterError
from ._files import read_journal as read_journal
from ._rollout import LOST_ATTEMPTS as LOST_ATTEMPTS
from ._rollout import RESERVE as RESERVE
from ._rollout import JournalLoss as JournalLoss
from ._rollout import Recovered as Recovered
from ._rollout import RolloutJournal as RolloutJournal
from ._rollout import resumed_sample as resumed_sample
from ._ship import BACKLOG_TIMEOUT_S as BACKLOG_TIMEOUT_S
from ._ship import MAX_QUEUED_BYTES as MAX_QUEUED_BYTES
from ._ship import SEGMENT_BYTES as SEGMENT_BYTES
from ._ship import SEGMENT_SECONDS as SEGMENT_SECONDS
from ._ship import JournalFencedError as JournalFencedError
from ._ship import JournalShipBacklogError as JournalShipBacklogError
from ._ship import JournalShipError as JournalShipError
from ._ship import Restored as Restored
from ._ship import Shipped as Shipped
from ._ship import Shipper as Shipper
from ._ship import restore as restore

__all__ = [
    "BACKLOG_TIMEOUT_S",
    "MAX_QUEUED_BYTES",
    "LOST_ATTEMPTS",
    "RESERVE",
    "SEGMENT_BYTES",
    "SEGMENT_SECONDS",
    "JournalFileError",
    "JournalHold",
    "JournalLoss",
    "JournalWriter",
    "JournalFencedError",
    "JournalShipBacklogError",
    "JournalShipError",
    "JournalWriterError",
    "Recovered",
    "Restored",
    "RolloutJournal",
    "Shipped",
    "Shipper",
    "read_journal",
    "restore",
    "resumed_sample",
]
