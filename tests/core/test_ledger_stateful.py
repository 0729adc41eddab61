"""Random interleavings of every event, crashes and resumes, against the
naive model; every invariant after every step, exactly-once at the end.

Each step ``note()``s the call it made, so a failing example prints a
program that replays it against the public API.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from frontier_core import (
    Applied,
    Buffer,
    Checkpoint,
    Dispatch,
    Evict,
    Fail,
    FailurePolicy,
    IllegalTransitionError,
    Ledger,
    LedgerConfig,
    Status,
    Train,
)

from ._model import Model, ModelCheckpoint, check_all, check_exactly_once, drain, roundtrip

_SOURCE = {
    Dispatch: Status.PENDING,
    Buffer: Status.OUTSTANDING,
    Fail: Status.OUTSTANDING,
    Evict: Status.BUFFERED,
    Train: Status.BUFFERED,
}


class LedgerMachine(RuleBasedStateMachine):
    """The ledger under random kills, with checkpoints as bundle values."""

    checkpoints = Bundle("checkpoints")

    def __init__(self) -> None:
        super().__init__()
        self.ledger: Ledger
        self.model: Model
        self.saved = 0

    def _save(self, checkpoint: Checkpoint, save_buffer: bool) -> tuple[object, ...]:
        """A bundle value: the checkpoint, the model's, and its name in the notes."""
        name = f"checkpoint_{self.saved}"
        self.saved += 1
        note(f"{name} = ledger.checkpoint(save_buffer={save_buffer})")
        return (checkpoint, self.model.snapshot(save_buffer), name)

    def _apply(self, method: str, ordinals: list[int], comment: str = "") -> Applied:
        step: Applied = getattr(self.ledger, method)(ordinals)
        note(f"ledger = ledger.{method}({ordinals}).ledger{comment}")
        self.ledger = step.ledger
        return step

    @initialize(
        target=checkpoints,
        stream_len=st.integers(0, 24),
        policy=st.sampled_from(FailurePolicy),
        max_failures=st.integers(1, 3),
    )
    def start(self, stream_len: int, policy: FailurePolicy, max_failures: int) -> object:
        config = LedgerConfig(
            on_failure=policy, max_failures=max_failures, stream_len=stream_len, fingerprint="fp"
        )
        self.ledger = Ledger.start(config)
        self.model = Model(config)
        note(
            f"config = LedgerConfig(on_failure=FailurePolicy.{policy.name}, "
            f"max_failures={max_failures}, stream_len={stream_len}, fingerprint='fp')"
        )
        note("ledger = Ledger.start(config)")
        # A run that dies before its first checkpoint restarts from nothing.
        return self._save(roundtrip(self.ledger.checkpoint()), True)

    def _pick(self, data: st.DataObject, status: Status) -> list[int]:
        ordinals = list(self.ledger.ordinals(status))
        chosen = data.draw(
            st.lists(st.sampled_from(ordinals), unique=True) if ordinals else st.just([])
        )
        return chosen

    @rule(count=st.integers(0, 6))
    def stamp(self, count: int) -> None:
        step = self.ledger.stamp(count)
        note(
            f"ledger = ledger.stamp({count}).ledger  # stamped {list(step.effect.stamped)}, "
            f"kept {list(step.effect.kept)}"
        )
        stamped, kept = self.model.stamp(count)
        assert list(step.effect.stamped) == stamped
        # FILTER-COVERED: kept are exactly the stamped ordinals not covered.
        assert list(step.effect.kept) == kept
        assert list(step.effect.buffered) == self.model.last_buffered
        # FILTER-CLEARS: once past the horizon, everything stamped is kept.
        if not self.ledger.filtering:
            assert list(step.effect.kept) == stamped
        self.ledger = step.ledger

    @rule(n=st.integers(1, 5))
    def gap_fill(self, n: int) -> None:
        """Take the n lowest pending prompts for a target; the rest stay pending."""
        pending = list(self.ledger.ordinals(Status.PENDING))
        taken, rest = pending[:n], pending[n:]
        self._apply("dispatch", taken, "  # gap fill")
        self.model.move(taken, Status.PENDING, Status.OUTSTANDING)
        assert list(self.ledger.ordinals(Status.PENDING)) == rest

    @rule(data=st.data())
    def dispatch(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.PENDING)
        self._apply("dispatch", chosen)
        self.model.move(chosen, Status.PENDING, Status.OUTSTANDING)

    @rule(data=st.data())
    def buffer(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.OUTSTANDING)
        self._apply("buffer", chosen)
        self.model.move(chosen, Status.OUTSTANDING, Status.BUFFERED)

    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.OUTSTANDING)
        self._failure("fail", chosen, Status.OUTSTANDING)

    def _failure(self, method: str, chosen: list[int], source: Status) -> None:
        step = self._apply(method, chosen)
        effect = step.effect
        note(
            f"# requeued {list(effect.requeued)}, unstamped {list(effect.unstamped)}, "
            f"dropped {list(effect.dropped)}"
        )
        expected = self.model.failure(chosen, source)
        assert (list(effect.requeued), list(effect.unstamped), list(effect.dropped)) == expected

    @rule(data=st.data())
    def evict(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.BUFFERED)
        self._failure("evict", chosen, Status.BUFFERED)

    @precondition(lambda self: self.ledger.count(Status.BUFFERED) > 0)
    @rule(data=st.data())
    def train(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.BUFFERED)
        self._apply("train", chosen)
        self.model.train(chosen)

    @rule(data=st.data())
    def land_and_train(self, data: st.DataObject) -> None:
        """A training step as a real loop takes it: whatever landed, some
        of what is still generating lands too, and a step trains a subset."""
        landing = self._pick(data, Status.OUTSTANDING)
        self._apply("buffer", landing)
        self.model.move(landing, Status.OUTSTANDING, Status.BUFFERED)
        chosen = self._pick(data, Status.BUFFERED)
        self._apply("train", chosen)
        self.model.train(chosen)

    @rule(
        data=st.data(),
        event=st.sampled_from([Dispatch, Buffer, Fail, Evict, Train]),
    )
    def illegal(self, data: st.DataObject, event: type) -> None:
        """ILLEGAL-NOCHANGE: an event naming one ordinal in the wrong state
        raises, names it, and leaves the ledger as it was."""
        source = _SOURCE[event]
        top = self.ledger.next_ordinal + 3
        wrong = [o for o in range(top) if self.ledger.status(o) != source]
        if not wrong:
            return
        bad = data.draw(st.sampled_from(wrong))
        good = list(self.ledger.ordinals(source))[:2]
        before = self.ledger
        snapshot = list(before.checkpoint().state_dict().items())
        note(
            "with pytest.raises(IllegalTransitionError):  # changes nothing\n"
            f"    ledger.apply({event.__name__}({[*good, bad]}))"
        )
        with pytest.raises(IllegalTransitionError) as info:
            before.apply(event([*good, bad]))
        assert info.value.event == event.name
        assert bad in info.value.ordinals
        assert self.ledger is before
        assert list(before.checkpoint().state_dict().items()) == snapshot

    @rule(target=checkpoints, save_buffer=st.booleans())
    def checkpoint(self, save_buffer: bool) -> object:
        saved = roundtrip(self.ledger.checkpoint(save_buffer=save_buffer))
        assert saved.cut == self.ledger.cut
        return self._save(saved, save_buffer)

    @rule(saved=checkpoints, load_buffer=st.booleans(), data=st.data())
    def kill_and_resume(self, saved: tuple, load_buffer: bool, data: st.DataObject) -> None:
        """Crash, then restart from a checkpoint (the latest, or an older one
        when a newer record was lost); a kill right after a resume is the
        same rule drawn twice."""
        checkpoint, model_saved, name = saved
        assert isinstance(model_saved, ModelCheckpoint)
        retained = sorted(checkpoint.retained_ordinals())
        evicted: list[int] = []
        if load_buffer and retained:
            evicted = data.draw(st.lists(st.sampled_from(retained), unique=True))
        resumed = Ledger.resume(
            self.ledger.config,
            checkpoint,
            load_replay_buffer=load_buffer,
            evicted_on_restore=evicted,
        )
        note(
            f"ledger = Ledger.resume(config, {name}, load_replay_buffer={load_buffer}, "
            f"evicted_on_restore={evicted}).ledger  # killed; rewind_to {resumed.rewind_to}, "
            f"covered {list(resumed.covered)}"
        )
        covered = self.model.restore(model_saved, load_buffer, set(evicted))
        # RESUME-EXACT: the source restarts at the cut; covered is what the
        # filter will drop.
        assert resumed.rewind_to == checkpoint.cut == resumed.ledger.cut
        assert list(resumed.covered) == covered
        self.ledger = resumed.ledger

    @invariant()
    def invariants_hold(self) -> None:
        if hasattr(self, "ledger"):
            check_all(self.ledger, self.model)

    def teardown(self) -> None:
        if hasattr(self, "ledger"):
            note("# then drain: stamp, dispatch, buffer and train everything until drained")
            drain(self.ledger, self.model)
            # NO-SKIP and NO-DUP over the whole lineage.
            check_exactly_once(self.model)


LedgerMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLedgerMachine = LedgerMachine.TestCase
