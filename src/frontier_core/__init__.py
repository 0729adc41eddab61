"""frontier_core: exactly-once prompt coverage across crashes for async RL.

A pure, immutable state machine. Stamp every prompt the data source yields
with its stream ordinal, report what happens to it (dispatched, buffered,
trained, failed, evicted), and checkpoint the ledger instead of the data
loader's live cursor: a resume rewinds the source to the cut and filters the
re-yielded stream so that every prompt is trained exactly once or dropped on
purpose, across any number of crashes. The unit is a prompt's group of n
samples (``LedgerConfig.samples``, 1 by default), each sibling from one
fenced attempt, and ``frontier_core.journal`` is the write-ahead rollout journal that lets a
resume keep what was already generated.

Importing this package loads the standard library and ``attrs`` only.
"""

from ._checkpoint import Checkpoint as Checkpoint
from ._errors import CheckpointCorruptError as CheckpointCorruptError
from ._errors import CheckpointError as CheckpointError
from ._errors import CheckpointMismatchError as CheckpointMismatchError
from ._errors import CheckpointVersionError as CheckpointVersionError
from ._errors import FingerprintMismatchError as FingerprintMismatchError
from ._errors import FrontierError as FrontierError
from ._errors import IllegalTransitionError as IllegalTransitionError
from ._errors import TraceError as TraceError
from ._events import Buffer as Buffer
from ._events import Dispatch as Dispatch
from ._events import Effect as Effect
from ._events import Event as Event
from ._events import Evict as Evict
from ._events import Fail as Fail
from ._events import FailSample as FailSample
from ._events import FailurePolicy as FailurePolicy
from ._events import Granularity as Granularity
from ._events import Lease as Lease
from ._events import Restart as Restart
from ._events import SampleEvent as SampleEvent
from ._events import Seal as Seal
from ._events import Setback as Setback
from ._events import Sibling as Sibling
from ._events import Stamp as Stamp
from ._events import Status as Status
from ._events import Train as Train
from ._groups import LedgerConfig as LedgerConfig
from ._ledger import MAX_ATTEMPT as MAX_ATTEMPT
from ._ledger import Applied as Applied
from ._ledger import Ledger as Ledger
from ._ledger import Resumed as Resumed
from ._shards import ShardCheckpoint as ShardCheckpoint
from ._shards import ShardMismatchError as ShardMismatchError
from ._shards import Share as Share
from ._shards import merge_shards as merge_shards
from ._shards import reshard as reshard
from ._shards import split_checkpoint as split_checkpoint
from ._trainlog import Lineage as Lineage
from ._trainlog import TrainLogError as TrainLogError
from ._trainlog import TrainLogWriter as TrainLogWriter
from ._trainlog import fold_lineage as fold_lineage
from ._trainlog import read_train_log as read_train_log
from ._transitions import TRANSITIONS as TRANSITIONS

__version__ = "0.1.0"

__all__ = [
    "MAX_ATTEMPT",
    "TRANSITIONS",
    "Buffer",
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointVersionError",
    "Dispatch",
    "Effect",
    "Event",
    "Evict",
    "Fail",
    "FailSample",
    "FailurePolicy",
    "Granularity",
    "Lease",
    "FingerprintMismatchError",
    "FrontierError",
    "IllegalTransitionError",
    "Ledger",
    "LedgerConfig",
    "Lineage",
    "Restart",
    "Resumed",
    "SampleEvent",
    "Seal",
    "Setback",
    "Share",
    "Sibling",
    "ShardCheckpoint",
    "ShardMismatchError",
    "Status",
    "Applied",
    "Train",
    "TrainLogError",
    "TrainLogWriter",
    "Stamp",
    "TraceError",
    "fold_lineage",
    "merge_shards",
    "reshard",
    "split_checkpoint",
    "read_train_log",
]
