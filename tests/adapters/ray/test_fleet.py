"""Real kill tests on a local Ray cluster (2 CPUs, one per module, bound to
127.0.0.1 only): rollout actors killed by ``ray.kill``, by ``os._exit`` and
by SIGKILL, the ledger actor killed (with the rollout journal it owns: its
surviving worker's answers reach the successor and are refused, the
journal's attempt floor alone would have dealt the same attempts again;
without one: refused by the lost incarnation's name), driver processes
SIGKILLed; each run's training log is audited per sample (every prompt
trained once with its n samples, each the right tokens). The cluster's
processes, and a driver that joins it, must listen on loopback only."""

from __future__ import annotations

import functools
import ipaddress
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

import ray
from frontier_adapters.journal import RolloutJournal
from frontier_adapters.ray import (
    LedgerActor,
    LedgerLostError,
    RolloutFleet,
    SequenceSource,
    ledger_call,
    rollout_actor,
)
from frontier_adapters.ray._actors import LedgerTimeoutError
from frontier_adapters.verify._lives import Life
from frontier_adapters.verify.local_ray import is_loopback, loopback_env
from frontier_adapters.verify.ray_job import Chaos, JobConfig, audit, run_job, torture
from frontier_adapters.verify.ray_workers import CpuEngineRollout, StandInRollout

from frontier_core import FailurePolicy, LedgerConfig
from frontier_core.journal import TokenPayload


def test_the_ray_binding_imports_no_torch() -> None:
    code = (
        "import sys, frontier_adapters.ray\n"
        "print('torch' in {m.split('.')[0] for m in sys.modules})"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


def test_the_binding_reexports_the_services_names_without_twins() -> None:
    import frontier_adapters
    import frontier_adapters.ray as binding

    for name in ("Assignment", "LedgerService", "Reported", "Snapshot", "SampleTask"):
        assert getattr(binding, name) is getattr(frontier_adapters, name)
    assert not hasattr(binding, "Lease")  # frontier_core.Lease is a sibling's attempt
    for gone in ("PromptLease", "SampleFleet", "SampleLedgerActor", "sample_rollout_actor"):
        assert not hasattr(binding, gone)


def _ledger(n: int, samples: int = 1, **kw: Any) -> Any:
    config = LedgerConfig(
        stream_len=n, samples=samples, on_failure=FailurePolicy.RETRY, max_failures=5
    )
    return LedgerActor.remote(SequenceSource([[o] for o in range(n)], batch_size=4), config, **kw)


def _journaled(tmp: Path, *, progress_every: int = 1000, **kw: Any) -> Any:
    """A ledger actor of 8 prompts, 4 siblings each, owning a journal."""
    journal = functools.partial(
        RolloutJournal,
        str(tmp / "journal"),
        fingerprint="t",
        lineage="L",
        progress_every=progress_every,
    )
    config = LedgerConfig(
        stream_len=8, samples=4, fingerprint="t", on_failure=FailurePolicy.RETRY, max_failures=5
    )
    source = SequenceSource([[o] for o in range(8)], batch_size=4)
    return LedgerActor.remote(source, config, journal=journal, **kw)


def _sigkill(ledger: Any) -> None:
    os.kill(int(ledger_call(ledger.pid.remote())), signal.SIGKILL)


def _payload(n: int) -> TokenPayload:
    return TokenPayload.of(list(range(n)), [-0.5] * n, 0)


def _wait_for_death(fleet: RolloutFleet, deaths: int) -> None:
    deadline = time.monotonic() + 30
    while fleet.deaths < deaths:
        assert time.monotonic() < deadline, "the dead worker was never noticed"
        fleet.poll(timeout=0.2)


@pytest.mark.parametrize("how", ["ray.kill", "os._exit", "SIGKILL"])
def test_a_dead_rollout_actor_fails_its_leases_through_the_ledger(cluster: str, how: str) -> None:
    ledger = _ledger(12)
    # With crash_rate=1 the worker calls os._exit inside its first task.
    fleet = RolloutFleet(
        ledger,
        lambda slot: rollout_actor(
            StandInRollout, token_latency=0.05, crash_rate=float(how == "os._exit")
        ),
        1,
        per_call=4,
    )
    assert fleet.fill() == 4
    if how == "ray.kill":
        fleet.kill(0)
    elif how == "SIGKILL":
        fleet.sigkill(0)
    _wait_for_death(fleet, 1)
    status = ledger_call(ledger.status.remote())
    assert (status["released"], status["running"], status["queued"]) == (4, 4, 4)
    # The restarts are handed out first, to the replacement worker.
    got = ledger_call(ledger.take.remote(6))
    assert [x.ordinal for x in got.leases] == [0, 1, 2, 3, 4, 5]
    ray.kill(ledger)
    fleet.close()


def test_an_error_in_a_live_worker_fails_the_rest_of_its_assignment(cluster: str) -> None:
    ledger = _ledger(8)
    fleet = RolloutFleet(
        ledger,
        lambda slot: rollout_actor(StandInRollout, token_latency=0, error_rate=0.5),
        1,
        per_call=8,
    )
    fleet.fill()
    deadline = time.monotonic() + 60
    while fleet.in_flight:
        assert time.monotonic() < deadline, "the worker's call never ended"
        fleet.poll(timeout=1)
    status = ledger_call(ledger.status.remote())
    assert fleet.deaths == 0 and len(fleet.errors) == 1
    assert "injected generation error" in fleet.errors[0]
    assert status["sealed"] + status["released"] == 8 and status["released"] >= 1
    assert status["queued"] == status["released"] == fleet.released
    ray.kill(ledger)
    fleet.close()


@ray.remote(num_cpus=0)
class _Stuck:
    """An actor whose call never answers in time (a stuck ledger actor)."""

    def stuck(self) -> int:
        time.sleep(60)
        return 0


def test_a_ledger_call_that_never_answers_raises_a_typed_timeout(cluster: str) -> None:
    """A stuck ledger actor (alive, so not ``LedgerLostError``) ends the
    driver's wait with ``LedgerTimeoutError`` after the call's timeout,
    not for ever."""
    stuck = _Stuck.remote()  # type: ignore[attr-defined]
    try:
        t0 = time.monotonic()
        with pytest.raises(LedgerTimeoutError, match=r"did not answer within 0\.5 s"):
            ledger_call(stuck.stuck.remote(), timeout=0.5)
        assert time.monotonic() - t0 < 30
    finally:
        ray.kill(stuck)


def test_a_lost_ledger_actor_is_reported_and_rebuilt_from_its_state(cluster: str) -> None:
    ledger = _ledger(8)
    got = ledger_call(ledger.take.remote(4))
    sealed = [(x, _payload(3)) for x in got.leases[:2]]
    ledger_call(ledger.report.remote(sealed=sealed, incarnation=got.incarnation))
    snap = ledger_call(ledger.trained.remote([0], step=1))
    ray.kill(ledger)
    # ray.kill is asynchronous: a call may still be served until it lands.
    deadline = time.monotonic() + 30
    with pytest.raises(LedgerLostError):
        while time.monotonic() < deadline:
            ledger_call(ledger.status.remote())
            time.sleep(0.05)
    rebuilt = _ledger(8, state=snap.state)
    assert [g.ordinal for g in ledger_call(rebuilt.batch.remote(1))] == [1]
    # 2 and 3 were generating when the state was taken: regenerated.
    again = ledger_call(rebuilt.take.remote(3))
    assert [x.ordinal for x in again.leases] == [2, 3, 4]
    # The lost incarnation's answer for 2 is refused by its name.
    late = ledger_call(rebuilt.report.remote(sealed=sealed[:1], incarnation=got.incarnation))
    assert late.foreign == 1
    ray.kill(rebuilt)


def test_a_sigkilled_ledger_actors_surviving_worker_is_refused_by_its_successor(
    cluster: str, tmp_path: Path
) -> None:
    """A worker generates sibling tasks of ledger incarnation A (nothing of
    them journaled yet); A is SIGKILLed; B resumes from the checkpoint and
    the journal, and the worker, told of B, answers there. The journal names
    no attempt, so its floor alone would deal the same attempts to the same
    siblings again and accept the answers; the reservation refuses them."""
    a = _journaled(tmp_path, progress_every=3)
    snap = ledger_call(a.checkpoint.remote(step=0))
    # It waits for B as long as B may take to start on a loaded machine.
    worker = rollout_actor(StandInRollout, token_latency=0.1, rebind_wait=60.0)
    got = ledger_call(a.take.remote(2))
    call = worker.generate.remote(a, got)
    # The first report is due after 3 tokens (0.3 s): A dies before it.
    time.sleep(0.05)
    _sigkill(a)
    b = _journaled(tmp_path, state=snap.state)
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
    a = _journaled(tmp_path)
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
    b = _journaled(tmp_path, state=snap.state)
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
    ledger = _journaled(tmp_path, progress_every=2)
    ledger_call(ledger.checkpoint.remote(step=0))
    fleet = RolloutFleet(ledger, lambda slot: rollout_actor(StandInRollout, token_latency=0.1), 1)
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


def test_cpu_engine_rollout_actors_survive_a_kill(cluster: str) -> None:
    """Workers on the CPU engine (one sample a task, generated
    concurrently): one is killed with its assignment in flight; its leases
    are released and generated again, and every prompt lands once."""
    pytest.importorskip("torch")
    n = 12
    config = LedgerConfig(stream_len=n, on_failure=FailurePolicy.RETRY, max_failures=5)
    rows = SequenceSource([[2 + o % 5, 3, 4] for o in range(n)], batch_size=4)
    ledger = LedgerActor.remote(rows, config)
    fleet = RolloutFleet(
        ledger,
        lambda slot: rollout_actor(CpuEngineRollout, seed=slot, token_latency=0.05),
        2,
        per_call=3,
    )
    trained: list[int] = []
    deadline = time.monotonic() + 120
    fleet.fill()
    fleet.kill(0)
    step = 0
    while True:
        assert time.monotonic() < deadline, "the job did not finish"
        fleet.fill()
        fleet.poll(timeout=0.1)
        if groups := ledger_call(ledger.batch.remote(4)):
            step += 1
            trained += [g.ordinal for g in groups]
            assert all(len(g.samples[0]) > 0 for g in groups)
            if ledger_call(ledger.trained.remote(trained[-len(groups) :], step=step)).drained:
                break
    assert fleet.deaths >= 1 and sorted(trained) == list(range(n))
    fleet.close()
    ray.kill(ledger)


@pytest.mark.parametrize(("samples", "journal"), [(4, True), (1, False)])
def test_kills_of_workers_and_ledger_actors_in_a_job_audit_clean_per_sample(
    cluster: str, tmp_path: Path, samples: int, journal: bool
) -> None:
    """Rollout workers (SIGKILL, ray.kill, os._exit) and ledger actors
    (SIGKILL, ray.kill) killed with sibling work in flight, inside one
    driver: every prompt trained once with exactly its n samples, each from
    one attempt, no attempt twice, each the right tokens; resumed ledger
    actors reused journaled siblings (with a journal); the surviving
    workers' answers to the lost incarnations were refused."""
    cfg = JobConfig(
        rows=40, samples=samples, journal=journal, workers=3, fail_rate=0.03, crash_rate=0.01
    )
    chaos = Chaos(worker_kills=3, ledger_kills=2, seed=11)
    result = run_job(tmp_path, cfg, chaos=chaos)
    assert (chaos.done_workers, chaos.done_ledgers, result.ledger_rebuilds) == (3, 2, 2)
    assert result.worker_deaths >= 2
    report = audit(tmp_path, cfg)
    assert report.clean, report
    assert report.trained + report.dropped == cfg.rows
    assert report.samples == report.attempts == report.trained * cfg.samples
    if journal:
        assert result.stats["reused"] > 0 and result.stats["foreign"] > 0
        assert result.stats["recovered_sealed"] > 0


@pytest.mark.parametrize(("samples", "journal"), [(4, True), (1, False)])
def test_sigkilled_drivers_resume_the_job_until_done(
    cluster: str, tmp_path: Path, samples: int, journal: bool
) -> None:
    """Driver processes SIGKILLed (their actors die with them, the ledger
    actor holding the journal's lock among them), some after killing a
    worker and a ledger actor themselves; each new driver's ledger actor
    (waiting for the lock) resumes from the checkpoint and the journal."""
    cfg = JobConfig(rows=32, samples=samples, journal=journal, workers=2)
    result = torture(tmp_path, cfg, address=cluster, kills=2, seed=3, chaos=(1, 1))
    assert result.kills == 2
    report = result.audit
    assert report["clean"] and report["trained"] + report["dropped"] == cfg.rows, report
    assert report["samples"] == report["attempts"]


# -- loopback only --------------------------------------------------------------------


def _proc_address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} prints it: 32-bit words in host
    (little-endian) order."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def _descendants(root: int) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _listening(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes hold."""
    owner: dict[str, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                owner[link[len("socket:[") : -1]] = pid
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and inode in owner:  # TCP_LISTEN
                    address, port = local.split(":")
                    found.append((owner[inode], str(_proc_address(address)), int(port, 16)))
    return found


def test_the_socket_reader_tells_loopback_from_every_interface() -> None:
    """The check below on known /proc/net lines: it must flag 0.0.0.0, ::
    and an outward address, and accept 127.0.0.1, ::1 and ::ffff:127.0.0.1."""
    assert str(_proc_address("0100007F")) == "127.0.0.1"
    assert str(_proc_address("00000000")) == "0.0.0.0"
    assert str(_proc_address("020200C0")) == "192.0.2.2"
    assert str(_proc_address("00000000000000000000000000000000")) == "::"
    assert str(_proc_address("00000000000000000000000001000000")) == "::1"
    mapped = _proc_address("0000000000000000FFFF00000100007F")
    assert mapped == ipaddress.ip_address("::ffff:127.0.0.1")
    for host in ("127.0.0.1", "::1", "::ffff:127.0.0.1", str(mapped)):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.0.2.2", "::ffff:192.0.2.2", "localhost"):
        assert not is_loopback(host), host


def test_ray_listens_on_loopback_only(cluster: str) -> None:
    """Every listening socket of this driver and of the processes Ray
    started under it (GCS, raylet, workers, agents), and of a driver process
    that joins the cluster as the torture's drivers do, is on loopback."""
    assert is_loopback(cluster.rpartition(":")[0]), cluster
    assert is_loopback(ray.util.get_node_ip_address())
    # Start a worker, so that worker processes listen too.
    assert ray.get(ray.remote(lambda: 1).remote(), timeout=120) == 1
    listeners = _listening(_descendants(os.getpid()))
    ports = {port for _, _, port in listeners}
    assert int(cluster.rpartition(":")[2]) in ports, listeners  # the GCS is seen
    assert len({pid for pid, _, _ in listeners}) >= 3, listeners  # gcs, raylet, a worker...
    outward = [entry for entry in listeners if not is_loopback(entry[1])]
    assert outward == [], f"Ray listens beyond loopback: {outward}"

    code = (
        "import sys\n"
        "from frontier_adapters.verify.local_ray import init_ray\n"
        f"init_ray({cluster!r})\n"
        "print('joined', flush=True)\n"
        "sys.stdin.read()\n"
    )
    with Life(
        [sys.executable, "-c", code],
        name="the joining driver",
        deadline=120,
        stdin=subprocess.PIPE,
        env=loopback_env(),
    ) as joined:
        assert joined.readline("its joined line") == "joined\n"
        theirs = _listening(_descendants(joined.pid))
        assert theirs, "the joining driver listens on nothing"
        outward = [entry for entry in theirs if not is_loopback(entry[1])]
        assert outward == [], f"a joining driver listens beyond loopback: {outward}"
        assert joined.proc.stdin is not None
        joined.proc.stdin.close()
        assert joined.wait() == 0
