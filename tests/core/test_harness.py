"""frontier_core.testing's integration harness: it passes a correct
integration written in under 30 lines, and it catches broken ones with a
printed, replayable program."""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, Phase, settings

from frontier_core import Checkpoint, FailurePolicy, Ledger, LedgerConfig, Status
from frontier_core.testing import (
    CoverageViolation,
    Integration,
    integration_machine,
    run_integration_test,
)

# -- docs/testing.md's example: an outside integration tested in under 30 lines --
# example-start
CONFIG = LedgerConfig(stream_len=10, on_failure=FailurePolicy.RETRY, max_attempts=2)


class BareLedger(Integration):
    stream_len, max_attempts = 10, 2

    def start(self): self.ledger = Ledger.start(CONFIG)  # fmt: skip

    def stamp(self, n):  # fmt: skip
        step = self.ledger.stamp(n)
        self.ledger = step.ledger
        return step.effect.kept

    def dispatch(self, n):  # fmt: skip
        chosen = list(self.ledger.ordinals(Status.PENDING))[:n]
        self.ledger = self.ledger.dispatch(chosen).ledger
        return chosen

    def land(self, ordinals): self.ledger = self.ledger.buffer(ordinals).ledger  # fmt: skip

    def fail(self, ordinals):  # fmt: skip
        step = self.ledger.fail(ordinals)
        self.ledger = step.ledger
        return step.effect.dropped

    def train(self, ordinals): self.ledger = self.ledger.train(ordinals).ledger  # fmt: skip

    def checkpoint(self): return json.dumps(self.ledger.checkpoint().state_dict())  # fmt: skip

    def crash(self): del self.ledger  # fmt: skip

    def resume(self, saved):  # fmt: skip
        record = Checkpoint.from_state_dict(json.loads(saved))
        self.ledger = Ledger.resume(CONFIG, record, load_replay_buffer=True).ledger
        return self.ledger.ordinals(Status.BUFFERED)


# example-end
# fmt: on

FAST = settings(
    max_examples=100,
    derandomize=True,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


# Finding a bug is fast; shrinking it to the shortest program is what takes
# the time, so only test_the_printed_program_replays_against_the_integration
# shrinks.
UNSHRUNK = settings(FAST, phases=[Phase.explicit, Phase.reuse, Phase.generate])


def test_the_example_is_under_30_lines() -> None:
    source = inspect.getsource(sys.modules[__name__])
    body = source.split("# example-start\n")[1].split("# example-end\n")[0]
    lines = [line for line in body.splitlines() if line.strip()]
    # Plus three imports (json, frontier_core, frontier_core.testing) and
    # the call ``run_integration_test(BareLedger)``.
    assert len(lines) + 3 + 1 < 30, len(lines)


def test_a_correct_integration_passes() -> None:
    run_integration_test(BareLedger, settings=FAST)


# The same machine, collected by pytest as a unittest TestCase (zarr style).
TestBareLedgerMachine = integration_machine(BareLedger, settings=FAST).TestCase


def test_an_integration_implements_exactly_the_documented_hooks() -> None:
    """The hooks shared with the sample-level harness stay ``Integration``'s:
    a subclass must implement these nine (``close`` is optional)."""
    assert Integration.__abstractmethods__ == {
        "start",
        "stamp",
        "dispatch",
        "land",
        "fail",
        "train",
        "checkpoint",
        "crash",
        "resume",
    }


# -- broken integrations: each is caught, and the failure names the program ------


class LiveCursor(BareLedger):
    """The legacy bug: checkpoint the loader's live cursor. Everything
    yielded but not trained when the checkpoint was taken is skipped."""

    def checkpoint(self) -> object:
        return self.ledger.next_ordinal

    def resume(self, saved: object) -> Iterable[int]:
        assert isinstance(saved, int)
        self.ledger = Ledger.resume(
            CONFIG, Checkpoint(cut=saved, stream_len=10), load_replay_buffer=True
        ).ledger
        return ()


class ForgetsTheBuffer(BareLedger):
    """Saves the ledger with its buffer retained but restores no buffer and
    tells the ledger it did: the retained groups are never trained."""

    def resume(self, saved: object) -> Iterable[int]:
        assert isinstance(saved, str)
        record = Checkpoint.from_state_dict(json.loads(saved))
        self.ledger = Ledger.resume(CONFIG, record, load_replay_buffer=True).ledger
        return ()


class TrainsTheRestoredBufferTwice(BareLedger):
    """Restores the buffer but resumes the ledger as if it had not, so the
    groups are both in the buffer and generated again."""

    def resume(self, saved: object) -> Iterable[int]:
        assert isinstance(saved, str)
        record = Checkpoint.from_state_dict(json.loads(saved))
        retained = list(record.retained_ordinals())
        self.ledger = Ledger.resume(CONFIG, record, load_replay_buffer=False).ledger
        self.shadow = set(retained)
        return retained

    def train(self, ordinals: list[int]) -> None:
        # The restored groups are trained from the buffer without the ledger.
        shadow = getattr(self, "shadow", set())
        self.ledger = self.ledger.train([o for o in ordinals if o not in shadow]).ledger
        self.shadow = shadow - set(ordinals)


class DropsAtTheFirstFailure(BareLedger):
    """Claims retry but drops at the first failure."""

    def fail(self, ordinals: list[int]) -> Iterable[int]:
        self.ledger = self.ledger.fail(ordinals).ledger
        requeued = [o for o in ordinals if self.ledger.status(o) is Status.PENDING]
        for o in requeued:  # drop it for real: dispatch it and fail it again
            self.ledger = self.ledger.dispatch([o]).ledger.fail([o]).ledger
        return ordinals


@pytest.mark.parametrize(
    ("broken", "invariants"),
    [
        (LiveCursor, {"NO-SKIP"}),
        (ForgetsTheBuffer, {"NO-SKIP"}),
        (TrainsTheRestoredBufferTwice, {"NO-DUP"}),
        (DropsAtTheFirstFailure, {"RETRY-BOUND"}),
    ],
)
def test_a_broken_integration_fails_with_a_replayable_program(
    broken: type[Integration], invariants: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(CoverageViolation) as info:
        run_integration_test(broken, settings=UNSHRUNK)
    assert info.value.invariant in invariants
    printed = capsys.readouterr().out + "\n".join(getattr(info.value, "__notes__", []))
    # The program: one rule call per line, with the hook calls noted.
    assert "state = " in printed and "state.start()" in printed, printed
    assert "state.teardown()" in printed, printed


def test_the_printed_program_replays_against_the_integration() -> None:
    """The hook calls a failure prints are Python: run as written against a
    fresh integration, then drained by hand, they reproduce the loss."""
    with pytest.raises(CoverageViolation) as info:
        run_integration_test(LiveCursor, settings=FAST)
    program = [
        line.split("  # ")[0]
        for line in info.value.__notes__
        if line.startswith(("integration.", "checkpoint_"))
    ]
    assert any("resume(checkpoint_" in line for line in program), program
    assert len(program) <= 8, program  # shrunk: start, yield, checkpoint, crash
    integration = LiveCursor()
    exec("\n".join(program), {"integration": integration})
    trained = {o for line in program if "train(" in line for o in eval(line[17:-1])}
    for _ in range(12):  # drain: the ordinals the live cursor skipped never come back
        integration.stamp(10)
        taken = integration.dispatch(10)
        integration.land(taken)
        buffered = list(integration.ledger.ordinals(Status.BUFFERED))
        integration.train(buffered)
        trained.update(buffered)
    assert trained < set(range(10))
