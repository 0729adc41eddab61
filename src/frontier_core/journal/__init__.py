"""frontier_core.journal: the write-ahead rollout journal, sans-IO.

A journal records, as they happen, the samples a run generates: a sibling
sealed with its sample (``Sealed``), a running sibling's partial state
(``Progress``, a whole snapshot) or its next tokens (``Extend``), a
checkpoint committing (``Mark``), and for agentic rollouts the turns of an
episode (``Turn``: the policy's tokens and the tool call they make, with
its idempotency key, durable before the tool is called) and the tools'
answers (``Answer``). After a crash, the
checkpoint says which prompts still need generation and the journal says
which of their samples (or prefixes) already exist, so only what was not yet
durable is generated again.

Everything here is a pure function over bytes and values; the file adapter
(``frontier_adapters.journal.JournalWriter``) owns the file, the
writes and the fsyncs:

* ``encode``/``encode_header``/``encode_records`` and ``decode``: the frame
  format (``_format``'s docstring has the layout byte by byte), checksummed
  and sequence-numbered, with torn tails reported and everything else bad
  refused with a typed error naming its offset;
* ``replay``: the fold into the state a resume needs, with attempt fencing
  (``advance``: one record's step of it); an episode's durable turns and
  its pending call (``SiblingState.turns``, ``pending``); ``call_key``:
  the idempotency key of a call;
* ``compact``: the minimal records that replay to the same state on a
  window of ordinals;
* ``CommitPolicy``: when a group of appends must be fsynced;
* ``Reuse``/``reusable``: what a resume may take from a replayed journal
  (the age of a token counted along the lineage: ``lineage_age``), and
  ``continue_sample``: a durable prefix joined to what was generated after.

Invariants, proofs and tests: ``proofs/JOURNAL.md``. Importing this package
loads the standard library and ``attrs`` only.
"""

from ._commit import CommitPolicy as CommitPolicy
from ._compact import compact as compact
from ._errors import JournalBehindError as JournalBehindError
from ._errors import JournalCorruptError as JournalCorruptError
from ._errors import JournalEpisodeError as JournalEpisodeError
from ._errors import JournalError as JournalError
from ._errors import JournalMismatchError as JournalMismatchError
from ._errors import JournalSequenceError as JournalSequenceError
from ._errors import JournalVersionError as JournalVersionError
from ._format import DEFAULT_MAX_FRAME as DEFAULT_MAX_FRAME
from ._format import FORMAT as FORMAT
from ._format import FRAME_OVERHEAD as FRAME_OVERHEAD
from ._format import VERSION as VERSION
from ._format import Decoded as Decoded
from ._format import TornTail as TornTail
from ._format import decode as decode
from ._format import encode as encode
from ._format import encode_header as encode_header
from ._format import encode_record as encode_record
from ._format import encode_records as encode_records
from ._records import MAX_MARKS as MAX_MARKS
from ._records import MAX_NAMESPACE as MAX_NAMESPACE
from ._records import Answer as Answer
from ._records import BytesPayload as BytesPayload
from ._records import Extend as Extend
from ._records import JournalHeader as JournalHeader
from ._records import JsonPayload as JsonPayload
from ._records import Mark as Mark
from ._records import Payload as Payload
from ._records import Progress as Progress
from ._records import Record as Record
from ._records import Reserve as Reserve
from ._records import Sealed as Sealed
from ._records import TokenPayload as TokenPayload
from ._records import ToolCall as ToolCall
from ._records import Turn as Turn
from ._records import call_key as call_key
from ._records import check_payload as check_payload
from ._replay import NO_TOKENS as NO_TOKENS
from ._replay import JournalState as JournalState
from ._replay import SiblingState as SiblingState
from ._replay import TurnState as TurnState
from ._replay import accepts as accepts
from ._replay import advance as advance
from ._replay import replay as replay
from ._reuse import Reuse as Reuse
from ._reuse import continue_sample as continue_sample
from ._reuse import lineage_age as lineage_age
from ._reuse import lineage_version as lineage_version
from ._reuse import reusable as reusable

__all__ = [
    "DEFAULT_MAX_FRAME",
    "FORMAT",
    "FRAME_OVERHEAD",
    "MAX_NAMESPACE",
    "NO_TOKENS",
    "VERSION",
    "Answer",
    "BytesPayload",
    "CommitPolicy",
    "Decoded",
    "Extend",
    "JournalBehindError",
    "JournalCorruptError",
    "JournalEpisodeError",
    "JournalError",
    "JournalHeader",
    "MAX_MARKS",
    "JournalMismatchError",
    "JournalSequenceError",
    "JournalState",
    "JournalVersionError",
    "JsonPayload",
    "Mark",
    "Payload",
    "Progress",
    "Record",
    "Reserve",
    "Reuse",
    "Sealed",
    "SiblingState",
    "TokenPayload",
    "ToolCall",
    "TornTail",
    "Turn",
    "TurnState",
    "accepts",
    "advance",
    "call_key",
    "check_payload",
    "compact",
    "continue_sample",
    "decode",
    "encode",
    "encode_header",
    "encode_record",
    "encode_records",
    "lineage_age",
    "lineage_version",
    "replay",
    "reusable",
]
