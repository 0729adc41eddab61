"""FrontierGRPOTrainer in-process on the tiny offline Llama: a run audits
clean, a resume seeks (also with another batch size), saves stay between
generation blocks, the coverage checkpoints live where the run's
checkpoints live (a store URL survives the loss of the run's directory),
torn and mismatched pairs are typed errors, a SIGTERM drains at a block
boundary, and what it cannot make exact is refused."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._need import need_trl

need_trl()

from frontier_adapters.checkpoints import published_checkpoints  # noqa: E402
from frontier_adapters.examples.tiny_llm import OFFLINE_ENV, tiny_llm  # noqa: E402
from frontier_adapters.trl import (  # noqa: E402
    LOG_NAME,
    ORDINAL_COLUMN,
    CheckpointFileError,
    FrontierGRPOTrainer,
    checkpoint_folders,
)
from frontier_adapters.verify.trl_job import make_rows, reward  # noqa: E402

from frontier_core import CheckpointMismatchError  # noqa: E402
from frontier_core._audit import audit_log  # noqa: E402


@pytest.fixture(scope="module")
def parts() -> Iterator[tuple[Any, Any]]:
    os.environ.update(OFFLINE_ENV)
    import torch
    import transformers

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    path = tiny_llm()
    yield path, transformers.AutoTokenizer.from_pretrained(path)


def trainer(
    parts: tuple[Any, Any],
    out: Path,
    rows: int = 8,
    frontier: dict[str, Any] | None = None,
    **overrides: Any,
) -> Any:
    import datasets
    import transformers
    from trl import GRPOConfig

    path, tokenizer = parts
    settings: dict[str, Any] = dict(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        report_to=[],
        disable_tqdm=True,
        gradient_checkpointing=False,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=3,
        num_train_epochs=2,
        save_steps=2,
        logging_steps=10_000,
        seed=0,
        learning_rate=1e-3,
    )
    settings.update(overrides)
    seen: list[int] = []

    def spy(completions: Any, frontier_ordinal: list[int], **kwargs: Any) -> list[float]:
        seen.extend(frontier_ordinal)
        return reward(completions, **kwargs)

    t = FrontierGRPOTrainer(
        model=transformers.AutoModelForCausalLM.from_pretrained(path),
        processing_class=tokenizer,
        reward_funcs=spy,
        args=GRPOConfig(**settings),
        train_dataset=datasets.Dataset.from_list(make_rows(rows)),
        **(frontier or {}),
    )
    t.seen_ordinals = seen
    return t


def test_a_run_trains_every_prompt_once_and_rewards_see_the_ordinals(
    parts: tuple[Any, Any], tmp_path: Path
) -> None:
    t = trainer(parts, tmp_path)
    out = t.train()
    assert out.global_step == 8  # 16 ordinals, 2 prompts a step
    report = audit_log(tmp_path / LOG_NAME, 16)
    assert report.clean and report.trained_once == 16
    # Every completion's reward call saw its row's ordinal, each prompt twice.
    assert sorted(t.seen_ordinals) == sorted(o for o in range(16) for _ in range(2))
    assert [s for s, _ in checkpoint_folders(tmp_path)] == [2, 4, 6, 8]
    # The run's coverage checkpoints, paired by step (the run's first, 0,
    # pairs with no folder); the run keeps two.
    assert coverage_steps(tmp_path) == [8, 6]
    assert t.frontier.step == 8 and t.frontier.drained and not t.frontier.preempted
    assert t.state.epoch == 2.0
    # The run's counters are in TRL's log, once per coverage checkpoint.
    logged = [e for e in t.state.log_history if "frontier/cut" in e]
    assert [e["frontier/step"] for e in logged] == [2.0, 4.0, 6.0, 8.0]
    assert logged[-1]["frontier/cut"] == 16.0 and logged[-1]["frontier/window"] == 0.0


def test_resume_seeks_with_another_batch_size(parts: tuple[Any, Any], tmp_path: Path) -> None:
    first = trainer(parts, tmp_path)
    first.add_callback(StopAt(5))
    first.train()
    assert coverage_steps(tmp_path)[0] == 4
    # Killed after step 5: checkpoint-4 is the newest complete one. Resume
    # with 4 prompts a step instead of 2: 8 ordinals were trained, 8 are left.
    second = trainer(parts, tmp_path, per_device_train_batch_size=8)
    out = second.train(resume_from_checkpoint=True)
    assert out.global_step == 4 + 2
    report = audit_log(tmp_path / LOG_NAME, 16)
    assert report.clean and report.trained_once == 16, report
    assert sorted(set(second.seen_ordinals)) == list(range(8, 16))


def test_saves_wait_for_the_end_of_a_generation_block(
    parts: tuple[Any, Any], tmp_path: Path
) -> None:
    """steps_per_generation=2: a block feeds two optimizer steps; a save
    due at an odd step is deferred to the block's end."""
    t = trainer(
        parts, tmp_path, per_device_train_batch_size=2, steps_per_generation=2, save_steps=3
    )
    t.train()
    assert [s for s, _ in checkpoint_folders(tmp_path)] == [4, 6, 10, 12, 16]
    assert audit_log(tmp_path / LOG_NAME, 16).clean


def test_what_cannot_be_exact_is_refused(parts: tuple[Any, Any], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_steps"):
        trainer(parts, tmp_path, max_steps=3)
    with pytest.raises(ValueError, match="remove_unused_columns"):
        trainer(parts, tmp_path, remove_unused_columns=True)
    with pytest.raises(ValueError, match="save_total_limit"):
        trainer(parts, tmp_path, save_total_limit=1)
    # With a best model the Trainer keeps the newest and the best folder:
    # a third is needed for the one the newest coverage checkpoint pairs with.
    with pytest.raises(ValueError, match="3 or more with a best model"):
        trainer(parts, tmp_path, save_total_limit=2, metric_for_best_model="loss")
    trainer(parts, tmp_path, save_total_limit=3, metric_for_best_model="loss")
    with pytest.raises(ValueError, match="whole number"):
        trainer(parts, tmp_path, num_train_epochs=1.5)


def test_a_fresh_start_over_a_finished_run_is_refused(
    parts: tuple[Any, Any], tmp_path: Path
) -> None:
    trainer(parts, tmp_path, num_train_epochs=1).train()
    with pytest.raises(ValueError, match="complete checkpoint of an earlier run"):
        trainer(parts, tmp_path, num_train_epochs=1).train()
    # A save of a first life killed before its first coverage checkpoint (the
    # run has its checkpoint 0) is a dead branch: removed, the run starts afresh.
    torn = tmp_path / "fresh"
    first = trainer(parts, torn, num_train_epochs=1)
    first.add_callback(StopAt(1))
    first.train()
    (torn / "checkpoint-2").mkdir(parents=True)
    assert trainer(parts, torn, num_train_epochs=1).train().global_step == 4
    assert ORDINAL_COLUMN not in trainer(parts, torn).train_dataset.column_names
    # Folders beside a run with no coverage checkpoint at all are another
    # run's (or this run's checkpoints were lost): refused, nothing removed.
    alien = tmp_path / "alien"
    (alien / "checkpoint-2").mkdir(parents=True)
    with pytest.raises(ValueError, match="no coverage checkpoint"):
        trainer(parts, alien, num_train_epochs=1).train(resume_from_checkpoint=True)
    assert [p.name for p in alien.iterdir()] == ["checkpoint-2"]


def test_a_resume_from_another_output_dirs_checkpoint_is_refused_and_prunes_nothing(
    parts: tuple[Any, Any], tmp_path: Path
) -> None:
    """The log a resume cuts and the folders it prunes are output_dir's: a
    checkpoint of another run would cut this log at that run's record
    count and remove this run's folders above its step."""
    other = trainer(parts, tmp_path / "other", num_train_epochs=1)
    other.add_callback(StopAt(3))
    other.train()
    mine = tmp_path / "mine"
    (mine / "checkpoint-6").mkdir(parents=True)
    with pytest.raises(CheckpointMismatchError, match="not a checkpoint folder of output_dir"):
        trainer(parts, mine, num_train_epochs=1).train(
            resume_from_checkpoint=str(tmp_path / "other" / "checkpoint-2")
        )
    assert [p.name for p in mine.iterdir()] == ["checkpoint-6"]  # nothing pruned, no log


def test_the_coverage_checkpoints_survive_the_loss_of_the_runs_directory(
    parts: tuple[Any, Any], tmp_path: Path
) -> None:
    """With a store URL the coverage checkpoints (and the shipped journal)
    are the store's: a life on a new node, without the run's local
    directory, resumes from output_dir's folder that the store's newest
    coverage checkpoint pairs with."""
    out, store = tmp_path / "out", tmp_path / "store"
    url = {"frontier_remote": store.as_uri()}
    first = trainer(parts, out, frontier=url)
    first.add_callback(StopAt(5))
    first.train()
    shutil.rmtree(out / "frontier")  # the node's disk is gone; output_dir was shared
    assert not (out / "frontier" / "checkpoints").exists()
    second = trainer(parts, out, frontier=url)
    assert second.train(resume_from_checkpoint=True).global_step == 8
    assert second.frontier.journal.restored.source == "shipped"
    # Resumed at checkpoint-4's cut: 8 ordinals trained, the other 8 now.
    assert sorted(set(second.seen_ordinals)) == list(range(8, 16))
    report = audit_log(out / LOG_NAME, 16)
    assert report.clean and report.trained_once == 16, report


def test_torn_and_mismatched_pairs_are_typed_errors(parts: tuple[Any, Any], tmp_path: Path) -> None:
    first = trainer(parts, tmp_path)
    first.add_callback(StopAt(5))
    first.train()  # coverage at step 4: pairs with checkpoint-4
    state = tmp_path / "checkpoint-4" / "trainer_state.json"
    saved = state.read_text()
    # Another step in the Trainer's state: a mismatched pair.
    state.write_text(saved.replace('"global_step": 4', '"global_step": 2'))
    with pytest.raises(CheckpointMismatchError, match="global_step 2"):
        trainer(parts, tmp_path).train(resume_from_checkpoint=True)
    # No Trainer state: the Trainer's checkpoint is torn, the run's is not.
    state.unlink()
    with pytest.raises(CheckpointFileError, match="torn") as info:
        trainer(parts, tmp_path).train(resume_from_checkpoint=True)
    assert info.value.path == str(state)
    # No folder at all.
    shutil.rmtree(tmp_path / "checkpoint-4")
    with pytest.raises(CheckpointFileError, match="missing"):
        trainer(parts, tmp_path).train(resume_from_checkpoint=True)
    # A path other than the paired folder.
    with pytest.raises(CheckpointMismatchError, match="checkpoint-4"):
        trainer(parts, tmp_path).train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    # Nothing was removed or written by the refusals: the run is where it was.
    assert [s for s, _ in checkpoint_folders(tmp_path)] == [2]
    assert coverage_steps(tmp_path)[0] == 4


@pytest.mark.parametrize("spg", [1, 2], ids=["steps_per_generation=1", "steps_per_generation=2"])
def test_a_sigterm_drains_at_the_next_block_boundary(
    parts: tuple[Any, Any], tmp_path: Path, spg: int
) -> None:
    """A SIGTERM after step 2 (no save due; the binding's callback has run
    for step 2): the Trainer saves at the next block boundary (step 3, or
    step 4 when a block spans steps 3 and 4), the run drains there with its
    coverage checkpoint paired, ``train`` returns; the next life resumes
    from that pair and the audit is clean."""
    overrides: dict[str, Any] = {"save_steps": 100}
    if spg == 2:
        overrides.update(per_device_train_batch_size=2, steps_per_generation=2)
    first = trainer(parts, tmp_path, frontier={"frontier_grace": 30.0}, **overrides)
    first.add_callback(SigtermAt(2))
    first.train(resume_from_checkpoint=True)
    boundary = 3 if spg == 1 else 4
    assert first.state.global_step == boundary
    assert first.frontier.preempted
    drained = first.frontier_callback.drained
    assert drained is not None and drained.checkpointed and drained.in_time, drained
    assert [s for s, _ in checkpoint_folders(tmp_path)] == [boundary]
    assert coverage_steps(tmp_path)[0] == boundary
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # given back at close
    second = trainer(parts, tmp_path, **overrides)
    second.train(resume_from_checkpoint=True)
    report = audit_log(tmp_path / LOG_NAME, 16)
    assert report.clean and report.trained_once == 16, report


def coverage_steps(out: Path) -> list[int]:
    """The steps of the run's published coverage checkpoints, newest first."""
    published = published_checkpoints(out / "frontier" / "checkpoints")
    return [int(p.name.split("-")[1]) for p in published]


class AtStep:
    """A callback that acts (``act``) at the end of ``step`` and lets every
    other event of the Trainer pass."""

    def __init__(self, step: int) -> None:
        self.step = step

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda args, state, control, **kw: control
        raise AttributeError(name)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            self.act()
        return control

    def act(self) -> None:
        raise NotImplementedError


class SigtermAt(AtStep):
    """Sends this process a SIGTERM at the end of ``step``."""

    def act(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


class StopAt:
    """A callback that stops training (as a kill would) after ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return lambda args, state, control, **kw: control
        raise AttributeError(name)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_training_stop = True
            control.should_save = False
        return control


def test_a_fenced_life_stops_before_the_trainer_saves(
    parts: tuple[Any, Any], tmp_path: Path
) -> None:
    """A newer life claims the run between two saves: the older trainer
    raises ``CheckpointFencedError`` at its next save, before the Trainer
    writes (or rotates) anything in ``output_dir``."""
    from frontier_adapters.checkpoints import CheckpointFencedError

    t = trainer(parts, tmp_path)
    t.add_callback(ClaimAt(3, t))
    with pytest.raises(CheckpointFencedError):
        t.train()
    assert [s for s, _ in checkpoint_folders(tmp_path)] == [2]
    assert coverage_steps(tmp_path) == [2, 0]


class ClaimAt(AtStep):
    """Makes a newer life claim the run after ``step``."""

    def __init__(self, step: int, trainer: Any) -> None:
        super().__init__(step)
        self.trainer = trainer

    def act(self) -> None:
        from frontier_adapters.checkpoints import claim_epoch

        claim_epoch(self.trainer.frontier.checkpoints)
