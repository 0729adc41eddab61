"""Rollout worker actors for the rig's Ray jobs, the benchmark and the tests.

``StandInRollout`` sleeps a random time per prompt and returns a
deterministic fake trajectory; ``CpuEngineRollout`` samples from the
examples' CPU engine. Both follow the worker contract of
``frontier_adapters.ray``: ``generate(ledger, lease)`` reports the lease's
prompts to the ledger actor in batches and returns how many landed.

``StandInSampleRollout`` takes sibling tasks (``SampleLedgerActor``,
``SampleFleet``): sibling ``s`` of prompt ``o`` is the durable job's fixed
token sequence of a heavy-tailed length (``durable_job.full_sample``),
generated one token per ``token_latency`` seconds, continued from the
task's prefix, with a progress report every ``progress_every`` tokens.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from frontier_core.journal import TokenPayload, continue_sample

from ..ray import Assignment, PromptLease, SampleTask
from ..ray._actors import LEDGER_TIMEOUT
from .durable_job import full_sample


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

    def generate(self, ledger: Any, lease: PromptLease) -> int:
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
                ray.get(ledger.report.remote(lease.id, landed, failed), timeout=LEDGER_TIMEOUT)
                done += len(landed)
                landed, failed = [], []
        if landed or failed:
            ray.get(ledger.report.remote(lease.id, landed, failed), timeout=LEDGER_TIMEOUT)
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
        from ..examples.cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM

        self.engine = CpuEngine(TinyCausalLM(seed=seed), seed=seed, token_latency=token_latency)
        self.params = CpuSamplingParams(n=n, max_tokens=max_tokens)

    def generate(self, ledger: Any, lease: PromptLease) -> int:
        async def one(o: int, row: Any) -> tuple[int, Any]:
            final: Any = None
            async for out in self.engine.generate(list(row), self.params, f"o{o}-{lease.id}"):
                final = out
            return o, {"completions": [list(c.token_ids) for c in final.outputs]}

        async def run() -> list[tuple[int, Any]]:
            return list(await asyncio.gather(*(one(o, row) for o, row in lease.items)))

        landed = asyncio.run(run())
        ray.get(ledger.report.remote(lease.id, landed, []), timeout=LEDGER_TIMEOUT)
        return len(landed)

    def pid(self) -> int:
        return os.getpid()

    def crash(self) -> None:
        os._exit(1)


def logprob(position: int) -> float:
    """The stand-in's log-prob of the token at ``position`` of a sample."""
    return -0.05 - (position % 7) / 10


class StandInSampleRollout:
    """A sibling-level rollout worker without a model (see the module doc).

    ``fail_rate`` fails a task (after some tokens) and ``crash_rate`` kills
    the process (``os._exit``) in the middle of one. ``tokens_log`` (a file
    path) gets the number of tokens generated at each report, so a job can
    count the tokens generated again after its kills. A task whose progress
    the ledger refuses is abandoned (it is fenced for good). Reports go to the
    newest ledger actor the worker heard of (a ``generate`` argument or
    ``set_ledger``); a report to a dead one waits up to ``rebind_wait``
    seconds to be told of its successor, then raises."""

    def __init__(
        self,
        *,
        seed: int = 0,
        data_seed: int = 0,
        token_latency: float = 0.001,
        fail_rate: float = 0.0,
        crash_rate: float = 0.0,
        tokens_log: str | None = None,
        rebind_wait: float = 10.0,
    ) -> None:
        self.seed = seed
        self.data_seed = data_seed
        self.token_latency = token_latency
        self.fail_rate = fail_rate
        self.crash_rate = crash_rate
        self.tokens_log = tokens_log
        self.rebind_wait = rebind_wait
        self._ledger: Any = None
        self._generation = 0

    def set_ledger(self, ledger: Any) -> None:
        if self._ledger is None or ledger != self._ledger:
            self._ledger = ledger
            self._generation += 1

    def generate(self, ledger: Any, assignment: Assignment) -> int:
        self.set_ledger(ledger)
        accepted = 0
        for task in assignment.tasks:
            accepted += self._one(task, assignment)
        return accepted

    def _one(self, task: SampleTask, assignment: Assignment) -> int:
        lease, prefix = task.lease, task.prefix
        rng = random.Random(f"{self.seed}:{lease.ordinal}:{lease.sibling}:{lease.attempt}")
        full = full_sample(lease.ordinal, lease.sibling, self.data_seed)
        have = len(prefix) if isinstance(prefix, TokenPayload) else 0
        fail_at = len(full) + 1
        if self.fail_rate and rng.random() < self.fail_rate:
            fail_at = rng.randint(have, len(full))
        crash_at = len(full) + 1
        if self.crash_rate and rng.random() < self.crash_rate:
            crash_at = rng.randint(have, len(full))
        new: list[int] = []
        counted = recorded = 0
        every = max(1, assignment.progress_every)
        for i in range(have, len(full)):
            if i == crash_at:
                os._exit(1)
            if i == fail_at:
                break
            if self.token_latency > 0:
                time.sleep(self.token_latency)
            new.append(full[i])
            if len(new) - recorded >= every and i + 1 < len(full):
                self._count(len(new) - counted)
                counted = recorded = len(new)
                r = self._report(progress=[(lease, self._payload(prefix, new, have, assignment))])
                if r.stale:
                    return 0  # fenced for good (released, or a lost incarnation's): stop
        self._count(len(new) - counted)
        if fail_at <= len(full) and have + len(new) < len(full):
            self._report(failed=[lease])
            return 0
        done = self._report(sealed=[(lease, self._payload(prefix, new, have, assignment))])
        return int(done.sealed)

    @staticmethod
    def _payload(prefix: Any, new: list[int], have: int, assignment: Assignment) -> TokenPayload:
        rest = TokenPayload.of(
            new, [logprob(have + j) for j in range(len(new))], assignment.version
        )
        return continue_sample(prefix, rest) if isinstance(prefix, TokenPayload) else rest

    def _count(self, tokens: int) -> None:
        if self.tokens_log is None or tokens <= 0:
            return
        fd = os.open(self.tokens_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{tokens}\n".encode())
        finally:
            os.close(fd)

    def _report(self, **report: Any) -> Any:
        generation, ledger = self._generation, self._ledger
        try:
            return ray.get(ledger.report.remote(**report), timeout=LEDGER_TIMEOUT)
        except RayActorError:
            deadline = time.monotonic() + self.rebind_wait
            while time.monotonic() < deadline:
                if self._generation != generation:
                    return ray.get(self._ledger.report.remote(**report), timeout=LEDGER_TIMEOUT)
                time.sleep(0.02)
            raise

    def pid(self) -> int:
        return os.getpid()

    def crash(self) -> None:
        os._exit(1)
