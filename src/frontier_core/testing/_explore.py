"""Exhaustive small-scope model checking of the real ledger.

Not a model of the ledger: the real ``Ledger`` class, a stream of a few
groups of n siblings (n = 1 by default: a prompt-level integration), driven
breadth first through every state reachable within small bounds (stream
length, batch size, group size, failure policy, granularity), with
duplicate states merged. Every transition of one sibling or one group at a
time: stamp a batch, dispatch a group, seal or fail a running sibling's
current attempt, restart an unstarted sibling, buffer, fail, evict or train
a whole group (and the whole buffer), and a checkpoint at every state (with
and without the buffer, with and without the sealed siblings, each read
back through JSON) followed by a crash resumed in every way: the buffer
restored or not, every subset of the retained groups evicted on restore,
and holding every subset of the siblings the crashed run had sealed, or all
it had sealed or was running (a running one sealed after the checkpoint,
into the journal, under its attempt or under a newer one), with
``attempt_floor`` one past every attempt the crashed run may have handed
out after the checkpoint.

Crashes are unbounded: the state after a crash depends only on the
checkpoint it restarts from (and the resume options), never on what
happened between that checkpoint and the crash, so every checkpoint
branches at once into every resume from it, which covers a crash at any
later moment before the next checkpoint; the state space stays finite
because the stream and the failures are.

In every state it checks the invariants of proofs/INVARIANTS.md (of the
groups) and proofs/SAMPLES.md (of the siblings) that can be read off the
state and the lineage; on every transition, the ones about transitions (the
cut is monotone, the filter keeps exactly the uncovered ordinals, the
attempt counter never goes down, the parent value is untouched); from every
drained state, that every group was trained exactly once or dropped; and in
every state, every result the ledger could be sent (each sibling under its
current attempt, a sealed sibling's own attempt, another sibling's, an
attempt no longer held, and one never handed out): exactly the current one
is accepted and every other is fenced without a change, or refused as
illegal. Moves over one group at a time reach every state that moves over
sets do (a set move is a sequence of single moves).

Attempt numbers grow with every crash (the counter never goes down), so
states are identified up to a renaming of attempts: the ledger only tests
attempts for equality with one another and against its counter, and hands
out new ones from the counter, so two ledgers whose groups agree and whose
siblings agree up to an injective renaming of their attempts (each below its
counter) have the same futures up to that renaming. A state's identity is
therefore its groups, each sibling's status with its attempt replaced by its
rank among the attempts the ledger holds, and whether the ledger handed out
attempts it no longer shows (whose results must stay fenced). The failed
attempt an unstarted sibling keeps is not part of it: like every attempt
that is not current, it can only be fenced. The explorer reads the siblings
through the public queries (``sibling``, ``running``, ``held``), never the
representation. The resume filter's horizon, which the ledger's equality
leaves out (no transition reads it), is part of a state while the filter is
active: FILTER-CLEARS and BOUNDED-SIZE are claims about it.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, TypeVar

import attrs

from .._checkpoint import Checkpoint
from .._errors import IllegalTransitionError
from .._events import FailurePolicy, Granularity, Lease, Sibling, Status
from .._groups import _FAIL_SHIFT, GroupTable, LedgerConfig
from .._ledger import Ledger, Resumed
from .._transitions import TRANSITIONS, Move, failure_outcome, setback_outcome

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
    """The small scope: a finite stream of groups of ``samples`` siblings
    (1: a prompt-level integration), yielded in batches, under a failure
    policy and a granularity. Crashes are unbounded (module docstring)."""

    stream_len: int = 3
    batch: int = 2
    samples: int = 1
    on_failure: FailurePolicy = FailurePolicy.RETRY
    max_failures: int = 2
    granularity: Granularity = Granularity.SIBLING


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
class Report:
    """What an exploration covered."""

    bounds: Bounds
    states: int
    transitions: int
    ledgers: int
    drained_states: int
    results_checked: int
    illegal_events_checked: int
    checkpoints_checked: int
    resumes_checked: int
    landed_at_dispatch: int


_Trace = Callable[[], tuple[str, ...]]
_S = TypeVar("_S", bound=Hashable)


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


#: A resume's label, ledger, filter horizon and shape (``State`` but the lineage).
_Resumed = tuple[str, Ledger, "int | None", tuple[object, ...]]


@attrs.frozen
class State:
    """A point of the exploration: the live ledger (not part of the
    identity), the lineage, the resume filter's horizon while active, and
    the ledger's shape (``_shape``). No last checkpoint and no kill
    counter: a crash depends only on the checkpoint it restarts from."""

    ledger: Ledger = attrs.field(eq=False)
    lineage: Tally
    horizon: int | None
    shape: tuple[object, ...]

    @classmethod
    def of(cls, ledger: Ledger, lineage: Tally) -> State:
        inner = ledger._groups
        horizon = inner.filter_horizon if inner.filtering else None
        return cls(ledger, lineage, horizon, _shape(ledger))


#: The attempt of an unstarted sibling: the ledger does not show it.
_HIDDEN = -1


def _detail(ledger: Ledger) -> dict[tuple[int, int], tuple[Sibling, int]]:
    """Every sibling the ledger shows detail of, by its public queries:
    ``(status, attempt)``, ``_HIDDEN`` for an unstarted one's."""
    out = {(x.ordinal, x.sibling): (Sibling.RUNNING, x.attempt) for x in ledger.running()}
    out.update({(x.ordinal, x.sibling): (Sibling.SEALED, x.attempt) for x in ledger.held()})
    for o in ledger.ordinals(Status.OUTSTANDING):
        for s in range(ledger.config.samples):
            if (o, s) not in out and ledger.sibling(o, s) is not None:
                out[(o, s)] = (Sibling.UNSTARTED, _HIDDEN)
    return dict(sorted(out.items()))


def _shape(ledger: Ledger) -> tuple[object, ...]:
    """The ledger's identity up to a renaming of attempts (module docstring)."""
    detail = _detail(ledger)
    shown = sorted({a for _, a in detail.values() if a != _HIDDEN})
    rank = {a: i for i, a in enumerate(shown)}
    siblings = tuple((o, s, status, rank.get(a, _HIDDEN)) for (o, s), (status, a) in detail.items())
    return (ledger._groups, siblings, ledger.next_attempt > len(shown))


def explore(bounds: Bounds) -> Report:
    """Explore every reachable state within ``bounds``; raise
    ``InvariantViolation`` at the first broken invariant, with the shortest
    trace that reaches it (breadth first)."""
    config = LedgerConfig(
        on_failure=bounds.on_failure,
        max_failures=bounds.max_failures,
        stream_len=bounds.stream_len,
        fingerprint="explore",
        samples=bounds.samples,
        granularity=bounds.granularity,
    )
    start = State.of(Ledger.start(config), Tally.empty(bounds.stream_len))
    ledgers: set[tuple[Ledger, int | None]] = set()
    resumes: dict[object, list[_Resumed]] = {}
    counters = dict.fromkeys(
        (
            "transitions",
            "drained",
            "results",
            "illegal",
            "checkpoints",
            "resumes",
            "landed_at_dispatch",
        ),
        0,
    )

    def visit(state: State, trace: _Trace) -> None:
        _check_lineage(state, bounds, trace)
        if (state.ledger, state.horizon) not in ledgers:
            ledgers.add((state.ledger, state.horizon))
            _check_ledger(state.ledger._groups, trace)
            _check_detail(state.ledger, trace)
            counters["results"] += _check_results(state.ledger, trace)
            counters["illegal"] += _check_illegal(state.ledger, bounds, trace)
        if state.ledger.drained:
            counters["drained"] += 1
            for o in range(bounds.stream_len):
                if state.lineage.resolved[o] != 1:
                    raise InvariantViolation(
                        "NO-SKIP" if state.lineage.resolved[o] == 0 else "NO-DUP",
                        f"drained, yet group {o} was resolved {state.lineage.resolved[o]}x",
                        trace(),
                    )
            if state.ledger.sibling_count():
                raise InvariantViolation(
                    "SIBLING-DETAIL-BOUNDED", "a drained ledger holds sibling detail", trace()
                )

    states, counters["transitions"] = breadth_first(
        start,
        lambda state, trace: _successors(state, bounds, counters, resumes, trace),
        visit,
        lambda state: (state.ledger.checkpoint(), _detail(state.ledger), state.ledger.next_attempt),
    )
    return Report(
        bounds=bounds,
        states=states,
        transitions=counters["transitions"],
        ledgers=len(ledgers),
        drained_states=counters["drained"],
        results_checked=counters["results"],
        illegal_events_checked=counters["illegal"],
        checkpoints_checked=counters["checkpoints"],
        resumes_checked=counters["resumes"],
        landed_at_dispatch=counters["landed_at_dispatch"],
    )


def _successors(
    state: State,
    bounds: Bounds,
    counters: dict[str, int],
    cache: dict[object, list[_Resumed]],
    trace: _Trace,
) -> Iterator[tuple[str, State]]:
    ledger, lineage = state.ledger, state.lineage
    inner = ledger._groups
    n = bounds.samples
    detail = _detail(ledger)

    def moved(after: Ledger, lin: Tally = lineage) -> State:
        if after.cut < inner.cut:
            raise InvariantViolation(
                "CUT-MONO", f"cut fell from {inner.cut} to {after.cut}", trace()
            )
        if after.next_attempt < ledger.next_attempt:
            raise InvariantViolation(
                "ATTEMPT-MONOTONE",
                f"counter fell from {ledger.next_attempt} to {after.next_attempt}",
                trace(),
            )
        return State.of(after, lin)

    def failed(
        o: int, after: Ledger, dropped: tuple[int, ...], invariant: str = "RETRY-BOUND"
    ) -> State:
        return moved(after, _retry_bound(lineage, o, dropped, bounds, invariant, trace))

    def fresh(leases: tuple[Lease, ...], wanted: list[tuple[int, int]]) -> None:
        """ATTEMPT-MONOTONE: the attempts handed out are new (at or above
        the counter), distinct, one per sibling asked for, and running."""
        attempts = [x.attempt for x in leases]
        if sorted(x[:2] for x in leases) != sorted(wanted) or len(set(attempts)) != len(attempts):
            raise InvariantViolation("ATTEMPT-MONOTONE", f"leases {leases} for {wanted}", trace())
        if any(a < ledger.next_attempt for a in attempts):
            raise InvariantViolation(
                "ATTEMPT-MONOTONE", f"leases {leases} reuse attempts below the counter", trace()
            )

    if not inner.exhausted:
        step = ledger.stamp(bounds.batch)
        _check_filter(inner, step.effect.stamped, step.effect.kept, trace)
        if (
            step.ledger.sibling_count() != ledger.sibling_count()
            or step.ledger.next_attempt != ledger.next_attempt
        ):
            raise InvariantViolation(
                "SAMPLE-MODEL-AGREE", "a stamp changed sibling detail", trace()
            )
        yield f"stamp {list(step.effect.stamped)}", moved(step.ledger)

    for o in inner.ordinals(Status.PENDING):
        step = ledger.dispatch([o])
        held = sorted(
            Lease(o, s, a) for (g, s), (st, a) in detail.items() if g == o and st is Sibling.SEALED
        )
        # REUSE-SOUND: the held siblings come back, the others start.
        if list(step.effect.reused) != held:
            raise InvariantViolation("REUSE-SOUND", f"reused {step.effect.reused}", trace())
        fresh(step.effect.leases, [(o, s) for s in range(n) if (o, s) not in detail])
        whole = len(held) == n
        if step.effect.landed != ((o,) if whole else ()):
            raise InvariantViolation(
                "REUSE-SOUND", f"dispatch of {o} landed {step.effect.landed}", trace()
            )
        counters["landed_at_dispatch"] += whole
        yield f"dispatch [{o}]", moved(step.ledger)

    for (o, s), (status, a) in sorted(detail.items()):
        if inner.status(o) is not Status.OUTSTANDING:
            continue
        lease = Lease(o, s, a)
        if status is Sibling.RUNNING:
            step = ledger.seal([lease])
            others = all(
                detail.get((o, t), (None,))[0] is Sibling.SEALED for t in range(n) if t != s
            )
            if step.effect.sealed != (lease,) or step.effect.landed != ((o,) if others else ()):
                raise InvariantViolation("ATTEMPT-FENCING", f"seal {lease}: {step.effect}", trace())
            if not others and step.ledger.sibling(o, s) != (Sibling.SEALED, a):
                raise InvariantViolation("ATTEMPT-FENCING", f"{lease} not sealed", trace())
            if others and step.ledger.status(o) is not Status.BUFFERED:
                raise InvariantViolation("SAMPLE-EXACTLY-ONCE", f"{o} did not land", trace())
            yield f"seal {tuple(lease)}", moved(step.ledger)
            step = ledger.fail_sample([lease])
            _check_sample_failure(ledger, bounds, lease, step.ledger, step.effect, trace)
            yield (
                f"fail_sample {tuple(lease)}",
                failed(o, step.ledger, step.effect.dropped, "SAMPLE-RETRY-BOUND"),
            )
        elif status is Sibling.UNSTARTED:
            step = ledger.restart([(o, s)])
            fresh(step.effect.leases, [(o, s)])
            yield f"restart {(o, s)}", moved(step.ledger)

    for o in inner.ordinals(Status.OUTSTANDING):
        step = ledger.buffer([o])
        if any(g == o for g, _ in _detail(step.ledger)):
            raise InvariantViolation(
                "ATTEMPT-FENCING", f"group {o} buffered whole but kept its detail", trace()
            )
        yield f"buffer [{o}]", moved(step.ledger)
        step = ledger.fail([o])
        if any(g == o for g, _ in _detail(step.ledger)):
            raise InvariantViolation(
                "ATTEMPT-FENCING", f"group {o} failed whole but kept its detail", trace()
            )
        yield f"fail [{o}]", failed(o, step.ledger, step.effect.dropped)
    buffered = tuple(inner.ordinals(Status.BUFFERED))
    for o in buffered:
        step = ledger.evict([o])
        yield f"evict [{o}]", failed(o, step.ledger, step.effect.dropped)
        yield f"train [{o}]", moved(ledger.train([o]).ledger, lineage.resolve((o,)))
    if len(buffered) > 1:
        yield (
            f"train {list(buffered)}",
            moved(ledger.train(buffered).ledger, lineage.resolve(buffered)),
        )

    # What a resume may hold: any subset of the siblings the crashed run
    # had sealed (saved with the checkpoint or journaled); or every sibling
    # it had sealed or was running, each running one sealed after the
    # checkpoint into the journal, under its attempt or (restarted after
    # the checkpoint) under a newer one. The crashed run may have handed out
    # one new attempt per running sibling after the checkpoint: the resume
    # is told so (``attempt_floor``), as a journal would tell it.
    sealed = tuple(
        sorted(Lease(o, s, a) for (o, s), (st, a) in detail.items() if st is Sibling.SEALED)
    )
    running = tuple(
        sorted(Lease(o, s, a) for (o, s), (st, a) in detail.items() if st is Sibling.RUNNING)
    )
    held_options = [
        held for r in range(len(sealed) + 1) for held in itertools.combinations(sealed, r)
    ]
    floor = ledger.next_attempt + len(running)
    if running:
        held_options.append(tuple(sorted(sealed + running)))
        newer = tuple(
            Lease(x.ordinal, x.sibling, ledger.next_attempt + i) for i, x in enumerate(running)
        )
        held_options.append(tuple(sorted(sealed + newer)))
    seen = []
    for save_buffer in (True, False):
        # The sealed siblings in the record change nothing a resume builds
        # (it is told what it holds); both records are read back and checked.
        checkpoints = [
            ledger.checkpoint(save_buffer=save_buffer, save_sealed=x) for x in (True, False)
        ]
        if checkpoints[0] in seen:
            continue  # nothing buffered: the same record either way
        seen.append(checkpoints[0])
        for label, resumed, horizon, shape in _resumes(
            ledger, checkpoints, held_options, floor, cache, counters, trace
        ):
            yield (
                f"checkpoint save_buffer={save_buffer}; kill; {label}",
                State(resumed, lineage, horizon, shape),
            )


def _check_sample_failure(
    ledger: Ledger,
    bounds: Bounds,
    lease: Lease,
    after: Ledger,
    effect: object,
    trace: _Trace,
) -> None:
    """A failed sample of a current attempt, by the statement: one failure
    of the group (``sibling``: only it is generated again, unless
    the policy drops the group) or a failure of the whole group (``group``)."""
    o, s, _ = lease
    failures = ledger.failures(o)
    if bounds.granularity is Granularity.SIBLING:
        status, left = setback_outcome(bounds.on_failure, bounds.max_failures, failures)
        expected_restart = ((o, s),) if status is Status.OUTSTANDING else ()
    else:
        status, left = failure_outcome(
            bounds.on_failure, bounds.max_failures, failures, stamped=True
        )
        expected_restart = ()
    got = after.status(o)
    if status is Status.DROPPED and got is None:
        got = Status.DROPPED  # resolved, and the cut passed it
    restart = getattr(effect, "restart", None)
    if got is not status or restart != expected_restart:
        raise InvariantViolation(
            "SAMPLE-RETRY-BOUND",
            f"fail_sample {tuple(lease)} after {failures} failures: {got}, restart {restart}",
            trace(),
        )
    kept = [k for k in _detail(after) if k[0] == o]
    if status is Status.OUTSTANDING:
        if after.sibling(o, s) != (Sibling.UNSTARTED, None) or after.failures(o) != left:
            raise InvariantViolation("SAMPLE-RETRY-BOUND", f"{(o, s)} not unstarted", trace())
    elif kept:
        raise InvariantViolation(
            "ATTEMPT-FENCING", f"group {o} left outstanding but kept its detail", trace()
        )


def _resumes(
    ledger: Ledger,
    checkpoints: list[Checkpoint],
    held_options: list[tuple[Lease, ...]],
    floor: int,
    cache: dict[object, list[_Resumed]],
    counters: dict[str, int],
    trace: _Trace,
) -> list[_Resumed]:
    """Every ledger a crash after the checkpoint can resume into, holding
    each of ``held_options``. Cached: many states share all three."""
    key = (checkpoints[0], tuple(held_options), floor)
    if key in cache:
        return cache[key]
    # SAMPLE-CKPT-ROUNDTRIP: the resume reads the record back, as a restart does.
    restored = []
    for checkpoint in checkpoints:
        record = json.loads(json.dumps(checkpoint.state_dict()))
        back = Checkpoint.from_state_dict(record, fingerprint="explore")
        if back != checkpoint:
            raise InvariantViolation("SAMPLE-CKPT-ROUNDTRIP", "record read back differs", trace())
        restored.append(back)
    counters["checkpoints"] += 1
    with_sealed = restored[0]
    if with_sealed.sealed != tuple(ledger.held()) or restored[1].sealed:
        raise InvariantViolation("SAMPLE-CKPT-ROUNDTRIP", "the record's sealed is off", trace())
    config = ledger.config
    inner = with_sealed
    retained = tuple(inner.retained_ordinals())
    loads: list[tuple[bool, tuple[int, ...]]] = [(False, ())]
    for r in range(len(retained) + 1):
        loads.extend((True, evicted) for evicted in itertools.combinations(retained, r))
    resolved = set(inner.trained()) | set(inner.dropped())
    out: list[_Resumed] = []
    for load, evicted in loads:
        restored_groups = set(retained) - set(evicted) if load else set()
        for held in held_options:
            resumed = Ledger.resume(
                config,
                with_sealed,
                load_replay_buffer=load,
                evicted_on_restore=evicted,
                sealed=held,
                attempt_floor=floor,
            )
            counters["resumes"] += 1
            _check_resume(floor, with_sealed, held, resolved, restored_groups, resumed, trace)
            # RESUME-EXACT: a crash right after the resume loses nothing;
            # with the whole buffer restored the groups' record it saves is
            # the one it left.
            again = resumed.ledger.checkpoint()
            kept = ["cut", "trained_above_cut", "dropped_above_cut"]
            if load and not evicted:
                kept += ["retained", "failures"]
            if any(getattr(again, f) != getattr(with_sealed, f) for f in kept):
                raise InvariantViolation(
                    "RESUME-EXACT", "a crash right after resume differs", trace()
                )
            label = (
                f"resume load_replay_buffer={load} evicted_on_restore={list(evicted)} "
                f"sealed={[tuple(x) for x in held]} attempt_floor={floor}"
            )
            after = State.of(resumed.ledger, lineage=Tally((), ()))
            out.append((label, resumed.ledger, after.horizon, after.shape))
    cache[key] = out
    return out


def _check_resume(
    crashed: int,
    checkpoint: Checkpoint,
    held: tuple[Lease, ...],
    resolved: set[int],
    restored: set[int],
    resumed: Resumed,
    trace: _Trace,
) -> None:
    ledger = resumed.ledger
    cut = checkpoint.cut
    if resumed.rewind_to != cut or ledger.cut != cut:
        raise InvariantViolation("RESUME-EXACT", "rewound elsewhere than the cut", trace())
    covered = set(resumed.covered)
    if not resolved <= covered <= resolved | set(checkpoint.retained_ordinals()):
        raise InvariantViolation("RESUME-EXACT", f"covered {resumed.covered} vs record", trace())
    # REUSE-SOUND: held siblings of groups that need generation are kept,
    # the others ignored; nothing else is kept.
    needed = [x for x in held if x.ordinal >= cut and x.ordinal not in resolved | restored]
    others = [x for x in held if x not in needed]
    if list(resumed.reused) != needed or list(resumed.ignored) != others:
        raise InvariantViolation(
            "REUSE-SOUND", f"reused {resumed.reused}, ignored {resumed.ignored}", trace()
        )
    if sorted(ledger.held()) != needed or list(ledger.running()):
        raise InvariantViolation("REUSE-SOUND", "the resumed detail is not the held", trace())
    # ATTEMPT-MONOTONE: above the crashed run's counter (``crashed``), the
    # checkpoint's, and every held attempt.
    floor = max([crashed, checkpoint.next_attempt] + [x.attempt + 1 for x in held])
    if ledger.next_attempt < floor:
        raise InvariantViolation(
            "ATTEMPT-MONOTONE", f"resumed counter {ledger.next_attempt} < {floor}", trace()
        )


def _check_detail(ledger: Ledger, trace: _Trace) -> None:
    """SIBLING-DETAIL-BOUNDED and the attempts' identity, from the state."""
    n = ledger.config.samples
    detail = _detail(ledger)
    groups: dict[int, list[Sibling]] = {}
    for (o, s), (status, a) in detail.items():
        groups.setdefault(o, []).append(status)
        if s >= n or a >= ledger.next_attempt:
            raise InvariantViolation(
                "ATTEMPT-MONOTONE", f"sibling {(o, s)} under attempt {a}", trace()
            )
    attempts = [a for _, a in detail.values() if a != _HIDDEN]
    if len(set(attempts)) != len(attempts):
        raise InvariantViolation("ATTEMPT-FENCING", f"attempts {attempts} repeat", trace())
    for o, statuses in groups.items():
        group = ledger.status(o)
        if group is Status.OUTSTANDING:
            if statuses.count(Sibling.SEALED) == n:
                raise InvariantViolation(
                    "SAMPLE-EXACTLY-ONCE", f"group {o} has all {n} sealed, not landed", trace()
                )
        elif group not in (Status.UNSTAMPED, Status.PENDING) or set(statuses) != {Sibling.SEALED}:
            raise InvariantViolation(
                "SIBLING-DETAIL-BOUNDED", f"{group} group {o} holds {statuses}", trace()
            )
    if ledger.sibling_count() != len(detail) or ledger.sibling_count() > n * len(groups):
        raise InvariantViolation(
            "SIBLING-DETAIL-BOUNDED", f"size {ledger.sibling_count()}", trace()
        )
    if ledger.checkpoint().sealed != tuple(ledger.held()):
        raise InvariantViolation("SAMPLE-CKPT-ROUNDTRIP", "checkpoint.sealed is off", trace())


def _check_results(ledger: Ledger, trace: _Trace) -> int:
    """ATTEMPT-FENCING in this state, for every class of result: each
    sibling under its own attempt when it is not running (a second seal, a
    late answer of a failed attempt), under another sibling's attempt, and
    under an attempt the ledger no longer holds. Exactly the current attempt
    of a running sibling is accepted (a successor); every other result is
    fenced and changes nothing. Which attempt stands for a class does not
    matter: the ledger only tests attempts for equality."""
    n = ledger.config.samples
    stream = ledger.config.stream_len or 0
    detail = _detail(ledger)
    present = sorted({a for _, a in detail.values() if a != _HIDDEN})
    absent = next((a for a in range(ledger.next_attempt) if a not in present), None)
    checked = 0
    for o in range(stream):
        for s in range(n):
            own = detail.get((o, s))
            tries = {a for a in present if own is None or a != own[1]}
            tries = {min(tries)} if tries else set()
            if absent is not None:
                tries.add(absent)
            if own is not None and own[0] is Sibling.SEALED:
                tries.add(own[1])
            for a in sorted(tries):
                lease = Lease(o, s, a)
                for method in ("seal", "fail_sample"):
                    step = getattr(ledger, method)([lease])
                    if step.effect.fenced != (lease,) or step.ledger != ledger:
                        raise InvariantViolation(
                            "ATTEMPT-FENCING", f"{method} {tuple(lease)} was not fenced", trace()
                        )
                    checked += 1
    return checked


def _check_illegal(ledger: Ledger, bounds: Bounds, trace: _Trace) -> int:
    """ILLEGAL-NOCHANGE and SAMPLE-ILLEGAL-NOCHANGE: every group event from a
    status the table has no move for, a result under an attempt never
    handed out, a sibling outside the group, and a restart of a sibling that
    is not unstarted each raise, name the event and the ordinal, and change
    nothing."""
    n = bounds.samples
    before = (ledger.checkpoint(), ledger.next_attempt, _detail(ledger))
    # Whether an event is legal, and what the error says, depends only on
    # the group's class (its status, or below the cut, or not yet stamped
    # with or without failures) and its siblings' statuses: one group per
    # class stands for all of them.
    detail = _detail(ledger)
    classes: dict[object, int] = {}
    for o in range(bounds.stream_len + 1):
        key: object = ledger.status(o) if o >= ledger.cut else "resolved"
        if o >= ledger.next_ordinal and key == Status.UNSTAMPED:
            key = ("not yet stamped", ledger.failures(o) > 0)
        siblings = tuple(detail.get((o, s), (None,))[0] for s in range(n))
        classes.setdefault((key, siblings), o)
    def event(kind: type[Move]) -> Callable[[list[Any]], object]:
        return lambda args: ledger.apply(kind(args))

    calls: list[tuple[str, int, Callable[[list[Any]], object], list[Any]]] = []
    for o in classes.values():
        for kind, sources in _SOURCES.items():
            if ledger.status(o) not in sources:
                calls.append((kind.name, o, event(kind), [o]))
        for bad in (Lease(o, 0, ledger.next_attempt), Lease(o, n, 0)):
            calls.append(("seal", o, ledger.seal, [bad]))
            calls.append(("fail_sample", o, ledger.fail_sample, [bad]))
        for s in range(n + 1):
            if s < n and ledger.sibling(o, s) == (Sibling.UNSTARTED, None):
                continue
            calls.append(("restart", o, ledger.restart, [(o, s)]))
    for name, o, call, args in calls:
        try:
            call(args)
        except IllegalTransitionError as exc:
            if exc.ordinals != (o,) or exc.event != name:
                raise InvariantViolation(
                    "ILLEGAL-NOCHANGE",
                    f"{name} of {o}: the error names {exc.event} {exc.ordinals}",
                    trace(),
                ) from exc
            continue
        raise InvariantViolation(
            "ILLEGAL-NOCHANGE", f"{name} of {o} accepted in {ledger.status(o)}", trace()
        )
    if (ledger.checkpoint(), ledger.next_attempt, _detail(ledger)) != before:
        raise InvariantViolation("ILLEGAL-NOCHANGE", "a refused event changed it", trace())
    return len(calls)


def _retry_bound(
    lineage: Tally,
    o: int,
    dropped: tuple[int, ...],
    bounds: Bounds,
    invariant: str,
    trace: _Trace,
) -> Tally:
    """The lineage after a failure of group ``o`` (``dropped``: what the
    ledger dropped for it), checking the retry bound ``invariant`` (a whole
    group's failure or a failed sample's): failures survive crashes, so no
    group fails more often than the policy allows, and under retry none is
    dropped before its limit."""
    lin = lineage.fail((o,))
    if lin.failures[o] > bounds.max_failures:
        raise InvariantViolation(invariant, f"ordinal {o} failed {lin.failures[o]} times", trace())
    if dropped:
        if bounds.on_failure is FailurePolicy.RETRY and lin.failures[o] < bounds.max_failures:
            raise InvariantViolation(
                invariant, f"ordinal {o} dropped after {lin.failures[o]} failures", trace()
            )
        lin = lin.resolve(dropped)
    return lin


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
        status, failures = Status(value & 7), value >> _FAIL_SHIFT
        counts[status] += 1
        if o < ledger.cut:
            raise InvariantViolation(
                "CUT-LOWER-BOUND", f"{status.name} entry {o} below the cut {ledger.cut}", trace()
            )
        if status in (Status.BUFFERED, *_RESOLVED, Status.UNSTAMPED) or failures:
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


