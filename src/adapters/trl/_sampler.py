"""The seekable sampler and the dataset view that carries ordinals.

``FrontierSampler`` keeps ``RepeatSampler``'s layout (each prompt of a
block repeated ``num_generations`` times, the block repeated once per
micro-step of its generation) but draws its blocks from the ledger, from
the cut on: it yields *ordinals*. ``OrdinalRows`` maps an ordinal to its
row through the stream order and adds ``ORDINAL_COLUMN``, so each row
reaches the trainer (and every reward function, as a keyword argument)
with its stream position.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import Dataset, Sampler

from ._blocks import ORDINAL_COLUMN, GenerationBlocks
from ._stream import StreamOrder


class FrontierSampler(Sampler[int]):
    """Yields ordinals in ``RepeatSampler``'s layout, block by block from
    ``blocks.next_block()``. Its length is fixed for a life of the run (what
    the Trainer reads once to plan its steps); it has no ``set_epoch``: the
    epoch of an ordinal is ``ordinal // len(dataset)``, not a count of
    passes."""

    def __init__(self, blocks: GenerationBlocks) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return self.blocks.planned_rows()

    def __iter__(self) -> Iterator[int]:
        layout = self.blocks.layout
        g, repeat = layout.num_generations, layout.repeat
        while (block := self.blocks.next_block()) is not None:
            copy = [o for o in block for _ in range(g)]
            for _ in range(repeat):
                yield from copy


class OrdinalRows(Dataset[dict[str, Any]]):
    """``rows[o]`` is ``dataset[order.index(o)]`` with ``ORDINAL_COLUMN``
    set to ``o``. ``len`` is the dataset's. Holds the order only (not the
    run), so loader workers get a small picklable object."""

    def __init__(self, dataset: Any, order: StreamOrder) -> None:
        if ORDINAL_COLUMN in getattr(dataset, "column_names", ()):
            raise ValueError(f"the dataset already has a column {ORDINAL_COLUMN!r}")
        self.dataset = dataset
        self.order = order

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, ordinal: int) -> dict[str, Any]:
        return {**self.dataset[self.order.index(ordinal)], ORDINAL_COLUMN: ordinal}

    def __getitems__(self, ordinals: Sequence[int]) -> list[dict[str, Any]]:
        index = self.order.index
        batched = getattr(self.dataset, "__getitems__", None)
        if batched is not None:
            rows = batched([index(o) for o in ordinals])
        else:
            rows = [self.dataset[index(o)] for o in ordinals]
        return [{**row, ORDINAL_COLUMN: o} for o, row in zip(ordinals, rows, strict=True)]
