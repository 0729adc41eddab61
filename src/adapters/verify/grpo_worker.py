"""One life of the async GRPO demo: train, checkpoint every step, die any time.

``python -m frontier_adapters.verify grpo-worker --workdir DIR --mode frontier|legacy``
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

``--journal`` runs the life sample by sample instead (``run_journal``, CPU
engine, frontier mode): a ``StreamCollector`` over a ``Ledger``, a
``RolloutLoop`` that sends each sibling as a request of its own,
streamed, and a ``RolloutJournal`` with group commit that records each
sealed sample and each running one every ``--progress-every`` tokens; each
checkpoint marks the journal first and compacts it after, and a resume
recovers from the checkpoint and the journal (``--reuse``). It writes a
per-sample training log and a generation log per life, which ``frontier
demo --journal`` audits sample by sample, and ``--kill-at`` stops it at a
chosen point for the demo to SIGKILL (``KillPoint``).

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
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import torch

from frontier_core import (
    Checkpoint,
    Effect,
    FailurePolicy,
    Lease,
    LedgerConfig,
    TrainLogWriter,
)
from frontier_core.journal import (
    CommitPolicy,
    Reuse,
)

from .._collector import StreamCollector, Taken
from ..examples.cpu_engine import CUMULATIVE, CpuEngine, CpuSamplingParams, TinyCausalLM
from ..examples.grpo import grpo_step, make_prompts, reward
from ..journal import RolloutJournal, read_journal
from ..rollout._buffer import ReplayBuffer
from ..rollout._engine import AsyncEngine, RequestOutputLike
from ..rollout._loop import Group, RolloutEvent, RolloutLoop
from ..torch import make_seekable_loader
from ..torch._checkpoints import read_checkpoint, write_checkpoint
from ..torch._sources import SeekableSource
from ._files import (
    append_line,
    checkpoint_journal,
    drop_torn_line,
    fresh_train_log,
    lineage,
    write_atomic,
)
from ._killpoints import KillPoint, KillPointJournal

LOG_NAME = "train_log.jsonl"
CKPT_DIR = "checkpoints"
SUMMARY_NAME = "summary.json"
VOCAB = 16
MAX_FAILURES = 3


def _unit(*parts: object) -> float:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


class _Wrapper:
    """An engine around ``inner``: a subclass has its own ``generate``; the
    fatal errors, the event-loop check and ``abort`` are the inner
    engine's."""

    def __init__(self, inner: AsyncEngine) -> None:
        self.inner = inner

    @property
    def fatal_errors(self) -> tuple[type[BaseException], ...]:
        return tuple(getattr(self.inner, "fatal_errors", ()))

    def check_event_loop(self) -> None:
        check = getattr(self.inner, "check_event_loop", None)
        if check is not None:
            check()

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)


class FlakyEngine(_Wrapper):
    """Wraps an engine: a seeded fraction of requests raise mid-way (a dead
    worker) and another stalls until the loop's timeout cancels it."""

    def __init__(
        self, inner: AsyncEngine, *, seed: int, fail_rate: float, stall_rate: float
    ) -> None:
        super().__init__(inner)
        self.seed = seed
        self.fail_rate = fail_rate
        self.stall_rate = stall_rate

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

    def failures(self, ordinal: int) -> int:
        return self._attempts.get(ordinal, 0)

    def take_samples(self, n: int) -> list[Taken]:
        return [Taken(o, row, (), (), False) for o, row in self.take(n)]

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
            if self.retry and n < MAX_FAILURES:
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
    """The arguments of one life (``python -m frontier_adapters.verify
    grpo-worker``, parsed in ``frontier_adapters.verify.__main__``)."""

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
    #: The sample-level life (``run_journal``): a ``StreamCollector``, a
    #: ``RolloutLoop`` scheduling one request per sibling and a
    #: ``RolloutJournal`` (frontier mode and the CPU engine only).
    journal: bool = False
    #: What a resume reuses of the journal: ``age`` (tokens at most
    #: ``max_age`` updates old along the lineage, ``Reuse.within``),
    #: ``everything``, or ``nothing`` (coverage only: every unresolved
    #: sample is generated again; the journal is still written).
    reuse: str = "age"
    #: New tokens between two progress records of a running sample (0: none).
    progress_every: int = 2
    #: Group commit: an append waits at most this long for its fsync.
    commit_delay: float = 0.005
    #: ``KIND:STEPS:COUNT``: a kill point (``KillPoint``) for ``frontier demo``.
    kill_at: str = ""


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

    from ..examples import tiny_llm
    from ..rollout._vllm import vllm_sampling_params

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


@attrs.define
class _Life:
    """What both kinds of life (``run``, ``run_journal``) set up, resume and
    train the same way: the policy (``backend``) and its optimizer, the
    seekable source over the prompts, the replay buffer, the training-data
    log, the step, the reward curve and the counters, fresh or from the
    checkpoint ``loaded``. A life adds its collector, and what it
    checkpoints besides (``checkpoint``)."""

    args: WorkerArgs
    workdir: Path
    fingerprint: str
    lives: int
    backend: Backend
    source: SeekableSource
    optim: torch.optim.Optimizer
    buffer: ReplayBuffer
    log: TrainLogWriter
    loaded: Any
    step: int
    rewards: list[float]
    counters: dict[str, int]
    #: Whether the resume restores the replay buffer (seeded per life).
    load_buffer: bool

    @classmethod
    def open(cls, args: WorkerArgs, fingerprint: str, lives: Callable[[Any], int]) -> _Life:
        """Read the latest checkpoint of ``fingerprint`` (``None``: a fresh
        start), number the life (``lives(loaded)``) and build or resume
        what it shares."""
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        loaded = read_checkpoint(
            workdir / CKPT_DIR, fingerprint=fingerprint, require=["state", "model", "optim"]
        )
        life = lives(loaded)
        torch.manual_seed(args.seed)
        backend = _cpu_backend(args, life) if args.engine == "cpu" else _vllm_backend(args)
        loader = make_seekable_loader(
            backend.prompts, batch_size=args.batch_size, seed=args.seed, shuffle=True, epochs=1
        )
        optim = torch.optim.Adam(backend.model.parameters(), lr=args.lr)
        buffer = ReplayBuffer(args.max_age)
        log_path = workdir / LOG_NAME
        counters = {"failed": 0, "timeouts": 0, "requeued": 0, "dropped": 0, "evicted": 0}
        if loaded is None:
            step, rewards, load_buffer = 0, [], False
            log = fresh_train_log(log_path)
        else:
            state = loaded.json_parts["state"]
            step, rewards = loaded.step, list(state["rewards"])
            counters = dict(state["counters"])
            # Without the buffer the collector regenerates the buffered
            # window (no short-rollout bias); the legacy cursor just loses
            # it, as in #3583.
            load_buffer = _unit(args.seed, "restore", life) >= args.skip_buffer_restore
            counters["buffer_skipped"] = counters.get("buffer_skipped", 0) + (not load_buffer)
            if load_buffer:
                buffer.load_state_dict(state["buffer"])
            backend.model.load_state_dict(loaded.tensor_parts["model"])
            optim.load_state_dict(loaded.tensor_parts["optim"])
            log = TrainLogWriter(log_path, resume_records=state["records"])
        return cls(
            args=args,
            workdir=workdir,
            fingerprint=fingerprint,
            lives=life,
            backend=backend,
            source=SeekableSource(loader),
            optim=optim,
            buffer=buffer,
            log=log,
            loaded=loaded,
            step=step,
            rewards=rewards,
            counters=counters,
            load_buffer=load_buffer,
        )

    @property
    def state(self) -> dict[str, Any]:
        """The resumed checkpoint's state part (a resumed life only)."""
        state: dict[str, Any] = self.loaded.json_parts["state"]
        return state

    def config(self, samples: int = 1) -> LedgerConfig:
        return LedgerConfig(
            stream_len=self.args.prompts,
            samples=samples,
            on_failure=FailurePolicy.RETRY,
            max_failures=MAX_FAILURES,
            fingerprint=self.fingerprint,
        )

    def engine(self, inner: AsyncEngine) -> AsyncEngine:
        """``inner`` with this life's injected failures and stalls."""
        a = self.args
        flaky = FlakyEngine(
            inner, seed=a.seed * 1000 + self.lives, fail_rate=a.fail_rate, stall_rate=a.stall_rate
        )
        return _as_engine(flaky)

    @property
    def max_ahead(self) -> int:
        a = self.args
        return a.max_ahead if a.max_ahead is not None else a.groups_per_step * (a.max_age + 1)

    def on_event(self, ev: RolloutEvent) -> None:
        if ev.kind == "fail":
            self.counters["failed"] += 1
            self.counters["timeouts"] += ev.detail == "timeout"
        elif ev.kind == "requeue":
            self.counters["requeued"] += 1

    def on_dropped(self, ordinals: Sequence[int]) -> None:
        self.counters["dropped"] += len(ordinals)
        self.log.dropped(ordinals)

    def version(self) -> int:
        return self.step

    def checkpoint(self, parts: dict[str, Any]) -> None:
        """Write the checkpoint of this step: the shared state, the life's
        ``parts``, the model and the optimizer (the training-data log must
        be synced first: a checkpoint never counts a step it lacks)."""
        state: dict[str, Any] = {
            "buffer": self.buffer.state_dict(),
            "records": self.log.records,
            "lives": self.lives,
            "rewards": self.rewards,
            "counters": self.counters,
            **parts,
        }
        model = self.backend.model
        write_checkpoint(
            self.workdir / CKPT_DIR,
            self.step,
            fingerprint=self.fingerprint,
            json_parts={"state": state},
            tensor_parts={"model": model.state_dict(), "optim": self.optim.state_dict()},
        )

    async def push(self) -> None:
        """The new weights into the engine (the CPU engine shares them)."""
        if self.backend.push is not None:
            await self.backend.push()
            self.counters["weight_pushes"] = self.counters.get("weight_pushes", 0) + 1

    async def train(
        self,
        rollout: RolloutLoop,
        collector: StreamCollector | LiveCursorCollector,
        checkpoint: Callable[[], None],
        *,
        evicted: Callable[[list[int]], None] | None = None,
        trained: Callable[[list[Group]], None] | None = None,
    ) -> None:
        """Train until the rollout is idle and the buffer empty: evict the
        stale groups (``evicted`` first hears of them), else train the
        oldest (``trained`` hears of them before the step advances), push
        the weights, and ``checkpoint()`` every step. Raises
        ``RolloutStalledError`` if the rollout neither fills a step nor goes
        idle for 20 request timeouts (at least 60 s)."""
        args, buffer, counters = self.args, self.buffer, self.counters
        # Every request ends within its timeout, so a wait that passes many
        # of them is a stuck loop: fail the life (RolloutStalledError) and
        # let the demo report it, rather than idle until its deadline.
        stalled = max(60.0, 20 * args.timeout)
        while True:
            await rollout.until(
                lambda: len(buffer) >= args.groups_per_step or rollout.idle, timeout=stalled
            )
            stale = buffer.stale(self.step)
            if stale:
                buffer.evict(stale)
                if evicted is not None:
                    evicted(stale)
                counters["evicted"] += len(stale)
                effect = collector.evicted(stale)
                counters["requeued"] += len(effect.requeued)
                self.on_dropped(effect.dropped)
                rollout.wake()
                continue
            if not len(buffer):
                if rollout.idle:
                    break
                continue
            groups = buffer.take(args.groups_per_step)
            model = cast(Any, self.backend.model)
            stats = grpo_step(model, self.optim, groups, reward_fn=self.backend.reward_fn)
            ordinals = [g.ordinal for g in groups]
            collector.trained(ordinals)
            self.log.step(self.step, ordinals)
            if trained is not None:
                trained(groups)
            self.step += 1
            self.rewards.append(round(stats.mean_reward, 4))
            await self.push()
            rollout.wake()
            checkpoint()
            print(
                f"step {self.step} groups={len(groups)} reward={stats.mean_reward:.3f} "
                f"in_flight={rollout.in_flight}",
                flush=True,
            )
            if args.step_pause:
                await asyncio.sleep(args.step_pause)

    def finish(self) -> int:
        """Close the log, write the summary, print ``done``; returns 0."""
        self.log.close()
        summary = {
            "steps": self.step,
            "lives": self.lives,
            "rewards": self.rewards,
            "counters": self.counters,
        }
        write_atomic(self.workdir / SUMMARY_NAME, json.dumps(summary).encode())
        print(f"done steps={self.step}", flush=True)
        return 0


def run(args: WorkerArgs) -> int:
    """Resume from ``args.workdir`` (or start) and train to the end of the stream."""
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    torch.set_num_threads(1)
    if args.engine not in ("cpu", "vllm"):
        raise ValueError(f"engine must be cpu or vllm, got {args.engine!r}")
    if args.journal:
        return run_journal(args)
    fingerprint = f"grpo-demo;prompts={args.prompts};seed={args.seed};mode={args.mode}"
    if args.engine != "cpu":
        fingerprint += f";engine={args.engine}"
    life = _Life.open(
        args,
        fingerprint,
        lambda loaded: 1 if loaded is None else loaded.json_parts["state"]["lives"] + 1,
    )
    frontier = args.mode == "frontier"
    collector: StreamCollector | LiveCursorCollector
    if frontier:
        collector = StreamCollector(life.source, life.config())
        if life.loaded is not None:
            collector.resume(
                life.state["collector"], load_replay_buffer=life.load_buffer, sealed=()
            )
    else:
        start = 0 if life.loaded is None else life.state["cursor"]
        collector = LiveCursorCollector(life.source, start=start, retry=True)

    def checkpoint() -> None:
        life.log.sync()
        if isinstance(collector, StreamCollector):
            life.checkpoint({"collector": collector.checkpoint_state(save_buffer=True)})
        else:
            life.checkpoint({"cursor": collector.cursor})  # the live cursor: ahead of training

    engine = life.engine(life.backend.start())

    async def train() -> None:
        if life.loaded is not None:
            await life.push()  # the engine starts from the base weights
        async with RolloutLoop(
            collector,
            engine,
            life.buffer,
            prompt_of=life.backend.prompt_of,
            sampling_params=life.backend.params,
            max_in_flight=args.max_in_flight,
            max_ahead=life.max_ahead,
            timeout=args.timeout,
            version=life.version,
            on_dropped=life.on_dropped,
            on_event=life.on_event,
        ) as rollout:
            print(f"ready step={life.step} lives={life.lives}", flush=True)
            await life.train(rollout, collector, checkpoint)

    try:
        asyncio.run(train())
    finally:
        if life.backend.shutdown is not None:
            life.backend.shutdown()
    if isinstance(collector, StreamCollector) and not collector.drained:
        raise RuntimeError(f"stream not drained: cut {collector.ledger.cut}")
    return life.finish()


def _as_engine(engine: FlakyEngine) -> AsyncEngine:
    return engine


# -- the sample-level life (--journal) ------------------------------------------------

#: The per-sample training log of a sample-level life (``SampleLog``).
SAMPLES_LOG = "samples.jsonl"
JOURNAL_NAME = "journal"
#: Life ``k``'s generation log (``TokenLog``): every token the engine yielded.
GENERATED_LOG = "generated-{life}.jsonl"
#: The CPU demo's prompts are this many tokens (``make_prompts``' default).
PROMPT_LEN = 4
REUSE = ("age", "everything", "nothing")


class TokenLog(_Wrapper):
    """Wraps the engine and appends every token it yields to this life's
    generation log: one JSON line per output that brought new tokens,
    ``{"r": request id, "at": position in the sample, "t": [token ids]}``
    (a continued sample's positions start after its prefix), with ``"f":
    finish reason`` on the sample's last line. ``frontier
    demo`` counts the tokens generated from these logs and checks every
    trained sample against them. One ``write`` per line and no fsync: a
    SIGKILL loses no written byte (the page cache outlives the process)."""

    def __init__(self, inner: AsyncEngine, path: Path) -> None:
        super().__init__(inner)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutputLike]:
        ids = prompt["prompt_token_ids"] if isinstance(prompt, dict) else prompt
        start = len(ids) - PROMPT_LEN
        seen: dict[int, int] = {}
        ended: set[int] = set()
        async for out in self.inner.generate(prompt, sampling_params, request_id):
            for c in out.outputs:
                have = seen.get(c.index, 0)
                new = [int(t) for t in c.token_ids[have:]]
                reason = c.finish_reason
                if new or (reason is not None and c.index not in ended):
                    line: dict[str, Any] = {"r": request_id, "at": start + have, "t": new}
                    if c.index:
                        line["i"] = c.index
                    if reason is not None:
                        line["f"] = reason
                        ended.add(c.index)
                    os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
                    seen[c.index] = have + len(new)
            yield out

    def close(self) -> None:
        os.close(self._fd)


class AttemptSink:
    """The replay buffer as the sample-level loop's sink.

    As a group lands it reads each sibling's attempt from the ledger
    (sealed, or the last one running: the group lands before its last
    seal), for the per-sample training log. The loop dates the group by its
    oldest token along the lineage (``RolloutLoop``: a journaled token
    of the dead branch counts its age through the fork), so the buffer's
    age limit holds for what a resume took from the journal too."""

    def __init__(self, buffer: ReplayBuffer, collector: StreamCollector) -> None:
        self.buffer = buffer
        self.collector = collector
        #: ordinal -> the attempt of each sibling, for the buffered groups.
        self.attempts: dict[int, list[int]] = {}

    def add(self, group: Group) -> None:
        ledger = self.collector.ledger
        attempts = []
        for s in range(self.collector.config.samples):
            detail = ledger.sibling(group.ordinal, s)
            if detail is None or detail[1] is None:
                raise RuntimeError(f"group {group.ordinal} lands without sibling {s}'s attempt")
            attempts.append(detail[1])
        self.buffer.add(group)
        self.attempts[group.ordinal] = attempts

    def __len__(self) -> int:
        return len(self.buffer)


class SampleLog:
    """The per-sample training log (``samples.jsonl``): ``{"resume": k}``
    when a life starts from the checkpoint of step ``k`` (earlier lines of
    steps ``>= k`` belong to a dead branch), then one line per step,
    ``{"step": s, "groups": {ordinal: [[attempt, tokens], ...]}}`` with the
    siblings in order, fsynced before the step's checkpoint counts it. A
    torn last line (a kill inside its write) is cut off before the
    marker."""

    def __init__(self, path: Path, *, resume: int) -> None:
        self.path = path
        drop_torn_line(path)
        append_line(path, {"resume": resume}, sync=True)

    def step(self, step: int, groups: dict[int, list[list[Any]]]) -> None:
        line = {"step": step, "groups": {str(o): g for o, g in groups.items()}}
        append_line(self.path, line, sync=True)


def _journal_damage(path: Path, fingerprint: str, lineage: str) -> tuple[int, int]:
    """What the last death left for the open to repair: the bytes of the
    journal's torn tail, and the temporary files of a compaction."""
    leftovers = sum(1 for _ in path.parent.glob(f".{path.name}.tmp-*"))
    if not path.exists():
        return 0, leftovers
    torn = read_journal(path, fingerprint=fingerprint, lineage=lineage).torn
    return (0 if torn is None else torn.length), leftovers


def run_journal(args: WorkerArgs) -> int:
    """One sample-level life (``--journal``): resume from the checkpoint and
    the rollout journal (or start, with a first checkpoint before anything
    is generated) and train to the end of the stream.

    Each sibling is a request of its own (``RolloutLoop(schedule="sibling")``, streamed
    so that a running sample is journaled every ``progress_every`` tokens;
    a seal is journaled as the ledger accepts it). The journal commits in
    groups (``commit_delay``; a timer task polls it). Each step's
    checkpoint marks the journal (syncing it), then writes the checkpoint
    with the mark's position, then compacts the journal to the
    checkpoint's window (``_files.checkpoint_journal``). A resume replays
    the journal under ``reuse``: sealed siblings come back without a
    request, running ones continue from their last durable prefix, and
    new attempts start above every attempt the journal names. The ready
    line reports what the open repaired and what the resume kept."""
    if args.mode != "frontier" or args.engine != "cpu":
        raise ValueError("--journal runs the frontier mode on the CPU engine")
    if args.reuse not in REUSE:
        raise ValueError(f"reuse must be one of {REUSE}, got {args.reuse!r}")
    if args.progress_every < 0:
        raise ValueError(f"progress_every must be >= 0, got {args.progress_every}")
    point = KillPoint(args.kill_at)
    workdir = Path(args.workdir)
    fingerprint = f"grpo-demo;prompts={args.prompts};seed={args.seed};mode=frontier;journal"
    # Every life, killed before its first checkpoint or not, has its own number.
    life = _Life.open(
        args,
        fingerprint,
        lambda _: 1 + sum(1 for _ in workdir.glob(GENERATED_LOG.format(life="*"))),
    )
    buffer, counters = life.buffer, life.counters
    n = args.num_generations
    collector = StreamCollector(life.source, life.config(samples=n))
    sink = AttemptSink(buffer, collector)
    journal_path = workdir / JOURNAL_NAME
    lineage_id = lineage(workdir)
    torn, leftovers = _journal_damage(journal_path, fingerprint, lineage_id)
    opts: dict[str, Any] = {
        "fingerprint": fingerprint,
        "lineage": lineage_id,
        "policy": CommitPolicy(max_delay=args.commit_delay),
        "progress_every": args.progress_every or 1 << 30,  # 0: no progress records
    }
    journal = (
        KillPointJournal(journal_path, point=point, **opts)
        if point.kind
        else RolloutJournal(journal_path, **opts)
    )
    # The collector reserves every attempt in the journal before it deals
    # it (``RolloutJournal.cover``): a later life starts above them.
    collector.journal = journal
    reuse = {
        "age": Reuse.within(args.max_age),
        "everything": Reuse.everything(),
        "nothing": Reuse.nothing(),
    }[args.reuse]
    reused = prefixes = 0
    if life.loaded is None:
        # Refuses a journal with samples: there is no checkpoint to go with it.
        recovered = journal.recover(
            None, position=None, checkpoint_id=None, reuse=reuse, fork=0, step=0
        )
    else:
        state = life.state
        recovered = journal.recover(
            Checkpoint.from_state_dict(state["collector"]["ledger"], fingerprint=fingerprint),
            position=state["journal"]["position"],
            checkpoint_id=state["journal"]["id"],
            reuse=reuse,
            fork=life.step,
            step=life.step,
        )
        resumed = collector.resume(
            state["collector"],
            load_replay_buffer=life.load_buffer,
            sealed=recovered.sealed,
            attempt_floor=recovered.attempt_floor,
            attempt_limit=recovered.attempt_limit,
        )
        reused = len(resumed.reused)
        prefixes = sum(
            not st.sealed for group in recovered.state.groups.values() for st in group.values()
        )
        if life.load_buffer:
            sink.attempts = {int(o): list(a) for o, a in state["attempts"].items()}
    samples_log = SampleLog(workdir / SAMPLES_LOG, resume=life.step)
    token_log = TokenLog(life.backend.start(), workdir / GENERATED_LOG.format(life=life.lives))
    params: dict[int, CpuSamplingParams] = {}

    def sampling_params(lease: Lease, prefix_len: int) -> CpuSamplingParams:
        if prefix_len:
            counters["continued"] = counters.get("continued", 0) + 1
        p = params.get(prefix_len)
        if p is None:
            p = params[prefix_len] = CpuSamplingParams(
                n=1, max_tokens=max(1, args.max_tokens - prefix_len), output_kind=CUMULATIVE
            )
        return p

    def prompt_of(row: Any, prefix: tuple[int, ...]) -> list[int]:
        if len(row) != PROMPT_LEN:
            raise ValueError(f"a prompt of {len(row)} tokens, not {PROMPT_LEN}")
        return [*row, *prefix]

    def checkpoint() -> None:
        # The logs are synced (a checkpoint never counts a step they lack);
        # the ledger's state is taken after the journal's mark.
        life.log.sync()

        def write(position: int) -> None:
            life.checkpoint(
                {
                    "attempts": {str(o): sink.attempts[o] for o in buffer.ordinals},
                    "collector": collector.checkpoint_state(save_buffer=True),
                    "journal": {"position": position, "id": life.step},
                }
            )

        checkpoint_journal(journal, checkpoint_id=life.step, cut=collector.ledger.cut, write=write)

    def committed() -> None:
        checkpoint()
        point.steps += 1

    if life.loaded is None:
        # A first checkpoint before anything is generated: from now on the
        # journal always has a checkpoint to go with it.
        checkpoint()

    async def commit_loop() -> None:
        while True:
            due = journal.poll()
            await asyncio.sleep(args.commit_delay if due is None else max(due, 0.0005))

    def trained(groups: list[Group]) -> None:
        samples_log.step(
            life.step,
            {
                g.ordinal: [
                    [a, list(c)]
                    for a, c in zip(sink.attempts.pop(g.ordinal), g.completions, strict=True)
                ]
                for g in groups
            },
        )

    async def train() -> None:
        committer = asyncio.create_task(commit_loop(), name="journal-commit")
        try:
            loop = RolloutLoop(
                collector,
                life.engine(token_log),
                sink,
                schedule="sibling",
                prompt_of=prompt_of,
                sampling_params=sampling_params,
                journal=journal,
                recovered=recovered,
                max_in_flight=args.max_in_flight * n,
                max_ahead=life.max_ahead,
                timeout=args.timeout,
                version=life.version,
                on_dropped=life.on_dropped,
                on_event=life.on_event,
            )

            def evicted(stale: list[int]) -> None:
                for o in stale:
                    del sink.attempts[o]
                # Generated again from nothing: not from the stale prefixes
                # the journal had for them.
                got = loop.recovered
                if got is not None:
                    keep = set(got.state.groups) - set(stale)
                    got = attrs.evolve(got, state=got.state.restrict(keep))
                    loop.recovered = got

            async with loop as rollout:
                print(
                    f"ready step={life.step} lives={life.lives} torn={torn} "
                    f"leftovers={leftovers} reused={reused} prefixes={prefixes}",
                    flush=True,
                )
                await life.train(rollout, collector, committed, evicted=evicted, trained=trained)
        finally:
            committer.cancel()
            try:
                await committer
            except asyncio.CancelledError:
                pass

    asyncio.run(train())
    if not collector.drained:
        raise RuntimeError(f"stream not drained: cut {collector.ledger.cut}")
    journal.close()
    token_log.close()
    return life.finish()
