"""One life of the async GRPO demo: train, checkpoint every step, die any time.

``python -m frontier_adapters.examples.grpo_worker --workdir DIR --mode frontier|legacy``
resumes from ``DIR``'s latest checkpoint (or starts fresh) and trains until
the prompt stream is done, printing ``ready``, one ``step`` line after each
committed checkpoint and ``done`` at the end. ``frontier demo`` SIGKILLs it
at random moments and restarts it.

The pipeline: a seekable loader over the embedded prompts feeds a collector;
a ``RolloutLoop`` keeps ``max_in_flight`` prompts generating on a
``CpuEngine`` (wrapped to inject failures and stalls, so the retry and
timeout paths run for real); landed groups wait in a ``ReplayBuffer`` with
an age limit; each step trains the oldest groups with ``grpo_step``, writes
the training-data log, and commits an atomic checkpoint (collector state,
buffer, model, optimizer, log record count, reward curve).

``--mode legacy`` runs the same loop with the checkpoint NeMo-RL had before
the fix: the loader's live cursor and the buffer. A resume continues from the
cursor, so the prompts that were generating or waiting in the gap-fill
remainder at the checkpoint are never trained. Failure attempts live in
memory only, as they did.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import warnings
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from frontier_core import Effect, FailurePolicy, LedgerConfig, TrainLogWriter

from .._collector import StreamCollector
from ..rollout._buffer import ReplayBuffer
from ..rollout._engine import AsyncEngine, RequestOutputLike
from ..rollout._loop import Collector, RolloutEvent, RolloutLoop
from ..torch import make_seekable_loader
from ..torch._files import read_checkpoint, require_parts, write_checkpoint
from ..torch._sources import SeekableSource
from .cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM
from .grpo import grpo_step, make_prompts

LOG_NAME = "train_log.jsonl"
CKPT_DIR = "checkpoints"
SUMMARY_NAME = "summary.json"
VOCAB = 16
MAX_ATTEMPTS = 3


def _unit(*parts: object) -> float:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


class FlakyEngine:
    """Wraps an engine: a seeded fraction of requests raise mid-way (a dead
    worker) and another stalls until the loop's timeout cancels it."""

    def __init__(self, inner: CpuEngine, *, seed: int, fail_rate: float, stall_rate: float) -> None:
        self.inner = inner
        self.seed = seed
        self.fail_rate = fail_rate
        self.stall_rate = stall_rate

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutputLike]:
        u = _unit(self.seed, "flaky", request_id)
        if u < self.fail_rate:
            await asyncio.sleep(0.001)
            raise RuntimeError("injected engine failure")
        if u < self.fail_rate + self.stall_rate:
            await asyncio.sleep(3600.0)
        async for out in self.inner.generate(prompt, sampling_params, request_id):
            yield out


class LiveCursorCollector:
    """The legacy binding: ordinals are counted, nothing is stamped in a
    ledger, and the checkpoint is the loader's live cursor (everything it
    has yielded), as before the fix."""

    def __init__(self, source: SeekableSource, *, start: int, retry: bool) -> None:
        self.source = source
        self.cursor = start
        self.retry = retry
        self._pending: deque[tuple[int, Any]] = deque()
        self._retry: deque[tuple[int, Any]] = deque()
        self._rows: dict[int, Any] = {}
        self._attempts: dict[int, int] = {}
        self._done = False
        if start:
            source.sampler.seek(start)

    @property
    def exhausted(self) -> bool:
        return self._done and not self._pending and not self._retry

    def take(self, n: int) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        while len(out) < n:
            if self._retry:
                out.append(self._retry.popleft())
            elif self._pending:
                out.append(self._pending.popleft())
            elif self._done:
                break
            else:
                got = self.source.pull()
                if got is None:
                    self._done = True
                    continue
                for i, row in enumerate(got.rows):
                    self._pending.append((got.first + i, row))
                self.cursor = got.first + len(got.rows)
        for o, row in out:
            self._rows[o] = row
        return out

    def landed(self, ordinals: Iterable[int]) -> None:
        pass

    def trained(self, ordinals: Iterable[int]) -> None:
        for o in ordinals:
            self._rows.pop(o, None)

    def failed(self, ordinals: Iterable[int]) -> Effect:
        requeued: list[int] = []
        dropped: list[int] = []
        for o in ordinals:
            n = self._attempts.get(o, 0) + 1
            if self.retry and n < MAX_ATTEMPTS:
                self._attempts[o] = n
                requeued.append(o)
                self._retry.append((o, self._rows[o]))
            else:
                dropped.append(o)
                self._rows.pop(o, None)
        return Effect(event="fail", requeued=tuple(requeued), dropped=tuple(dropped))

    def evicted(self, ordinals: Iterable[int]) -> Effect:
        return self.failed(ordinals)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", choices=["frontier", "legacy"], default="frontier")
    p.add_argument("--prompts", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=12, help="loader batch (gap-fill)")
    p.add_argument("--groups-per-step", type=int, default=8)
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--max-in-flight", type=int, default=12)
    p.add_argument(
        "--max-ahead",
        type=int,
        default=None,
        help="groups generating or buffered at most (default: one step's worth per "
        "step of allowed age, groups_per_step * (max_age + 1))",
    )
    p.add_argument("--max-age", type=int, default=2, help="max_trajectory_age_steps")
    p.add_argument("--timeout", type=float, default=1.5, help="seconds per request")
    p.add_argument("--fail-rate", type=float, default=0.02)
    p.add_argument("--stall-rate", type=float, default=0.01)
    p.add_argument("--token-latency", type=float, default=0.006)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--step-pause", type=float, default=0.0, help="sleep after each step")
    p.add_argument(
        "--skip-buffer-restore",
        type=float,
        default=0.25,
        help="chance that a resume does not restore the replay buffer (seeded per life)",
    )


def run(args: argparse.Namespace) -> int:
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    torch.set_num_threads(1)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    prompts = make_prompts(args.prompts, vocab=VOCAB, seed=args.seed)
    fingerprint = f"grpo-demo;prompts={args.prompts};seed={args.seed};mode={args.mode}"
    loader = make_seekable_loader(
        prompts, batch_size=args.batch_size, seed=args.seed, shuffle=True, epochs=1
    )
    source = SeekableSource(loader)
    torch.manual_seed(args.seed)
    model = TinyCausalLM(vocab=VOCAB, seed=args.seed)
    optim = torch.optim.Adam(model.parameters(), lr=args.lr)
    buffer = ReplayBuffer(args.max_age)
    log_path = workdir / LOG_NAME
    ckpt_root = workdir / CKPT_DIR
    frontier = args.mode == "frontier"
    config = LedgerConfig(
        stream_len=args.prompts,
        on_failure=FailurePolicy.RETRY,
        max_attempts=MAX_ATTEMPTS,
        fingerprint=fingerprint,
    )
    collector: StreamCollector | LiveCursorCollector
    loaded = read_checkpoint(ckpt_root, fingerprint=fingerprint)
    counters = {"failed": 0, "timeouts": 0, "requeued": 0, "dropped": 0, "evicted": 0}
    if loaded is None:
        step, lives, rewards = 0, 1, []
        fresh = not log_path.exists() or log_path.stat().st_size == 0
        log = TrainLogWriter(log_path, resume_records=None if fresh else 0)
        collector = (
            StreamCollector(source, config)
            if frontier
            else LiveCursorCollector(source, start=0, retry=True)
        )
    else:
        require_parts(loaded, ["state", "model", "optim"])
        state = loaded.json_parts["state"]
        step, lives, rewards = loaded.step, state["lives"] + 1, list(state["rewards"])
        counters = dict(state["counters"])
        # load_replay_buffer=False regenerates the buffered window (no
        # short-rollout bias); the legacy cursor just loses it, as in #3583.
        load_buffer = _unit(args.seed, "restore", lives) >= args.skip_buffer_restore
        counters["buffer_skipped"] = counters.get("buffer_skipped", 0) + (not load_buffer)
        if frontier:
            collector = StreamCollector(source, config)
            collector.resume(state["collector"], load_replay_buffer=load_buffer)
        else:
            collector = LiveCursorCollector(source, start=state["cursor"], retry=True)
        if load_buffer:
            buffer.load_state_dict(state["buffer"])
        model.load_state_dict(loaded.tensor_parts["model"])
        optim.load_state_dict(loaded.tensor_parts["optim"])
        log = TrainLogWriter(log_path, resume_records=state["records"])

    engine = FlakyEngine(
        CpuEngine(model, seed=args.seed * 1000 + lives, token_latency=args.token_latency),
        seed=args.seed * 1000 + lives,
        fail_rate=args.fail_rate,
        stall_rate=args.stall_rate,
    )
    params = CpuSamplingParams(n=args.num_generations, max_tokens=args.max_tokens)
    max_ahead = args.max_ahead
    if max_ahead is None:
        max_ahead = args.groups_per_step * (args.max_age + 1)

    def on_event(ev: RolloutEvent) -> None:
        if ev.kind == "fail":
            counters["failed"] += 1
            counters["timeouts"] += ev.detail == "timeout"
        elif ev.kind == "requeue":
            counters["requeued"] += 1

    def on_dropped(ordinals: Sequence[int]) -> None:
        counters["dropped"] += len(ordinals)
        log.dropped(ordinals)

    def checkpoint() -> None:
        log.sync()
        state: dict[str, Any] = {
            "buffer": buffer.state_dict(),
            "records": log.records,
            "lives": lives,
            "rewards": rewards,
            "counters": counters,
        }
        if isinstance(collector, StreamCollector):
            state["collector"] = collector.checkpoint_state(save_buffer=True)
        else:
            state["cursor"] = collector.cursor  # the live cursor: ahead of training
        write_checkpoint(
            ckpt_root,
            step,
            fingerprint=fingerprint,
            json_parts={"state": state},
            tensor_parts={"model": model.state_dict(), "optim": optim.state_dict()},
        )

    async def train() -> None:
        nonlocal step
        rollout_collector: Collector = collector
        async with RolloutLoop(
            rollout_collector,
            _as_engine(engine),
            buffer,
            prompt_of=list,
            sampling_params=params,
            max_in_flight=args.max_in_flight,
            max_ahead=max_ahead,
            timeout=args.timeout,
            version=lambda: step,
            on_dropped=on_dropped,
            on_event=on_event,
        ) as rollout:
            print(f"ready step={step} lives={lives}", flush=True)
            while True:
                await rollout.until(lambda: len(buffer) >= args.groups_per_step or rollout.idle)
                stale = buffer.stale(step)
                if stale:
                    buffer.evict(stale)
                    counters["evicted"] += len(stale)
                    effect = collector.evicted(stale)
                    counters["requeued"] += len(effect.requeued)
                    on_dropped(effect.dropped)
                    rollout.wake()
                    continue
                if not len(buffer):
                    if rollout.idle:
                        break
                    continue
                groups = buffer.take(args.groups_per_step)
                stats = grpo_step(model, optim, groups)
                ordinals = [g.ordinal for g in groups]
                collector.trained(ordinals)
                log.step(step, ordinals)
                step += 1
                rewards.append(round(stats.mean_reward, 4))
                rollout.wake()
                checkpoint()
                print(
                    f"step {step} groups={len(groups)} reward={stats.mean_reward:.3f}", flush=True
                )
                if args.step_pause:
                    await asyncio.sleep(args.step_pause)

    asyncio.run(train())
    if isinstance(collector, StreamCollector) and not collector.drained:
        raise RuntimeError(f"stream not drained: cut {collector.ledger.cut}")
    log.close()
    summary = {"steps": step, "lives": lives, "rewards": rewards, "counters": counters}
    tmp = workdir / "summary.json.tmp"
    tmp.write_text(json.dumps(summary))
    os.replace(tmp, workdir / SUMMARY_NAME)
    print(f"done steps={step}", flush=True)
    return 0


def _as_engine(engine: FlakyEngine) -> AsyncEngine:
    return engine


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m frontier_adapters.examples.grpo_worker")
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
