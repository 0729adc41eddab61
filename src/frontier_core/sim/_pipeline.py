"""The discrete-event async GRPO pipeline, killed and resumed.

Theory of operation
-------------------
A source yields the stream in dataloader batches of ``batch_size``. The
generator keeps up to ``max_age`` *targets* in flight: a target is one
future training step's worth (``prompts_per_step``) of prompt groups. When
the targets lack ``k`` groups it takes them from the *pending remainder*
first and pulls a new batch only when that is empty; a ``k`` smaller than a
batch takes a slice and leaves the tail pending, in order (gap-fill). Taken
prompts are dispatched to a pool of ``workers``; a group lands in the replay
buffer when the longest of its ``num_generations`` rollouts finishes (the
lengths are heavy-tailed, so long prompts stay in flight for several
steps), or fails with probability ``failure_rate`` (the failure policy drops
or retries it). The trainer takes the first ``prompts_per_step`` groups to
land, evicting groups older than ``max_age`` steps first, trains for
``train_time`` and every ``checkpoint_every`` steps writes a checkpoint in
two parts; only the second part commits it, so a kill between them leaves
the previous checkpoint in force.

A kill drops every event of the dead process; after ``restart_time`` the run
resumes from the last committed checkpoint: the backend restores its
coverage state, the buffer saved with it is restored (or not), and the
training log is reopened with the checkpoint's record count so that its
reader discards what the dead branch trained.

Rules of the house
------------------
* The pipeline holds no coverage logic: which pulled prompts need
  generating, what a failure does and what a resume re-yields are the
  backend's answers (the real ``Ledger`` in frontier mode).
* Everything is simulated time; every random quantity comes from the
  workload's pure functions, so a run is a function of its workload and
  kill schedule.
"""

from __future__ import annotations

import bisect
import heapq
import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from .._trainlog import TrainLogWriter
from ._workload import Kill, KillKind, Workload


class SimulationError(RuntimeError):
    """The simulated run stalled or its state went inconsistent: a bug."""


class Backend(Protocol):
    """What the pipeline asks of a coverage mode."""

    name: str

    @property
    def position(self) -> int: ...
    @property
    def exhausted(self) -> bool: ...
    @property
    def done(self) -> bool: ...
    def pull(self, count: int) -> list[int]: ...
    def dispatch(self, ordinals: Sequence[int]) -> None: ...
    def buffer(self, ordinals: Sequence[int]) -> None: ...
    def train(self, ordinals: Sequence[int]) -> None: ...
    def fail(self, ordinals: Sequence[int]) -> tuple[list[int], list[int]]: ...
    def evict(self, ordinals: Sequence[int]) -> tuple[list[int], list[int]]: ...
    def buffered(self) -> set[int] | None: ...
    def snapshot(self) -> str: ...
    def restore(self, record: str, *, load_buffer: bool, evicted: Sequence[int]) -> None: ...


@attrs.frozen
class Group:
    """A landed prompt group: its ordinal, the weight version that generated
    it (the step count when its generation started) and the step of the
    target it was generated for."""

    ordinal: int
    version: int
    target: int


@attrs.define
class Target:
    """One future training step's worth of groups: the ordinals dispatched
    for it (landed or not) and those that landed. ``step`` may move down when
    an empty target at the end of the stream is closed."""

    step: int
    assigned: set[int] = attrs.Factory(set)
    landed: dict[int, Group] = attrs.Factory(dict)


@attrs.frozen
class Saved:
    """A checkpoint: the backend's record, the trainer's step, the replay
    buffer and the training log's record count, all taken at one instant."""

    record: str
    step: int
    buffer: tuple[Group, ...]
    log_records: int


class CheckpointStore:
    """Atomic two-part checkpoint writes.

    ``write_part`` stores the first part (think: model weights) beside the
    committed checkpoint; ``commit`` writes the second part and publishes
    both at once (think: the metadata file renamed into place). ``latest``
    only ever returns a committed checkpoint; a write cut short between its
    parts is counted in ``torn`` and never read.
    """

    def __init__(self, initial: Saved) -> None:
        self._committed = initial
        self._partial: Saved | None = None
        self.commits = 0
        self.torn = 0

    def write_part(self, saved: Saved) -> None:
        self._partial = saved

    def commit(self) -> None:
        if self._partial is None:
            raise SimulationError("commit without a first part")
        self._committed, self._partial = self._partial, None
        self.commits += 1

    def crash(self) -> None:
        if self._partial is not None:
            self.torn += 1
            self._partial = None

    def latest(self) -> Saved:
        return self._committed


@attrs.define
class Stats:
    """What a mode's run did, beyond its log (which the audit reads)."""

    kills: int = 0
    #: Kills that landed while rollouts were generating.
    kills_in_flight: int = 0
    resumes: int = 0
    steps_executed: int = 0
    generations: int = 0
    failures: int = 0
    evicted: int = 0
    evicted_on_restore: int = 0
    regenerated: int = 0
    reached: int = 0
    torn_checkpoints: int = 0
    checkpoints: int = 0
    first_checkpoint: float | None = None
    sim_time: float = 0.0
    kill_kinds: dict[str, int] = attrs.Factory(dict)


# Event kinds, ordered so that ties at one instant resolve deterministically.
_DONE, _TRAINED, _CKPT_PART, _CKPT_COMMIT, _RESTART = range(5)


class Pipeline:
    """One mode's run of a workload under a kill schedule.

    ``run()`` simulates to the end of the stream and returns the stats; the
    training log at ``log_path`` is the record of what was trained. Raises
    ``SimulationError`` if the run stalls with work left (a bug).
    """

    def __init__(
        self,
        workload: Workload,
        backend: Backend,
        kills: Sequence[Kill],
        log_path: str | os.PathLike[str],
        *,
        max_events: int = 10_000_000,
    ) -> None:
        self.w = workload
        self.backend = backend
        self.log_path = log_path
        self.max_events = max_events
        self.stats = Stats()
        self.now = 0.0
        self._seq = 0
        self._heap: list[tuple[float, int, int, object]] = []
        # Kills as (time, order, kind); follow-up kills are pushed here too.
        self._kills: list[tuple[float, int, KillKind | None]] = [
            (k.time, i, k.kind) for i, k in enumerate(kills)
        ]
        heapq.heapify(self._kills)
        self._kill_seq = len(self._kills)
        self._torn_armed = 0
        self._follow_up: list[float] = []  # delays of kills due after the next restart
        self.alive = True
        self.segment = 0
        self._first_segment: dict[int, int] = {}
        self._regenerated: set[int] = set()
        self._attempts: dict[int, int] = {}
        self.log = TrainLogWriter(log_path)
        self.store = CheckpointStore(Saved(backend.snapshot(), 0, (), 0))
        self._reset_process()

    # -- process state ----------------------------------------------------

    def _reset_process(self) -> None:
        self.step = 0
        self.pending: list[int] = []
        self.queue: deque[int] = deque()
        self.running = 0
        self.targets: list[Target] = []
        self.target_of: dict[int, Target] = {}
        self.trainer = "idle"
        self._training: list[int] = []

    def _push(self, at: float, kind: int, payload: object = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, payload))

    # -- the loop ---------------------------------------------------------

    def run(self) -> Stats:
        try:
            self._pump()
            events = 0
            while self._heap:
                events += 1
                if events > self.max_events:
                    raise SimulationError(f"no end after {self.max_events} events")
                at = self._heap[0][0]
                if self._kills and self._kills[0][0] <= at:
                    kill_at, _, kind = heapq.heappop(self._kills)
                    self.now = max(self.now, kill_at)
                    self._kill(kind)
                    continue
                at, kind_, _, payload = heapq.heappop(self._heap)
                self.now = at
                self._handle(kind_, payload)
                if self.alive:
                    self._pump()
            if not self.backend.done or self.target_of or self.pending or self.running:
                raise SimulationError(
                    f"{self.backend.name}: stalled at t={self.now:.2f} with the source at "
                    f"{self.backend.position}, {len(self.pending)} pending, "
                    f"{len(self.target_of)} in targets, {self.running} running"
                )
        finally:
            self.log.close()
        self.stats.sim_time = self.now
        self.stats.regenerated = len(self._regenerated)
        self.stats.torn_checkpoints = self.store.torn
        self.stats.checkpoints = self.store.commits
        return self.stats

    def _handle(self, kind: int, payload: object) -> None:
        if kind == _DONE:
            assert isinstance(payload, tuple)
            self._landed(*payload)
        elif kind == _TRAINED:
            self._trained()
        elif kind == _CKPT_PART:
            if self._torn_armed:
                # The armed kill fires between the two parts of this write.
                self._torn_armed -= 1
                self._kill(KillKind.TORN_CHECKPOINT, armed=True)
            else:
                self._push(self.now + self.w.checkpoint_time / 2, _CKPT_COMMIT)
        elif kind == _CKPT_COMMIT:
            self.store.commit()
            if self.stats.first_checkpoint is None:
                self.stats.first_checkpoint = self.now
            self.trainer = "idle"
        else:
            self._restart()

    def _pump(self) -> None:
        self._fill()
        self._start_workers()
        self._maybe_train()
        self.stats.reached = max(self.stats.reached, self.backend.position)

    def _more(self) -> bool:
        """Whether the pending remainder or the source can still give."""
        return bool(self.pending) or not self.backend.exhausted

    def _fill(self) -> None:
        # Open targets up to ``targets`` steps ahead of the trainer, then fill
        # them in order: from the pending remainder first, a new batch only
        # when it is empty; a slice of it when a target needs fewer (gap-fill).
        p = self.w.prompts_per_step
        while len(self.targets) < self.w.in_flight_targets and self._more():
            last = self.targets[-1].step if self.targets else self.step - 1
            self.targets.append(Target(last + 1))
        taken: list[int] = []
        for target in self.targets:
            while len(target.assigned) < p:
                if not self.pending:
                    if self.backend.exhausted:
                        break
                    self.pending = self.backend.pull(self.w.batch_size)
                    continue
                need = p - len(target.assigned)
                chunk = self.pending[:need]
                del self.pending[:need]
                target.assigned.update(chunk)
                for o in chunk:
                    self.target_of[o] = target
                taken += chunk
        if taken:
            self.backend.dispatch(taken)
            self.queue.extend(taken)
            for o in taken:
                first = self._first_segment.setdefault(o, self.segment)
                if first < self.segment:
                    self._regenerated.add(o)

    def _start_workers(self) -> None:
        while self.queue and self.running < self.w.workers:
            o = self.queue.popleft()
            attempt = self._attempts.get(o, 0)
            self._attempts[o] = attempt + 1
            self.running += 1
            self.stats.generations += 1
            self._push(self.now + self.w.group_time(o, attempt), _DONE, (o, attempt, self.step))

    def _landed(self, ordinal: int, attempt: int, version: int) -> None:
        self.running -= 1
        target = self.target_of[ordinal]
        if self.w.fails(ordinal, attempt):
            self.stats.failures += 1
            self._release([ordinal])
            self._resolve_failures(*self.backend.fail([ordinal]))
        else:
            self.backend.buffer([ordinal])
            target.landed[ordinal] = Group(ordinal, version, target.step)

    def _release(self, ordinals: Sequence[int]) -> None:
        """Take failed or evicted ordinals out of their targets, which the
        next fill refills (from the requeued ordinals first, if any)."""
        for o in ordinals:
            target = self.target_of.pop(o)
            target.assigned.discard(o)
            target.landed.pop(o, None)

    def buffered_groups(self) -> list[Group]:
        """The replay buffer: every landed, untrained group, by target."""
        return [
            attrs.evolve(g, target=t.step)
            for t in self.targets
            for g in sorted(t.landed.values(), key=lambda g: g.ordinal)
        ]

    def _resolve_failures(self, requeued: list[int], dropped: list[int]) -> None:
        for o in requeued:
            bisect.insort(self.pending, o)
        if dropped:
            self.log.dropped(dropped)

    def _maybe_train(self) -> None:
        if self.trainer != "idle" or not self.targets:
            return
        head = self.targets[0]
        stale = [g for g in head.landed.values() if head.step - g.version > self.w.max_age]
        if stale:
            # Generated under weights too old for this step: evicted, and the
            # failure policy decides (the target is refilled meanwhile).
            self.stats.evicted += len(stale)
            ordinals = sorted(g.ordinal for g in stale)
            self._release(ordinals)
            self._resolve_failures(*self.backend.evict(ordinals))
            self._fill()
            self._start_workers()
        full = len(head.assigned) == self.w.prompts_per_step
        if len(head.landed) != len(head.assigned) or (not full and self._more()):
            return  # still generating, or still to be filled
        if not head.assigned:
            # An empty target at the end of the stream: close it.
            self.targets.pop(0)
            for t in self.targets:
                t.step -= 1
            return self._maybe_train()
        self.targets.pop(0)
        self._training = sorted(head.assigned)
        for o in self._training:
            del self.target_of[o]
        self.trainer = "train"
        self._push(self.now + self.w.train_time, _TRAINED)

    def _trained(self) -> None:
        ordinals = self._training
        self.backend.train(ordinals)
        self.log.step(self.step, ordinals)
        self.step += 1
        self.stats.steps_executed += 1
        if self.step % self.w.checkpoint_every:
            self.trainer = "idle"
            return
        buffer = self.buffered_groups()
        buffered = self.backend.buffered()
        if buffered is not None and buffered != {g.ordinal for g in buffer}:
            raise SimulationError(
                f"the ledger's buffered set differs from the replay buffer at step {self.step}"
            )
        self.store.write_part(
            Saved(self.backend.snapshot(), self.step, tuple(buffer), self.log.records)
        )
        self.trainer = "checkpoint"
        self._push(self.now + self.w.checkpoint_time / 2, _CKPT_PART)

    # -- kills ------------------------------------------------------------

    def _kill(self, kind: KillKind | None, *, armed: bool = False) -> None:
        if kind is KillKind.TORN_CHECKPOINT and not armed:
            self._torn_armed += 1  # fires at the next checkpoint's midpoint
            return
        if not self.alive:
            return  # already down: this kill has nothing to kill
        label = kind.value if kind is not None else "follow-up"
        self.stats.kill_kinds[label] = self.stats.kill_kinds.get(label, 0) + 1
        self.stats.kills += 1
        if self.running:
            self.stats.kills_in_flight += 1
        self.alive = False
        self.store.crash()
        self.log.close()
        self._heap.clear()
        self._reset_process()
        if kind is KillKind.AFTER_RESUME:
            self._follow_up.append(0.01 * self.w.train_time)
        elif kind is KillKind.DOUBLE:
            rng = self.w.rng("double", self.stats.kills)
            self._follow_up.append(rng.uniform(0.1, 0.9) * self.w.train_time)
        self._push(self.now + self.w.restart_time, _RESTART)

    def _restart(self) -> None:
        saved = self.store.latest()
        self.alive = True
        self.segment += 1
        self.stats.resumes += 1
        evicted: list[Group] = []
        restored: list[Group] = []
        if self.w.load_replay_buffer:
            for g in saved.buffer:
                # The restore's age filter: too old for the resumed step.
                (evicted if saved.step - g.version > self.w.max_age else restored).append(g)
        self.stats.evicted_on_restore += len(evicted)
        self.backend.restore(
            saved.record,
            load_buffer=self.w.load_replay_buffer,
            evicted=[g.ordinal for g in evicted],
        )
        self.step = saved.step
        # Rebuild the targets the restored groups were generated for; the
        # next fill completes them.
        for g in restored:
            while not self.targets or self.targets[-1].step < g.target:
                last = self.targets[-1].step if self.targets else self.step - 1
                self.targets.append(Target(last + 1))
            target = self.targets[g.target - self.step]
            target.assigned.add(g.ordinal)
            target.landed[g.ordinal] = g
            self.target_of[g.ordinal] = target
        buffered = self.backend.buffered()
        if buffered is not None and buffered != {g.ordinal for g in restored}:
            raise SimulationError("the resumed ledger's buffer differs from the restored one")
        self.log = TrainLogWriter(self.log_path, resume_records=saved.log_records)
        for delay in self._follow_up:
            self._kill_seq += 1
            heapq.heappush(self._kills, (self.now + delay, self._kill_seq, None))
        self._follow_up.clear()


def simulate(
    workload: Workload,
    backend_factory: Callable[[Workload], Backend],
    kills: Sequence[Kill],
    log_path: str | os.PathLike[str],
) -> Stats:
    """Run one mode of ``workload`` under ``kills``, logging to ``log_path``
    (appended to: pass a fresh path)."""
    return Pipeline(workload, backend_factory(workload), kills, log_path).run()
