"""Rollout worker actors for the Ray examples, benchmark and tests.

``StandInRollout`` sleeps a random time per prompt and returns a
deterministic fake trajectory; ``CpuEngineRollout`` samples from the
examples' CPU engine. Both follow the worker contract of
``frontier_adapters.ray``: ``generate(ledger, lease)`` reports the lease's
prompts to the ledger actor in batches and returns how many landed.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import time
from typing import Any

import ray

from ..ray import Lease


def _trajectory(ordinal: int, row: Any, tokens: int) -> dict[str, Any]:
    digest = hashlib.sha256(f"{ordinal}:{row!r}".encode()).digest()
    return {"tokens": [b % 16 for b in digest[:tokens]], "reward": digest[-1] / 255}


class StandInRollout:
    """A rollout worker without a model: each prompt takes an exponential
    random ``latency`` (seconds, mean) and yields a deterministic fake
    trajectory. ``fail_rate`` reports a failed generation; ``error_rate``
    raises out of the call (an engine error; the fleet fails the rest of the
    lease); ``crash_rate`` kills the worker process (``os._exit``) in the
    middle of a lease.
    Reports go to the ledger every ``report_every`` prompts."""

    def __init__(
        self,
        *,
        seed: int = 0,
        latency: float = 0.01,
        fail_rate: float = 0.0,
        crash_rate: float = 0.0,
        error_rate: float = 0.0,
        report_every: int = 4,
        tokens: int = 8,
    ) -> None:
        self.seed = seed
        self.error_rate = error_rate
        self.latency = latency
        self.fail_rate = fail_rate
        self.crash_rate = crash_rate
        self.report_every = max(1, report_every)
        self.tokens = tokens

    def generate(self, ledger: Any, lease: Lease) -> int:
        rng = random.Random(f"{self.seed}:{lease.id}")
        landed: list[tuple[int, Any]] = []
        failed: list[int] = []
        done = 0
        for o, row in lease.items:
            if self.latency > 0:
                time.sleep(rng.expovariate(1.0 / self.latency))
            if self.crash_rate and rng.random() < self.crash_rate:
                os._exit(1)
            if self.error_rate and rng.random() < self.error_rate:
                raise RuntimeError(f"injected generation error at ordinal {o}")
            if self.fail_rate and rng.random() < self.fail_rate:
                failed.append(o)
            else:
                landed.append((o, _trajectory(o, row, self.tokens)))
            if len(landed) + len(failed) >= self.report_every:
                ray.get(ledger.report.remote(lease.id, landed, failed))
                done += len(landed)
                landed, failed = [], []
        if landed or failed:
            ray.get(ledger.report.remote(lease.id, landed, failed))
            done += len(landed)
        return done

    def pid(self) -> int:
        return os.getpid()

    def crash(self) -> None:
        os._exit(1)


class CpuEngineRollout:
    """A rollout worker on the rollout binding's ``CpuEngine``: a lease's
    prompts (lists of token ids) generate concurrently, ``n`` samples each,
    and land as groups of completions. Imports torch in the worker."""

    def __init__(
        self, *, seed: int = 0, n: int = 4, max_tokens: int = 8, token_latency: float = 0.0
    ) -> None:
        from .cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM

        self.engine = CpuEngine(TinyCausalLM(seed=seed), seed=seed, token_latency=token_latency)
        self.params = CpuSamplingParams(n=n, max_tokens=max_tokens)

    def generate(self, ledger: Any, lease: Lease) -> int:
        async def one(o: int, row: Any) -> tuple[int, Any]:
            final: Any = None
            async for out in self.engine.generate(list(row), self.params, f"o{o}-{lease.id}"):
                final = out
            return o, {"completions": [list(c.token_ids) for c in final.outputs]}

        async def run() -> list[tuple[int, Any]]:
            return list(await asyncio.gather(*(one(o, row) for o, row in lease.items)))

        landed = asyncio.run(run())
        ray.get(ledger.report.remote(lease.id, landed, []))
        return len(landed)

    def pid(self) -> int:
        return os.getpid()

    def crash(self) -> None:
        os._exit(1)
