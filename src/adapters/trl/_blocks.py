"""Generation blocks over the run: stamping them, checking each micro-step
against them, marking them trained.

Rules of the house: every coverage decision is the ledger's, and the ledger
is the run's (``frontier_adapters.run.Run``, the one run object: it owns the
ledger, the journal of attempt reservations and the checkpoints).
``GenerationBlocks`` takes a block of ``layout.prompts`` groups from the run
at a time (``next_block``), checks every micro-step's batch against the
blocks it handed out (``consume``: the ordinals travel with the rows, in
``ORDINAL_COLUMN``), reports a block landed at its first copy (TRL generates
it there; nothing is journaled, so a crash generates it again) and trained
at the optimizer step that ends its last copy (``step_end``). A checkpoint
is only exact between blocks: TRL regenerates a block after a restart, so
the trainer defers a save that falls inside one (``mid_block``).

The stream the run takes its groups from is the torch binding's seekable
one (``SeekableSource`` over a ``SeekableSampler`` of the dataset's
indices): ordinal ``o`` is row ``order.index(o)``, its position at the cut
is the cut and the stream's identity (seed, length, shuffle), so a resume
seeks, and refuses another stream (``CheckpointMismatchError``).
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from frontier_core import Status, TrainLogWriter

from .._errors import StreamMisalignedError
from ..run import Run
from ..torch import SeekableSource, make_seekable_loader
from ._stream import Layout, StreamOrder

#: The column every training row carries: its stream ordinal.
ORDINAL_COLUMN: Final = "frontier_ordinal"


def stream_source(order: StreamOrder, *, epochs: int, batch_size: int) -> SeekableSource:
    """The run's prompt source for ``epochs`` passes in ``order``: each
    ordinal's row is its dataset index (the trainer's loader reads the
    dataset itself, through ``OrdinalRows``)."""
    loader = make_seekable_loader(
        range(order.dataset_len),
        batch_size=batch_size,
        seed=order.seed,
        shuffle=order.shuffle,
        epochs=epochs,
        stateful=False,
    )
    return SeekableSource(loader)


class GenerationBlocks:
    """One life's blocks over an open ``Run`` (one process, one thread):
    the sampler calls ``next_block``, the trainer ``consume`` for every
    micro-step's rows and ``step_end`` after every optimizer step. Each
    trained step goes to the training ``log`` (``None``: none) too."""

    def __init__(
        self, run: Run, order: StreamOrder, layout: Layout, log: TrainLogWriter | None
    ) -> None:
        self.run = run
        self.order = order
        self.layout = layout
        self.log = log
        ledger = run.ledger
        stream_len = ledger.config.stream_len
        assert stream_len is not None  # the trainer's stream is finite
        #: Ordinals this life will yield: the stream above the cut that is
        #: not covered already.
        self.remaining = (
            stream_len - ledger.cut - ledger.count(Status.TRAINED) - ledger.count(Status.DROPPED)
        )
        self._handed: deque[tuple[int, ...]] = deque()  # yielded, not yet consumed
        self._current: tuple[int, ...] | None = None
        self._copies = 0
        self._completed: list[int] = []

    def planned_updates(self) -> int:
        """Optimizer steps this life will take to drain the stream."""
        return self.layout.updates(self.remaining // self.layout.prompts)

    def planned_rows(self) -> int:
        """Dataloader rows this life's sampler yields (its length)."""
        blocks = self.remaining // self.layout.prompts
        return blocks * self.layout.repeat * self.layout.rows_per_copy

    # -- the sampler's side -----------------------------------------------

    def next_block(self) -> tuple[int, ...] | None:
        """Take the next block of ``layout.prompts`` groups from the run and
        hand it out, or ``None``: at the end of the stream, where a partial
        block (``RepeatSampler`` drops it too) is dropped on record, and
        after a termination notice (the run deals nothing more; what was
        not dealt stays pending)."""
        if self.run.preempted:
            return None
        block = tuple(t.ordinal for t in self.run.take(self.layout.prompts))
        if len(block) < self.layout.prompts:
            if block:
                dropped = self.run.failed(block).dropped  # the run's policy is DROP
                if self.log is not None and dropped:
                    self.log.dropped(dropped)
            return None
        self._handed.append(block)
        return block

    # -- the trainer's side -----------------------------------------------

    def consume(self, ordinals: Sequence[int]) -> None:
        """One micro-step's rows (their ``ORDINAL_COLUMN``, in order): one
        copy of a block, each ordinal ``num_generations`` times. Raises
        ``StreamMisalignedError`` for rows that are not the next copy of
        the blocks handed out (training on would skip or duplicate)."""
        g = self.layout.num_generations
        block = tuple(ordinals[::g])
        if len(ordinals) != len(block) * g or any(
            ordinals[i] != block[i // g] for i in range(len(ordinals))
        ):
            raise StreamMisalignedError(
                f"a micro-step's rows are not grouped by {g} generations: {list(ordinals)[:24]}"
            )
        if self._current is not None and self._copies < self.layout.repeat:
            if block != self._current:
                raise StreamMisalignedError(
                    f"block {self._current[:8]}... has {self._copies} of {self.layout.repeat} "
                    f"copies but the next micro-step holds {block[:8]}..."
                )
            self._copies += 1
        else:
            if not self._handed or self._handed[0] != block:
                expected = self._handed[0][:8] if self._handed else "nothing"
                raise StreamMisalignedError(
                    f"the micro-step holds block {block[:8]}..., the sampler handed out "
                    f"{expected} next"
                )
            self._handed.popleft()
            # Generation happens in this micro-step: the group lands now.
            self.run.landed(block)
            self._current, self._copies = block, 1
        if self._copies == self.layout.repeat:
            self._completed.extend(self._current)

    @property
    def mid_block(self) -> bool:
        """Whether a block has been consumed in part: a checkpoint now
        could not be exact (TRL regenerates the block on resume)."""
        return self._current is not None and 0 < self._copies < self.layout.repeat

    def step_end(self, step: int) -> tuple[int, ...]:
        """Optimizer step ``step`` (0-based) finished: the blocks whose
        last copy it consumed are trained. Logs one record per step (empty
        when the step ended no block). Returns the ordinals trained."""
        done = tuple(self._completed)
        self._completed = []
        if done:
            self.run.trained(done)
        if self.log is not None:
            self.log.step(step, done)
        return done


def ordinals_of(rows: Iterable[Mapping[str, Any]]) -> list[int]:
    """``ORDINAL_COLUMN`` of each row; raises ``StreamMisalignedError`` for
    a row without it (the dataset was not wrapped by the trainer) or with
    something else than an integer in it (a float or a string is not
    rounded or parsed into an ordinal)."""
    out = []
    for row in rows:
        try:
            value = row[ORDINAL_COLUMN]
            if isinstance(value, bool):
                raise TypeError("a bool is not an ordinal")
            out.append(operator.index(value))
        except (KeyError, TypeError, IndexError):
            raise StreamMisalignedError(
                f"a training row has no integer {ORDINAL_COLUMN!r}: the batch did not come "
                "from FrontierGRPOTrainer's dataloader"
            ) from None
    return out
