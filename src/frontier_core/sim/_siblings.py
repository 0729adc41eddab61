"""The sample-level modes' backend: the real ``Ledger``, and where the
samples of sealed siblings survive a crash.

Three modes, one class; they differ only in what a resume still holds:

* ``siblings`` (NeMo-RL #3923): the checkpoint saves the sealed siblings of
  outstanding groups (``checkpoint(save_sealed=True)``), the framework saves
  their samples with it; a resume reuses those. Siblings sealed after the
  checkpoint, and partial ones, are lost.
* ``journal``: the checkpoint is metadata only (``save_sealed=False``); every
  seal is journaled (``SimJournal``), and a resume passes the durable
  journal's ``JournalState.sealed()`` with ``attempt_floor`` its
  ``next_attempt``. Partial samples are lost.
* ``progress``: as ``journal``, and a running sample's progress is journaled
  every ``progress_every`` tokens; a resumed sibling whose group still needs
  generation continues from its last durable prefix.

Every coverage decision (which prompts to generate, which siblings to start
under which attempt, which held samples to reuse, when a group lands) is the
ledger's; the journal decides what is durable and replays it; this class
sequences the calls, as ``frontier_adapters.journal.RolloutJournal`` does for
a real run, and carries the checkpoint through its JSON wire form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._checkpoint import Checkpoint
from .._events import Lease, Status
from .._groups import LedgerConfig
from .._ledger import Ledger
from ._frontier import requeued_pending
from ._journal import SimJournal
from ._pipeline import Dispatched, Generation, Restored, Sample, Saved, SimulationError
from ._workload import Workload


class SiblingBackend:
    """Drives a ``Ledger`` for the pipeline (``_pipeline.Backend`` and
    ``_pipeline.SampleLevel``)."""

    def __init__(
        self,
        workload: Workload,
        name: str,
        *,
        save_sealed: bool = False,
        journal: SimJournal | None = None,
        continue_prefixes: bool = False,
    ) -> None:
        self.name = name
        self.config = LedgerConfig(
            on_failure=workload.on_failure,
            max_failures=workload.max_failures,
            stream_len=workload.stream_len,
            fingerprint=workload.fingerprint,
            samples=workload.num_generations,
        )
        self.ledger = Ledger.start(self.config)
        self.save_sealed = save_sealed
        self.journal = journal
        self.continue_prefixes = continue_prefixes
        self.steps = 0  # steps trained on the current lineage: the checkpoint's step
        self._marks = 0
        self._cut = 0  # the cut of the last checkpoint written
        self._at = 0.0  # the latest time the pipeline told

    # -- Backend ----------------------------------------------------------

    @property
    def position(self) -> int:
        return self.ledger.next_ordinal

    @property
    def exhausted(self) -> bool:
        return self.ledger.exhausted

    @property
    def done(self) -> bool:
        return self.ledger.drained

    def pull(self, count: int) -> list[int]:
        step = self.ledger.stamp(count)
        self.ledger = step.ledger
        return list(step.effect.kept)

    def dispatch(self, ordinals: Sequence[int]) -> None:
        self.dispatch_samples(ordinals)

    def buffer(self, ordinals: Sequence[int]) -> None:
        self.ledger = self.ledger.buffer(ordinals).ledger

    def train(self, ordinals: Sequence[int]) -> None:
        self.ledger = self.ledger.train(ordinals).ledger
        self.steps += 1

    def fail(self, ordinals: Sequence[int]) -> tuple[list[int], list[int]]:
        step = self.ledger.fail(ordinals)
        self.ledger = step.ledger
        return requeued_pending(self.ledger, step.effect.requeued), list(step.effect.dropped)

    def evict(self, ordinals: Sequence[int]) -> tuple[list[int], list[int]]:
        step = self.ledger.evict(ordinals)
        self.ledger = step.ledger
        return requeued_pending(self.ledger, step.effect.requeued), list(step.effect.dropped)

    def buffered(self) -> set[int]:
        return set(self.ledger.ordinals(Status.BUFFERED))

    def snapshot(self) -> str:
        return self.checkpoint(self._at)

    def restore(self, record: str, *, load_buffer: bool, evicted: Sequence[int]) -> None:
        """A resume without the framework's saved samples (prompt-level use:
        the pipeline calls ``resume``)."""
        step = int(json.loads(record)["step"])
        self.resume(Saved(record, step, (), 0), load_buffer=load_buffer, evicted=evicted)

    # -- SampleLevel ------------------------------------------------------

    def dispatch_samples(self, ordinals: Sequence[int]) -> Dispatched:
        step = self.ledger.dispatch(ordinals)
        self.ledger = step.ledger
        e = step.effect
        return Dispatched(e.leases, e.reused, e.landed)

    def started(self, generation: Generation) -> None:
        self._at = generation.start
        if self.journal is not None:
            self.journal.started(generation.lease.ordinal, generation)

    def seal(self, ordinal: int, sample: Sample, at: float) -> bool:
        self._at = at
        assert sample.attempt is not None
        lease = Lease(ordinal, sample.sibling, sample.attempt)
        step = self.ledger.seal([lease])
        if step.effect.sealed != (lease,):
            # The simulator only reports current attempts: a dead process's
            # events die with it.
            raise SimulationError(f"{self.name}: the ledger fenced {lease}")
        self.ledger = step.ledger
        if self.journal is not None:
            self.journal.sealed(ordinal, sample, at)  # journaled once the ledger accepted it
        return ordinal in step.effect.landed

    def ended(self, lease: Lease, at: float) -> None:
        self._at = at
        if self.journal is not None:
            self.journal.ended(lease.attempt, at)

    def checkpoint(self, at: float) -> str:
        """The record: the sample checkpoint's ``state_dict``, the journal
        mark it names (appended and synced first), the trainer's step."""
        self._at = at
        record = self.ledger.checkpoint(save_buffer=True, save_sealed=self.save_sealed)
        mark = None
        if self.journal is not None:
            self._marks += 1
            mark = {"position": self.journal.mark(self._marks, at), "id": self._marks}
        self._cut = record.cut
        return json.dumps({"ledger": record.state_dict(), "journal": mark, "step": self.steps})

    def committed(self, at: float) -> None:
        """The last checkpoint written is durable: compact the journal to its
        window, the ordinals at or above its cut."""
        self._at = at
        if self.journal is not None:
            self.journal.compact(range(self._cut, self.config.stream_len or self._cut), at)

    def crashed(self, at: float) -> None:
        self._at = at
        if self.journal is not None:
            self.journal.crash(at)

    def resume(self, saved: Saved, *, load_buffer: bool, evicted: Sequence[int]) -> Restored:
        """``Ledger.resume`` from the committed record, given the
        sealed siblings this mode still holds: the checkpoint's (their
        samples in ``saved.sealed``) or the durable journal's. Raises what
        the checkpoint, the journal and the ledger raise."""
        record = json.loads(saved.record)
        checkpoint = Checkpoint.from_state_dict(
            record["ledger"], fingerprint=self.config.fingerprint
        )
        state = None
        if self.journal is not None:
            mark = record["journal"]
            state = self.journal.recover(mark["position"], mark["id"], fork=saved.step)
            sealed, floor = state.sealed(), state.next_attempt
        else:
            sealed, floor = checkpoint.sealed, 0
        resumed = Ledger.resume(
            self.config,
            checkpoint,
            load_replay_buffer=load_buffer,
            sealed=sealed,
            evicted_on_restore=evicted,
            attempt_floor=floor,
        )
        self.ledger = resumed.ledger
        self.steps = int(record["step"])
        held: dict[tuple[int, int], Sample] = {}
        for lease in resumed.reused:
            key = (lease.ordinal, lease.sibling)
            if self.journal is not None and state is not None:
                sample: Sample | None = self.journal.sample(lease.ordinal, lease.sibling, state)
            else:
                sample = saved.sealed.get(key)
            if sample is None or sample.attempt != lease.attempt:
                raise SimulationError(f"{self.name}: no saved sample for the reused {lease}")
            held[key] = sample
        prefixes: dict[tuple[int, int], Sample] = {}
        if self.continue_prefixes and self.journal is not None and state is not None:
            for lease in state.progress():
                # A prefix is worth keeping where the ledger will generate
                # the group again: where it kept sealed siblings too.
                if self.ledger.status(lease.ordinal) is not Status.UNSTAMPED:
                    continue
                prefix = self.journal.sample(lease.ordinal, lease.sibling, state)
                if prefix.tokens > 0:
                    prefixes[(lease.ordinal, lease.sibling)] = prefix
        return Restored(held, prefixes)


def siblings_at_checkpoint(workload: Workload) -> SiblingBackend:
    """NeMo-RL #3923: sealed siblings saved with the checkpoint."""
    return SiblingBackend(workload, "siblings", save_sealed=True)


def journal_sealed(workload: Workload) -> SiblingBackend:
    """Every seal journaled; a resume reuses the durable ones."""
    journal = SimJournal(workload, progress=False, lineage=f"sim-{workload.seed}")
    return SiblingBackend(workload, "journal", journal=journal)


def journal_progress(workload: Workload) -> SiblingBackend:
    """Seals and token progress journaled; a resume also continues prefixes."""
    journal = SimJournal(workload, progress=True, lineage=f"sim-{workload.seed}")
    return SiblingBackend(workload, "progress", journal=journal, continue_prefixes=True)


def journal_turns(workload: Workload) -> SiblingBackend:
    """Multi-turn episodes journaled turn by turn (``Run.turn``): seals, and
    a running episode's progress at the end of each turn; a resume continues
    it at its last durable turn, the pending call asked again under its key."""
    journal = SimJournal(workload, progress=True, lineage=f"sim-{workload.seed}", at_turns=True)
    return SiblingBackend(workload, "turns", journal=journal, continue_prefixes=True)


def node_local(workload: Workload) -> SiblingBackend:
    """Journal plus progress on the node, under node losses: what the last
    checkpoint's mark covered survives, everything since is lost."""
    journal = SimJournal(workload, progress=True, lineage=f"sim-{workload.seed}", loss="node-local")
    return SiblingBackend(workload, "node-local", journal=journal, continue_prefixes=True)


def node_shipped(workload: Workload) -> SiblingBackend:
    """Journal plus progress shipped off the node (``Workload.ship_lag``),
    under node losses: only the unshipped tail is lost."""
    journal = SimJournal(
        workload, progress=True, lineage=f"sim-{workload.seed}", loss="node-shipped"
    )
    return SiblingBackend(workload, "node-shipped", journal=journal, continue_prefixes=True)
