"""Real kill tests on a local Ray cluster (2 CPUs, one per module, bound to
127.0.0.1 only): rollout actors killed by ``ray.kill`` and by ``os._exit``,
the ledger actor killed, driver processes SIGKILLed; the training log must
cover every prompt exactly once (``frontier audit`` exit 0). The cluster's
processes, and a driver that joins it, must listen on loopback only."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")

import ray
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
from frontier_adapters.verify.ray_workers import StandInRollout

from frontier_core import FailurePolicy, LedgerConfig


def test_the_ray_binding_imports_no_torch() -> None:
    code = (
        "import sys, frontier_adapters.ray\n"
        "print('torch' in {m.split('.')[0] for m in sys.modules})"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


def test_the_binding_reexports_the_prompt_lease_under_its_one_name() -> None:
    import frontier_adapters
    import frontier_adapters.ray as binding

    assert binding.PromptLease is frontier_adapters.PromptLease
    assert not hasattr(binding, "Lease")  # frontier_core.Lease is a sibling's attempt


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
    deadline = time.monotonic() + 60
    while fleet.in_flight:
        assert time.monotonic() < deadline, "the worker's call never ended"
        fleet.poll(timeout=1)
    status = ledger_call(ledger.status.remote())
    assert fleet.deaths == 0 and len(fleet.errors) == 1
    assert "injected generation error" in fleet.errors[0]
    assert status["landed"] + status["released"] == 8 and status["released"] >= 1
    assert status["leased"] == 0 and status["pending"] == status["released"]
    ray.kill(ledger)
    ray.kill(fleet.workers[0])


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
