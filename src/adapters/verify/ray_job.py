"""The training job on Ray, and its kill tests, audited per sample.

``run_job`` is the driver: a ``LedgerActor`` hosts the ledger of groups of
``samples`` siblings (1: a prompt-level job), the replay buffer and, with
``journal`` (the default), the rollout journal (of which it is the single
writer, with its attempt reservation); ``StandInRollout`` actors take
sibling tasks from a ``RolloutFleet`` and report every ``progress_every``
tokens and at each seal; the driver "trains" on complete groups (it appends
each group's samples, sibling by sibling, with the attempt that sealed them
and a digest of their tokens, to the training log, fsynced), then writes an
atomic checkpoint (the ledger actor's state and the step) and has the
journal compacted, after every step. The training log is the per-sample
log of ``_sample_audit.audit_log``: a resume marker per life names
the checkpoint's step, and the groups the ledger dropped are logged with
the steps made before them.

Failures (``Chaos``, from inside the driver; the kinds take turns):

* a rollout worker SIGKILLed, ``ray.kill``ed, or crashing (``os._exit``):
  the fleet releases its leases (the ledger fails those still current and
  restarts each sibling under a new attempt, continuing from its last
  progress) and starts a replacement;
* the ledger actor SIGKILLed or ``ray.kill``ed: the driver reloads its last
  checkpoint and builds a new actor from it; the journal brings back the
  siblings sealed since (reused without generation) and the prefixes of
  running ones (without a journal they are generated again); the surviving
  workers are told of the new actor and their answers for the old
  incarnation's leases are refused (below the new incarnation's first
  attempt, by the reservation; of another incarnation, by its name);
* the driver (``torture``): a new driver process resumes the same way (its
  actors died with the old one).

``audit`` (``_sample_audit.audit_log``, the audit of the torch job's journal
level too) folds the training log's surviving lineage and checks every sample:
each prompt trained once (or dropped on record), with exactly its n
siblings, each sealed by one attempt, no attempt twice, each exactly the
stand-in's full token sequence (nothing lost or doubled across a
continuation); and it counts the tokens generated again::

    python -m frontier_adapters.verify ray-run --workdir /tmp/rj \\
        --worker-kills 4 --ledger-kills 3
    python -m frontier_adapters.verify ray-torture --workdir /tmp/rt --kills 4
    python -m frontier_adapters.verify ray-run --workdir /tmp/r1 --samples 1 --no-journal

Without ``--address`` both start a local 2-CPU cluster bound to 127.0.0.1
(``local_ray.init_ray``); the torture's driver processes join it with the
same loopback environment. Not API: a test fixture, like the other jobs
here.
"""

from __future__ import annotations

import functools
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs
import ray

from frontier_core import FailurePolicy, LedgerConfig
from frontier_core.journal import CommitPolicy, Reuse, TokenPayload

from .._service import SampleGroup, Snapshot
from .._sources import SequenceSource
from ..journal import RolloutJournal
from ..ray._actors import LedgerActor, LedgerLostError, ledger_call, rollout_actor, sigkill_local
from ..ray._fleet import RolloutFleet
from ._files import (
    append_line,
    commit_checkpoint,
    drop_torn_line,
    lineage,
    read_lines,
    write_atomic,
)
from ._lives import Life
from ._lives import life_deadline as _life_deadline
from ._sample_audit import Audit, audit_log, digest
from .local_ray import init_ray, loopback_env
from .ray_workers import StandInRollout

LOG_NAME = "trained.jsonl"
CHECKPOINT = "checkpoint.json"
JOURNAL = "journal"
TOKENS = "tokens.log"
#: ``progress_every=0``: no progress records (the service needs a cadence).
_NEVER: Final = 1 << 30
_T = TypeVar("_T")


@attrs.frozen
class JobConfig:
    """The job: ``rows`` prompts, ``samples`` siblings each, ``workers``
    rollout actors taking ``per_call`` tasks a call, ``groups_per_step``
    groups a step. ``journal``: the ledger actor owns a rollout journal
    (else a resume generates again everything outside the buffer);
    ``reuse``: ``everything`` (the journal's sealed siblings and prefixes
    come back) or ``nothing`` (coverage only); ``progress_every``: tokens
    between progress reports (0: none); ``save_buffer``: save the buffer in
    the checkpoint (else the journal rebuilds it)."""

    rows: int = 48
    samples: int = 4
    workers: int = 3
    per_call: int = 4
    groups_per_step: int = 4
    token_latency: float = 0.002
    fail_rate: float = 0.02
    crash_rate: float = 0.0
    progress_every: int = 4
    max_failures: int = 8
    journal: bool = True
    reuse: str = "everything"
    save_buffer: bool = True
    seed: int = 0

    @property
    def fingerprint(self) -> str:
        return f"ray-job:rows={self.rows}:n={self.samples}:seed={self.seed}"

    def ledger_config(self) -> LedgerConfig:
        return LedgerConfig(
            stream_len=self.rows,
            samples=self.samples,
            fingerprint=self.fingerprint,
            on_failure=FailurePolicy.RETRY,
            max_failures=self.max_failures,
        )


@attrs.define
class Chaos:
    """Kills from inside the driver: ``worker_kills`` rollout workers and
    ``ledger_kills`` ledger actors, each at a random training step from the
    driver's first to the stream's third-to-last, only with sibling work in
    flight (a ledger kill of a job with a journal also waits, for a while,
    until the ledger holds sealed siblings of open groups, so the journal
    has some to give back). Worker kills take turns: SIGKILL, ``ray.kill``,
    ``os._exit`` inside the worker; ledger kills: SIGKILL, ``ray.kill``.
    ``done_*`` count the kills made."""

    worker_kills: int = 0
    ledger_kills: int = 0
    seed: int = 0
    done_workers: int = 0
    done_ledgers: int = 0
    _rng: random.Random = attrs.field(init=False)
    _plan: list[tuple[int, str]] | None = attrs.field(init=False, default=None)
    _waited: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def plan(self, step: int, last_step: int) -> list[tuple[int, str]]:
        """The kills left, ``(step, "worker" | "ledger")`` in step order;
        drawn at the first call."""
        if self._plan is None:
            kinds = ["worker"] * self.worker_kills + ["ledger"] * self.ledger_kills
            self._rng.shuffle(kinds)
            at = sorted(self._rng.randint(step, max(step, last_step)) for _ in kinds)
            self._plan = list(zip(at, kinds, strict=True))
        return self._plan

    def strike(self, fleet: RolloutFleet, ledger: Any, step: int, last_step: int) -> None:
        plan = self.plan(step, last_step)
        if not plan or step < plan[0][0] or fleet.leases_in_flight() == 0:
            return
        if self._rng.random() > 0.3:
            return  # a random moment of this step, or a later one
        kind = plan[0][1]
        if kind == "ledger" and self._waited < 100:
            status = ledger_call(ledger.status.remote())
            if status["reserved"] is not None and (status["held"] == 0 or status["running"] == 0):
                self._waited += 1
                return
        plan.pop(0)
        self._waited = 0
        if kind == "worker":
            slot = self._rng.choice(sorted(fleet.workers))
            how = self.done_workers % 3
            if how == 0:
                fleet.sigkill(slot)
            else:
                fleet.kill(slot, crash=how == 2)
            self.done_workers += 1
        else:
            if self.done_ledgers % 2 == 0:
                sigkill_local(int(ledger_call(ledger.pid.remote())))
            else:
                ray.kill(ledger, no_restart=True)
            self.done_ledgers += 1


@attrs.frozen
class JobResult:
    steps: int
    ledger_rebuilds: int
    worker_deaths: int
    released: int
    seconds: float
    #: Summed over the ledger incarnations, as of each one's last snapshot.
    stats: dict[str, int]


def _group_entry(group: SampleGroup) -> list[list[Any]]:
    out = []
    for lease, payload in zip(group.leases, group.samples, strict=True):
        assert isinstance(payload, TokenPayload)
        tokens = list(payload.tokens())
        out.append([lease.sibling, lease.attempt, len(tokens), digest(tokens)])
    return out


class _Driver:
    """What a checkpoint restores: the step, the log's entry count, and the
    ledger actor built from the saved state."""

    def __init__(self, workdir: Path, cfg: JobConfig) -> None:
        self.workdir = workdir
        self.cfg = cfg
        self.config = cfg.ledger_config()
        self.source = SequenceSource([[o] for o in range(cfg.rows)], batch_size=8)
        self.lineage = lineage(workdir)
        self.log = workdir / LOG_NAME
        self.ledger: Any = None
        self.step = 0
        self.rebuilds = 0
        self.totals: dict[str, int] = {}
        self.last: dict[str, int] = {}

    def load(self) -> None:
        """(Re)start from the last checkpoint, or from scratch."""
        self._fold_stats()
        path = self.workdir / CHECKPOINT
        saved = json.loads(path.read_text()) if path.exists() else None
        state = None if saved is None else saved["ledger"]
        self.step = 0 if saved is None else saved["step"]
        drop_torn_line(self.log)
        append_line(self.log, {"resume": self.step}, sync=True)
        if self.ledger is not None:
            ray.kill(self.ledger, no_restart=True)
        cfg = self.cfg
        journal = functools.partial(
            RolloutJournal,
            str(self.workdir / JOURNAL),
            fingerprint=self.config.fingerprint,
            lineage=self.lineage,
            policy=CommitPolicy(max_delay=0.005),
            progress_every=cfg.progress_every or _NEVER,
        )
        self.ledger = LedgerActor.remote(
            self.source,
            self.config,
            journal=journal if cfg.journal else None,
            state=state,
            reuse=Reuse.everything() if cfg.reuse == "everything" else Reuse.nothing(),
        )
        if saved is None:
            self.commit(lambda: ledger_call(self.ledger.checkpoint.remote(step=0)))

    def _fold_stats(self) -> None:
        for k, v in self.last.items():
            self.totals[k] = self.totals.get(k, 0) + v
        self.last = {}

    def _snapshot(self, snap: Snapshot, *, at: int) -> None:
        """Log the drops ``snap`` reports as made after ``at`` steps (and
        keep its stats)."""
        if snap.dropped:
            append_line(self.log, {"dropped": list(snap.dropped), "at": at}, sync=True)
        self.last = {k: v for k, v in snap.stats.items() if isinstance(v, int)}

    def commit(self, mark: Callable[[], Snapshot]) -> None:
        """The checkpoint of ``self.step`` (``commit_checkpoint``): the ledger
        actor's snapshot marks the journal; its drops are logged as made
        before this step (the checkpoint counts them), the checkpoint is
        written, and the actor compacts the journal to it."""

        def write(snap: Snapshot) -> None:
            self._snapshot(snap, at=self.step - 1)
            record = {"ledger": snap.state, "step": self.step}
            write_atomic(self.workdir / CHECKPOINT, json.dumps(record).encode())

        commit_checkpoint(
            mark, write, lambda snap: ledger_call(self.ledger.compact.remote(snap.checkpoint_id))
        )

    def train(self, groups: list[SampleGroup]) -> None:
        append_line(
            self.log,
            {"step": self.step + 1, "groups": {str(g.ordinal): _group_entry(g) for g in groups}},
            sync=True,
        )
        self.step += 1
        ordinals = [g.ordinal for g in groups]
        save_buffer = self.cfg.save_buffer
        self.commit(
            lambda: ledger_call(
                self.ledger.trained.remote(ordinals, step=self.step, save_buffer=save_buffer)
            )
        )

    def settle(self) -> bool:
        # Drops since the last step are logged as made after it and not
        # checkpointed: a checkpoint of the same step could not tell a
        # resume which of its drops it counts (a resume at step k keeps
        # the drops made before k). The next step's checkpoint counts
        # them; a resume before it discards them and retries those groups.
        snap: Snapshot = ledger_call(
            self.ledger.checkpoint.remote(step=self.step, save_buffer=self.cfg.save_buffer)
        )
        self._snapshot(snap, at=self.step)
        return snap.drained


def _drive_fleet(
    driver: _Driver,
    fleet: RolloutFleet,
    *,
    groups_per_step: int,
    last_step: int,
    chaos: Chaos | None,
    max_steps: int | None,
) -> int:
    """Run the job until the stream is drained (or ``max_steps`` steps ran)
    and return the steps: keep the fleet busy, train on every batch of
    ``groups_per_step`` groups, and rebuild a lost ledger actor from the
    last checkpoint (``driver.load``), handing it to the fleet."""
    steps = 0
    while max_steps is None or steps < max_steps:
        try:
            if chaos is not None:
                chaos.strike(fleet, driver.ledger, driver.step, last_step)
            fleet.fill()
            fleet.poll(timeout=0.02)
            batch = ledger_call(driver.ledger.batch.remote(groups_per_step))
            if batch:
                driver.train(batch)
                steps += 1
            elif fleet.in_flight == 0 and fleet.exhausted and driver.settle():
                break
        except LedgerLostError:
            driver.rebuilds += 1
            driver.load()
            fleet.set_ledger(driver.ledger)
    return steps


def run_job(
    workdir: str | os.PathLike[str],
    cfg: JobConfig,
    *,
    chaos: Chaos | None = None,
    max_steps: int | None = None,
) -> JobResult:
    """Run (or resume) the job in ``workdir`` until every prompt is trained
    or dropped (or ``max_steps`` steps ran). Needs ``ray.init`` first."""
    start = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    driver = _Driver(workdir, cfg)
    driver.load()
    generations: dict[int, int] = {}

    def spawn(slot: int) -> Any:
        # A replacement draws other random numbers than the worker it replaces.
        generations[slot] = generations.get(slot, -1) + 1
        return rollout_actor(
            StandInRollout,
            seed=cfg.seed * 1000 + slot * 100 + generations[slot],
            data_seed=cfg.seed,
            token_latency=cfg.token_latency,
            fail_rate=cfg.fail_rate,
            crash_rate=cfg.crash_rate,
            tokens_log=str(workdir / TOKENS),
        )

    fleet = RolloutFleet(
        driver.ledger, spawn, cfg.workers, per_call=cfg.per_call, max_ahead=4 * cfg.groups_per_step
    )
    try:
        steps = _drive_fleet(
            driver,
            fleet,
            groups_per_step=cfg.groups_per_step,
            last_step=max(0, cfg.rows // cfg.groups_per_step - 3),
            chaos=chaos,
            max_steps=max_steps,
        )
    finally:
        driver._fold_stats()
        fleet.close()
        try:
            ray.get(driver.ledger.close.remote(), timeout=10)
        except Exception:
            pass
        ray.kill(driver.ledger, no_restart=True)
    return JobResult(
        steps=steps,
        ledger_rebuilds=driver.rebuilds,
        worker_deaths=fleet.deaths,
        released=fleet.released,
        seconds=time.monotonic() - start,
        stats=driver.totals,
    )


# -- the per-sample audit ---------------------------------------------------------------


@attrs.frozen
class JobAudit:
    """``_sample_audit.audit_log``'s verdict on the surviving lineage, as the
    ``ray-*`` commands report it: its fields, with ``dropped`` counting the
    prompts dropped on record (``Audit.dropped`` names them), and its
    ``clean`` and ``tokens_redone``."""

    prompts: int
    trained: int
    dropped: int
    lost: tuple[int, ...]
    duplicated: tuple[int, ...]
    bad_groups: tuple[int, ...]  # wrong siblings, an attempt twice, wrong tokens
    samples: int
    attempts: int
    lives: int
    tokens_needed: int
    tokens_generated: int
    tokens_failed: int
    tokens_redone: int
    clean: bool

    @classmethod
    def of(cls, audit: Audit) -> JobAudit:
        fields = attrs.asdict(audit, recurse=False)
        fields.update(dropped=len(audit.dropped), tokens_redone=audit.tokens_redone)
        return cls(**fields, clean=audit.clean)

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def audit(workdir: str | os.PathLike[str], cfg: JobConfig) -> JobAudit:
    """The per-sample audit (``_sample_audit.audit_log``) of the job's
    training log. The rollout workers count the tokens they generate as
    bare numbers, a line each (``StandInRollout``): read as the audit's
    ``{"tokens": n}`` lines. They do not tell the tokens of the attempts
    that failed (``fail_rate``) apart: ``tokens_redone`` counts those too."""
    work = Path(workdir)
    tokens = work / TOKENS
    generated = tokens.read_text().split() if tokens.exists() else []
    return JobAudit.of(
        audit_log(
            read_lines(work / LOG_NAME),
            [{"tokens": int(n)} for n in generated],
            prompts=cfg.rows,
            samples=cfg.samples,
            seed=cfg.seed,
        )
    )


# -- driver processes SIGKILLed -----------------------------------------------------------


def job_args(cfg: JobConfig) -> list[str]:
    """``cfg`` as ``ray-run`` options."""
    out = []
    for f in attrs.fields(JobConfig):
        value = getattr(cfg, f.name)
        flag = f.name.replace("_", "-")
        if isinstance(value, bool):
            out.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            out.append(f"--{flag}={value}")
    return out


def check_kills(cfg: JobConfig, kills: int) -> None:
    """Refuse, before anything runs, a stream too short for ``kills`` driver
    kills: each waits for 2 to 4 new log lines, the resume marker among
    them, so up to 3 steps of progress, and the job would otherwise finish
    first."""
    steps = -(-cfg.rows // cfg.groups_per_step)
    if kills * 3 >= steps:
        need = (kills * 3 + 1) * cfg.groups_per_step
        raise ValueError(
            f"{kills} kills need more than {kills * 3} training steps, but {cfg.rows} rows at "
            f"{cfg.groups_per_step} groups a step make {steps}: pass --rows {need} or more"
        )


@attrs.frozen
class TortureResult:
    kills: int
    runs: int
    seconds: float
    audit: dict[str, Any]


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def kill_drivers(
    cmd: Sequence[str],
    *,
    workdir: Path,
    log: Path,
    kills: int,
    seed: int,
    pause: float,
    timeout: float,
    tolerate: Callable[[int], bool] = lambda returncode: False,
    life_deadline: float | None = None,
) -> tuple[int, int]:
    """Run driver processes ``cmd`` (with ``--chaos-seed`` of the run
    appended) in ``workdir`` on the loopback environment and SIGKILL
    ``kills`` of them, each once ``log`` grew by 2 to 4 lines plus up to
    ``pause`` s (so every kill lands with work in flight); then let the
    last one finish. Returns (kills, runs). Each driver runs in a process
    group of its own with ``life_deadline`` seconds
    (``_lives.life_deadline``) and no more than is left of ``timeout``:
    past it the group is killed and ``LifeDeadlineError`` names the
    driver. Raises ``TimeoutError`` past ``timeout`` s, ``RuntimeError``
    for a driver exiting non-zero (unless ``tolerate(returncode)``: a
    verdict the caller reads itself) or a job that finished before its
    kills. Drivers' stderr goes to ``drivers.err``."""
    per_life = _life_deadline(life_deadline)
    rng = random.Random(seed)
    start = time.monotonic()
    done = runs = 0
    with open(workdir / "drivers.err", "ab") as err:
        while True:
            runs += 1
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                raise TimeoutError(f"the job did not finish in {timeout} s")
            with Life(
                [*cmd, f"--chaos-seed={seed * 1000 + runs}"],
                name=f"driver {runs}",
                deadline=min(per_life, left),
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=workdir,
                env=loopback_env(),
            ) as driver:
                if done < kills:
                    target = _lines(log) + rng.randint(2, 4)  # the resume marker counts

                    def grown(target: int = target) -> bool:
                        return _lines(log) >= target

                    driver.wait_until(grown, f"its log to reach {target} lines")
                    time.sleep(min(rng.uniform(0.0, pause), driver.remaining()))
                    if driver.poll() is None:
                        driver.kill()
                        done += 1
                        continue
                returncode = driver.wait()
            if returncode != 0 and not tolerate(returncode):
                raise RuntimeError(f"driver exited with {returncode}; see {err.name}")
            if done < kills:
                raise RuntimeError(f"delivered {done} of {kills} kills: the job finished first")
            return done, runs


def torture(
    workdir: str | os.PathLike[str],
    cfg: JobConfig,
    *,
    address: str,
    kills: int,
    seed: int = 0,
    chaos: tuple[int, int] = (0, 0),
    timeout: float = 600.0,
) -> TortureResult:
    """Run the job as driver processes joined to the cluster at ``address``,
    SIGKILL ``kills`` of them (each once its log grew by 2 to 4 lines, plus
    up to 0.3 s, so with sibling work in flight), let the last one finish,
    and audit every sample. ``chaos`` is the worker and ledger kills each
    driver makes itself."""
    check_kills(cfg, kills)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    args = [*job_args(cfg), f"--worker-kills={chaos[0]}", f"--ledger-kills={chaos[1]}"]
    cmd = [
        sys.executable,
        "-m",
        "frontier_adapters.verify",
        "ray-run",
        f"--workdir={workdir}",
        f"--address={address}",
        *args,
    ]
    start = time.monotonic()
    done, runs = kill_drivers(
        cmd,
        workdir=workdir,
        log=workdir / LOG_NAME,
        kills=kills,
        seed=seed,
        pause=0.3,
        timeout=timeout,
        # 1 is also the driver's verdict on an unclean audit: then ours says why.
        tolerate=lambda returncode: returncode == 1 and not audit(workdir, cfg).clean,
    )
    return TortureResult(
        kills=done,
        runs=runs,
        seconds=time.monotonic() - start,
        audit=audit(workdir, cfg).to_json(),
    )


def on_cluster(address: str | None, run: Callable[[str], _T]) -> _T:
    """``run(gcs)`` on the cluster at ``address``, or on a local one started
    on loopback for the purpose; Ray is shut down after."""
    gcs = init_ray(address)
    try:
        return run(gcs)
    finally:
        ray.shutdown()


def drive(
    workdir: str | os.PathLike[str],
    cfg: JobConfig,
    *,
    address: str | None = None,
    chaos: Chaos | None = None,
) -> JobResult:
    """One driver process: join the cluster at ``address`` (or start a
    local one on loopback), run or resume the job, shut Ray down."""
    return on_cluster(address, lambda _: run_job(workdir, cfg, chaos=chaos))


def torture_cluster(
    workdir: str | os.PathLike[str],
    cfg: JobConfig,
    *,
    address: str | None = None,
    kills: int,
    seed: int = 0,
    chaos: tuple[int, int] = (0, 0),
) -> TortureResult:
    """``torture`` on the cluster at ``address``, or on a local one started
    on loopback for the purpose (and shut down after)."""
    check_kills(cfg, kills)
    return on_cluster(
        address,
        lambda gcs: torture(workdir, cfg, address=gcs, kills=kills, seed=seed, chaos=chaos),
    )
