"""``FrontierGRPOTrainer``: TRL's ``GRPOTrainer`` with exactly-once prompts,
standing on the one run object, ``frontier_adapters.run.Run``.

What it changes, and through which extension point (TRL 1.16, transformers
5.19 to 5.24):

* ``_get_train_sampler`` (the method TRL itself overrides to install
  ``RepeatSampler``; documented as the place to change sampling):
  ``FrontierSampler``, the same layout drawn from the run from the cut.
* ``get_train_dataloader`` (public): the dataset is viewed through
  ``OrdinalRows`` while TRL builds its loader, so each row carries
  ``ORDINAL_COLUMN``; everything else (batch size, workers, accelerate) is
  TRL's own code.
* ``training_step`` (public): hands each micro-step's ordinals to the
  blocks before TRL generates or trains on them.
* ``train`` (public): opens the ``Run`` (which recovers: its newest
  coverage checkpoint, its journal), resumes the Trainer from the folder
  that checkpoint pairs with (``_checkpoints``), sets ``ignore_data_skip``
  (no skip-and-replay) and ``max_steps`` (the steps left to drain the
  stream, which is what lets a resume change the batch size), and closes
  the run when training ends.
* ``FrontierCallback`` (a ``TrainerCallback``): marks blocks trained in
  ``on_step_end``, defers a save that falls inside a generation block to
  the block's end, writes the run's coverage checkpoint in ``on_save``
  after the Trainer wrote (and this callback synced) its own files, and,
  after a termination notice, asks for a save at the next block boundary,
  stops training and drains the run there.

One underscore-named method is overridden, ``_get_train_sampler``: it is
the hook TRL itself overrides to install ``RepeatSampler`` (transformers'
``_get_dataloader`` calls it as ``sampler_fn``), and overriding it is the
smallest change that replaces the sampler while keeping TRL's loader
construction; nothing else private is overridden or read. The
trainer refuses what it cannot make exact: several processes, an iterable
dataset, ``remove_unused_columns=True`` (it would strip the ordinal
column), ``max_steps`` set by hand (the stream defines the run) and
``save_total_limit=1``, or below 3 with a best model (the Trainer deletes
the previous checkpoint before the coverage checkpoint of the new one
exists).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

from transformers import TrainerCallback  # type: ignore[import-not-found]
from trl import GRPOTrainer  # type: ignore[import-not-found]

from frontier_core import (
    CheckpointError,
    CheckpointMismatchError,
    FailurePolicy,
    LedgerConfig,
    TrainLogWriter,
)

from ..checkpoints import latest_checkpoint as newest_checkpoint
from ..run import Drained, Run
from ..run._run import _under
from ._blocks import GenerationBlocks, ordinals_of, stream_source
from ._checkpoints import (
    PART,
    checkpoint_folders,
    fsync_tree,
    log_records,
    paired_folder,
    part,
    remove_dead_branches,
)
from ._sampler import FrontierSampler, OrdinalRows
from ._stream import Layout, StreamOrder, dataset_fingerprint

logger = logging.getLogger(__name__)

#: The training log's default name inside ``output_dir``.
LOG_NAME = "frontier_train_log.jsonl"
#: The run's default directory inside ``output_dir`` (its journal, and its
#: checkpoints unless ``frontier_remote`` names a store).
RUN_DIR = "frontier"


class FrontierCallback(TrainerCallback):  # type: ignore[misc]
    """Marks prompts trained at the optimizer step, keeps saves between
    generation blocks, writes the run's coverage checkpoint paired with
    each Trainer checkpoint, and drains the run after a termination
    notice. Added by ``FrontierGRPOTrainer``; not used on its own."""

    def __init__(self, *, fsync: bool = True) -> None:
        self.fsync = fsync
        #: The blocks of the ``train`` call running (set by the trainer).
        self.blocks: GenerationBlocks | None = None
        #: What the drain after a termination notice did (``None``: none yet).
        self.drained: Drained | None = None
        self._deferred = False

    def _blocks(self) -> GenerationBlocks:
        if self.blocks is None:
            raise RuntimeError("FrontierCallback is driven by FrontierGRPOTrainer.train only")
        return self.blocks

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        blocks = self._blocks()
        blocks.step_end(state.global_step - 1)
        # The Trainer's epoch counts passes over its loader, which is one
        # pass over the whole stream here: report the stream's epoch instead.
        state.epoch = blocks.run.ledger.cut / blocks.order.dataset_len
        if blocks.run.preempted:
            self._stop(control)
        elif control.should_save and blocks.mid_block:
            control.should_save = False
            self._deferred = True
        elif self._deferred and not blocks.mid_block:
            control.should_save = True
            self._deferred = False
        if control.should_save:
            # The Trainer writes (and rotates) output_dir/checkpoint-N
            # before on_save's fenced run.checkpoint: a life a newer one
            # fenced stops here, before it touches output_dir.
            blocks.run.check_epoch()
        return control

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # After a notice the sampler deals nothing more, so the loader can
        # run dry before another step ends: the save happens here then.
        if self._blocks().run.preempted:
            self._stop(control)
        if control.should_save:
            self._blocks().run.check_epoch()  # as in on_step_end
        return control

    def _stop(self, control: Any) -> None:
        """After a termination notice: at a block boundary, save (the drain
        happens in ``on_save``) and stop; inside a block, go on to its end."""
        if self.drained is not None:
            return
        if self._blocks().mid_block:
            control.should_save = False
        else:
            control.should_save = True
            control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not args.should_save:
            return control
        blocks = self._blocks()
        if blocks.mid_block:
            raise CheckpointError(
                "a checkpoint inside a generation block cannot be exact; the trainer defers it"
            )
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.fsync:
            fsync_tree(folder)
        if blocks.log is not None:
            blocks.log.sync()
        parts = {PART: part(0 if blocks.log is None else blocks.log.records)}
        if blocks.run.preempted:
            self.drained = blocks.run.drain(step=state.global_step, json_parts=parts)
            logger.warning("drained after a termination notice: %s", self.drained)
        else:
            self.write(state.global_step, parts)
        return control

    def write(self, step: int, parts: dict[str, Any]) -> Path:
        """Write the run's coverage checkpoint of ``step`` (an override
        point for tests that kill a process inside this write)."""
        return self._blocks().run.checkpoint(step, json_parts=parts)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        blocks = self._blocks()
        if blocks.log is not None:
            blocks.log.sync()
        return control


class FrontierGRPOMixin:
    """The overrides, for a class that already subclasses ``GRPOTrainer``:
    ``class MyTrainer(FrontierGRPOMixin, MyGRPOTrainer)``. Keyword
    arguments: ``frontier_dir`` (the run's directory: its journal, and its
    checkpoints without ``frontier_remote``; default
    ``output_dir/frontier``), ``frontier_remote`` (a store URL,
    ``s3://bucket/prefix``, ``file://...``, or a shared path: where the
    run's coverage checkpoints and its shipped journal live, to survive the
    node: ``Run.open``'s ``remote``), ``frontier_grace`` (seconds: take a
    SIGTERM as a termination notice of that many seconds and drain, see
    ``train``; default ``None``, SIGTERM left alone), ``frontier_log`` (the
    training log for ``frontier audit``; default
    ``output_dir/frontier_train_log.jsonl``, ``False`` for none),
    ``frontier_fingerprint`` (default: a hash of every row, the seed and the
    shuffle flag) and ``frontier_fsync`` (sync the Trainer's files before
    the coverage checkpoint vouches for them; default on)."""

    #: The run of the last ``train`` call (``None`` before one): closed when
    #: ``train`` returns; ``preempted`` and ``metrics()`` stay readable.
    frontier: Run | None
    # What GRPOTrainer provides (declared for the type checker only).
    args: Any
    train_dataset: Any
    accelerator: Any
    num_generations: Any
    num_iterations: Any

    def __init__(
        self,
        *args: Any,
        frontier_dir: str | os.PathLike[str] | None = None,
        frontier_remote: str | os.PathLike[str] | None = None,
        frontier_grace: float | None = None,
        frontier_log: str | os.PathLike[str] | bool | None = None,
        frontier_fingerprint: str | None = None,
        frontier_fsync: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        targs: Any = self.args
        dataset: Any = self.train_dataset
        self._frontier_check(targs, dataset)
        if frontier_grace is not None and (
            not isinstance(frontier_grace, (int, float)) or not frontier_grace >= 0
        ):
            raise ValueError(f"frontier_grace must be seconds >= 0, got {frontier_grace!r:.40}")
        self._frontier_epochs = int(targs.num_train_epochs)
        self._frontier_order = StreamOrder(
            len(dataset), seed=int(targs.seed), shuffle=bool(targs.shuffle_dataset)
        )
        self._frontier_fingerprint = frontier_fingerprint or dataset_fingerprint(
            dataset, seed=self._frontier_order.seed, shuffle=self._frontier_order.shuffle
        )
        self._frontier_layout_now = self._frontier_layout()
        output_dir = Path(targs.output_dir)
        self._frontier_root = output_dir / RUN_DIR if frontier_dir is None else Path(frontier_dir)
        self._frontier_remote = frontier_remote
        self._frontier_grace = frontier_grace
        if frontier_log is None or frontier_log is True:
            self._frontier_log: Path | None = output_dir / LOG_NAME
        elif frontier_log is False:
            self._frontier_log = None
        else:
            self._frontier_log = Path(frontier_log)
        self.frontier = None
        self._frontier_blocks: GenerationBlocks | None = None
        self.frontier_callback = FrontierCallback(fsync=frontier_fsync)
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
        limit = targs.save_total_limit
        best = bool(targs.load_best_model_at_end or targs.metric_for_best_model)
        if limit is not None and (limit == 1 or (best and limit < 3)):
            # The Trainer rotates old folders inside its save, before the
            # coverage checkpoint of the new folder exists; it always keeps
            # the newest and, with a best model, the best: so the folder the
            # run's newest coverage checkpoint pairs with must be a third.
            raise ValueError(
                f"save_total_limit={limit} lets the Trainer delete the last complete checkpoint "
                "before the new one is complete: use "
                + (
                    "3 or more with a best model (load_best_model_at_end or metric_for_best_model)"
                    if best and limit != 1
                    else "2 or more"
                )
                + " (or None)"
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

    def _frontier_checkpoints(self) -> str | Path:
        """Where the run keeps its coverage checkpoints (``Run.open``'s
        layout: ``remote/checkpoints``, else ``root/checkpoints``)."""
        remote = self._frontier_remote
        if remote is None:
            return self._frontier_root / "checkpoints"
        return _under(remote, "checkpoints")

    # -- the extension points ---------------------------------------------

    def _get_train_sampler(self, dataset: Any = None) -> FrontierSampler:
        if self._frontier_blocks is None:
            raise RuntimeError("FrontierGRPOTrainer's sampler exists only inside train()")
        return FrontierSampler(self._frontier_blocks)

    def get_train_dataloader(self) -> Any:
        base = self.train_dataset
        self.train_dataset = OrdinalRows(base, self._frontier_order)
        try:
            return super().get_train_dataloader()  # type: ignore[misc]
        finally:
            self.train_dataset = base

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        if isinstance(inputs, list):
            blocks = self._frontier_blocks
            assert blocks is not None  # inside train()
            blocks.consume(ordinals_of(inputs))
        return super().training_step(model, inputs, num_items_in_batch)  # type: ignore[misc]

    def _frontier_metrics(self, metrics: dict[str, float]) -> None:
        """``Run.open``'s ``logger``: the run's counters to ``Trainer.log``
        (the first checkpoint, before training, goes to the run's Python
        logger only: the Trainer has no step to file it under yet)."""
        trainer: Any = self  # a Trainer: the mixin sits before it in the MRO
        if trainer.state.global_step > 0:
            trainer.log(dict(metrics))

    def train(
        self, resume_from_checkpoint: str | os.PathLike[str] | bool | None = None, **kwargs: Any
    ) -> Any:
        """``Trainer.train`` on the run: open it (``Run.open`` recovers its
        newest coverage checkpoint) and resume the Trainer from the folder
        that checkpoint pairs with, the stream seeked to the cut; close it
        when training ends.

        ``resume_from_checkpoint=True`` resumes the run wherever it is: from
        ``checkpoint-N`` when its newest coverage checkpoint is of step
        ``N``, from the start when the run has none past its first (so one
        call serves every life; the Trainer would raise ``ValueError``
        there). A path must be that same folder. ``None`` or ``False``
        starts a run, and raises ``ValueError`` when the run has a coverage
        checkpoint past its first (resume it, or remove the run and
        ``output_dir``'s folders to start afresh). Checkpoint folders above
        the one resumed from (torn saves, saves whose coverage checkpoint
        was never published) are removed. Raises, before anything is
        written: ``ValueError`` when ``output_dir`` holds checkpoint folders
        but the run has no coverage checkpoint at all (another run's
        folders, or a run whose checkpoints were lost);
        ``CheckpointMismatchError`` for a path outside ``output_dir`` or
        other than the paired folder. Raises ``CheckpointFileError`` for a
        torn pair (the paired folder or its ``trainer_state.json`` missing)
        and ``CheckpointMismatchError`` for a mismatched one (another
        ``global_step``), and what ``Run.open`` raises.

        With ``frontier_grace``, a SIGTERM during training is a termination
        notice (``Run.watch``): the run deals no more blocks, the Trainer
        saves at the next block boundary and stops, and the run drains there
        (``Run.drain``: its coverage checkpoint paired with that save if the
        notice leaves the time). ``train`` then returns;
        ``trainer.frontier.preempted`` says that it was cut short and
        ``trainer.frontier_callback.drained`` what the drain did."""
        targs: Any = self.args
        output_dir = Path(targs.output_dir)
        path: Path | None = None
        if resume_from_checkpoint is not None and not isinstance(resume_from_checkpoint, bool):
            path = Path(resume_from_checkpoint)
            # The training log and the dead branches live in output_dir: a
            # checkpoint of another directory would cut this log at another
            # run's record count, and remove this run's newer checkpoints.
            if path.resolve().parent != output_dir.resolve():
                raise CheckpointMismatchError(
                    f"{path} is not a checkpoint folder of output_dir {output_dir}: a resume "
                    "continues the run of its own output_dir (copy the run's folder to resume "
                    "it elsewhere)"
                )
        folders = checkpoint_folders(output_dir)
        checkpoints = self._frontier_checkpoints()
        if folders and newest_checkpoint(checkpoints) is None:
            raise ValueError(
                f"{output_dir} holds {folders[-1][1].name} but the run has no coverage checkpoint "
                f"at {checkpoints}: another run's folders, or this run's checkpoints were lost; "
                "give the run's frontier_dir or frontier_remote, or remove the folders to start "
                "afresh"
            )
        order = self._frontier_order
        layout = self._frontier_layout_now
        config = LedgerConfig(
            stream_len=self._frontier_epochs * order.dataset_len,
            fingerprint=self._frontier_fingerprint,
            on_failure=FailurePolicy.DROP,
        )
        run = Run.open(
            self._frontier_root,
            stream_source(order, epochs=self._frontier_epochs, batch_size=layout.prompts),
            config,
            remote=self._frontier_remote,
            # The run's counters join TRL's logs (``frontier/...``) at every
            # coverage checkpoint, as any other metric the Trainer logs.
            logger=self._frontier_metrics,
        )
        log: TrainLogWriter | None = None
        try:
            step = run.step
            if step > 0 and not resume_from_checkpoint:
                raise ValueError(
                    f"{output_dir} holds a complete checkpoint of an earlier run "
                    f"(checkpoint-{step}, paired with the run's coverage checkpoint): resume "
                    "from it, or remove the run and the folders to start afresh (a crash of "
                    "the new run would otherwise resume into the old one)"
                )
            if path is not None and path.name != f"checkpoint-{step}":
                raise CheckpointMismatchError(
                    f"{path} is not the folder the run's newest coverage checkpoint pairs with "
                    f"(checkpoint-{step}): resume with resume_from_checkpoint=True"
                )
            folder = paired_folder(output_dir, step) if step > 0 else None
            records = log_records(run.resumed)
            for dead in remove_dead_branches(output_dir, step):
                logger.warning("removed %s: a dead branch above the resumed checkpoint", dead)
            if self._frontier_log is not None:
                log = TrainLogWriter(self._frontier_log, resume_records=records)
            blocks = GenerationBlocks(run, order, layout, log)
            self.frontier, self._frontier_blocks = run, blocks
            self.frontier_callback.blocks, self.frontier_callback.drained = blocks, None
            if self._frontier_grace is not None:
                run.watch(signal.SIGTERM, seconds=self._frontier_grace)
            targs.ignore_data_skip = True
            targs.max_steps = step + blocks.planned_updates()
            return super().train(  # type: ignore[misc]
                resume_from_checkpoint=None if folder is None else str(folder), **kwargs
            )
        finally:
            run.close()
            if log is not None:
                log.close()


class FrontierGRPOTrainer(FrontierGRPOMixin, GRPOTrainer):  # type: ignore[misc]
    """``trl.GRPOTrainer`` with exactly-once prompt coverage across crashes:
    build it as a ``GRPOTrainer`` (same arguments, plus the mixin's
    ``frontier_*`` keywords) and call ``train(resume_from_checkpoint=True)``
    in every life."""
