"""A small real training run with crash-safe data coverage, and its torture test.

``run`` trains a tiny torch model on a generated dataset (no downloads): the
seekable loader feeds a ``StreamCollector``; a simulated asynchronous
generation pool keeps prompts in flight across steps with random latency and
occasional failures (retried, then dropped); each training step is one real
optimizer step on the oldest buffered groups, is written to the training-data
log, and is followed by an atomic checkpoint (collector state, replay buffer,
model, optimizer, log record count). A restarted run resumes from the latest
checkpoint, sometimes without its replay buffer or with part of it evicted.

``torture`` runs ``run`` in subprocesses and SIGKILLs them at random
moments, some timed to land inside a checkpoint write, restarting each time
until the stream is done; then it audits the log with the ``frontier audit``
command: every ordinal of the stream must be trained exactly once or dropped
exactly once. The result says that the audit ran, its report and its exit
status.

With ``journal`` (``torch-run --journal``, ``run_journal``) a life runs
sample by sample instead: a ``StreamCollector`` over the same loader, a
simulated pool generating each sibling lease token by token (the stand-in
engine of ``durable_job``), a ``RolloutJournal`` with group commit that
records each seal and each running sample's progress, failed siblings
restarted and their late answers fenced. The torture then kills at the
journal's points too (``_killpoints``: in an append, in a group commit, in
a compaction, just after one, right after a resume) and audits every sample
of the surviving lineage (``durable_job.audit_log``) besides ``frontier
audit``'s coverage, counting the tokens generated again.

    python -m frontier_adapters.verify torch-torture --workdir /tmp/t --kills 100
    python -m frontier_adapters.verify torch-torture --journal --workdir /tmp/t --kills 100
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import torch

from frontier_core import Checkpoint, FailurePolicy, Lease, LedgerConfig, TrainLogWriter
from frontier_core.journal import CommitPolicy, Reuse, SiblingState, TokenPayload

from .._collector import StreamCollector
from ..journal import RolloutJournal, resumed_sample
from ..torch import make_seekable_loader
from ..torch._files import (
    dataset_fingerprint,
    read_checkpoint,
    write_checkpoint,
)
from ..torch._sources import SeekableSource
from ._files import (
    append_line,
    checkpoint_journal,
    drop_torn_line,
    fresh_train_log,
    lineage,
    read_lines,
)
from ._killpoints import KillPoint, KillPointJournal
from ._lives import AUDIT_DEADLINE, Life
from ._lives import life_deadline as _life_deadline
from ._lives import run as run_life
from .durable_job import Audit, _payload, audit_log, digest, full_sample

FEATURES = 4
LOG_NAME = "train_log.jsonl"
CKPT_DIR = "checkpoints"


def make_dataset(rows: int) -> list[torch.Tensor]:
    """``rows`` rows of 4 features and a linear target, generated."""
    out = []
    for i in range(rows):
        x = torch.tensor([((i * 7 + k * 3) % 11) / 11.0 for k in range(FEATURES)])
        y = (x * torch.tensor([0.5, -1.0, 2.0, 0.25])).sum() + 0.1
        out.append(torch.cat([x, y.reshape(1)]))
    return out


@attrs.frozen
class RunArgs:
    """The arguments of one life of the run (``python -m
    frontier_adapters.verify torch-run``)."""

    workdir: str
    rows: int = 40
    epochs: int = 2
    seed: int = 0
    batch_size: int = 5
    group: int = 4  # groups per training step
    capacity: int = 7  # prompts in flight at most
    fail_rate: float = 0.15  # per prompt (per sibling attempt with ``journal``)
    write_pause: float = 0.0  # seconds between the parts of a checkpoint write
    announce: bool = False  # print ready / ckpt-part lines for the torture
    # -- the sample-level life (``journal``; ``run_journal``) --
    journal: bool = False
    samples: int = 4  # siblings per prompt (GRPO's n)
    progress_every: int = 4  # tokens between progress records; 0: sealed samples only
    reuse: str = "everything"  # what a resume takes from the journal; "nothing": coverage only
    tick: float = 0.002  # seconds per token of the simulated generation pool
    commit_delay: float = 0.002  # the journal's group commit delay
    kill_at: str = ""  # KIND:STEPS:COUNT, a kill point (``_killpoints.KillPoint``)


def _model() -> tuple[torch.nn.Linear, torch.optim.SGD]:
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def _train(model: torch.nn.Linear, optim: torch.optim.SGD, rows: list[list[float]]) -> None:
    """One real optimizer step on ``rows`` (features, then the target)."""
    batch = torch.tensor(rows)
    loss = torch.nn.functional.mse_loss(model(batch[:, :FEATURES]).squeeze(1), batch[:, -1])
    optim.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    optim.step()


def _between_parts(args: RunArgs) -> Callable[[str], None]:
    def between_parts(name: str) -> None:
        if args.announce:
            print(f"ckpt-part {name}", flush=True)
        if args.write_pause:
            time.sleep(args.write_pause)

    return between_parts


def run(args: RunArgs) -> int:
    """Resume from ``args.workdir`` (or start) and train to the end of the
    stream (sample by sample with a rollout journal if ``args.journal``:
    ``run_journal``)."""
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    if args.journal:
        return run_journal(args)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    dataset = make_dataset(args.rows)
    fingerprint = dataset_fingerprint(dataset, seed=args.seed, shuffle=True)
    loader = make_seekable_loader(
        dataset, batch_size=args.batch_size, seed=args.seed, shuffle=True, epochs=args.epochs
    )
    stream_len = args.rows * args.epochs
    collector = StreamCollector(
        SeekableSource(loader),
        LedgerConfig(
            stream_len=stream_len,
            on_failure=FailurePolicy.RETRY,
            max_attempts=2,
            fingerprint=fingerprint,
        ),
    )
    model, optim = _model()
    log_path = workdir / LOG_NAME
    ckpt_root = workdir / CKPT_DIR

    buffer: dict[int, list[float]] = {}
    loaded = read_checkpoint(
        ckpt_root, fingerprint=fingerprint, require=["state", "model", "optim"]
    )
    if loaded is None:
        step, resumes = 0, 0
        log = fresh_train_log(log_path)
    else:
        state = loaded.json_parts["state"]
        step, resumes = loaded.step, state["resumes"] + 1
        saved = {int(o): row for o, row in state["buffer"].items()}
        rng = random.Random(f"{args.seed}:resume:{step}:{resumes}")
        load_buffer = rng.random() >= 0.25
        evicted = [o for o in sorted(saved) if load_buffer and rng.random() < 0.2]
        collector.resume(
            state["collector"], load_replay_buffer=load_buffer, evicted_on_restore=evicted
        )
        if load_buffer:
            buffer = {o: row for o, row in saved.items() if o not in evicted}
        model.load_state_dict(loaded.tensor_parts["model"])
        optim.load_state_dict(loaded.tensor_parts["optim"])
        log = TrainLogWriter(log_path, resume_records=state["records"])

    between_parts = _between_parts(args)
    rng = random.Random(f"{args.seed}:run:{step}:{resumes}")
    in_flight: dict[int, list[Any]] = {}  # ordinal -> [row, ticks left]
    if args.announce:
        print(f"ready step={step} resumes={resumes}", flush=True)
    while not collector.drained:
        for o, row in collector.take(args.capacity - len(in_flight)):
            in_flight[o] = [row, rng.randint(1, 4)]
        for o in sorted(in_flight):
            in_flight[o][1] -= 1
            if in_flight[o][1] > 0:
                continue
            row = in_flight.pop(o)[0]
            if rng.random() < args.fail_rate:
                log.dropped(collector.failed([o]).dropped)
            else:
                collector.landed([o])
                buffer[o] = [float(v) for v in row.tolist()]
        enough = len(buffer) >= args.group
        tail = collector.exhausted and not in_flight and buffer
        if not (enough or tail):
            if collector.exhausted and not in_flight and not collector.drained:
                raise RuntimeError("stream stalled: nothing in flight, pending or buffered")
            continue
        chosen = sorted(buffer)[: args.group]
        _train(model, optim, [buffer.pop(o) for o in chosen])
        collector.trained(chosen)
        log.step(step, chosen)
        step += 1
        log.sync()
        write_checkpoint(
            ckpt_root,
            step,
            fingerprint=fingerprint,
            json_parts={
                "state": {
                    "collector": collector.state_dict(),
                    "buffer": {str(o): row for o, row in buffer.items()},
                    "records": log.records,
                    "resumes": resumes,
                }
            },
            tensor_parts={"model": model.state_dict(), "optim": optim.state_dict()},
            between_parts=between_parts,
        )
    log.close()
    print(f"done steps={step}", flush=True)
    return 0


# -- the sample-level life (--journal) ------------------------------------------------

#: The journal life's per-sample training log (``durable_job.audit_log``'s format).
SAMPLES_LOG = "samples.jsonl"
#: Every token the simulated pool made, one line per tick (``{"tokens", "failed"}``).
GENERATED_LOG = "generated.log"
JOURNAL_NAME = "journal"
#: A group fails whole only after this many failed samples: the injected
#: failures restart siblings (and fence their attempts) but drop nothing.
JOURNAL_MAX_ATTEMPTS = 64
#: ``--reuse``: what a resume takes from the journal (``nothing``: coverage
#: only, every unfinished sample is generated again from nothing).
REUSE = {"everything": Reuse.everything(), "nothing": Reuse.nothing()}


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
        payload = self.prefix.payload
        assert isinstance(payload, TokenPayload)  # the pool journals only tokens
        return len(payload)

    @property
    def done(self) -> bool:
        return self.have + len(self.new) >= len(self.full)


def run_journal(args: RunArgs) -> int:
    """One sample-level life (``--journal``): resume from the checkpoint and
    the rollout journal (or start, with a first checkpoint before anything
    is generated) and train to the end of the stream.

    A ``StreamCollector`` over the same seekable loader hands out groups of
    ``args.samples`` sibling leases; a simulated pool makes one token per
    lease per tick (``durable_job``'s stand-in engine: heavy-tailed lengths
    per ordinal and sibling). Each seal the ledger accepts is journaled as
    it happens, each running sample every ``progress_every`` tokens (a
    snapshot, then extends). Some attempts fail midway (``fail_rate``): the
    sibling restarts under a new attempt, and half of the failed attempts
    answer a few ticks later all the same, and the ledger must fence
    that seal (it is never journaled). Each step
    trains the model on the rows of the oldest landed groups, writes the
    prompt-level log (``frontier audit``) and the per-sample log, marks the
    journal, writes the checkpoint (torch parts, collector, buffer with its
    samples, journal position) and compacts the journal to its window. A
    resume replays the journal: sealed siblings come back without
    generation, running ones continue from their durable prefix. The life
    passes the kill points of ``args.kill_at``."""
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.samples < 1 or args.progress_every < 0:
        raise ValueError("--samples must be >= 1 and --progress-every >= 0")
    if args.reuse not in REUSE:
        raise ValueError(f"--reuse must be one of {sorted(REUSE)}, got {args.reuse!r}")
    reuse = REUSE[args.reuse]
    point = KillPoint(args.kill_at)
    dataset = make_dataset(args.rows)
    fingerprint = (
        f"{dataset_fingerprint(dataset, seed=args.seed, shuffle=True)};"
        f"journal;samples={args.samples}"
    )
    loader = make_seekable_loader(
        dataset, batch_size=args.batch_size, seed=args.seed, shuffle=True, epochs=args.epochs
    )
    n = args.samples
    collector = StreamCollector(
        SeekableSource(loader),
        LedgerConfig(
            stream_len=args.rows * args.epochs,
            samples=n,
            on_failure=FailurePolicy.RETRY,
            max_attempts=JOURNAL_MAX_ATTEMPTS,
            fingerprint=fingerprint,
        ),
    )
    model, optim = _model()
    log_path = workdir / LOG_NAME
    ckpt_root = workdir / CKPT_DIR
    samples_log = workdir / SAMPLES_LOG
    generated_log = workdir / GENERATED_LOG
    drop_torn_line(samples_log)
    drop_torn_line(generated_log)
    opts: dict[str, Any] = {
        "fingerprint": fingerprint,
        "lineage": lineage(workdir),
        "policy": CommitPolicy(max_delay=args.commit_delay),
        "progress_every": max(1, args.progress_every),
    }
    path = workdir / JOURNAL_NAME
    journal = (
        KillPointJournal(path, point=point, **opts) if point.kind else RolloutJournal(path, **opts)
    )
    # The collector reserves every attempt in the journal before it deals
    # it (``RolloutJournal.cover``): a later life starts above them.
    collector.journal = journal
    # ordinal -> {"row": features and target, "samples": [[sibling, attempt, tokens], ...]}
    buffer: dict[int, dict[str, Any]] = {}
    loaded = read_checkpoint(
        ckpt_root, fingerprint=fingerprint, require=["state", "model", "optim"]
    )
    reused = 0
    if loaded is None:
        step, resumes = 0, 0
        log = fresh_train_log(log_path)
        # Refuses a journal with samples: there is no checkpoint to go with it.
        recovered = journal.recover(
            None, position=None, checkpoint_id=None, reuse=reuse, fork=0, step=0
        )
    else:
        state = loaded.json_parts["state"]
        step, resumes = loaded.step, state["resumes"] + 1
        recovered = journal.recover(
            Checkpoint.from_state_dict(state["collector"]["ledger"], fingerprint=fingerprint),
            position=state["journal"]["position"],
            checkpoint_id=state["journal"]["id"],
            reuse=reuse,
            fork=step,
            step=step,
        )
        # Sometimes without the buffer: its groups then come back whole
        # from the journal (their seals are in the checkpoint's window).
        load_buffer = random.Random(f"{args.seed}:resume:{step}:{resumes}").random() >= 0.25
        resumed = collector.resume(
            state["collector"],
            load_replay_buffer=load_buffer,
            sealed=recovered.sealed,
            attempt_floor=recovered.attempt_floor,
            attempt_limit=recovered.attempt_limit,
        )
        reused = len(resumed.reused)
        if load_buffer:
            buffer = {int(o): g for o, g in state["buffer"].items()}
        model.load_state_dict(loaded.tensor_parts["model"])
        optim.load_state_dict(loaded.tensor_parts["optim"])
        log = TrainLogWriter(log_path, resume_records=state["records"])
    append_line(samples_log, {"resume": step}, sync=True)
    between_parts = _between_parts(args)

    def checkpoint() -> None:
        # The logs first: a checkpoint never counts a step they lack.
        log.sync()

        def write(position: int) -> None:
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

        checkpoint_journal(journal, checkpoint_id=step, cut=collector.ledger.cut, write=write)

    if loaded is None:
        # A first checkpoint before anything is generated: from now on a
        # journal with samples always has a checkpoint to resume from.
        checkpoint()
    rng = random.Random(f"{args.seed}:journal:{step}:{resumes}")
    rows: dict[int, list[float]] = {}
    sealed: dict[tuple[int, int], tuple[int, list[int]]] = {}  # (o, s) -> (attempt, tokens)
    running: dict[Lease, _Attempt] = {}
    generating: set[int] = set()  # groups taken and not landed yet
    offered: set[tuple[int, int]] = set()  # siblings offered their journaled prefix
    failed_tokens = fenced = 0  # this tick's

    def land(ordinals: Iterable[int]) -> None:
        for o in ordinals:
            generating.discard(o)
            buffer[o] = {
                "row": rows.pop(o),
                "samples": [[s, *sealed.pop((o, s))] for s in range(n)],
            }

    def start(lease: Lease) -> None:
        key = (lease.ordinal, lease.sibling)
        # A journaled prefix is offered to this life's first attempt at the
        # sibling only: a restart after a failure starts from nothing.
        prefix = None
        if args.progress_every and key not in offered:
            prefix = recovered.prefix(*key)
        offered.add(key)
        attempt = _Attempt(prefix, full_sample(lease.ordinal, lease.sibling, args.seed))
        if prefix is None and rng.random() < args.fail_rate:
            attempt.fail_at = rng.randint(0, len(attempt.full) - 1)
        running[lease] = attempt

    def dispatch() -> None:
        for taken in collector.take_samples(args.capacity - len(generating)):
            o = taken.ordinal
            rows[o] = [float(v) for v in taken.row.tolist()]
            for lease in taken.reused:
                payload = recovered.sample(lease)
                assert isinstance(payload, TokenPayload)
                sealed[(o, lease.sibling)] = (lease.attempt, list(payload.tokens()))
            generating.add(o)
            if taken.complete:
                land([o])
                collector.land_complete([o])
            for lease in taken.leases:
                start(lease)

    def fail(lease: Lease) -> None:
        # The job gives up on this attempt (an engine error, a timeout):
        # its sibling restarts under a new attempt, from nothing.
        nonlocal failed_tokens
        effect = collector.failed_samples([lease])
        for new in collector.restart(effect.restart):
            start(new)
        if effect.dropped:
            log.dropped(effect.dropped)
            append_line(samples_log, {"dropped": list(effect.dropped), "at": step}, sync=True)
            for o in effect.dropped:
                generating.discard(o)
                rows.pop(o, None)
                for s in range(n):
                    sealed.pop((o, s), None)
        # Every attempt the failure superseded (this one; a group failed or
        # dropped whole: its siblings') is thrown away or runs on as a zombie.
        for other in list(running):
            attempt = running[other]
            if attempt.zombie is not None or collector.current(other):
                continue
            failed_tokens += len(attempt.new)
            if rng.random() < 0.5:
                attempt.zombie = len(attempt.new) + rng.randint(1, 8)
            else:
                del running[other]

    def tick() -> int:
        nonlocal failed_tokens, fenced
        made = 0
        for lease in list(running):
            attempt = running.get(lease)
            if attempt is None:  # thrown away by a failure in this tick
                continue
            if not attempt.done:
                attempt.new.append(attempt.full[attempt.have + len(attempt.new)])
                made += 1
                failed_tokens += attempt.zombie is not None
            if attempt.zombie is not None:
                if attempt.done or len(attempt.new) >= attempt.zombie:
                    del running[lease]
                    effect = collector.sealed([lease])
                    if lease not in effect.fenced:
                        raise RuntimeError(f"the ledger accepted a failed attempt {lease}")
                    fenced += 1
                continue
            if attempt.fail_at is not None and len(attempt.new) > attempt.fail_at:
                fail(lease)
                continue
            have = attempt.have
            if attempt.done:
                del running[lease]
                payload = resumed_sample(attempt.prefix, _payload(attempt.new, have, step))
                effect = collector.sealed([lease])
                if lease in effect.sealed:
                    journal.sealed(lease, payload)
                    sealed[(lease.ordinal, lease.sibling)] = (lease.attempt, list(payload.tokens()))
                    land(effect.landed)
            elif args.progress_every and journal.due(attempt.recorded, len(attempt.new)):
                new, recorded = attempt.new, attempt.recorded
                if recorded == 0:
                    # The attempt's first record: a snapshot, prefix included.
                    journal.progress(
                        lease, resumed_sample(attempt.prefix, _payload(new, have, step))
                    )
                else:
                    # Then only the tokens since: each is journaled once.
                    journal.extend(
                        lease, have + recorded, _payload(new[recorded:], have + recorded, step)
                    )
                attempt.recorded = len(new)
        return made

    if args.announce:
        print(
            f"ready step={step} resumes={resumes} resumed={int(loaded is not None)} "
            f"torn={recovered.torn} reused={reused}",
            flush=True,
        )
    first = True
    while not collector.drained:
        dispatch()
        if first and loaded is not None and point.passed("resumed"):
            point.die(f"resumed at step {step} with {len(running)} leases generating")
        first = False
        failed_tokens = fenced = 0
        made = tick()
        journal.poll()
        if made:
            # Not fsynced: a SIGKILL loses no written bytes (the page cache
            # survives the process); one line, so all counts or none.
            line = {"tokens": made, "failed": failed_tokens, "fenced": fenced}
            append_line(generated_log, line, sync=False)
            if args.tick:
                time.sleep(args.tick)
        tail = collector.exhausted and not generating and buffer
        if not (len(buffer) >= args.group or tail):
            if collector.exhausted and not generating and not running and not collector.drained:
                raise RuntimeError("stream stalled: nothing generating, pending or buffered")
            continue
        chosen = sorted(buffer)[: args.group]
        groups = {o: buffer.pop(o) for o in chosen}
        _train(model, optim, [g["row"] for g in groups.values()])
        collector.trained(chosen)
        log.step(step, chosen)
        step += 1
        append_line(
            samples_log,
            {
                "step": step,
                "groups": {
                    str(o): [[s, a, len(t), digest(t)] for s, a, t in g["samples"]]
                    for o, g in groups.items()
                },
            },
            sync=True,
        )
        checkpoint()
        point.steps += 1
    journal.close()
    log.close()
    print(f"done steps={step}", flush=True)
    return 0


@attrs.frozen
class TortureResult:
    """What the torture did and what ``frontier audit`` said of the log.

    ``audit`` is the command's JSON report (``audit["clean"]`` its verdict)
    and ``audit_exit`` its exit status: 0 clean, 1 coverage violated. The
    counts below are read from that report. ``kills_at`` says where each
    kill landed. With the journal, ``samples`` is the per-sample audit of
    the surviving lineage (``durable_job.Audit``: lost, duplicated and bad
    samples, tokens needed, generated and redone), and ``clean`` needs it
    clean too."""

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
    #: Seals of failed attempts the ledger fenced (journal only).
    fenced: int = 0
    #: Lives whose journal open cut a torn tail (journal only).
    torn_tails: int = 0

    @property
    def clean(self) -> bool:
        coverage = self.audit_exit == 0 and bool(self.audit["clean"])
        return coverage and (self.samples is None or self.samples.clean)


#: Where ``torture(journal=True)`` kills: each kind once (in a seeded
#: order) before any twice. ``time``: a random moment after the ready line;
#: ``boot``: a random moment from the start (often still importing);
#: ``write``: inside a checkpoint write (between two of its parts); the
#: rest are ``KillPoint``s the life stops at itself.
JOURNAL_KILLS = ("time", "boot", "write", "append", "commit", "compact", "compacted", "resumed")
#: The passage of a kill point to die at is drawn from ``1..COUNTS[kind]``
#: (appends come by the dozen per step, group commits a few per step, a
#: compaction once per step).
COUNTS = {"append": 48, "commit": 8, "compact": 2, "compacted": 2, "resumed": 1}


def torture(
    workdir: str | os.PathLike[str],
    *,
    kills: int,
    seed: int = 0,
    rows: int | None = None,
    epochs: int = 2,
    write_pause: float = 0.01,
    timeout: float = 600.0,
    verbose: bool = False,
    journal: bool = False,
    samples: int = 4,
    progress_every: int = 4,
    tick: float = 0.002,
    reuse: str = "everything",
    life_deadline: float | None = None,
) -> TortureResult:
    """SIGKILL ``run`` ``kills`` times, then let it finish; audit the log
    with ``frontier audit`` (raises ``RuntimeError`` if the audit cannot
    read it), and with ``journal`` every sample too (``durable_job.audit_log``).

    Each life has ``life_deadline`` seconds (``_lives.life_deadline``), and
    no more than is left of ``timeout``: past it the life is killed with
    its process group and ``LifeDeadlineError`` names it.

    With ``journal`` the lives run ``run_journal`` and the kills go through
    ``JOURNAL_KILLS``; a ``resumed`` kill planned for a life that starts
    afresh becomes a ``time`` kill, and ``resumed`` stays due."""
    per_life = _life_deadline(life_deadline)
    t0 = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rows = rows if rows is not None else max(20, 2 * kills)
    rng = random.Random(seed)
    cmd = [
        sys.executable,
        "-m",
        "frontier_adapters.verify",
        "torch-run",
        "--workdir",
        str(workdir),
        "--rows",
        str(rows),
        "--epochs",
        str(epochs),
        "--seed",
        str(seed),
        "--write-pause",
        str(write_pause),
        "--announce",
    ]
    if journal:
        cmd += ["--journal", "--samples", str(samples), "--progress-every", str(progress_every)]
        cmd += ["--tick", str(tick), "--reuse", reuse]
    killed = in_write = lives = torn_tails = 0

    def torn(line: str) -> bool:
        """A journal life's ready line says its open cut a torn tail."""
        return journal and line.startswith("ready") and " torn=0 " not in line

    kills_at: list[str] = []
    due: list[str] = []  # the journal kinds still to come, in order
    while True:
        left = timeout - (time.monotonic() - t0)
        if left <= 0:
            raise TimeoutError(f"torture did not finish in {timeout} s ({killed} kills)")
        lives += 1
        life_cmd = list(cmd)
        if killed >= kills:
            mode = "finish"
        elif not journal:
            mode = rng.choice(["write", "write", "time", "boot"])
        else:
            if not due:
                block = list(JOURNAL_KILLS)
                rng.shuffle(block)
                due = block
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
            elif mode == "write":
                target = rng.randint(1, 8)
                seen = 0
                for line in life.lines():
                    torn_tails += torn(line)
                    done = done or line.startswith("done")
                    if line.startswith("ckpt-part"):
                        seen += 1
                        if seen >= target:
                            hit = mode
                            break
            elif mode != "finish":
                for line in life.lines():
                    torn_tails += torn(line)
                    done = done or line.startswith("done")
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
    stream_len = rows * epochs
    audit_exit, report = run_audit(workdir / LOG_NAME, stream_len)
    per_sample, fenced = None, 0
    if journal:
        generated = read_lines(workdir / GENERATED_LOG)
        per_sample = audit_log(
            read_lines(workdir / SAMPLES_LOG),
            generated,
            prompts=stream_len,
            samples=samples,
            seed=seed,
        )
        fenced = sum(line.get("fenced", 0) for line in generated)
    return TortureResult(
        kills=killed,
        in_write_kills=in_write,
        lives=lives,
        stream_len=stream_len,
        trained_once=int(report["trained_once"]),
        dropped=int(report["dropped"]),
        skipped=tuple(report["skipped_ordinals"]),
        duplicated=tuple(
            sorted({*report["duplicated_ordinals"], *report["out_of_range_ordinals"]})
        ),
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
