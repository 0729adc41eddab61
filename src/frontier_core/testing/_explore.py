"""Exhaustive small-scope model checking of the real ledger's group table.

Not a model of the ledger: the real ``GroupTable`` class (the ledger's
private group table, which the ledger is at n = 1 with the group events
only: proofs/SAMPLES.md; ``_explore_samples`` checks the ledger itself,
n = 1 included), driven breadth first
through every state reachable within small bounds (stream length, batch
size, kills, failure policy), with duplicate states merged. In every state it
checks the invariants of proofs/INVARIANTS.md that can be read off the state
and the lineage; on every transition, the ones about transitions (the cut is
monotone, the filter keeps exactly the uncovered ordinals, the parent value
is untouched); and from every state it drains the stream without failures
and checks that every ordinal was trained exactly once or dropped.

Moves over one ordinal at a time reach every state that moves over sets do
(a set move is a sequence of single moves), so single moves plus one
whole-buffer training step and whole-batch stamps suffice for the state
space; the checker says how many states and transitions it explored.

A state is the ledger's value, the lineage, and the resume filter's horizon
while the filter is active: the ledger's equality leaves the horizon out (no
transition reads it), but FILTER-CLEARS and BOUNDED-SIZE are claims about
it, so two ledgers that differ in an active horizon are explored apart.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Protocol, TypeVar

import attrs

from .._checkpoint import Checkpoint
from .._errors import IllegalTransitionError
from .._events import FailurePolicy, Status
from .._groups import _FAIL_SHIFT, GroupTable, LedgerConfig
from .._transitions import TRANSITIONS, Move

_LIVE = (Status.PENDING, Status.OUTSTANDING, Status.BUFFERED)
_RESOLVED = (Status.TRAINED, Status.DROPPED)
#: The statuses each moving event is legal from, read off the table.
_SOURCES: dict[type[Move], frozenset[Status]] = {
    kind: frozenset(s for k, s in TRANSITIONS if k is kind) for kind, _ in TRANSITIONS
}


class InvariantViolation(AssertionError):
    """An invariant failed in an explored state; ``trace`` replays it."""

    def __init__(self, invariant: str, detail: str, trace: tuple[str, ...]) -> None:
        self.invariant = invariant
        self.detail = detail
        self.trace = trace
        steps = "\n  ".join(trace) or "(initial state)"
        super().__init__(f"{invariant}: {detail}\nreached by:\n  {steps}")


@attrs.frozen
class Bounds:
    """The small scope: a finite stream in batches, and a failure policy.
    Crashes are unbounded (see ``State``)."""

    stream_len: int = 5
    batch: int = 2
    on_failure: FailurePolicy = FailurePolicy.RETRY
    max_attempts: int = 2


@attrs.frozen
class Tally:
    """What the surviving run did, per ordinal: how many times it was
    resolved (trained or dropped: exactly-once means exactly one), and its
    failures (failed generations plus evictions) while unresolved.

    Trained and dropped are not told apart, and failures are forgotten once
    an ordinal is resolved: no invariant reads them after that, and keeping
    them would multiply the states by 2**n for nothing.
    """

    resolved: tuple[int, ...]
    failures: tuple[int, ...]

    @classmethod
    def empty(cls, n: int) -> Tally:
        return cls((0,) * n, (0,) * n)

    def resolve(self, ordinals: tuple[int, ...]) -> Tally:
        resolved = list(self.resolved)
        failures = list(self.failures)
        for o in ordinals:
            resolved[o] += 1
            failures[o] = 0
        return Tally(tuple(resolved), tuple(failures))

    def fail(self, ordinals: tuple[int, ...]) -> Tally:
        failures = list(self.failures)
        for o in ordinals:
            failures[o] += 1
        return attrs.evolve(self, failures=tuple(failures))


@attrs.frozen
class State:
    """A point of the exploration: the live ledger, the lineage, and the
    ledger's filter horizon while its filter is active (``None`` once the
    source has passed it: then no check reads it).

    There is no "last checkpoint" here, and no kill counter: the state after
    a crash depends only on the checkpoint it restarts from (and the resume
    options), never on what happened between that checkpoint and the crash.
    So every checkpoint branches at once into every resume from it, which
    covers a crash at any later moment before the next checkpoint, and the
    number of crashes is unbounded: the state space stays finite because the
    stream and the attempts are.
    """

    ledger: GroupTable
    lineage: Tally
    horizon: int | None

    @classmethod
    def of(cls, ledger: GroupTable, lineage: Tally) -> State:
        return cls(ledger, lineage, ledger.filter_horizon if ledger.filtering else None)


@attrs.frozen
class Report:
    """What an exploration covered."""

    bounds: Bounds
    states: int
    transitions: int
    ledgers: int
    drained_states: int
    illegal_events_checked: int
    checkpoints_checked: int


_Trace = Callable[[], tuple[str, ...]]
_S = TypeVar("_S", bound=Hashable)


class _FailureBounds(Protocol):
    """What ``retry_bound`` reads of either explorer's bounds."""

    @property
    def on_failure(self) -> FailurePolicy: ...
    @property
    def max_attempts(self) -> int: ...


def breadth_first(
    start: _S,
    successors: Callable[[_S, _Trace], Iterable[tuple[str, _S]]],
    visit: Callable[[_S, _Trace], None],
    snapshot: Callable[[_S], object],
) -> tuple[int, int]:
    """The search the explorers share: from ``start``, every state
    ``successors`` reaches (each labelled by its move), each distinct one
    ``visit``ed once with its trace, breadth first, so that the first
    violation is reached by a shortest trace. IMMUTABLE is checked here:
    ``snapshot`` of a state is the same after its successors were built as
    before. Returns the numbers of states and of transitions."""
    parents: dict[_S, tuple[_S, str] | None] = {start: None}

    def trace_of(state: _S) -> _Trace:
        def trace() -> tuple[str, ...]:
            steps: list[str] = []
            link = parents.get(state)
            while link is not None:
                parent, label = link
                steps.append(label)
                link = parents.get(parent)
            return tuple(reversed(steps))

        return trace

    visit(start, trace_of(start))
    queue = deque([start])
    transitions = 0
    while queue:
        state = queue.popleft()
        trace = trace_of(state)
        frozen = snapshot(state)
        for label, child in successors(state, trace):
            transitions += 1
            if child in parents:
                continue
            parents[child] = (state, label)
            visit(child, trace_of(child))
            queue.append(child)
        # IMMUTABLE: exploring every successor left the parent value as it was.
        if snapshot(state) != frozen:
            raise InvariantViolation("IMMUTABLE", "a transition changed its parent", trace())
    return len(parents), transitions


def explore(bounds: Bounds) -> Report:
    """Explore every reachable state within ``bounds``; raise
    ``InvariantViolation`` at the first broken invariant, with the shortest
    trace that reaches it (breadth first)."""
    config = LedgerConfig(
        on_failure=bounds.on_failure,
        max_attempts=bounds.max_attempts,
        stream_len=bounds.stream_len,
        fingerprint="explore",
    )
    first = GroupTable.start(config)
    start = State.of(first, Tally.empty(bounds.stream_len))
    #: Ledgers (with their active horizons) whose own invariants were
    #: checked: many states share one.
    ledgers: set[tuple[GroupTable, int | None]] = set()
    resumes: dict[Checkpoint, list[tuple[str, GroupTable]]] = {}
    counters = {"transitions": 0, "drained": 0, "illegal": 0, "checkpoints": 0}

    def visit(state: State, trace: _Trace) -> None:
        _check_lineage(state, bounds, trace)
        if (state.ledger, state.horizon) not in ledgers:
            ledgers.add((state.ledger, state.horizon))
            _check_ledger(state.ledger, trace)
            counters["illegal"] += _check_illegal(state.ledger, bounds, trace)
        if state.ledger.drained:
            counters["drained"] += 1
            _check_exactly_once(state, bounds, trace)

    states, counters["transitions"] = breadth_first(
        start,
        lambda state, trace: _successors(state, bounds, counters, resumes, trace),
        visit,
        lambda state: state.ledger.checkpoint(),
    )
    return Report(
        bounds=bounds,
        states=states,
        transitions=counters["transitions"],
        ledgers=len(ledgers),
        drained_states=counters["drained"],
        illegal_events_checked=counters["illegal"],
        checkpoints_checked=counters["checkpoints"],
    )


def _successors(
    state: State,
    bounds: Bounds,
    counters: dict[str, int],
    cache: dict[Checkpoint, list[tuple[str, GroupTable]]],
    trace: _Trace,
) -> Iterator[tuple[str, State]]:
    ledger, lineage = state.ledger, state.lineage

    def moved(after: GroupTable, lineage: Tally = lineage) -> State:
        # CUT-MONO within a process life.
        if after.cut < ledger.cut:
            raise InvariantViolation(
                "CUT-MONO", f"cut fell from {ledger.cut} to {after.cut}", trace()
            )
        return State.of(after, lineage)

    def failed(o: int, after: GroupTable, dropped: tuple[int, ...]) -> State:
        return moved(after, retry_bound(lineage, o, dropped, bounds, "RETRY-BOUND", trace))

    if not ledger.exhausted:
        step = ledger.stamp(bounds.batch)
        _check_filter(ledger, step.effect.stamped, step.effect.kept, trace)
        yield f"stamp {list(step.effect.stamped)}", moved(step.ledger)
    for o in ledger.ordinals(Status.PENDING):
        yield f"dispatch [{o}]", moved(ledger.dispatch([o]).ledger)
    for o in ledger.ordinals(Status.OUTSTANDING):
        yield f"buffer [{o}]", moved(ledger.buffer([o]).ledger)
        step = ledger.fail([o])
        yield f"fail [{o}]", failed(o, step.ledger, step.effect.dropped)
    buffered = tuple(ledger.ordinals(Status.BUFFERED))
    for o in buffered:
        step = ledger.evict([o])
        yield f"evict [{o}]", failed(o, step.ledger, step.effect.dropped)
        yield f"train [{o}]", moved(ledger.train([o]).ledger, lineage.resolve((o,)))
    if len(buffered) > 1:
        yield (
            f"train {list(buffered)}",
            moved(ledger.train(buffered).ledger, lineage.resolve(buffered)),
        )
    for save_buffer in (True, False):
        checkpoint = ledger.checkpoint(save_buffer=save_buffer)
        for label, resumed in _resumes(checkpoint, ledger.config, cache, counters, trace):
            yield (
                f"checkpoint save_buffer={save_buffer}; kill; {label}",
                State.of(resumed, lineage),
            )


def retry_bound(
    lineage: Tally,
    o: int,
    dropped: tuple[int, ...],
    bounds: _FailureBounds,
    invariant: str,
    trace: _Trace,
) -> Tally:
    """The lineage after a failed attempt of ``o`` (``dropped``: what the
    ledger dropped for it), checking the retry bound ``invariant`` of both
    explorers: attempts survive crashes, so no ordinal fails more often than
    the policy allows, and under retry none is dropped before its limit."""
    lin = lineage.fail((o,))
    if lin.failures[o] > bounds.max_attempts:
        raise InvariantViolation(invariant, f"ordinal {o} failed {lin.failures[o]} times", trace())
    if dropped:
        if bounds.on_failure is FailurePolicy.RETRY and lin.failures[o] < bounds.max_attempts:
            raise InvariantViolation(
                invariant, f"ordinal {o} dropped after {lin.failures[o]} failures", trace()
            )
        lin = lin.resolve(dropped)
    return lin


def _resumes(
    checkpoint: Checkpoint,
    config: LedgerConfig,
    cache: dict[Checkpoint, list[tuple[str, GroupTable]]],
    counters: dict[str, int],
    trace: _Trace,
) -> list[tuple[str, GroupTable]]:
    """Every ledger a crash after ``checkpoint`` can resume into. Many states
    share a checkpoint, so each distinct one is checked and resumed once."""
    if checkpoint in cache:
        return cache[checkpoint]
    # CKPT-ROUNDTRIP; the resume reads the record back, as a real restart does.
    record = json.loads(json.dumps(checkpoint.state_dict()))
    restored = Checkpoint.from_state_dict(record, fingerprint="explore")
    if restored != checkpoint:
        raise InvariantViolation("CKPT-ROUNDTRIP", "record read back differs", trace())
    counters["checkpoints"] += 1
    retained = tuple(restored.retained_ordinals())
    options: list[tuple[bool, tuple[int, ...]]] = [(False, ())]
    for r in range(len(retained) + 1):
        options.extend((True, evicted) for evicted in itertools.combinations(retained, r))
    out = []
    for load, evicted in options:
        resumed = GroupTable.resume(
            config, restored, load_replay_buffer=load, evicted_on_restore=evicted
        )
        _check_resume(restored, resumed.ledger, resumed.rewind_to, resumed.covered, trace)
        # RESUME-EXACT: a crash right after the resume loses nothing; with
        # the whole buffer restored the state it saves is the one it left.
        again = resumed.ledger.checkpoint()
        same = (again.cut, again.trained_above_cut, again.dropped_above_cut) == (
            restored.cut,
            restored.trained_above_cut,
            restored.dropped_above_cut,
        )
        if not same or (load and not evicted and again != restored):
            raise InvariantViolation("RESUME-EXACT", "a crash right after resume differs", trace())
        label = f"resume load_replay_buffer={load} evicted_on_restore={list(evicted)}"
        out.append((label, resumed.ledger))
    cache[checkpoint] = out
    return out


def _check_filter(ledger: GroupTable, stamped: range, kept: tuple[int, ...], trace: _Trace) -> None:
    expected = tuple(
        o
        for o in stamped
        if o >= ledger.cut and ledger.status(o) not in (*_RESOLVED, Status.BUFFERED)
    )
    if kept != expected:
        raise InvariantViolation("FILTER-COVERED", f"kept {kept}, expected {expected}", trace())
    if not ledger.filtering and kept != tuple(stamped):
        raise InvariantViolation(
            "FILTER-CLEARS", f"filter inactive but kept {kept} of {list(stamped)}", trace()
        )


def _check_resume(
    checkpoint: Checkpoint,
    ledger: GroupTable,
    rewind_to: int,
    covered: tuple[int, ...],
    trace: _Trace,
) -> None:
    if rewind_to != checkpoint.cut or ledger.cut != checkpoint.cut:
        raise InvariantViolation("RESUME-EXACT", f"rewound to {rewind_to}", trace())
    done = set(checkpoint.trained()) | set(checkpoint.dropped())
    if not done <= set(covered) <= done | set(checkpoint.retained_ordinals()):
        raise InvariantViolation("RESUME-EXACT", f"covered {covered} vs checkpoint", trace())


def _check_lineage(state: State, bounds: Bounds, trace: _Trace) -> None:
    ledger, lineage = state.ledger, state.lineage
    for o in range(bounds.stream_len):
        if lineage.resolved[o] > 1:
            raise InvariantViolation(
                "NO-DUP", f"ordinal {o} resolved {lineage.resolved[o]}x", trace()
            )
        if o < ledger.cut and lineage.resolved[o] != 1:
            raise InvariantViolation(
                "CUT-LOWER-BOUND", f"ordinal {o} below the cut {ledger.cut} is unresolved", trace()
            )
        live = ledger.status(o) in (*_LIVE, Status.UNSTAMPED)
        if live and lineage.resolved[o]:
            raise InvariantViolation("NO-DUP", f"resolved ordinal {o} is live again", trace())


def _check_ledger(ledger: GroupTable, trace: _Trace) -> None:
    """The invariants that read the ledger alone, in one pass over every
    entry it holds (from 0, not from the cut: none may lie below it)."""
    counts = [0] * len(Status)
    recorded: set[int] = set()
    for o, value in ledger._entries.items():
        status, attempts = Status(value & 7), value >> _FAIL_SHIFT
        counts[status] += 1
        if o < ledger.cut:
            raise InvariantViolation(
                "CUT-LOWER-BOUND", f"{status.name} entry {o} below the cut {ledger.cut}", trace()
            )
        if status in (Status.BUFFERED, *_RESOLVED, Status.UNSTAMPED) or attempts:
            recorded.add(o)
    if tuple(counts) != tuple(ledger.count(s) for s in Status):
        raise InvariantViolation("STATE-COUNTS", f"counts {counts} are off", trace())
    if set(ledger._noted) != recorded:
        raise InvariantViolation("NOTED-INDEX", "the checkpoint index is off", trace())
    for o in range(ledger.cut, ledger.next_ordinal):
        if ledger.status(o) not in (*_LIVE, *_RESOLVED):
            raise InvariantViolation("LIVE-ENTRY", f"stamped ordinal {o} has no entry", trace())
    window = max(ledger.next_ordinal, ledger.filter_horizon) - ledger.cut
    if ledger.size() > max(window, 0) + ledger.count(Status.UNSTAMPED):
        raise InvariantViolation(
            "BOUNDED-SIZE", f"{ledger.size()} entries, window {window}", trace()
        )


def _check_illegal(ledger: GroupTable, bounds: Bounds, trace: _Trace) -> int:
    """ILLEGAL-NOCHANGE for every class of illegal single-ordinal event here.

    Whether an event is legal, and what the error says, depends only on the
    ordinal's class (its status, or below the cut, or not yet stamped), so
    one ordinal of each class stands for all of them."""
    before = tuple(ledger._entries.items())
    classes: dict[object, int] = {}
    for o in range(bounds.stream_len + 1):
        key: object = ledger.status(o) if o >= ledger.cut else "resolved"
        if o >= ledger.next_ordinal and key == Status.UNSTAMPED:
            key = ("not yet stamped", ledger.failures(o) > 0)
        classes.setdefault(key, o)
    checked = 0
    for event, sources in _SOURCES.items():
        for o in classes.values():
            if ledger.status(o) in sources:
                continue
            try:
                ledger.apply(event([o]))
            except IllegalTransitionError as exc:
                if exc.ordinals != (o,) or exc.event != event.name:
                    raise InvariantViolation(
                        "ILLEGAL-NOCHANGE", f"error names {exc.event} {exc.ordinals}", trace()
                    ) from exc
            else:
                raise InvariantViolation(
                    "ILLEGAL-NOCHANGE",
                    f"{event.name} [{o}] accepted in {ledger.status(o)}",
                    trace(),
                )
            checked += 1
    if tuple(ledger._entries.items()) != before:
        raise InvariantViolation("ILLEGAL-NOCHANGE", "a refused event changed the ledger", trace())
    return checked


def _check_exactly_once(state: State, bounds: Bounds, trace: _Trace) -> None:
    """NO-SKIP and NO-DUP in a drained end state."""
    for o in range(bounds.stream_len):
        if state.lineage.resolved[o] != 1:
            raise InvariantViolation(
                "NO-SKIP" if state.lineage.resolved[o] == 0 else "NO-DUP",
                f"drained, yet ordinal {o} was resolved {state.lineage.resolved[o]}x",
                trace(),
            )
