"""The ledger's cost per sample against its private group table's cost per
prompt (the prompt-level ledger of before issue 22), measured in the same
rounds (``frontier bench --only samples``).

Both run the same steady workload at a fixed window: stamp a batch,
dispatch it, land it, train it. Group table: each group lands with one
``buffer``, as a prompt-level integration reports it. Ledger: each of the
group's n siblings is sealed with its own ``seal``, one at a time, as a
rollout loop reports samples (the worst case: no batching), and the group
lands with its last seal. The ratio is the ledger's CPU time per sample
over the group table's CPU time per prompt (goals: at most 1.1x at n = 1,
the single-sample fast path; at most 1.5x at n = 8).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from frontier_core import Ledger, LedgerConfig
from frontier_core._groups import GroupTable

from ._harness import Row, ratios_of, row

BATCH = 32


def _prompts(total: int, window: int) -> float:
    ledger = GroupTable.start(LedgerConfig())
    ledger = ledger.stamp(window).ledger
    ledger = ledger.dispatch(range(window)).ledger
    oldest = 0
    start = time.process_time()
    for _ in range(total // BATCH):
        step = ledger.stamp(BATCH)
        ledger = step.ledger.dispatch(step.effect.kept).ledger
        for o in range(oldest, oldest + BATCH):
            ledger = ledger.buffer([o]).ledger
        ledger = ledger.train(range(oldest, oldest + BATCH)).ledger
        oldest += BATCH
    return (time.process_time() - start) / total


def _samples(total: int, window: int, n: int) -> float:
    ledger = Ledger.start(LedgerConfig(samples=n))
    ledger = ledger.stamp(window).ledger
    applied = ledger.dispatch(range(window))
    ledger = applied.ledger
    leases = list(applied.effect.leases)
    oldest = 0
    start = time.process_time()
    for _ in range(total // BATCH):
        step = ledger.stamp(BATCH)
        applied = step.ledger.dispatch(step.effect.kept)
        ledger = applied.ledger
        leases.extend(applied.effect.leases)
        # Seal the oldest BATCH groups' samples, one by one.
        for lease in leases[: BATCH * n]:
            ledger = ledger.seal([lease]).ledger
        del leases[: BATCH * n]
        ledger = ledger.train(range(oldest, oldest + BATCH)).ledger
        oldest += BATCH
    return (time.process_time() - start) / (total * n)


def bench_samples(*, quick: bool, rounds: int) -> list[Row]:
    total = 3_200 if quick else 32_000
    window = 256
    rows: list[Row] = []
    for n in (1, 8) if quick else (1, 8, 16):
        prompt_costs: list[float] = []
        sample_costs: list[float] = []
        for _ in range(rounds):
            _prompts(BATCH * 2, window)  # warm up
            prompt_costs.append(_prompts(total, window))
            sample_costs.append(_samples(total, window, n))
        ratio = ratios_of(sample_costs, prompt_costs)
        extra: dict[str, Any] = {}
        if n == 1:
            extra = {
                "target": "cost per prompt <= 1.1x the group table's",
                "met": statistics.median(ratio) <= 1.1,
            }
        if n == 8:
            extra = {
                "target": "cost per sample <= 1.5x cost per prompt",
                "met": statistics.median(ratio) <= 1.5,
            }
        rows.append(
            row(
                "samples",
                f"us per sample, n={n}, {window} groups in flight, one seal per sample",
                [c * 1e6 for c in sample_costs],
                "us cpu",
                ratios=ratio,
                baseline="group table us per prompt (stamp, dispatch, buffer, train), same round",
                prompt_us=[c * 1e6 for c in prompt_costs],
                **extra,
            )
        )
    return rows
