"""Sibling-level leases on a local Ray cluster (2 CPUs, 127.0.0.1 only), with
the rollout journal owned by the ledger actor, under real SIGKILLs: of the
ledger actor with a worker generating (its answers reach the successor and
are refused: the journal's attempt floor alone would have dealt the same
attempts again), of a rollout actor (its siblings restart from their last
progress), of both inside a job, and of driver processes; each run's
training log is audited per sample."""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

import ray
from frontier_adapters.journal import RolloutJournal
from frontier_adapters.ray import (
    SampleFleet,
    SampleLedgerActor,
    SequenceSource,
    ledger_call,
    sample_rollout_actor,
)
from frontier_adapters.verify.ray_sample_job import (
    SampleChaos,
    SampleJobConfig,
    audit_samples,
    run_sample_job,
    sample_torture,
)
from frontier_adapters.verify.ray_workers import StandInSampleRollout

from frontier_core import FailurePolicy, LedgerConfig
from frontier_core.journal import TokenPayload

CONFIG = LedgerConfig(
    stream_len=8, samples=4, fingerprint="t", on_failure=FailurePolicy.RETRY, max_attempts=5
)


def _ledger(tmp: Path, *, progress_every: int = 1000, **kw: Any) -> Any:
    journal = functools.partial(
        RolloutJournal,
        str(tmp / "journal"),
        fingerprint="t",
        lineage="L",
        progress_every=progress_every,
    )
    return SampleLedgerActor.remote(
        SequenceSource([[o] for o in range(8)], batch_size=4), CONFIG, journal=journal, **kw
    )


def _sigkill(ledger: Any) -> None:
    os.kill(int(ledger_call(ledger.pid.remote())), signal.SIGKILL)


def _payload(n: int) -> TokenPayload:
    return TokenPayload.of(list(range(n)), [-0.5] * n, 0)


def test_a_sigkilled_ledger_actors_surviving_worker_is_refused_by_its_successor(
    cluster: str, tmp_path: Path
) -> None:
    """A worker generates sibling tasks of ledger incarnation A (nothing of
    them journaled yet); A is SIGKILLed; B resumes from the checkpoint and
    the journal, and the worker, told of B, answers there. The journal names
    no attempt, so its floor alone would deal the same attempts to the same
    siblings again and accept the answers; the reservation refuses them."""
    a = _ledger(tmp_path, progress_every=3)
    snap = ledger_call(a.checkpoint.remote(step=0))
    worker = sample_rollout_actor(StandInSampleRollout, token_latency=0.1)
    got = ledger_call(a.take.remote(2))
    call = worker.generate.remote(a, got)
    # The first report is due after 3 tokens (0.3 s): A dies before it.
    time.sleep(0.05)
    _sigkill(a)
    b = _ledger(tmp_path, state=snap.state)
    status = ledger_call(b.status.remote())
    assert status["journal_floor"] == 0 and status["floor"] > max(x.attempt for x in got.leases)
    ray.get(worker.set_ledger.remote(b), timeout=60)
    # Each task's first progress report reaches B, is refused, and the
    # worker abandons the task.
    assert ray.get(call, timeout=60) == 0
    status = ledger_call(b.status.remote())
    assert (status["foreign"], status["progress"], status["sealed"]) == (2, 0, 0)
    again = ledger_call(b.take.remote(4))
    assert [x[:2] for x in again.leases[:2]] == [x[:2] for x in got.leases]
    assert all(x.attempt >= status["floor"] for x in again.leases)
    ray.kill(b)
    ray.kill(worker)


def test_a_resumed_ledger_actor_reuses_the_siblings_its_journal_holds(
    cluster: str, tmp_path: Path
) -> None:
    a = _ledger(tmp_path)
    snap = ledger_call(a.checkpoint.remote(step=0))
    got = ledger_call(a.take.remote(4))
    done = got.leases[:3]
    ledger_call(
        a.report.remote(
            sealed=[(x, _payload(5)) for x in done], progress=[(got.leases[3], _payload(2))]
        )
    )
    ledger_call(a.flush.remote())
    _sigkill(a)
    b = _ledger(tmp_path, state=snap.state)
    status = ledger_call(b.status.remote())
    assert (status["recovered_sealed"], status["recovered_prefixes"]) == (3, 1)
    rest = ledger_call(b.take.remote(1))
    (task,) = rest.tasks
    assert task.lease[:2] == (0, 3) and task.lease.attempt >= status["floor"]
    assert task.prefix == _payload(2)  # continue from the durable prefix
    assert ledger_call(b.report.remote(sealed=[(task.lease, _payload(5))])).landed == (0,)
    (group,) = ledger_call(b.batch.remote(1))
    assert group.leases == (*done, task.lease)  # three sealed by A, one by B
    assert ledger_call(b.status.remote())["reused"] == 3
    ray.kill(b)


def test_a_sigkilled_rollout_actor_restarts_its_siblings_from_their_progress(
    cluster: str, tmp_path: Path
) -> None:
    ledger = _ledger(tmp_path, progress_every=2)
    ledger_call(ledger.checkpoint.remote(step=0))
    fleet = SampleFleet(
        ledger, lambda slot: sample_rollout_actor(StandInSampleRollout, token_latency=0.1), 1
    )
    assert fleet.fill() == 4
    deadline = time.monotonic() + 30
    while ledger_call(ledger.status.remote())["progress"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    fleet.sigkill(0)
    while fleet.deaths < 1:
        assert time.monotonic() < deadline, "the dead worker was never noticed"
        fleet.poll(timeout=0.2)
    status = ledger_call(ledger.status.remote())
    assert status["released"] >= 1 and status["queued"] == status["released"]
    again = ledger_call(ledger.take.remote(4))
    continued = [t for t in again.tasks if t.prefix is not None]
    assert continued and all(t.lease.attempt >= 4 for t in again.tasks)
    assert all(isinstance(t.prefix, TokenPayload) and len(t.prefix) >= 2 for t in continued)
    fleet.close()
    ray.kill(ledger)


def test_sigkills_of_workers_and_ledger_actors_in_a_job_audit_clean_per_sample(
    cluster: str, tmp_path: Path
) -> None:
    """Rollout worker and ledger actor processes SIGKILLed with sibling work
    in flight, inside one driver: every prompt trained once with exactly its
    n samples, each from one attempt, no attempt twice, each the right
    tokens; resumed ledger actors reused journaled siblings; the surviving
    workers' answers to the lost incarnations were refused."""
    cfg = SampleJobConfig(rows=40, workers=3, fail_rate=0.03, token_latency=0.001)
    chaos = SampleChaos(worker_kills=3, ledger_kills=2, seed=11)
    result = run_sample_job(tmp_path, cfg, chaos=chaos)
    assert (chaos.done_workers, chaos.done_ledgers, result.ledger_rebuilds) == (3, 2, 2)
    assert result.worker_deaths >= 2
    report = audit_samples(tmp_path, cfg)
    assert report.clean, report
    assert report.trained + report.dropped == cfg.rows
    assert report.samples == report.attempts == report.trained * cfg.samples
    assert result.stats["reused"] > 0 and result.stats["foreign"] > 0
    assert result.stats["recovered_sealed"] > 0


def test_sigkilled_drivers_resume_the_sample_job_until_done(cluster: str, tmp_path: Path) -> None:
    """Driver processes SIGKILLed (their actors die with them, the ledger
    actor holding the journal's lock among them), some after SIGKILLing a
    worker and a ledger actor themselves; each new driver's ledger actor
    waits for the lock, resumes from the checkpoint and the journal."""
    cfg = SampleJobConfig(rows=32, workers=2, token_latency=0.001)
    result = sample_torture(tmp_path, cfg, address=cluster, kills=2, seed=3, chaos=(1, 1))
    assert result.kills == 2
    audit = result.audit
    assert audit["clean"] and audit["trained"] + audit["dropped"] == cfg.rows, audit
    assert audit["samples"] == audit["attempts"]
