"""The seekable loader's batched paths: ``collate_rows`` (rows collated in
the worker), ``OrdinalDataset.__getitems__`` and the per-epoch sampler loop
yield exactly the stream of the row-by-row path."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.torch import (  # noqa: E402
    OrdinalDataset,
    SeekableSampler,
    SeekableSource,
    StreamCollector,
    make_seekable_loader,
)
from torch.utils.data import default_collate  # noqa: E402

from frontier_core import LedgerConfig  # noqa: E402


class Rows(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int) -> None:
        self.data = torch.arange(n * 4, dtype=torch.int64).reshape(n, 4)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        return self.data[i]


class BatchedRows(Rows):
    calls = 0

    def __getitems__(self, indices: list[int]) -> list[Any]:
        type(self).calls += 1
        return [self.data[i] for i in indices]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("start", [0, 5, 17, 40])
def test_sampler_walks_epochs_like_the_order(shuffle: bool, start: int) -> None:
    sampler = SeekableSampler(17, seed=3, shuffle=shuffle, epochs=3)
    sampler.seek(start)
    got = list(sampler)
    assert got == [(o, sampler.order.index(o)) for o in range(start, 51)]
    assert sampler.position == 51


def test_unbounded_sampler_crosses_epochs() -> None:
    sampler = SeekableSampler(5, seed=1, epochs=None)
    it = iter(sampler)
    got = [next(it) for _ in range(23)]
    assert got == [(o, sampler.order.index(o)) for o in range(23)]
    assert sampler.position == 23


@pytest.mark.parametrize("num_workers", [0, 2])
def test_collate_rows_gives_the_same_stream(num_workers: int) -> None:
    ds = Rows(50)
    plain = make_seekable_loader(ds, batch_size=8, seed=2, epochs=2)
    stacked = make_seekable_loader(
        ds, batch_size=8, seed=2, epochs=2, collate_rows=default_collate, num_workers=num_workers
    )
    for a, b in zip(plain, stacked, strict=True):
        assert a.ordinals == b.ordinals
        assert isinstance(b.rows, torch.Tensor) and b.rows.shape == (len(a), 4)
        assert torch.equal(torch.stack(a.rows), b.rows)


def test_collector_takes_rows_of_a_collated_batch() -> None:
    ds = Rows(20)
    loader = make_seekable_loader(ds, batch_size=8, seed=0, collate_rows=default_collate)
    collector = StreamCollector(SeekableSource(loader), LedgerConfig(stream_len=20))
    items = collector.take(11)
    assert [o for o, _ in items] == list(range(11))
    order = loader.sampler.order
    for o, row in items:
        assert torch.equal(row, ds[order.index(o)])


def test_getitems_delegates_to_the_dataset() -> None:
    ds = BatchedRows(10)
    wrapped = OrdinalDataset(ds)
    before = BatchedRows.calls
    got = wrapped.__getitems__([(7, 3), (8, 0)])
    assert BatchedRows.calls == before + 1
    assert [o for o, _ in got] == [7, 8]
    assert torch.equal(got[0][1], ds[3]) and torch.equal(got[1][1], ds[0])
    plain = OrdinalDataset(Rows(10)).__getitems__([(1, 2)])
    assert plain[0][0] == 1 and torch.equal(plain[0][1], Rows(10)[2])
