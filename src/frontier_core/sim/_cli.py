"""``frontier simulate``: the legacy/frontier A/B under kills, from the shell.

With no options it reproduces the seed's validation: 512 prompts, 32 per
step, a checkpoint every step, several kills mid-generation (plus a torn
checkpoint write, a kill right after a resume and a double kill). Exit
status 1 when the frontier mode skipped or duplicated anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import attrs

from .._errors import FrontierError
from .._events import FailurePolicy
from ._pipeline import SimulationError
from ._report import ABResult, format_ab, random_workload, run_ab
from ._workload import Workload

_DEFAULT = Workload()


def _int_at_least(lo: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {value}")
        return value

    return parse


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULT
    pos, nonneg = _int_at_least(1), _int_at_least(0)
    parser.add_argument("--seed", type=nonneg, default=d.seed, help="default %(default)s")
    parser.add_argument(
        "--prompts", type=pos, default=d.dataset_len, help="dataset length (%(default)s)"
    )
    parser.add_argument("--epochs", type=pos, default=d.epochs, help="default %(default)s")
    parser.add_argument("--shuffle", action="store_true", help="a new order every epoch")
    parser.add_argument(
        "--step-prompts", type=pos, default=d.prompts_per_step, help="prompts per training step"
    )
    parser.add_argument(
        "--batch-size", type=pos, default=d.batch_size, help="dataloader batch (%(default)s)"
    )
    parser.add_argument(
        "--generations", type=pos, default=d.num_generations, help="rollouts per prompt group"
    )
    parser.add_argument("--workers", type=pos, default=d.workers, help="concurrent groups")
    parser.add_argument(
        "--max-age",
        type=pos,
        default=d.max_age,
        help="max_trajectory_age_steps: targets in flight and the staleness bound",
    )
    parser.add_argument(
        "--targets",
        type=pos,
        default=None,
        help="targets generated ahead of the trainer (default: --max-age); more than "
        "max-age + 1 makes the far ones stale, which exercises eviction",
    )
    parser.add_argument(
        "--checkpoint-every", type=pos, default=d.checkpoint_every, help="steps per checkpoint"
    )
    parser.add_argument(
        "--failure-rate", type=_rate, default=d.failure_rate, help="per group generation"
    )
    parser.add_argument(
        "--on-failure",
        choices=[p.value for p in FailurePolicy],
        default=d.on_failure.value,
        help="what a tolerated failure or a stale eviction does",
    )
    parser.add_argument("--max-attempts", type=pos, default=d.max_attempts)
    parser.add_argument(
        "--no-buffer-restore",
        action="store_true",
        help="resume without the saved replay buffer (load_replay_buffer=false)",
    )
    parser.add_argument("--kills", type=nonneg, default=d.kills, help="kills mid-generation")
    parser.add_argument(
        "--torn-kills", type=nonneg, default=d.torn_kills, help="kills between checkpoint parts"
    )
    parser.add_argument(
        "--after-resume-kills",
        type=nonneg,
        default=d.after_resume_kills,
        help="kills followed by another right after the resume",
    )
    parser.add_argument(
        "--double-kills",
        type=nonneg,
        default=d.double_kills,
        help="kills followed by another before the next checkpoint",
    )
    parser.add_argument(
        "--length-sigma",
        type=float,
        default=d.length_sigma,
        help="spread of the lognormal rollout lengths (heavier tail when larger)",
    )
    parser.add_argument(
        "--runs",
        type=pos,
        default=1,
        help="sweep N seeds from --seed with randomized configurations; report the worst",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--log", metavar="PATH", help="write the training logs to PATH.legacy and PATH.frontier"
    )
    parser.add_argument(
        "--plot", metavar="FILE.png", help="draw coverage per ordinal (needs matplotlib)"
    )


def _workload(args: argparse.Namespace) -> Workload:
    return attrs.evolve(
        _DEFAULT,
        seed=args.seed,
        dataset_len=args.prompts,
        epochs=args.epochs,
        shuffle=args.shuffle,
        prompts_per_step=args.step_prompts,
        batch_size=args.batch_size,
        num_generations=args.generations,
        workers=args.workers,
        max_age=args.max_age,
        targets=args.targets,
        checkpoint_every=args.checkpoint_every,
        failure_rate=args.failure_rate,
        on_failure=FailurePolicy(args.on_failure),
        max_attempts=args.max_attempts,
        load_replay_buffer=not args.no_buffer_restore,
        kills=args.kills,
        torn_kills=args.torn_kills,
        after_resume_kills=args.after_resume_kills,
        double_kills=args.double_kills,
        length_sigma=args.length_sigma,
    )


def _progress(total: int, quiet: bool) -> Any:
    from tqdm import tqdm  # type: ignore[import-untyped]  # lazily: only the CLI draws bars

    return tqdm(
        total=total,
        desc="simulate",
        unit="run",
        delay=1.5,
        file=sys.stderr,
        disable=quiet or not sys.stderr.isatty(),
        leave=False,
    )


def _plot(result: ABResult, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "frontier simulate: --plot needs matplotlib (pip install 'frontier-core[plot]')"
        ) from None
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


def _sweep(args: argparse.Namespace, base: Workload) -> int:
    worst_frontier: ABResult | None = None
    worst_legacy: ABResult | None = None
    failures: list[int] = []
    errors: list[str] = []
    started = time.monotonic()

    def frontier_bad(r: ABResult) -> tuple[int, int]:
        # Worst: most lost or duplicated, then the hardest run (most kills).
        s = r.frontier.summary()
        return int(s["skipped"]) + int(s["duplicated"]), int(s["kills"])

    def legacy_share(r: ABResult) -> float:
        return float(r.legacy.summary()["skipped_pct"])

    with _progress(args.runs, args.json) as bar:
        for i in range(args.runs):
            workload = random_workload(args.seed + i, base)
            try:
                result = run_ab(workload)
            except (SimulationError, FrontierError) as exc:
                # A ledger that raises is a failed run, not a crashed sweep.
                failures.append(workload.seed)
                errors.append(f"seed {workload.seed}: {type(exc).__name__}: {exc}")
                bar.update(1)
                continue
            if frontier_bad(result)[0]:
                failures.append(workload.seed)
            if worst_frontier is None or frontier_bad(result) > frontier_bad(worst_frontier):
                worst_frontier = result
            if worst_legacy is None or legacy_share(result) > legacy_share(worst_legacy):
                worst_legacy = result
            bar.update(1)
    elapsed = time.monotonic() - started
    for line in errors[:20]:
        print(f"frontier simulate: {line}", file=sys.stderr)
    if worst_frontier is None or worst_legacy is None:
        print(f"frontier simulate: all {args.runs} runs raised", file=sys.stderr)
        return 1
    if args.json:
        print(
            json.dumps(
                {
                    "runs": args.runs,
                    "seeds": [args.seed, args.seed + args.runs - 1],
                    "frontier_failures": failures,
                    "worst_frontier": {
                        "seed": worst_frontier.workload.seed,
                        **worst_frontier.summary(),
                    },
                    "worst_legacy": {"seed": worst_legacy.workload.seed, **worst_legacy.summary()},
                    "seconds": round(elapsed, 2),
                }
            )
        )
    else:
        print(
            f"{args.runs} randomized runs (seeds {args.seed}..{args.seed + args.runs - 1}) "
            f"in {elapsed:.1f}s"
        )
        print(f"frontier runs that skipped or duplicated: {len(failures)} {failures[:20]}")
        print("\nworst frontier run:")
        print(format_ab(worst_frontier))
        print("\nworst legacy run:")
        print(format_ab(worst_legacy))
    return 1 if failures else 0


def run(args: argparse.Namespace) -> int:
    try:
        base = _workload(args)
    except ValueError as exc:
        print(f"frontier simulate: {exc}", file=sys.stderr)
        return 2
    try:
        if args.runs > 1:
            return _sweep(args, base)
        with _progress(1, args.json) as bar:
            result = run_ab(base, args.log)
            bar.update(1)
    except (SimulationError, FrontierError) as exc:
        # The simulator drives the real ledger: an error here is a failure
        # of the frontier mode (or of the simulator), never a clean run.
        print(f"frontier simulate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.plot:
        _plot(result, args.plot)
    if args.json:
        print(json.dumps(result.summary()))
    else:
        print(format_ab(result))
        if args.log:
            print(f"\ntraining logs: {args.log}.legacy, {args.log}.frontier")
    return 0 if result.frontier.lossless else 1
