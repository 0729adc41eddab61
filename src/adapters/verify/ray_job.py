"""A training job on Ray with crash-safe data coverage, and its kill tests.

``run_job`` is the driver of an async RL job: a ``LedgerActor`` hosts the
ledger, the prompt stream and the replay buffer; rollout worker actors
generate leases of prompts and report to it; the driver trains a tiny torch
model on the oldest buffered groups, logs each step to the training-data log
and writes an atomic checkpoint after every step (the ledger actor's state,
the model, the step and the log's record count). Failures are handled on
Ray's own signals:

* a rollout worker that dies (``ray.kill``, ``os._exit``, a lost node):
  ``RolloutFleet`` releases its leases through the ledger (``retry``
  regenerates them) and starts a replacement;
* the ledger actor lost: the driver reloads its last checkpoint (model, step,
  log marker) and builds a new ledger actor from the saved state; everything
  generated since is regenerated;
* the driver killed: ``run_job`` in a new process resumes from the last
  checkpoint (its actors died with the old driver).

``chaos`` kills workers and the ledger actor from inside the driver;
``torture`` SIGKILLs driver processes::

    python -m frontier_adapters.verify ray-run --workdir /tmp/rj --rows 64
    python -m frontier_adapters.verify ray-torture --workdir /tmp/rt --kills 5

Without ``--address`` both start a local 2-CPU cluster bound to 127.0.0.1
(``local_ray.init_ray``); the torture's driver processes join it with the
same loopback environment.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import ray
import torch

from frontier_core import FailurePolicy, LedgerConfig, TrainLogWriter
from frontier_core._audit import audit_log

from .._service import Snapshot
from .._sources import SequenceSource
from ..ray._fleet import LedgerActor, RolloutFleet, ledger_call, rollout_actor
from ..torch._files import read_checkpoint, write_checkpoint
from . import _ray_torture
from ._lives import AUDIT_DEADLINE
from ._lives import run as run_bounded
from ._ray_torture import KillPlan, drive_fleet, driver_command, kill_drivers, on_cluster, respawner
from .ray_workers import CpuEngineRollout, StandInRollout

LOG_NAME = "train_log.jsonl"
CKPT_DIR = "checkpoints"
AUDIT = (sys.executable, "-m", "frontier_core._cli", "audit")


@attrs.frozen
class JobConfig:
    """The job: ``rows`` prompts for ``epochs``, ``workers`` rollout actors
    with leases of ``per_call`` prompts, ``groups_per_step`` groups per
    training step. ``engine`` is ``standin`` or ``cpu``."""

    rows: int = 64
    epochs: int = 1
    workers: int = 3
    per_call: int = 4
    groups_per_step: int = 8
    latency: float = 0.01
    fail_rate: float = 0.0
    crash_rate: float = 0.0
    max_attempts: int = 6
    engine: str = "standin"
    seed: int = 0

    @property
    def stream_len(self) -> int:
        return self.rows * self.epochs

    @property
    def fingerprint(self) -> str:
        return f"ray-demo:rows={self.rows}:seed={self.seed}"


@attrs.define
class Chaos(KillPlan):
    """Kills from inside the driver: ``worker_kills`` rollout workers (every
    other one by ``os._exit`` inside the worker, the rest by ``ray.kill``)
    and ``ledger_kills`` ledger actors. Each kill is scheduled at a random
    training step between the driver's first step and the third-to-last of
    the stream, and lands at a random moment of that step or at the start of
    the next, so every kill happens before the job can finish."""

    def strike(self, fleet: RolloutFleet, ledger: Any, step: int, last_step: int) -> None:
        plan = self.plan(step, last_step)
        if not plan or step < plan[0][0]:
            return
        if step == plan[0][0] and self._rng.random() > 0.3:
            return  # not yet: strike at a random moment of this step, or the next
        _, kind = plan.pop(0)
        if kind == "worker":
            slot = self._rng.choice(sorted(fleet.workers))
            fleet.kill(slot, crash=self.done_workers % 2 == 1)
            self.done_workers += 1
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


def _spawn_worker(cfg: JobConfig, slot: int, generation: int) -> Any:
    seed = cfg.seed * 1000 + slot * 100 + generation
    if cfg.engine == "cpu":
        return rollout_actor(CpuEngineRollout, seed=cfg.seed, n=4, max_tokens=8)
    return rollout_actor(
        StandInRollout,
        seed=seed,
        latency=cfg.latency,
        fail_rate=cfg.fail_rate,
        crash_rate=cfg.crash_rate,
    )


def make_rows(cfg: JobConfig) -> list[Any]:
    rng = random.Random(f"rows:{cfg.seed}")
    return [[rng.randrange(2, 16) for _ in range(4)] for _ in range(cfg.rows)]


def _features(group: Any) -> torch.Tensor:
    tokens = group.get("tokens") or [t for c in group["completions"] for t in c]
    counts = torch.zeros(4)
    for t in tokens:
        counts[t % 4] += 1.0
    return counts / max(1, len(tokens))


class _Driver:
    """The driver's state that a checkpoint restores: model, optimizer,
    step, log and the ledger actor."""

    def __init__(self, workdir: Path, cfg: JobConfig) -> None:
        self.workdir = workdir
        self.cfg = cfg
        self.root = workdir / CKPT_DIR
        self.config = LedgerConfig(
            stream_len=cfg.stream_len,
            fingerprint=cfg.fingerprint,
            on_failure=FailurePolicy.RETRY,
            max_attempts=cfg.max_attempts,
        )
        self.source = SequenceSource(make_rows(cfg), epochs=cfg.epochs, batch_size=8)
        self.model = torch.nn.Linear(4, 1)
        self.optim = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.log: TrainLogWriter | None = None
        self.ledger: Any = None
        self.step = 0
        self.seq = 0
        self.rebuilds = 0

    def load(self) -> None:
        """(Re)start from the last checkpoint, or from scratch."""
        loaded = read_checkpoint(
            self.root,
            fingerprint=self.cfg.fingerprint,
            require=["ledger", "driver", "model", "optim"],
        )
        state: dict[str, Any] | None = None
        records = 0
        if loaded is not None:
            driver = loaded.json_parts["driver"]
            self.step, records, self.seq = driver["step"], driver["records"], loaded.step + 1
            state = loaded.json_parts["ledger"]
            self.model.load_state_dict(loaded.tensor_parts["model"])
            self.optim.load_state_dict(loaded.tensor_parts["optim"])
        if self.log is not None:
            self.log.close()
        self.log = TrainLogWriter(self.workdir / LOG_NAME, resume_records=records)
        if self.ledger is not None:
            ray.kill(self.ledger, no_restart=True)
        self.ledger = LedgerActor.remote(self.source, self.config, state=state)
        if loaded is None:
            self.commit(ledger_call(self.ledger.snapshot.remote()))

    def commit(self, snap: Snapshot) -> None:
        """Log the drops, then write the checkpoint that counts them."""
        assert self.log is not None
        self.log.dropped(snap.dropped)
        self.log.sync()
        write_checkpoint(
            self.root,
            self.seq,
            fingerprint=self.cfg.fingerprint,
            json_parts={
                "ledger": snap.state,
                "driver": {"step": self.step, "records": self.log.records},
            },
            tensor_parts={"model": self.model.state_dict(), "optim": self.optim.state_dict()},
        )
        self.seq += 1

    def train(self, batch: list[tuple[int, Any]]) -> None:
        assert self.log is not None
        x = torch.stack([_features(g) for _, g in batch])
        y = torch.tensor([[float(o % 3)] for o, _ in batch])
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.optim.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        self.optim.step()
        ordinals = [o for o, _ in batch]
        self.log.step(self.step, ordinals)
        self.step += 1
        self.commit(ledger_call(self.ledger.trained.remote(ordinals)))

    def settle(self) -> bool:
        # Nothing can land: the drops since the last step decide whether
        # the stream is done.
        snap: Snapshot = ledger_call(self.ledger.snapshot.remote())
        if snap.dropped:
            self.commit(snap)
        return snap.drained


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
    fleet = RolloutFleet(
        driver.ledger,
        respawner(lambda slot, generation: _spawn_worker(cfg, slot, generation)),
        cfg.workers,
        per_call=cfg.per_call,
        max_ahead=4 * cfg.groups_per_step,
    )
    try:
        steps = drive_fleet(
            driver,
            fleet,
            groups_per_step=cfg.groups_per_step,
            last_step=max(0, cfg.stream_len // cfg.groups_per_step - 3),
            chaos=chaos,
            max_steps=max_steps,
        )
    finally:
        if driver.log is not None:
            driver.log.close()
        for worker in fleet.workers.values():
            ray.kill(worker, no_restart=True)
        ray.kill(driver.ledger, no_restart=True)
    return JobResult(
        steps=steps,
        ledger_rebuilds=driver.rebuilds,
        worker_deaths=fleet.deaths,
        released=fleet.released,
        seconds=time.monotonic() - start,
    )


def audit(workdir: str | os.PathLike[str], stream_len: int) -> dict[str, Any]:
    """The audit of the job's training log (``frontier audit``)."""
    return audit_log(Path(workdir) / LOG_NAME, stream_len).to_json()


@attrs.frozen
class TortureResult:
    kills: int
    runs: int
    seconds: float
    audit: dict[str, Any]
    audit_exit: int


def _job_args(cfg: JobConfig) -> list[str]:
    return [
        f"--rows={cfg.rows}",
        f"--epochs={cfg.epochs}",
        f"--workers={cfg.workers}",
        f"--per-call={cfg.per_call}",
        f"--groups-per-step={cfg.groups_per_step}",
        f"--latency={cfg.latency}",
        f"--fail-rate={cfg.fail_rate}",
        f"--crash-rate={cfg.crash_rate}",
        f"--max-attempts={cfg.max_attempts}",
        f"--engine={cfg.engine}",
        f"--seed={cfg.seed}",
    ]


def check_kills(cfg: JobConfig, kills: int) -> None:
    """Refuse, before anything runs, a stream too short for ``kills``
    (``_ray_torture.check_kills``)."""
    _ray_torture.check_kills(
        kills, rows=cfg.rows, groups_per_step=cfg.groups_per_step, epochs=cfg.epochs
    )


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
    """Run the job as driver processes connected to the Ray cluster at
    ``address`` and SIGKILL ``kills`` of them, each after its training log
    grew by 1 to 3 records plus a random fraction of a second (so every kill
    lands with work in flight), then let the last one finish and audit the
    log with the ``frontier audit`` command. ``chaos`` is the number of
    rollout worker and ledger actor kills each driver makes itself."""
    check_kills(cfg, kills)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    args = [*_job_args(cfg), f"--worker-kills={chaos[0]}", f"--ledger-kills={chaos[1]}"]
    start = time.monotonic()
    done_kills, runs = kill_drivers(
        driver_command("ray-run", workdir, address, args),
        workdir=workdir,
        log=workdir / LOG_NAME,
        kills=kills,
        seed=seed,
        pause=0.4,
        timeout=timeout,
    )
    audit_exit = run_bounded(
        [*AUDIT, str(workdir / LOG_NAME), f"--stream-len={cfg.stream_len}"],
        name="frontier audit",
        deadline=AUDIT_DEADLINE,
    ).returncode
    return TortureResult(
        kills=done_kills,
        runs=runs,
        seconds=time.monotonic() - start,
        audit=audit(workdir, cfg.stream_len),
        audit_exit=audit_exit,
    )


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
