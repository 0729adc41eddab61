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

Samples and tokens
------------------
A group's ``num_generations`` siblings each have their own length (the
workload's ``sibling_tokens``) and generate concurrently, ``tokens_per_time``
tokens per unit of time each, in the worker that holds the group. A
prompt-level backend sees the group land when its longest sibling finishes.
A sample-level backend (``SampleLevel``: the real ``Ledger``) is told
of each sibling as it seals; its dispatch says which siblings to generate
(under which attempts) and which come back sealed from what a resume held,
and its resume says which sealed samples and which durable prefixes the
framework still has; a sibling with a prefix continues from it and generates
only the rest. The pipeline holds the samples themselves (``Sample``: the
framework's data: the buffer, the sealed siblings of outstanding groups, what
a checkpoint saved), never a decision about them. A tolerated failure fails
a group's generation as a whole, when its last sibling finishes, in every
mode; the scheduler reacts to group events only (a sibling that seals
before the rest of its group changes nothing it looks at). So under one
workload every mode runs the same run until the first kill: the same
lengths, failures, landings and steps at the same times.

Every token generated is counted. At a kill the pipeline takes stock of the
samples the run holds (trained since the last checkpoint, buffered, sealed,
partly generated); after the resume, of those it still holds; what is gone
was *discarded by the kill*: generated, and to be generated again. Failures
and stale evictions discard tokens too, counted apart. At the end, tokens
generated = tokens trained + discarded by kills + discarded by failures
- recovered (a sample a resume brought back after a failure had discarded
it), or the run raises ``SimulationError``.

Rules of the house
------------------
* The pipeline holds no coverage logic: which pulled prompts need
  generating, what a failure does, what a resume re-yields, which siblings
  are generated and which samples are reused are the backend's answers (the
  real ``Ledger``).
* Everything is simulated time; every random quantity comes from the
  workload's pure functions, so a run is a function of its workload and
  kill schedule.
"""

from __future__ import annotations

import bisect
import heapq
import math
import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .._events import Lease
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
class Sample:
    """One generated sample the framework holds, whole or in part.

    ``sibling`` is its index in the group; ``tokens`` how many tokens it
    has (all of them once sealed, a prefix otherwise); ``version`` the
    weight version of its oldest token, on the current lineage; ``draw``
    which fresh generation of this sibling it is (its full length is
    ``sibling_tokens(ordinal, draw)[sibling]``: ``(ordinal, sibling, draw)``
    names the sample); ``attempt`` the ledger's attempt that sealed or
    runs it (``None`` in the prompt-level modes)."""

    sibling: int
    tokens: float
    version: int
    draw: int
    attempt: int | None = None


#: ``(ordinal, sibling, draw)``: one sample, in every mode.
SampleKey = tuple[int, int, int]


@attrs.frozen
class Group:
    """A landed prompt group: its ordinal, the weight version that generated
    it (of its oldest token: the step count when its generation started) and
    the step of the target it was generated for, and its samples."""

    ordinal: int
    version: int
    target: int
    samples: tuple[Sample, ...] = ()

    @property
    def tokens(self) -> float:
        return math.fsum(x.tokens for x in self.samples)


@attrs.frozen
class Generation:
    """A sibling being generated under ``lease`` from ``start``: sample
    ``draw``, continuing a prefix of ``prefix`` tokens (0: from nothing)
    whose oldest token has ``version``, up to ``length`` tokens."""

    lease: Lease
    draw: int
    version: int
    prefix: float
    length: float
    start: float


@attrs.frozen
class Dispatched:
    """What a sample-level dispatch says: the attempts to generate, the
    sealed siblings that come back from what the resume held, and the groups
    that landed at once (every sibling held)."""

    leases: tuple[Lease, ...]
    reused: tuple[Lease, ...]
    landed: tuple[int, ...]


@attrs.frozen
class Restored:
    """What a sample-level resume kept: the samples of the sealed siblings
    the ledger reuses, and the durable prefixes that new attempts continue,
    both by ``(ordinal, sibling)``."""

    held: Mapping[tuple[int, int], Sample]
    prefixes: Mapping[tuple[int, int], Sample]


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
    buffer and the training log's record count, all taken at one instant,
    and the samples of the sealed siblings of outstanding groups, by
    ``(ordinal, sibling)`` (the framework saves those its record lists)."""

    record: str
    step: int
    buffer: tuple[Group, ...]
    log_records: int
    sealed: Mapping[tuple[int, int], Sample] = attrs.field(factory=dict)


@runtime_checkable
class SampleLevel(Protocol):
    """What the pipeline asks of a sample-level mode, beyond ``Backend``
    (whose ``dispatch``, ``buffer``, ``snapshot`` and ``restore`` it then
    does not call). ``at`` is the simulated time."""

    def dispatch_samples(self, ordinals: Sequence[int]) -> Dispatched: ...
    def started(self, generation: Generation) -> None: ...
    def seal(self, ordinal: int, sample: Sample, at: float) -> bool: ...
    def ended(self, lease: Lease, at: float) -> None: ...
    def checkpoint(self, at: float) -> str: ...
    def committed(self, at: float) -> None: ...
    def crashed(self, at: float) -> None: ...
    def resume(self, saved: Saved, *, load_buffer: bool, evicted: Sequence[int]) -> Restored: ...


@attrs.define
class _Run:
    """A group in a worker: its ``tries``-th generation, started at
    ``start`` under weight version ``version``. Prompt-level: ``lengths``
    of all its siblings. Sample-level: the ``running`` siblings and the
    samples ``done`` (sealed, or reused)."""

    ordinal: int
    tries: int
    start: float
    version: int
    lengths: tuple[float, ...] = ()
    running: dict[int, Generation] = attrs.Factory(dict)
    done: dict[int, Sample] = attrs.Factory(dict)


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


@attrs.frozen
class KillWaste:
    """One kill that killed a live process: the scheduled kill it is
    (``index`` into the schedule; ``follow_up`` for the second kill of an
    after-resume or double kill), when, which kind, how many groups were
    generating, and the tokens it discarded (held before it, not after the
    resume) and recovered (held after the resume, not before: samples a
    failure had discarded that a journal still held)."""

    index: int
    follow_up: bool
    time: float
    kind: str
    in_flight: int
    discarded: float
    recovered: float
    #: The turns that held a discarded token (a single-turn sample is one
    #: turn), and the tool calls the discarded tokens had made: executed
    #: again after the resume (``Workload.turns``).
    turns: int = 0
    calls: int = 0
    #: The samples that lost any token.
    samples: int = 0

    @property
    def key(self) -> tuple[int, bool]:
        """The same kill in every mode run under one schedule."""
        return self.index, self.follow_up


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
    #: Tokens generated in all; of the samples trained in the surviving
    #: lineage; discarded by failures and stale evictions (the workload's,
    #: not the crashes'); discarded by kills and recovered (``kill_log``).
    tokens_generated: float = 0.0
    tokens_trained: float = 0.0
    tokens_failed: float = 0.0
    kill_log: list[KillWaste] = attrs.Factory(list)
    #: Sample-level modes: sealed siblings reused after a resume, and
    #: siblings continued from a durable prefix.
    samples_reused: int = 0
    samples_continued: int = 0

    @property
    def tokens_discarded(self) -> float:
        return math.fsum(k.discarded for k in self.kill_log)

    @property
    def tokens_recovered(self) -> float:
        return math.fsum(k.recovered for k in self.kill_log)

    @property
    def turns_discarded(self) -> int:
        return sum(k.turns for k in self.kill_log)

    @property
    def calls_repeated(self) -> int:
        return sum(k.calls for k in self.kill_log)


# Event kinds, ordered so that ties at one instant resolve deterministically.
_DONE, _TRAINED, _CKPT_PART, _CKPT_COMMIT, _RESTART = range(5)


class Pipeline:
    """One mode's run of a workload under a kill schedule.

    ``run()`` simulates to the end of the stream and returns the stats; the
    training log at ``log_path`` is the record of what was trained, and
    ``sample_log_path`` (if given) the same log with each group's samples
    in place of its ordinal (sample ``s`` of ordinal ``o`` is ``o * n + s``),
    for the per-sample audit. Raises ``SimulationError`` if the run stalls
    with work left or its token count does not balance (a bug).
    """

    def __init__(
        self,
        workload: Workload,
        backend: Backend,
        kills: Sequence[Kill],
        log_path: str | os.PathLike[str],
        *,
        sample_log_path: str | os.PathLike[str] | None = None,
        max_events: int = 10_000_000,
    ) -> None:
        self.w = workload
        self.backend = backend
        self.samples = backend if isinstance(backend, SampleLevel) else None
        self.log_path = log_path
        self.sample_log_path = sample_log_path
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
        # The scheduled kill each kill stems from: by heap order for the
        # follow-ups, first in first out for the armed torn kills.
        self._origin: dict[int, int] = {i: i for i in range(len(kills))}
        self._kill_index = -1
        self._torn_armed: deque[int] = deque()
        self._follow_up: list[tuple[float, int]] = []  # (delay, origin) due after the next restart
        self.alive = True
        self.segment = 0
        self._first_segment: dict[int, int] = {}
        self._regenerated: set[int] = set()
        self._attempts: dict[int, int] = {}
        # Sample-level: how many times each sibling was generated afresh.
        self._draws: dict[tuple[int, int], int] = {}
        # Groups trained since the last committed checkpoint, with the log
        # record that trained them: a resume rolls them back.
        self._uncommitted: list[tuple[int, Group]] = []
        # At a kill: which one, when, its kind, the groups in flight; and
        # the samples held, until the resume says which it kept.
        self._stock: tuple[int, bool, float, str, int] | None = None
        self._before: dict[SampleKey, float] = {}
        self.log = TrainLogWriter(log_path)
        self.sample_log = None if sample_log_path is None else TrainLogWriter(sample_log_path)
        initial = self.samples.checkpoint(0.0) if self.samples else backend.snapshot()
        self.store = CheckpointStore(Saved(initial, 0, (), 0))
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
        self._training: list[Group] = []
        self._runs: dict[int, _Run] = {}
        # Sample-level: the dispatched groups waiting for a worker (their
        # attempts and reused samples), and what the resume held for groups
        # not dispatched yet.
        self._plans: dict[int, tuple[tuple[Lease, ...], tuple[Sample, ...]]] = {}
        self._held: dict[tuple[int, int], Sample] = {}
        self._prefixes: dict[tuple[int, int], Sample] = {}

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
                    kill_at, order, kind = heapq.heappop(self._kills)
                    self.now = max(self.now, kill_at)
                    self._kill_index = self._origin.pop(order)
                    self._kill(kind)
                    continue
                at, kind_, _, payload = heapq.heappop(self._heap)
                self.now = at
                if self._handle(kind_, payload) and self.alive:
                    self._pump()
            if not self.backend.done or self.target_of or self.pending or self.running:
                raise SimulationError(
                    f"{self.backend.name}: stalled at t={self.now:.2f} with the source at "
                    f"{self.backend.position}, {len(self.pending)} pending, "
                    f"{len(self.target_of)} in targets, {self.running} running"
                )
        finally:
            self.log.close()
            if self.sample_log is not None:
                self.sample_log.close()
        self.stats.sim_time = self.now
        self.stats.regenerated = len(self._regenerated)
        self.stats.torn_checkpoints = self.store.torn
        self.stats.checkpoints = self.store.commits
        self._check_tokens()
        return self.stats

    def _check_tokens(self) -> None:
        s = self.stats
        accounted = s.tokens_trained + s.tokens_discarded + s.tokens_failed - s.tokens_recovered
        if not math.isclose(s.tokens_generated, accounted, rel_tol=1e-9, abs_tol=1e-6):
            raise SimulationError(
                f"{self.backend.name}: {s.tokens_generated:.1f} tokens generated, but "
                f"{accounted:.1f} trained, discarded or failed"
            )

    def _handle(self, kind: int, payload: object) -> bool:
        """Apply one event; whether the scheduler must react (``_pump``). A
        sibling that seals while others of its group still run frees no
        worker and lands nothing: the scheduler reacts to the same group
        events in every mode, so that the modes' runs are the same run
        until the first kill."""
        if kind == _DONE:
            assert isinstance(payload, tuple)
            run, sibling = payload
            if sibling is None:
                self._landed(run)
            else:
                return self._sealed(run, sibling)
        elif kind == _TRAINED:
            self._trained()
        elif kind == _CKPT_PART:
            if self._torn_armed:
                # The armed kill fires between the two parts of this write.
                self._kill_index = self._torn_armed.popleft()
                self._kill(KillKind.TORN_CHECKPOINT, armed=True)
            else:
                self._push(self.now + self.w.checkpoint_time / 2, _CKPT_COMMIT)
        elif kind == _CKPT_COMMIT:
            self.store.commit()
            committed = self.store.latest().log_records
            self._uncommitted = [(i, g) for i, g in self._uncommitted if i >= committed]
            if self.samples is not None:
                self.samples.committed(self.now)
            if self.stats.first_checkpoint is None:
                self.stats.first_checkpoint = self.now
            self.trainer = "idle"
        else:
            self._restart()
        return True

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
            if self.samples is None:
                self.backend.dispatch(taken)
                self.queue.extend(taken)
            else:
                self._plan(taken, self.samples.dispatch_samples(taken))
            for o in taken:
                first = self._first_segment.setdefault(o, self.segment)
                if first < self.segment:
                    self._regenerated.add(o)

    def _plan(self, taken: Sequence[int], dispatched: Dispatched) -> None:
        """Queue the dispatched groups with the ledger's attempts and the
        samples it reuses; land those it landed at once."""
        leases: dict[int, list[Lease]] = {o: [] for o in taken}
        reused: dict[int, list[Sample]] = {o: [] for o in taken}
        for lease in dispatched.leases:
            leases[lease.ordinal].append(lease)
        for lease in dispatched.reused:
            sample = self._held.pop((lease.ordinal, lease.sibling), None)
            if sample is None or sample.attempt != lease.attempt:
                raise SimulationError(f"the ledger reused {lease}, which the run does not hold")
            reused[lease.ordinal].append(sample)
        self.stats.samples_reused += len(dispatched.reused)
        landed = set(dispatched.landed)
        n = self.w.num_generations
        for o in taken:
            siblings = sorted([x.sibling for x in leases[o]] + [x.sibling for x in reused[o]])
            if siblings != list(range(n)):
                # Checked here, where the samples are keyed by sibling and a
                # repeat would vanish before the per-sample audit saw it.
                raise SimulationError(f"the ledger dispatched {o} with siblings {siblings}")
            if o in landed:
                if leases[o]:
                    raise SimulationError(f"the ledger landed {o} without all its samples")
                self._land(o, reused[o])
            elif not leases[o]:
                raise SimulationError(f"the ledger dispatched {o} with nothing to generate")
            else:
                self._plans[o] = (tuple(leases[o]), tuple(reused[o]))
                self.queue.append(o)

    def _land(self, ordinal: int, samples: Iterable[Sample]) -> None:
        target = self.target_of[ordinal]
        ordered = tuple(sorted(samples, key=lambda x: x.sibling))
        version = min(x.version for x in ordered)
        target.landed[ordinal] = Group(ordinal, version, target.step, ordered)

    def _start_workers(self) -> None:
        while self.queue and self.running < self.w.workers:
            o = self.queue.popleft()
            attempt = self._attempts.get(o, 0)
            self._attempts[o] = attempt + 1
            self.running += 1
            self.stats.generations += 1
            if self.samples is None:
                # The group as a unit: it lands when its longest sibling does.
                lengths = self.w.sibling_tokens(o, attempt)
                run = _Run(o, attempt, self.now, self.step, lengths=lengths)
                self._runs[o] = run
                longest = max(self.w.duration(n, 0.0) for n in lengths)
                self._push(self.now + longest, _DONE, (run, None))
                continue
            leases, reused = self._plans.pop(o)
            run = _Run(o, attempt, self.now, self.step, done={x.sibling: x for x in reused})
            self._runs[o] = run
            for lease in leases:
                s = lease.sibling
                prefix = self._prefixes.pop((o, s), None)
                if prefix is None:
                    draw = self._draws.get((o, s), 0)
                    self._draws[(o, s)] = draw + 1
                    version, done = self.step, 0.0
                else:
                    draw, version, done = prefix.draw, prefix.version, prefix.tokens
                    self.stats.samples_continued += 1
                length = self.w.sibling_tokens(o, draw)[s]
                gen = Generation(lease, draw, version, done, length, self.now)
                run.running[s] = gen
                self.samples.started(gen)
                self._push(self.now + self.w.duration(length, done), _DONE, (run, s))

    def _landed(self, run: _Run) -> None:
        """A prompt-level group's longest sibling finished."""
        ordinal = run.ordinal
        self.running -= 1
        del self._runs[ordinal]
        tokens = math.fsum(run.lengths)
        self.stats.tokens_generated += tokens
        target = self.target_of[ordinal]
        if self.w.fails(ordinal, run.tries):
            self.stats.failures += 1
            self.stats.tokens_failed += tokens
            self._release([ordinal])
            self._resolve_failures(*self.backend.fail([ordinal]))
        else:
            self.backend.buffer([ordinal])
            samples = tuple(Sample(s, n, run.version, run.tries) for s, n in enumerate(run.lengths))
            target.landed[ordinal] = Group(ordinal, run.version, target.step, samples)

    def _sealed(self, run: _Run, sibling: int) -> bool:
        """A sample-level sibling finished its tokens; whether its group is
        done (landed or failed)."""
        assert self.samples is not None
        ordinal = run.ordinal
        gen = run.running.pop(sibling)
        self.stats.tokens_generated += gen.length - gen.prefix
        sample = Sample(sibling, gen.length, gen.version, gen.draw, gen.lease.attempt)
        if not run.running and self.w.fails(ordinal, run.tries):
            # The group's generation failed as a whole (as in the
            # prompt-level modes): its siblings' samples go with it.
            self.running -= 1
            del self._runs[ordinal]
            self.stats.failures += 1
            self.stats.tokens_failed += gen.length + math.fsum(x.tokens for x in run.done.values())
            self.samples.ended(gen.lease, self.now)
            self._release([ordinal])
            self._resolve_failures(*self.backend.fail([ordinal]))
            return True
        landed = self.samples.seal(ordinal, sample, self.now)
        run.done[sibling] = sample
        if run.running:
            if landed:
                raise SimulationError(f"the ledger landed {ordinal} with siblings running")
            return False
        self.running -= 1
        del self._runs[ordinal]
        if not landed:
            raise SimulationError(f"every sibling of {ordinal} sealed, the group did not land")
        self._land(ordinal, run.done.values())
        return True

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

    def _sealed_samples(self) -> dict[tuple[int, int], Sample]:
        """The samples of the sealed siblings of groups not landed: in the
        workers, waiting for one, or held by the resume."""
        out = dict(self._held)
        for o, (_, reused) in self._plans.items():
            out.update(((o, x.sibling), x) for x in reused)
        for o, run in self._runs.items():
            out.update(((o, s), x) for s, x in run.done.items())
        return out

    def _resolve_failures(self, requeued: list[int], dropped: list[int]) -> None:
        for o in requeued:
            bisect.insort(self.pending, o)
        if dropped:
            self.log.dropped(dropped)
            if self.sample_log is not None:
                n = self.w.num_generations
                self.sample_log.dropped([o * n + s for o in dropped for s in range(n)])

    def _maybe_train(self) -> None:
        if self.trainer != "idle" or not self.targets:
            return
        head = self.targets[0]
        stale = [g for g in head.landed.values() if head.step - g.version > self.w.max_age]
        if stale:
            # Generated under weights too old for this step: evicted, and the
            # failure policy decides (the target is refilled meanwhile).
            self.stats.evicted += len(stale)
            self.stats.tokens_failed += math.fsum(g.tokens for g in stale)
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
        self._training = [head.landed[o] for o in sorted(head.assigned)]
        for g in self._training:
            del self.target_of[g.ordinal]
        self.trainer = "train"
        self._push(self.now + self.w.train_time, _TRAINED)

    def _trained(self) -> None:
        groups, self._training = self._training, []
        ordinals = [g.ordinal for g in groups]
        self.backend.train(ordinals)
        for g in groups:
            self._uncommitted.append((self.log.records, g))
            self.stats.tokens_trained += g.tokens
        self.log.step(self.step, ordinals)
        if self.sample_log is not None:
            n = self.w.num_generations
            self.sample_log.step(
                self.step, [g.ordinal * n + x.sibling for g in groups for x in g.samples]
            )
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
        record = self.samples.checkpoint(self.now) if self.samples else self.backend.snapshot()
        self.store.write_part(
            Saved(record, self.step, tuple(buffer), self.log.records, self._sealed_samples())
        )
        self.trainer = "checkpoint"
        self._push(self.now + self.w.checkpoint_time / 2, _CKPT_PART)

    # -- kills ------------------------------------------------------------

    def _holdings(self) -> dict[SampleKey, float]:
        """Every sample the run holds now (whole or partial), by key, with
        its tokens: trained since the last checkpoint, buffered, sealed,
        being generated, or held by the resume."""
        held: dict[SampleKey, float] = {}

        def add(ordinal: int, sibling: int, draw: int, tokens: float) -> None:
            key = (ordinal, sibling, draw)
            held[key] = max(held.get(key, 0.0), tokens)

        groups = [g for _, g in self._uncommitted] + self._training
        groups += [g for t in self.targets for g in t.landed.values()]
        for g in groups:
            for x in g.samples:
                add(g.ordinal, x.sibling, x.draw, x.tokens)
        for (o, s), x in (self._sealed_samples() | self._prefixes).items():
            add(o, s, x.draw, x.tokens)
        for o, run in self._runs.items():
            for s, length in enumerate(run.lengths):
                add(o, s, run.tries, self.w.made(length, 0.0, self.now - run.start))
            for s, gen in run.running.items():
                add(o, s, gen.draw, self.w.made(gen.length, gen.prefix, self.now - gen.start))
        return held

    def _stop_generation(self) -> None:
        """The process died: count what its running siblings generated."""
        for run in self._runs.values():
            elapsed = self.now - run.start
            made = (self.w.made(n, 0.0, elapsed) for n in run.lengths)
            self.stats.tokens_generated += math.fsum(made)
            for gen in run.running.values():
                made_now = self.w.made(gen.length, gen.prefix, self.now - gen.start)
                self.stats.tokens_generated += made_now - gen.prefix
                if self.samples is not None:
                    self.samples.ended(gen.lease, self.now)

    def _kill(self, kind: KillKind | None, *, armed: bool = False) -> None:
        if kind is KillKind.TORN_CHECKPOINT and not armed:
            self._torn_armed.append(self._kill_index)  # fires at the next checkpoint's midpoint
            return
        if not self.alive:
            return  # already down: this kill has nothing to kill
        label = kind.value if kind is not None else "follow-up"
        self.stats.kill_kinds[label] = self.stats.kill_kinds.get(label, 0) + 1
        self.stats.kills += 1
        if self.running:
            self.stats.kills_in_flight += 1
        self._stock = (self._kill_index, kind is None, self.now, label, self.running)
        self._before = self._holdings()
        self._stop_generation()
        if self.samples is not None:
            self.samples.crashed(self.now)
        self.alive = False
        self.store.crash()
        self.log.close()
        if self.sample_log is not None:
            self.sample_log.close()
        self._heap.clear()
        self._reset_process()
        if kind is KillKind.AFTER_RESUME:
            self._follow_up.append((0.01 * self.w.train_time, self._kill_index))
        elif kind is KillKind.DOUBLE:
            rng = self.w.rng("double", self.stats.kills)
            self._follow_up.append((rng.uniform(0.1, 0.9) * self.w.train_time, self._kill_index))
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
        if self.samples is None:
            self.backend.restore(
                saved.record,
                load_buffer=self.w.load_replay_buffer,
                evicted=[g.ordinal for g in evicted],
            )
        else:
            kept = self.samples.resume(
                saved,
                load_buffer=self.w.load_replay_buffer,
                evicted=[g.ordinal for g in evicted],
            )
            self._held = dict(kept.held)
            self._prefixes = dict(kept.prefixes)
        self.step = saved.step
        # The steps trained since the checkpoint are rolled back.
        self.stats.tokens_trained -= math.fsum(g.tokens for _, g in self._uncommitted)
        self._uncommitted = []
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
        self._account_kill()
        self.log = TrainLogWriter(self.log_path, resume_records=saved.log_records)
        if self.sample_log_path is not None:
            self.sample_log = TrainLogWriter(self.sample_log_path, resume_records=saved.log_records)
        for delay, origin in self._follow_up:
            self._kill_seq += 1
            self._origin[self._kill_seq] = origin
            heapq.heappush(self._kills, (self.now + delay, self._kill_seq, None))
        self._follow_up.clear()

    def _account_kill(self) -> None:
        """What the last kill discarded: held before it, not after the resume."""
        assert self._stock is not None
        index, follow_up, at, label, in_flight = self._stock
        before, after = self._before, self._holdings()
        discarded = math.fsum(max(0.0, n - after.get(k, 0.0)) for k, n in before.items())
        recovered = math.fsum(max(0.0, n - before.get(k, 0.0)) for k, n in after.items())
        turns = calls = samples = 0
        # A turn journal issues a tool call only once its turn is durable
        # (``Run.turn`` is write-ahead): a call it made is never made again,
        # so there is nothing to count for it.
        write_ahead = bool(getattr(self.backend, "write_ahead", False))
        for (o, s, draw), n in before.items():
            kept = after.get((o, s, draw), 0.0)
            if n > kept:
                # A turn generated again; a call made again (one at or
                # before the kept prefix's end is asked again under its
                # key, and the tool answers from its record).
                length = self.w.sibling_tokens(o, draw)[s]
                samples += 1
                turns += self.w.turns_between(length, kept, n)
                if not write_ahead:
                    calls += self.w.calls(length, n) - self.w.calls(length, kept)
        self.stats.kill_log.append(
            KillWaste(
                index, follow_up, at, label, in_flight, discarded, recovered, turns, calls, samples
            )
        )
        self._stock, self._before = None, {}


def simulate(
    workload: Workload,
    backend_factory: Callable[[Workload], Backend],
    kills: Sequence[Kill],
    log_path: str | os.PathLike[str],
    *,
    sample_log_path: str | os.PathLike[str] | None = None,
) -> Stats:
    """Run one mode of ``workload`` under ``kills``, logging to ``log_path``
    (and the samples to ``sample_log_path``; both appended to: pass fresh
    paths)."""
    return Pipeline(
        workload, backend_factory(workload), kills, log_path, sample_log_path=sample_log_path
    ).run()
