"""``frontier bench``'s ``run`` section: what a termination notice costs.

A ``Run`` with hundreds of samples in flight, each a few thousand tokens
long with a tail the journal does not hold yet (reported by ``progress``
since the last due record), is drained (``Run.drain``: journal every
running sample's latest progress, sync, checkpoint). The baseline, measured
in the same round on an identical run, is a plain ``checkpoint`` (mark,
sync, publish, compact) without the drain's progress records. The goal is
the issue's: a drain of 512 samples in flight well inside a 30 s notice
(here: under 10% of it).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from frontier_core import LedgerConfig
from frontier_core.bench import Row, ratios_of, row
from frontier_core.journal import TokenPayload

from .._sources import SequenceSource
from ..run import Run

SECTION = "run"
SIBLINGS = 8
#: Tokens per sample, and the tail of each the journal does not hold yet.
TOKENS, TAIL = 2048, 200
EVERY = 256
NOTICE = 30.0


def _in_flight(root: Path, samples: int) -> tuple[Run, dict[object, TokenPayload]]:
    """A run with ``samples`` siblings generating, each reported with a
    tail the journal lacks."""
    groups = samples // SIBLINGS
    config = LedgerConfig(stream_len=groups, samples=SIBLINGS, fingerprint="bench-run")
    run = Run.open(root, SequenceSource(list(range(groups))), config, progress_every=EVERY)
    leases = [lease for t in run.take(groups) for lease in t.leases]
    ids = list(range(TOKENS))
    journaled = TokenPayload.of(ids[: TOKENS - TAIL], [-0.5] * (TOKENS - TAIL), 0)
    whole = TokenPayload.of(ids, [-0.5] * TOKENS, 0)
    for lease in leases:
        run.progress(lease, journaled)
    run.sync()
    for lease in leases:
        run.progress(lease, whole)  # not due: only in memory
    return run, {lease: whole for lease in leases}


def bench_run(*, quick: bool, rounds: int) -> list[Row]:
    samples = 64 if quick else 512
    drains: list[float] = []
    checkpoints: list[float] = []
    records = 0
    for r in range(rounds):
        for kind in ("drain", "checkpoint") if r % 2 == 0 else ("checkpoint", "drain"):
            with tempfile.TemporaryDirectory(prefix="frontier-bench-run-") as tmp:
                run, _ = _in_flight(Path(tmp), samples)
                try:
                    start = time.perf_counter()
                    if kind == "drain":
                        run.notice(NOTICE)
                        records = run.drain(step=1).progress_records
                        drains.append(time.perf_counter() - start)
                    else:
                        run.checkpoint(1)
                        checkpoints.append(time.perf_counter() - start)
                finally:
                    run.close()
    return [
        row(
            SECTION,
            f"checkpoint, {samples} samples in flight",
            checkpoints,
            "s",
        ),
        row(
            SECTION,
            f"drain, {samples} samples in flight ({TOKENS:,} tokens, {TAIL} unjournaled each)",
            drains,
            "s",
            ratios=ratios_of(drains, checkpoints),
            baseline="a checkpoint of the same run",
            target=f"< {NOTICE / 10:g} s (10% of a {NOTICE:g} s notice)",
            met=max(drains) < NOTICE / 10,
            progress_records=records,
        ),
    ]
