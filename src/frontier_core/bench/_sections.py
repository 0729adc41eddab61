"""Benchmarks of the core alone (no torch): ledger scaling, checkpoint size
and cost, memory, and the simulator. See ``_harness`` for the conventions."""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

from frontier_core import Ledger, LedgerConfig

from ._harness import Row, ratios_of, row

BATCH = 32
CHECKPOINT_EVERY = 1_000


# -- 2. ledger scaling ---------------------------------------------------------


def steady_ledger(in_flight: int, *, ramp: bool = False) -> tuple[Ledger, int]:
    """A ledger with ``in_flight`` ordinals outstanding; returns it and the
    oldest outstanding ordinal. ``ramp`` fills the window 32 at a time, as a
    run does (one big batch would add its own transient to a peak RSS)."""
    ledger = Ledger.start(LedgerConfig())
    chunk = BATCH if ramp else in_flight
    filled = 0
    while filled < in_flight:
        step = ledger.stamp(min(chunk, in_flight - filled))
        ledger = step.ledger.dispatch(step.effect.kept).ledger
        filled += len(step.effect.kept)
    return ledger, 0


def lifecycles(
    ledger: Ledger, oldest: int, n: int, *, checkpoint_every: int | None
) -> tuple[Ledger, int]:
    """``n`` prompt lifecycles in batches of 32 at a constant window: yield
    32, dispatch them, buffer the 32 oldest outstanding (in order), train
    them; ``checkpoint().state_dict()`` every ``checkpoint_every`` trained."""
    since = 0
    done = 0
    while done < n:
        step = ledger.stamp(BATCH)
        ledger = step.ledger.dispatch(step.effect.kept).ledger
        ords = range(oldest, oldest + BATCH)
        oldest += BATCH
        ledger = ledger.buffer(ords).ledger.train(ords).ledger
        done += BATCH
        if checkpoint_every is not None:
            since += BATCH
            if since >= checkpoint_every:
                since -= checkpoint_every
                ledger.checkpoint().state_dict()
    return ledger, oldest


def bench_ledger(*, quick: bool, rounds: int) -> list[Row]:
    windows = (100, 1_000, 10_000) if quick else (100, 10_000, 100_000)
    n = 6_400 if quick else 96_000
    rows: list[Row] = []
    for ckpt in (CHECKPOINT_EVERY, None):
        rates: dict[int, list[float]] = {w: [] for w in windows}
        for _ in range(rounds):
            for w in windows:
                ledger, oldest = steady_ledger(w)
                lifecycles(ledger, oldest, 2 * BATCH, checkpoint_every=ckpt)  # warm up
                start = time.process_time()
                lifecycles(ledger, oldest, n, checkpoint_every=ckpt)
                rates[w].append(n / (time.process_time() - start))
        base = windows[0]
        label = f"ckpt/{CHECKPOINT_EVERY}" if ckpt else "no ckpt"
        for w in windows:
            # Ratio of per-prompt cost: baseline rate / this rate.
            cost_ratio = ratios_of(rates[base], rates[w])
            target: dict[str, Any] = {}
            if ckpt and w == windows[-1]:
                q = statistics.median(cost_ratio)
                target = {"target": "cost <= 2x of 100 in flight", "met": q <= 2.0}
            elif ckpt and w == windows[1]:
                med = statistics.median(rates[w])
                target = {"target": ">= 200k/s CPU", "met": med >= 200_000}
            rows.append(
                row(
                    "ledger",
                    f"lifecycles/s, {w:,} in flight, {label}",
                    rates[w],
                    "1/s cpu",
                    ratios=cost_ratio,
                    baseline=f"per-prompt cost at {base} in flight",
                    lifecycles=n,
                    **target,
                )
            )
    return rows


# -- 3. checkpoint size and cost -------------------------------------------------


WINDOW_BATCHES = 8


def healthy_run(total: int) -> Ledger:
    """A healthy run of ``total`` prompts with a fixed window: 8 batches of 32
    in flight; each step the oldest batch's groups land in a shuffled order,
    a quarter of them one step late (stragglers), and a step trains the 32
    groups that landed first. Ends mid-flight, with its window full. The
    shuffles are drawn from the number of steps left, so runs of any length
    end in the same pattern (the same window, shifted)."""
    ledger = Ledger.start(LedgerConfig(fingerprint="bench:healthy"))
    batches: list[list[int]] = []
    late: list[int] = []
    landed: list[int] = []
    trained = 0
    while trained < total:
        step = ledger.stamp(BATCH)
        ledger = step.ledger.dispatch(step.effect.kept).ledger
        batches.append(list(step.effect.kept))
        if len(batches) < WINDOW_BATCHES:
            continue
        oldest = batches.pop(0)
        random.Random(((total - trained) // BATCH) % 64).shuffle(oldest)
        now, later = oldest[: 3 * BATCH // 4], oldest[3 * BATCH // 4 :]
        arriving = late + now
        late = later
        ledger = ledger.buffer(arriving).ledger
        landed.extend(arriving)
        take, landed = landed[:BATCH], landed[BATCH:]
        ledger = ledger.train(take).ledger
        trained += len(take)
    return ledger


def holes(ledger: Ledger, k: int) -> Ledger:
    """``ledger`` after ``k`` interleaved holes: one buffered ordinal holds the
    cut, then every other ordinal of the next ``2k`` is trained, the others
    stay buffered (k trained ranges, k + 1 retained ones)."""
    step = ledger.stamp(2 * k + 1)
    ords = list(step.effect.kept)
    ledger = step.ledger.dispatch(ords).ledger.buffer(ords).ledger
    return ledger.train(ords[1::2]).ledger


def record_bytes(ledger: Ledger) -> int:
    return len(json.dumps(ledger.checkpoint().state_dict()).encode())


def bench_checkpoint(*, quick: bool, rounds: int) -> list[Row]:
    short, long = (10**3, 10**5) if quick else (10**4, 10**7)
    rows: list[Row] = []
    ledgers = {}
    for n in (short, long):
        start = time.process_time()
        ledgers[n] = healthy_run(n)
        rows.append(
            row(
                "checkpoint",
                f"healthy run of {n:,} prompts (setup)",
                [n / (time.process_time() - start)],
                "1/s cpu",
            )
        )
    sizes = {n: record_bytes(ledgers[n]) for n in ledgers}
    ratio = sizes[long] / sizes[short]
    rows.append(
        row(
            "checkpoint",
            f"record after {short:,} prompts",
            [sizes[short]],
            "bytes",
            target="< 1 KB",
            met=sizes[short] < 1024,
        )
    )
    rows.append(
        row(
            "checkpoint",
            f"record after {long:,} prompts",
            [sizes[long]],
            "bytes",
            ratios=[ratio],
            baseline=f"record after {short:,}",
            target="< 1 KB, within 10%",
            met=sizes[long] < 1024 and abs(ratio - 1) <= 0.10,
        )
    )
    # Cost of taking the checkpoint (record + JSON), same window, both lengths.
    costs: dict[int, list[float]] = {n: [] for n in ledgers}
    reps = 200
    for _ in range(rounds):
        for n, ledger in ledgers.items():
            start = time.process_time()
            for _ in range(reps):
                json.dumps(ledger.checkpoint().state_dict())
            costs[n].append((time.process_time() - start) / reps * 1e6)
    rows.append(
        row(
            "checkpoint",
            f"checkpoint + JSON after {long:,}",
            costs[long],
            "us cpu",
            ratios=ratios_of(costs[long], costs[short]),
            baseline=f"after {short:,}",
        )
    )
    # Worst case: interleaved holes; size per range, at both run lengths.
    ks = (10, 100, 1_000) if quick else (10, 100, 1_000, 10_000)
    for k in ks:
        at = {n: record_bytes(holes(ledgers[n], k)) for n in ledgers}
        rows.append(
            row(
                "checkpoint",
                f"{k:,} holes: record after {long:,}",
                [at[long]],
                "bytes",
                ratios=[at[long] / at[short]],
                baseline=f"{k:,} holes after {short:,}",
                bytes_per_hole=at[long] / k,
                bytes_short=at[short],
            )
        )
    return rows


# -- 5. memory ------------------------------------------------------------------


def _peak_kb() -> int:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(kind: str, size: int) -> None:
    """Entry point of a measurement subprocess: do ``kind`` at ``size`` and
    print ``{"peak_kb": ...}`` as JSON on stdout."""
    extra: dict[str, Any] = {}
    if kind == "ledger":
        ledger, oldest = steady_ledger(size, ramp=True)
        ledger, _ = lifecycles(ledger, oldest, 10 * CHECKPOINT_EVERY, checkpoint_every=1_000)
        extra = {"entries": ledger.size(), "nodes": ledger.node_count()}
    elif kind == "simulator":
        stats = _simulate_with_kills(size, max(size // 1_000, 1))
        extra = {"kills": stats.kills, "reached": stats.reached}
    elif kind not in ("empty", "import"):
        raise ValueError(kind)
    print(json.dumps({"peak_kb": _peak_kb(), **extra}))


def _measure_child(kind: str, size: int) -> dict[str, Any]:
    code = f"from frontier_core.bench._sections import child; child({kind!r}, {size})"
    if kind == "empty":
        code = (
            "f=open('/proc/self/status')\n"
            "print('{\"peak_kb\": %s}' % [l.split()[1] for l in f if l.startswith('VmHWM')][0])"
        )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def bench_memory(*, quick: bool, rounds: int) -> list[Row]:
    in_flight = 10_000 if quick else 100_000
    prompts = 20_000 if quick else 1_000_000
    reps = min(rounds, 3)
    runs = (("empty", 0), ("import", 0), ("ledger", 100), ("ledger", in_flight))
    peaks: dict[tuple[str, int], list[float]] = {k: [] for k in runs}
    info: dict[tuple[str, int], Any] = {}
    for _ in range(reps):
        for kind, size in runs:
            got = _measure_child(kind, size)
            peaks[kind, size].append(got["peak_kb"] / 1024)
            info[kind, size] = got
    sims = {n: _measure_child("simulator", n) for n in (prompts // 10, prompts)}
    imported = peaks["import", 0]
    net = {
        n: [a - b for a, b in zip(peaks["ledger", n], imported, strict=True)]
        for n in (100, in_flight)
    }
    rows = [
        row("memory", "empty interpreter: peak RSS", peaks["empty", 0], "MiB"),
        row(
            "memory",
            "import frontier_core: peak RSS",
            imported,
            "MiB",
            ratios=ratios_of(imported, peaks["empty", 0]),
            baseline="empty interpreter",
        ),
    ]
    for n in (100, in_flight):
        rows.append(
            row(
                "memory",
                f"ledger, {n:,} in flight: peak RSS",
                peaks["ledger", n],
                "MiB",
                ratios=ratios_of(peaks["ledger", n], imported),
                baseline="import frontier_core",
                above_import_mib=net[n],
                entries=info["ledger", n]["entries"],
                nodes=info["ledger", n]["nodes"],
            )
        )
    growth = [max(a - b, 0.0) for a, b in zip(net[in_flight], net[100], strict=True)]
    rows.append(
        row(
            "memory",
            f"ledger, {in_flight:,} in flight: above 100 in flight",
            [max(g, 1e-3) for g in growth],
            "MiB",
            bytes_per_entry=statistics.median(growth) * 2**20 / in_flight,
        )
    )
    small = sims[prompts // 10]
    for n, sim in sims.items():
        peak = sim["peak_kb"] / 1024
        extra: dict[str, Any] = {}
        if n == prompts:
            extra = {
                "ratios": [peak / (small["peak_kb"] / 1024)],
                "baseline": f"simulator over {prompts // 10:,} prompts",
            }
        rows.append(
            row(
                "memory",
                f"simulator, {n:,} prompts, {sim['kills']:,} kills: peak RSS",
                [peak],
                "MiB",
                kills=sim["kills"],
                **extra,
            )
        )
    return rows


# -- 6. simulator -----------------------------------------------------------------


def _simulate_with_kills(prompts: int, kills: int) -> Any:
    """The frontier mode over ``prompts`` with ``kills`` mid-generation kills
    (plus the default torn, after-resume and double kills)."""
    from frontier_core.sim import Workload, simulate
    from frontier_core.sim._frontier import FrontierBackend

    workload = attrs.evolve(Workload(), dataset_len=prompts, kills=kills)
    with tempfile.TemporaryDirectory(prefix="frontier-bench-") as tmp:
        calm = simulate(workload, FrontierBackend, (), Path(tmp) / "calm.jsonl")
        warmup = calm.first_checkpoint if calm.first_checkpoint is not None else calm.sim_time
        schedule = workload.kill_schedule(calm.sim_time, warmup)
        return simulate(workload, FrontierBackend, schedule, Path(tmp) / "run.jsonl")


def bench_simulator(*, quick: bool, rounds: int) -> list[Row]:
    from frontier_core.sim import Workload, simulate
    from frontier_core.sim._report import MODES

    prompts = 2_000 if quick else 20_000
    workload = attrs.evolve(Workload(), dataset_len=prompts, kills=prompts // 1_000)
    rates: dict[str, list[float]] = {"legacy": [], "frontier": []}
    with tempfile.TemporaryDirectory(prefix="frontier-bench-") as tmp:
        calm = simulate(workload, MODES["frontier"], (), Path(tmp) / "calm.jsonl")
        warmup = calm.first_checkpoint if calm.first_checkpoint is not None else calm.sim_time
        schedule = workload.kill_schedule(calm.sim_time, warmup)
        for r in range(rounds):
            for mode in ("legacy", "frontier"):
                path = Path(tmp) / f"{mode}.{r}.jsonl"
                start = time.process_time()
                simulate(workload, MODES[mode], schedule, path)
                rates[mode].append(prompts / (time.process_time() - start))
    # The default `frontier simulate`, as a user runs it, against a bare
    # interpreter start (wall time: process start-up is part of it).
    cmd = [sys.executable, "-m", "frontier_core._cli", "simulate"]
    bare = [sys.executable, "-c", "pass"]
    walls: dict[str, list[float]] = {"bare": [], "simulate": []}
    for _ in range(rounds):
        for name, argv in (("bare", bare), ("simulate", cmd)):
            start = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            walls[name].append(time.perf_counter() - start)
    return [
        row(
            "simulator",
            f"legacy mode, {prompts:,} prompts, {len(schedule)} kills",
            rates["legacy"],
            "prompts/s cpu",
        ),
        row(
            "simulator",
            f"frontier mode, {prompts:,} prompts, {len(schedule)} kills",
            rates["frontier"],
            "prompts/s cpu",
            ratios=ratios_of(rates["legacy"], rates["frontier"]),
            baseline="legacy mode's cost per prompt (time ratio)",
        ),
        row("simulator", "python -c pass", walls["bare"], "s wall"),
        row(
            "simulator",
            "frontier simulate (defaults)",
            walls["simulate"],
            "s wall",
            ratios=ratios_of(walls["simulate"], walls["bare"]),
            baseline="python -c pass",
        ),
    ]
