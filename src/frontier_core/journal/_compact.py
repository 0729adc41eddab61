"""Compaction: the fewest records that replay to what the window still needs.

After a checkpoint, the ordinals a resume can still need are the *window*:
the unresolved ordinals at or above the checkpoint's cut. Everything the
journal holds for other ordinals (trained or dropped ones) is dead weight,
and within the window only the replayed state matters: a sealed sibling's
seal, an unsealed sibling's latest progress, and the current attempt of
each, which keeps fencing older attempts after the compaction. ``compact``
keeps exactly one record per sibling of the window, the one whose replay
from nothing is that sibling's state, so the journal's size follows the
in-flight window, not the run.

The guarantee (COMPACTION-PRESERVES-WINDOW in proofs/JOURNAL.md):
``replay(compact(J, W)) == replay(J).restrict(W)``, and, because replay
folds each key on its own, for any later records ``K``,
``replay(compact(J, W) + K).restrict(W) == replay(J + K).restrict(W)``: a
compacted journal that keeps being appended to stays equivalent on the
window. Minimal: every sibling with a state needs at least one record (each
record names one sibling), and this is one; an episode keeps one record per
durable turn and one per durable answer (each holds what no other record
does), plus its progress if it has tokens of a turn not finished. Marks are not records of the
compacted journal: its header remembers them (``JournalHeader.marks``, the
newest ``MAX_MARKS``), so ``Decoded.check_mark`` still proves them.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from ._records import Record
from ._replay import replay


def compact(records: Iterable[Record], window: Container[int]) -> tuple[Record, ...]:
    """The minimal records, ascending by (ordinal, sibling), that replay to
    the state of ``records`` restricted to the ordinals in ``window`` (any
    container: a set, a ``range``, the ledger's window). Linear in the
    number of records."""
    return replay(records).restrict(window).to_records()
