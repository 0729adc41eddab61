"""frontier_core.testing's sample-level harness: the bare ``Ledger``
wired as an integration passes under both granularities (with and without a
journal of its seals), and seeded wiring bugs are caught, each with the
invariant it breaks and a printed, replayable program."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

from frontier_core import (
    Applied,
    Checkpoint,
    FailurePolicy,
    Granularity,
    Lease,
    Ledger,
    LedgerConfig,
    Sibling,
    Status,
)
from frontier_core.testing import (
    CoverageViolation,
    Integration,
    SampleIntegration,
    run_sample_integration_test,
    sample_integration_machine,
)

FAST = settings(
    max_examples=100,
    derandomize=True,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
# Finding a bug is fast (a run stops at the first), so the budget is
# generous; shrinking is what takes the time.
UNSHRUNK = settings(FAST, max_examples=500, phases=[Phase.explicit, Phase.reuse, Phase.generate])


class BareSampleLedger(SampleIntegration):
    """A framework's wiring of the bare ``Ledger``: a sample store
    (the samples of sealed siblings, each named by its lease), a replay
    buffer of whole groups, both saved with the checkpoint, and the attempt
    counter reserved on "disk" (``self.disk`` survives ``crash``, as a
    journal's reserve does), so that a resume fences every attempt of the
    crashed run."""

    stream_len, samples, max_attempts = 7, 2, 2
    granularity = Granularity.SIBLING

    def config(self) -> LedgerConfig:
        return LedgerConfig(
            stream_len=self.stream_len,
            samples=self.samples,
            on_failure=FailurePolicy.RETRY if self.max_attempts > 1 else FailurePolicy.DROP,
            max_attempts=self.max_attempts,
            granularity=self.granularity,
        )

    def start(self) -> None:
        self.disk: dict[str, Any] = {"floor": 0}
        self.ledger = Ledger.start(self.config())
        self.store: dict[tuple[int, int], Lease] = {}
        self.buffer: dict[int, list[Lease]] = {}
        self.to_restart: set[tuple[int, int]] = set()

    def _apply(self, applied: Applied) -> Any:
        self.ledger, e = applied.ledger, applied.effect
        self.disk["floor"] = self.ledger.next_attempt
        for x in e.sealed:
            self.store[x.ordinal, x.sibling] = x
        for o in (*e.requeued, *e.unstamped, *e.dropped):
            self._forget(o)
        for o in e.landed:  # the group goes to the buffer with what the store holds of it
            self.buffer[o] = [self.store.pop(k) for k in sorted(self.store) if k[0] == o]
        return e

    def _forget(self, ordinal: int) -> None:
        for s in range(self.samples):
            self.store.pop((ordinal, s), None)

    def stamp(self, n: int) -> Iterable[int]:
        return self._apply(self.ledger.stamp(n)).kept

    def dispatch(self, n: int) -> tuple[Iterable[Lease], Iterable[Lease]]:
        # Restart the siblings still waiting (a group that failed whole since
        # has none: its detail is gone).
        again = sorted(x for x in self.to_restart if self.ledger.sibling(*x) is not None)
        self.to_restart = set()
        restarted = self._apply(self.ledger.restart(again)).leases
        chosen = list(self.ledger.ordinals(Status.PENDING))[:n]
        e = self._apply(self.ledger.dispatch(chosen))
        return [*restarted, *e.leases], e.reused

    def seal(self, leases: list[Lease]) -> Iterable[Iterable[int]]:
        return self._apply(self.ledger.seal(leases)).sealed

    def fail_sample(self, leases: list[Lease]) -> Iterable[int]:
        e = self._apply(self.ledger.fail_sample(leases))
        self.to_restart.update(e.restart)
        return e.dropped

    def fail(self, ordinals: list[int]) -> Iterable[int]:
        return self._apply(self.ledger.fail(ordinals)).dropped

    def train(self, ordinals: list[int]) -> Iterable[Iterable[int]]:
        self.ledger = self.ledger.train(ordinals).ledger
        return [x for o in ordinals for x in self.buffer.pop(o)]

    def checkpoint(self) -> object:
        # ``save_sealed``: the record lists the sealed siblings of outstanding
        # groups, whose samples are the store's.
        record = self.ledger.checkpoint(save_buffer=True, save_sealed=True).state_dict()
        saved = {f"{o},{s}": x for (o, s), x in self.store.items()}
        return json.dumps({"ledger": record, "buffer": list(self.buffer.items()), "store": saved})

    def crash(self) -> None:
        del self.ledger, self.store, self.buffer, self.to_restart

    def held(self, saved: dict[str, Any]) -> list[Lease]:
        """The sealed siblings whose samples this process has back."""
        return [Lease(*x) for x in saved["store"].values()]

    def resume(self, checkpoint: object) -> Iterable[int]:
        assert isinstance(checkpoint, str)
        saved = json.loads(checkpoint)
        record = Checkpoint.from_state_dict(saved["ledger"])
        held = self.held(saved)
        resumed = Ledger.resume(
            self.config(),
            record,
            load_replay_buffer=True,
            sealed=held,
            attempt_floor=self.disk["floor"],
        )
        self.ledger, self.to_restart = resumed.ledger, set()
        kept = set(resumed.reused)  # the ledger ignores those of groups not to generate
        self.store = {(x.ordinal, x.sibling): x for x in held if x in kept}
        self.buffer = {o: [Lease(*x) for x in xs] for o, xs in saved["buffer"]}
        return list(self.buffer)


class GroupGranularity(BareSampleLedger):
    granularity = Granularity.GROUP


class DropPolicy(BareSampleLedger):
    stream_len, samples, max_attempts = 6, 3, 1


class Journaled(BareSampleLedger):
    """Also journals every accepted seal on disk (it survives the crash) and
    resumes holding the latest sample of each sibling it journaled: samples
    sealed after the checkpoint, of a dead branch among them, are reused."""

    def start(self) -> None:
        super().start()
        self.disk["journal"] = []

    def seal(self, leases: list[Lease]) -> Iterable[Iterable[int]]:
        sealed = super().seal(leases)
        self.disk["journal"].extend(sealed)
        return sealed

    def held(self, saved: dict[str, Any]) -> list[Lease]:
        latest = {(x.ordinal, x.sibling): x for x in super().held(saved)}
        for x in self.disk["journal"]:
            latest[x.ordinal, x.sibling] = x
        return sorted(latest.values())


@pytest.mark.parametrize("integration", [BareSampleLedger, GroupGranularity, DropPolicy, Journaled])
def test_the_bare_sample_ledger_wired_as_an_integration_passes(
    integration: type[SampleIntegration],
) -> None:
    run_sample_integration_test(integration, settings=FAST)


# The same machine, collected by pytest as a unittest TestCase.
TestBareSampleLedgerMachine = sample_integration_machine(BareSampleLedger, settings=FAST).TestCase


def test_a_sample_integration_implements_its_hooks_and_shares_the_rest() -> None:
    assert SampleIntegration.__abstractmethods__ == {
        "start",
        "stamp",
        "dispatch",
        "seal",
        "fail_sample",
        "fail",
        "train",
        "checkpoint",
        "crash",
        "resume",
    }
    # The source, failures, checkpoints and crashes are the prompt-level
    # harness's hooks, documented once.
    for hook in ("start", "stamp", "fail", "checkpoint", "crash", "resume", "close"):
        assert getattr(SampleIntegration, hook) is getattr(Integration, hook), hook


# -- seeded wiring bugs: each is caught, naming the invariant it breaks -------------


class TrainsAFencedResult(BareSampleLedger):
    """The store keeps whatever answer arrives for an outstanding group's
    sibling, fenced ones too (the ledger's accounting is right): a late
    answer overwrites the sample the current attempt sealed."""

    def seal(self, leases: list[Lease]) -> Iterable[Iterable[int]]:
        for x in leases:
            if (x.ordinal, x.sibling) in self.store:
                self.store[x.ordinal, x.sibling] = x
        return super().seal(leases)


class LosesASealedSiblingOnResume(BareSampleLedger):
    """Tells the ledger it holds the checkpoint's sealed siblings but does
    not restore their samples: the groups land with a sibling missing."""

    def resume(self, checkpoint: object) -> Iterable[int]:
        restored = super().resume(checkpoint)
        self.store = {}
        return restored


class TrainsAGroupMissingASibling(BareSampleLedger):
    """Treats a failed sample as a failed group in its store (the ledger,
    under ``sibling`` granularity, keeps the group's sealed siblings): the
    group lands and trains without them."""

    def fail_sample(self, leases: list[Lease]) -> Iterable[int]:
        for x in leases:
            if self.ledger.sibling(x.ordinal, x.sibling) == (Sibling.RUNNING, x.attempt):
                self._forget(x.ordinal)
        return super().fail_sample(leases)


class TrainsAStaleSiblingAfterAGroupFailure(GroupGranularity):
    """Its store keeps each sibling's first sample (a sealed sibling's
    second result is fenced anyway, it reasons) and forgets a group's
    samples when the group leaves the run, but not when it fails whole and
    is requeued: the regenerated group lands with a sample its sibling
    sealed before the failure, every sample one a worker produced while
    current, one per sibling."""

    def _apply(self, applied: Applied) -> Any:
        self.ledger, e = applied.ledger, applied.effect
        self.disk["floor"] = self.ledger.next_attempt
        for x in e.sealed:
            self.store.setdefault((x.ordinal, x.sibling), x)
        for o in (*e.unstamped, *e.dropped):  # not ``e.requeued``: the bug
            self._forget(o)
        for o in e.landed:
            self.buffer[o] = [self.store.pop(k) for k in sorted(self.store) if k[0] == o]
        return e


class DropsAtTheFirstFailedSample(BareSampleLedger):
    """Claims two attempts per group but configures the ledger with one."""

    def config(self) -> LedgerConfig:
        return LedgerConfig(
            stream_len=self.stream_len, samples=self.samples, on_failure=FailurePolicy.DROP
        )


class ForgetsTheAttemptFloor(BareSampleLedger):
    """Resumes without the reserved floor: the counter goes back to the
    checkpoint's, and a new attempt names a lease of the crashed run."""

    def resume(self, checkpoint: object) -> Iterable[int]:
        self.disk["floor"] = 0
        return super().resume(checkpoint)

    def _stale_is_fenced(self, leases: list[Lease]) -> list[Lease]:
        # The ledger refuses a lease it never handed out (above its counter);
        # this wiring drops those answers, as a loop that ignores unknown ids.
        return [x for x in leases if x.attempt < self.ledger.next_attempt]

    def seal(self, leases: list[Lease]) -> Iterable[Iterable[int]]:
        return super().seal(self._stale_is_fenced(leases))

    def fail_sample(self, leases: list[Lease]) -> Iterable[int]:
        return super().fail_sample(self._stale_is_fenced(leases))


@pytest.mark.parametrize(
    ("broken", "invariant"),
    [
        (TrainsAFencedResult, "ATTEMPT-FENCING"),
        (LosesASealedSiblingOnResume, "SAMPLE-EXACTLY-ONCE"),
        (TrainsAGroupMissingASibling, "SAMPLE-EXACTLY-ONCE"),
        (TrainsAStaleSiblingAfterAGroupFailure, "ATTEMPT-FENCING"),
        (DropsAtTheFirstFailedSample, "SAMPLE-RETRY-BOUND"),
        (ForgetsTheAttemptFloor, "ATTEMPT-FENCING"),
    ],
)
def test_a_broken_integration_fails_naming_the_invariant(
    broken: type[SampleIntegration], invariant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CoverageViolation) as info:
        run_sample_integration_test(broken, settings=UNSHRUNK)
    assert info.value.invariant == invariant, info.value
    printed = capsys.readouterr().out + "\n".join(getattr(info.value, "__notes__", []))
    assert "state.start()" in printed and "integration.start()" in printed, printed


def _plain(value: Any) -> Any:
    """A hook's return value as the program's comments print it."""
    if isinstance(value, tuple) and len(value) == 2 and not isinstance(value, Lease):
        return tuple(_plain(v) for v in value)  # dispatch: (started, reused)
    return [tuple(x) if isinstance(x, Iterable) else x for x in value]


class ShortLoses(LosesASealedSiblingOnResume):
    stream_len = 3


# A short stream and run, shrunk but not explained (the explain phase
# replays the failure many times over).
SHRUNK = settings(
    FAST,
    # Found within 300 examples when run alone, but not always inside the
    # whole suite (the search is derandomised, yet something it reaches
    # depends on the process: hash order or a module-level counter; not
    # pinned down yet): a larger budget, spent only until the first find.
    max_examples=2000,
    stateful_step_count=20,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)


def test_the_printed_program_replays_against_the_integration() -> None:
    """The hook calls a failure prints are Python: run as written against a
    fresh integration, every call returns what its comment says, and the
    drain that follows trains a group without one of its samples."""
    with pytest.raises(CoverageViolation) as info:
        run_sample_integration_test(ShortLoses, settings=SHRUNK)
    program = [
        line for line in info.value.__notes__ if line.startswith(("integration.", "checkpoint_"))
    ]
    assert any("resume(checkpoint_" in line for line in program), program
    assert len(program) <= 8, program  # shrunk: start, yield, dispatch, seal, checkpoint, crash
    integration = ShortLoses()
    namespace: dict[str, Any] = {"integration": integration}
    for line in program:
        code, _, comment = line.partition("  # ")
        claim = comment.split(" ", 1)
        if claim[0] in ("->", "kept", "accepted", "dropped"):
            assert _plain(eval(code, namespace)) == eval(claim[1]), line
        else:
            exec(code, namespace)
    trained: list[Lease] = []
    for _ in range(12):  # drain by hand: every group trains, one of them short
        integration.stamp(10)
        started, _reused = integration.dispatch(10)
        integration.seal(list(started))
        trained += integration.train(sorted(integration.buffer))
    per_group = Counter(x.ordinal for x in trained)
    assert sorted(per_group) == list(range(integration.stream_len))
    assert min(per_group.values()) < integration.samples, per_group


class ReturnsAFlatDispatch(BareSampleLedger):
    """Returns the prompt-level shape: one list of leases."""

    def dispatch(self, n: int) -> Any:
        started, reused = super().dispatch(n)
        return [*started, *reused]


def test_a_hook_that_returns_the_wrong_shape_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"not \(started, reused\)"):
        run_sample_integration_test(ReturnsAFlatDispatch, settings=UNSHRUNK)
