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

    python -m frontier_adapters.examples ray-run --workdir /tmp/rj --rows 64
    python -m frontier_adapters.examples ray-torture --workdir /tmp/rt --kills 5

Without ``--address`` both start a local 2-CPU cluster bound to 127.0.0.1
(``local_ray.init_ray``); the torture's driver processes join it with the
same loopback environment.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
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
from ..ray._fleet import (
    LedgerActor,
    LedgerLostError,
    RolloutFleet,
    ledger_call,
    rollout_actor,
)
from ..torch._files import read_checkpoint, write_checkpoint
from .local_ray import init_ray, loopback_env
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
class Chaos:
    """Kills from inside the driver: ``worker_kills`` rollout workers (every
    other one by ``os._exit`` inside the worker, the rest by ``ray.kill``)
    and ``ledger_kills`` ledger actors. Each kill is scheduled at a random
    training step between the driver's first step and the third-to-last of
    the stream, and lands at a random moment of that step or at the start of
    the next, so every kill happens before the job can finish."""

    worker_kills: int = 0
    ledger_kills: int = 0
    seed: int = 0
    done_workers: int = 0
    done_ledgers: int = 0
    _rng: random.Random = attrs.field(init=False)
    _plan: list[tuple[int, str]] | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def strike(self, fleet: RolloutFleet, ledger: Any, step: int, last_step: int) -> None:
        if self._plan is None:
            kinds = ["worker"] * self.worker_kills + ["ledger"] * self.ledger_kills
            self._rng.shuffle(kinds)
            at = sorted(self._rng.randint(step, max(step, last_step)) for _ in kinds)
            self._plan = list(zip(at, kinds, strict=True))
        if not self._plan or step < self._plan[0][0]:
            return
        if step == self._plan[0][0] and self._rng.random() > 0.3:
            return  # not yet: strike at a random moment of this step, or the next
        _, kind = self._plan.pop(0)
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

    def train(self, batch: list[tuple[int, Any]]) -> Snapshot:
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
        snap: Snapshot = ledger_call(self.ledger.trained.remote(ordinals))
        return snap


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
        generations[slot] = generations.get(slot, -1) + 1
        return _spawn_worker(cfg, slot, generations[slot])

    fleet = RolloutFleet(
        driver.ledger,
        spawn,
        cfg.workers,
        per_call=cfg.per_call,
        max_ahead=4 * cfg.groups_per_step,
    )
    steps = 0
    try:
        while max_steps is None or steps < max_steps:
            try:
                if chaos is not None:
                    last_step = max(0, cfg.stream_len // cfg.groups_per_step - 3)
                    chaos.strike(fleet, driver.ledger, driver.step, last_step)
                fleet.fill()
                fleet.poll(timeout=0.02)
                batch = ledger_call(driver.ledger.batch.remote(cfg.groups_per_step))
                if batch:
                    driver.commit(driver.train(batch))
                    steps += 1
                elif fleet.in_flight == 0 and fleet.exhausted:
                    # Nothing can land: the drops since the last step decide
                    # whether the stream is done.
                    snap: Snapshot = ledger_call(driver.ledger.snapshot.remote())
                    if snap.dropped:
                        driver.commit(snap)
                    if snap.drained:
                        break
            except LedgerLostError:
                driver.rebuilds += 1
                driver.load()
                fleet.set_ledger(driver.ledger)
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


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def check_kills(cfg: JobConfig, kills: int) -> None:
    """Refuse, before anything runs, a stream too short for ``kills``: each
    kill waits for 2 to 4 new log lines, the resume marker among them, so up
    to 3 steps of progress, and the job would otherwise finish first."""
    steps = -(-cfg.stream_len // cfg.groups_per_step)
    if kills * 3 >= steps:
        rows = -(-(kills * 3 + 1) * cfg.groups_per_step // cfg.epochs)
        raise ValueError(
            f"{kills} kills need more than {kills * 3} training steps, but {cfg.rows} rows x "
            f"{cfg.epochs} epochs at {cfg.groups_per_step} groups a step make {steps}: "
            f"pass --rows {rows} or more"
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
    log = workdir / LOG_NAME
    rng = random.Random(seed)
    cmd = [sys.executable, "-m", "frontier_adapters.examples", "ray-run"]
    cmd += [f"--workdir={workdir}"]
    cmd += [f"--address={address}", *_job_args(cfg)]
    cmd += [f"--worker-kills={chaos[0]}", f"--ledger-kills={chaos[1]}", f"--chaos-seed={seed}"]
    start = time.monotonic()
    done_kills = runs = 0
    with open(workdir / "drivers.err", "ab") as err:
        while True:
            runs += 1
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"the job did not finish in {timeout} s")
            proc = subprocess.Popen(
                [*cmd[:-1], f"--chaos-seed={seed * 1000 + runs}"],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=workdir,
                env=loopback_env(),
            )
            if done_kills < kills:
                target = _lines(log) + rng.randint(2, 4)  # the resume marker counts
                while proc.poll() is None and _lines(log) < target:
                    time.sleep(0.02)
                time.sleep(rng.uniform(0.0, 0.4))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    done_kills += 1
                    continue
            proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
            if proc.returncode != 0:
                raise RuntimeError(f"driver exited with {proc.returncode}; see {err.name}")
            if done_kills < kills:
                raise RuntimeError(
                    f"delivered {done_kills} of {kills} kills: the job finished first"
                )
            break
    audit_exit = subprocess.run(
        [*AUDIT, str(workdir / LOG_NAME), f"--stream-len={cfg.stream_len}"],
        stdout=subprocess.DEVNULL,
        check=False,
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
    init_ray(address)
    try:
        return run_job(workdir, cfg, chaos=chaos)
    finally:
        ray.shutdown()


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
    gcs = init_ray(address)
    try:
        return torture(workdir, cfg, address=gcs, kills=kills, seed=seed, chaos=chaos)
    finally:
        ray.shutdown()
