"""The integration harness: a stateful test for frameworks that embed
frontier_core.

The ledger is checked against a naive model in this project's own tests;
what those cannot check is the *integration*: the loader that must restart at
the cut, the replay buffer that must be saved with the ledger, the retry
queue, the sample store that must hold each sibling's sample from its
current attempt, the checkpoint that must hold every piece from one moment.
This module drives an integration through random interleavings of the events
a real run sees (the source yields, groups are dispatched, samples are
sealed or fail, groups land or fail whole, training steps run, checkpoints
are written, the process dies and resumes from one of them) with
Hypothesis, and checks exactly-once coverage at the end, after draining the
stream.

One protocol, ``Integration``, for a group of n samples (n = 1 by default).
Its unit is the lease ``(ordinal, sibling, attempt)``, and a wiring that
deals whole groups is its degenerate case. An integration says which it is
by the hooks it implements (the harness detects them; there is nothing to
declare):

* whole groups: ``land(ordinals)``; ``dispatch`` returns the ordinals handed
  out and ``train`` returns nothing. The harness cannot see the siblings, so
  it checks the groups: NO-SKIP, NO-DUP and RETRY-BOUND of
  proofs/INVARIANTS.md.
* sibling by sibling: ``seal(leases)`` and ``fail_sample(leases)``;
  ``dispatch`` returns ``(started, reused)`` leases and ``train`` the
  samples it trained, each named by its lease. The harness plays the rollout
  workers: it answers the leases handed out and, at random, leases that are
  no longer current (a failed attempt's late answer, an attempt of before a
  crash, a second answer). It checks the refinements of proofs/SAMPLES.md:
  SAMPLE-EXACTLY-ONCE, ATTEMPT-FENCING and SAMPLE-RETRY-BOUND.

The verdict never trusts the integration. The harness keeps its own lineage
(which training step trained which ordinals with which samples, which were
dropped, how often each failed, which groups the buffer holds and the
samples each landed with), saves a copy of it with every checkpoint and
truncates it to that copy on a crash, exactly as the surviving run's history
is truncated. Sibling by sibling it also keeps, for the whole run and across
crashes, every lease handed out, every result it delivered and which of
those it delivered while their lease was current (its own model of
currency: handed out in this process life, its sibling neither sealed nor
failed since, its group outstanding). Those are the samples that exist; any
of them may come back after a crash (from the checkpoint or a journal: the
ledger calls them held, ``effect.reused``). The checks:

* a group is trained once per lineage or dropped on record, never both,
  and nothing outside the stream is yielded, dispatched, trained or
  dropped (NO-SKIP, NO-DUP; SAMPLE-EXACTLY-ONCE sibling by sibling);
* a resume restores to the buffer only groups that were in it at the
  checkpoint (the others' samples are not there);
* nothing is dropped before ``max_failures`` failures of its group in the
  lineage, a failed sample being one failure of its group (RETRY-BOUND;
  SAMPLE-RETRY-BOUND);
* sibling by sibling (SAMPLE-EXACTLY-ONCE): a step trains each of its groups
  with exactly its n samples, one per sibling, each one a worker produced
  and the one its sibling landed with; no current attempt's result is
  refused (its sample would be lost); no sealed sibling is generated again;
  a dispatched group names every sibling;
* sibling by sibling (ATTEMPT-FENCING): no trained or reused sample is the
  result of an attempt that was not current when it answered, nor one that
  another attempt of its sibling superseded (a group trains the samples it
  landed with, not one sealed before the group failed whole, nor a held one
  of before a crash whose sibling was generated again); no such result is
  accepted, and no fenced failure drops a group; no lease is handed out
  twice (a late answer of the first would pass for the second) and no
  running sibling is started again.

Every rule ``note()``s its hook call, leases as plain tuples, so a failure
prints the shortest program Hypothesis found, one hook call per line, ready
to paste into a test. The integration runs
``run_integration_test(MyIntegration)``, or its machine is collected with
``integration_machine(MyIntegration).TestCase``. Importing this module
imports Hypothesis; ``import frontier_core`` does not import it.
"""

from __future__ import annotations

import abc
import contextlib
import types
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

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

from frontier_core import Granularity, Lease


class Integration(abc.ABC):
    """What the harness needs of an integration: one method per event.

    A new instance is built for every test case and ``start()`` begins a
    fresh run. The harness calls the hooks only with legal arguments that it
    derives from its own record: ``land``, ``fail`` and ``train`` receive
    groups that are outstanding or buffered in this process life; the
    results it delivers (``seal``, ``fail_sample``) name leases that a
    ``dispatch`` returned in some life of the run (current or not). Any
    exception a hook raises fails the test with the program that led to it.

    Results come back one of two ways, and the harness tells which from the
    hooks the class implements: whole groups (``land``) or sibling by
    sibling (``seal`` and ``fail_sample``). A wiring implements one way,
    not both; ``dispatch`` and ``train`` return what that way says.

    Leases are ``frontier_core.Lease`` values (tuples ``(ordinal, sibling,
    attempt)``); the hooks may return any iterables of 3-tuples. A lease is
    also the name of the sample its attempt generates: the replay buffer
    keeps it with the sample, and ``train`` returns it. ``crash`` forgets
    the in-memory state only: what a real crash keeps (the checkpoint
    directory, a rollout journal, a reserved attempt floor) stays with the
    instance.
    """

    #: Ordinals the source yields in a whole run (epochs times dataset length).
    stream_len: int
    #: The group size n: samples (siblings) per prompt. Checked sibling by
    #: sibling; a wiring of whole groups may leave it at 1 whatever its n.
    samples: int = 1
    #: What a failed sample fails: under ``SIBLING`` only that sibling is
    #: generated again (its restart comes back through ``dispatch``) and the
    #: group keeps what it sealed; under ``GROUP`` the whole group leaves
    #: outstanding (requeued, or dropped), as ``fail`` does.
    granularity: Granularity = Granularity.SIBLING
    #: If set, nothing may be dropped before failing this many times in the
    #: surviving lineage (1 under the ``drop`` policy, ``max_failures``
    #: under ``retry``); ``None`` skips that check.
    max_failures: int | None = None

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
    def dispatch(
        self, n: int
    ) -> Iterable[int] | tuple[Iterable[Iterable[int]], Iterable[Iterable[int]]]:
        """Hand up to ``n`` pending groups (retried ones included) to the
        rollout workers, in the integration's order. May pull from the
        source, as a gap-filling loop does.

        Whole groups: returns their ordinals. Sibling by sibling: also
        starts every sibling waiting for a restart, and returns ``(started,
        reused)``: the leases started (the restarts, and the new attempts of
        the groups dispatched, ``effect.leases``) and the held siblings of
        those groups reused instead of generated (``effect.reused``, under
        the attempts that sealed them). Every sibling of a group dispatched
        is in one of them; a group whose n siblings are all reused is in the
        buffer at once."""

    def land(self, ordinals: list[int]) -> None:
        """Whole groups: these dispatched groups finished and are now in the
        replay buffer. (Not implemented by a wiring that delivers sibling by
        sibling.)"""
        raise NotImplementedError

    def seal(self, leases: list[Lease]) -> Iterable[Iterable[int]]:
        """Sibling by sibling: these workers answered with their samples (at
        most one lease per sibling, current or not). Returns the leases
        accepted (``effect.sealed``); a group lands when its last sibling's
        is. (Implemented with ``fail_sample``, instead of ``land``.)"""
        raise NotImplementedError

    def fail_sample(self, leases: list[Lease]) -> Iterable[int]:
        """Sibling by sibling: these attempts failed (at most one lease per
        group, current or not). Returns the ordinals the failure policy
        dropped; the siblings to generate again come back through
        ``dispatch``, and a group that failed whole (``GROUP`` granularity)
        through ``stamp`` and ``dispatch``."""
        raise NotImplementedError

    @abc.abstractmethod
    def fail(self, ordinals: list[int]) -> Iterable[int]:
        """Generation failed for these dispatched groups as a whole. Returns
        the ordinals the failure policy dropped (resolved without training);
        the others must come back through ``dispatch``."""

    @abc.abstractmethod
    def train(self, ordinals: list[int]) -> Iterable[Iterable[int]] | None:
        """One training step over these buffered groups. Sibling by sibling,
        returns the samples it trained, each named by its lease (whole
        groups: nothing)."""

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


_WHOLE = ("land",)
_SIBLINGS = ("seal", "fail_sample")


def _by_sibling(integration: object) -> bool:
    """Whether ``integration`` delivers sibling by sibling (``seal`` and
    ``fail_sample``) rather than whole groups (``land``); a ``TypeError``
    if it implements neither way, or both."""
    cls = type(integration)
    own = {h for h in (*_WHOLE, *_SIBLINGS) if getattr(cls, h, None) is not getattr(Integration, h)}
    if own == set(_WHOLE):
        return False
    if own == set(_SIBLINGS):
        return True
    raise TypeError(
        f"{cls.__name__} implements {sorted(own) or 'none'} of land, seal and fail_sample: "
        "an integration delivers whole groups (land) or sibling by sibling (seal and "
        "fail_sample)"
    )


class CoverageViolation(AssertionError):
    """The surviving lineage broke exactly-once coverage. ``invariant`` is
    the ID of proofs/INVARIANTS.md (``NO-SKIP``, ``NO-DUP``,
    ``RETRY-BOUND``) for a wiring of whole groups, or of proofs/SAMPLES.md
    (``SAMPLE-EXACTLY-ONCE``, ``ATTEMPT-FENCING``, ``SAMPLE-RETRY-BOUND``)
    for one that delivers sibling by sibling; ``ordinals`` are the offending
    ones."""

    def __init__(self, invariant: str, ordinals: Iterable[int], detail: str) -> None:
        self.invariant = invariant
        self.ordinals = tuple(sorted(ordinals))
        super().__init__(f"{invariant}: {detail}: ordinals {list(self.ordinals)[:20]}")


@attrs.frozen
class _Lineage:
    """The harness's own record of the surviving run: training steps,
    drops, failures of each ordinal, the groups the buffer holds and the
    samples each landed with (one per sibling; none for a wiring of whole
    groups). A value: a checkpoint keeps a reference, and a crash goes back
    to it."""

    steps: tuple[tuple[int, ...], ...] = ()
    dropped: tuple[int, ...] = ()
    failures: tuple[tuple[int, int], ...] = ()
    buffered: frozenset[int] = frozenset()
    landed: frozenset[Lease] = frozenset()

    def resolved(self) -> Counter[int]:
        return Counter(o for step in self.steps for o in step) + Counter(self.dropped)

    def failed(self, ordinals: Iterable[int]) -> _Lineage:
        counts = Counter(dict(self.failures))
        counts.update(ordinals)
        return attrs.evolve(self, failures=tuple(sorted(counts.items())))


#: The harness's default settings: enough interleavings to find the usual
#: integration bugs in a few seconds (see docs/testing.md for longer runs).
#: A run stops at the first failure and reports it alone, shrunk: by default
#: Hypothesis goes on looking for other failures for up to ten seconds (so
#: what it finds depends on the machine's speed) and raises them together.
DEFAULT_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

#: The draws behind a set of results: up to four ``(branch, index)``: a
#: current attempt for branches 0 and 1, a rival for 2 (another lease of a
#: sibling of an outstanding group: a late answer that matters), any lease
#: of the run for 3, each when there is one. One strategy built once, since
#: building one per rule call is most of the cost of a step.
_PICKS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 16)), min_size=1, max_size=4)


@attrs.frozen
class _Dispatched:
    """What ``dispatch`` returned, read once (it may be an iterator):
    ``shown`` as the program's comment prints it."""

    ordinals: tuple[int, ...]
    started: tuple[Lease, ...]
    reused: tuple[Lease, ...]
    shown: object


class IntegrationMachine(RuleBasedStateMachine):
    """The Hypothesis state machine; subclass it with ``integration_factory``
    set, or let ``integration_machine`` do it."""

    integration_factory: Callable[[], Integration]

    def __init__(self) -> None:
        super().__init__()
        self.integration = type(self).integration_factory()
        self.by_sibling = _by_sibling(self.integration)
        self.n = self.integration.stream_len
        self.k = self.integration.samples if self.by_sibling else 1
        if type(self.k) is not int or self.k < 1:
            raise TypeError(f"samples is {self.k!r}, not an int >= 1")
        # The IDs the checks name: a group skipped, resolved twice, dropped
        # before the attempt limit, a stale result counted. Sibling by
        # sibling they are the refinements of proofs/SAMPLES.md (a group
        # trained once with its n samples covers NO-SKIP and NO-DUP).
        if self.by_sibling:
            self.SKIP = self.DUP = "SAMPLE-EXACTLY-ONCE"
            self.RETRY = "SAMPLE-RETRY-BOUND"
        else:
            self.SKIP, self.DUP, self.RETRY = "NO-SKIP", "NO-DUP", "RETRY-BOUND"
        self.FENCING = "ATTEMPT-FENCING"
        self.lineage = _Lineage()
        #: Dispatched and neither landed nor failed whole, in this process life.
        self.outstanding: set[int] = set()
        # The run's record, across crashes (never truncated): every lease
        # handed out, in order; every result delivered; those delivered
        # while current, which are the samples that exist.
        self.issued: dict[Lease, None] = {}
        self.answered: set[Lease] = set()
        self.accepted: set[Lease] = set()
        # This process life: the current attempt of each running sibling,
        # and the sealed siblings of each outstanding group.
        self.running: dict[tuple[int, int], Lease] = {}
        self.sealed: dict[int, dict[int, Lease]] = {}
        self.started = False
        #: A rule raised: teardown must not drain over that failure, or its
        #: own exception would replace the one Hypothesis is shrinking.
        self.broken = False
        #: Every checkpoint written, oldest first, with the lineage it saved.
        self.saved: list[tuple[object, _Lineage]] = []

    @contextlib.contextmanager
    def _step(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.broken = True
            raise

    # -- reading what the hooks return ------------------------------------------------

    def _leases(self, values: Iterable[Iterable[int]], what: str) -> list[Lease]:
        out = []
        for value in values:
            item = tuple(value) if isinstance(value, Iterable) else ()
            if len(item) != 3 or any(type(x) is not int for x in item):
                raise TypeError(f"{what} returned {value!r:.80}, not (ordinal, sibling, attempt)")
            out.append(Lease(*item))
        return out

    def _ordinals(self, values: Iterable[int], what: str) -> list[int]:
        out = list(values)
        for value in out:
            if type(value) is not int:
                raise TypeError(f"{what} returned {value!r:.80}, not an ordinal")
        return out

    def _read_dispatch(self, got: Any) -> _Dispatched:
        if not self.by_sibling:
            ordinals = self._ordinals(got, "dispatch")
            return _Dispatched(tuple(ordinals), (), (), ordinals)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise TypeError(f"dispatch returned {got!r:.80}, not (started, reused)")
        started = self._leases(got[0], "dispatch")
        reused = self._leases(got[1], "dispatch")
        groups = dict.fromkeys(x.ordinal for x in (*started, *reused))
        return _Dispatched(tuple(groups), tuple(started), tuple(reused), (started, reused))

    # -- checks on the harness's own record ------------------------------------

    def _violation(self, invariant: str, leases: Iterable[Lease], detail: str) -> None:
        leases = sorted(leases)
        if leases:
            shown = ", ".join(str(tuple(x)) for x in leases[:8])
            raise CoverageViolation(invariant, {x.ordinal for x in leases}, f"{detail} ({shown})")

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

    def _live(self, ordinals: Iterable[int], what: str) -> None:
        """None of ``ordinals`` is outstanding or in the buffer: a second
        copy of a live group would be trained twice."""
        live = self.outstanding | self.lineage.buffered
        twice = sorted(o for o in ordinals if o in live)
        if twice:
            raise CoverageViolation(
                self.DUP, twice, f"{what} groups that are outstanding or buffered"
            )

    def _current(self, lease: Lease) -> bool:
        return self.running.get((lease.ordinal, lease.sibling)) == lease

    # -- the life of a group ---------------------------------------------------------

    def _record_kept(self, kept: list[int]) -> None:
        self._fresh(kept, "yielded and kept")
        self._live(kept, "yielded and kept")

    def _record_dispatch(self, got: _Dispatched) -> None:
        started, reused = got.started, got.reused
        leases = [*started, *reused]
        self._violation(
            self.SKIP,
            [x for x in leases if not (0 <= x.ordinal < self.n and 0 <= x.sibling < self.k)],
            f"dispatch returned leases outside the stream's groups of {self.k}",
        )
        twice = Counter((x.ordinal, x.sibling) for x in leases)
        self._violation(
            self.DUP, [x for x in leases if twice[x[:2]] > 1], "dispatch listed a sibling twice"
        )
        listed = Counter(got.ordinals)
        if any(c > 1 for c in listed.values()):
            raise CoverageViolation(
                self.DUP, [o for o, c in listed.items() if c > 1], "dispatch listed groups twice"
            )
        # Sibling by sibling, a lease of an outstanding group restarts a
        # sibling; a whole group is never dispatched while outstanding.
        new = [o for o in got.ordinals if not (self.by_sibling and o in self.outstanding)]
        self._fresh(new, "dispatched")
        self._live(new, "dispatch started")
        if self.by_sibling:
            self._record_leases(new, started, reused)
        for o in new:
            self.outstanding.add(o)
            self.sealed.setdefault(o, {})
        for x in reused:
            self.sealed[x.ordinal][x.sibling] = x
        for x in started:
            self.running[x[:2]] = x
            self.issued[x] = None
        for o in new:
            if self.by_sibling and len(self.sealed[o]) == self.k:
                self._land(o)

    def _record_leases(
        self, new: list[int], started: tuple[Lease, ...], reused: tuple[Lease, ...]
    ) -> None:
        """The sibling-by-sibling checks of a dispatch that started ``new``
        groups."""
        for o in new:
            missing = sorted(
                set(range(self.k)) - {x.sibling for x in (*started, *reused) if x.ordinal == o}
            )
            if missing:
                raise CoverageViolation(
                    self.SKIP, [o], f"dispatch started a group without its siblings {missing}"
                )
        fresh = set(new)
        # A reused sibling is a sample that exists: one a worker delivered
        # while its attempt was current, in any life (from the checkpoint
        # or a journal), and only for a group dispatched now.
        self._violation(
            self.DUP,
            [x for x in reused if x.ordinal not in fresh],
            "dispatch reused a sibling of a group that is outstanding",
        )
        unknown = [x for x in reused if x not in self.accepted]
        self._violation(
            self.FENCING,
            [x for x in unknown if x in self.answered],
            "dispatch reused the result of an attempt that was not current when it answered",
        )
        self._violation(self.SKIP, unknown, "dispatch reused samples no worker produced")
        self._violation(
            self.FENCING,
            [x for x in started if x in self.issued],
            "dispatch started a lease it had handed out before (a late answer of the first "
            "would pass for the second)",
        )
        restarts = [x for x in started if x.ordinal not in fresh]
        self._violation(
            self.FENCING,
            [x for x in restarts if x[:2] in self.running],
            "dispatch started a sibling that is running under another attempt",
        )
        self._violation(
            self.DUP,
            [x for x in restarts if x.sibling in self.sealed[x.ordinal]],
            "dispatch generates a sealed sibling again",
        )

    def _land(self, ordinal: int) -> None:
        """The group is in the buffer, with the samples its siblings sealed
        (none seen, for a wiring of whole groups): what the ledger lands is
        what the step must train, whatever the integration's buffer keeps
        after."""
        group = self.sealed.pop(ordinal).values()
        self.lineage = attrs.evolve(
            self.lineage,
            buffered=self.lineage.buffered | {ordinal},
            landed=self.lineage.landed.union(group),
        )
        self.outstanding.discard(ordinal)

    def _release(self, ordinals: Iterable[int]) -> None:
        """These groups are no longer outstanding (failed whole or dropped)."""
        for o in ordinals:
            self.outstanding.discard(o)
            self.sealed.pop(o, None)
            for s in range(self.k):
                self.running.pop((o, s), None)

    def _record_seal(self, results: list[Lease], accepted: Iterable[Iterable[int]]) -> None:
        current = [x for x in results if self._current(x)]
        got = set(self._leases(accepted, "seal"))
        given = set(results)
        self._violation(
            self.FENCING,
            got & given - set(current),
            "seal accepted results of attempts that are not current",
        )
        self._violation(self.DUP, got - given, "seal accepted results it was not given")
        self._violation(
            self.SKIP,
            set(current) - got,
            "seal refused the current attempt's result (its sample is lost)",
        )
        self.answered.update(results)
        self.accepted.update(current)
        for x in current:
            del self.running[x[:2]]
            group = self.sealed[x.ordinal]
            group[x.sibling] = x
            if len(group) == self.k:
                self._land(x.ordinal)

    def _record_failure(self, ordinals: list[int], dropped: list[int]) -> None:
        """``ordinals`` failed once each (in this lineage) and the policy
        dropped ``dropped`` of them."""
        self.lineage = self.lineage.failed(ordinals)
        strangers = sorted(set(dropped) - set(ordinals))
        if strangers:
            raise CoverageViolation(self.SKIP, strangers, "fail dropped ordinals it was not given")
        limit = self.integration.max_failures
        failures = dict(self.lineage.failures)
        early = [o for o in dropped if limit is not None and failures[o] < limit]
        if early:
            raise CoverageViolation(
                self.RETRY, early, f"dropped before {limit} failures in the lineage"
            )
        self._fresh(dropped, "dropped")
        self.lineage = attrs.evolve(self.lineage, dropped=(*self.lineage.dropped, *dropped))

    def _record_sample_failure(self, results: list[Lease], dropped: list[int]) -> None:
        current = [x for x in results if self._current(x)]
        failed = [x.ordinal for x in current]
        fenced = {x.ordinal for x in results} - set(failed)
        if fenced & set(dropped):
            raise CoverageViolation(
                self.FENCING, fenced & set(dropped), "a fenced failure dropped its group"
            )
        for x in current:
            del self.running[x[:2]]
        whole = failed if self.integration.granularity is Granularity.GROUP else dropped
        self._release([o for o in failed if o in set(whole)])
        self._record_failure(failed, dropped)

    def _record_step(self, ordinals: list[int], trained: object) -> None:
        self._fresh(ordinals, "trained")
        if self.by_sibling:
            self._check_trained(ordinals, trained)
        step = set(ordinals)
        lineage = self.lineage
        self.lineage = attrs.evolve(
            lineage,
            steps=(*lineage.steps, tuple(ordinals)),
            buffered=lineage.buffered - step,
            landed=frozenset(x for x in lineage.landed if x.ordinal not in step),
        )

    def _check_trained(self, ordinals: list[int], trained: object) -> None:
        """Check the samples ``train`` returned for these groups: exactly
        the n each landed with."""
        if not isinstance(trained, Iterable):
            raise TypeError(f"train returned {trained!r:.80}, not the samples it trained")
        samples = self._leases(trained, "train")
        step = set(ordinals)
        self._violation(
            self.DUP,
            [x for x in samples if x.ordinal not in step],
            "train trained samples of groups outside the step",
        )
        unknown = [x for x in samples if x not in self.accepted]
        self._violation(
            self.FENCING,
            [x for x in unknown if x in self.answered],
            "train trained the result of an attempt that was not current when it answered",
        )
        self._violation(
            self.SKIP,
            [x for x in unknown if x not in self.answered],
            "train trained samples no worker produced",
        )
        for o in ordinals:
            siblings = Counter(x.sibling for x in samples if x.ordinal == o)
            missing = [s for s in range(self.k) if not siblings[s]]
            if missing:
                raise CoverageViolation(
                    self.SKIP, [o], f"trained the group without its siblings {missing}"
                )
            twice = sorted(s for s, c in siblings.items() if c > 1 or s >= self.k)
            if twice:
                raise CoverageViolation(
                    self.DUP, [o], f"trained the group with siblings {twice} twice or extra"
                )
        # One sample per sibling, each one that exists: what is left is that
        # each is the one its sibling landed with, not an earlier attempt's.
        self._violation(
            self.FENCING,
            [x for x in samples if x not in self.lineage.landed],
            "train trained samples other than those their groups landed with (of an "
            "attempt superseded since: its group failed whole, or its held sibling was "
            "generated again)",
        )

    def _pick(self, data: st.DataObject, pool: Iterable[int]) -> list[int]:
        return data.draw(st.lists(st.sampled_from(sorted(pool)), unique=True, min_size=1))

    def _results(self, data: st.DataObject, per_group: bool) -> list[Lease]:
        """Some results: mostly of current attempts, the rest late answers
        (rivals first) of any lease handed out in the run; at most one per
        sibling (per group, for failures, so that each current failure
        counts once)."""
        running = sorted(self.running.values())
        everything = sorted(self.issued)
        rivals = [x for x in everything if x.ordinal in self.outstanding and not self._current(x)]
        pools = (running, running, rivals, everything)
        picked = []
        for branch, index in data.draw(_PICKS, label="results"):
            pool = pools[branch] or everything
            picked.append(pool[index % len(pool)])
        key: Callable[[Lease], object] = (lambda x: x.ordinal) if per_group else (lambda x: x[:2])
        first: dict[object, Lease] = {}
        for x in picked:
            first.setdefault(key(x), x)
        return list(first.values())

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
            kept = self._ordinals(self.integration.stamp(n), "stamp")
            note(f"integration.stamp({n})  # kept {kept}")
            self._record_kept(kept)

    @rule(n=st.integers(1, 6))
    def dispatch(self, n: int) -> None:
        with self._step():
            got = self._read_dispatch(self.integration.dispatch(n))
            note(f"integration.dispatch({n})  # -> {_shown(got.shown)}")
            self._record_dispatch(got)

    @rule(n=st.integers(1, 6), data=st.data())
    def round_trip(self, n: int, data: st.DataObject) -> None:
        """What a loop does between two training steps: the source yields,
        work is dispatched, and some of what is out comes back. (The
        single events have their own rules; this one reaches deep states in
        fewer steps.)"""
        self.stamp(n)
        self.dispatch(n)
        if not self.by_sibling:
            if self.outstanding:
                self.land(data)
            return
        # Answers come back, a failure among them perhaps (whose restart
        # the next dispatch starts), and the late answers that race them.
        if self.running:
            if data.draw(st.booleans(), label="a sample fails"):
                self.fail_sample(data)
        if self.running:
            self.seal(data)

    @precondition(lambda self: not self.by_sibling and self.outstanding)
    @rule(data=st.data())
    def land(self, data: st.DataObject) -> None:
        with self._step():
            chosen = self._pick(data, self.outstanding)
            note(f"integration.land({chosen})")
            self.integration.land(chosen)
            for o in chosen:
                self._land(o)

    @precondition(lambda self: self.by_sibling and self.issued)
    @rule(data=st.data())
    def seal(self, data: st.DataObject) -> None:
        with self._step():
            results = self._results(data, per_group=False)
            accepted = list(self.integration.seal(results))
            note(f"integration.seal({_shown(results)})  # accepted {_shown(accepted)}")
            self._record_seal(results, accepted)

    @precondition(lambda self: self.by_sibling and self.issued)
    @rule(data=st.data())
    def fail_sample(self, data: st.DataObject) -> None:
        with self._step():
            results = self._results(data, per_group=True)
            dropped = self._ordinals(self.integration.fail_sample(results), "fail_sample")
            note(f"integration.fail_sample({_shown(results)})  # dropped {dropped}")
            self._record_sample_failure(results, dropped)

    @precondition(lambda self: self.outstanding)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        with self._step():
            chosen = self._pick(data, self.outstanding)
            dropped = self._ordinals(self.integration.fail(chosen), "fail")
            note(f"integration.fail({chosen})  # dropped {dropped}")
            self._release(chosen)
            self._record_failure(chosen, dropped)

    @precondition(lambda self: self.lineage.buffered)
    @rule(data=st.data())
    def train(self, data: st.DataObject) -> None:
        with self._step():
            chosen = self._pick(data, self.lineage.buffered)
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
        # What was out in the dead process is gone with it.
        self.outstanding, self.running, self.sealed = set(), {}, {}
        restored = self._ordinals(self.integration.resume(checkpoint), "resume")
        note(
            f"integration.crash(); integration.resume(checkpoint_{index})"
            f"  # buffer {sorted(restored)}"
        )
        self._fresh(restored, "restored as buffered")
        buffered = frozenset(restored)
        unknown = buffered - lineage.buffered
        if unknown:
            raise CoverageViolation(
                self.SKIP,
                unknown,
                "resume restored groups to the buffer that were not in it at the checkpoint",
            )
        # A buffered group the resume did not restore is generated again and
        # lands anew, with other samples.
        self.lineage = attrs.evolve(
            lineage,
            buffered=buffered,
            landed=frozenset(x for x in lineage.landed if x.ordinal in buffered),
        )

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

    def _drain_round(self) -> bool:
        """One round of the drain: yield, dispatch, complete everything out
        and train everything buffered; whether anything happened."""
        kept = self._ordinals(self.integration.stamp(self.n), "stamp")
        self._record_kept(kept)
        got = self._read_dispatch(self.integration.dispatch(self.n + 1))
        self._record_dispatch(got)
        out: list[Any] = []
        if self.by_sibling:
            out = sorted(self.running.values())
            if out:
                self._record_seal(out, self.integration.seal(out))
        else:
            out = sorted(self.outstanding)
            if out:
                self.integration.land(out)
                for o in out:
                    self._land(o)
        if self.lineage.buffered:
            step = sorted(self.lineage.buffered)
            self._record_step(step, self.integration.train(step))
            return True
        return bool(kept or got.ordinals or got.started or got.reused or out)

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


def integration_machine(
    factory: Callable[[], Integration], *, settings: settings | None = None
) -> type[IntegrationMachine]:
    """A state machine class for ``factory``'s integration, named after it;
    collect its ``TestCase`` with pytest or unittest."""
    name = f"{getattr(factory, '__name__', 'Integration')}Machine"
    machine = cast(
        "type[IntegrationMachine]",
        types.new_class(
            name,
            (IntegrationMachine,),
            exec_body=lambda ns: ns.update(integration_factory=staticmethod(factory)),
        ),
    )
    machine.__qualname__ = machine.__name__
    machine.TestCase.settings = settings or DEFAULT_SETTINGS
    return machine


def run_integration_test(
    factory: Callable[[], Integration], *, settings: settings | None = None
) -> None:
    """Drive ``factory()`` integrations through random interleavings (stale
    results among them, sibling by sibling) and raise
    (``CoverageViolation``, or whatever a hook raised) with the failing
    program printed, if any loses or duplicates a group or trains a wrong
    one."""
    run_state_machine_as_test(
        integration_machine(factory, settings=settings), settings=settings or DEFAULT_SETTINGS
    )
