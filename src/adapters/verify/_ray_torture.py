"""What the Ray jobs' drivers and tortures share (``ray_job``, the prompt
level; ``ray_sample_job``, sample by sample): the driver's loop over a
fleet, the chaos plan, the refusal of a stream too short for its kills,
driver processes SIGKILLed one after another, and a run on a cluster.

The jobs differ in what they train on, what they checkpoint and how they
audit; each says that through a small ``Driver`` and its own arguments.

Not API: a test fixture of the verification jobs.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import attrs
import ray

from ..ray._actors import Fleet, LedgerLostError, ledger_call
from ._lives import Life
from ._lives import life_deadline as _life_deadline
from .local_ray import init_ray, loopback_env

_T = TypeVar("_T")


class Driver(Protocol):
    """A job's driver as ``drive_fleet`` uses it."""

    ledger: Any
    step: int
    rebuilds: int

    def load(self) -> None:
        """(Re)start from the last checkpoint, or from scratch."""

    def train(self, batch: Any) -> None:
        """Train one step on ``batch`` and commit it."""

    def settle(self) -> bool:
        """Nothing can land: log what the ledger dropped since the last
        step; whether the stream is drained."""
        ...


def respawner(spawn: Callable[[int, int], Any]) -> Callable[[int], Any]:
    """The fleet's ``spawn(slot)`` for ``spawn(slot, generation)``: the
    generation counts the slot's workers from 0, so a replacement draws
    other random numbers than the worker it replaces."""
    generations: dict[int, int] = {}

    def spawn_slot(slot: int) -> Any:
        generations[slot] = generations.get(slot, -1) + 1
        return spawn(slot, generations[slot])

    return spawn_slot


def drive_fleet(
    driver: Driver,
    fleet: Fleet[Any],
    *,
    groups_per_step: int,
    last_step: int,
    chaos: KillPlan | None = None,
    max_steps: int | None = None,
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


@attrs.define
class KillPlan:
    """Kills from inside a driver: ``worker_kills`` rollout workers and
    ``ledger_kills`` ledger actors, each at a random training step from the
    driver's first (``plan``) to ``last_step``; ``done_*`` count the kills
    made."""

    worker_kills: int = 0
    ledger_kills: int = 0
    seed: int = 0
    done_workers: int = 0
    done_ledgers: int = 0
    _rng: random.Random = attrs.field(init=False)
    _plan: list[tuple[int, str]] | None = attrs.field(init=False, default=None)

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

    def strike(self, fleet: Any, ledger: Any, step: int, last_step: int) -> None:
        """Make the kill the plan has due at ``step``, if it is time (each
        job decides the moment)."""
        raise NotImplementedError


def check_kills(kills: int, *, rows: int, groups_per_step: int, epochs: int | None = None) -> None:
    """Refuse, before anything runs, a stream too short for ``kills`` driver
    kills: each waits for 2 to 4 new log lines, the resume marker among
    them, so up to 3 steps of progress, and the job would otherwise finish
    first. ``epochs`` (``None``: a single pass, not said) repeats the rows."""
    steps = -(-rows * (epochs or 1) // groups_per_step)
    if kills * 3 >= steps:
        need = -(-(kills * 3 + 1) * groups_per_step // (epochs or 1))
        stream = f"{rows} rows" if epochs is None else f"{rows} rows x {epochs} epochs"
        raise ValueError(
            f"{kills} kills need more than {kills * 3} training steps, but {stream} at "
            f"{groups_per_step} groups a step make {steps}: pass --rows {need} or more"
        )


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


def driver_command(command: str, workdir: Path, address: str, args: Sequence[str]) -> list[str]:
    """``python -m frontier_adapters.verify COMMAND`` for a driver of the
    job in ``workdir`` joined to the cluster at ``address``."""
    return [
        sys.executable,
        "-m",
        "frontier_adapters.verify",
        command,
        f"--workdir={workdir}",
        f"--address={address}",
        *args,
    ]


def on_cluster(address: str | None, run: Callable[[str], _T]) -> _T:
    """``run(gcs)`` on the cluster at ``address``, or on a local one started
    on loopback for the purpose; Ray is shut down after."""
    gcs = init_ray(address)
    try:
        return run(gcs)
    finally:
        ray.shutdown()
