"""The ledger service, run in-process (no Ray): sibling tasks, stale
results refused and never journaled, failed siblings continued from their
last progress, the journal owned by the service (mark + state in one call,
compaction, resume with reuse), the attempt reservation that fences a
previous incarnation's workers, which the journal's attempt floor alone
does not; and the same service without a journal (n = 1 or more): the
snapshot is one consistent view, a lost incarnation's answers are refused
by its name, and a service rebuilt from any snapshot loses and duplicates
nothing."""

from __future__ import annotations

import functools
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters import SequenceSource
from frontier_adapters._service import (
    LedgerService,
    SampleTask,
    payload_from_json,
    payload_to_json,
)
from frontier_adapters.journal import RolloutJournal, read_journal

from frontier_core import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FailurePolicy,
    Lease,
    Ledger,
    LedgerConfig,
)
from frontier_core.journal import (
    BytesPayload,
    CommitPolicy,
    JsonPayload,
    Reuse,
    Sealed,
    TokenPayload,
)


def config(n: int = 8, samples: int = 3, attempts: int = 5, **kw: Any) -> LedgerConfig:
    return LedgerConfig(
        stream_len=n,
        samples=samples,
        fingerprint="t",
        on_failure=FailurePolicy.RETRY,
        max_failures=attempts,
        **kw,
    )


def service(
    tmp: Path, cfg: LedgerConfig | None = None, *, fresh: bool = True, **kw: Any
) -> LedgerService:
    cfg = cfg or config()
    n = cfg.stream_len
    assert n is not None
    policy = kw.pop("policy", CommitPolicy(max_delay=10.0, max_records=1))
    journal = functools.partial(
        RolloutJournal,
        tmp / "journal",
        fingerprint=cfg.fingerprint,
        lineage=kw.pop("lineage", "L"),
        policy=policy,
        progress_every=kw.pop("progress_every", 4),
    )
    s = LedgerService(
        SequenceSource(list(range(100, 100 + n)), batch_size=4), cfg, journal=journal, **kw
    )
    if fresh and "state" not in kw:
        s.checkpoint(step=0)
    return s


def bare(n: int = 16, samples: int = 1, policy: str = "retry", **kw: Any) -> LedgerService:
    """A service without a journal."""
    cfg = LedgerConfig(
        stream_len=n,
        samples=samples,
        on_failure=FailurePolicy(policy),
        max_failures=kw.pop("attempts", 3),
        fingerprint="t",
    )
    return LedgerService(SequenceSource(list(range(100, 100 + n)), batch_size=4), cfg, **kw)


def crash(s: LedgerService) -> None:
    """What a SIGKILL leaves: the journal's pending group is lost, its lock
    released (the reservation is written synchronously)."""
    writer = s._journal.writer
    writer._pending.clear()
    writer.close()


def expected(o: int, s: int) -> list[int]:
    return [(o * 31 + s * 7 + i) % 1000 for i in range(3 + (o * 5 + s) % 6)]


def tokens(o: int, s: int, upto: int | None = None, version: int = 0) -> TokenPayload:
    full = expected(o, s)[:upto]
    return TokenPayload.of(full, [-0.5] * len(full), version)


def sample(task: SampleTask) -> TokenPayload:
    """A worker finishing ``task``: the prefix it continues must be right."""
    o, s = task.lease.ordinal, task.lease.sibling
    if task.prefix is not None:
        assert isinstance(task.prefix, TokenPayload)
        assert list(task.prefix.tokens()) == expected(o, s)[: len(task.prefix)]
    return tokens(o, s)


def seal_all(s: LedgerService, tasks: Any) -> Any:
    return s.report(sealed=[(t.lease, sample(t)) for t in tasks])


def journal_records(tmp: Path) -> list[Any]:
    return list(read_journal(tmp / "journal", fingerprint="t", lineage="L").records)


def test_the_module_imports_no_ray_and_no_torch() -> None:
    code = (
        "import sys, frontier_adapters._service\n"
        "print(sorted({'ray', 'torch'} & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_one_name_for_the_services_assignment() -> None:
    """``Assignment`` is what ``take`` hands out, its tasks carry the core's
    ``Lease`` (one attempt at one sibling); the prompt-level batch of
    before (``PromptLease``) is gone, with no alias."""
    import frontier_adapters

    got = bare().take(2)
    assert isinstance(got, frontier_adapters.Assignment)
    assert all(isinstance(x, Lease) for x in got.leases)
    assert not hasattr(frontier_adapters, "Lease")
    assert not hasattr(frontier_adapters, "PromptLease")


def test_siblings_go_out_one_by_one_and_a_group_lands_with_its_last(tmp_path: Path) -> None:
    s = service(tmp_path)
    a = s.take(2)
    assert a.leases == (Lease(0, 0, 0), Lease(0, 1, 1))
    assert [t.row for t in a.tasks] == [100, 100]
    b = s.take(4)  # the rest of group 0, then group 1: one group's siblings, two workers
    assert b.leases == (Lease(0, 2, 2), Lease(1, 0, 3), Lease(1, 1, 4), Lease(1, 2, 5))
    r = seal_all(s, a.tasks)
    assert (r.sealed, r.landed, s.batch(1)) == (2, (), [])
    r = seal_all(s, b.tasks[:1])
    assert r.landed == (0,)
    (group,) = s.batch(1)
    assert group.ordinal == 0 and group.leases == (Lease(0, 0, 0), Lease(0, 1, 1), Lease(0, 2, 2))
    assert [list(p.tokens()) for p in group.samples] == [expected(0, x) for x in range(3)]
    sealed = [r for r in journal_records(tmp_path) if isinstance(r, Sealed)]
    assert [(r.ordinal, r.sibling, r.attempt) for r in sealed] == [(0, 0, 0), (0, 1, 1), (0, 2, 2)]


def test_stale_results_are_refused_and_never_journaled(tmp_path: Path) -> None:
    s = service(tmp_path)
    a = s.take(3)
    first = a.tasks[0]
    seal_all(s, [first])
    before = len(journal_records(tmp_path))
    r = s.report(
        sealed=[(first.lease, sample(first)), (Lease(0, 1, 99), tokens(0, 1))],
        progress=[(Lease(0, 0, 0), tokens(0, 0, 2)), (Lease(5, 0, 1), tokens(5, 0, 1))],
        failed=[Lease(0, 0, 0)],
    )
    assert (r.sealed, r.failed, r.progress) == (0, 0, 0)
    assert len(r.stale) == 5 and r.foreign == 0
    assert len(journal_records(tmp_path)) == before
    # A released lease's late answer is stale too.
    s.release([a.tasks[1].lease])
    assert seal_all(s, [a.tasks[1]]).stale == (a.tasks[1].lease,)
    # A sibling beyond the group, a malformed lease or payload: refused loudly.
    assert s.report(sealed=[(Lease(0, 7, 2), tokens(0, 2))]).stale == (Lease(0, 7, 2),)
    with pytest.raises(ValueError):
        s.report(sealed=[((0, -1, 2), tokens(0, 2))])
    with pytest.raises(TypeError):
        s.report(sealed=[(a.tasks[2].lease, {"tokens": [1, 2]})])
    assert s.stats["stale"] == 7


def test_a_failed_sibling_restarts_first_and_continues_its_last_progress(tmp_path: Path) -> None:
    s = service(tmp_path)
    a = s.take(3)
    t = a.tasks[1]
    s.report(progress=[(t.lease, tokens(0, 1, 2))])
    r = s.report(failed=[t.lease])
    assert r.failed == 1 and r.restarted == (Lease(0, 1, 3),)
    b = s.take(1)  # the restart comes before any new group
    assert b.leases == (Lease(0, 1, 3),)
    assert list(b.tasks[0].prefix.tokens()) == expected(0, 1)[:2]  # type: ignore[union-attr]
    assert seal_all(s, [a.tasks[0], a.tasks[2], b.tasks[0]]).landed == (0,)
    # A worker's death costs each held sibling one attempt of its group.
    c = s.take(3)
    r = s.release(c.leases)
    assert r.failed == 3 and [x.sibling for x in r.restarted] == [0, 1, 2]
    assert s.stats["released"] == 3


def test_the_attempt_limit_drops_a_group_and_its_queued_siblings(tmp_path: Path) -> None:
    s = service(tmp_path, config(attempts=2))
    a = s.take(2)
    assert s.report(failed=[a.tasks[0].lease]).restarted
    r = s.report(failed=[a.tasks[1].lease])
    assert r.dropped == (0,) and r.restarted == ()
    # The restart queued for sibling 0 belongs to a dropped group: never handed out.
    assert [x.ordinal for x in s.take(3).leases] == [1, 1, 1]
    assert s.checkpoint(step=0).dropped == (0,)


def test_take_refuses_before_the_first_checkpoint(tmp_path: Path) -> None:
    s = service(tmp_path, fresh=False)
    with pytest.raises(RuntimeError, match="first checkpoint"):
        s.take(1)
    s.checkpoint(step=0)
    assert s.take(1).tasks


def test_take_refuses_a_count_or_bound_that_is_not_an_int() -> None:
    """Refused naming the value, taking nothing (2.5 used to take 3 tasks,
    -1 none silently, None raised a comparison TypeError)."""
    s = bare(samples=2)
    for n in (2.5, -1, None, True, "2"):
        with pytest.raises(ValueError, match=f"n must be an int >= 0, got {n!r}"):
            s.take(n)  # type: ignore[arg-type]
    for bound in (0, -1, "x", 1.5, True):
        with pytest.raises(
            ValueError, match=f"max_ahead must be None or an int >= 1, got {bound!r}"
        ):
            s.take(1, max_ahead=bound)  # type: ignore[arg-type]
    assert (s.stats["taken"], s.status()["next_ordinal"]) == (0, 0)
    assert s.take(0).tasks == ()
    assert s.take(3, max_ahead=1).leases == (Lease(0, 0, 0), Lease(0, 1, 1))


def test_compact_refuses_an_id_not_awaiting_compaction(tmp_path: Path) -> None:
    """An unknown id, or one compacted already (itself or by a later id):
    a typed error naming it, and the journal and the pending ids intact."""
    s = service(tmp_path)
    seal_all(s, s.take(3).tasks)
    first = s.checkpoint(step=0).checkpoint_id
    second = s.checkpoint(step=0).checkpoint_id
    s.compact(second)
    before = journal_records(tmp_path)
    for bad in (99, first, second, "1", True):
        with pytest.raises(CheckpointMismatchError, match=f"compact: {bad!r} is not"):
            s.compact(bad)  # type: ignore[arg-type]
    assert journal_records(tmp_path) == before
    third = s.checkpoint(step=0).checkpoint_id
    assert s.compact(third) == s.flush()
    with pytest.raises(CheckpointMismatchError, match="compact: 0 is not"):
        bare().compact(0)  # without a journal too


def test_max_ahead_holds_back_new_groups(tmp_path: Path) -> None:
    s = service(tmp_path)
    assert len(s.take(6, max_ahead=1).tasks) == 3
    blocked = s.take(3, max_ahead=1)
    assert blocked.tasks == () and blocked.throttled


def test_the_checkpoint_marks_the_journal_and_a_resume_reuses_it(tmp_path: Path) -> None:
    """Sealed siblings of open groups come back without generation, a running
    one continues from its last durable prefix, and the rest is generated."""
    s = service(tmp_path)
    snap = s.checkpoint(step=3)
    mark = snap.state["journal"]
    assert mark["id"] == snap.checkpoint_id == 1
    read_journal(tmp_path / "journal", fingerprint="t", lineage="L").check_mark(
        mark["position"], mark["id"]
    )
    a = s.take(6)
    seal_all(s, [a.tasks[0], a.tasks[1], a.tasks[3]])
    s.report(progress=[(a.tasks[2].lease, tokens(0, 2, 4))])
    s.flush()
    crash(s)
    r = service(tmp_path, state=snap.state)
    status = r.status()
    assert (status["recovered_sealed"], status["recovered_prefixes"]) == (3, 1)
    b = r.take(3)
    assert b.version == 3
    # Group 0: sibling 2 continues; group 1: siblings 1, 2 are generated.
    assert [(x.ordinal, x.sibling) for x in b.leases] == [(0, 2), (1, 1), (1, 2)]
    assert list(b.tasks[0].prefix.tokens()) == expected(0, 2)[:4]  # type: ignore[union-attr]
    assert r.stats["reused"] == 3 and r.stats["continued"] == 1
    assert seal_all(r, b.tasks).landed == (0, 1)
    g0, g1 = r.batch(2)
    assert g0.leases[:2] == (a.tasks[0].lease, a.tasks[1].lease)  # the first incarnation's
    assert g1.leases[0] == a.tasks[3].lease
    assert all(x.attempt >= r.floor for x in (g0.leases[2], *g1.leases[1:]))


def test_a_drain_stops_dealing_and_its_state_resumes_what_was_reported(tmp_path: Path) -> None:
    """A termination notice: ``drain`` deals nothing more, makes every
    accepted seal and progress report durable, and hands back a
    checkpoint's state that a new incarnation resumes exactly, even with
    the process killed right after (nothing compacted, nothing pending)."""
    s = service(tmp_path)
    a = s.take(6)  # groups 0 and 1, three siblings each
    seal_all(s, [a.tasks[0], a.tasks[1], a.tasks[3]])
    s.report(progress=[(a.tasks[2].lease, tokens(0, 2, 4))])
    drained, snap = s.drain(step=7, seconds=30.0)
    assert snap is not None and snap.state["step"] == 7
    assert (drained.running, drained.shipped, drained.checkpointed, drained.in_time) == (
        3, True, True, True,
    )  # fmt: skip
    assert s.draining and s.take(6).tasks == ()
    # A worker's late answer still counts, and is journaled.
    assert s.report(sealed=[(a.tasks[4].lease, sample(a.tasks[4]))]).sealed == 1
    crash(s)
    r = service(tmp_path, state=snap.state)
    b = r.take(2)
    assert b.version == 7 and not r.draining
    # What the drain made durable comes back; the seal after it comes back
    # too (journaled), the rest is generated.
    assert [(x.ordinal, x.sibling) for x in b.leases] == [(0, 2), (1, 2)]
    assert list(b.tasks[0].prefix.tokens()) == expected(0, 2)[:4]  # type: ignore[union-attr]
    assert seal_all(r, b.tasks).landed == (0, 1)


def test_a_drain_keeps_run_drains_rule_for_its_checkpoint(tmp_path: Path) -> None:
    """One drain rule with ``Run.drain``: a checkpoint only with twice the
    last one's duration left, one second before any was timed (checkpoint
    0 was never compacted here); what was reported is durable all the
    same."""
    s = service(tmp_path)
    a = s.take(3)
    seal_all(s, a.tasks[:1])
    drained, snap = s.drain(step=1, seconds=0.5)
    assert snap is None and (drained.checkpointed, drained.shipped) == (False, True)
    assert s.draining and s.status()["journal_durable"] == s.flush()


def test_drain_refuses_a_bad_step_or_time(tmp_path: Path) -> None:
    s = service(tmp_path)
    for bad in ({"step": -1}, {"step": 1, "seconds": 0}, {"step": "1"}):
        with pytest.raises(ValueError, match="drain"):
            s.drain(**bad)  # type: ignore[arg-type]
    assert not s.draining and s.take(1).tasks


def test_compaction_after_the_checkpoint_keeps_what_a_resume_needs(tmp_path: Path) -> None:
    s = service(tmp_path)
    a = s.take(6)
    seal_all(s, a.tasks[:3])  # group 0 lands
    s.report(sealed=[(a.tasks[3].lease, sample(a.tasks[3]))])
    snap = s.trained([0], step=1)
    s.compact(snap.checkpoint_id)
    kept = journal_records(tmp_path)
    assert [(r.ordinal, r.sibling) for r in kept if isinstance(r, Sealed)] == [(1, 0)]
    crash(s)
    r = service(tmp_path, state=snap.state)
    assert r.status()["recovered_sealed"] == 1
    assert [(x.ordinal, x.sibling) for x in r.take(2).leases] == [(1, 1), (1, 2)]


@pytest.mark.parametrize("save_buffer", [True, False])
def test_the_buffer_comes_back_from_the_checkpoint_or_the_journal(
    tmp_path: Path, save_buffer: bool
) -> None:
    s = service(tmp_path)
    a = s.take(3)
    seal_all(s, a.tasks)
    snap = s.checkpoint(step=0, save_buffer=save_buffer)
    assert len(snap.state["buffer"]) == (1 if save_buffer else 0)
    crash(s)
    r = service(tmp_path, state=json.loads(json.dumps(snap.state)))
    if not save_buffer:
        # The group's samples are all in the journal: it lands at its
        # dispatch, generating nothing.
        assert r.take(3).leases[0].ordinal == 1
    (group,) = r.batch(1)
    assert group.leases == a.leases
    assert [list(p.tokens()) for p in group.samples] == [expected(0, x) for x in range(3)]


def test_reuse_nothing_regenerates_every_open_sibling(tmp_path: Path) -> None:
    s = service(tmp_path)
    snap = s.checkpoint(step=0)
    seal_all(s, s.take(2).tasks)
    s.flush()
    crash(s)
    r = service(tmp_path, state=snap.state, reuse=Reuse.nothing())
    assert [x.sibling for x in r.take(3).leases] == [0, 1, 2] and r.stats["reused"] == 0


# -- attempts across incarnations -------------------------------------------------------


def test_the_journal_floor_alone_would_accept_a_previous_incarnations_answer() -> None:
    """Why the reservation exists: attempts handed out after the checkpoint
    and never journaled are dealt again by a resume from the journal's
    floor, to the same siblings, so a surviving worker's late answer passes
    as current."""
    cfg = config()
    ledger = Ledger.start(cfg)
    record = ledger.checkpoint()
    ledger = ledger.stamp(4).ledger
    old = ledger.dispatch([0]).effect.leases  # handed out, nothing journaled, then a crash
    floor = 0  # the journal names no attempt
    again = (
        Ledger.resume(
            cfg,
            Checkpoint.from_state_dict(record.state_dict()),
            load_replay_buffer=True,
            sealed=(),
            attempt_floor=floor,
        )
        .ledger.stamp(4)
        .ledger.dispatch([0])
    )
    assert again.effect.leases == old  # the same numbers, the same siblings
    assert again.ledger.seal([old[0]]).effect.sealed == (old[0],)  # accepted: wrong


def test_the_reservation_refuses_a_previous_incarnations_answers(tmp_path: Path) -> None:
    s = service(tmp_path)
    snap = s.checkpoint(step=0)
    old = s.take(3)  # handed out; nothing reported, nothing journaled
    crash(s)
    r = service(tmp_path, state=snap.state)
    status = r.status()
    # The previous incarnation's reservation is this one's floor, and this
    # one reserved its own first block above it before dealing anything.
    assert status["journal_floor"] == 0 and 3 <= r.floor < status["reserved"]
    new = r.take(3)
    assert [(x.ordinal, x.sibling) for x in new.leases] == [(0, 0), (0, 1), (0, 2)]
    late = seal_all(r, old.tasks)
    assert late.sealed == 0 and late.foreign == 3 and r.batch(1) == []
    assert all(x.attempt < r.floor for x in late.stale)
    assert seal_all(r, new.tasks).landed == (0,)
    assert r.batch(1)[0].leases == new.leases


def reservations(tmp: Path) -> list[int]:
    from frontier_core.journal import Reserve

    return [x.below for x in journal_records(tmp) if isinstance(x, Reserve)]


def test_the_reservation_is_written_once_a_block(tmp_path: Path) -> None:
    """Every attempt handed out is below a reservation already durable in
    the journal when it leaves the service, and one record covers a block:
    the first at the start (attempts 0..7), the next when attempt 8 is due
    (8 + 1 + 8 = 17)."""
    s = service(tmp_path, reserve=8)
    assert reservations(tmp_path) == [8]
    dealt: list[Lease] = []
    for _ in range(6):
        dealt += s.take(1).leases  # groups 0 and 1: attempts 0..5
        assert all(x.attempt < max(reservations(tmp_path)) for x in dealt)
    dealt += s.take(3).leases  # 6..8: 8 needs a new block
    assert all(x.attempt < max(reservations(tmp_path)) for x in dealt)
    assert reservations(tmp_path) == [8, 17] and s.status()["reserved"] == 17
    dealt += s.take(3).leases  # 9..11: within it
    assert reservations(tmp_path) == [8, 17]
    assert sorted(x.attempt for x in dealt) == list(range(12))


def test_the_reservation_is_in_the_journal_and_survives_its_compaction(tmp_path: Path) -> None:
    """The reservation is a journal record: a compaction after a checkpoint
    keeps it, so a resume from that checkpoint still starts above every
    attempt the previous incarnation handed out."""
    s = service(tmp_path, reserve=8)
    snap = s.checkpoint(step=0)
    old = s.take(3)  # attempts 0..2 handed out under the start's reservation of 8
    snap = s.checkpoint(step=0)
    s.compact(snap.checkpoint_id)
    crash(s)
    from frontier_core.journal import Reserve, decode

    records = decode((tmp_path / "journal").read_bytes()).records
    assert Reserve(8) in records
    r = service(tmp_path, state=snap.state)
    assert r.floor >= 8
    late = seal_all(r, old.tasks)
    assert late.sealed == 0 and late.foreign == 3


def test_a_journal_of_another_stream_is_refused(tmp_path: Path) -> None:
    journal = functools.partial(RolloutJournal, tmp_path / "j", fingerprint="u", lineage="L")
    with pytest.raises(ValueError, match="stream"):
        LedgerService(SequenceSource(list(range(8))), config(), journal=journal)


def test_a_journal_of_reservations_only_is_a_fresh_start_above_them(tmp_path: Path) -> None:
    """Attempts were handed out, nothing was journaled, and the first
    checkpoint's state was never written: a fresh start on that journal
    starts above the reservation, so the dead start's workers are refused."""
    s = service(tmp_path)
    old = s.take(3)
    crash(s)
    r = service(tmp_path)  # no state: the start died before its checkpoint
    assert r.floor > max(x.attempt for x in old.leases)
    new = r.take(3)
    assert [(x.ordinal, x.sibling) for x in new.leases] == [(0, 0), (0, 1), (0, 2)]
    late = seal_all(r, old.tasks)
    assert late.sealed == 0 and late.foreign == 3
    assert seal_all(r, new.tasks).landed == (0,)


def test_a_journal_with_samples_but_no_checkpoint_is_not_a_fresh_start(tmp_path: Path) -> None:
    """A sample was journaled, then the checkpoint was lost: starting afresh
    on that journal is refused with a typed error (a ValueError still)."""
    from frontier_adapters import JournalWithoutCheckpointError

    s = service(tmp_path)
    seal_all(s, s.take(1).tasks)
    s.flush()
    crash(s)
    with pytest.raises(JournalWithoutCheckpointError, match="not a fresh start") as info:
        service(tmp_path)  # no state: as if the checkpoint had gone
    assert isinstance(info.value, ValueError)
    assert info.value.path == str(tmp_path / "journal")


def test_bad_states_are_refused(tmp_path: Path) -> None:
    s = service(tmp_path)
    state = s.checkpoint(step=0).state
    crash(s)
    with pytest.raises(CheckpointVersionError):
        service(tmp_path, state={**state, "version": 9})
    with pytest.raises(CheckpointCorruptError):
        service(tmp_path, state={**state, "extra": 1})
    with pytest.raises(CheckpointCorruptError):
        service(tmp_path, state={**state, "journal": {"position": -1, "id": 0}})
    with pytest.raises(CheckpointCorruptError):
        service(tmp_path, state={**state, "buffer": [[0, []]]})


def test_payloads_round_trip_through_the_saved_buffer() -> None:
    for p in (
        tokens(3, 1),
        TokenPayload.of([1, 2, 3], [-0.1, -0.2, -0.3], [0, 0, 1], reward=0.5),
        JsonPayload.of({"turn": 3}),
        BytesPayload(b"\x00\xff"),
    ):
        assert payload_from_json(json.loads(json.dumps(payload_to_json(p)))) == p
    with pytest.raises(CheckpointCorruptError):
        payload_from_json({"tokens": "!!", "logprobs": "", "runs": [], "reward": None})
    with pytest.raises(CheckpointCorruptError):
        payload_from_json([1, 2])


# -- without a journal ---------------------------------------------------------------


def seal(s: LedgerService, got: Any, tasks: Any = None, **kw: Any) -> Any:
    tasks = got.tasks if tasks is None else tasks
    inc = kw.pop("incarnation", got.incarnation)
    return s.report(sealed=[(t.lease, sample(t)) for t in tasks], incarnation=inc, **kw)


def test_without_a_journal_a_report_names_its_incarnation() -> None:
    s = bare()
    got = s.take(3)
    assert s.take(0).incarnation == got.incarnation and got.progress_every == 256
    with pytest.raises(ValueError, match="incarnation"):
        s.report(sealed=[(got.leases[0], tokens(0, 0))])
    r = seal(s, got, got.tasks[:1], failed=[got.leases[1]])
    assert (r.sealed, r.failed, r.landed, r.stale) == (1, 1, (0,), ())
    # A duplicate landing and a lease of no task are stale, and ignored.
    r = seal(s, got, got.tasks[:1])
    assert r.stale == (got.leases[0],) and r.sealed == 0
    # Another incarnation's report is foreign whole, even for a current lease.
    r = seal(s, got, got.tasks[2:], incarnation="other")
    assert (r.sealed, r.foreign, r.stale) == (0, 1, (got.leases[2],))
    assert [x.ordinal for x in s.take(2).leases] == [1, 3]  # the retry comes first
    assert s.status()["buffered"] == 1 and s.flush() == 0
    assert s.compact(s.checkpoint(step=0).checkpoint_id) == 0


def test_without_a_journal_a_lost_incarnations_release_fails_nothing() -> None:
    """A rebuilt service without a journal deals the lost incarnation's
    attempt numbers again: only the incarnation tells a lost worker's
    release from the new one's, so it must be given, and the lost one's
    is refused whole."""
    old = bare(n=4, samples=2, attempts=1, policy="drop")
    saved = old.checkpoint(step=0)
    lost = old.take(2)
    new = bare(n=4, samples=2, attempts=1, policy="drop", state=saved.state)
    got = new.take(2)
    assert got.leases == lost.leases and got.incarnation != lost.incarnation
    with pytest.raises(ValueError, match="release's incarnation="):
        new.release(lost.leases)
    r = new.release(lost.leases, incarnation=lost.incarnation)
    assert (r.failed, r.dropped, r.stale, r.foreign) == (0, (), lost.leases, 2)
    assert (new.stats["released"], new.stats["stale"], new.stats["foreign"]) == (0, 2, 2)
    assert seal(new, got).landed == (0,)  # the new attempts are still current
    assert new.checkpoint(step=0).dropped == ()


@pytest.mark.parametrize("samples", [1, 3])
def test_release_under_drop_reports_the_drops_once(samples: int) -> None:
    s = bare(samples=samples, policy="drop")
    got = s.take(2 * samples)
    assert s.release(got.leases, incarnation=got.incarnation).dropped == (0, 1)
    snap = s.checkpoint(step=0)
    assert snap.dropped == (0, 1) and snap.cut == 2 and snap.state["journal"] is None
    assert s.checkpoint(step=0).dropped == ()


def test_batch_is_partial_only_when_nothing_more_can_land() -> None:
    s = bare(n=4)
    got = s.take(4)
    seal(s, got, got.tasks[:2])
    assert s.batch(3) == []
    seal(s, got, got.tasks[2:3])
    assert [g.ordinal for g in s.batch(3)] == [0, 1, 2]
    s.report(failed=[got.leases[3]], incarnation=got.incarnation)
    again = s.take(4)  # 3 again
    assert s.batch(8) == []
    s.release(again.leases, incarnation=again.incarnation)
    assert [x.ordinal for x in s.take(4).leases] == [3]


@pytest.mark.parametrize("samples", [1, 3])
def test_trained_returns_the_state_after_the_step_in_one_call(samples: int) -> None:
    s = bare(samples=samples)
    got = s.take(4 * samples)
    seal(s, got)
    snap = s.trained([0, 1], step=1)
    assert snap.cut == 2 and snap.buffered == 2 and snap.state["step"] == 1
    assert [o for o, _ in snap.state["buffer"]] == [2, 3]
    assert snap.state["collector"]["ledger"]["ledger"]["cut"] == 2


@pytest.mark.parametrize("samples", [1, 3])
def test_a_rebuilt_service_regenerates_outstanding_and_keeps_the_buffer(samples: int) -> None:
    s = bare(samples=samples)
    got = s.take(6 * samples)
    landed = [t for t in got.tasks if t.lease.ordinal in (0, 1, 4)]
    seal(s, got, landed)
    snap = s.trained([0], step=1)
    r = bare(samples=samples, state=json.loads(json.dumps(snap.state)))
    assert [g.ordinal for g in r.batch(2)] == [1, 4]
    assert all(g.samples == tuple(tokens(g.ordinal, x) for x in range(samples)) for g in r.batch(2))
    # 2, 3 and 5 were generating: pending again; 4 is retained, not re-yielded.
    fresh = r.take(5 * samples)
    assert sorted({x.ordinal for x in fresh.leases}) == [2, 3, 5, 6, 7]
    assert min(x.attempt for x in fresh.leases) >= r.floor
    # The lost incarnation's answers are refused here by its name.
    late = seal(r, got, got.tasks)
    assert late.sealed == 0 and late.foreign == len(got.tasks)
    cold = bare(samples=samples, state=snap.state, load_replay_buffer=False)
    assert cold.batch(1) == []
    assert sorted({x.ordinal for x in cold.take(5 * samples).leases}) == [1, 2, 3, 4, 5]


def test_evicting_restored_groups_keeps_requeued_and_unstamped_apart() -> None:
    """After a resume with the buffer, an evicted group whose prompt the
    source already re-yielded is requeued (dispatched again first, its row
    is held); one the source has not reached again is unstamped: nobody
    holds its row, and it is dispatched when the stream brings it back."""
    s = bare()
    got = s.take(10)
    seal(s, got, [got.tasks[o] for o in (0, 2, 9)])
    r = bare(state=s.trained([0], step=1).state)
    assert [g.ordinal for g in r.batch(2)] == [2, 9]
    assert [(t.lease.ordinal, t.row) for t in r.take(2).tasks] == [(1, 101), (3, 103)]
    e = r.evict([2, 9])
    assert (e.requeued, e.unstamped, e.dropped) == ((2,), (9,), ())
    assert [(t.lease.ordinal, t.row) for t in r.take(1).tasks] == [(2, 102)]  # requeued, now
    assert [x.ordinal for x in r.take(6).leases] == [4, 5, 6, 7, 8, 9]  # 9 with the stream
    assert r.status()["evicted"] == 2


def test_a_state_without_a_journal_is_not_a_journals_checkpoint(tmp_path: Path) -> None:
    state = bare(n=8, samples=3, attempts=5).checkpoint(step=0).state
    with pytest.raises(CheckpointMismatchError, match="without a journal"):
        service(tmp_path, state=state)
    with pytest.raises(CheckpointCorruptError):
        bare(state={**state, "buffer": [[0, []]]})
    with pytest.raises(CheckpointCorruptError):
        bare(state={**state, "journal": {"position": 0}})


# -- the whole: random work, losses and late answers ----------------------------------


@pytest.mark.parametrize(("samples", "journal"), [(3, True), (1, True), (1, False), (3, False)])
@pytest.mark.parametrize("seed", range(10))
def test_random_sibling_work_losses_and_late_answers_train_every_sample_once(
    tmp_path: Path, seed: int, samples: int, journal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random takes, progress, seals, failures, releases (dead workers),
    late answers (of this incarnation and of lost ones), training steps,
    checkpoints, compactions and losses of the service itself (a crash that
    loses the journal's pending group, then a resume from the last
    checkpoint and the journal; without a journal, from the checkpoint
    alone). The surviving lineage trains or drops every prompt exactly
    once, each group with its n siblings, each from one attempt, no attempt
    twice in a lineage of one journal, each exactly its expected tokens;
    nothing a lost incarnation handed out is ever accepted. (A crash here is
    a process death, which keeps the page cache: fsync would change only
    the time.)"""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    rng = random.Random(seed)
    n, k = 30, samples
    cfg = config(n=n, samples=k, attempts=rng.choice([3, 5, 8]))
    policy = CommitPolicy(max_delay=10.0, max_records=rng.randint(1, 6))
    reserve = rng.choice([1, 4, 64])

    def make(state: Any = None) -> LedgerService:
        if journal:
            return service(tmp_path, cfg, policy=policy, reserve=reserve, state=state)
        source = SequenceSource(list(range(100, 100 + n)), batch_size=4)
        return LedgerService(source, cfg, state=state)

    s = make()
    saved = s.checkpoint(step=0)
    step = 0
    lineage: list[tuple[str, Any]] = []  # as of the last checkpoint
    since: list[tuple[str, Any]] = []
    # Tasks with the incarnation that handed them out:
    Out = list[tuple[SampleTask, str]]
    out: Out = []  # handed out by this incarnation, unanswered
    done: Out = []  # answered or released: a late answer is stale
    lost: Out = []  # handed out by lost incarnations
    unanswered: Out = []  # of those, the ones never answered before the loss
    progress: dict[tuple[Lease, str], int] = {}
    for _ in range(1500):
        roll = rng.random()
        if roll < 0.2:
            got = s.take(rng.randint(1, 5), max_ahead=rng.choice([None, 3, 6]))
            out += [(t, got.incarnation) for t in got.tasks]
        elif roll < 0.35 and out:
            t, inc = rng.choice(out)
            have = max(progress.get((t.lease, inc), 0), len(t.prefix) if t.prefix else 0)
            upto = min(len(expected(*t.lease[:2])) - 1, have + rng.randint(1, 3))
            if upto > have:
                payload = tokens(t.lease.ordinal, t.lease.sibling, upto)
                s.report(progress=[(t.lease, payload)], incarnation=inc)
                progress[(t.lease, inc)] = upto
        elif roll < 0.6 and out:
            t, inc = out.pop(rng.randrange(len(out)))
            if rng.random() < 0.1:
                r = s.report(failed=[t.lease], incarnation=inc)
            else:
                r = s.report(sealed=[(t.lease, sample(t))], incarnation=inc)
            # Refused only if its group failed whole meanwhile (a sibling at
            # the attempt limit dropped it, or requeued it).
            assert r.sealed + r.failed == 1 or r.stale == (t.lease,)
            done.append((t, inc))
        elif roll < 0.65 and out:
            gone = [out.pop(rng.randrange(len(out))) for _ in range(rng.randint(1, len(out)))]
            incs = {inc for _, inc in gone}
            assert len(incs) == 1  # out holds this incarnation's tasks only
            s.release([t.lease for t, _ in gone], incarnation=incs.pop())
            done += gone
        elif roll < 0.68 and lost:
            # A lost incarnation's worker died or its call ended: its release
            # (without a journal, the same attempt numbers as current ones)
            # fails nothing; with a journal, even unnamed.
            _, inc = rng.choice(lost)
            theirs = [t.lease for t, i in lost if i == inc]
            gone_leases = rng.sample(theirs, rng.randint(1, len(theirs)))
            named = not journal or rng.random() < 0.5
            r = s.release(gone_leases, incarnation=inc if named else None)
            assert r.failed == 0 and r.stale == tuple(gone_leases)
            assert r.restarted == r.requeued == r.dropped == ()
        elif roll < 0.72 and (done or lost):
            t, inc = rng.choice(done + lost)
            r = s.report(
                sealed=[(t.lease, sample(t))],
                progress=[(t.lease, tokens(0, 0, 1))],
                incarnation=inc,
            )
            assert r.sealed == r.progress == 0 and len(r.stale) == 2
            assert r.foreign == (2 if (t, inc) in lost else 0)
        elif roll < 0.9:
            groups = s.batch(rng.randint(1, 4))
            if groups:
                step += 1
                snap = s.trained([g.ordinal for g in groups], step=step)
                since += [("train", g) for g in groups] + [("drop", o) for o in snap.dropped]
                lineage += since
                since = []
                saved = snap
                if rng.random() < 0.5:
                    s.compact(snap.checkpoint_id)
        elif roll < 0.95:
            snap = s.checkpoint(step=step, save_buffer=rng.random() < 0.5)
            lineage += since + [("drop", o) for o in snap.dropped]
            since = []
            saved = snap
        else:  # the service is lost: resume from the last checkpoint (and the journal)
            if journal:
                crash(s)
            s = make(saved.state)
            step = saved.state["step"]
            lost += out + done
            unanswered += out
            out, done, since = [], [], []
    # Finish: answer everything, take the rest, train it all.
    while not s.status()["drained"]:
        for t, inc in out:
            s.report(sealed=[(t.lease, sample(t))], incarnation=inc)
        got = s.take(8)
        out = [(t, got.incarnation) for t in got.tasks]
        groups = s.batch(8)
        if groups:
            step += 1
            snap = s.trained([g.ordinal for g in groups], step=step)
            lineage += since + [("train", g) for g in groups] + [("drop", o) for o in snap.dropped]
        else:
            snap = s.checkpoint(step=step)
            lineage += since + [("drop", o) for o in snap.dropped]
        since = []
    resolved = sorted(g.ordinal if kind == "train" else g for kind, g in lineage)
    assert resolved == list(range(n))
    attempts: list[int] = []
    for kind, g in lineage:
        if kind == "train":
            assert [x.sibling for x in g.leases] == list(range(k))
            assert all(x.ordinal == g.ordinal for x in g.leases)
            assert [list(p.tokens()) for p in g.samples] == [
                expected(g.ordinal, x) for x in range(k)
            ]
            attempts += [x.attempt for x in g.leases]
    if journal:  # without one, a resume deals the numbers a lost incarnation dealt again
        assert len(attempts) == len(set(attempts))
        trained = {x for kind, g in lineage if kind == "train" for x in g.leases}
        assert not {t.lease for t, _ in unanswered} & trained
