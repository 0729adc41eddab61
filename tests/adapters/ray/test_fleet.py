"""Real kill tests on a local Ray cluster (2 CPUs, one per module): rollout
actors killed by ``ray.kill`` and by ``os._exit``, the ledger actor killed,
driver processes SIGKILLed; the training log must cover every prompt exactly
once (``frontier audit`` exit 0)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")

import ray
from frontier_adapters.examples.ray_job import Chaos, JobConfig, audit, run_job, torture
from frontier_adapters.examples.ray_workers import StandInRollout
from frontier_adapters.ray import (
    LedgerActor,
    LedgerLostError,
    RolloutFleet,
    SequenceSource,
    ledger_call,
    rollout_actor,
)

from frontier_core import FailurePolicy, LedgerConfig


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """One small local cluster for the module; its GCS address."""
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"Ray cannot start a local cluster here: {exc}")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def test_the_ray_binding_imports_no_torch() -> None:
    code = (
        "import sys, frontier_adapters.ray\n"
        "print('torch' in {m.split('.')[0] for m in sys.modules})"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _ledger(n: int, **kw: Any) -> Any:
    config = LedgerConfig(stream_len=n, on_failure=FailurePolicy.RETRY, max_attempts=5)
    return LedgerActor.remote(SequenceSource(list(range(n)), batch_size=4), config, **kw)


def _wait_for_death(fleet: RolloutFleet, deaths: int) -> None:
    deadline = time.monotonic() + 30
    while fleet.deaths < deaths:
        assert time.monotonic() < deadline, "the dead worker was never noticed"
        fleet.poll(timeout=0.2)


@pytest.mark.parametrize("crash", [False, True], ids=["ray.kill", "os._exit"])
def test_a_dead_rollout_actor_fails_its_leases_through_the_ledger(
    cluster: str, crash: bool
) -> None:
    ledger = _ledger(12)
    # With crash_rate=1 the worker calls os._exit on the lease's first prompt.
    fleet = RolloutFleet(
        ledger,
        lambda slot: rollout_actor(StandInRollout, latency=0.5, crash_rate=float(crash)),
        1,
        per_call=4,
    )
    assert fleet.fill() == 4
    if not crash:
        fleet.kill(0)
    _wait_for_death(fleet, 1)
    status = ledger_call(ledger.status.remote())
    assert (status["released"], status["leased"], status["pending"]) == (4, 0, 4)
    # The retry is handed out first, to the replacement worker.
    lease = ledger_call(ledger.take.remote(6))
    assert lease.ordinals == (0, 1, 2, 3, 4, 5)
    ray.kill(ledger)
    for worker in fleet.workers.values():
        ray.kill(worker)


def test_an_error_in_a_live_worker_fails_the_rest_of_its_lease(cluster: str) -> None:
    ledger = _ledger(8)
    # report_every=1: the first prompt lands before the second one raises.
    fleet = RolloutFleet(
        ledger,
        lambda slot: rollout_actor(StandInRollout, latency=0, error_rate=0.5, report_every=1),
        1,
        per_call=8,
    )
    fleet.fill()
    while fleet.in_flight:
        fleet.poll(timeout=1)
    status = ledger_call(ledger.status.remote())
    assert fleet.deaths == 0 and len(fleet.errors) == 1
    assert "injected generation error" in fleet.errors[0]
    assert status["landed"] + status["released"] == 8 and status["released"] >= 1
    assert status["leased"] == 0 and status["pending"] == status["released"]
    ray.kill(ledger)
    ray.kill(fleet.workers[0])


def test_a_lost_ledger_actor_is_reported_and_rebuilt_from_its_state(cluster: str) -> None:
    ledger = _ledger(8)
    lease = ledger_call(ledger.take.remote(4))
    ledger_call(ledger.report.remote(lease.id, [(0, "g0"), (1, "g1")], []))
    snap = ledger_call(ledger.trained.remote([0]))
    ray.kill(ledger)
    # ray.kill is asynchronous: a call may still be served until it lands.
    deadline = time.monotonic() + 30
    with pytest.raises(LedgerLostError):
        while time.monotonic() < deadline:
            ledger_call(ledger.status.remote())
            time.sleep(0.05)
    rebuilt = _ledger(8, state=snap.state)
    assert [o for o, _ in ledger_call(rebuilt.batch.remote(1))] == [1]
    # 2 and 3 were generating when the state was taken: regenerated.
    assert ledger_call(rebuilt.take.remote(3)).ordinals == (2, 3, 4)
    ray.kill(rebuilt)


def test_worker_and_ledger_kills_inside_the_job_skip_and_duplicate_nothing(
    cluster: str, tmp_path: Path
) -> None:
    cfg = JobConfig(rows=96, workers=3, latency=0.01, fail_rate=0.05, crash_rate=0.01)
    chaos = Chaos(worker_kills=6, ledger_kills=2, seed=3)
    result = run_job(tmp_path, cfg, chaos=chaos)
    assert chaos.done_workers == 6 and chaos.done_ledgers == 2
    assert result.ledger_rebuilds == 2
    # A worker killed while idle near the end may never be called again.
    assert result.worker_deaths >= 3
    report = audit(tmp_path, cfg.stream_len)
    assert report["skipped"] == 0 and report["duplicated"] == 0 and report["out_of_range"] == 0
    assert report["trained_once"] + report["dropped"] == cfg.stream_len


def test_cpu_engine_rollout_actors_survive_a_kill(cluster: str, tmp_path: Path) -> None:
    cfg = JobConfig(rows=24, workers=2, per_call=4, groups_per_step=4, engine="cpu")
    result = run_job(tmp_path, cfg, chaos=Chaos(worker_kills=1, seed=1))
    assert result.worker_deaths >= 1
    report = audit(tmp_path, cfg.stream_len)
    assert report["clean"] and report["trained_once"] == cfg.stream_len


def test_sigkilled_drivers_resume_the_job_until_done(cluster: str, tmp_path: Path) -> None:
    """Driver processes connected to the cluster are SIGKILLed with work in
    flight (their actors die with them), some of them after killing a rollout
    actor and the ledger actor themselves; each restart resumes from the
    last checkpoint. ``frontier audit`` must exit 0."""
    cfg = JobConfig(rows=64, workers=2, groups_per_step=4, latency=0.02, fail_rate=0.05)
    result = torture(tmp_path, cfg, address=cluster, kills=3, seed=5, chaos=(1, 1))
    assert result.kills == 3
    assert result.audit_exit == 0
    assert result.audit["skipped"] == 0 and result.audit["duplicated"] == 0
    assert result.audit["trained_once"] + result.audit["dropped"] == cfg.stream_len
