"""A small real training run with crash-safe data coverage, and its torture test.

``run`` is one life of the job: it trains a tiny torch model on a generated
dataset (no downloads) fed by the seekable loader through a
``StreamCollector``, from a simulated asynchronous generation pool that
keeps prompts in flight across steps. Each training step is one real
optimizer step on the oldest buffered groups, written to the training-data
log (``frontier audit``'s), and every ``checkpoint_every`` steps an atomic
checkpoint follows (collector state, replay buffer, model, optimizer, log
record count); a first one is written before anything is generated. A
restarted life resumes from the latest checkpoint, sometimes without its
replay buffer. How much of the generation survives a kill is the job's
durability level (``--durability``, ``DURABILITY``):

* ``coverage``: prompt by prompt (``PromptPool``: random latency, failures
  retried, then dropped); a resume may also evict part of the buffer. Only
  the data coverage is durable: whatever was in flight is generated again.
* ``journal``: sample by sample (``_SamplePool``): groups of ``samples``
  sibling leases generated token by token by the stand-in engine
  (``_samples``), some attempts failed midway (the sibling restarts, half of
  the failed attempts answer late and the ledger must fence them), and a
  ``RolloutJournal`` with group commit that records each seal and each
  running sample's progress every ``progress_every`` tokens, marked before
  each checkpoint and compacted after it. A resume replays it under
  ``reuse``: sealed siblings come back without generation, running ones
  continue from their durable prefix (``--reuse nothing``: coverage only,
  every unfinished sample generated again; ``--progress-every 0``: sealed
  samples only). The life also writes a per-sample log and a count of the
  tokens it generated, and passes the kill points of ``kill_at``
  (``_killpoints``).

``torture`` runs lives in subprocesses and SIGKILLs them, each kind of kill
of its level (``KILLS``) once in a seeded order before any twice: at a random
moment, at boot, inside a checkpoint write, and at the journal's points (in
an append, in a group commit, in a compaction, just after one, right after a
resume); then it runs a life to the end and audits the log with the
``frontier audit`` command (every ordinal of the stream trained exactly once
or dropped exactly once) and, at the ``journal`` level, every sample of the
surviving lineage (``_samples.audit_log``), counting the tokens generated
again.

    python -m frontier_adapters.verify torch-torture --workdir /tmp/t --kills 100
    python -m frontier_adapters.verify torch-torture --durability journal \
        --workdir /tmp/tj --kills 100
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from frontier_core import Checkpoint, FailurePolicy, Lease, LedgerConfig, TrainLogWriter
from frontier_core.journal import CommitPolicy, Reuse, SiblingState, TokenPayload

from .._collector import StreamCollector
from ..journal import Recovered, RolloutJournal, resumed_sample
from ..torch import make_seekable_loader
from ..torch._checkpoints import dataset_fingerprint, read_checkpoint, write_checkpoint
from ..torch._distributed import RankCollector
from ..torch._sources import SeekableSource
from ._files import (
    append_line,
    checkpoint_journal,
    drop_torn_line,
    fresh_train_log,
    lineage,
    read_lines,
)
from ._killpoints import KILL_POINTS, KillPoint, KillPointJournal
from ._lives import AUDIT_DEADLINE, Life
from ._lives import life_deadline as _life_deadline
from ._lives import run as run_life
from ._sample_audit import Audit, audit_log, digest, full_sample, payload

FEATURES = 4
LOG_NAME = "train_log.jsonl"
CKPT_DIR = "checkpoints"
#: ``--durability``: what of the generation survives a kill (see the module doc).
DURABILITY = ("coverage", "journal")
#: The journal level's per-sample training log (``_samples.audit_log``'s format).
SAMPLES_LOG = "samples.jsonl"
#: Every token the journal level's pool made, one line per tick
#: (``{"tokens", "failed", "fenced"}``).
GENERATED_LOG = "generated.log"
JOURNAL_NAME = "journal"
#: At the journal level a group fails whole only after this many failed
#: samples: the injected failures restart siblings (and fence their
#: attempts) but drop nothing.
JOURNAL_MAX_FAILURES = 64
#: ``--reuse``: what a resume takes from the journal (``nothing``: coverage
#: only, every unfinished sample is generated again from nothing).
REUSE = {"everything": Reuse.everything(), "nothing": Reuse.nothing()}


def make_dataset(rows: int) -> list[torch.Tensor]:
    """``rows`` rows of 4 features and a linear target, generated."""
    out = []
    for i in range(rows):
        x = torch.tensor([((i * 7 + k * 3) % 11) / 11.0 for k in range(FEATURES)])
        y = (x * torch.tensor([0.5, -1.0, 2.0, 0.25])).sum() + 0.1
        out.append(torch.cat([x, y.reshape(1)]))
    return out


class Momentum:
    """SGD with momentum, computed as ``torch.optim.SGD(lr=, momentum=)``
    does, in a few lines: ``torch.optim`` imports ``torch._dynamo``, which
    costs each rank of ``elastic_job`` seconds of start-up in every life of
    its torture. The torch job's optimizer too (one optimizer for both)."""

    def __init__(self, params: Sequence[torch.nn.Parameter], lr: float, momentum: float) -> None:
        self.params = list(params)
        self.lr = lr
        self.momentum = momentum
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            assert p.grad is not None
            buf = self.buffers[i]
            if buf is None:
                self.buffers[i] = buf = p.grad.clone()
            else:
                buf.mul_(self.momentum).add_(p.grad)
            p.add_(buf, alpha=-self.lr)

    def state_dict(self) -> dict[str, Any]:
        return {"buffers": [torch.zeros(0) if b is None else b for b in self.buffers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffers = [None if b.numel() == 0 else b.clone() for b in state["buffers"]]


def make_model() -> tuple[torch.nn.Linear, Momentum]:
    """The job's model and optimizer, the same at every start (and on every rank)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    return model, Momentum(list(model.parameters()), lr=0.05, momentum=0.9)


@attrs.frozen
class RunArgs:
    """One life of the job (``python -m frontier_adapters.verify
    torch-run``); ``torture`` passes the same to every life."""

    workdir: str
    durability: str = "coverage"  # one of DURABILITY
    rows: int = 40
    epochs: int = 2
    seed: int = 0
    batch_size: int = 5
    group: int = 4  # groups per training step
    capacity: int = 7  # prompts in flight at most
    fail_rate: float = 0.15  # per prompt (per sibling attempt at the journal level)
    checkpoint_every: int = 1  # steps between checkpoints (and one at the stream's end)
    write_pause: float = 0.0  # seconds between the parts of a checkpoint write
    announce: bool = False  # print ready / ckpt-part lines for the torture
    # -- the journal level --
    samples: int = 4  # siblings per prompt (GRPO's n)
    progress_every: int = 4  # tokens between progress records; 0: sealed samples only
    reuse: str = "everything"  # what a resume takes from the journal; "nothing": coverage only
    tick: float = 0.002  # seconds per token of the simulated generation pool
    commit_delay: float = 0.002  # the journal's group commit delay
    kill_at: str = ""  # KIND:STEPS:COUNT, a kill point (``_killpoints.KillPoint``)

    def check(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        if self.durability not in DURABILITY:
            raise ValueError(f"--durability must be one of {DURABILITY}, got {self.durability!r}")
        if self.reuse not in REUSE:
            raise ValueError(f"--reuse must be one of {sorted(REUSE)}, got {self.reuse!r}")
        if self.samples < 1 or self.progress_every < 0 or self.checkpoint_every < 1:
            raise ValueError(
                "--samples and --checkpoint-every must be >= 1 and --progress-every >= 0"
            )
        if self.kill_at and self.durability != "journal":
            raise ValueError("--kill-at needs --durability journal (its points are the journal's)")


def _train(model: torch.nn.Linear, optim: Momentum, rows: list[list[float]]) -> None:
    """One real optimizer step on ``rows`` (features, then the target)."""
    batch = torch.tensor(rows)
    loss = torch.nn.functional.mse_loss(model(batch[:, :FEATURES]).squeeze(1), batch[:, -1])
    for p in model.parameters():
        p.grad = None
    loss.backward()  # type: ignore[no-untyped-call]
    optim.step()


class PromptPool:
    """The simulated generation pool of a prompt-level life (the
    ``coverage`` level here, a rank of ``elastic_job``): a prompt taken
    lands after 1 to ``latency`` ticks, or fails with ``fail_rate`` (the
    collector retries it, then drops it)."""

    def __init__(
        self,
        collector: StreamCollector | RankCollector,
        rng: random.Random,
        *,
        fail_rate: float,
        latency: int,
    ) -> None:
        self.collector = collector
        self.rng = rng
        self.fail_rate = fail_rate
        self.latency = latency
        self.in_flight: dict[int, list[Any]] = {}  # ordinal -> [row, ticks left]

    def dispatch(self, capacity: int) -> None:
        """Take prompts until ``capacity`` are in flight."""
        for o, row in self.collector.take(capacity - len(self.in_flight)):
            self.in_flight[o] = [row, self.rng.randint(1, self.latency)]

    def tick(self) -> tuple[dict[int, list[float]], tuple[int, ...]]:
        """One tick: the rows of the prompts that landed, and the ordinals
        the collector dropped."""
        landed: dict[int, list[float]] = {}
        dropped: list[int] = []
        for o in sorted(self.in_flight):
            self.in_flight[o][1] -= 1
            if self.in_flight[o][1] > 0:
                continue
            row = self.in_flight.pop(o)[0]
            if self.rng.random() < self.fail_rate:
                dropped.extend(self.collector.failed([o]).dropped)
            else:
                self.collector.landed([o])
                landed[o] = [float(v) for v in row.tolist()]
        return landed, tuple(dropped)


def run(args: RunArgs) -> int:
    """One life: resume from ``args.workdir`` (the checkpoint, and the
    rollout journal at the journal level) or start, with a first checkpoint
    before anything is generated, and train to the end of the stream."""
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    args.check()
    journaled = args.durability == "journal"
    n = args.samples if journaled else 1
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    dataset = make_dataset(args.rows)
    fingerprint = dataset_fingerprint(dataset, seed=args.seed, shuffle=True)
    if journaled:
        fingerprint += f";journal;samples={n}"
    loader = make_seekable_loader(
        dataset, batch_size=args.batch_size, seed=args.seed, shuffle=True, epochs=args.epochs
    )
    collector = StreamCollector(
        SeekableSource(loader),
        LedgerConfig(
            stream_len=args.rows * args.epochs,
            samples=n,
            on_failure=FailurePolicy.RETRY,
            max_failures=JOURNAL_MAX_FAILURES if journaled else 2,
            fingerprint=fingerprint,
        ),
    )
    point = KillPoint(args.kill_at)
    journal = _open_journal(args, fingerprint, point) if journaled else None
    # The collector reserves every attempt in the journal before it deals
    # it (``RolloutJournal.cover``): a later life starts above them.
    collector.journal = journal
    model, optim = make_model()
    log_path = workdir / LOG_NAME
    ckpt_root = workdir / CKPT_DIR
    samples_log = workdir / SAMPLES_LOG
    # ordinal -> {"row": features and target, "samples": [[sibling, attempt, tokens], ...]}
    buffer: dict[int, dict[str, Any]] = {}
    loaded = read_checkpoint(
        ckpt_root, fingerprint=fingerprint, require=["state", "model", "optim"]
    )
    recovered: Recovered | None = None
    reused = 0
    if loaded is None:
        step, resumes = 0, 0
        log = fresh_train_log(log_path)
        if journal is not None:
            # Refuses a journal with samples: there is no checkpoint to go with it.
            recovered = journal.recover(
                None, position=None, checkpoint_id=None, reuse=REUSE[args.reuse], fork=0, step=0
            )
    else:
        state = loaded.json_parts["state"]
        step, resumes = loaded.step, state["resumes"] + 1
        saved = {int(o): g for o, g in state["buffer"].items()}
        # Sometimes without the buffer, or (prompt by prompt) with part of
        # it evicted: those groups are generated again, or come back whole
        # from the journal (their seals are in the checkpoint's window).
        rng = random.Random(f"{args.seed}:resume:{step}:{resumes}")
        load_buffer = rng.random() >= 0.25
        evicted: list[int] = []
        if journal is None:
            evicted = [o for o in sorted(saved) if load_buffer and rng.random() < 0.2]
            collector.resume(
                state["collector"], load_replay_buffer=load_buffer, evicted_on_restore=evicted
            )
        else:
            recovered = journal.recover(
                Checkpoint.from_state_dict(state["collector"]["ledger"], fingerprint=fingerprint),
                position=state["journal"]["position"],
                checkpoint_id=state["journal"]["id"],
                reuse=REUSE[args.reuse],
                fork=step,
                step=step,
            )
            resumed = collector.resume(
                state["collector"],
                load_replay_buffer=load_buffer,
                sealed=recovered.sealed,
                attempt_floor=recovered.attempt_floor,
                attempt_limit=recovered.attempt_limit,
            )
            reused = len(resumed.reused)
        if load_buffer:
            buffer = {o: g for o, g in saved.items() if o not in evicted}
        model.load_state_dict(loaded.tensor_parts["model"])
        optim.load_state_dict(loaded.tensor_parts["optim"])
        log = TrainLogWriter(log_path, resume_records=state["records"])
    if journaled:
        # A kill inside an append leaves a torn last line: cut it first.
        drop_torn_line(samples_log)
        drop_torn_line(workdir / GENERATED_LOG)
        append_line(samples_log, {"resume": step}, sync=True)

    def between_parts(name: str) -> None:
        if args.announce:
            print(f"ckpt-part {name}", flush=True)
        if args.write_pause:
            time.sleep(args.write_pause)

    def checkpoint() -> None:
        # The logs first: a checkpoint never counts a step they lack.
        log.sync()

        def write(position: int | None) -> None:
            state = {
                "collector": collector.checkpoint_state(save_buffer=True),
                "buffer": {str(o): g for o, g in buffer.items()},
                "records": log.records,
                "resumes": resumes,
                "journal": {"position": position, "id": step},
            }
            write_checkpoint(
                ckpt_root,
                step,
                fingerprint=fingerprint,
                json_parts={"state": state},
                tensor_parts={"model": model.state_dict(), "optim": optim.state_dict()},
                between_parts=between_parts,
            )

        if journal is None:
            write(None)
        else:
            checkpoint_journal(journal, checkpoint_id=step, cut=collector.ledger.cut, write=write)

    if loaded is None:
        # From now on a journal with samples always has a checkpoint to
        # resume from, and one without is a lost checkpoint (refused).
        checkpoint()
    rng = random.Random(f"{args.seed}:{args.durability}:{step}:{resumes}")
    pool: PromptPool | _SamplePool
    if journal is None:
        pool = PromptPool(collector, rng, fail_rate=args.fail_rate, latency=4)
    else:
        assert recovered is not None
        # The tokens made now are of the policy of the current step.
        pool = _SamplePool(args, collector, journal, recovered, rng, workdir, lambda: step)
    if args.announce:
        extra = ""
        if journal is not None:
            torn = recovered.torn if recovered is not None else 0
            extra = f" resumed={int(loaded is not None)} torn={torn} reused={reused}"
        print(f"ready step={step} resumes={resumes}{extra}", flush=True)
    first = True
    while not collector.drained:
        pool.dispatch(args.capacity)
        if first and loaded is not None and point.passed("resumed"):
            point.die(f"resumed at step {step} with {len(pool.in_flight)} in flight")
        first = False
        if isinstance(pool, PromptPool):
            rows, dropped = pool.tick()
            buffer.update((o, {"row": row, "samples": []}) for o, row in rows.items())
        else:
            groups, dropped = pool.tick()
            buffer.update(groups)
        if dropped:
            log.dropped(dropped)
            if journaled:
                append_line(samples_log, {"dropped": list(dropped), "at": step}, sync=True)
        tail = collector.exhausted and not pool.in_flight and buffer
        if not (len(buffer) >= args.group or tail):
            if collector.exhausted and not pool.in_flight and not collector.drained:
                raise RuntimeError("stream stalled: nothing in flight, pending or buffered")
            continue
        chosen = sorted(buffer)[: args.group]
        trained = {o: buffer.pop(o) for o in chosen}
        _train(model, optim, [g["row"] for g in trained.values()])
        collector.trained(chosen)
        log.step(step, chosen)
        step += 1
        if journaled:
            line = {
                str(o): [[s, a, len(t), digest(t)] for s, a, t in g["samples"]]
                for o, g in trained.items()
            }
            append_line(samples_log, {"step": step, "groups": line}, sync=True)
        if step % args.checkpoint_every == 0 or collector.drained:
            checkpoint()
        point.steps += 1
    if journal is not None:
        journal.close()
    log.close()
    print(f"done steps={step}", flush=True)
    return 0


# -- the journal level ----------------------------------------------------------------


def _open_journal(args: RunArgs, fingerprint: str, point: KillPoint) -> RolloutJournal:
    workdir = Path(args.workdir)
    opts: dict[str, Any] = {
        "fingerprint": fingerprint,
        "lineage": lineage(workdir),
        "policy": CommitPolicy(max_delay=args.commit_delay),
        "progress_every": max(1, args.progress_every),
    }
    path = workdir / JOURNAL_NAME
    if point.kind:
        return KillPointJournal(path, point=point, **opts)
    return RolloutJournal(path, **opts)


@attrs.define
class _Attempt:
    """One attempt the simulated pool is generating: ``prefix`` is the
    journaled progress it continues (``None``: from nothing), ``new`` its
    tokens since, ``recorded`` how many of them are journaled, ``fail_at``
    the token count at which the job fails it (``None``: never), and
    ``zombie`` the token count at which an attempt the job failed answers
    all the same (a late result, which the ledger must fence)."""

    prefix: SiblingState | None
    full: list[int]
    new: list[int] = attrs.field(factory=list)
    recorded: int = 0
    fail_at: int | None = None
    zombie: int | None = None

    @property
    def have(self) -> int:
        """The prefix's tokens."""
        if self.prefix is None:
            return 0
        prefix = self.prefix.payload
        assert isinstance(prefix, TokenPayload)  # the pool journals only tokens
        return len(prefix)

    @property
    def done(self) -> bool:
        return self.have + len(self.new) >= len(self.full)


class _SamplePool:
    """The journal level's simulated pool: the collector's groups of
    sibling leases, one token per lease per tick (the stand-in engine of
    ``_samples``), each seal the ledger accepts journaled as it happens,
    each running sample every ``progress_every`` tokens (a snapshot, then
    extends). Some attempts fail midway (``fail_rate``): the sibling
    restarts under a new attempt, and half of the failed attempts answer a
    few ticks later all the same, and the ledger must fence that seal (it
    is never journaled). Reused siblings come from the journal, and a
    sibling's first attempt in a life continues from its durable prefix.
    Each tick's tokens are counted in ``GENERATED_LOG``."""

    def __init__(
        self,
        args: RunArgs,
        collector: StreamCollector,
        journal: RolloutJournal,
        recovered: Recovered,
        rng: random.Random,
        workdir: Path,
        version: Callable[[], int],
    ) -> None:
        self.args, self.collector, self.journal = args, collector, journal
        self.recovered, self.rng = recovered, rng
        self.version = version
        self.generated_log = workdir / GENERATED_LOG
        #: Groups taken and not landed yet: ordinal -> row.
        self.in_flight: dict[int, list[float]] = {}
        self.sealed: dict[
            tuple[int, int], tuple[int, list[int]]
        ] = {}  # (o, s) -> (attempt, tokens)
        self.running: dict[Lease, _Attempt] = {}
        self.offered: set[tuple[int, int]] = set()  # siblings offered their journaled prefix
        self.landed: dict[int, dict[str, Any]] = {}
        self.dropped: list[int] = []
        self.failed_tokens = self.fenced = 0  # this tick's

    def _land(self, ordinals: Iterable[int]) -> None:
        for o in ordinals:
            self.landed[o] = {
                "row": self.in_flight.pop(o),
                "samples": [[s, *self.sealed.pop((o, s))] for s in range(self.args.samples)],
            }

    def _start(self, lease: Lease) -> None:
        key = (lease.ordinal, lease.sibling)
        # A journaled prefix is offered to this life's first attempt at the
        # sibling only: a restart after a failure starts from nothing.
        prefix = None
        if self.args.progress_every and key not in self.offered:
            prefix = self.recovered.prefix(*key)
        self.offered.add(key)
        attempt = _Attempt(prefix, full_sample(lease.ordinal, lease.sibling, self.args.seed))
        if prefix is None and self.rng.random() < self.args.fail_rate:
            attempt.fail_at = self.rng.randint(0, len(attempt.full) - 1)
        self.running[lease] = attempt

    def dispatch(self, capacity: int) -> None:
        """Take groups until ``capacity`` are generating."""
        for taken in self.collector.take_samples(capacity - len(self.in_flight)):
            o = taken.ordinal
            self.in_flight[o] = [float(v) for v in taken.row.tolist()]
            for lease in taken.reused:
                sample = self.recovered.sample(lease)
                assert isinstance(sample, TokenPayload)
                self.sealed[(o, lease.sibling)] = (lease.attempt, list(sample.tokens()))
            if taken.complete:
                self._land([o])
                self.collector.land_complete([o])
            for lease in taken.leases:
                self._start(lease)

    def _fail(self, lease: Lease) -> None:
        # The job gives up on this attempt (an engine error, a timeout):
        # its sibling restarts under a new attempt, from nothing.
        effect = self.collector.failed_samples([lease])
        for new in self.collector.restart(effect.restart):
            self._start(new)
        self.dropped.extend(effect.dropped)
        for o in effect.dropped:
            self.in_flight.pop(o, None)
            for s in range(self.args.samples):
                self.sealed.pop((o, s), None)
        # Every attempt the failure superseded (this one; a group failed or
        # dropped whole: its siblings') is thrown away or runs on as a zombie.
        for other in list(self.running):
            attempt = self.running[other]
            if attempt.zombie is not None or self.collector.current(other):
                continue
            self.failed_tokens += len(attempt.new)
            if self.rng.random() < 0.5:
                attempt.zombie = len(attempt.new) + self.rng.randint(1, 8)
            else:
                del self.running[other]

    def tick(self) -> tuple[dict[int, dict[str, Any]], tuple[int, ...]]:
        """One token per running lease: the groups that landed, and the
        ordinals the collector dropped."""
        self.failed_tokens = self.fenced = 0
        made = 0
        for lease in list(self.running):
            attempt = self.running.get(lease)
            if attempt is None:  # thrown away by a failure in this tick
                continue
            if not attempt.done:
                attempt.new.append(attempt.full[attempt.have + len(attempt.new)])
                made += 1
                self.failed_tokens += attempt.zombie is not None
            if attempt.zombie is not None:
                if attempt.done or len(attempt.new) >= attempt.zombie:
                    del self.running[lease]
                    effect = self.collector.sealed([lease])
                    if lease not in effect.fenced:
                        raise RuntimeError(f"the ledger accepted a failed attempt {lease}")
                    self.fenced += 1
                continue
            if attempt.fail_at is not None and len(attempt.new) > attempt.fail_at:
                self._fail(lease)
                continue
            self._advance(lease, attempt)
        self.journal.poll()
        if made:
            # Not fsynced: a SIGKILL loses no written bytes (the page cache
            # survives the process); one line, so all counts or none.
            line = {"tokens": made, "failed": self.failed_tokens, "fenced": self.fenced}
            append_line(self.generated_log, line, sync=False)
            if self.args.tick:
                time.sleep(self.args.tick)
        landed, self.landed = self.landed, {}
        dropped, self.dropped = tuple(self.dropped), []
        return landed, dropped

    def _advance(self, lease: Lease, attempt: _Attempt) -> None:
        """Seal a finished attempt, or journal a running one's progress when due."""
        have, new, recorded = attempt.have, attempt.new, attempt.recorded
        if attempt.done:
            del self.running[lease]
            sample = resumed_sample(attempt.prefix, payload(new, have, self.version()))
            effect = self.collector.sealed([lease])
            if lease in effect.sealed:
                self.journal.sealed(lease, sample)
                self.sealed[(lease.ordinal, lease.sibling)] = (lease.attempt, list(sample.tokens()))
                self._land(effect.landed)
        elif self.args.progress_every and self.journal.due(recorded, len(new)):
            if recorded == 0:
                # The attempt's first record: a snapshot, prefix included.
                self.journal.progress(
                    lease, resumed_sample(attempt.prefix, payload(new, have, self.version()))
                )
            else:
                # Then only the tokens since: each is journaled once.
                self.journal.extend(
                    lease, have + recorded, payload(new[recorded:], have + recorded, self.version())
                )
            attempt.recorded = len(new)


# -- the torture ----------------------------------------------------------------------


@attrs.frozen
class TortureResult:
    """What the torture did and what ``frontier audit`` said of the log.

    ``audit`` is the command's JSON report (``audit["clean"]`` its verdict)
    and ``audit_exit`` its exit status: 0 clean, 1 coverage violated. The
    counts below are read from that report (``coverage``). ``kills_at``
    says where each kill landed. At the journal level, ``samples`` is the
    per-sample audit of the surviving lineage (``_samples.Audit``: lost,
    duplicated and bad samples, tokens needed, generated and redone), and
    ``clean`` needs it clean too."""

    kills: int
    in_write_kills: int
    lives: int
    stream_len: int
    trained_once: int
    dropped: int
    skipped: tuple[int, ...]
    duplicated: tuple[int, ...]
    audit: dict[str, Any]
    audit_exit: int
    seconds: float
    kills_at: tuple[str, ...] = ()
    samples: Audit | None = None
    #: Seals of failed attempts the ledger fenced (journal level only).
    fenced: int = 0
    #: Lives whose journal open cut a torn tail (journal level only).
    torn_tails: int = 0

    @property
    def clean(self) -> bool:
        coverage = self.audit_exit == 0 and bool(self.audit["clean"])
        return coverage and (self.samples is None or self.samples.clean)


#: Where ``torture`` kills, per durability level: each kind of a block
#: once (in a seeded order) before any twice. ``time``: a random moment
#: after the ready line; ``boot``: a random moment from the start (often
#: still importing); ``write``: inside a checkpoint write (between two of
#: its parts); the rest are the ``KillPoint``s a life stops at itself.
KILLS = {
    "coverage": ("time", "boot", "write", "write"),
    "journal": ("time", "boot", "write", *KILL_POINTS),
}
#: The passage of a kill point to die at is drawn from ``1..COUNTS[kind]``
#: (appends come by the dozen per step, group commits a few per step, a
#: compaction once per checkpoint).
COUNTS = {"append": 48, "commit": 8, "compact": 2, "compacted": 2, "resumed": 1}


def life_command(args: RunArgs) -> list[str]:
    """The ``torch-run`` command of a life with ``args``."""
    cmd = [sys.executable, "-m", "frontier_adapters.verify", "torch-run"]
    for f in attrs.fields(RunArgs):
        value = getattr(args, f.name)
        if isinstance(value, bool):
            cmd += [f"--{f.name.replace('_', '-')}"] if value else []
        elif value != "":
            cmd += [f"--{f.name.replace('_', '-')}", str(value)]
    return cmd


def torture(
    args: RunArgs,
    *,
    kills: int,
    timeout: float = 600.0,
    verbose: bool = False,
    life_deadline: float | None = None,
) -> TortureResult:
    """SIGKILL lives of ``run(args)`` ``kills`` times (the kinds of
    ``KILLS[args.durability]``, seeded by ``args.seed``), then let one
    finish; audit the log with ``frontier audit`` (raises ``RuntimeError``
    if the audit cannot read it), and at the journal level every sample too
    (``_samples.audit_log``). A ``resumed`` kill planned for a life that
    starts afresh becomes a ``time`` kill, and ``resumed`` stays due.

    Each life has ``life_deadline`` seconds (``_lives.life_deadline``), and
    no more than is left of ``timeout``: past it the life is killed with
    its process group and ``LifeDeadlineError`` names it."""
    args.check()
    per_life = _life_deadline(life_deadline)
    t0 = time.monotonic()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    cmd = life_command(attrs.evolve(args, announce=True, kill_at=""))
    journaled = args.durability == "journal"
    killed = in_write = lives = torn_tails = 0

    def torn(line: str) -> bool:
        """A journal life's ready line says its open cut a torn tail."""
        return journaled and line.startswith("ready") and " torn=0 " not in line

    kills_at: list[str] = []
    due: list[str] = []  # the kinds still to come, in order
    while True:
        left = timeout - (time.monotonic() - t0)
        if left <= 0:
            raise TimeoutError(f"torture did not finish in {timeout} s ({killed} kills)")
        lives += 1
        life_cmd = list(cmd)
        if killed >= kills:
            mode = "finish"
        else:
            if not due:
                due = list(KILLS[args.durability])
                rng.shuffle(due)
            mode = due.pop(0)
            if mode in COUNTS:
                after = 0 if mode == "resumed" else rng.randint(0, 1)
                life_cmd += ["--kill-at", f"{mode}:{after}:{rng.randint(1, COUNTS[mode])}"]
        with (
            open(workdir / "stderr.log", "ab") as errf,
            Life(
                life_cmd,
                name=f"torch-run life {lives} ({mode})",
                deadline=min(per_life, left),
                stderr=errf,
            ) as life,
        ):
            hit = ""
            done = False  # the life printed "done" (a line a loop below may consume)
            if mode == "boot":
                time.sleep(rng.uniform(0.0, 1.5))  # often still importing torch
                hit = mode
            elif mode == "time":
                torn_tails += torn(life.readline("its ready line"))
                time.sleep(rng.uniform(0.0, 0.25))
                hit = mode
            elif mode != "finish":
                target = rng.randint(1, 8) if mode == "write" else 0
                seen = 0
                for line in life.lines():
                    torn_tails += torn(line)
                    done = done or line.startswith("done")
                    if mode == "write" and line.startswith("ckpt-part"):
                        seen += 1
                        if seen >= target:
                            hit = mode
                            break
                    if line.startswith("ready") and mode == "resumed" and " resumed=0" in line:
                        # A fresh start has no resume to die after: die at a
                        # random moment instead, and kill the next resume.
                        due.insert(0, mode)
                        time.sleep(rng.uniform(0.0, 0.25))
                        hit = "time"
                        break
                    if line.startswith("kill-point "):
                        hit = line.split()[1]
                        break
            if hit and life.poll() is None:
                life.kill()
                killed += 1
                in_write += hit == "write"
                kills_at.append(hit)
                if verbose:
                    print(f"kill {killed} ({hit})", flush=True)
                continue
            out = life.read()
            torn_tails += sum(map(torn, out.splitlines()))
            returncode = life.wait()
        if returncode != 0:
            tail = (workdir / "stderr.log").read_text()[-3000:]
            raise RuntimeError(f"run exited with {returncode}:\n{tail}")
        if done or "done" in out:
            break
    stream_len = args.rows * args.epochs
    audit_exit, report = run_audit(workdir / LOG_NAME, stream_len)
    per_sample, fenced = None, 0
    if journaled:
        generated = read_lines(workdir / GENERATED_LOG)
        per_sample = audit_log(
            read_lines(workdir / SAMPLES_LOG),
            generated,
            prompts=stream_len,
            samples=args.samples,
            seed=args.seed,
        )
        fenced = sum(line.get("fenced", 0) for line in generated)
    return TortureResult(
        kills=killed,
        in_write_kills=in_write,
        lives=lives,
        stream_len=stream_len,
        **coverage(report),
        audit=report,
        audit_exit=audit_exit,
        seconds=round(time.monotonic() - t0, 1),
        kills_at=tuple(kills_at),
        samples=per_sample,
        fenced=fenced,
        torn_tails=torn_tails,
    )


#: The audit as a user runs it: ``frontier audit LOG --stream-len N --json``.
AUDIT = (sys.executable, "-m", "frontier_core._cli", "audit")


def run_audit(log: str | os.PathLike[str], stream_len: int) -> tuple[int, dict[str, Any]]:
    """Run ``frontier audit --json`` on ``log``: its exit status and report.

    Raises ``RuntimeError`` when it printed no report (exit 2: the log is
    unreadable or truncated), ``LifeDeadlineError`` when it took more than
    ``AUDIT_DEADLINE`` seconds."""
    proc = run_life(
        [*AUDIT, str(log), "--stream-len", str(stream_len), "--json"],
        name="frontier audit",
        deadline=AUDIT_DEADLINE,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"frontier audit exited with {proc.returncode}: {proc.stderr.strip()}")
    report: dict[str, Any] = json.loads(proc.stdout)
    return proc.returncode, report


def coverage(report: Mapping[str, Any]) -> dict[str, Any]:
    """What a torture's result carries of ``frontier audit``'s report:
    ``trained_once``, ``dropped``, the ``skipped`` ordinals and the
    ``duplicated`` ones (out-of-range ones included)."""
    return {
        "trained_once": int(report["trained_once"]),
        "dropped": int(report["dropped"]),
        "skipped": tuple(report["skipped_ordinals"]),
        "duplicated": tuple(
            sorted({*report["duplicated_ordinals"], *report["out_of_range_ordinals"]})
        ),
    }
