"""The integration harness at the sample level: a group's siblings, attempts
and fencing, for frameworks that embed ``Ledger``.

The prompt-level harness (``_harness.py``) checks that every prompt is
trained or dropped exactly once. A framework that generates a prompt's n
samples sibling by sibling can keep that and still train a wrong group: one
missing a sibling whose sample was lost at a resume, one with a sample from
an attempt the ledger fenced (a worker declared dead that answered late, a
request of before a crash), one with a sibling twice. This harness plays the
rollout workers: it answers the leases the integration hands out (and, at
random, leases that are no longer current: a failed attempt's late answer,
an attempt of before a crash, a second answer), and it asks every training
step which samples it trained, each named by the lease that generated it.

The verdict never trusts the integration. Besides the prompt-level lineage
(the shared ``_Machine``: training steps, drops, failures, truncated to the
checkpoint at each crash) the harness keeps, for the whole run and across
crashes, every lease handed out, every result it delivered and which of
those it delivered while their lease was current (its own model of
currency: handed out in this process life, its sibling neither sealed nor
failed since, its group outstanding). Those are the samples that exist;
any of them may come back after a crash (from the checkpoint or a journal:
the ledger calls them held, ``effect.reused``). With the lineage, and so
with each checkpoint and truncated at each crash, it keeps the samples
every buffered group landed with, one lease per sibling, as it saw them
land: a step must train exactly those. The checks, named by the IDs of
proofs/SAMPLES.md:

* SAMPLE-EXACTLY-ONCE: every group is trained once per lineage or dropped
  on record, never both; a step trains each of its groups with exactly its
  n samples, one per sibling, each one a worker produced; no current
  attempt's result is refused (its sample would be lost); no sealed sibling
  is generated again; a dispatched group names every sibling; a resume
  restores to the buffer only groups that were in it at the checkpoint.
* ATTEMPT-FENCING: no trained sample is the result of an attempt that was
  not current when it answered, nor one that another attempt of its
  sibling superseded (a group trains the samples it landed with, not one
  sealed before the group failed whole, nor a held one of before a crash
  whose sibling was generated again); no such result is accepted, and no
  fenced failure drops a group; no lease is handed out twice (a late answer
  of the first would pass for the second) and no running sibling is started
  again.
* SAMPLE-RETRY-BOUND: nothing is dropped before ``max_attempts`` failures
  of its group in the lineage (a failed sample is one failure of its group).

Every rule ``note()``s its hook call, leases as plain tuples, so a failure
prints the shortest program found as Python hook calls.
"""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
from hypothesis import note, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from frontier_core import Granularity, Lease

from ._harness import (
    DEFAULT_SETTINGS,
    CoverageViolation,
    Lineage,
    _Machine,
    _machine,
    _shown,
    _Wiring,
)

#: The draws behind a set of results: up to four ``(branch, index)``: a
#: current attempt for branches 0 and 1, a rival for 2 (another lease of a
#: sibling of an outstanding group: a late answer that matters), any lease
#: of the run for 3, each when there is one. One strategy built once, since
#: building one per rule call is most of the cost of a step.
_PICKS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 16)), min_size=1, max_size=4)


class SampleIntegration(_Wiring):
    """What the sample-level harness needs of an integration: one method
    per event, with ``Integration``'s ``start``, ``stamp``, ``fail``,
    ``checkpoint``, ``crash``, ``resume`` and ``close``.

    Leases are ``frontier_core.Lease`` values (tuples ``(ordinal, sibling,
    attempt)``); the hooks may return any iterables of 3-tuples. A lease is
    also the name of the sample its attempt generates: the replay buffer
    keeps it with the sample, and ``train`` returns it. The harness calls
    the hooks only with legal arguments derived from its own record:
    ``fail`` and ``train`` receive groups that are outstanding or buffered in
    this process life, and the results it delivers name leases that a
    ``dispatch`` returned in some life of the run (current or not). The
    source's answers (``stamp``) and the restored buffer (``resume``) are
    the prompt-level harness's. ``crash`` forgets the in-memory state only:
    what a real crash keeps (the checkpoint directory, a rollout journal, a
    reserved attempt floor) stays with the instance.
    """

    #: The group size n: samples (siblings) per prompt.
    samples: int
    #: What a failed sample fails: under ``SIBLING`` only that sibling is
    #: generated again (its restart comes back through ``dispatch``) and the
    #: group keeps what it sealed; under ``GROUP`` the whole group leaves
    #: outstanding (requeued, or dropped), as ``fail`` does.
    granularity: Granularity = Granularity.SIBLING

    @abc.abstractmethod
    def dispatch(self, n: int) -> tuple[Iterable[Iterable[int]], Iterable[Iterable[int]]]:
        """Start every sibling waiting for a restart and hand up to ``n``
        pending groups (retried ones included) to the rollout workers.
        Returns ``(started, reused)``: the leases started (the restarts,
        and the new attempts of the groups dispatched, ``effect.leases``)
        and the held siblings of those groups reused instead of generated
        (``effect.reused``, under the attempts that sealed them). Every
        sibling of a group dispatched is in one of them; a group whose n
        siblings are all reused is in the buffer at once."""

    @abc.abstractmethod
    def seal(self, leases: list[Lease]) -> Iterable[Iterable[int]]:
        """These workers answered with their samples (at most one lease per
        sibling, current or not). Returns the leases accepted
        (``effect.sealed``); a group lands when its last sibling's is."""

    @abc.abstractmethod
    def fail_sample(self, leases: list[Lease]) -> Iterable[int]:
        """These attempts failed (at most one lease per group, current or
        not). Returns the ordinals the failure policy dropped; the siblings
        to generate again come back through ``dispatch``, and a group that
        failed whole (``GROUP`` granularity) through ``stamp`` and
        ``dispatch``."""

    @abc.abstractmethod
    def train(self, ordinals: list[int]) -> Iterable[Iterable[int]]:
        """One training step over these buffered groups. Returns the
        samples it trained, each named by its lease."""


@attrs.frozen
class SampleLineage(Lineage):
    """The prompt-level ``Lineage``, every sample its steps trained, and
    the samples each buffered group landed with (one per sibling; a group
    leaves them when it trains, or when a resume does not restore it)."""

    samples: tuple[Lease, ...] = ()
    landed: frozenset[Lease] = frozenset()


class SampleIntegrationMachine(_Machine):
    """The sample-level Hypothesis state machine; subclass it with
    ``integration_factory`` set, or let ``sample_integration_machine`` do
    it."""

    integration_factory: Callable[[], SampleIntegration]
    integration: SampleIntegration
    SKIP = DUP = "SAMPLE-EXACTLY-ONCE"
    RETRY = "SAMPLE-RETRY-BOUND"
    FENCING = "ATTEMPT-FENCING"

    def __init__(self) -> None:
        super().__init__()
        self.k = self.integration.samples
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

    def _empty_lineage(self) -> Lineage:
        return SampleLineage()

    # -- reading what the hooks return ------------------------------------------------

    def _leases(self, values: Iterable[Iterable[int]], what: str) -> list[Lease]:
        out = []
        for value in values:
            item = tuple(value) if isinstance(value, Iterable) else ()
            if len(item) != 3 or any(type(x) is not int for x in item):
                raise TypeError(f"{what} returned {value!r:.80}, not (ordinal, sibling, attempt)")
            out.append(Lease(*item))
        return out

    def _violation(self, invariant: str, leases: Iterable[Lease], detail: str) -> None:
        leases = sorted(leases)
        if leases:
            shown = ", ".join(str(tuple(x)) for x in leases[:8])
            raise CoverageViolation(invariant, {x.ordinal for x in leases}, f"{detail} ({shown})")

    def _current(self, lease: Lease) -> bool:
        return self.running.get((lease.ordinal, lease.sibling)) == lease

    # -- the life of a group ---------------------------------------------------------

    def _land(self, ordinal: int) -> None:
        lineage = self.lineage
        assert isinstance(lineage, SampleLineage)
        # The group's samples as of now: what the ledger lands is what the
        # step must train, whatever the integration's buffer keeps after.
        group = self.sealed.pop(ordinal).values()
        self.lineage = attrs.evolve(lineage, landed=lineage.landed.union(group))
        self.outstanding.discard(ordinal)
        self.buffered.add(ordinal)

    def _release(self, ordinals: Iterable[int]) -> None:
        for o in ordinals:
            self.outstanding.discard(o)
            self.sealed.pop(o, None)
            for s in range(self.k):
                self.running.pop((o, s), None)

    def _new_life(self) -> None:
        super()._new_life()
        self.running = {}
        self.sealed = {}

    def _restart(self, index: int) -> None:
        super()._restart(index)
        lineage = self.lineage
        assert isinstance(lineage, SampleLineage)
        known = {x.ordinal for x in lineage.landed}
        if self.buffered - known:
            raise CoverageViolation(
                self.SKIP,
                self.buffered - known,
                "resume restored groups to the buffer that were not in it at the checkpoint",
            )
        # A buffered group the resume did not restore is generated again and
        # lands anew, with other samples.
        landed = frozenset(x for x in lineage.landed if x.ordinal in self.buffered)
        self.lineage = attrs.evolve(lineage, landed=landed)

    def _read_dispatch(self, got: Any) -> tuple[list[Lease], list[Lease]]:
        if not (isinstance(got, tuple) and len(got) == 2):
            raise TypeError(f"dispatch returned {got!r:.80}, not (started, reused)")
        started, reused = got
        return self._leases(started, "dispatch"), self._leases(reused, "dispatch")

    def _record_dispatch(self, got: tuple[list[Lease], list[Lease]]) -> None:
        started, reused = got
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
        groups: dict[int, list[Lease]] = {}
        for x in leases:
            groups.setdefault(x.ordinal, []).append(x)
        new = [o for o in groups if o not in self.outstanding]
        self._fresh(new, "dispatched")
        self._violation(
            self.DUP,
            [x for x in leases if x.ordinal in self.buffered],
            "dispatch started groups that are in the buffer",
        )
        for o in new:
            missing = sorted(set(range(self.k)) - {x.sibling for x in groups[o]})
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
        for o in new:
            self.outstanding.add(o)
            self.sealed[o] = {}
        for x in reused:
            self.sealed[x.ordinal][x.sibling] = x
        for x in started:
            self.running[x[:2]] = x
            self.issued[x] = None
        for o in new:
            if len(self.sealed[o]) == self.k:
                self._land(o)

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

    def _trained(self, ordinals: list[int], trained: object) -> Mapping[str, Any]:
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
        lineage = self.lineage
        assert isinstance(lineage, SampleLineage)
        # One sample per sibling, each one that exists: what is left is that
        # each is the one its sibling landed with, not an earlier attempt's.
        self._violation(
            self.FENCING,
            [x for x in samples if x not in lineage.landed],
            "train trained samples other than those their groups landed with (of an "
            "attempt superseded since: its group failed whole, or its held sibling was "
            "generated again)",
        )
        return {
            "samples": (*lineage.samples, *samples),
            "landed": frozenset(x for x in lineage.landed if x.ordinal not in step),
        }

    # -- rules --------------------------------------------------------------------

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

    def _arrive(self, data: st.DataObject) -> None:
        # Answers come back, a failure among them perhaps (whose restart
        # the next dispatch starts), and the late answers that race them.
        if self.running:
            if data.draw(st.booleans(), label="a sample fails"):
                self.fail_sample(data)
        if self.running:
            self.seal(data)

    @precondition(lambda self: self.issued)
    @rule(data=st.data())
    def seal(self, data: st.DataObject) -> None:
        with self._step():
            results = self._results(data, per_group=False)
            accepted = list(self.integration.seal(results))
            note(f"integration.seal({_shown(results)})  # accepted {_shown(accepted)}")
            self._record_seal(results, accepted)

    @precondition(lambda self: self.issued)
    @rule(data=st.data())
    def fail_sample(self, data: st.DataObject) -> None:
        with self._step():
            results = self._results(data, per_group=True)
            dropped = list(self.integration.fail_sample(results))
            note(f"integration.fail_sample({_shown(results)})  # dropped {dropped}")
            self._record_sample_failure(results, dropped)

    def _drain_round(self) -> bool:
        kept = list(self.integration.stamp(self.n))
        self._record_kept(kept)
        got = self._read_dispatch(self.integration.dispatch(self.n + 1))
        self._record_dispatch(got)
        running = sorted(self.running.values())
        if running:
            self._record_seal(running, self.integration.seal(running))
        if self.buffered:
            step = sorted(self.buffered)
            self._record_step(step, self.integration.train(step))
            return True
        return bool(kept or got[0] or got[1] or running)


def sample_integration_machine(
    factory: Callable[[], SampleIntegration], *, settings: settings | None = None
) -> type[SampleIntegrationMachine]:
    """A sample-level state machine class for ``factory``'s integration;
    collect its ``TestCase`` with pytest or unittest."""
    return _machine(SampleIntegrationMachine, factory, settings)


def run_sample_integration_test(
    factory: Callable[[], SampleIntegration], *, settings: settings | None = None
) -> None:
    """Drive ``factory()`` integrations through random interleavings of
    sample-level events, stale results among them, and raise
    (``CoverageViolation``, or whatever a hook raised) with the failing
    program printed, if any trains a wrong group or loses or duplicates
    one."""
    run_state_machine_as_test(
        sample_integration_machine(factory, settings=settings),
        settings=settings or DEFAULT_SETTINGS,
    )
