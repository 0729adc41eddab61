"""``frontier demo``: async GRPO on a CPU engine, SIGKILLed and resumed, A/B.

Runs the training loop of ``grpo_worker`` in a subprocess, once with the
legacy live-cursor checkpoint and once with ``frontier_core``, kills each at
the same seeded moments (``d`` committed steps after a restart, then a
random delay, so kills land mid-generation, mid-step or mid-write), restarts
it until its stream is done, and audits each training-data log with
``frontier audit``'s own function. Prints the two audits side by side and the
reward curve of each surviving lineage. Exit status: 0 when frontier_core
trained every prompt exactly once or dropped it on record, 1 otherwise, 2
when a worker crashed by itself.

With ``engine="vllm"`` (``frontier demo --engine vllm``) the workers
generate with real vLLM on the tiny Llama of ``tiny_llm``, trained by torch
through transformers, and push their weights into the engine after every
step (see ``grpo_worker``); the CPU engine is the default.

Each life runs in a process group of its own, and a kill is a SIGKILL of
the whole group: the worker and every process it started (vLLM's engine
core and worker processes; Python's resource tracker is left to clean up
after them and exit, see ``kill_group``). After each life,
killed or not, nothing of the group may be left running (``WorkerCrashed``
otherwise); the shared-memory segments the killed processes had mapped and
the life's private temporary directory (its ``TMPDIR``, where vLLM puts its
unix sockets) are removed.

``run_demo`` is the command's body; ``frontier demo`` (``frontier_adapters._cli``)
parses its options. This module imports no torch: the workers do.
"""

from __future__ import annotations

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

from frontier_core._audit import AuditReport, audit_log, format_report

#: One life of a mode: ``python -m frontier_adapters.examples grpo-worker ...``.
WORKER = ("-m", "frontier_adapters.examples", "grpo-worker")
MODES = ("legacy", "frontier")
LOG_NAME = "train_log.jsonl"
SUMMARY_NAME = "summary.json"
SPARK = "▁▂▃▄▅▆▇█"
ENGINES = ("cpu", "vllm")
#: Worker options per engine: vLLM requests get a longer timeout (its
#: first requests after a start are slow on a busy machine) and no
#: injected stalls (each would hold a slot for the whole timeout).
ENGINE_ARGS: dict[str, tuple[str, ...]] = {
    "cpu": (),
    "vllm": ("--engine", "vllm", "--timeout", "20", "--stall-rate", "0"),
}


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
    #: Requests the worker had in flight at its last step line before each kill.
    in_flight_at_kills: tuple[int, ...] = ()


class WorkerCrashed(RuntimeError):
    """A worker exited by itself with an error, or left processes behind."""


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid`` (Linux
    ``/proc``; elsewhere, ``[pgid]`` while the group exists)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return sorted(members)


def shared_memory_of(pids: Sequence[int]) -> set[str]:
    """The ``/dev/shm`` files mapped by ``pids`` (vLLM's message queues,
    multiprocessing's semaphores): a SIGKILLed tree never unlinks them."""
    found: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                        found.add(parts[5].strip().removesuffix(" (deleted)"))
        except OSError:
            continue
    return found


def await_group_gone(pgid: int, timeout: float = 20.0) -> None:
    """Wait until process group ``pgid`` has no live process; raise
    ``WorkerCrashed`` naming what is left after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        raise WorkerCrashed(f"processes left behind by worker group {pgid}: {left}")


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing.resource_tracker" in f.read()
    except OSError:
        return False


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` (the worker and everything it
    started), wait until none is left, and unlink the shared memory they
    had mapped.

    Python's multiprocessing resource tracker, if the group has one, is
    spared the signal: it is not the job but its janitor, and once the
    others are dead it unlinks the semaphores and shared memory they
    registered (nothing else would: their names are not mapped anywhere)
    and exits by itself. It is killed too if it has not after a while."""
    shm: set[str] = set()
    deadline = time.monotonic() + 10.0
    while True:
        members = group_members(pgid)
        targets = [p for p in members if not _is_resource_tracker(p)]
        if not targets or time.monotonic() > deadline:
            break
        shm |= shared_memory_of(targets)
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    try:
        await_group_gone(pgid, timeout=10.0)
    except WorkerCrashed:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await_group_gone(pgid)
    for path in shm:
        try:
            os.unlink(path)
        except OSError:
            pass


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
    cmd = [sys.executable, *WORKER, "--workdir", str(workdir), "--mode", mode, *worker_args]
    kills = lives = 0
    in_flight_at_kills: list[int] = []
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    while True:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{mode}: not done after {timeout} s ({kills} kills)")
        lives += 1
        plan = schedule[kills] if kills < len(schedule) else None
        scratch = tempfile.mkdtemp(prefix="frontier-life-")
        env = {**base_env, "TMPDIR": scratch}
        try:
            with open(workdir / "stderr.log", "ab") as errf:
                proc = subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=errf,
                    text=True,
                    env=env,
                    bufsize=1,
                    start_new_session=True,  # its own process group: killed whole
                )
                assert proc.stdout is not None
                seen = in_flight = 0
                done = hit = False
                for line in proc.stdout:
                    if line.startswith("step "):
                        seen += 1
                        in_flight = _field(line, "in_flight")
                        if on_step is not None:
                            on_step(int(line.split()[1]))
                    elif line.startswith("done"):
                        done = True
                    if plan is not None and seen >= plan.steps and not done:
                        time.sleep(plan.delay)
                        hit = True
                        break
                if hit and proc.poll() is None:
                    kill_group(proc.pid)
                    proc.wait()
                    proc.stdout.close()
                    kills += 1
                    in_flight_at_kills.append(in_flight)
                    if on_kill is not None:
                        on_kill(kills)
                    continue
                rest = proc.stdout.read()
                proc.wait()
                proc.stdout.close()
                await_group_gone(proc.pid)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
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
        in_flight_at_kills=tuple(in_flight_at_kills),
    )


def _field(line: str, name: str) -> int:
    """``name=VALUE`` from a worker's step line (0 when absent)."""
    for word in line.split():
        key, _, value = word.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return 0


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


#: The reward of each engine's task, for the legend.
TASKS = {
    "cpu": "the completion starts with the prompt's first token",
    "vllm": "the completion starts with the prompt's last letter",
}


def format_results(
    results: dict[str, ModeResult], stream_len: int, task: str = TASKS["cpu"]
) -> str:
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
    lines.append("Mean reward per training step (surviving lineage; reward 1 when")
    lines.append(f"{task}, 1/16 by chance;")
    lines.append("the full block is the highest bucket, then the means of eight consecutive")
    lines.append("eighths of the run):")
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


def run_demo(
    *,
    kills: int,
    prompts: int,
    seed: int = 0,
    workdir: str | os.PathLike[str] | None = None,
    as_json: bool = False,
    plot_path: str | None = None,
    modes: Sequence[str] = MODES,
    engine: str = "cpu",
) -> int:
    """Run the A/B (or the given ``modes``), print the audits (one JSON
    object with ``as_json``) and return the exit status: 0 when
    frontier_core lost and duplicated nothing, 1 when it did, 2 when a worker
    crashed by itself. Raises ``ValueError`` for ``kills < 0`` or
    ``prompts < 1``."""
    if kills < 0 or prompts < 1:
        raise ValueError(f"kills must be >= 0 and prompts >= 1, got {kills} and {prompts}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    groups_per_step = 8
    total_steps = math.ceil(prompts / groups_per_step)
    schedule = kill_schedule(seed, kills, total_steps)
    worker_args = ["--prompts", str(prompts), "--seed", str(seed), *ENGINE_ARGS[engine]]
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="frontier-demo-"))
    if workdir:
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
                disable=as_json and not sys.stderr.isatty(),
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
        if not workdir:
            shutil.rmtree(root, ignore_errors=True)
    if as_json:
        print(
            json.dumps(
                {
                    "stream_len": prompts,
                    "seed": seed,
                    "engine": engine,
                    "schedule": [attrs.asdict(k) for k in schedule],
                    **{
                        m: {
                            "kills": r.kills,
                            "lives": r.lives,
                            "seconds": r.seconds,
                            "audit": r.report.to_json(),
                            "rewards": list(r.rewards),
                            "counters": r.counters,
                            "in_flight_at_kills": list(r.in_flight_at_kills),
                        }
                        for m, r in results.items()
                    },
                }
            )
        )
    elif len(results) == 2:
        print(format_results(results, prompts, TASKS[engine]))
    else:
        for r in results.values():
            print(format_report(r.report, r.mode))
    if plot_path:
        plot(results, plot_path)
        if not as_json:
            print(f"reward curves drawn to {plot_path}")
    frontier = results.get("frontier")
    return 0 if frontier is None or frontier.report.clean else 1
