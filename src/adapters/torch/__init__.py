"""The torch data binding of frontier_core (imports torch and torchdata).

Swap a ``DataLoader`` for a seekable one and drive it through a collector::

    from frontier_adapters.torch import StreamCollector, SeekableSource, make_seekable_loader

    loader = make_seekable_loader(dataset, batch_size=32, seed=0, epochs=3, num_workers=2)
    collector = StreamCollector(SeekableSource(loader), LedgerConfig(stream_len=3 * len(dataset)))
    prompts = collector.take(n)            # [(ordinal, row), ...], dispatched
    collector.landed([...]); collector.trained([...]); collector.failed([...])
    state = collector.state_dict()         # JSON: ledger record + stream position at the cut

Every batch of a seekable loader is an ``OrdinalBatch`` whose ``ordinals``
field carries its rows' stream positions.

Data-parallel ranks that read their own data: ``make_seekable_loader(...,
share=share)`` and ``RankCollector`` per rank, ``DistributedCheckpointer``
for all-or-nothing multi-rank checkpoints, and ``frontier_core.reshard`` to
resume on any world size (docs/elastic.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader

from frontier_core import Share

from .._collector import Pull as Pull
from .._collector import StreamCollector as StreamCollector
from .._collector import StreamSource as StreamSource
from .._errors import CheckpointFileError as CheckpointFileError
from .._errors import CheckpointFileVersionError as CheckpointFileVersionError
from .._errors import DatasetChangedError as DatasetChangedError
from .._errors import SnapshotMissingError as SnapshotMissingError
from .._errors import StreamMisalignedError as StreamMisalignedError
from ._checkpoints import TENSOR_PARTS as TENSOR_PARTS
from ._checkpoints import LoadedCheckpoint as LoadedCheckpoint
from ._checkpoints import dataset_fingerprint as dataset_fingerprint
from ._checkpoints import latest_checkpoint as latest_checkpoint
from ._checkpoints import published_checkpoints as published_checkpoints
from ._checkpoints import read_checkpoint as read_checkpoint
from ._checkpoints import read_checkpoint_dir as read_checkpoint_dir
from ._checkpoints import write_checkpoint as write_checkpoint
from ._distributed import Collectives as Collectives
from ._distributed import DistributedCheckpointer as DistributedCheckpointer
from ._distributed import LoadedDistributedCheckpoint as LoadedDistributedCheckpoint
from ._distributed import RankCollector as RankCollector
from ._distributed import RankPart as RankPart
from ._distributed import TorchCollectives as TorchCollectives
from ._distributed import WrittenPart as WrittenPart
from ._distributed import committed_checkpoints as committed_checkpoints
from ._distributed import owned_groups as owned_groups
from ._distributed import read_distributed_checkpoint as read_distributed_checkpoint
from ._sampler import CollateRows as CollateRows
from ._sampler import OrdinalBatch as OrdinalBatch
from ._sampler import OrdinalDataset as OrdinalDataset
from ._sampler import SeekableSampler as SeekableSampler
from ._sampler import StreamOrder as StreamOrder
from ._sampler import collate_ordinals as collate_ordinals
from ._sources import SeekableSource as SeekableSource
from ._sources import SnapshotSource as SnapshotSource
from ._sources import decode_snapshot as decode_snapshot
from ._sources import encode_snapshot as encode_snapshot


def make_seekable_loader(
    dataset: Any,
    *,
    batch_size: int,
    seed: int = 0,
    shuffle: bool = True,
    epochs: int | None = 1,
    stateful: bool = True,
    collate_rows: Callable[[list[Any]], Any] | None = None,
    share: Share | None = None,
    **loader_kwargs: Any,
) -> Any:
    """A loader over ``dataset`` whose order is a pure function of
    ``(seed, epoch)``: a ``StatefulDataLoader`` (or, with ``stateful=False``,
    a plain ``torch.utils.data.DataLoader``) on a ``SeekableSampler`` with
    ``OrdinalDataset`` and ``collate_ordinals``. One iteration walks all
    ``epochs``; batches are ``OrdinalBatch``. ``collate_rows`` (e.g.
    ``torch.utils.data.default_collate``) collates each batch's rows inside
    the workers (``CollateRows``): with ``num_workers > 0`` one tensor per
    batch crosses the process boundary instead of one per row, which
    ``frontier bench`` measures at about the bare loader's cost.
    ``loader_kwargs`` go to the loader (``num_workers``, ``pin_memory``, ...).
    ``share`` (a ``frontier_core.Share``) makes it one data-parallel rank's
    loader: it yields that rank's part of the stream in local ordinals
    (``SeekableSampler``; see ``RankCollector``)."""
    for key in ("sampler", "batch_sampler", "shuffle", "collate_fn"):
        if key in loader_kwargs:
            raise TypeError(f"make_seekable_loader sets {key!r} itself")
    sampler = SeekableSampler(len(dataset), seed=seed, shuffle=shuffle, epochs=epochs, share=share)
    cls: Any = DataLoader
    if stateful:
        from torchdata.stateful_dataloader import (  # type: ignore[import-untyped]
            StatefulDataLoader,
        )

        cls = StatefulDataLoader
    return cls(
        OrdinalDataset(dataset),
        batch_size=batch_size,
        sampler=sampler,
        collate_fn=collate_ordinals if collate_rows is None else CollateRows(collate_rows),
        **loader_kwargs,
    )


__all__ = [
    "CheckpointFileError",
    "Collectives",
    "DistributedCheckpointer",
    "LoadedDistributedCheckpoint",
    "RankCollector",
    "RankPart",
    "TorchCollectives",
    "WrittenPart",
    "committed_checkpoints",
    "owned_groups",
    "read_distributed_checkpoint",
    "CollateRows",
    "CheckpointFileVersionError",
    "DatasetChangedError",
    "LoadedCheckpoint",
    "TENSOR_PARTS",
    "OrdinalBatch",
    "OrdinalDataset",
    "Pull",
    "SeekableSampler",
    "SeekableSource",
    "SnapshotMissingError",
    "SnapshotSource",
    "StreamCollector",
    "StreamMisalignedError",
    "StreamOrder",
    "StreamSource",
    "collate_ordinals",
    "dataset_fingerprint",
    "decode_snapshot",
    "encode_snapshot",
    "latest_checkpoint",
    "published_checkpoints",
    "make_seekable_loader",
    "read_checkpoint",
    "read_checkpoint_dir",
    "write_checkpoint",
]
