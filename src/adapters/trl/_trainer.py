"""``FrontierGRPOTrainer``: TRL's ``GRPOTrainer`` with exactly-once prompts.

What it changes, and through which extension point (TRL 1.16, transformers
5.19 to 5.24):

* ``_get_train_sampler`` (the method TRL itself overrides to install
  ``RepeatSampler``; documented as the place to change sampling):
  ``FrontierSampler``, the same layout drawn from the ledger from the cut.
* ``get_train_dataloader`` (public): the dataset is viewed through
  ``OrdinalRows`` while TRL builds its loader, so each row carries
  ``ORDINAL_COLUMN``; everything else (batch size, workers, accelerate) is
  TRL's own code.
* ``training_step`` (public): hands each micro-step's ordinals to the run
  before TRL generates or trains on them.
* ``train`` (public): reads the frontier state of the checkpoint it resumes
  from, seeks the stream to the cut, sets ``ignore_data_skip`` (no
  skip-and-replay) and ``max_steps`` (the steps left to drain the stream,
  which is what lets a resume change the batch size).
* ``FrontierCallback`` (a ``TrainerCallback``): marks blocks trained in
  ``on_step_end``, defers a save that falls inside a generation block to
  the block's end, and writes the state file in ``on_save``, after the
  Trainer wrote its own files.

One underscore-named method is overridden, ``_get_train_sampler``: it is
the hook TRL itself overrides to install ``RepeatSampler`` (transformers'
``_get_dataloader`` calls it as ``sampler_fn``), and overriding it is the
smallest change that replaces the sampler while keeping TRL's loader
construction; nothing else private is overridden or read. The
trainer refuses what it cannot make exact: several processes, an iterable
dataset, ``remove_unused_columns=True`` (it would strip the ordinal
column), ``max_steps`` set by hand (the stream defines the run) and
``save_total_limit=1`` (the Trainer deletes the previous checkpoint before
the state file of the new one exists).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback  # type: ignore[import-not-found]
from trl import GRPOTrainer  # type: ignore[import-not-found]

from frontier_core import CheckpointMismatchError

from ._run import (
    FrontierRun,
    fsync_tree,
    latest_checkpoint,
    ordinals_of,
    read_state,
    remove_dead_branches,
    write_state,
)
from ._sampler import FrontierSampler, OrdinalRows
from ._stream import Layout, StreamOrder, dataset_fingerprint

logger = logging.getLogger(__name__)

#: The training log's default name inside ``output_dir``.
LOG_NAME = "frontier_train_log.jsonl"


class FrontierCallback(TrainerCallback):  # type: ignore[misc]
    """Marks prompts trained at the optimizer step, keeps saves between
    generation blocks, and writes the frontier state into each checkpoint
    folder. Added by ``FrontierGRPOTrainer``; not used on its own."""

    def __init__(self, run: FrontierRun, *, fsync: bool = True) -> None:
        self.run = run
        self.fsync = fsync
        self._deferred = False

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.run.step_end(state.global_step - 1)
        # The Trainer's epoch counts passes over its loader, which is one
        # pass over the whole stream here: report the stream's epoch instead.
        state.epoch = self.run.ledger.cut / self.run.order.dataset_len
        if control.should_save and self.run.mid_block:
            control.should_save = False
            self._deferred = True
        elif self._deferred and not self.run.mid_block:
            control.should_save = True
            self._deferred = False
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not args.should_save:
            return control
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.fsync:
            fsync_tree(folder)
        self.write(folder, self.run.state_dict(state.global_step))
        return control

    def write(self, folder: Path, state: dict[str, Any]) -> Path:
        """Write the state file (an override point for tests that kill a
        process inside this write)."""
        return write_state(folder, state)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.run.log is not None:
            self.run.log.sync()
        return control


class FrontierGRPOMixin:
    """The overrides, for a class that already subclasses ``GRPOTrainer``:
    ``class MyTrainer(FrontierGRPOMixin, MyGRPOTrainer)``. Keyword
    arguments: ``frontier_log`` (the training log for ``frontier audit``;
    default ``output_dir/frontier_train_log.jsonl``, ``False`` for none),
    ``frontier_fingerprint`` (default: a hash of every row, the seed and the
    shuffle flag) and ``frontier_fsync`` (sync the Trainer's files before
    the state file vouches for them; default on)."""

    frontier: FrontierRun
    # What GRPOTrainer provides (declared for the type checker only).
    args: Any
    train_dataset: Any
    accelerator: Any
    num_generations: Any
    num_iterations: Any

    def __init__(
        self,
        *args: Any,
        frontier_log: str | os.PathLike[str] | bool | None = None,
        frontier_fingerprint: str | None = None,
        frontier_fsync: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        targs: Any = self.args
        dataset: Any = self.train_dataset
        self._frontier_check(targs, dataset)
        epochs = int(targs.num_train_epochs)
        order = StreamOrder(len(dataset), seed=int(targs.seed), shuffle=bool(targs.shuffle_dataset))
        fingerprint = frontier_fingerprint or dataset_fingerprint(
            dataset, seed=order.seed, shuffle=order.shuffle
        )
        if frontier_log is None or frontier_log is True:
            log_path: str | os.PathLike[str] | None = Path(targs.output_dir) / LOG_NAME
        elif frontier_log is False:
            log_path = None
        else:
            log_path = frontier_log
        self.frontier = FrontierRun(
            order,
            epochs=epochs,
            layout=self._frontier_layout(),
            fingerprint=fingerprint,
            log_path=log_path,
        )
        self.frontier_callback = FrontierCallback(self.frontier, fsync=frontier_fsync)
        self.add_callback(self.frontier_callback)  # type: ignore[attr-defined]

    def _frontier_check(self, targs: Any, dataset: Any) -> None:
        if getattr(self, "accelerator", None) is not None and self.accelerator.num_processes > 1:
            raise NotImplementedError(
                "FrontierGRPOTrainer runs in one process for now: with several, every rank "
                "would have to report its micro-steps to one ledger"
            )
        if (
            dataset is None
            or not hasattr(dataset, "__getitem__")
            or not hasattr(dataset, "__len__")
        ):
            raise TypeError(
                "FrontierGRPOTrainer needs a map-style train_dataset (datasets.Dataset)"
            )
        if targs.remove_unused_columns:
            raise ValueError(
                "remove_unused_columns=True would strip the ordinal column: keep TRL's default "
                "(False)"
            )
        if targs.max_steps is not None and targs.max_steps > 0:
            raise ValueError(
                "with frontier the stream defines the run: set num_train_epochs, not max_steps "
                "(the trainer computes max_steps from what is left of the stream)"
            )
        if (
            float(targs.num_train_epochs) != int(targs.num_train_epochs)
            or targs.num_train_epochs < 1
        ):
            raise ValueError(
                f"num_train_epochs must be a whole number, got {targs.num_train_epochs}"
            )
        if targs.save_total_limit == 1:
            raise ValueError(
                "save_total_limit=1 lets the Trainer delete the last complete checkpoint before "
                "the new one is complete: use 2 or more (or None)"
            )

    def _frontier_layout(self) -> Layout:
        targs: Any = self.args
        g = int(self.num_generations)
        layout = Layout(
            prompts=int(targs.generation_batch_size) // g,
            num_generations=g,
            repeat=int(self.num_iterations) * int(targs.steps_per_generation),
            grad_accum=int(targs.gradient_accumulation_steps),
        )
        rows = int(targs.train_batch_size) * int(targs.steps_per_generation)
        if rows != layout.rows_per_copy:
            raise ValueError(
                f"the loader batches {rows} rows but a generation block holds "
                f"{layout.rows_per_copy}"
            )
        return layout

    # -- the extension points ---------------------------------------------

    def _get_train_sampler(self, dataset: Any = None) -> FrontierSampler:
        return FrontierSampler(self.frontier)

    def get_train_dataloader(self) -> Any:
        base = self.train_dataset
        self.train_dataset = OrdinalRows(base, self.frontier.order)
        try:
            return super().get_train_dataloader()  # type: ignore[misc]
        finally:
            self.train_dataset = base

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        if isinstance(inputs, list):
            self.frontier.consume(ordinals_of(inputs))
        return super().training_step(model, inputs, num_items_in_batch)  # type: ignore[misc]

    def train(
        self, resume_from_checkpoint: str | os.PathLike[str] | bool | None = None, **kwargs: Any
    ) -> Any:
        """``Trainer.train`` with the stream resumed at the cut.
        ``resume_from_checkpoint=True`` takes the newest *complete*
        checkpoint (``latest_checkpoint``: torn saves are passed over) and
        raises ``ValueError`` when there is none, as the Trainer does.
        Checkpoint folders above the one resumed from (torn saves, a dead
        branch) are removed, and on a fresh start the torn saves of an earlier attempt; a fresh
        start in an ``output_dir`` that holds a complete checkpoint raises
        ``ValueError``. Raises ``CheckpointError`` subclasses for a checkpoint
        without a valid frontier state, of another dataset or order, or
        outside ``output_dir`` (``CheckpointMismatchError``: the training
        log and the checkpoints a resume prunes are ``output_dir``'s)."""
        targs: Any = self.args
        path: Path | None
        if resume_from_checkpoint is True:
            path = latest_checkpoint(targs.output_dir)
            if path is None:
                raise ValueError(
                    f"No valid checkpoint found in output directory ({targs.output_dir})"
                )
        elif resume_from_checkpoint is None or resume_from_checkpoint is False:
            path = None
        else:
            path = Path(resume_from_checkpoint)
        if path is None:
            if (earlier := latest_checkpoint(targs.output_dir)) is not None:
                raise ValueError(
                    f"{targs.output_dir} holds a complete checkpoint of an earlier run "
                    f"({earlier.name}): resume from it, or remove it to start afresh (a crash "
                    "of the new run would otherwise resume into the old one)"
                )
            for dead in remove_dead_branches(targs.output_dir, -1):
                logger.warning("removed %s: a torn save of an earlier attempt", dead)
            self.frontier.start()
            step = 0
        else:
            # The training log and the dead branches live in output_dir: a
            # checkpoint of another directory would cut this log at another
            # run's record count, and remove this run's newer checkpoints.
            if path.resolve().parent != Path(targs.output_dir).resolve():
                raise CheckpointMismatchError(
                    f"{path} is not a checkpoint folder of output_dir {targs.output_dir}: "
                    "a resume continues the run of its own output_dir (copy the run's "
                    "folder to resume it elsewhere)"
                )
            step = self.frontier.resume(read_state(path))
            for dead in remove_dead_branches(targs.output_dir, step):
                logger.warning("removed %s: a dead branch above the resumed checkpoint", dead)
        targs.ignore_data_skip = True
        targs.max_steps = step + self.frontier.planned_updates()
        return super().train(  # type: ignore[misc]
            resume_from_checkpoint=None if path is None else str(path), **kwargs
        )


class FrontierGRPOTrainer(FrontierGRPOMixin, GRPOTrainer):  # type: ignore[misc]
    """``trl.GRPOTrainer`` with exactly-once prompt coverage across crashes:
    build it as a ``GRPOTrainer`` (same arguments, plus the mixin's
    ``frontier_*`` keywords) and call ``train(resume_from_checkpoint=True)``
    on every restart."""
