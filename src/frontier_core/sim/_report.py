"""The A/B: both modes on one workload and one kill schedule, audited.

A mode's coverage numbers come from its training log, read back and folded
by the same audit that ``frontier audit`` runs, not from the ledger: the
simulator checks the ledger rather than echoing it.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from .._audit import AuditReport, audit_lineage, coverage_counts
from .._events import FailurePolicy
from .._trainlog import fold_lineage, read_train_log
from ._frontier import FrontierBackend
from ._legacy import LegacyBackend
from ._pipeline import Backend, Stats, simulate
from ._workload import Kill, Workload

MODES: dict[str, Callable[[Workload], Backend]] = {
    "legacy": LegacyBackend,
    "frontier": FrontierBackend,
}


@attrs.frozen
class ModeResult:
    """One mode's run: its audit, its run statistics and its length bias."""

    mode: str
    audit: AuditReport
    stats: Stats
    #: Mean typical rollout length (tokens) of the skipped prompts, and of
    #: every prompt the source reached.
    skipped_mean_tokens: float
    reached_mean_tokens: float
    #: Per ordinal: times trained in the surviving lineage, -1 if dropped.
    coverage: tuple[int, ...]
    #: The per-sample audit (sample ``s`` of ordinal ``o`` is ``o * n + s``)
    #: when the run kept a sample log.
    samples: AuditReport | None = None

    @property
    def lossless(self) -> bool:
        prompts = self.audit.skipped or self.audit.duplicated or self.audit.out_of_range
        samples = self.samples is not None and bool(
            self.samples.skipped or self.samples.duplicated or self.samples.out_of_range
        )
        return not (prompts or samples)

    def summary(self) -> dict[str, Any]:
        """The per-mode JSON object of ``frontier simulate --json``."""
        a, s = self.audit, self.stats
        return {
            "reached": s.reached,
            "trained_once": a.trained_once,
            "skipped": len(a.skipped),
            "duplicated": len(a.duplicated),
            "dropped": len(a.dropped),
            "regenerated": s.regenerated,
            "skipped_pct": round(100.0 * len(a.skipped) / s.reached, 2) if s.reached else 0.0,
            "skipped_mean_tokens": round(self.skipped_mean_tokens, 1),
            "reached_mean_tokens": round(self.reached_mean_tokens, 1),
            "steps": a.steps,
            "steps_executed": s.steps_executed,
            "kills": s.kills,
            "kills_in_flight": s.kills_in_flight,
            "kill_kinds": dict(sorted(s.kill_kinds.items())),
            "resumes": s.resumes,
            "checkpoints": s.checkpoints,
            "torn_checkpoints": s.torn_checkpoints,
            "failures": s.failures,
            "evicted": s.evicted,
            "evicted_on_restore": s.evicted_on_restore,
            "generations": s.generations,
            "sim_time": round(s.sim_time, 3),
            "skipped_ordinals": list(a.skipped),
            "duplicated_ordinals": list(a.duplicated),
        }


@attrs.frozen
class ABResult:
    workload: Workload
    kills: tuple[Kill, ...]
    legacy: ModeResult
    frontier: ModeResult

    def summary(self) -> dict[str, Any]:
        return {"legacy": self.legacy.summary(), "frontier": self.frontier.summary()}


def run_mode(
    workload: Workload,
    mode: str,
    kills: tuple[Kill, ...],
    log_path: str | os.PathLike[str],
    *,
    factory: Callable[[Workload], Backend] | None = None,
    sample_log_path: str | os.PathLike[str] | None = None,
) -> ModeResult:
    """Simulate ``mode`` (``MODES[mode]`` unless ``factory`` is given) and
    audit its log, and its sample log if ``sample_log_path`` is given (both
    truncated first)."""
    Path(log_path).write_bytes(b"")
    if sample_log_path is not None:
        Path(sample_log_path).write_bytes(b"")
    stats = simulate(
        workload, factory or MODES[mode], kills, log_path, sample_log_path=sample_log_path
    )
    lineage = fold_lineage(read_train_log(log_path), path=str(log_path))
    n = workload.stream_len
    report = audit_lineage(lineage, n)
    trained, dropped = coverage_counts(lineage)
    coverage = tuple(-1 if dropped[o] and not trained[o] else trained[o] for o in range(n))
    samples = None
    if sample_log_path is not None:
        sample_lineage = fold_lineage(read_train_log(sample_log_path), path=str(sample_log_path))
        samples = audit_lineage(sample_lineage, n * workload.num_generations)
    return ModeResult(
        mode=mode,
        audit=report,
        stats=stats,
        skipped_mean_tokens=workload.mean_tokens(report.skipped),
        reached_mean_tokens=workload.mean_tokens(range(stats.reached)),
        coverage=coverage,
        samples=samples,
    )


def run_ab(workload: Workload, log_base: str | os.PathLike[str] | None = None) -> ABResult:
    """Both modes on ``workload``, under one kill schedule.

    The kill times are drawn over the middle of an uninterrupted frontier
    run of the same workload. Logs go to ``log_base`` + ``.legacy`` /
    ``.frontier`` (a temporary directory when ``None``)."""
    with tempfile.TemporaryDirectory(prefix="frontier-sim-") as tmp:
        kills = kill_schedule(workload, Path(tmp) / "calm.jsonl")
        base = Path(tmp) / "train" if log_base is None else Path(log_base)
        results = {
            mode: run_mode(workload, mode, kills, f"{base}.{mode}")
            for mode in ("legacy", "frontier")
        }
    return ABResult(workload, kills, results["legacy"], results["frontier"])


def kill_schedule(workload: Workload, log_path: str | os.PathLike[str]) -> tuple[Kill, ...]:
    """The kill schedule of ``workload``, drawn over the middle of an
    uninterrupted frontier run of it (logged to ``log_path``): every mode
    compared on the workload runs under these kills."""
    calm = simulate(workload, FrontierBackend, (), log_path)
    warmup = calm.first_checkpoint if calm.first_checkpoint is not None else calm.sim_time
    return workload.kill_schedule(calm.sim_time, warmup)


def random_workload(seed: int, base: Workload) -> Workload:
    """A randomized configuration for sweeps: every knob the pipeline has,
    drawn from ``seed``, at sizes that keep one run well under a second."""
    rng = random.Random(f"sweep:{seed}")
    p = rng.choice([1, 2, 3, 4, 5, 8, 12, 16, 32])
    max_age = rng.randint(1, 4)
    return attrs.evolve(
        base,
        seed=seed,
        dataset_len=rng.randint(max(8, p), 320),
        epochs=rng.choice([1, 1, 2, 3]),
        shuffle=rng.random() < 0.5,
        prompts_per_step=p,
        batch_size=max(1, rng.choice([p, p, p // 2, p * 2, p + 3, max(1, p - 3), 7])),
        num_generations=rng.choice([1, 4, 8, 16]),
        workers=rng.choice([1, 3, 8, 32, 256]),
        max_age=max_age,
        # Sometimes more targets than the age bound allows: their groups go
        # stale and are evicted, which exercises the eviction path.
        targets=max_age + rng.choice([0, 0, 0, 1, 2, 3]),
        checkpoint_every=rng.choice([1, 1, 2, 3, 5]),
        failure_rate=rng.choice([0.0, 0.0, 0.02, 0.1, 0.3]),
        on_failure=rng.choice([FailurePolicy.DROP, FailurePolicy.RETRY]),
        max_failures=rng.randint(1, 4),
        load_replay_buffer=rng.random() < 0.6,
        kills=rng.randint(0, 6),
        torn_kills=rng.randint(0, 2),
        after_resume_kills=rng.randint(0, 2),
        double_kills=rng.randint(0, 2),
        length_sigma=rng.choice([0.5, 1.0, 1.5]),
        checkpoint_time=rng.choice([0.0, 0.4, 2.0]),
    )


_ROWS = (
    ("reached", "prompts reached"),
    ("trained_once", "trained exactly once"),
    ("skipped", "skipped (lost)"),
    ("duplicated", "duplicated"),
    ("dropped", "dropped (policy)"),
    ("regenerated", "regenerated after resume"),
)


def format_workload(w: Workload) -> str:
    """The workload's line in the reports."""
    return (
        f"workload: seed {w.seed}, {w.dataset_len} prompts x {w.epochs} epoch(s)"
        f"{' shuffled' if w.shuffle else ''}, {w.prompts_per_step}/step, batches of "
        f"{w.batch_size}, {w.num_generations} generations, {w.workers} workers, "
        f"max age {w.max_age}, checkpoint every {w.checkpoint_every}, failures "
        f"{w.failure_rate:g} ({w.on_failure.value}), buffer "
        f"{'restored' if w.load_replay_buffer else 'not restored'}"
        + (
            f", episodes of {w.turns} turns (tools answer in {w.tool_latency:g} step(s))"
            if w.turns > 1
            else ""
        )
    )


def format_ab(result: ABResult) -> str:
    """The A/B table, one column per mode."""
    legacy, frontier = result.legacy.summary(), result.frontier.summary()
    kinds = ", ".join(f"{k.kind.value}@{k.time:.1f}" for k in result.kills) or "none"
    lines = [
        format_workload(result.workload),
        f"kills: {kinds}",
        "",
        f"{'':28}{'legacy':>12}{'frontier':>12}",
    ]
    for key, label in _ROWS:
        lines.append(f"{label:28}{legacy[key]:>12}{frontier[key]:>12}")
    lines.append(
        f"{'skipped share of reached':28}{legacy['skipped_pct']:>11.1f}%"
        f"{frontier['skipped_pct']:>11.1f}%"
    )
    for key, label in (
        ("skipped_mean_tokens", "mean length of skipped"),
        ("reached_mean_tokens", "mean length of all"),
    ):
        lines.append(f"{label:28}{legacy[key]:>12.0f}{frontier[key]:>12.0f}")
    for key, label in (
        ("kills", "kills"),
        ("kills_in_flight", "  with rollouts in flight"),
        ("torn_checkpoints", "torn checkpoint writes"),
        ("steps_executed", "steps executed"),
    ):
        lines.append(f"{label:28}{legacy[key]:>12}{frontier[key]:>12}")
    verdict = "OK" if result.frontier.lossless else "FAILED"
    lines.append("")
    lines.append(
        f"frontier: {frontier['skipped']} skipped, {frontier['duplicated']} duplicated: {verdict}"
    )
    return "\n".join(lines)
