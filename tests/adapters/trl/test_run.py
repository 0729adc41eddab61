"""GenerationBlocks over a Run without a Trainer: blocks, micro-steps,
steps, the coverage checkpoints and the resume at the cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._need import need_trl

need_trl()

from frontier_adapters.checkpoints import LoadedCheckpoint  # noqa: E402
from frontier_adapters.run import Run  # noqa: E402
from frontier_adapters.trl import (  # noqa: E402
    PART,
    GenerationBlocks,
    Layout,
    StreamMisalignedError,
    StreamOrder,
    stream_source,
)
from frontier_adapters.trl._checkpoints import log_records, part  # noqa: E402

from frontier_core import (  # noqa: E402
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FailurePolicy,
    FingerprintMismatchError,
    LedgerConfig,
    Status,
    TrainLogWriter,
    fold_lineage,
    read_train_log,
)
from frontier_core._audit import audit_log  # noqa: E402


class Life:
    """One process of a TRL run as the trainer drives it: the run opened
    (recovered), the log cut at the saved record count, the blocks."""

    def __init__(
        self,
        tmp: Path,
        *,
        n: int = 8,
        prompts: int = 2,
        g: int = 2,
        repeat: int = 1,
        grad_accum: int = 1,
        epochs: int = 2,
        seed: int = 3,
        fingerprint: str = "fp",
    ) -> None:
        order = StreamOrder(n, seed=seed, shuffle=True)
        config = LedgerConfig(
            stream_len=epochs * n, fingerprint=fingerprint, on_failure=FailurePolicy.DROP
        )
        self.run = Run.open(
            tmp / "run", stream_source(order, epochs=epochs, batch_size=prompts), config
        )
        self.log = TrainLogWriter(tmp / "log.jsonl", resume_records=log_records(self.run.resumed))
        layout = Layout(prompts=prompts, num_generations=g, repeat=repeat, grad_accum=grad_accum)
        self.blocks = GenerationBlocks(self.run, order, layout, self.log)

    def checkpoint(self, step: int) -> None:
        """What ``FrontierCallback.on_save`` writes."""
        self.log.sync()
        self.run.checkpoint(step, json_parts={PART: part(self.log.records)})

    def close(self) -> None:
        self.run.close()
        self.log.close()


def copy(block: tuple[int, ...], g: int) -> list[int]:
    return [o for o in block for _ in range(g)]


def train_blocks(blocks: GenerationBlocks, steps: int, step0: int = 0) -> None:
    """Drive ``steps`` optimizer steps as the Trainer would (one micro-step
    per copy, ``grad_accum`` micro-steps per step)."""
    lay = blocks.layout
    micro = 0
    step = step0
    block = None
    copies = 0
    while step < step0 + steps:
        if block is None or copies == lay.repeat:
            block = blocks.next_block()
            assert block is not None
            copies = 0
        blocks.consume(copy(block, lay.num_generations))
        copies += 1
        micro += 1
        if micro % lay.grad_accum == 0:
            blocks.step_end(step)
            step += 1


def test_a_block_is_trained_at_the_step_that_ends_its_last_copy(tmp_path: Path) -> None:
    life = Life(tmp_path, repeat=2)
    blocks = life.blocks
    block = blocks.next_block()
    assert block is not None
    blocks.consume(copy(block, 2))  # generated here: landed
    assert blocks.mid_block
    assert blocks.step_end(0) == ()
    assert {life.run.ledger.status(o) for o in block} == {Status.BUFFERED}
    blocks.consume(copy(block, 2))
    assert not blocks.mid_block
    assert blocks.step_end(1) == block
    # Trained, or below the cut (``None``): resolved either way.
    assert {life.run.ledger.status(o) for o in block} <= {Status.TRAINED, None}
    with pytest.raises(StreamMisalignedError):
        blocks.consume(copy(block, 2))  # a third copy is not the next block


def test_misaligned_micro_steps_raise(tmp_path: Path) -> None:
    blocks = Life(tmp_path, repeat=2).blocks
    a, b = blocks.next_block(), blocks.next_block()
    assert a is not None and b is not None
    with pytest.raises(StreamMisalignedError):
        blocks.consume(copy(b, 2))  # b before a
    with pytest.raises(StreamMisalignedError):
        blocks.consume([a[0], a[1], a[0], a[1]])  # not grouped by generation
    blocks.consume(copy(a, 2))
    with pytest.raises(StreamMisalignedError):
        blocks.consume(copy(b, 2))  # a has 1 of 2 copies


def test_a_resume_seeks_to_the_cut(tmp_path: Path) -> None:
    life = Life(tmp_path)
    train_blocks(life.blocks, 3)
    prefetched = life.blocks.next_block()  # by the loader, never trained: holds the cut
    life.checkpoint(3)
    life.close()

    again = Life(tmp_path)
    assert again.run.step == 3
    assert again.blocks.remaining == 16 - 6
    assert again.blocks.planned_updates() == 5
    assert again.blocks.next_block() == prefetched
    again.close()
    # Another batch layout resumes the same stream.
    wider = Life(tmp_path, prompts=5)
    assert wider.blocks.planned_updates() == 2  # 10 left: two blocks of 5
    assert wider.blocks.next_block() == (6, 7, 8, 9, 10)
    wider.close()


def test_a_full_run_with_a_crash_audits_clean(tmp_path: Path) -> None:
    life = Life(tmp_path, n=7, prompts=3, epochs=2)  # 14 ordinals: 4 blocks, tail 2
    train_blocks(life.blocks, 2)
    life.checkpoint(2)
    train_blocks(life.blocks, 1, step0=2)  # lost with the crash
    life.close()
    again = Life(tmp_path, n=7, prompts=3, epochs=2)
    step = again.run.step
    train_blocks(again.blocks, again.blocks.planned_updates(), step0=step)
    assert again.blocks.next_block() is None  # the tail of 2 is dropped on record
    assert again.run.drained
    again.close()
    report = audit_log(tmp_path / "log.jsonl", 14)
    assert (report.trained_once, report.skipped, report.duplicated) == (12, (), ())
    assert report.dropped == (12, 13)
    assert fold_lineage(read_train_log(tmp_path / "log.jsonl")).discarded_steps == 1


def test_a_resume_refuses_another_stream(tmp_path: Path) -> None:
    life = Life(tmp_path)
    train_blocks(life.blocks, 1)
    life.checkpoint(1)
    life.close()
    with pytest.raises(FingerprintMismatchError):
        Life(tmp_path, fingerprint="other")
    with pytest.raises(CheckpointMismatchError):
        Life(tmp_path, n=9)
    with pytest.raises(CheckpointMismatchError):
        Life(tmp_path, seed=4)
    with pytest.raises(CheckpointMismatchError):
        Life(tmp_path, epochs=1)
    longer = Life(tmp_path, epochs=3)  # a longer stream continues the saved one
    assert longer.run.step == 1 and longer.blocks.remaining == 24 - 2
    longer.close()


def test_the_bindings_part_is_checked(tmp_path: Path) -> None:
    life = Life(tmp_path)
    assert log_records(life.run.resumed) == 0  # a fresh run
    train_blocks(life.blocks, 1)
    life.run.checkpoint(1)  # not written by the binding: no part of ours
    life.close()
    with pytest.raises(CheckpointCorruptError, match=r"not written by frontier_adapters\.trl"):
        Life(tmp_path)
    for bad, error in (
        ({**part(3), "version": 99}, CheckpointVersionError),
        ({**part(3), "log_records": -1}, CheckpointCorruptError),
        ({**part(3), "log_records": 2.0}, CheckpointCorruptError),
        ({**part(3), "extra": 1}, CheckpointCorruptError),
        ([], CheckpointCorruptError),
    ):
        loaded = LoadedCheckpoint(tmp_path, 2, {PART: bad}, {})
        with pytest.raises(error):
            log_records(loaded)
    assert log_records(LoadedCheckpoint(tmp_path, 2, {PART: part(3)}, {})) == 3


def test_a_fresh_start_over_a_life_killed_before_its_first_checkpoint_audits_clean(
    tmp_path: Path,
) -> None:
    """Exhaustive over small runs: a first life trains ``dead`` steps and
    dies before any checkpoint of its own (the run's first, step 0, is
    written when it opens); the next life starts afresh from it, trains to
    a checkpoint at ``saved`` and dies ``lost`` steps later; a resume
    finishes. The audit reports every ordinal trained once, whatever the
    dead life left in the log."""
    n, epochs, prompts = 3, 2, 2  # 6 ordinals: 3 steps, across the epoch boundary
    steps = n * epochs // prompts
    for dead in range(steps + 1):
        for saved in range(steps + 1):
            for lost in range(steps - saved + 1):
                work = tmp_path / f"{dead}-{saved}-{lost}"
                work.mkdir()
                first = Life(work, n=n, prompts=prompts, epochs=epochs)
                train_blocks(first.blocks, dead)
                first.close()  # killed: no checkpoint
                fresh = Life(work, n=n, prompts=prompts, epochs=epochs)
                assert fresh.run.step == 0
                train_blocks(fresh.blocks, saved)
                if saved:
                    fresh.checkpoint(saved)
                train_blocks(fresh.blocks, lost, step0=saved)
                fresh.close()  # killed after the checkpoint
                last = Life(work, n=n, prompts=prompts, epochs=epochs)
                step = last.run.step
                assert step == saved
                train_blocks(last.blocks, last.blocks.planned_updates(), step0=step)
                last.close()
                report = audit_log(work / "log.jsonl", n * epochs)
                assert (report.trained_once, report.skipped, report.duplicated) == (
                    n * epochs,
                    (),
                    (),
                ), (dead, saved, lost, report)
                assert report.discarded_steps == dead + lost, (dead, saved, lost)
