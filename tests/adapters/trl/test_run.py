"""FrontierRun without a Trainer: blocks, micro-steps, steps, the state
file and checkpoint discovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._need import need_trl

need_trl()

from frontier_adapters.trl import (  # noqa: E402
    STATE_FILE,
    FrontierRun,
    Layout,
    StreamMisalignedError,
    StreamOrder,
    latest_checkpoint,
    read_state,
    torn_checkpoints,
    write_state,
)

from frontier_core import (  # noqa: E402
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FingerprintMismatchError,
    fold_lineage,
    read_train_log,
)
from frontier_core._audit import audit_log  # noqa: E402


def make_run(
    tmp: Path | None = None,
    *,
    n: int = 8,
    prompts: int = 2,
    g: int = 2,
    repeat: int = 1,
    grad_accum: int = 1,
    epochs: int = 2,
    fingerprint: str = "fp",
) -> FrontierRun:
    return FrontierRun(
        StreamOrder(n, seed=3, shuffle=True),
        epochs=epochs,
        layout=Layout(prompts=prompts, num_generations=g, repeat=repeat, grad_accum=grad_accum),
        fingerprint=fingerprint,
        log_path=None if tmp is None else tmp / "log.jsonl",
    )


def copy(block: tuple[int, ...], g: int) -> list[int]:
    return [o for o in block for _ in range(g)]


def train_blocks(run: FrontierRun, steps: int, step0: int = 0) -> None:
    """Drive ``steps`` optimizer steps as the Trainer would (one micro-step
    per copy, ``grad_accum`` micro-steps per step)."""
    lay = run.layout
    micro = 0
    step = step0
    block = None
    copies = 0
    while step < step0 + steps:
        if block is None or copies == lay.repeat:
            block = run.next_block()
            assert block is not None
            copies = 0
        run.consume(copy(block, lay.num_generations))
        copies += 1
        micro += 1
        if micro % lay.grad_accum == 0:
            run.step_end(step)
            step += 1


def test_a_block_is_trained_at_the_step_that_ends_its_last_copy(tmp_path: Path) -> None:
    run = make_run(tmp_path, repeat=2)
    run.start()
    block = run.next_block()
    assert block is not None
    run.consume(copy(block, 2))
    assert run.mid_block
    assert run.step_end(0) == ()
    run.consume(copy(block, 2))
    assert not run.mid_block
    assert run.step_end(1) == block
    with pytest.raises(StreamMisalignedError):
        run.consume(copy(block, 2))  # a third copy is not the next block


def test_misaligned_micro_steps_raise(tmp_path: Path) -> None:
    run = make_run(tmp_path, repeat=2)
    run.start()
    a, b = run.next_block(), run.next_block()
    assert a is not None and b is not None
    with pytest.raises(StreamMisalignedError):
        run.consume(copy(b, 2))  # b before a
    with pytest.raises(StreamMisalignedError):
        run.consume([a[0], a[1], a[0], a[1]])  # not grouped by generation
    run.consume(copy(a, 2))
    with pytest.raises(StreamMisalignedError):
        run.consume(copy(b, 2))  # a has 1 of 2 copies
    with pytest.raises(Exception, match="inside a generation block"):
        run.state_dict(1)


def test_state_round_trip_resumes_at_the_cut(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    run.start()
    train_blocks(run, 3)
    run.next_block()  # prefetched by the loader, never trained: holds the cut
    folder = tmp_path / "out" / "checkpoint-3"
    folder.mkdir(parents=True)
    write_state(folder, run.state_dict(3))
    assert not [p for p in folder.iterdir() if p.name != STATE_FILE]  # no temporary left
    run.close()

    again = make_run(tmp_path)
    assert again.resume(read_state(folder)) == 3
    assert again.remaining == 16 - 6
    assert again.planned_updates() == 5
    assert again.next_block() == (6, 7)
    # Another batch layout resumes the same stream.
    wider = make_run(tmp_path, prompts=5)
    wider.resume(read_state(folder))
    assert wider.planned_updates() == 2  # 10 left: two blocks of 5
    assert wider.next_block() == (6, 7, 8, 9, 10)


def test_a_full_run_with_a_crash_audits_clean(tmp_path: Path) -> None:
    run = make_run(tmp_path, n=7, prompts=3, epochs=2)  # 14 ordinals: 4 blocks, tail 2
    run.start()
    train_blocks(run, 2)
    folder = tmp_path / "out" / "checkpoint-2"
    folder.mkdir(parents=True)
    write_state(folder, run.state_dict(2))
    train_blocks(run, 1, step0=2)  # lost with the crash
    run.close()
    again = make_run(tmp_path, n=7, prompts=3, epochs=2)
    step = again.resume(read_state(folder))
    train_blocks(again, again.planned_updates(), step0=step)
    assert again.next_block() is None  # the tail of 2 is dropped on record
    again.close()
    report = audit_log(tmp_path / "log.jsonl", 14)
    assert (report.trained_once, report.skipped, report.duplicated) == (12, (), ())
    assert report.dropped == (12, 13)
    assert fold_lineage(read_train_log(tmp_path / "log.jsonl")).discarded_steps == 1


def test_resume_refuses_another_stream(tmp_path: Path) -> None:
    run = make_run()
    run.start()
    folder = tmp_path / "checkpoint-0"
    folder.mkdir()
    write_state(folder, run.state_dict(0))
    with pytest.raises(FingerprintMismatchError):
        make_run(fingerprint="other").resume(read_state(folder))
    with pytest.raises(CheckpointMismatchError):
        make_run(n=9).resume(read_state(folder))
    with pytest.raises(CheckpointMismatchError):
        make_run(epochs=1).resume(read_state(folder))
    assert make_run(epochs=3).resume(read_state(folder)) == 0  # longer is fine


def test_read_state_refuses_damage(tmp_path: Path) -> None:
    run = make_run()
    run.start()
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    with pytest.raises(CheckpointCorruptError, match="missing"):
        read_state(folder)
    path = write_state(folder, run.state_dict(4))
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "global_step": 5}))
    with pytest.raises(CheckpointCorruptError, match="checksum"):
        read_state(folder)
    path.write_text(path.read_text()[:40])
    with pytest.raises(CheckpointCorruptError, match="not JSON"):
        read_state(folder)
    path.write_text(json.dumps({**state, "version": 99}))
    with pytest.raises(CheckpointVersionError):
        read_state(folder)
    other = tmp_path / "checkpoint-6"
    other.mkdir()
    write_state(other, run.state_dict(4))
    with pytest.raises(CheckpointCorruptError, match="folder is checkpoint-6"):
        read_state(other)


def test_latest_checkpoint_passes_over_torn_saves(tmp_path: Path) -> None:
    run = make_run()
    run.start()
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "checkpoint-2").mkdir()  # torn: the Trainer died writing it
    assert latest_checkpoint(tmp_path) is None
    assert torn_checkpoints(tmp_path) == [tmp_path / "checkpoint-2"]
    write_state(tmp_path / "checkpoint-2", run.state_dict(2))
    (tmp_path / "checkpoint-10").mkdir()
    (tmp_path / "checkpoint-10" / "model.safetensors").write_bytes(b"half")
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert torn_checkpoints(tmp_path) == [tmp_path / "checkpoint-10"]
    (tmp_path / "checkpoint-12").mkdir()
    (tmp_path / "checkpoint-12" / STATE_FILE).write_text("{")
    with pytest.raises(CheckpointCorruptError):
        latest_checkpoint(tmp_path)  # a damaged state file is never passed over


def test_a_fresh_start_over_a_life_killed_before_its_first_checkpoint_audits_clean(
    tmp_path: Path,
) -> None:
    """Exhaustive over small runs: a first life trains ``dead`` steps and
    dies before any checkpoint; a fresh start trains to a checkpoint at
    ``saved`` and dies ``lost`` steps later; a resume finishes. The audit
    reports every ordinal trained once, whatever the dead life left in the
    log."""
    n, epochs, prompts = 3, 2, 2  # 6 ordinals: 3 steps, across the epoch boundary
    steps = n * epochs // prompts
    for dead in range(steps + 1):
        for saved in range(steps + 1):
            for lost in range(steps - saved + 1):
                work = tmp_path / f"{dead}-{saved}-{lost}"
                work.mkdir()
                first = make_run(work, n=n, prompts=prompts, epochs=epochs)
                first.start()
                train_blocks(first, dead)
                first.close()  # killed: no checkpoint
                fresh = make_run(work, n=n, prompts=prompts, epochs=epochs)
                fresh.start()
                train_blocks(fresh, saved)
                folder = work / f"checkpoint-{saved}"
                folder.mkdir()
                write_state(folder, fresh.state_dict(saved))
                train_blocks(fresh, lost, step0=saved)
                fresh.close()  # killed after the checkpoint
                last = make_run(work, n=n, prompts=prompts, epochs=epochs)
                step = last.resume(read_state(folder))
                train_blocks(last, last.planned_updates(), step0=step)
                last.close()
                report = audit_log(work / "log.jsonl", n * epochs)
                assert (report.trained_once, report.skipped, report.duplicated) == (
                    n * epochs,
                    (),
                    (),
                ), (dead, saved, lost, report)
                assert report.discarded_steps == dead + lost, (dead, saved, lost)
