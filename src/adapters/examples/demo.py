"""``frontier demo``: async GRPO on a CPU engine, SIGKILLed and resumed, A/B.

Runs the training loop of ``_grpo_demo`` in a subprocess, once with the
legacy live-cursor checkpoint and once with ``frontier_core``, kills each at
the same seeded moments (``d`` committed steps after a restart, then a
random delay, so kills land mid-generation, mid-step or mid-write), restarts
it until its stream is done, and audits each training-data log with
``frontier audit``'s own function. Prints the two audits side by side and the
reward curve of each surviving lineage. Exit status: 0 when frontier_core
trained every prompt exactly once or dropped it on record, 1 otherwise, 2
when a worker crashed by itself.

This module imports no torch: the workers do.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from frontier_core._audit import AuditReport, audit_log

WORKER = "frontier_adapters.examples.grpo_worker"
MODES = ("legacy", "frontier")
LOG_NAME = "train_log.jsonl"
SUMMARY_NAME = "summary.json"
SPARK = "▁▂▃▄▅▆▇█"


@attrs.frozen
class Kill:
    """Kill a life ``steps`` committed steps after it reported ready, plus
    ``delay`` seconds."""

    steps: int
    delay: float


def kill_schedule(seed: int, kills: int, total_steps: int) -> tuple[Kill, ...]:
    """``kills`` kill points spread over a run of ``total_steps`` steps."""
    rng = random.Random(f"demo-kills:{seed}")
    span = max(1, total_steps // (kills + 1))
    return tuple(Kill(rng.randint(1, span), round(rng.uniform(0.0, 0.12), 3)) for _ in range(kills))


@attrs.frozen
class ModeResult:
    mode: str
    kills: int
    lives: int
    seconds: float
    report: AuditReport
    rewards: tuple[float, ...]
    counters: dict[str, int]


class WorkerCrashed(RuntimeError):
    """A worker exited by itself with an error."""


def run_mode(
    mode: str,
    workdir: Path,
    schedule: Sequence[Kill],
    worker_args: Sequence[str],
    stream_len: int,
    *,
    on_step: Callable[[int], None] | None = None,
    on_kill: Callable[[int], None] | None = None,
    timeout: float = 900.0,
) -> ModeResult:
    """Run ``mode`` to the end of its stream, killing it per ``schedule``."""
    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", WORKER, "--workdir", str(workdir), "--mode", mode, *worker_args]
    kills = lives = 0
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    while True:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{mode}: not done after {timeout} s ({kills} kills)")
        lives += 1
        plan = schedule[kills] if kills < len(schedule) else None
        with open(workdir / "stderr.log", "ab") as errf:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=errf, text=True, env=env, bufsize=1
            )
            assert proc.stdout is not None
            seen = 0
            done = hit = False
            for line in proc.stdout:
                if line.startswith("step "):
                    seen += 1
                    if on_step is not None:
                        on_step(int(line.split()[1]))
                elif line.startswith("done"):
                    done = True
                if plan is not None and seen >= plan.steps and not done:
                    time.sleep(plan.delay)
                    hit = True
                    break
            if hit and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc.stdout.close()
                kills += 1
                if on_kill is not None:
                    on_kill(kills)
                continue
            rest = proc.stdout.read()
            proc.wait()
            proc.stdout.close()
        done = done or "done" in rest
        if proc.returncode != 0 or not done:
            tail = (workdir / "stderr.log").read_text()[-3000:]
            raise WorkerCrashed(f"{mode} worker exited with {proc.returncode}:\n{tail}")
        break
    summary = json.loads((workdir / SUMMARY_NAME).read_text())
    report = audit_log(workdir / LOG_NAME, stream_len)
    return ModeResult(
        mode=mode,
        kills=kills,
        lives=lives,
        seconds=round(time.monotonic() - t0, 1),
        report=report,
        rewards=tuple(float(r) for r in summary["rewards"]),
        counters={str(k): int(v) for k, v in summary["counters"].items()},
    )


def buckets(values: Sequence[float], n: int) -> list[float]:
    """``values`` averaged over ``n`` consecutive buckets (fewer if short)."""
    if not values:
        return []
    n = min(n, len(values))
    out = []
    for i in range(n):
        lo, hi = i * len(values) // n, (i + 1) * len(values) // n
        chunk = values[lo:hi]
        out.append(sum(chunk) / len(chunk))
    return out


def sparkline(values: Sequence[float], top: float = 1.0) -> str:
    """One block character per value, ``top`` the full block."""
    top = top if top > 0 else 1.0
    return "".join(SPARK[min(len(SPARK) - 1, max(0, int(v / top * len(SPARK))))] for v in values)


def format_results(results: dict[str, ModeResult], stream_len: int) -> str:
    a, b = results["legacy"], results["frontier"]
    ra, rb = a.report, b.report

    def row(label: str, x: object, y: object) -> str:
        return f"  {label:<30}{x!s:>16}{y!s:>16}"

    lines = [
        f"Audit of the training-data logs (stream of {stream_len} prompts):",
        row("", "legacy cursor", "frontier_core"),
        row("SIGKILLs", a.kills, b.kills),
        row("process lives", a.lives, b.lives),
        row("training steps kept", ra.steps, rb.steps),
        row("executions lost to kills", ra.discarded_steps, rb.discarded_steps),
        row("prompts trained exactly once", ra.trained_once, rb.trained_once),
        row("skipped (silently lost)", len(ra.skipped), len(rb.skipped)),
        row("duplicated", len(ra.duplicated), len(rb.duplicated)),
        row("dropped on record", len(ra.dropped), len(rb.dropped)),
        row("failures (timeouts)", _fails(a), _fails(b)),
        row("stale evictions", a.counters.get("evicted", 0), b.counters.get("evicted", 0)),
        row(
            "resumes without the buffer",
            a.counters.get("buffer_skipped", 0),
            b.counters.get("buffer_skipped", 0),
        ),
        row("wall time (s)", a.seconds, b.seconds),
        "",
    ]
    if ra.skipped:
        shown = ", ".join(str(o) for o in ra.skipped[:12])
        more = f", ... (+{len(ra.skipped) - 12})" if len(ra.skipped) > 12 else ""
        lines.append(f"  legacy lost ordinals: {shown}{more}")
    verdict = "OK: nothing lost, nothing duplicated" if rb.clean else "FAILED"
    lines.append(f"  frontier_core: {verdict}")
    lines.append("")
    lines.append("Mean reward per training step (surviving lineage; reward 1 = the completion")
    lines.append("starts with the prompt's first token, 1/16 by chance; the full block is the")
    lines.append("highest bucket, then the means of eight consecutive eighths of the run):")
    curves = {r.mode: buckets(r.rewards, 32) for r in (a, b)}
    top = max((v for c in curves.values() for v in c), default=1.0)
    for r in (a, b):
        k = buckets(r.rewards, 8)
        lines.append(
            f"  {r.mode:<9}{sparkline(curves[r.mode], top):<32}  "
            + " ".join(f"{v:.2f}" for v in k)
            + f"  ({len(r.rewards)} steps)"
        )
    return "\n".join(lines)


def _fails(r: ModeResult) -> str:
    return f"{r.counters.get('failed', 0)} ({r.counters.get('timeouts', 0)})"


def plot(results: dict[str, ModeResult], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for r in results.values():
        window = max(1, len(r.rewards) // 16)
        smooth = [
            sum(r.rewards[max(0, i - window + 1) : i + 1])
            / len(r.rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(r.rewards))
        ]
        ax.plot(range(1, len(smooth) + 1), smooth, label=f"{r.mode} ({r.kills} kills)")
    ax.set_xlabel("training step (surviving lineage)")
    ax.set_ylabel("mean reward (moving average)")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("async GRPO on a CPU engine, SIGKILLed and resumed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kills", type=int, default=None, help="SIGKILLs per mode (default 6)")
    parser.add_argument("--seed", type=int, default=0, help="workload and kill schedule seed")
    parser.add_argument("--prompts", type=int, default=None, help="stream length (default 1536)")
    parser.add_argument(
        "--quick", action="store_true", help="a small run: 192 prompts, 5 kills (~30 s)"
    )
    parser.add_argument("--plot", metavar="FILE.png", help="draw the reward curves (matplotlib)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--workdir", help="keep the runs here (default: a temporary directory)")
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    kills = args.kills if args.kills is not None else (5 if args.quick else 6)
    prompts = args.prompts if args.prompts is not None else (192 if args.quick else 1536)
    if kills < 0 or prompts < 1:
        print("frontier demo: --kills must be >= 0 and --prompts >= 1", file=sys.stderr)
        return 2
    groups_per_step = 8
    total_steps = math.ceil(prompts / groups_per_step)
    schedule = kill_schedule(args.seed, kills, total_steps)
    worker_args = ["--prompts", str(prompts), "--seed", str(args.seed)]
    modes = MODES if args.mode == "both" else (args.mode,)
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="frontier-demo-"))
    if args.workdir:
        for mode in modes:
            shutil.rmtree(root / mode, ignore_errors=True)
    from tqdm import tqdm  # type: ignore[import-untyped]

    results: dict[str, ModeResult] = {}
    try:
        for mode in modes:
            bar = tqdm(
                total=total_steps,
                desc=f"{mode:<8}",
                unit="step",
                file=sys.stderr,
                disable=args.json and not sys.stderr.isatty(),
                dynamic_ncols=True,
            )
            bar.set_postfix(kills=0)

            def on_step(step: int, bar: Any = bar) -> None:
                bar.n = min(step, total_steps)
                bar.refresh()

            def on_kill(n: int, bar: Any = bar) -> None:
                bar.set_postfix(kills=n)

            try:
                results[mode] = run_mode(
                    mode,
                    root / mode,
                    schedule,
                    worker_args,
                    prompts,
                    on_step=on_step,
                    on_kill=on_kill,
                )
            finally:
                bar.close()
    except WorkerCrashed as exc:
        print(f"frontier demo: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(
            json.dumps(
                {
                    "stream_len": prompts,
                    "seed": args.seed,
                    "schedule": [attrs.asdict(k) for k in schedule],
                    **{
                        m: {
                            "kills": r.kills,
                            "lives": r.lives,
                            "seconds": r.seconds,
                            "audit": r.report.to_json(),
                            "rewards": list(r.rewards),
                            "counters": r.counters,
                        }
                        for m, r in results.items()
                    },
                }
            )
        )
    elif len(results) == 2:
        print(format_results(results, prompts))
    else:
        from frontier_core._audit import format_report

        for r in results.values():
            print(format_report(r.report, r.mode))
    if args.plot:
        plot(results, args.plot)
        if not args.json:
            print(f"reward curves drawn to {args.plot}")
    frontier = results.get("frontier")
    return 0 if frontier is None or frontier.report.clean else 1
