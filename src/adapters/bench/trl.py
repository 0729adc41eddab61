"""Resume at a deep position under TRL: the Trainer's skip against the seek.

What a resumed ``GRPOTrainer`` does before its first batch, built from the
same pieces the Trainer uses (no model): TRL's ``RepeatSampler`` under a
``DataLoader`` prepared by accelerate, fast-forwarded with accelerate's
``skip_first_batches`` by the batches already trained in the epoch (what
``Trainer._run_epoch`` calls); against ``FrontierSampler`` over a run
resumed from its coverage checkpoint at the same position (``Run.open``:
the checkpoint, the journal, the ledger, then the stream seeks to the cut),
under the same prepared loader. Each figure
is the wall time from building the loader to holding the first batch, at
1,000 prompts into the epoch and at 90% of it; the dataset is a
``datasets.Dataset`` of 10^6 short prompts (10^4 with ``--quick``).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from frontier_core import FailurePolicy, LedgerConfig
from frontier_core.bench import Row, ratios_of, row

from ..run import Run
from ..trl import (
    FrontierSampler,
    GenerationBlocks,
    Layout,
    OrdinalRows,
    StreamOrder,
    stream_source,
)

NUM_GENERATIONS = 8
PROMPTS = 4  # prompts per generation block: 32 rows per batch
SEED = 0


def _identity(batch: list[Any]) -> list[Any]:
    return batch


def _dataset(rows: int) -> Any:
    import datasets  # type: ignore[import-not-found]

    return datasets.Dataset.from_dict(
        {"prompt": [f"Q{i}: what is {i % 97} + {i % 89}?" for i in range(rows)]}
    )


def _prepare(loader: Any) -> Any:
    from accelerate import Accelerator  # type: ignore[import-not-found]

    return Accelerator(cpu=True).prepare(loader)


def trl_first_batch(dataset: Any, prompts_in: int) -> float:
    """Seconds from building TRL's loader to its first batch after
    ``skip_first_batches`` past ``prompts_in`` prompts of the epoch."""
    from accelerate import skip_first_batches
    from torch.utils.data import DataLoader
    from trl.trainer.utils import RepeatSampler  # type: ignore[import-not-found]

    start = time.perf_counter()
    sampler = RepeatSampler(
        dataset,
        mini_repeat_count=NUM_GENERATIONS,
        batch_size=PROMPTS,
        repeat_count=1,
        shuffle=True,
        seed=SEED,
    )
    loader = _prepare(
        DataLoader(
            dataset, batch_size=PROMPTS * NUM_GENERATIONS, sampler=sampler, collate_fn=_identity
        )
    )
    skipped = skip_first_batches(loader, prompts_in // PROMPTS)
    batch = next(iter(skipped))
    elapsed = time.perf_counter() - start
    assert len(batch) == PROMPTS * NUM_GENERATIONS
    return elapsed


def _open(dataset: Any, root: Path, *, pull: int = PROMPTS) -> Run:
    """The run of a TRL job over ``dataset`` at ``root`` (opened or
    resumed); ``pull`` is the source's batch, which its position does not
    depend on."""
    order = StreamOrder(len(dataset), seed=SEED, shuffle=True)
    config = LedgerConfig(
        stream_len=2 * len(dataset), fingerprint="bench", on_failure=FailurePolicy.DROP
    )
    return Run.open(root, stream_source(order, epochs=2, batch_size=pull), config, reserve=1 << 20)


def _run_at(dataset: Any, root: Path, cut: int) -> Path:
    """A run at ``root`` that trained ordinals ``[0, cut)`` and checkpointed
    there (not timed)."""
    with _open(dataset, root, pull=100_000) as run:
        for first in range(0, cut, 100_000):  # in chunks: the ledger bounds its window
            chunk = [t.ordinal for t in run.take(min(100_000, cut - first))]
            run.landed(chunk)
            run.trained(chunk)
        run.checkpoint(cut // PROMPTS)
    return root


def frontier_first_batch(dataset: Any, root: Path) -> float:
    """Seconds from resuming the run to the first batch of the seeked
    loader."""
    from torch.utils.data import DataLoader

    start = time.perf_counter()
    with _open(dataset, root) as run:
        order = StreamOrder(len(dataset), seed=SEED, shuffle=True)
        layout = Layout(prompts=PROMPTS, num_generations=NUM_GENERATIONS, repeat=1, grad_accum=1)
        blocks = GenerationBlocks(run, order, layout, None)
        loader = _prepare(
            DataLoader(
                OrdinalRows(dataset, order),
                batch_size=PROMPTS * NUM_GENERATIONS,
                sampler=FrontierSampler(blocks),
                collate_fn=_identity,
            )
        )
        batch = next(iter(loader))
        elapsed = time.perf_counter() - start
    assert len(batch) == PROMPTS * NUM_GENERATIONS
    return elapsed


def bench_trl(*, quick: bool, rounds: int) -> list[Row]:
    rows_n = 10_000 if quick else 1_000_000
    dataset = _dataset(rows_n)
    near, deep = 1_000, rows_n * 9 // 10
    # The frontier run resumes in epoch 1 at the same position in the epoch:
    # its cost must not depend on how far the stream went either. Each
    # round's resume deals a block, which its next resume deals again.
    work = Path(tempfile.mkdtemp(prefix="frontier-bench-trl-"))
    roots = {k: _run_at(dataset, work / str(k), rows_n + k) for k in (near, deep)}
    t: dict[str, dict[int, list[float]]] = {
        "trl": {near: [], deep: []},
        "frontier": {near: [], deep: []},
    }
    for _ in range(rounds):
        for k in (near, deep):
            t["trl"][k].append(trl_first_batch(dataset, k))
            t["frontier"][k].append(frontier_first_batch(dataset, roots[k]))
    shutil.rmtree(work)
    out: list[Row] = []
    for who, label in (("trl", "TRL skip_first_batches"), ("frontier", "frontier seek")):
        out.append(row("trl", f"{label}, first batch {near:,} prompts in", t[who][near], "s wall"))
        out.append(
            row(
                "trl",
                f"{label}, first batch {deep:,} prompts in",
                t[who][deep],
                "s wall",
                ratios=ratios_of(t[who][deep], t[who][near]),
                baseline=f"{near:,} prompts in",
                dataset_rows=rows_n,
            )
        )
    ratios = ratios_of(t["trl"][deep], t["frontier"][deep])
    out.append(
        row(
            "trl",
            f"TRL skip against frontier seek, {deep:,} prompts in",
            t["trl"][deep],
            "s wall",
            ratios=ratios,
            baseline="frontier seek at the same position",
            target=">= 1x",
            met=statistics.median(ratios) >= 1.0,
        )
    )
    return out
