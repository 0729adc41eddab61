"""A deliberately naive model of the ledger, and the invariant checks.

The model keeps a plain dict of every ordinal it has ever seen and computes
the cut by scanning, so it is obviously right and obviously slow; the real
ledger is compared against it after every step of the stateful tests. The
model also keeps the *lineage*: the training steps and drops of the run that
survives the crashes, which is what "exactly once" is about.

Every invariant of proofs/INVARIANTS.md that a test checks is a function in
``INVARIANT_CHECKS`` below, keyed by its ID; tests/core/test_proofs.py keeps that
registry and the document in step.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from frontier_core import (
    Checkpoint,
    FailurePolicy,
    Ledger,
    LedgerConfig,
    Status,
)
from frontier_core._groups import GroupTable

RESOLVED = (Status.TRAINED, Status.DROPPED)
LIVE = (Status.PENDING, Status.OUTSTANDING, Status.BUFFERED)


@dataclass
class Model:
    config: LedgerConfig
    status: dict[int, Status] = field(default_factory=dict)
    attempts: Counter[int] = field(default_factory=Counter)
    position: int = 0
    #: Lineage: training steps and drops of the surviving run.
    trained_steps: list[tuple[int, ...]] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    #: Every failure of every ordinal in the lineage (for RETRY-BOUND).
    failures: Counter[int] = field(default_factory=Counter)
    #: Cuts seen since the last resume (for CUT-MONO).
    last_cut: int = 0
    #: Yielded ordinals the last yield filtered because they are buffered.
    last_buffered: list[int] = field(default_factory=list)

    @property
    def stream_len(self) -> int | None:
        return self.config.stream_len

    def cut(self) -> int:
        o = 0
        while self.status.get(o) in RESOLVED:
            o += 1
        return o

    def ordinals(self, status: Status) -> list[int]:
        return sorted(o for o, s in self.status.items() if s == status)

    # -- transitions, written the obvious way ------------------------------

    def stamp(self, count: int) -> tuple[list[int], list[int]]:
        stop = self.position + count
        if self.stream_len is not None:
            stop = min(stop, self.stream_len)
        yielded = list(range(self.position, max(stop, self.position)))
        kept = []
        self.last_buffered = []
        for o in yielded:
            if self.status.get(o) == Status.BUFFERED:
                self.last_buffered.append(o)
            if self.status.get(o) in (*RESOLVED, Status.BUFFERED):
                continue
            self.status[o] = Status.PENDING
            kept.append(o)
        self.position = max(self.position, stop)
        return yielded, kept

    def move(self, ordinals: list[int], source: Status, target: Status) -> None:
        for o in ordinals:
            assert self.status.get(o) == source
            self.status[o] = target

    def failure(
        self, ordinals: list[int], source: Status
    ) -> tuple[list[int], list[int], list[int]]:
        requeued, unstamped, dropped = [], [], []
        for o in ordinals:
            assert self.status.get(o) == source
            self.attempts[o] += 1
            self.failures[o] += 1
            retry = self.config.on_failure is FailurePolicy.RETRY
            if retry and self.attempts[o] < self.config.max_failures:
                # Not yet re-yielded after a resume: forget it until the
                # source yields it again.
                if o < self.position:
                    self.status[o] = Status.PENDING
                    requeued.append(o)
                else:
                    del self.status[o]
                    unstamped.append(o)
            else:
                self.status[o] = Status.DROPPED
                self.dropped.append(o)
                dropped.append(o)
        return requeued, unstamped, dropped

    def train(self, ordinals: list[int]) -> None:
        self.move(ordinals, Status.BUFFERED, Status.TRAINED)
        self.trained_steps.append(tuple(ordinals))

    def snapshot(self, save_buffer: bool) -> ModelCheckpoint:
        saved = {
            o: s
            for o, s in self.status.items()
            if s in RESOLVED or (save_buffer and s == Status.BUFFERED)
        }
        return ModelCheckpoint(
            status=saved,
            attempts=Counter(
                {
                    o: n
                    for o, n in self.attempts.items()
                    if o not in saved or saved[o] == Status.BUFFERED
                }
            ),
            trained_steps=list(self.trained_steps),
            dropped=list(self.dropped),
            failures=Counter(self.failures),
            cut=self.cut(),
        )

    def restore(self, saved: ModelCheckpoint, load_buffer: bool, evicted: set[int]) -> list[int]:
        self.status = {
            o: s
            for o, s in saved.status.items()
            if s in RESOLVED or (load_buffer and o not in evicted)
        }
        self.attempts = Counter(saved.attempts)
        self.trained_steps = list(saved.trained_steps)
        self.dropped = list(saved.dropped)
        self.failures = Counter(saved.failures)
        self.position = saved.cut
        self.last_cut = saved.cut
        return sorted(o for o in self.status if o >= saved.cut)


@dataclass(frozen=True)
class ModelCheckpoint:
    status: dict[int, Status]
    attempts: Counter[int]
    trained_steps: list[tuple[int, ...]]
    dropped: list[int]
    failures: Counter[int]
    cut: int


def roundtrip(checkpoint: Checkpoint) -> Checkpoint:
    """Through the wire form and back, as a real checkpoint travels."""
    record = json.loads(json.dumps(checkpoint.state_dict()))
    return Checkpoint.from_state_dict(record, fingerprint=checkpoint.fingerprint)


def deep(model: Model) -> Model:
    return copy.deepcopy(model)


# -- invariants ---------------------------------------------------------------
# Each takes the ledger and the model after a step and raises AssertionError.


def _failures(ledger: Ledger | GroupTable, ordinal: int) -> int:
    """A group's failures, from the ledger or (sample-level checks) its
    group table."""
    return ledger.failures(ordinal)


def check_model_agree(ledger: Ledger, model: Model) -> None:
    top = max([model.position, *model.status, ledger.next_ordinal]) + 2
    for o in range(top):
        expected = model.status.get(o)
        got = ledger.status(o)
        if o < ledger.cut:
            assert expected in RESOLVED, (o, expected)
            assert got is None
        elif expected is None:
            assert got == Status.UNSTAMPED, (o, got)
        else:
            assert got == expected, (o, got, expected)
        if expected not in RESOLVED:
            assert _failures(ledger, o) == model.attempts[o], (o, _failures(ledger, o))
    assert ledger.next_ordinal == model.position


def check_cut_lower_bound(ledger: Ledger, model: Model) -> None:
    assert ledger.cut == model.cut()
    for status in (*LIVE, Status.UNSTAMPED):
        for o in ledger.ordinals(status):
            assert o >= ledger.cut
    for o in range(ledger.cut):
        assert model.status.get(o) in RESOLVED


def check_cut_monotone(ledger: Ledger, model: Model) -> None:
    assert ledger.cut >= model.last_cut, (ledger.cut, model.last_cut)
    model.last_cut = ledger.cut


def check_live_entry(ledger: Ledger, model: Model) -> None:
    for o in range(ledger.cut, ledger.next_ordinal):
        assert ledger.status(o) in (*LIVE, *RESOLVED), (o, ledger.status(o))


def check_bounded_size(ledger: Ledger, model: Model) -> None:
    # Entries only at or above the cut: what the cut passed is forgotten.
    unresolved = sum(ledger.count(s) for s in (*LIVE, Status.UNSTAMPED))
    resolved_above = ledger.count(Status.TRAINED) + ledger.count(Status.DROPPED)
    assert ledger.size() == unresolved + resolved_above
    window = max(ledger.next_ordinal, ledger.filter_horizon) - ledger.cut
    carried = ledger.count(Status.UNSTAMPED)
    assert ledger.size() <= max(window, 0) + carried
    checkpoint = ledger.checkpoint()
    # The record grows with ranges and attempts, never with the run.
    assert checkpoint.size() <= 2 + 4 * ledger.size()


def check_no_duplicate(ledger: Ledger, model: Model) -> None:
    counts = Counter(o for step in model.trained_steps for o in step)
    assert all(n == 1 for n in counts.values()), counts.most_common(3)
    assert not set(counts) & set(model.dropped)


def check_retry_bound(ledger: Ledger, model: Model) -> None:
    if model.config.on_failure is FailurePolicy.RETRY:
        for o in model.dropped:
            assert model.failures[o] >= model.config.max_failures, (o, model.failures[o])


def check_counts(ledger: Ledger, model: Model) -> None:
    for status in Status:
        assert ledger.count(status) == len(list(ledger.ordinals(status))), status


def check_noted_index(ledger: Ledger | GroupTable, model: Model) -> None:
    """The checkpoint's index holds exactly the entries a checkpoint records."""
    recorded = {Status.BUFFERED, Status.TRAINED, Status.DROPPED, Status.UNSTAMPED}
    expected = {
        o
        for status in Status
        for o in ledger.ordinals(status)
        if status in recorded or _failures(ledger, o) > 0
    }
    groups = ledger._groups if isinstance(ledger, Ledger) else ledger
    assert set(groups._noted) == expected


INVARIANT_CHECKS: dict[str, Callable[[Ledger, Model], None]] = {
    "MODEL-AGREE": check_model_agree,
    "CUT-LOWER-BOUND": check_cut_lower_bound,
    "CUT-MONO": check_cut_monotone,
    "LIVE-ENTRY": check_live_entry,
    "BOUNDED-SIZE": check_bounded_size,
    "NO-DUP": check_no_duplicate,
    "RETRY-BOUND": check_retry_bound,
    "STATE-COUNTS": check_counts,
    "NOTED-INDEX": check_noted_index,
}


def check_all(ledger: Ledger, model: Model) -> None:
    for check in INVARIANT_CHECKS.values():
        check(ledger, model)


def drain(ledger: Ledger, model: Model) -> Ledger:
    """Run the stream to its end with no more failures, checking as it goes."""
    assert model.stream_len is not None
    for _ in range(4 * model.stream_len + 8):
        if ledger.drained:
            break
        step = ledger.stamp(7)
        model.stamp(7)
        ledger = step.ledger
        pending = list(ledger.ordinals(Status.PENDING))
        ledger = ledger.dispatch(pending).ledger
        model.move(pending, Status.PENDING, Status.OUTSTANDING)
        outstanding = list(ledger.ordinals(Status.OUTSTANDING))
        ledger = ledger.buffer(outstanding).ledger
        model.move(outstanding, Status.OUTSTANDING, Status.BUFFERED)
        buffered = list(ledger.ordinals(Status.BUFFERED))
        ledger = ledger.train(buffered).ledger
        model.train(buffered)
        check_all(ledger, model)
    assert ledger.drained, ledger
    return ledger


def check_exactly_once(model: Model) -> None:
    """NO-SKIP and NO-DUP over a drained lineage."""
    assert model.stream_len is not None
    counts = Counter(o for step in model.trained_steps for o in step)
    dropped = Counter(model.dropped)
    for o in range(model.stream_len):
        assert counts[o] + dropped[o] == 1, (o, counts[o], dropped[o])
    assert set(counts) | set(dropped) <= set(range(model.stream_len))
