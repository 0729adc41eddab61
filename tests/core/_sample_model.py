"""A deliberately naive model of the sample-level ledger, and its checks.

The groups' lifecycle is the prompt-level model's (``_model.Model``: a dict
of every ordinal ever seen). On top of it, plain dicts: each sibling's
status and attempt, every attempt ever handed out (across every life of the
run), every seal ever accepted, and the lineage: which samples each group
landed with and each training step trained. Everything is recomputed the
obvious way; the real ``Ledger`` is compared with it after every step
of ``test_samples_stateful.py``.

Each invariant of proofs/SAMPLES.md that the stateful test checks is a
function in ``SAMPLE_INVARIANT_CHECKS``, keyed by its ID;
``tests/core/test_proofs.py`` keeps the registry and the document in step.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from frontier_core import (
    FailurePolicy,
    Granularity,
    Lease,
    Ledger,
    LedgerConfig,
    Sibling,
    Status,
)

from ._model import Model, ModelCheckpoint, check_all

#: A group's samples when it landed: sibling -> the attempt that sealed it,
#: or None when the framework reported the whole group landed at once
#: (the prompt-level ``buffer``), which says nothing of its attempts.
Samples = dict[int, int] | None


@dataclass
class SampleModel:
    config: LedgerConfig
    groups: Model = field(init=False)
    #: (ordinal, sibling) -> (status, attempt): outstanding groups, and the
    #: held siblings a resume keeps for groups that wait for generation.
    siblings: dict[tuple[int, int], tuple[Sibling, int]] = field(default_factory=dict)
    next_attempt: int = 0
    #: attempt -> the sibling it was handed to, in every life of the run.
    issued: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Every seal accepted, in every life (what a journal can hold).
    accepted: set[Lease] = field(default_factory=set)
    #: Every result fenced, in every life.
    fenced: set[Lease] = field(default_factory=set)
    #: Lineage: the samples of each buffered group, and every trained group
    #: with its samples, in training order.
    landed: dict[int, Samples] = field(default_factory=dict)
    trained: list[tuple[int, Samples]] = field(default_factory=list)
    #: The counter when the current life started (for ATTEMPT-MONOTONE).
    life_floor: int = 0

    def __post_init__(self) -> None:
        self.groups = Model(self.config)

    @property
    def n(self) -> int:
        return self.config.samples

    def status(self, ordinal: int) -> Status | None:
        return self.groups.status.get(ordinal)

    def current(self, lease: Lease) -> bool:
        """The fencing rule, written out: a result counts only from the
        attempt its sibling is running now."""
        return self.siblings.get((lease.ordinal, lease.sibling)) == (Sibling.RUNNING, lease.attempt)

    def held(self) -> list[Lease]:
        return sorted(
            Lease(o, s, a) for (o, s), (st, a) in self.siblings.items() if st is Sibling.SEALED
        )

    # -- transitions ------------------------------------------------------------

    def _issue(self, o: int, s: int) -> Lease:
        a = self.next_attempt
        self.next_attempt += 1
        self.issued[a] = (o, s)
        self.siblings[(o, s)] = (Sibling.RUNNING, a)
        return Lease(o, s, a)

    def _forget(self, o: int) -> None:
        for s in range(self.n):
            self.siblings.pop((o, s), None)

    def _land(self, o: int) -> None:
        samples = {}
        for s in range(self.n):
            status, a = self.siblings.pop((o, s))
            assert status is Sibling.SEALED
            samples[s] = a
        self.groups.move([o], Status.OUTSTANDING, Status.BUFFERED)
        self.landed[o] = samples

    def dispatch(self, ordinals: list[int]) -> tuple[list[Lease], list[Lease], list[int]]:
        leases, reused, landed = [], [], []
        self.groups.move(ordinals, Status.PENDING, Status.OUTSTANDING)
        for o in ordinals:
            for s in range(self.n):
                kept = self.siblings.get((o, s))
                if kept is not None and kept[0] is Sibling.SEALED:
                    reused.append(Lease(o, s, kept[1]))
                else:
                    leases.append(self._issue(o, s))
            if all(self.siblings[(o, s)][0] is Sibling.SEALED for s in range(self.n)):
                self._land(o)
                landed.append(o)
        return leases, reused, landed

    def seal(self, leases: list[Lease]) -> tuple[list[Lease], list[Lease], list[int]]:
        sealed, fenced, landed = [], [], []
        for x in leases:
            if self.current(x):
                self.siblings[(x.ordinal, x.sibling)] = (Sibling.SEALED, x.attempt)
                self.accepted.add(x)
                sealed.append(x)
                done = all(
                    self.siblings.get((x.ordinal, s), (None,))[0] is Sibling.SEALED
                    for s in range(self.n)
                )
                if done:
                    self._land(x.ordinal)
                    landed.append(x.ordinal)
            else:
                self.fenced.add(x)
                fenced.append(x)
        return sealed, fenced, landed

    def fail_sample(self, leases: list[Lease]) -> dict[str, list[object]]:
        """One failure after another, in the order listed."""
        out: dict[str, list[object]] = {
            k: [] for k in ("requeued", "unstamped", "dropped", "fenced", "restart")
        }
        for x in leases:
            o = x.ordinal
            if not self.current(x):
                self.fenced.add(x)
                out["fenced"].append(x)
                continue
            if self.config.granularity is Granularity.GROUP:
                requeued, unstamped, dropped = self.groups.failure([o], Status.OUTSTANDING)
                out["requeued"] += requeued
                out["unstamped"] += unstamped
                out["dropped"] += dropped
                self._forget(o)
                # Nothing of a group that failed whole is restarted.
                out["restart"] = [p for p in out["restart"] if p[0] != o]
                continue
            # One failed sample: one failed attempt of its group.
            self.groups.attempts[o] += 1
            self.groups.failures[o] += 1
            retry = self.config.on_failure is FailurePolicy.RETRY
            if retry and self.groups.attempts[o] < self.config.max_failures:
                self.siblings[(o, x.sibling)] = (Sibling.UNSTARTED, x.attempt)
                out["restart"].append((o, x.sibling))
            else:
                self.groups.status[o] = Status.DROPPED
                self.groups.dropped.append(o)
                out["dropped"].append(o)
                self._forget(o)
                out["restart"] = [p for p in out["restart"] if p[0] != o]
        return out

    def restart(self, pairs: list[tuple[int, int]]) -> list[Lease]:
        for o, s in pairs:
            assert self.siblings[(o, s)][0] is Sibling.UNSTARTED
        return [self._issue(o, s) for o, s in pairs]

    def buffer_whole(self, ordinals: list[int]) -> None:
        self.groups.move(ordinals, Status.OUTSTANDING, Status.BUFFERED)
        for o in ordinals:
            self._forget(o)
            self.landed[o] = None

    def fail_whole(self, ordinals: list[int]) -> tuple[list[int], list[int], list[int]]:
        result = self.groups.failure(ordinals, Status.OUTSTANDING)
        for o in ordinals:
            self._forget(o)
        return result

    def evict(self, ordinals: list[int]) -> tuple[list[int], list[int], list[int]]:
        result = self.groups.failure(ordinals, Status.BUFFERED)
        for o in ordinals:
            del self.landed[o]
        return result

    def train(self, ordinals: list[int]) -> None:
        self.groups.train(ordinals)
        for o in ordinals:
            self.trained.append((o, self.landed.pop(o)))

    # -- checkpoint and crash ------------------------------------------------------

    def snapshot(self, save_buffer: bool, save_sealed: bool) -> SampleModelCheckpoint:
        return SampleModelCheckpoint(
            groups=self.groups.snapshot(save_buffer),
            next_attempt=self.next_attempt,
            sealed=tuple(self.held()) if save_sealed else (),
            landed=copy.deepcopy(self.landed) if save_buffer else {},
            trained=list(self.trained),
        )

    def restore(
        self,
        saved: SampleModelCheckpoint,
        load_buffer: bool,
        evicted: set[int],
        held: Iterable[Lease],
        floor: int,
    ) -> tuple[list[Lease], list[Lease]]:
        """The crash: the lineage goes back to ``saved``; the held sealed
        siblings are kept for the groups that need generation."""
        self.groups.restore(saved.groups, load_buffer, evicted)
        self.landed = {
            o: samples for o, samples in saved.landed.items() if self.status(o) is Status.BUFFERED
        }
        self.trained = list(saved.trained)
        cut = saved.groups.cut
        self.siblings = {}
        reused, ignored = [], []
        held = sorted(held)
        for x in held:
            needs_generation = x.ordinal >= cut and self.status(x.ordinal) is None
            if needs_generation:
                self.siblings[(x.ordinal, x.sibling)] = (Sibling.SEALED, x.attempt)
                reused.append(x)
            else:
                ignored.append(x)
        self.next_attempt = max([saved.next_attempt, floor] + [x.attempt + 1 for x in held])
        self.life_floor = self.next_attempt
        return reused, ignored


@dataclass(frozen=True)
class SampleModelCheckpoint:
    groups: ModelCheckpoint
    next_attempt: int
    sealed: tuple[Lease, ...]
    landed: dict[int, Samples]
    trained: list[tuple[int, Samples]]


# -- invariants ------------------------------------------------------------------------
# Each takes the ledger and the model after a step and raises AssertionError.


def check_sample_model_agree(ledger: Ledger, model: SampleModel) -> None:
    """Every group as the prompt-level model says (and its invariants), and
    every sibling's status and attempt as the model says."""
    check_all(ledger._groups, model.groups)
    assert ledger.next_attempt == model.next_attempt
    top = max([ledger.next_ordinal, *(o for o, _ in model.siblings)], default=0) + 2
    for o in range(top):
        for s in range(model.n):
            expected = model.siblings.get((o, s))
            got = ledger.sibling(o, s)
            if expected is None:
                assert got is None, (o, s, got)
            else:
                status, a = expected
                assert got == (status, None if status is Sibling.UNSTARTED else a), (o, s, got)
    assert list(ledger.held()) == model.held()
    assert sorted(ledger.running()) == sorted(
        Lease(o, s, a) for (o, s), (st, a) in model.siblings.items() if st is Sibling.RUNNING
    )


def check_sample_exactly_once(ledger: Ledger, model: SampleModel) -> None:
    """Every group trained in the lineage was trained once, with exactly n
    samples, each sealed by exactly one attempt that was handed to that
    sibling and accepted; no fenced result is among them."""
    counts = Counter(o for o, _ in model.trained)
    assert all(k == 1 for k in counts.values()), counts.most_common(3)
    assert not set(counts) & set(model.groups.dropped)
    for o, samples in [*model.trained, *model.landed.items()]:
        if samples is None:
            continue  # landed whole by the framework: no per-sample claim
        assert sorted(samples) == list(range(model.n)), (o, samples)
        for s, a in samples.items():
            lease = Lease(o, s, a)
            assert model.issued[a] == (o, s), lease
            assert lease in model.accepted, lease
        # Each sibling's sample from one attempt: one attempt per sibling
        # key, and no two siblings share an attempt.
        assert len(set(samples.values())) == model.n


def check_attempt_fencing(ledger: Ledger, model: SampleModel) -> None:
    """An accepted result is from the attempt its sibling ran; a fenced one
    was never accepted under that attempt unless it was accepted first (a
    second answer); attempts name one sibling each, for the whole run."""
    for x in model.accepted:
        assert model.issued.get(x.attempt) == (x.ordinal, x.sibling), x
    for x in model.fenced - model.accepted:
        assert not model.current(x), x
    running = [a for st, a in model.siblings.values() if st is Sibling.RUNNING]
    assert len(set(running)) == len(running)


def check_attempt_monotone(ledger: Ledger, model: SampleModel) -> None:
    """The counter is above every attempt handed out or held, and never
    below where this life started."""
    assert ledger.next_attempt >= model.life_floor
    assert all(a < ledger.next_attempt for a in model.issued)
    assert all(x.attempt < ledger.next_attempt for x in ledger.held())


def check_sibling_detail_bounded(ledger: Ledger, model: SampleModel) -> None:
    """Detail only for outstanding groups (at most n each) and held siblings
    of groups waiting for generation; the checkpoint's sealed list is
    within the same bound."""
    n = model.n
    groups = Counter(o for o, _ in model.siblings)
    for o, k in groups.items():
        status = ledger.status(o)
        assert k <= n
        if status is not Status.OUTSTANDING:
            assert status in (Status.UNSTAMPED, Status.PENDING), (o, status)
            assert all(
                model.siblings[(o, s)][0] is Sibling.SEALED
                for s in range(n)
                if (o, s) in model.siblings
            )
    outstanding = ledger.count(Status.OUTSTANDING)
    waiting = sum(1 for o in groups if ledger.status(o) is not Status.OUTSTANDING)
    assert ledger.sibling_count() == len(model.siblings) <= n * (outstanding + waiting)
    assert len(ledger.checkpoint().sealed) <= ledger.sibling_count()


def check_reuse_sound(ledger: Ledger, model: SampleModel) -> None:
    """Every held sealed sibling is a seal some life accepted, of a group
    that needs generation."""
    for x in ledger.held():
        assert x in model.accepted, x
        assert model.issued[x.attempt] == (x.ordinal, x.sibling)
        assert ledger.status(x.ordinal) in (
            Status.UNSTAMPED,
            Status.PENDING,
            Status.OUTSTANDING,
        )


def check_sample_retry_bound(ledger: Ledger, model: SampleModel) -> None:
    """Under ``retry`` a group is dropped only after ``max_failures``
    failures, failed samples included."""
    if model.config.on_failure is FailurePolicy.RETRY:
        for o in model.groups.dropped:
            assert model.groups.failures[o] >= model.config.max_failures, o


SAMPLE_INVARIANT_CHECKS: dict[str, Callable[[Ledger, SampleModel], None]] = {
    "SAMPLE-MODEL-AGREE": check_sample_model_agree,
    "SAMPLE-EXACTLY-ONCE": check_sample_exactly_once,
    "ATTEMPT-FENCING": check_attempt_fencing,
    "ATTEMPT-MONOTONE": check_attempt_monotone,
    "SIBLING-DETAIL-BOUNDED": check_sibling_detail_bounded,
    "REUSE-SOUND": check_reuse_sound,
    "SAMPLE-RETRY-BOUND": check_sample_retry_bound,
}


def check_all_samples(ledger: Ledger, model: SampleModel) -> None:
    for check in SAMPLE_INVARIANT_CHECKS.values():
        check(ledger, model)


def check_drained_exactly_once(model: SampleModel) -> None:
    """In a drained lineage every group of the stream was trained once with
    its n samples, or dropped on record."""
    assert model.config.stream_len is not None
    trained = Counter(o for o, _ in model.trained)
    dropped = Counter(model.groups.dropped)
    for o in range(model.config.stream_len):
        assert trained[o] + dropped[o] == 1, (o, trained[o], dropped[o])
    assert set(trained) | set(dropped) <= set(range(model.config.stream_len))
