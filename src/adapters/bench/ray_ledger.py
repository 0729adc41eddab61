"""Throughput of one ledger actor with 8 rollout actors reporting.

Three runs per round on the same Ray cluster, interleaved:

* ``capacity``: the rollout actors generate in zero time, so every prompt
  costs only its ledger traffic (an assignment from ``take``, batched
  ``report`` calls sealing its tasks, and its share of the driver's
  ``batch`` and ``trained`` calls, each ``trained`` building the full
  checkpoint state): the prompts per second one ledger actor sustains.
* ``generation``: the same actors sleep ``latency`` seconds per prompt and
  return fake samples to the driver, with no ledger at all: the
  generation rate.
* ``with ledger``: the same generation, through the ledger actor. Its ratio
  to ``generation`` near 1 says the actor is not the bottleneck.

Rows have the shape of ``frontier bench`` rows (section ``ray``); the entry
point for the suite is ``bench_ray(quick=..., rounds=...)``. Wall time: the
actors and Ray's IPC are what is measured. Needs the ``ray`` extra; starts a
local 2-CPU cluster bound to 127.0.0.1 (``verify.local_ray.init_ray``)
unless Ray is already initialised.

    frontier bench --only ray [--quick] [--rounds 3]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import ray

from frontier_core import LedgerConfig
from frontier_core.journal import TokenPayload

from .._service import Assignment
from .._sources import SequenceSource
from ..ray._actors import LedgerActor, LedgerTimeoutError, ledger_call
from ..verify.local_ray import init_ray

WORKERS = 8
#: The most seconds one run (a fresh ledger actor, every prompt trained)
#: may take, on the driver and in each rollout actor's pump: a stuck
#: ledger or actor fails the bench with ``LedgerTimeoutError``.
RUN_DEADLINE = 600.0


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise LedgerTimeoutError(f"{what} did not finish within {RUN_DEADLINE} s")


def _sample(ordinal: int) -> TokenPayload:
    """A fake sample of 8 tokens."""
    tokens = [(ordinal * 31 + i) % 16 for i in range(8)]
    return TokenPayload.of(tokens, [-0.5] * len(tokens), 0)


class PumpRollout:
    """A rollout actor that pulls its own assignments until the stream is
    exhausted: ``latency`` seconds per prompt (one sample each), reports
    every ``report_every`` prompts."""

    def __init__(self, latency: float, report_every: int) -> None:
        self.latency = latency
        self.report_every = report_every

    def pump(self, ledger: Any, per_call: int, max_ahead: int) -> int:
        done = 0
        deadline = time.monotonic() + RUN_DEADLINE
        while True:
            _check_deadline(deadline, "a rollout actor's pump (the stream never exhausted)")
            got: Assignment = ledger_call(ledger.take.remote(per_call, max_ahead=max_ahead))
            if got.throttled:
                time.sleep(0.002)
                continue
            if not got.tasks:
                return done
            sealed: list[tuple[Any, TokenPayload]] = []
            for task in got.tasks:
                if self.latency:
                    time.sleep(self.latency)
                sealed.append((task.lease, _sample(task.lease.ordinal)))
                if len(sealed) >= self.report_every or task is got.tasks[-1]:
                    report = ledger.report.remote(sealed=sealed, incarnation=got.incarnation)
                    done += ledger_call(report).sealed
                    sealed = []

    def generate_only(self, count: int) -> list[Any]:
        out = []
        for o in range(count):
            if self.latency:
                time.sleep(self.latency)
            out.append(_sample(o))
        return out

    def ready(self) -> bool:
        return True


def _with_ledger(
    workers: Sequence[Any], prompts: int, per_call: int, groups_per_step: int
) -> tuple[float, int]:
    """Seconds to train ``prompts`` through a fresh ledger actor; steps."""
    source = SequenceSource(list(range(prompts)), batch_size=64)
    ledger = LedgerActor.remote(source, LedgerConfig(stream_len=prompts))
    ledger_call(ledger.ping.remote())
    start = time.perf_counter()
    # Back pressure as in a real run: at most 4 steps' worth of groups
    # leased or buffered, so each step's checkpoint state stays small.
    pumps = [w.pump.remote(ledger, per_call, 4 * groups_per_step) for w in workers]
    steps = 0
    deadline = time.monotonic() + RUN_DEADLINE
    while True:
        _check_deadline(deadline, f"training {prompts} prompts through the ledger actor")
        batch = ledger_call(ledger.batch.remote(groups_per_step))
        if batch:
            steps += 1
            snap = ledger_call(ledger.trained.remote([g.ordinal for g in batch], step=steps))
            if snap.drained:
                break
        else:
            time.sleep(0.001)
    seconds = time.perf_counter() - start
    assert sum(ray.get(pumps, timeout=RUN_DEADLINE)) == prompts
    ray.kill(ledger)
    return seconds, steps


def _without_ledger(workers: Sequence[Any], prompts: int) -> float:
    start = time.perf_counter()
    share = -(-prompts // len(workers))
    ray.get([w.generate_only.remote(share) for w in workers], timeout=RUN_DEADLINE)
    return time.perf_counter() - start


def _row(name: str, values: Sequence[float], unit: str, **extra: Any) -> dict[str, Any]:
    return {
        "section": "ray",
        "name": name,
        "unit": unit,
        "rounds": list(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        **extra,
    }


def bench_ray(
    *,
    quick: bool = False,
    rounds: int = 3,
    latency: float = 0.02,
    per_call: int = 16,
    report_every: int = 8,
    groups_per_step: int = 32,
) -> list[dict[str, Any]]:
    """Prompts per second through one ledger actor with ``WORKERS`` rollout
    actors reporting (see the module docstring); ``frontier bench`` rows."""
    started = not ray.is_initialized()
    if started:
        init_ray()
    capacity_n = 512 if quick else 8192
    gen_n = 256 if quick else 2048
    try:
        pump: Any = ray.remote(num_cpus=0)(PumpRollout)
        free = [pump.remote(0.0, report_every) for _ in range(WORKERS)]
        slow = [pump.remote(latency, report_every) for _ in range(WORKERS)]
        ray.get([w.ready.remote() for w in free + slow], timeout=RUN_DEADLINE)
        capacity: list[float] = []
        generation: list[float] = []
        through: list[float] = []
        steps = 0
        for _ in range(rounds):
            seconds, steps = _with_ledger(free, capacity_n, per_call, groups_per_step)
            capacity.append(capacity_n / seconds)
            generation.append(gen_n / _without_ledger(slow, gen_n))
            seconds, _ = _with_ledger(slow, gen_n, per_call, groups_per_step)
            through.append(gen_n / seconds)
        for w in free + slow:
            ray.kill(w)
    finally:
        if started:
            ray.shutdown()
    ratios = [t / g for t, g in zip(through, generation, strict=True)]
    detail = {
        "workers": WORKERS,
        "per_call": per_call,
        "report_every": report_every,
        "groups_per_step": groups_per_step,
    }
    return [
        _row("ledger actor capacity", capacity, "prompts/s", steps=steps, **detail),
        _row(f"generation {latency * 1000:g} ms/prompt", generation, "prompts/s", **detail),
        _row(
            "generation via ledger",
            through,
            "prompts/s",
            baseline=f"generation {latency * 1000:g} ms/prompt",
            ratios=ratios,
            ratio={"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
            **detail,
        ),
    ]
