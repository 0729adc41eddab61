"""A sweep of randomized A/B runs, its worst cases, and the coverage plot.

Plain functions behind ``frontier simulate --runs N`` and ``--plot``; the
command line (``frontier_core._cli``) only parses options and prints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import attrs

from .._errors import FrontierError
from ._pipeline import SimulationError
from ._report import ABResult, format_ab, random_workload, run_ab
from ._workload import Workload


@attrs.frozen
class SweepResult:
    """``runs`` randomized configurations from seed ``first_seed`` on.

    ``failures`` are the seeds whose frontier mode lost or duplicated a
    prompt, or whose run raised (``errors`` says how); the worst runs are
    ``None`` only when every run raised.
    """

    runs: int
    first_seed: int
    failures: tuple[int, ...]
    errors: tuple[str, ...]
    worst_frontier: ABResult | None
    worst_legacy: ABResult | None
    seconds: float

    @property
    def clean(self) -> bool:
        return not self.failures and self.worst_frontier is not None

    def to_json(self) -> dict[str, Any]:
        """The object of ``frontier simulate --runs N --json`` (needs a run
        that did not raise)."""
        assert self.worst_frontier is not None and self.worst_legacy is not None
        return {
            "runs": self.runs,
            "seeds": [self.first_seed, self.first_seed + self.runs - 1],
            "frontier_failures": list(self.failures),
            "worst_frontier": {
                "seed": self.worst_frontier.workload.seed,
                **self.worst_frontier.summary(),
            },
            "worst_legacy": {
                "seed": self.worst_legacy.workload.seed,
                **self.worst_legacy.summary(),
            },
            "seconds": round(self.seconds, 2),
        }


def _frontier_badness(r: ABResult) -> tuple[int, int]:
    # Worst: most lost or duplicated, then the hardest run (most kills).
    s = r.frontier.summary()
    return int(s["skipped"]) + int(s["duplicated"]), int(s["kills"])


def _legacy_share(r: ABResult) -> float:
    return float(r.legacy.summary()["skipped_pct"])


def sweep(base: Workload, runs: int, *, on_run: Callable[[], None] | None = None) -> SweepResult:
    """Run ``runs`` randomized A/Bs (seeds ``base.seed`` onwards, each a
    ``random_workload`` of ``base``) and keep the worst of each mode.

    A run whose ledger raises counts as a failure of that seed, not as a
    crashed sweep. ``on_run`` is called after each run (progress bars)."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    worst_frontier: ABResult | None = None
    worst_legacy: ABResult | None = None
    failures: list[int] = []
    errors: list[str] = []
    started = time.monotonic()
    for i in range(runs):
        workload = random_workload(base.seed + i, base)
        try:
            result = run_ab(workload)
        except (SimulationError, FrontierError) as exc:
            failures.append(workload.seed)
            errors.append(f"seed {workload.seed}: {type(exc).__name__}: {exc}")
        else:
            if _frontier_badness(result)[0]:
                failures.append(workload.seed)
            if worst_frontier is None or _frontier_badness(result) > _frontier_badness(
                worst_frontier
            ):
                worst_frontier = result
            if worst_legacy is None or _legacy_share(result) > _legacy_share(worst_legacy):
                worst_legacy = result
        if on_run is not None:
            on_run()
    return SweepResult(
        runs=runs,
        first_seed=base.seed,
        failures=tuple(failures),
        errors=tuple(errors),
        worst_frontier=worst_frontier,
        worst_legacy=worst_legacy,
        seconds=time.monotonic() - started,
    )


def format_sweep(result: SweepResult) -> str:
    """The text report of a sweep (needs a run that did not raise)."""
    assert result.worst_frontier is not None and result.worst_legacy is not None
    last = result.first_seed + result.runs - 1
    return "\n".join(
        [
            f"{result.runs} randomized runs (seeds {result.first_seed}..{last}) "
            f"in {result.seconds:.1f}s",
            f"frontier runs that skipped or duplicated: {len(result.failures)} "
            f"{list(result.failures[:20])}",
            "",
            "worst frontier run:",
            format_ab(result.worst_frontier),
            "",
            "worst legacy run:",
            format_ab(result.worst_legacy),
        ]
    )


def plot_coverage(result: ABResult, path: str | os.PathLike[str]) -> None:
    """Draw the times each ordinal was trained, per mode, to ``path``.

    Raises ``ImportError`` without matplotlib (the ``plot`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 5), sharex=True)
    for ax, mode in zip(axes, (result.legacy, result.frontier), strict=True):
        xs = range(len(mode.coverage))
        ax.bar(xs, mode.coverage, width=1.0, color="tab:blue")
        ax.axhline(1, color="tab:green", linewidth=0.8)
        s = mode.summary()
        ax.set_title(
            f"{mode.mode}: {s['skipped']} skipped, {s['duplicated']} duplicated, "
            f"{s['dropped']} dropped"
        )
        ax.set_ylabel("times trained")
        ax.set_ylim(-1.2, max(2, *mode.coverage) + 0.2)
    axes[-1].set_xlabel("stream ordinal (-1: dropped)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
