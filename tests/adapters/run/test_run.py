"""``Run``: the integration that is safe by construction, tested through its
public API only, against what its docs promise: a first checkpoint before
anything is generated, recovery on every start, samples kept across a
crash and never trained twice, stale answers fenced, progress continued
token by token, bad state refused by name."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters import JournalWithoutCheckpointError, Run, SequenceSource
from frontier_adapters.checkpoints import read_checkpoint, write_checkpoint

from frontier_core import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    FingerprintMismatchError,
    Lease,
    LedgerConfig,
)
from frontier_core.journal import Reuse, TokenPayload

from ..._outage import store_down, store_up

FP = "run-test-v1"


def config(n: int = 8, samples: int = 2, **kw: Any) -> LedgerConfig:
    return LedgerConfig(stream_len=n, samples=samples, fingerprint=FP, **kw)


def source(n: int = 8) -> SequenceSource:
    return SequenceSource([{"prompt": i} for i in range(n)])


def full(o: int, s: int) -> list[int]:
    """The one sample the stand-in engine makes for sibling (o, s)."""
    return [(o * 1000 + s * 100 + i) % 65536 for i in range(6 + (o * 7 + s * 3) % 9)]


def payload(tokens: list[int], version: int = 0) -> TokenPayload:
    return TokenPayload.of(tokens, [-0.5] * len(tokens), version)


def generate(run: Run, lease: Lease) -> TokenPayload:
    """The engine: continue the lease's durable prefix, if any."""
    want = full(lease.ordinal, lease.sibling)
    prefix = run.prefix(lease)
    have = [] if prefix is None else list(prefix.tokens())
    assert want[: len(have)] == have, "a prefix the engine did not make"
    rest = payload(want[len(have) :])
    return rest if prefix is None else prefix.followed_by(rest)


def train_all(run: Run, trained: dict[int, list[list[int]]], batch: int = 2) -> None:
    """Generate, seal and train everything, checkpointing every step."""
    buffer: dict[int, list[list[int]]] = {}
    step = run.step
    while not run.drained:
        for t in run.take(batch):
            samples = {lease.sibling: list(run.sample(lease).tokens()) for lease in t.reused}
            for lease in t.leases:
                sample = generate(run, lease)
                effect = run.seal(lease, sample)
                assert lease in effect.sealed
                samples[lease.sibling] = list(sample.tokens())
            buffer[t.ordinal] = [samples[s] for s in sorted(samples)]
        ready = sorted(buffer)
        for o in ready:
            assert o not in trained, f"prompt {o} trained twice"
            trained[o] = buffer.pop(o)
        run.trained(ready)
        step += 1
        run.checkpoint(step)


def test_a_fresh_run_is_checkpointed_before_it_generates(tmp_path: Path) -> None:
    with Run.open(tmp_path, source(), config()) as run:
        assert run.resumed is None and run.step == 0
        loaded = read_checkpoint(tmp_path / "checkpoints", fingerprint=FP)
        assert loaded is not None and loaded.step == 0
        assert (tmp_path / "journal").exists()


def test_a_whole_run_trains_every_prompt_once_with_its_samples(tmp_path: Path) -> None:
    trained: dict[int, list[list[int]]] = {}
    with Run.open(tmp_path, source(), config()) as run:
        train_all(run, trained)
        assert run.metrics()["cut"] == 8
    assert trained == {o: [full(o, 0), full(o, 1)] for o in range(8)}


def test_a_crash_keeps_what_was_sealed_and_fences_what_was_running(tmp_path: Path) -> None:
    run = Run.open(tmp_path, source(4), config(4))
    (a, b) = run.take(2)
    sealed = a.leases + b.leases[:1]
    for lease in sealed:  # three of four samples finish
        run.seal(lease, payload(full(lease.ordinal, lease.sibling)))
    running = b.leases[1]
    run.journal.writer.sync()
    run.close()  # ... and the process dies: no checkpoint after these

    with Run.open(tmp_path, source(4), config(4)) as run:
        assert run.resumed is not None and run.resumed.step == 0
        taken = {t.ordinal: t for t in run.take(2)}
        assert taken[a.ordinal].complete and not taken[a.ordinal].leases
        assert taken[b.ordinal].reused == b.leases[:1]
        (again,) = taken[b.ordinal].leases
        assert again.sibling == running.sibling and again.attempt > running.attempt
        assert list(run.sample(b.leases[0]).tokens()) == full(b.ordinal, 0)
        late = run.seal(running, payload(full(running.ordinal, running.sibling)))
        assert late.fenced == (running,) and not late.sealed
        assert run.metrics()["fenced"] == 1
        assert run.metrics()["samples_reused"] == 3
        effect = run.seal(again, generate(run, again))
        assert effect.landed == (b.ordinal,)


def test_progress_is_continued_token_by_token_after_a_crash(tmp_path: Path) -> None:
    cfg = config(1, samples=1)
    run = Run.open(tmp_path, source(1), cfg, progress_every=2)
    (t,) = run.take(1)
    (lease,) = t.leases
    want = full(0, 0)
    for k in range(1, 6):  # five tokens generated, journaled every two
        assert run.progress(lease, payload(want[:k]))
    run.journal.writer.sync()
    run.close()

    with Run.open(tmp_path, source(1), cfg, progress_every=2) as run:
        (t,) = run.take(1)
        (again,) = t.leases
        prefix = run.prefix(again)
        assert prefix is not None and list(prefix.tokens()) == want[: len(prefix)]
        assert 4 <= len(prefix) <= 5  # at most the tokens since the last record are lost
        sample = generate(run, again)
        assert list(sample.tokens()) == want
        assert run.seal(again, sample).landed == (0,)
        assert run.metrics()["tokens_reused"] == len(prefix)
        assert run.progress(lease, payload(want)) is False  # the dead life's: fenced


def test_buffered_groups_come_back_complete_from_the_journal(tmp_path: Path) -> None:
    run = Run.open(tmp_path, source(2), config(2))
    for t in run.take(2):
        for lease in t.leases:
            run.seal(lease, payload(full(lease.ordinal, lease.sibling)))
    run.checkpoint(1)  # both groups buffered, neither trained
    run.close()
    with Run.open(tmp_path, source(2), config(2)) as run:
        taken = run.take(2)
        assert [t.complete for t in taken] == [True, True]
        run.trained([0, 1])
        assert run.drained


def test_a_checkpoint_stored_by_the_caller_is_compacted_to_its_own_cut(tmp_path: Path) -> None:
    """``prepare`` then ``published`` around the caller's own write: the
    journal is compacted to the window of the state the caller stored (its
    cut when prepared), not to the ledger's cut when it was published."""
    run = Run.open(tmp_path, source(2), config(2))
    for t in run.take(2):
        for lease in t.leases:
            run.seal(lease, payload(full(lease.ordinal, lease.sibling)))
    prepared = run.prepare(1)  # both groups buffered, neither trained
    run.trained([0, 1])  # the ledger moves on before the caller's write lands
    run.check_epoch()
    write_checkpoint(
        tmp_path / "checkpoints", 1, fingerprint=FP, json_parts={"frontier": prepared.part},
        epoch=run.epoch,
    )  # fmt: skip
    run.published(prepared)
    assert run.step == 1 and run.metrics()["checkpoints"] == 2
    with pytest.raises(CheckpointMismatchError, match="published"):
        run.published(prepared)  # once
    run.close()
    with Run.open(tmp_path, source(2), config(2)) as run:
        assert run.step == 1
        taken = run.take(2)  # what the stored state holds comes back from the journal
        assert [t.complete for t in taken] == [True, True]


def test_published_refuses_a_part_stored_where_the_next_open_does_not_look(
    tmp_path: Path,
) -> None:
    """A part stored outside ``run.checkpoints`` is refused by ``published``
    with nothing changed (the journal compacted to it, the next open would
    resume the older checkpoint there and train again what it covers);
    stored there, the same ``Prepared`` is published."""
    cfg = config(2)
    run = Run.open(tmp_path / "run", source(2), cfg)
    for t in run.take(2):
        for lease in t.leases:
            run.seal(lease, payload(full(lease.ordinal, lease.sibling)))
    run.trained([0, 1])
    prepared = run.prepare(1)
    part = {"frontier": prepared.part}
    write_checkpoint(tmp_path / "elsewhere", 1, fingerprint=FP, json_parts=part)
    with pytest.raises(CheckpointMismatchError, match="no checkpoint of step 1"):
        run.published(prepared)
    assert run.step == 0 and run.metrics()["checkpoints"] == 1
    write_checkpoint(run.checkpoints, 1, fingerprint=FP, json_parts=part, epoch=run.epoch)
    run.published(prepared)
    run.close()
    with Run.open(tmp_path / "run", source(2), cfg) as again:
        assert again.step == 1 and again.drained


def test_published_refuses_what_this_run_did_not_prepare(tmp_path: Path) -> None:
    with (
        Run.open(tmp_path, source(), config()) as run,
        Run.open(tmp_path / "other", source(), config()) as other,
    ):
        older, newer = run.prepare(1), run.prepare(2)
        for bad in (other.prepare(1), "1", None):
            with pytest.raises(CheckpointMismatchError, match="published"):
                run.published(bad)  # type: ignore[arg-type]
        for prepared in (older, newer):
            write_checkpoint(
                run.checkpoints, prepared.step, fingerprint=FP,
                json_parts={"frontier": prepared.part}, epoch=run.epoch,
            )  # fmt: skip
        run.published(newer)
        with pytest.raises(CheckpointMismatchError):
            run.published(older)  # superseded by the newer one
        assert run.step == 2


def test_a_reuse_policy_of_nothing_generates_everything_again(tmp_path: Path) -> None:
    run = Run.open(tmp_path, source(2), config(2))
    for t in run.take(2):
        for lease in t.leases:
            run.seal(lease, payload(full(lease.ordinal, lease.sibling)))
    run.close()
    with Run.open(tmp_path, source(2), config(2), reuse=Reuse.nothing()) as run:
        taken = run.take(2)
        assert all(len(t.leases) == 2 and not t.reused for t in taken)


def test_your_parts_are_saved_and_given_back(tmp_path: Path) -> None:
    with Run.open(tmp_path, source(), config()) as run:
        run.checkpoint(3, json_parts={"trainer": {"lr": 0.5}})
    with Run.open(tmp_path, source(), config()) as run:
        assert run.step == 3 and run.resumed is not None
        assert run.resumed.json_parts["trainer"] == {"lr": 0.5}
        with pytest.raises(ValueError, match="the run's own"):
            run.checkpoint(4, json_parts={"frontier": {}})
        assert run.step == 3


def test_metrics_reach_the_frameworks_logger(tmp_path: Path) -> None:
    logged: list[dict[str, float]] = []
    with Run.open(tmp_path, source(), config(), logger=logged.append) as run:
        run.checkpoint(1)
        metrics = run.metrics()
    assert len(logged) == 2  # the first checkpoint and this one
    assert set(logged[-1]) == {f"frontier/{k}" for k in metrics}
    assert logged[-1]["frontier/step"] == 1
    assert all(isinstance(v, float) for v in metrics.values())


# -- refusals ------------------------------------------------------------------


def test_a_journal_with_samples_and_no_checkpoint_is_refused(tmp_path: Path) -> None:
    run = Run.open(tmp_path, source(), config())
    (t,) = run.take(1)
    run.seal(t.leases[0], payload([1, 2]))
    run.close()
    shutil.rmtree(tmp_path / "checkpoints")
    with pytest.raises(JournalWithoutCheckpointError):
        Run.open(tmp_path, source(), config())


def test_another_runs_checkpoint_is_refused(tmp_path: Path) -> None:
    Run.open(tmp_path, source(), config(), lineage="run-a").close()
    with pytest.raises(CheckpointError, match="another run"):
        Run.open(tmp_path, source(), config(), lineage="run-b")
    with pytest.raises(FingerprintMismatchError):
        Run.open(tmp_path, source(), LedgerConfig(stream_len=8, samples=2, fingerprint="other"))
    Run.open(tmp_path, source(), config()).close()  # the run is intact


def test_a_forged_run_part_is_a_typed_error(tmp_path: Path) -> None:
    Run.open(tmp_path, source(), config()).close()
    (ckpt,) = (tmp_path / "checkpoints").glob("ckpt-*")
    part = json.loads((ckpt / "frontier.json").read_text())
    part["journal_position"] = -1
    forged = tmp_path / "forged"
    shutil.copytree(tmp_path, forged)
    # The directory's digests cover the part: a changed byte is refused as
    # damage before its content is read.
    (forged / "checkpoints" / ckpt.name / "frontier.json").write_text(json.dumps(part))
    with pytest.raises(CheckpointError):
        Run.open(forged, source(), config())


def test_a_closed_run_refuses_work(tmp_path: Path) -> None:
    run = Run.open(tmp_path, source(), config())
    run.close()
    with pytest.raises(RuntimeError, match="closed"):
        run.take(1)


@pytest.mark.parametrize(
    ("bad_source", "bad_config", "named"),
    [
        (list(range(8)), None, "source must be a StreamSource"),
        (None, {"stream_len": 8, "samples": 2}, "config must be a LedgerConfig"),
    ],
)
def test_an_open_with_arguments_of_the_wrong_type_is_refused_before_anything_is_written(
    tmp_path: Path, bad_source: Any, bad_config: Any, named: str
) -> None:
    root = tmp_path / "run"
    with pytest.raises(TypeError, match=named):
        Run.open(root, bad_source or source(), bad_config or config())
    assert not root.exists()


def test_a_lease_that_is_no_lease_is_a_type_error(tmp_path: Path) -> None:
    with Run.open(tmp_path, source(), config()) as run:
        for call in (run.prefix, run.episode):
            with pytest.raises(TypeError, match="must be a Lease"):
                call("x")  # type: ignore[arg-type]


def test_a_config_without_fingerprint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fingerprint"):
        Run.open(tmp_path, source(), LedgerConfig(stream_len=8, samples=2))
    assert not (tmp_path / "journal").exists()


# -- preemption ------------------------------------------------------------------


def test_a_drain_journals_every_running_sample_and_checkpoints_in_time(tmp_path: Path) -> None:
    cfg = config(4, samples=2)
    run = Run.open(tmp_path, source(4), cfg, progress_every=1000)  # cadence never due
    leases = [lease for t in run.take(2) for lease in t.leases]
    for lease in leases:  # every sample has tokens the journal does not hold yet
        assert run.progress(lease, payload(full(lease.ordinal, lease.sibling)[:5]))
    run.notice(30.0)
    assert run.preempted and run.take(2) == []  # dispatch stopped
    drained = run.drain(step=7, json_parts={"trainer": {"step": 7}})
    assert drained.running == drained.progress_records == len(leases)
    assert drained.checkpointed and drained.in_time
    with pytest.raises(RuntimeError, match="closed"):
        run.take(1)

    with Run.open(tmp_path, source(4), cfg) as run:
        assert run.step == 7 and run.resumed is not None
        assert run.resumed.json_parts["trainer"] == {"step": 7}
        again = [lease for t in run.take(2) for lease in t.leases]
        assert len(again) == len(leases)
        for lease in again:  # each continues from exactly what was reported
            prefix = run.prefix(lease)
            assert prefix is not None
            assert list(prefix.tokens()) == full(lease.ordinal, lease.sibling)[:5]


def test_a_drain_without_time_for_a_checkpoint_still_keeps_the_samples(tmp_path: Path) -> None:
    cfg = config(2, samples=1)
    run = Run.open(tmp_path, source(2), cfg, progress_every=1000)
    (t,) = run.take(1)
    run.progress(t.leases[0], payload([5, 6, 7]))
    run.notice(0)
    drained = run.drain()
    assert not drained.checkpointed and drained.progress_records == 1
    with Run.open(tmp_path, source(2), cfg) as run:
        assert run.step == 0
        (t,) = run.take(1)
        prefix = run.prefix(t.leases[0])
        assert prefix is not None and list(prefix.tokens()) == [5, 6, 7]


def test_a_drain_the_store_never_answers_ends_in_time_and_keeps_the_samples(
    tmp_path: Path,
) -> None:
    """The wait for the store leaves the close its time: a drain whose
    uploads all fail still ends before its deadline (it waited to the
    deadline itself, then closed past it), and the samples stay in the
    node's file for a resume on the same node."""
    node, remote, parked = tmp_path / "node", tmp_path / "remote", tmp_path / "parked"
    cfg = config(4, samples=2)
    # No segment rolls before the drain (not by size, not by time): no upload
    # is in flight while the store goes down (one into a directory the
    # outage then removes would be an acknowledged object lost).
    run = Run.open(
        node, source(4), cfg, progress_every=1000, remote=remote, segment_seconds=3600.0
    )
    leases = [lease for t in run.take(2) for lease in t.leases]
    for lease in leases:
        assert run.progress(lease, payload(full(lease.ordinal, lease.sibling)[:5]))
    store_down(remote, parked)  # every upload fails from now on
    run.notice(2.0)
    drained = run.drain()
    assert drained.progress_records == len(leases)
    assert not drained.shipped and not drained.checkpointed
    assert drained.in_time, drained
    store_up(remote, parked)
    with Run.open(node, source(4), cfg, remote=remote) as again:
        for lease in [lease for t in again.take(2) for lease in t.leases]:
            prefix = again.prefix(lease)
            assert prefix is not None
            assert list(prefix.tokens()) == full(lease.ordinal, lease.sibling)[:5]


def test_a_notice_of_no_length_or_an_uncatchable_signal_is_refused(tmp_path: Path) -> None:
    import signal

    with Run.open(tmp_path, source(2), config(2)) as run:
        for bad, error in ((True, TypeError), ("10", TypeError), (-1, ValueError)):
            with pytest.raises(error, match="seconds"):
                run.notice(bad)  # type: ignore[arg-type]
            with pytest.raises(error, match="seconds"):
                run.watch(signal.SIGUSR2, seconds=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="cannot take"):
            run.watch(signal.SIGKILL)
        assert not run.preempted


def test_a_watched_signal_is_a_notice_and_close_restores_the_handler(tmp_path: Path) -> None:
    import os
    import signal

    before = signal.getsignal(signal.SIGUSR1)
    run = Run.open(tmp_path, source(), config())
    run.watch(signal.SIGUSR1, seconds=20.0)
    assert not run.preempted
    os.kill(os.getpid(), signal.SIGUSR1)
    assert run.preempted and run.take(1) == []
    run.close()
    assert signal.getsignal(signal.SIGUSR1) is before
    with Run.open(tmp_path, source(), config()) as run, pytest.raises(ValueError):
        run.notice(-1)


def test_a_drain_with_the_store_down_reports_it_inside_the_notice(tmp_path: Path) -> None:
    import time

    remote = tmp_path / "shared"
    run = Run.open(tmp_path / "node", source(4), config(4), remote=str(remote))
    (t,) = run.take(1)
    run.progress(t.leases[0], payload([1, 2, 3]))
    remote.rename(tmp_path / "gone")
    remote.write_bytes(b"")  # the store is gone: every upload fails
    run.notice(2.0)
    began = time.monotonic()
    drained = run.drain()
    assert time.monotonic() - began < 10
    assert not drained.shipped and not drained.checkpointed
    assert drained.progress_records == 1  # durable on the node all the same


def test_sync_races_the_commit_thread_without_writing_a_group_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Run.sync`` from the caller's thread while the run's commit thread
    polls the same journal: every group reaches the file once (a writer
    used from both threads unlocked wrote one group twice, read back later
    as a repeated sequence number), so the next life decodes the journal
    and continues every sample from what was reported. Each write is
    slowed (a busy disk) so that the commit thread is inside one when the
    caller syncs."""
    from frontier_adapters.journal import _files

    write = _files._write_all

    def slow(fd: int, data: bytes | memoryview) -> None:
        time.sleep(0.02)
        write(fd, data)

    monkeypatch.setattr(_files, "_write_all", slow)
    prefix = TokenPayload.of(list(range(40)), [-0.5] * 40, 0)
    for life in range(4):
        root = tmp_path / str(life)
        with Run.open(root, source(16), config(16, samples=4), progress_every=8) as run:
            leases = [lease for taken in run.take(16) for lease in taken.leases]
            for lease in leases:
                run.progress(lease, prefix)
                time.sleep(0.005)  # the commit thread wakes and finds the group
                run.sync()
            assert run.sync() == run.journal.writer.position
            run.checkpoint(1)  # its compaction decodes the journal
        with Run.open(root, source(16), config(16, samples=4)) as run:
            continued = [run.prefix(lease) for taken in run.take(16) for lease in taken.leases]
            assert continued == [prefix] * 64


@pytest.mark.parametrize("bad", ["lease", "sample"])
def test_a_refused_result_changes_nothing(tmp_path: Path, bad: str) -> None:
    # A seal the journal would refuse must not move the ledger first: the
    # group would land with a sample nothing holds, and the caller's retry
    # with a good sample would be fenced.
    with Run.open(tmp_path, source(2), config(2)) as run:
        ((first, second),) = [g.leases for g in run.take(1)]
        wrong = ((first.ordinal, first.sibling, first.attempt), payload([1]))
        if bad == "sample":
            wrong = (first, "not a payload")  # type: ignore[assignment]
        for call in (run.seal, run.progress):
            with pytest.raises(TypeError, match=r"(lease|sample) must be"):
                call(*wrong)  # type: ignore[arg-type]
        assert run.seal(first, payload([1, 2])).sealed == (first,)
        assert run.seal(second, payload([3])).landed == (0,)
        assert run.metrics()["fenced"] == 0
    with Run.open(tmp_path, source(2), config(2)) as run:
        (group,) = run.take(1)
        assert group.complete
        assert [list(run.sample(lease).tokens()) for lease in group.reused] == [[1, 2], [3]]


def test_a_remote_that_is_no_place_apart_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from frontier_adapters.store import StoreLocationError

    monkeypatch.chdir(tmp_path)
    root = tmp_path / "node"
    for remote in ("", "file://", root, root / "shipped", tmp_path, f"file://{root}"):
        with pytest.raises(StoreLocationError):
            Run.open(root, source(2), config(2), remote=remote)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written anywhere


def test_a_url_or_an_empty_root_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``root`` is the node's directory: a bucket's URL there made a local
    directory named ``s3:`` (the run's state on the node, not in the
    bucket), and ``""`` the working directory (found by a new-user audit)."""
    from frontier_adapters.store import StoreLocationError

    monkeypatch.chdir(tmp_path)
    for root in ("s3://bucket/runs/7", "file:///tmp/x", ""):
        with pytest.raises(StoreLocationError, match="root is the node's own directory"):
            Run.open(root, source(2), config(2))
    assert list(tmp_path.iterdir()) == []


def test_a_file_url_remote_is_the_directory_it_names(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    remote = f"file://{shared}"
    with Run.open(tmp_path / "a", source(2), config(2), remote=remote) as run:
        for group in run.take(1):
            for lease in group.leases:
                run.seal(lease, payload([lease.sibling]))
        run.trained([0])
        run.checkpoint(1)
    assert (shared / "checkpoints" / "LATEST").is_file() and (shared / "journal").is_dir()
    # Node lost: a fresh node reads everything from the shared directory.
    shutil.rmtree(tmp_path / "a")
    with Run.open(tmp_path / "b", source(2), config(2), remote=str(shared)) as run:
        assert run.step == 1 and [g.ordinal for g in run.take(2)] == [1]


def test_a_failure_that_stops_the_commit_thread_is_raised_by_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's commit thread meets a failed write (a full disk) on a
    group it commits in the background: the run's next call raises it by
    type, with the write's error as its cause, even a call that does not
    touch the journal (``trained``), and ``metrics()`` shows it; the
    thread never stops silently."""
    import errno
    import threading

    from frontier_adapters.journal import JournalWriterError, _files

    write, failed = _files._write_all, threading.Event()

    def full_disk(fd: int, data: bytes | memoryview) -> None:
        if threading.current_thread().name == "frontier-run-commits":
            failed.set()
            raise OSError(errno.ENOSPC, "No space left on device")
        write(fd, data)

    run = Run.open(tmp_path, source(4), config(4))
    assert run.metrics()["commit_failed"] == 0.0
    (t,) = run.take(1)
    monkeypatch.setattr(_files, "_write_all", full_disk)
    run.seal(t.leases[0], generate(run, t.leases[0]))  # its group is due in 5 ms
    assert failed.wait(60)
    assert run.metrics()["commit_failed"] == 1.0  # under the run's lock: after the thread's
    with pytest.raises(JournalWriterError, match="commit thread stopped") as raised:
        run.trained([])
    assert isinstance(raised.value.__cause__, OSError)
    assert raised.value.__cause__.errno == errno.ENOSPC
    with pytest.raises(JournalWriterError):
        run.take(1)
    monkeypatch.undo()
    run.close()  # said already: closed without raising it again

    # Said at close when no call came after the failure.
    failed.clear()
    run = Run.open(tmp_path / "again", source(4), config(4))
    (t,) = run.take(1)
    monkeypatch.setattr(_files, "_write_all", full_disk)
    run.seal(t.leases[0], generate(run, t.leases[0]))
    assert failed.wait(60)
    monkeypatch.undo()
    with pytest.raises(JournalWriterError, match="commit thread stopped"):
        run.close()


def test_a_version_1_run_part_without_its_epoch_is_still_read(tmp_path: Path) -> None:
    """A checkpoint of the previous version (its run part records no
    epoch) resumes, its loss fenced as before (one life assumed)."""
    from frontier_adapters.checkpoints import write_checkpoint

    Run.open(tmp_path, source(), config()).close()
    (ckpt,) = (tmp_path / "checkpoints").glob("ckpt-*")
    part = json.loads((ckpt / "frontier.json").read_text())
    assert part.pop("epoch") == 1 and part["version"] == 2
    part["version"] = 1
    write_checkpoint(tmp_path / "checkpoints", 1, fingerprint=FP, json_parts={"frontier": part})
    (tmp_path / "journal").unlink()  # and a loss, fenced from the checkpoint's attempts
    with Run.open(tmp_path, source(), config()) as run:
        assert run.step == 1 and run.recovered.lost is not None
    part["epoch"] = "one"
    part["version"] = 2
    write_checkpoint(tmp_path / "checkpoints", 2, fingerprint=FP, json_parts={"frontier": part})
    with pytest.raises(CheckpointError, match="epoch"):
        Run.open(tmp_path, source(), config())


@pytest.mark.parametrize("remote", [False, True])
def test_a_symlinked_checkpoints_directory_is_never_followed(tmp_path: Path, remote: bool) -> None:
    # It was: the open resumed another run's checkpoints and claimed its
    # LATEST (a write into the other run's directory).
    other = tmp_path / "other"
    with Run.open(other, source(2), config(2)) as run:
        run.checkpoint(1)
    latest = (other / "checkpoints" / "LATEST").read_bytes()
    place = tmp_path / ("shared" if remote else "node")
    place.mkdir()
    (place / "checkpoints").symlink_to(other / "checkpoints")
    root = tmp_path / "node" if remote else place
    with pytest.raises(CheckpointError, match="symlink"):
        Run.open(root, source(2), config(2), remote=str(place) if remote else None)
    assert (other / "checkpoints" / "LATEST").read_bytes() == latest


def test_a_run_resumes_from_a_state_its_caller_stored(tmp_path: Path) -> None:
    """``state=None``: no checkpoint 0, ``take`` waits for the caller's
    first ``published``; ``state=part, step=``: resumes from that part, the
    checkpoints directory never read."""
    run = Run.open(tmp_path, source(2), config(2), state=None)
    assert read_checkpoint(tmp_path / "checkpoints", fingerprint=FP) is None
    with pytest.raises(RuntimeError, match="first checkpoint"):
        run.take(1)
    first = run.prepare(0)
    run.published(first)
    (t,) = run.take(1)
    for lease in t.leases:
        run.seal(lease, payload(full(lease.ordinal, lease.sibling)))
    stored = run.prepare(1)  # group 0 buffered: the caller stores this part
    run.published(stored)
    part = json.loads(json.dumps(stored.part))
    run.close()
    assert read_checkpoint(tmp_path / "checkpoints", fingerprint=FP) is None
    with Run.open(tmp_path, source(2), config(2), state=part, step=1) as run:
        assert run.step == 1 and run.resumed is None
        taken = run.take(2)  # group 0 comes back whole from the journal
        assert [(t.ordinal, t.complete) for t in taken] == [(0, True), (1, False)]


def test_a_stored_state_is_checked_as_a_checkpoints_part(tmp_path: Path) -> None:
    with Run.open(tmp_path, source(2), config(2), state=None) as run:
        prepared = run.prepare(0)
        run.published(prepared)
        part = dict(prepared.part)
    with pytest.raises(ValueError, match="step="):
        Run.open(tmp_path, source(2), config(2), state=part)
    for alone in ("checkpoints", None):
        with pytest.raises(ValueError, match="step="):
            Run.open(tmp_path, source(2), config(2), state=alone, step=0)
    with pytest.raises(CheckpointCorruptError):
        Run.open(tmp_path, source(2), config(2), state={**part, "lineage": 7}, step=0)
    with pytest.raises(CheckpointCorruptError, match="lineage"):
        Run.open(tmp_path, source(2), config(2), state=part, step=0, lineage="other")
