"""Benchmarks of the torch adapter against the bare ``StatefulDataLoader``:
loader overhead and resume cost. See ``_bench`` for the conventions."""

from __future__ import annotations

import collections
import copy
import gc
import io
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import Dataset, default_collate
from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]

from frontier_core import Checkpoint, LedgerConfig
from frontier_core.bench import Row, ratios_of, row

from .._collector import StreamCollector
from ..torch import make_seekable_loader
from ..torch._sources import SeekableSource, SnapshotSource

BATCH = 32
TOKENS = 256
RING = 512


class TokenDataset(Dataset[torch.Tensor]):
    """An in-memory tokenized dataset: one int32 tensor, a row per prompt."""

    def __init__(self, rows: int, tokens: int = TOKENS) -> None:
        g = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(0, 50_000, (rows, tokens), dtype=torch.int32, generator=g)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.tokens[index]


class SynthDataset(Dataset[torch.Tensor]):
    """A dataset whose rows are synthesized from the index (for 10^6 rows
    without materializing them): the same for every loader measured."""

    def __init__(self, rows: int, tokens: int = TOKENS) -> None:
        self.rows = rows
        self.base = torch.arange(tokens, dtype=torch.int32)

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.base + index


# -- the variants of one epoch ------------------------------------------------------


def _bare(ds: Dataset[Any], nw: int) -> Any:
    return StatefulDataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=nw)


def epoch_bare(ds: Dataset[Any], nw: int) -> None:
    for _ in _bare(ds, nw):
        pass


def epoch_ring(ds: Dataset[Any], nw: int) -> None:
    """NeMo-RL: ``state_dict()`` before every pull, kept in a ring of 512."""
    loader = _bare(ds, nw)
    ring: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(maxlen=RING)
    it = iter(loader)
    count = 0
    while True:
        ring.append((count, copy.deepcopy(loader.state_dict())))
        try:
            batch = next(it)
        except StopIteration:
            break
        count += len(batch)


def epoch_seekable(ds: Dataset[Any], nw: int) -> None:
    """``make_seekable_loader``; the consumer stacks the rows, so that every
    variant hands the trainer the same (32, 256) tensor."""
    for batch in make_seekable_loader(ds, batch_size=BATCH, seed=0, num_workers=nw):
        torch.stack(batch.rows)


def epoch_seekable_stacked(ds: Dataset[Any], nw: int) -> None:
    """``make_seekable_loader(collate_rows=default_collate)``: the rows are
    stacked in the worker."""
    loader = make_seekable_loader(
        ds, batch_size=BATCH, seed=0, num_workers=nw, collate_rows=default_collate
    )
    for _ in loader:
        pass


def _drive(collector: StreamCollector) -> None:
    while True:
        items = collector.take(BATCH)
        if not items:
            return
        ords = [o for o, _ in items]
        torch.stack([r for _, r in items])
        collector.landed(ords)
        collector.trained(ords)


def epoch_seekable_collector(ds: Dataset[Any], nw: int) -> None:
    """The full bookkeeping: collector over the seekable source (rows
    collated in the worker); each batch taken, landed and trained through
    the ledger."""
    loader = make_seekable_loader(
        ds, batch_size=BATCH, seed=0, num_workers=nw, collate_rows=default_collate
    )
    _drive(StreamCollector(SeekableSource(loader), LedgerConfig(stream_len=len(ds))))  # type: ignore[arg-type]


def epoch_snapshot_collector(ds: Dataset[Any], nw: int) -> None:
    """The generic binding: collector over ``SnapshotSource`` on the bare loader."""
    _drive(StreamCollector(SnapshotSource(_bare(ds, nw), stream_len=len(ds))))  # type: ignore[arg-type]


VARIANTS: dict[str, Callable[[Dataset[Any], int], None]] = {
    "bare StatefulDataLoader": epoch_bare,
    "NeMo-RL ring of 512 snapshots": epoch_ring,
    "seekable loader (rows stacked by consumer)": epoch_seekable,
    "seekable loader (rows stacked in worker)": epoch_seekable_stacked,
    "seekable (stacked in worker) + collector + ledger": epoch_seekable_collector,
    "snapshot binding + collector + ledger": epoch_snapshot_collector,
}
SEEKABLE = "seekable loader (rows stacked by consumer)"
SEEKABLE_STACKED = "seekable loader (rows stacked in worker)"
RING_NAME = "NeMo-RL ring of 512 snapshots"


def snapshot_bytes(ds: Dataset[Any], nw: int) -> int:
    loader = _bare(ds, nw)
    it = iter(loader)
    next(it)
    buf = io.BytesIO()
    torch.save(loader.state_dict(), buf)
    del it
    return len(buf.getvalue())


def cpu_clock() -> float:
    """CPU seconds of this process plus its reaped children (the loader's
    workers are joined at the end of each epoch): the cost of an epoch that
    other processes on a shared machine do not inflate."""
    import resource

    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


def bench_loader(*, quick: bool, rounds: int) -> list[Row]:
    rows_n = 4_096 if quick else 100_000
    ds = TokenDataset(rows_n)
    out: list[Row] = []
    names = list(VARIANTS)
    for nw in (0, 2):
        wall: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            # Rotate the order each round so that no variant always runs
            # first (or right after the heaviest one).
            for name in names[r % len(names) :] + names[: r % len(names)]:
                gc.collect()
                c0, w0 = cpu_clock(), time.perf_counter()
                VARIANTS[name](ds, nw)
                gc.collect()
                wall[name].append(time.perf_counter() - w0)
                cpu[name].append(cpu_clock() - c0)
        for clock, times, unit in (("cpu", cpu, "s cpu/epoch"), ("wall", wall, "s/epoch")):
            base = times[names[0]]
            for name in names:
                extra: dict[str, Any] = {"rows": rows_n, "batch": BATCH, "num_workers": nw}
                ratios = ratios_of(times[name], base)
                if name == SEEKABLE or name == SEEKABLE_STACKED:
                    extra.update(target="within 5% of bare", met=statistics.median(ratios) <= 1.05)
                if name == RING_NAME and clock == "cpu":
                    extra["snapshot_bytes"] = snapshot_bytes(ds, nw)
                out.append(
                    row(
                        "loader",
                        f"nw={nw} {clock} {name}",
                        times[name],
                        unit,
                        ratios=ratios,
                        baseline=f"bare StatefulDataLoader ({clock})",
                        **extra,
                    )
                )
    return out


# -- 4. resume cost -------------------------------------------------------------


def seekable_first_batch(ds: Dataset[Any], epochs: int, cut: int, nw: int) -> float:
    """Seconds from a fresh loader and collector to the first batch after
    resuming a state whose cut is ``cut``."""
    stream_len = epochs * len(ds)  # type: ignore[arg-type]
    config = LedgerConfig(stream_len=stream_len, fingerprint="bench")
    start = time.perf_counter()
    loader = make_seekable_loader(ds, batch_size=BATCH, seed=0, epochs=epochs, num_workers=nw)
    source = SeekableSource(loader)
    collector = StreamCollector(source, config)
    state = {
        "format": "frontier_adapters.collector",
        "version": 1,
        "ledger": Checkpoint(cut=cut, fingerprint="bench", stream_len=stream_len).state_dict(),
        "stream": source.position(cut),
    }
    collector.resume(state, load_replay_buffer=False)
    items = collector.take(BATCH)
    elapsed = time.perf_counter() - start
    assert items[0][0] == cut, (items[0][0], cut)
    del collector, source, loader
    return elapsed


def sdl_state(ds: Dataset[Any], rows: int, nw: int) -> dict[str, Any]:
    """A bare loader's ``state_dict()`` after ``rows`` rows of its first epoch."""
    loader = _bare(ds, nw)
    it = iter(loader)
    for _ in range(rows // BATCH):
        next(it)
    state: dict[str, Any] = copy.deepcopy(loader.state_dict())
    del it
    return state


def sdl_first_batch(ds: Dataset[Any], state: dict[str, Any], nw: int) -> float:
    start = time.perf_counter()
    loader = _bare(ds, nw)
    loader.load_state_dict(copy.deepcopy(state))
    it = iter(loader)
    next(it)
    elapsed = time.perf_counter() - start
    del it, loader
    return elapsed


def bench_resume(*, quick: bool, rounds: int) -> list[Row]:
    rows_n = 10_000 if quick else 1_000_000
    epochs = 20
    near, far = 10**3, (10**5 if quick else 10**7)
    ds = SynthDataset(rows_n)
    out: list[Row] = []
    for nw in (0, 2):
        t: dict[int, list[float]] = {near: [], far: []}
        for _ in range(rounds):
            for cut in (near, far):
                t[cut].append(seekable_first_batch(ds, epochs, cut, nw))
        out.append(
            row("resume", f"nw={nw} seekable, first batch at ordinal {near:,}", t[near], "s wall")
        )
        ratios = ratios_of(t[far], t[near])
        out.append(
            row(
                "resume",
                f"nw={nw} seekable, first batch at ordinal {far:,}",
                t[far],
                "s wall",
                ratios=ratios,
                baseline=f"resume at {near:,}",
                target="<= 1.5x",
                met=statistics.median(ratios) <= 1.5,
                dataset_rows=rows_n,
                epoch=far // rows_n,
            )
        )
    # The contrast: StatefulDataLoader's own resume near the start of an
    # epoch against deep into it (num_workers=0: reaching a deep state with
    # workers would take minutes of iteration).
    deep = rows_n * 9 // 10
    states = {near: sdl_state(ds, near, 0), deep: sdl_state(ds, deep, 0)}
    s: dict[int, list[float]] = {near: [], deep: []}
    for _ in range(rounds):
        for k in (near, deep):
            s[k].append(sdl_first_batch(ds, states[k], 0))
    out.append(
        row("resume", f"nw=0 StatefulDataLoader, {near:,} rows into the epoch", s[near], "s wall")
    )
    out.append(
        row(
            "resume",
            f"nw=0 StatefulDataLoader, {deep:,} rows into the epoch",
            s[deep],
            "s wall",
            ratios=ratios_of(s[deep], s[near]),
            baseline=f"{near:,} rows in",
        )
    )
    return out


# -- the dataset fingerprint --------------------------------------------------------


class PromptRows(Dataset[list[int]]):
    """Short prompts as lists of token ids, synthesized from the index."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> list[int]:
        return [index % 50_000, (index * 7) % 50_000, (index * 13) % 50_000, 2]


def bench_fingerprint(*, quick: bool, rounds: int) -> list[Row]:
    """``dataset_fingerprint`` hashing every row of 10^6 prompts (and of
    10^5 tensors of 256 tokens), against one bare pass that reads every row:
    the cost of reading the dataset is the floor any full-content identity
    pays."""
    from ..torch import dataset_fingerprint

    out: list[Row] = []
    for name, ds in (
        ("10^6 prompts (4 token ids)", PromptRows(10_000 if quick else 1_000_000)),
        ("10^5 rows of 256 int32 tokens", SynthDataset(2_000 if quick else 100_000)),
    ):
        bare: list[float] = []
        full: list[float] = []
        for _ in range(rounds):
            start = time.process_time()
            for i in range(len(ds)):
                ds[i]
            bare.append(time.process_time() - start)
            start = time.process_time()
            dataset_fingerprint(ds, seed=0, shuffle=True)
            full.append(time.process_time() - start)
        n = len(ds)
        out.append(row("fingerprint", f"{name}: read every row", bare, "s cpu", rows=n))
        out.append(
            row(
                "fingerprint",
                f"{name}: dataset_fingerprint (every row)",
                full,
                "s cpu",
                ratios=ratios_of(full, bare),
                baseline="reading every row once",
                rows=n,
            )
        )
    return out
