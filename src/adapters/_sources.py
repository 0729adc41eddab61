"""An in-memory prompt source for the collector: no torch, no files.

For tests, examples and small jobs whose prompts fit in a list (and for the
Ray binding, which must not import torch in every actor). Torch data loaders
go through ``frontier_adapters.torch`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from frontier_core import CheckpointCorruptError
from frontier_core._errors import shown

from ._collector import Pull

KIND_SEQUENCE: Final = "sequence"


class SequenceSource:
    """A seekable source over an in-memory list of rows, repeated for
    ``epochs``: ordinal ``o`` is ``rows[o % len(rows)]``. Imports nothing;
    its position at the cut is the cut itself. For torch data loaders use
    ``frontier_adapters.torch.SeekableSource`` (built by a factory inside
    the actor)."""

    def __init__(self, rows: Sequence[Any], *, epochs: int = 1, batch_size: int = 8) -> None:
        if not rows or epochs < 1 or batch_size < 1:
            raise ValueError("need rows, epochs >= 1 and batch_size >= 1")
        self.rows = list(rows)
        self.epochs = epochs
        self.batch_size = batch_size
        self._next = 0

    @property
    def stream_len(self) -> int:
        return len(self.rows) * self.epochs

    def pull(self) -> Pull | None:
        first = self._next
        stop = min(first + self.batch_size, self.stream_len)
        if first >= stop:
            return None
        self._next = stop
        n = len(self.rows)
        return Pull(first, [self.rows[o % n] for o in range(first, stop)], None)

    def position(self, cut: int) -> dict[str, Any]:
        return {"kind": KIND_SEQUENCE, "next_ordinal": cut, "rows": len(self.rows)}

    def base(self, state: Mapping[str, Any], cut: int) -> int:
        if not isinstance(state, Mapping) or set(state) != {"kind", "next_ordinal", "rows"}:
            raise CheckpointCorruptError(f"not a sequence stream state: {shown(state)}")
        if state["kind"] != KIND_SEQUENCE or state["rows"] != len(self.rows):
            raise CheckpointCorruptError(
                f"sequence state for {shown(state['rows'])} rows, this source has {len(self.rows)}"
            )
        if state["next_ordinal"] != cut:
            raise CheckpointCorruptError(
                f"the saved stream position {shown(state['next_ordinal'])} differs from "
                f"the cut {cut}"
            )
        return cut

    def restore(self, state: Mapping[str, Any], cut: int) -> None:
        self._next = self.base(state, cut)

    def prune(self, cut: int) -> None:
        pass
