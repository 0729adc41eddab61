"""``frontier bench --only shards``: merging and splitting multi-rank records.

Each of W ranks runs its own ledger on its share of the stream through a
healthy asynchronous workload: 8 batches of 32 in flight per rank, each step
the oldest batch lands in a shuffled order with a quarter of it one step
late, a step trains the 32 groups that landed first, and 1 generation in 64
fails once (retried, so the records carry attempts). The shuffles differ
from rank to rank, so the ranks' holes fall in different places and the
global record interleaves them: the realistic window is 256 prompts in
flight per rank, ``256 * W`` in all. After 12 steps every rank checkpoints
(``ShardCheckpoint``) and the section measures, in process CPU time:

* ``merge``: ``merge_shards`` of the W records into the global record;
* ``split``: ``split_checkpoint`` of the global record back into W records;
* ``reshard W -> M``: ``reshard`` to another world size (M = 3W/4, so the
  shares move), what a resume after losing a quarter of the ranks computes
  on every rank;

for W in 8, 64 and 512, each beside its baseline: the W ranks taking their
own checkpoints (``Ledger.checkpoint().state_dict()``, the work the ranks do
anyway at every checkpoint). ``us per range`` (time over the ranges of the
W records and of the global record) says whether the cost is linear in the
window: flat from 8 to 512 ranks. Target: a reshard at 512 ranks in under a
second.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from .._events import FailurePolicy
from .._groups import LedgerConfig
from .._ledger import Ledger
from .._shards import ShardCheckpoint, Share, merge_shards, reshard, split_checkpoint
from ._harness import Row, ratios_of, row

BATCH = 32
WINDOW_BATCHES = 8
STEPS = 12


def rank_ledger(share: Share, config: LedgerConfig, seed: int) -> Ledger:
    """One rank's ledger after ``STEPS`` steps of the healthy workload."""
    rng = random.Random(seed)
    ledger = Ledger.start(share.config(config))
    batches: list[list[int]] = []
    late: list[int] = []
    landed: list[int] = []
    retry: list[int] = []
    steps = 0
    while steps < STEPS:
        step = ledger.stamp(BATCH)
        kept = list(step.effect.kept)
        ledger = step.ledger.dispatch(kept + retry).ledger
        batches.append(kept + retry)
        retry = []
        if len(batches) < WINDOW_BATCHES:
            continue
        oldest = batches.pop(0)
        rng.shuffle(oldest)
        failed = [o for o in oldest if rng.random() < 1 / 64]
        oldest = [o for o in oldest if o not in failed]
        if failed:
            ledger = ledger.fail(failed).ledger
            retry = failed
        cut = 3 * len(oldest) // 4
        arriving, late = late + oldest[:cut], oldest[cut:]
        ledger = ledger.buffer(arriving).ledger
        landed.extend(arriving)
        take, landed = landed[:BATCH], landed[BATCH:]
        ledger = ledger.train(take).ledger
        steps += 1
    return ledger


def records(world: int) -> tuple[list[Ledger], list[ShardCheckpoint]]:
    config = LedgerConfig(
        on_failure=FailurePolicy.RETRY, max_failures=3, fingerprint="bench:shards"
    )
    ledgers = [
        rank_ledger(share, config, seed=world * 100_003 + share.rank)
        for share in Share.tiling(world)
    ]
    shards = [
        ShardCheckpoint(share, STEPS, ledger.checkpoint())
        for share, ledger in zip(Share.tiling(world), ledgers, strict=True)
    ]
    return ledgers, shards


def _ranges(shards: list[ShardCheckpoint]) -> int:
    return sum(s.checkpoint.size() // 2 for s in shards)


def _cpu(fn: Callable[[], object], reps: int) -> float:
    start = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - start) / reps


def measure(world: int, rounds: int) -> list[Row]:
    """The rows of one world size."""
    start = time.process_time()
    ledgers, shards = records(world)
    setup = time.process_time() - start
    merged = merge_shards(shards)
    to = max(1, 3 * world // 4)
    per_rank = _ranges(shards)
    global_ranges = merged.size() // 2
    reps = max(1, 256 // world)
    work: dict[str, Callable[[], object]] = {
        "baseline": lambda: [ledger.checkpoint().state_dict() for ledger in ledgers],
        "merge": lambda: merge_shards(shards),
        "split": lambda: split_checkpoint(merged, world, step=STEPS, base=0),
        "reshard": lambda: reshard(shards, to),
    }
    timings: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(rounds):
        for name, fn in work.items():
            timings[name].append(_cpu(fn, reps))
    base = timings.pop("baseline")
    baseline = f"{world} ranks' own checkpoints"
    common: dict[str, Any] = {
        "world": world,
        "window": sum(ledger.in_flight() for ledger in ledgers),
        "rank_record_ranges": per_rank,
        "global_record_ranges": global_ranges,
        "setup_seconds": round(setup, 2),
    }
    rows = [row("shards", f"{baseline} (baseline)", [v * 1e3 for v in base], "ms cpu", **common)]
    labels = {
        "merge": f"merge {world} records",
        "split": f"split into {world}",
        "reshard": f"reshard {world} -> {to}",
    }
    for name, values in timings.items():
        extra: dict[str, Any] = {
            "us_per_range": [v * 1e6 / (per_rank + global_ranges) for v in values],
            **common,
        }
        if name == "reshard" and world >= 512:
            extra.update(target="< 1 s", met=max(values) < 1.0)
        rows.append(
            row(
                "shards",
                labels[name],
                [v * 1e3 for v in values],
                "ms cpu",
                ratios=ratios_of(values, base),
                baseline=baseline,
                **extra,
            )
        )
    return rows


def bench_shards(*, quick: bool, rounds: int) -> list[Row]:
    rows: list[Row] = []
    for world in (8, 64) if quick else (8, 64, 512):
        rows.extend(measure(world, rounds))
    return rows
