"""The ledger service that the Ray actor hosts, run in-process (no Ray):
leases fence late reports, releases fail what a dead worker held, the
snapshot is one consistent view, and a service rebuilt from any snapshot
loses and duplicates nothing."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from frontier_adapters import SequenceSource
from frontier_adapters._service import LedgerService

from frontier_core import (
    CheckpointCorruptError,
    CheckpointVersionError,
    FailurePolicy,
    LedgerConfig,
)


def service(n: int = 16, policy: str = "retry", attempts: int = 3, **kw: object) -> LedgerService:
    config = LedgerConfig(
        stream_len=n, on_failure=FailurePolicy(policy), max_attempts=attempts, fingerprint="t"
    )
    return LedgerService(SequenceSource(list(range(100, 100 + n)), batch_size=4), config, **kw)


def test_the_service_module_imports_no_ray_and_no_torch() -> None:
    code = (
        "import sys, frontier_adapters._service\n"
        "print(sorted({'ray', 'torch'} & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_one_name_for_the_services_batch_of_prompts() -> None:
    """``PromptLease`` is the service's batch; ``Lease`` is only the core's
    attempt at one sibling (no alias is kept under the old name)."""
    import frontier_adapters

    import frontier_core

    lease = service().take(2)
    assert isinstance(lease, frontier_adapters.PromptLease)
    assert not isinstance(lease, frontier_core.Lease)
    assert not hasattr(frontier_adapters, "Lease")


def test_a_lease_lands_and_fails_only_what_it_holds() -> None:
    s = service()
    lease = s.take(3)
    assert lease.items == ((0, 100), (1, 101), (2, 102))
    r = s.report(lease.id, landed=[(0, "g0")], failed=[1])
    assert (r.landed, r.failed, r.requeued, r.unstamped, r.stale) == (1, 1, (1,), (), ())
    # A duplicate landing and an ordinal of no lease are stale, and ignored.
    r = s.report(lease.id, landed=[(0, "again"), (5, "x")])
    assert r.stale == (0, 5) and r.landed == 0
    assert s.leased() == {lease.id: (2,)}
    assert s.take(2).ordinals == (1, 3)  # the retry comes first
    assert s.status()["buffered"] == 1


def test_release_fails_what_a_dead_worker_still_held() -> None:
    s = service()
    a, b = s.take(4), s.take(4)
    s.report(a.id, landed=[(0, "g"), (1, "g")])
    r = s.release([a.id])
    assert r.failed == 2 and r.requeued == (2, 3) and r.unstamped == ()
    # Its last report, arriving late, changes nothing.
    late = s.report(a.id, landed=[(2, "late")], failed=[3])
    assert late.stale == (2, 3) and late.landed == late.failed == 0
    assert s.leased() == {b.id: (4, 5, 6, 7)}
    assert s.take(8).ordinals[:2] == (2, 3)


def test_release_under_drop_reports_the_drops_once() -> None:
    s = service(policy="drop")
    lease = s.take(2)
    assert s.release([lease.id]).dropped == (0, 1)
    snap = s.snapshot()
    assert snap.dropped == (0, 1) and snap.cut == 2
    assert s.snapshot().dropped == ()


def test_batch_is_partial_only_when_nothing_more_can_land() -> None:
    s = service(n=4)
    lease = s.take(4)
    s.report(lease.id, landed=[(0, "a"), (1, "b")])
    assert s.batch(3) == []
    s.report(lease.id, landed=[(2, "c")], failed=[])
    assert [o for o, _ in s.batch(3)] == [0, 1, 2]
    s.report(lease.id, failed=[3])
    s.take(4)  # 3 again
    assert s.batch(8) == []
    s.release(list(s.leased()))
    assert s.take(4).ordinals == (3,)


def test_max_ahead_holds_back_leases_until_a_step_frees_room() -> None:
    s = service()
    a = s.take(3, max_ahead=4)
    assert len(a.items) == 3
    assert s.take(3, max_ahead=4).ordinals == (3,)
    s.report(a.id, landed=[(0, "g"), (1, "g"), (2, "g")])
    blocked = s.take(3, max_ahead=4)
    assert blocked.items == () and blocked.throttled
    s.trained([0, 1])
    assert s.take(3, max_ahead=4).ordinals == (4, 5)
    assert not s.take(1).throttled


def test_trained_returns_the_state_after_the_step_in_one_call() -> None:
    s = service()
    lease = s.take(4)
    s.report(lease.id, landed=[(o, f"g{o}") for o in lease.ordinals])
    snap = s.trained([0, 1])
    assert snap.cut == 2 and snap.buffered == 2
    assert snap.state["buffer"] == [[2, "g2"], [3, "g3"]]
    assert snap.state["collector"]["ledger"]["ledger"]["cut"] == 2


def test_a_rebuilt_service_regenerates_outstanding_and_keeps_the_buffer() -> None:
    s = service()
    a = s.take(6)
    s.report(a.id, landed=[(0, "g0"), (1, "g1"), (4, "g4")])
    snap = s.trained([0])
    r = LedgerService(s._collector.source, s._collector.config, state=snap.state)
    assert [o for o, _ in r.batch(2)] == [1, 4]
    # 2, 3 and 5 were generating: pending again; 4 is retained, not re-yielded.
    assert r.take(5).ordinals == (2, 3, 5, 6, 7)
    fresh = LedgerService(
        SequenceSource(list(range(100, 116)), batch_size=4),
        s._collector.config,
        state=snap.state,
        load_replay_buffer=False,
    )
    assert fresh.batch(1) == [] and fresh.take(5).ordinals == (1, 2, 3, 4, 5)


def test_evicting_restored_groups_keeps_requeued_and_unstamped_apart() -> None:
    """After a resume with the buffer, an evicted group whose prompt the
    source already re-yielded is requeued (leased again first, its row is
    held); one the source has not reached again is unstamped: nobody holds
    its row, and it is leased when the stream brings it back."""
    s = service()
    a = s.take(10)
    s.report(a.id, landed=[(0, "g0"), (2, "g2"), (9, "g9")])
    r = LedgerService(
        SequenceSource(list(range(100, 116)), batch_size=4),
        s._collector.config,
        state=s.trained([0]).state,
    )
    assert [o for o, _ in r.batch(2)] == [2, 9]
    assert r.take(2).items == ((1, 101), (3, 103))  # the source re-read 1..4
    e = r.evict([2, 9])
    assert (e.requeued, e.unstamped, e.dropped) == ((2,), (9,), ())
    assert r.take(1).items == ((2, 102),)  # the requeued one, now
    assert r.take(6).ordinals == (4, 5, 6, 7, 8, 9)  # 9 with the stream, not before
    assert r.status()["evicted"] == 2


def test_bad_states_are_refused() -> None:
    s = service()
    state = s.snapshot().state
    with pytest.raises(CheckpointVersionError):
        service(state={**state, "version": 99})
    with pytest.raises(CheckpointCorruptError):
        service(state={**state, "extra": 1})
    with pytest.raises(CheckpointCorruptError):
        service(state={**state, "buffer": [[0, "not retained"]]})


@pytest.mark.parametrize("seed", range(12))
def test_random_worker_and_service_losses_cover_every_prompt_once(seed: int) -> None:
    """Random leases, batched and late reports, failures, worker deaths
    (release) and losses of the service itself (rebuild from the last
    snapshot, dropping everything since): the surviving lineage trains or
    drops every ordinal exactly once."""
    rng = random.Random(seed)
    n = 60
    s = service(n=n, attempts=rng.choice([2, 3, 5]))
    saved = s.snapshot()
    lineage: list[int] = []  # trained and dropped, as of the last snapshot
    since: list[int] = []
    leases: list[str] = []
    for _ in range(2000):
        roll = rng.random()
        if roll < 0.3:
            lease = s.take(rng.randint(1, 5))
            if lease.items:
                leases.append(lease.id)
        elif roll < 0.6 and leases:
            lease_id = rng.choice(leases)
            held = list(s.leased().get(lease_id, ()))
            if rng.random() < 0.2:
                held.append(rng.randrange(n))  # a stray ordinal: stale
            done = rng.sample(held, rng.randint(0, len(held)))
            fails = [o for o in done if rng.random() < 0.15]
            s.report(lease_id, landed=[(o, o) for o in done if o not in fails], failed=fails)
        elif roll < 0.67 and leases:
            s.release([leases.pop(rng.randrange(len(leases)))])  # the worker died
        elif roll < 0.9:
            batch = s.batch(rng.randint(1, 6))
            if batch:
                assert all(g == o for o, g in batch)
                snap = s.trained([o for o, _ in batch])
                since += [o for o, _ in batch] + list(snap.dropped)
                lineage += since
                since = []
                saved = snap
        elif roll < 0.95:
            snap = s.snapshot()
            lineage += since + list(snap.dropped)
            since = []
            saved = snap
        else:  # the service is lost: rebuild it from the last snapshot
            s = service(n=n, attempts=s._collector.config.max_attempts, state=saved.state)
            leases, since = [], []
        if s.status()["drained"]:
            break
    # Finish cleanly: report everything still leased, train the rest.
    while not s.status()["drained"]:
        for lease_id, held in s.leased().items():
            s.report(lease_id, landed=[(o, o) for o in held])
        lease = s.take(8)
        if lease.items:
            s.report(lease.id, landed=[(o, o) for o in lease.ordinals])
        batch = s.batch(8)
        snap = s.trained([o for o, _ in batch]) if batch else s.snapshot()
        lineage += since + [o for o, _ in batch] + list(snap.dropped)
        since = []
    lineage += since + list(s.snapshot().dropped)
    assert sorted(lineage) == list(range(n))
