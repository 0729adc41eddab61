"""One life of the async GRPO demo: train, checkpoint every step, die any time.

``python -m frontier_adapters.examples grpo-worker --workdir DIR --mode frontier|legacy``
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

``--engine vllm`` generates with real vLLM (``AsyncLLM``, the CPU build from
``scripts/setup-vllm.sh`` on these machines) instead of the CPU engine: the
policy is the tiny random-weight Llama of ``tiny_llm`` (a transformers
model, trained here by torch with the same GRPO step), prompts are ``<s>``
and four of sixteen letter tokens, sampling is restricted to those sixteen
(``allowed_token_ids``, so a random policy scores 1/16 as on the CPU
engine), and the reward is 1 when the completion starts with the prompt's
*last* letter (the CPU engine's first-token task barely moves this Llama
within the demo's 48 steps; this one does). After every optimizer step the
new weights are pushed into the running engine (``VllmEngine.load_weights``:
``collective_rpc("reload_weights")`` with the prefix cache reset, requests
in flight frozen and resumed under the new weights). A resume starts a
fresh engine from the base model and pushes the checkpointed weights
before the first request. The engine's sockets stay on loopback
(``loopback_environ``); its unix sockets and the weight files go to
``$TMPDIR``, which ``frontier demo`` makes private to each life and removes
after it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import warnings
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import torch

from frontier_core import Effect, FailurePolicy, LedgerConfig, TrainLogWriter

from .._collector import StreamCollector
from ..rollout._buffer import ReplayBuffer
from ..rollout._engine import AsyncEngine, RequestOutputLike
from ..rollout._loop import Collector, RolloutEvent, RolloutLoop
from ..torch import make_seekable_loader
from ..torch._files import read_checkpoint, write_checkpoint
from ..torch._sources import SeekableSource
from .cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM
from .grpo import grpo_step, make_prompts, reward

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

    def __init__(
        self, inner: AsyncEngine, *, seed: int, fail_rate: float, stall_rate: float
    ) -> None:
        self.inner = inner
        self.seed = seed
        self.fail_rate = fail_rate
        self.stall_rate = stall_rate

    @property
    def fatal_errors(self) -> tuple[type[BaseException], ...]:
        return tuple(getattr(self.inner, "fatal_errors", ()))

    def check_event_loop(self) -> None:
        check = getattr(self.inner, "check_event_loop", None)
        if check is not None:
            check()

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

    def attempts(self, ordinal: int) -> int:
        return self._attempts.get(ordinal, 0)

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


@attrs.frozen
class WorkerArgs:
    """The arguments of one life (``python -m frontier_adapters.examples
    grpo-worker``, parsed in ``frontier_adapters.examples.__main__``)."""

    workdir: str
    mode: str = "frontier"  # or "legacy"
    engine: str = "cpu"  # or "vllm"
    prompts: int = 512
    seed: int = 0
    batch_size: int = 12  # loader batch (gap-fill)
    groups_per_step: int = 8
    num_generations: int = 8
    max_tokens: int = 8
    max_in_flight: int = 12
    #: Groups generating or buffered at most (default: one step's worth per
    #: step of allowed age, ``groups_per_step * (max_age + 1)``).
    max_ahead: int | None = None
    max_age: int = 2  # max_trajectory_age_steps
    timeout: float = 1.5  # seconds per request
    fail_rate: float = 0.02
    stall_rate: float = 0.01
    token_latency: float = 0.006
    lr: float = 3e-3
    step_pause: float = 0.0  # sleep after each step
    #: Chance that a resume does not restore the replay buffer (seeded per life).
    skip_buffer_restore: float = 0.25


#: The sixteen letters whose byte tokens are the vLLM demo's vocabulary.
LETTERS = "abcdefghijklmnop"


@attrs.define
class Backend:
    """What differs between the CPU engine and vLLM: the policy module
    (``model(tokens) -> logits``, trained by ``grpo_step``), the prompts,
    how a row becomes an engine prompt, the reward, the sampling
    parameters, and the engine with its weight push and shutdown."""

    model: torch.nn.Module
    prompts: list[list[int]]
    prompt_of: Any
    reward_fn: Any
    params: Any
    #: Build the engine (after the checkpoint's weights were loaded).
    start: Any
    engine: Any = None
    #: ``await push()`` after an optimizer step (None: the engine shares
    #: the module's weights).
    push: Any = None
    shutdown: Any = None


def _cpu_backend(args: WorkerArgs, lives: int) -> Backend:
    model = TinyCausalLM(vocab=VOCAB, seed=args.seed)

    def start() -> AsyncEngine:
        return CpuEngine(model, seed=args.seed * 1000 + lives, token_latency=args.token_latency)

    return Backend(
        model=model,
        prompts=make_prompts(args.prompts, vocab=VOCAB, seed=args.seed),
        prompt_of=list,
        reward_fn=reward,
        params=CpuSamplingParams(n=args.num_generations, max_tokens=args.max_tokens),
        start=start,
    )


class _LogitsOf(torch.nn.Module):
    """A transformers causal LM as ``grpo_step`` calls a policy: token ids
    in, logits out."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.lm(input_ids=tokens).logits
        return logits


def _vllm_backend(args: WorkerArgs) -> Backend:
    import importlib
    import tempfile

    from ..rollout._vllm import vllm_sampling_params
    from . import tiny_llm

    os.environ.update(tiny_llm.OFFLINE_ENV)
    # stdout is the demo's protocol (ready, step, done): vLLM logs to stdout
    # by default.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    transformers = importlib.import_module("transformers")
    directory = tiny_llm.tiny_llm()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    letters = [int(t) for t in tokenizer.convert_tokens_to_ids(list(LETTERS))]
    lm = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    model = _LogitsOf(lm)
    # The CPU demo's prompts (ids 2..15), spelt in letters, after <s>.
    prompts = [
        [tiny_llm.BOS_ID, *(letters[t] for t in row)]
        for row in make_prompts(args.prompts, vocab=VOCAB, seed=args.seed)
    ]
    # Private to this life: frontier demo points TMPDIR at a directory it
    # removes after the life, SIGKILLed or not.
    scratch = Path(tempfile.mkdtemp(prefix="frontier-vllm-"))
    weights = scratch / "weights"
    backend = Backend(
        model=model,
        prompts=prompts,
        prompt_of=lambda row: {"prompt_token_ids": list(row)},
        reward_fn=lambda prompt, completion: reward(prompt[::-1], completion),
        params=vllm_sampling_params(
            n=args.num_generations,
            max_tokens=args.max_tokens,
            temperature=1.0,
            allowed_token_ids=letters,
        ),
        start=None,
    )

    def start() -> AsyncEngine:
        engine = tiny_llm.tiny_vllm_engine(
            scratch / "rpc", seed=args.seed, max_model_len=256, max_num_batched_tokens=256
        )
        backend.engine = engine

        async def push() -> None:
            tiny_llm.save_weights(lm, weights)
            await engine.load_weights(weights)

        def shutdown() -> None:
            engine.shutdown(timeout=1)
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)

        backend.push = push
        backend.shutdown = shutdown
        started: AsyncEngine = engine
        return started

    backend.start = start
    return backend


def run(args: WorkerArgs) -> int:
    """Resume from ``args.workdir`` (or start) and train to the end of the stream."""
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    torch.set_num_threads(1)
    if args.engine not in ("cpu", "vllm"):
        raise ValueError(f"engine must be cpu or vllm, got {args.engine!r}")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    fingerprint = f"grpo-demo;prompts={args.prompts};seed={args.seed};mode={args.mode}"
    if args.engine != "cpu":
        fingerprint += f";engine={args.engine}"
    ckpt_root = workdir / CKPT_DIR
    loaded = read_checkpoint(
        ckpt_root, fingerprint=fingerprint, require=["state", "model", "optim"]
    )
    lives = 1 if loaded is None else loaded.json_parts["state"]["lives"] + 1
    torch.manual_seed(args.seed)
    backend = _cpu_backend(args, lives) if args.engine == "cpu" else _vllm_backend(args)
    model = backend.model
    loader = make_seekable_loader(
        backend.prompts, batch_size=args.batch_size, seed=args.seed, shuffle=True, epochs=1
    )
    source = SeekableSource(loader)
    optim = torch.optim.Adam(model.parameters(), lr=args.lr)
    buffer = ReplayBuffer(args.max_age)
    log_path = workdir / LOG_NAME
    frontier = args.mode == "frontier"
    config = LedgerConfig(
        stream_len=args.prompts,
        on_failure=FailurePolicy.RETRY,
        max_attempts=MAX_ATTEMPTS,
        fingerprint=fingerprint,
    )
    collector: StreamCollector | LiveCursorCollector
    counters = {"failed": 0, "timeouts": 0, "requeued": 0, "dropped": 0, "evicted": 0}
    if loaded is None:
        step, rewards = 0, []
        fresh = not log_path.exists() or log_path.stat().st_size == 0
        log = TrainLogWriter(log_path, resume_records=None if fresh else 0)
        collector = (
            StreamCollector(source, config)
            if frontier
            else LiveCursorCollector(source, start=0, retry=True)
        )
    else:
        state = loaded.json_parts["state"]
        step, rewards = loaded.step, list(state["rewards"])
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
        backend.start(),
        seed=args.seed * 1000 + lives,
        fail_rate=args.fail_rate,
        stall_rate=args.stall_rate,
    )
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

    async def push() -> None:
        if backend.push is not None:
            await backend.push()
            counters["weight_pushes"] = counters.get("weight_pushes", 0) + 1

    async def train() -> None:
        nonlocal step
        rollout_collector: Collector = collector
        if loaded is not None:
            await push()  # the engine starts from the base weights
        async with RolloutLoop(
            rollout_collector,
            _as_engine(engine),
            buffer,
            prompt_of=backend.prompt_of,
            sampling_params=backend.params,
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
                stats = grpo_step(cast(Any, model), optim, groups, reward_fn=backend.reward_fn)
                ordinals = [g.ordinal for g in groups]
                collector.trained(ordinals)
                log.step(step, ordinals)
                step += 1
                rewards.append(round(stats.mean_reward, 4))
                await push()
                rollout.wake()
                checkpoint()
                print(
                    f"step {step} groups={len(groups)} reward={stats.mean_reward:.3f} "
                    f"in_flight={rollout.in_flight}",
                    flush=True,
                )
                if args.step_pause:
                    await asyncio.sleep(args.step_pause)

    try:
        asyncio.run(train())
    finally:
        if backend.shutdown is not None:
            backend.shutdown()
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
