"""A stateful test harness for framework authors who embed frontier_core.

The ledger is checked against a naive model in this project's own tests;
what those cannot check is the *integration*: the loader that must restart at
the cut, the replay buffer that must be saved with the ledger, the retry
queue, the checkpoint that must hold every piece from one moment. This module
drives an integration through random interleavings of the events a real run
sees (the source yields, prompts are dispatched, groups land or fail,
training steps run, checkpoints are written, the process dies and resumes
from one of them) with Hypothesis, and checks exactly-once coverage at the
end, after draining the stream.

The verdict never trusts the integration: the harness keeps its own lineage
(which training step trained which ordinals, which were dropped, how often
each failed), saves a copy of it with every checkpoint and truncates it to
that copy on a crash, exactly as the surviving run's history is truncated.
Every rule calls ``note()``, so a failure prints the shortest program
Hypothesis found, one hook call per line, ready to paste into a test.

The integration implements ``Integration`` (eleven small hooks) and runs
``run_integration_test(MyIntegration)``, or collects
``integration_machine(MyIntegration).TestCase`` with pytest. The
sample-level harness (``_sample_harness.py``: a group's siblings, attempts
and fencing) is built on this module's ``_Wiring`` and ``_Machine``: the
lineage, the checkpoints and crashes, the failure policy's checks, the drain
and the verdict are this module's, for both. Importing this module imports
Hypothesis; ``import frontier_core`` does not import it.
"""

from __future__ import annotations

import abc
import contextlib
import types
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, cast

import attrs
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)


class _Wiring(abc.ABC):
    """The hooks both harnesses call the same way: a run's start, the
    source, whole-group failures, checkpoints and crashes. The public bases
    (``Integration``, ``SampleIntegration``) add how work is handed out,
    comes back and is trained."""

    #: Ordinals the source yields in a whole run (epochs times dataset length).
    stream_len: int
    #: If set, nothing may be dropped before failing this many times in the
    #: surviving lineage (1 under the ``drop`` policy, ``max_attempts``
    #: under ``retry``); ``None`` skips that check.
    max_attempts: int | None = None

    @abc.abstractmethod
    def start(self) -> None:
        """Begin a fresh run: nothing yielded, nothing trained."""

    @abc.abstractmethod
    def stamp(self, n: int) -> Iterable[int]:
        """Let the source yield about ``n`` more prompts (a batch: the
        integration picks the size, and may yield nothing at the end of the
        stream). Returns the ordinals that became pending: those the resume
        filter kept."""

    @abc.abstractmethod
    def dispatch(self, n: int) -> object:
        """Hand out up to ``n`` pending prompts (each base says what it
        returns)."""

    @abc.abstractmethod
    def fail(self, ordinals: list[int]) -> Iterable[int]:
        """Generation failed for these dispatched prompts. Returns the
        ordinals the failure policy dropped (resolved without training); the
        others must come back through ``dispatch``."""

    @abc.abstractmethod
    def train(self, ordinals: list[int]) -> object:
        """One training step over these buffered groups (each base says
        what it returns)."""

    @abc.abstractmethod
    def checkpoint(self) -> object:
        """Write a checkpoint (everything a restart needs, from one moment)
        and return it; the harness treats it as opaque and may hand any
        earlier one back to ``resume`` (a newer one was lost)."""

    @abc.abstractmethod
    def crash(self) -> None:
        """The process dies: forget every piece of in-memory state."""

    @abc.abstractmethod
    def resume(self, checkpoint: object) -> Iterable[int]:
        """Restart from ``checkpoint`` after a ``crash``. Returns the
        ordinals whose groups the restored replay buffer holds (they may be
        trained without another dispatch; empty if the buffer is not
        restored)."""

    def close(self) -> None:  # noqa: B027 (optional hook, empty by default)
        """Release resources (an event loop, worker processes) at the end of
        a test case, whatever its outcome. Optional."""


class Integration(_Wiring):
    """What the harness needs of an integration: one method per event.

    A new instance is built for every test case and ``start()`` begins a
    fresh run. The harness calls the hooks only with legal arguments that it
    derives from its own record: ``land``, ``fail`` and ``train`` receive
    ordinals that a ``dispatch`` returned (or ``resume`` restored) in this
    process life and that were not released since. Any exception a hook
    raises fails the test with the program that led to it.
    """

    @abc.abstractmethod
    def dispatch(self, n: int) -> Iterable[int]:
        """Hand up to ``n`` pending prompts (retried ones included) to the
        rollout workers, in the integration's order; returns their
        ordinals. May pull from the source, as a gap-filling loop does."""

    @abc.abstractmethod
    def land(self, ordinals: list[int]) -> None:
        """These dispatched prompts' groups finished and are now in the
        replay buffer."""

    @abc.abstractmethod
    def train(self, ordinals: list[int]) -> None:
        """One training step over these buffered groups."""


class CoverageViolation(AssertionError):
    """The surviving lineage broke exactly-once coverage. ``invariant`` is
    the ID of proofs/INVARIANTS.md (``NO-SKIP``, ``NO-DUP``,
    ``RETRY-BOUND``) or, from the sample-level harness, of proofs/SAMPLES.md
    (``SAMPLE-EXACTLY-ONCE``, ``ATTEMPT-FENCING``, ``SAMPLE-RETRY-BOUND``);
    ``ordinals`` are the offending ones."""

    def __init__(self, invariant: str, ordinals: Iterable[int], detail: str) -> None:
        self.invariant = invariant
        self.ordinals = tuple(sorted(ordinals))
        super().__init__(f"{invariant}: {detail}: ordinals {list(self.ordinals)[:20]}")


@attrs.frozen
class Lineage:
    """The harness's own record of the surviving run: training steps,
    drops, and failures of each ordinal. A value: a checkpoint keeps a
    reference, and a crash goes back to it."""

    steps: tuple[tuple[int, ...], ...] = ()
    dropped: tuple[int, ...] = ()
    failures: tuple[tuple[int, int], ...] = ()

    def trained(self) -> Counter[int]:
        return Counter(o for step in self.steps for o in step)

    def resolved(self) -> Counter[int]:
        return self.trained() + Counter(self.dropped)

    def failed(self, ordinals: Iterable[int]) -> Lineage:
        counts = Counter(dict(self.failures))
        counts.update(ordinals)
        return attrs.evolve(self, failures=tuple(sorted(counts.items())))


#: The harness's default settings: enough interleavings to find the usual
#: integration bugs in a few seconds (see docs/testing.md for longer runs).
DEFAULT_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class _Machine(RuleBasedStateMachine):
    """The rules and the verdict both harnesses share (the source, whole
    failures, training, checkpoints, crashes, the drain). A subclass says
    how work is handed out and comes back (``_read_dispatch``,
    ``_record_dispatch``, ``_arrive``, ``_drain_round``), what a training
    step must hold (``_trained``), what a group's release and a crash
    forget (``_release``, ``_new_life``), and which invariant each shared
    check names (``SKIP``, ``DUP``, ``RETRY``)."""

    integration_factory: Callable[[], _Wiring]
    #: The invariant IDs the shared checks name: a prompt skipped, a prompt
    #: resolved twice, a drop before the attempt limit.
    SKIP = "NO-SKIP"
    DUP = "NO-DUP"
    RETRY = "RETRY-BOUND"

    def __init__(self) -> None:
        super().__init__()
        self.integration = type(self).integration_factory()
        self.n = self.integration.stream_len
        self.lineage: Lineage = self._empty_lineage()
        #: Dispatched and neither landed nor failed, in this process life.
        self.outstanding: set[int] = set()
        #: Landed (or restored) and not trained, in this process life.
        self.buffered: set[int] = set()
        self.started = False
        #: A rule raised: teardown must not drain over that failure, or its
        #: own exception would replace the one Hypothesis is shrinking.
        self.broken = False
        #: Every checkpoint written, oldest first, with the lineage it saved.
        self.saved: list[tuple[object, Lineage]] = []

    def _empty_lineage(self) -> Lineage:
        return Lineage()

    @contextlib.contextmanager
    def _step(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.broken = True
            raise

    # -- what a subclass says -----------------------------------------------------

    def _read_dispatch(self, got: Any) -> Any:
        """What ``dispatch`` returned, read once (it may be an iterator)."""
        raise NotImplementedError

    def _record_dispatch(self, got: Any) -> None:
        """Check and record what ``dispatch`` returned (as read)."""
        raise NotImplementedError

    def _arrive(self, data: st.DataObject) -> None:
        """Some of the work that is out comes back (``round_trip``)."""
        raise NotImplementedError

    def _drain_round(self) -> bool:
        """One round of the drain without failures; whether anything
        happened."""
        raise NotImplementedError

    def _trained(self, ordinals: list[int], trained: object) -> Mapping[str, Any]:
        """Check what ``train`` returned for these ordinals; the fields to
        add to the lineage's record of the step."""
        return {}

    def _release(self, ordinals: Iterable[int]) -> None:
        """These groups are no longer outstanding (failed whole or dropped)."""
        self.outstanding.difference_update(ordinals)

    def _new_life(self) -> None:
        """A crash: forget what was out in the dead process."""
        self.outstanding = set()

    # -- checks on the harness's own record ------------------------------------

    def _fresh(self, ordinals: Iterable[int], what: str) -> list[int]:
        """``ordinals`` as a list, checked to be new work: inside the stream
        and not already resolved in the surviving lineage."""
        out = list(ordinals)
        outside = [o for o in out if not 0 <= o < self.n]
        if outside:
            raise CoverageViolation(self.SKIP, outside, f"{what} ordinals outside the stream")
        resolved = self.lineage.resolved()
        again = [o for o in out if resolved[o]]
        if again:
            raise CoverageViolation(
                self.DUP, again, f"{what} ordinals already trained or dropped in this lineage"
            )
        return out

    def _record_kept(self, kept: list[int]) -> None:
        self._fresh(kept, "yielded and kept")

    def _record_step(self, ordinals: list[int], trained: object) -> None:
        self._fresh(ordinals, "trained")
        extra = self._trained(ordinals, trained)
        self.lineage = attrs.evolve(
            self.lineage, steps=(*self.lineage.steps, tuple(ordinals)), **extra
        )
        self.buffered.difference_update(ordinals)

    def _record_failure(self, ordinals: list[int], dropped: list[int]) -> None:
        """``ordinals`` failed once each (in this lineage) and the policy
        dropped ``dropped`` of them."""
        self.lineage = self.lineage.failed(ordinals)
        strangers = sorted(set(dropped) - set(ordinals))
        if strangers:
            raise CoverageViolation(self.SKIP, strangers, "fail dropped ordinals it was not given")
        limit = self.integration.max_attempts
        failures = dict(self.lineage.failures)
        early = [o for o in dropped if limit is not None and failures[o] < limit]
        if early:
            raise CoverageViolation(
                self.RETRY, early, f"dropped before {limit} failures in the lineage"
            )
        self._fresh(dropped, "dropped")
        self.lineage = attrs.evolve(self.lineage, dropped=(*self.lineage.dropped, *dropped))

    def _pick(self, data: st.DataObject, pool: Iterable[int]) -> list[int]:
        return data.draw(st.lists(st.sampled_from(sorted(pool)), unique=True, min_size=1))

    # -- rules --------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        with self._step():
            self.integration.start()
            self.started = True
            note("integration.start()")
            # A run that dies before its first checkpoint restarts from this one.
            self.saved.append((self.integration.checkpoint(), self.lineage))
            note("checkpoint_0 = integration.checkpoint()")

    @rule(n=st.integers(1, 6))
    def stamp(self, n: int) -> None:
        with self._step():
            kept = list(self.integration.stamp(n))
            note(f"integration.stamp({n})  # kept {kept}")
            self._record_kept(kept)

    @rule(n=st.integers(1, 6))
    def dispatch(self, n: int) -> None:
        with self._step():
            got = self._read_dispatch(self.integration.dispatch(n))
            note(f"integration.dispatch({n})  # -> {_shown(got)}")
            self._record_dispatch(got)

    @rule(n=st.integers(1, 6), data=st.data())
    def round_trip(self, n: int, data: st.DataObject) -> None:
        """What a loop does between two training steps: the source yields,
        work is dispatched, and some of what is out comes back. (The
        single events have their own rules; this one reaches deep states in
        fewer steps.)"""
        self.stamp(n)
        self.dispatch(n)
        self._arrive(data)

    @precondition(lambda self: self.outstanding)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        with self._step():
            chosen = self._pick(data, self.outstanding)
            dropped = list(self.integration.fail(chosen))
            note(f"integration.fail({chosen})  # dropped {dropped}")
            self._release(chosen)
            self._record_failure(chosen, dropped)

    @precondition(lambda self: self.buffered)
    @rule(data=st.data())
    def train(self, data: st.DataObject) -> None:
        with self._step():
            chosen = self._pick(data, self.buffered)
            note(f"integration.train({chosen})  # step {len(self.lineage.steps)}")
            self._record_step(chosen, self.integration.train(chosen))

    @rule()
    def checkpoint(self) -> None:
        with self._step():
            name = f"checkpoint_{len(self.saved)}"
            note(f"{name} = integration.checkpoint()  # after {len(self.lineage.steps)} steps")
            self.saved.append((self.integration.checkpoint(), self.lineage))

    @rule(data=st.data())
    def crash_and_resume(self, data: st.DataObject) -> None:
        """The process dies and restarts from the latest checkpoint, or
        from one ``back`` checkpoints older (newer records were lost). A
        crash right after a resume is the same rule drawn twice."""
        with self._step():
            # Mostly the latest (the common case, and the one that reaches
            # deep states); any older one otherwise.
            older = st.integers(0, len(self.saved) - 1)
            back = data.draw(st.one_of(st.just(0), older), label="back")
            self._restart(len(self.saved) - 1 - back)

    def _restart(self, index: int) -> None:
        checkpoint, lineage = self.saved[index]
        self.integration.crash()
        self.lineage = lineage
        self._new_life()
        self.buffered = set(self.integration.resume(checkpoint))
        restored = sorted(self.buffered)
        note(f"integration.crash(); integration.resume(checkpoint_{index})  # buffer {restored}")
        self._fresh(self.buffered, "restored as buffered")

    def teardown(self) -> None:
        try:
            if self.started and not self.broken:
                note("# teardown: drain (stamp, dispatch, complete and train all) and check")
                self.drain()
                self.check_exactly_once()
        finally:
            self.integration.close()

    # -- the verdict ----------------------------------------------------------------

    def drain(self) -> None:
        """Run the stream to its end without failures."""
        rounds = 2 * self.n + 8
        for _ in range(rounds):
            if not self._drain_round():
                return
        raise AssertionError(f"the stream did not drain in {rounds} rounds")

    def check_exactly_once(self) -> None:
        """Over the surviving lineage: every ordinal of the stream trained
        exactly once or dropped exactly once."""
        resolved = self.lineage.resolved()
        skipped = [o for o in range(self.n) if not resolved[o]]
        if skipped:
            raise CoverageViolation(self.SKIP, skipped, "never trained nor dropped after draining")
        twice = [o for o, k in resolved.items() if k > 1]
        if twice:
            raise CoverageViolation(self.DUP, twice, "resolved more than once")


def _shown(value: Any) -> Any:
    """``value`` as a note prints it: leases (named tuples) as plain tuples,
    inside lists and tuples too, so that the printed program is Python
    without an import."""
    if isinstance(value, list):
        return [_shown(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_shown(v) for v in value)
    return value


class IntegrationMachine(_Machine):
    """The Hypothesis state machine; subclass it with ``integration_factory``
    set, or let ``integration_machine`` do it."""

    integration_factory: Callable[[], Integration]
    integration: Integration

    def _read_dispatch(self, got: Any) -> list[int]:
        return list(got)

    def _record_dispatch(self, got: list[int]) -> None:
        self.outstanding.update(self._fresh(got, "dispatched"))

    def _arrive(self, data: st.DataObject) -> None:
        if self.outstanding:
            self.land(data)

    @precondition(lambda self: self.outstanding)
    @rule(data=st.data())
    def land(self, data: st.DataObject) -> None:
        with self._step():
            chosen = self._pick(data, self.outstanding)
            note(f"integration.land({chosen})")
            self.integration.land(chosen)
            self.outstanding.difference_update(chosen)
            self.buffered.update(chosen)

    def _drain_round(self) -> bool:
        kept = list(self.integration.stamp(self.n))
        self._record_kept(kept)
        got = self._read_dispatch(self.integration.dispatch(self.n + 1))
        self._record_dispatch(got)
        if self.outstanding:
            landing = sorted(self.outstanding)
            self.integration.land(landing)
            self.outstanding.clear()
            self.buffered.update(landing)
        if self.buffered:
            step = sorted(self.buffered)
            self._record_step(step, self.integration.train(step))
            return True
        return bool(kept or got)


_M = TypeVar("_M", bound=_Machine)


def _machine(base: type[_M], factory: Callable[[], _Wiring], settings: settings | None) -> type[_M]:
    """``base`` bound to ``factory``, named after it, with ``settings``."""
    name = f"{getattr(factory, '__name__', 'Integration')}Machine"
    machine = cast(
        "type[_M]",
        types.new_class(
            name, (base,), exec_body=lambda ns: ns.update(integration_factory=staticmethod(factory))
        ),
    )
    machine.__qualname__ = machine.__name__
    machine.TestCase.settings = settings or DEFAULT_SETTINGS
    return machine


def integration_machine(
    factory: Callable[[], Integration], *, settings: settings | None = None
) -> type[IntegrationMachine]:
    """A state machine class for ``factory``'s integration; collect its
    ``TestCase`` with pytest or unittest."""
    return _machine(IntegrationMachine, factory, settings)


def run_integration_test(
    factory: Callable[[], Integration], *, settings: settings | None = None
) -> None:
    """Drive ``factory()`` integrations through random interleavings and
    raise (``CoverageViolation``, or whatever a hook raised) with the
    failing program printed, if any loses or duplicates a prompt."""
    run_state_machine_as_test(
        integration_machine(factory, settings=settings), settings=settings or DEFAULT_SETTINGS
    )
