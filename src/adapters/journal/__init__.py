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
  the reuse policy and reserves this life's attempts (``Recovered``).

Every binding (the rollout loop, the ledger service and its Ray actor,
the examples) imports the journal from here; nothing restates its API.
Errors: the core's ``JournalError`` family, ``JournalFileError`` for the
file itself (a directory, a symlink, a FIFO, a second writer at the path),
``JournalWriterError`` for a writer a failed write or fsync left unusable,
and ``frontier_adapters.JournalWithoutCheckpointError`` for a journal that
holds samples when there is no checkpoint.
"""

from ._files import JournalFileError as JournalFileError
from ._files import JournalWriter as JournalWriter
from ._files import JournalWriterError as JournalWriterError
from ._files import read_journal as read_journal
from ._rollout import RESERVE as RESERVE
from ._rollout import Recovered as Recovered
from ._rollout import RolloutJournal as RolloutJournal
from ._rollout import resumed_sample as resumed_sample

__all__ = [
    "RESERVE",
    "JournalFileError",
    "JournalWriter",
    "JournalWriterError",
    "Recovered",
    "RolloutJournal",
    "read_journal",
    "resumed_sample",
]
