"""A sample-level training job on Ray, and its kill tests, audited per sample.

``run_sample_job`` is the driver: a ``SampleLedgerActor`` hosts the
sample-level ledger, the replay buffer and the rollout journal (of which it
is the single writer, with its attempt reservation); ``StandInSampleRollout``
actors take sibling tasks from a ``SampleFleet`` and report every
``progress_every`` tokens and at each seal; the driver "trains" on complete
groups (it appends each group's samples, sibling by sibling, with the attempt
that sealed them and a digest of their tokens, to the training log, fsynced),
then writes an atomic checkpoint (the ledger actor's state, the step, the
log's entry count) and has the journal compacted, after every step.

Failures, by SIGKILL:

* a rollout worker: the fleet releases its leases (the ledger fails those
  still current and restarts each sibling under a new attempt, continuing
  from its last progress) and starts a replacement;
* the ledger actor: the driver reloads its last checkpoint and builds a new
  actor from it; the journal brings back the siblings sealed since (reused
  without generation) and the prefixes of running ones; the surviving
  workers are told of the new actor and their answers for the old
  incarnation's leases are refused (the attempt reservation puts them all
  below the new incarnation's first attempt);
* the driver (``sample_torture``): a new driver process resumes the same way
  (its actors died with the old one).

``audit_samples`` folds the training log's surviving lineage and checks every
sample: each prompt trained once (or dropped on record), with exactly its n
siblings, each sealed by one attempt, no attempt twice, each exactly the
stand-in's full token sequence (nothing lost or doubled across a
continuation); and it counts the tokens generated again::

    python -m frontier_adapters.examples ray-samples-run --workdir /tmp/rs \\
        --worker-kills 4 --ledger-kills 3
    python -m frontier_adapters.examples ray-samples-torture --workdir /tmp/rst --kills 4

Not API: an example and a test fixture, like the other jobs here.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Final

import attrs
import ray

from frontier_core import FailurePolicy, LedgerConfig
from frontier_core.journal import CommitPolicy, Reuse, TokenPayload

from .._sample_service import SampleGroup, SampleSnapshot
from .._sources import SequenceSource
from ..ray._actors import ledger_call
from ..ray._samples import SampleFleet, SampleLedgerActor, sample_rollout_actor, sigkill_local
from ..rollout import RolloutJournal
from . import _ray_torture
from ._ray_torture import KillPlan, drive_fleet, driver_command, kill_drivers, on_cluster, respawner
from .durable_job import digest, full_sample
from .ray_workers import StandInSampleRollout

LOG_NAME = "trained.jsonl"
CHECKPOINT = "checkpoint.json"
JOURNAL = "journal"
TOKENS = "tokens.log"
#: ``progress_every=0``: no progress records (the service needs a cadence).
_NEVER: Final = 1 << 30


@attrs.frozen
class SampleJobConfig:
    """The job: ``rows`` prompts, ``samples`` siblings each, ``workers``
    rollout actors taking ``per_call`` tasks a call, ``groups_per_step``
    groups a step. ``reuse``: ``everything`` (the journal's sealed siblings
    and prefixes come back) or ``nothing`` (coverage only);
    ``progress_every``: tokens between progress reports (0: none);
    ``save_buffer``: save the buffer in the checkpoint (else the journal
    rebuilds it)."""

    rows: int = 48
    samples: int = 4
    workers: int = 3
    per_call: int = 4
    groups_per_step: int = 4
    token_latency: float = 0.002
    fail_rate: float = 0.02
    crash_rate: float = 0.0
    progress_every: int = 4
    max_attempts: int = 8
    reuse: str = "everything"
    save_buffer: bool = True
    seed: int = 0

    @property
    def fingerprint(self) -> str:
        return f"ray-samples:rows={self.rows}:n={self.samples}:seed={self.seed}"

    def ledger_config(self) -> LedgerConfig:
        return LedgerConfig(
            stream_len=self.rows,
            samples=self.samples,
            fingerprint=self.fingerprint,
            on_failure=FailurePolicy.RETRY,
            max_attempts=self.max_attempts,
        )


@attrs.define
class SampleChaos(KillPlan):
    """SIGKILLs from inside the driver: ``worker_kills`` rollout worker
    processes and ``ledger_kills`` ledger actor processes, each at a random
    training step before the stream's last few, and only with sibling work
    in flight (a ledger kill also waits, for a while, until the ledger
    holds sealed siblings of open groups, so the journal has some to give
    back)."""

    _waited: int = attrs.field(init=False, default=0)

    def strike(self, fleet: SampleFleet, ledger: Any, step: int, last_step: int) -> None:
        plan = self.plan(step, last_step)
        if not plan or step < plan[0][0] or fleet.leases_in_flight() == 0:
            return
        if self._rng.random() > 0.3:
            return  # a random moment of this step, or a later one
        kind = plan[0][1]
        if kind == "ledger" and self._waited < 100:
            status = ledger_call(ledger.status.remote())
            if status["held"] == 0 or status["running"] == 0:
                self._waited += 1
                return
        plan.pop(0)
        self._waited = 0
        if kind == "worker":
            fleet.sigkill(self._rng.choice(sorted(fleet.workers)))
            self.done_workers += 1
        else:
            sigkill_local(int(ledger_call(ledger.pid.remote())))
            self.done_ledgers += 1


@attrs.frozen
class SampleJobResult:
    steps: int
    ledger_rebuilds: int
    worker_deaths: int
    released: int
    seconds: float
    #: Summed over the ledger incarnations, as of each one's last snapshot.
    stats: dict[str, int]


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _append(path: Path, entry: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _drop_torn_line(path: Path) -> None:
    if path.exists():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)


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

    def __init__(self, workdir: Path, cfg: SampleJobConfig) -> None:
        self.workdir = workdir
        self.cfg = cfg
        self.config = cfg.ledger_config()
        self.source = SequenceSource([[o] for o in range(cfg.rows)], batch_size=8)
        lineage = workdir / "lineage"
        if not lineage.exists():
            _write_atomic(lineage, secrets.token_hex(8).encode())
        self.lineage = lineage.read_text()
        self.log = workdir / LOG_NAME
        self.ledger: Any = None
        self.step = 0
        self.entries = 0
        self.rebuilds = 0
        self.totals: dict[str, int] = {}
        self.last: dict[str, int] = {}

    def load(self) -> None:
        """(Re)start from the last checkpoint, or from scratch."""
        self._fold_stats()
        path = self.workdir / CHECKPOINT
        saved = json.loads(path.read_text()) if path.exists() else None
        state = None
        if saved is not None:
            state, self.step, self.entries = saved["ledger"], saved["step"], saved["entries"]
        _drop_torn_line(self.log)
        _append(self.log, {"resume": self.entries})
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
        self.ledger = SampleLedgerActor.remote(
            self.source,
            self.config,
            journal=journal,
            state=state,
            reuse=Reuse.everything() if cfg.reuse == "everything" else Reuse.nothing(),
        )
        if saved is None:
            self.commit(ledger_call(self.ledger.checkpoint.remote(step=0)))

    def _fold_stats(self) -> None:
        for k, v in self.last.items():
            self.totals[k] = self.totals.get(k, 0) + v
        self.last = {}

    def commit(self, snap: SampleSnapshot) -> None:
        """Log the drops, write the checkpoint that counts them, compact."""
        if snap.dropped:
            _append(self.log, {"dropped": list(snap.dropped)})
            self.entries += 1
        record = {"ledger": snap.state, "step": self.step, "entries": self.entries}
        _write_atomic(self.workdir / CHECKPOINT, json.dumps(record).encode())
        self.last = {k: v for k, v in snap.stats.items() if isinstance(v, int)}
        ledger_call(self.ledger.compact.remote(snap.checkpoint_id))

    def train(self, groups: list[SampleGroup]) -> None:
        _append(
            self.log,
            {"step": self.step + 1, "groups": {str(g.ordinal): _group_entry(g) for g in groups}},
        )
        self.entries += 1
        self.step += 1
        snap: SampleSnapshot = ledger_call(
            self.ledger.trained.remote(
                [g.ordinal for g in groups], step=self.step, save_buffer=self.cfg.save_buffer
            )
        )
        self.commit(snap)

    def settle(self) -> bool:
        snap: SampleSnapshot = ledger_call(
            self.ledger.checkpoint.remote(step=self.step, save_buffer=self.cfg.save_buffer)
        )
        if snap.dropped:
            self.commit(snap)
        if snap.drained:
            self.last = {k: v for k, v in snap.stats.items() if isinstance(v, int)}
        return snap.drained


def run_sample_job(
    workdir: str | os.PathLike[str],
    cfg: SampleJobConfig,
    *,
    chaos: SampleChaos | None = None,
    max_steps: int | None = None,
) -> SampleJobResult:
    """Run (or resume) the job in ``workdir`` until every prompt is trained
    or dropped (or ``max_steps`` steps ran). Needs ``ray.init`` first."""
    start = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    driver = _Driver(workdir, cfg)
    driver.load()

    def spawn(slot: int, generation: int) -> Any:
        return sample_rollout_actor(
            StandInSampleRollout,
            seed=cfg.seed * 1000 + slot * 100 + generation,
            data_seed=cfg.seed,
            token_latency=cfg.token_latency,
            fail_rate=cfg.fail_rate,
            crash_rate=cfg.crash_rate,
            tokens_log=str(workdir / TOKENS),
        )

    fleet = SampleFleet(
        driver.ledger,
        respawner(spawn),
        cfg.workers,
        per_call=cfg.per_call,
        max_ahead=4 * cfg.groups_per_step,
    )
    try:
        steps = drive_fleet(
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
    return SampleJobResult(
        steps=steps,
        ledger_rebuilds=driver.rebuilds,
        worker_deaths=fleet.deaths,
        released=fleet.released,
        seconds=time.monotonic() - start,
        stats=driver.totals,
    )


# -- the per-sample audit ---------------------------------------------------------------


@attrs.frozen
class SampleAudit:
    """The per-sample verdict of the surviving lineage."""

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

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.bad_groups)

    @property
    def tokens_redone(self) -> int:
        return self.tokens_generated - self.tokens_needed

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "clean": self.clean, "tokens_redone": self.tokens_redone}


def audit_samples(workdir: str | os.PathLike[str], cfg: SampleJobConfig) -> SampleAudit:
    """Fold the training log (a resume marker keeps the entries its
    checkpoint counted and discards the dead branch's) and check every
    sample of the lineage."""
    work = Path(workdir)
    entries: list[dict[str, Any]] = []
    lives = 0
    for line in (work / LOG_NAME).read_text().splitlines():
        entry = json.loads(line)
        if "resume" in entry:
            lives += 1
            entries = entries[: entry["resume"]]
        else:
            entries.append(entry)
    trained: dict[int, int] = {}
    dropped: dict[int, int] = {}
    bad: set[int] = set()
    attempts: set[int] = set()
    samples = 0
    needed = 0
    for entry in entries:
        for o in entry.get("dropped", ()):
            dropped[o] = dropped.get(o, 0) + 1
        for key, group in entry.get("groups", {}).items():
            o = int(key)
            trained[o] = trained.get(o, 0) + 1
            if sorted(s for s, _, _, _ in group) != list(range(cfg.samples)):
                bad.add(o)
            for s, a, n, d in group:
                want = full_sample(o, s, cfg.seed)
                needed += len(want)
                samples += 1
                if a in attempts or n != len(want) or d != digest(want):
                    bad.add(o)
                attempts.add(a)
    generated = 0
    tokens = work / TOKENS
    if tokens.exists():
        generated = sum(int(x) for x in tokens.read_text().split())
    resolved = dict(trained)
    for o, k in dropped.items():
        resolved[o] = resolved.get(o, 0) + k
    return SampleAudit(
        prompts=cfg.rows,
        trained=len(trained),
        dropped=len(dropped),
        lost=tuple(o for o in range(cfg.rows) if o not in resolved),
        duplicated=tuple(sorted(o for o, k in resolved.items() if k > 1)),
        bad_groups=tuple(sorted(bad)),
        samples=samples,
        attempts=len(attempts),
        lives=lives,
        tokens_needed=needed,
        tokens_generated=generated,
    )


# -- driver processes SIGKILLed -----------------------------------------------------------


def job_args(cfg: SampleJobConfig) -> list[str]:
    """``cfg`` as ``ray-samples-run`` options."""
    out = []
    for f in attrs.fields(SampleJobConfig):
        value = getattr(cfg, f.name)
        flag = f.name.replace("_", "-")
        if isinstance(value, bool):
            out.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            out.append(f"--{flag}={value}")
    return out


def check_sample_kills(cfg: SampleJobConfig, kills: int) -> None:
    """Refuse, before anything runs, a stream too short for ``kills`` driver
    kills (``_ray_torture.check_kills``)."""
    _ray_torture.check_kills(kills, rows=cfg.rows, groups_per_step=cfg.groups_per_step)


@attrs.frozen
class SampleTortureResult:
    kills: int
    runs: int
    seconds: float
    audit: dict[str, Any]


def sample_torture(
    workdir: str | os.PathLike[str],
    cfg: SampleJobConfig,
    *,
    address: str,
    kills: int,
    seed: int = 0,
    chaos: tuple[int, int] = (0, 0),
    timeout: float = 600.0,
) -> SampleTortureResult:
    """Run the job as driver processes joined to the cluster at ``address``,
    SIGKILL ``kills`` of them (each once its log grew by 2 to 4 lines, plus
    up to 0.3 s, so with sibling work in flight), let the last one finish,
    and audit every sample. ``chaos`` is the worker and ledger kills each
    driver makes itself."""
    check_sample_kills(cfg, kills)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    args = [*job_args(cfg), f"--worker-kills={chaos[0]}", f"--ledger-kills={chaos[1]}"]
    start = time.monotonic()
    done, runs = kill_drivers(
        driver_command("ray-samples-run", workdir, address, args),
        workdir=workdir,
        log=workdir / LOG_NAME,
        kills=kills,
        seed=seed,
        pause=0.3,
        timeout=timeout,
        # 1 is also the driver's verdict on an unclean audit: then ours says why.
        tolerate=lambda returncode: returncode == 1 and not audit_samples(workdir, cfg).clean,
    )
    return SampleTortureResult(
        kills=done,
        runs=runs,
        seconds=time.monotonic() - start,
        audit=audit_samples(workdir, cfg).to_json(),
    )


def drive(
    workdir: str | os.PathLike[str],
    cfg: SampleJobConfig,
    *,
    address: str | None = None,
    chaos: SampleChaos | None = None,
) -> SampleJobResult:
    """One driver process: join the cluster at ``address`` (or start a
    local one on loopback), run or resume the job, shut Ray down."""
    return on_cluster(address, lambda _: run_sample_job(workdir, cfg, chaos=chaos))


def torture_cluster(
    workdir: str | os.PathLike[str],
    cfg: SampleJobConfig,
    *,
    address: str | None = None,
    kills: int,
    seed: int = 0,
    chaos: tuple[int, int] = (0, 0),
) -> SampleTortureResult:
    """``sample_torture`` on the cluster at ``address``, or on a local one
    started on loopback for the purpose (and shut down after)."""
    check_sample_kills(cfg, kills)
    return on_cluster(
        address,
        lambda gcs: sample_torture(workdir, cfg, address=gcs, kills=kills, seed=seed, chaos=chaos),
    )
