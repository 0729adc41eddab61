"""Rollout worker actors for the rig's Ray job, the benchmark and the tests.

They follow the worker contract of ``frontier_adapters.ray``:
``generate(ledger, assignment)`` generates the assignment's sibling tasks,
reports them to the ledger actor (with the assignment's incarnation) and
returns the seals the ledger accepted.

``StandInRollout``: sibling ``s`` of prompt ``o`` is the stand-in engine's
fixed token sequence of a heavy-tailed length (``_sample_audit.full_sample``),
generated one token per ``token_latency`` seconds, continued from the
task's prefix, with a progress report every ``progress_every`` tokens.
``CpuEngineRollout`` samples each task's sibling from the examples' CPU
engine.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from frontier_core.journal import TokenPayload, continue_sample

from ..ray import Assignment, SampleTask
from ..ray._actors import LEDGER_TIMEOUT
from ._sample_audit import full_sample


class CpuEngineRollout:
    """A rollout worker on the rollout binding's ``CpuEngine``: an
    assignment's tasks (prompts are lists of token ids) generate
    concurrently, one sample each, and are sealed in one report. Imports
    torch in the worker."""

    def __init__(self, *, seed: int = 0, max_tokens: int = 8, token_latency: float = 0.0) -> None:
        from ..examples.cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM

        self.engine = CpuEngine(TinyCausalLM(seed=seed), seed=seed, token_latency=token_latency)
        self.params = CpuSamplingParams(n=1, max_tokens=max_tokens)

    def generate(self, ledger: Any, assignment: Assignment) -> int:
        async def one(task: SampleTask) -> TokenPayload:
            final: Any = None
            request = "o{}-s{}-a{}".format(*task.lease)
            async for out in self.engine.generate(list(task.row), self.params, request):
                final = out
            tokens = list(final.outputs[0].token_ids)
            return TokenPayload.of(tokens, [0.0] * len(tokens), assignment.version)

        async def run() -> list[TokenPayload]:
            return list(await asyncio.gather(*(one(t) for t in assignment.tasks)))

        samples = asyncio.run(run())
        done = ray.get(
            ledger.report.remote(
                sealed=list(zip(assignment.leases, samples, strict=True)),
                incarnation=assignment.incarnation,
            ),
            timeout=LEDGER_TIMEOUT,
        )
        return int(done.sealed)

    def pid(self) -> int:
        return os.getpid()

    def crash(self) -> None:
        os._exit(1)


def logprob(position: int) -> float:
    """The stand-in's log-prob of the token at ``position`` of a sample."""
    return -0.05 - (position % 7) / 10


class StandInRollout:
    """A rollout worker without a model (see the module doc).

    ``fail_rate`` fails a task (after some tokens), ``error_rate`` raises
    out of the call at a task (an engine error: the fleet releases the
    assignment's unreported leases) and ``crash_rate`` kills the process
    (``os._exit``) in the middle of one. ``tokens_log`` (a file
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
        error_rate: float = 0.0,
        tokens_log: str | None = None,
        rebind_wait: float = 10.0,
    ) -> None:
        self.seed = seed
        self.data_seed = data_seed
        self.token_latency = token_latency
        self.fail_rate = fail_rate
        self.crash_rate = crash_rate
        self.error_rate = error_rate
        self.tokens_log = tokens_log
        self.rebind_wait = rebind_wait
        self._ledger: Any = None
        #: Every ledger actor the worker was told of, in order.
        self._known: list[Any] = []
        self._generation = 0

    def set_ledger(self, ledger: Any) -> None:
        # Only a ledger actor not heard of yet is newer: a ``generate``
        # call of a lost incarnation that this worker's threads run after
        # the fleet's ``set_ledger`` must not send it back to the dead one.
        if ledger not in self._known:
            self._known.append(ledger)
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
            crash_at = rng.randint(have, len(full) - 1)  # inside the generation
        if self.error_rate and rng.random() < self.error_rate:
            raise RuntimeError(f"injected generation error at lease {tuple(lease)}")
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
                payload = self._payload(prefix, new, have, assignment)
                r = self._report(assignment, progress=[(lease, payload)])
                if r.stale:
                    return 0  # fenced for good (released, or a lost incarnation's): stop
        self._count(len(new) - counted)
        if fail_at <= len(full) and have + len(new) < len(full):
            self._report(assignment, failed=[lease])
            return 0
        sample = self._payload(prefix, new, have, assignment)
        done = self._report(assignment, sealed=[(lease, sample)])
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

    def _report(self, assignment: Assignment, **report: Any) -> Any:
        report["incarnation"] = assignment.incarnation
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
