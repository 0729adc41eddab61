"""Random interleavings of every event, crashes and resumes, against the
naive model; every invariant after every step, exactly-once at the end."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
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
    Buffer,
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

    @initialize(
        target=checkpoints,
        stream_len=st.integers(0, 24),
        policy=st.sampled_from(FailurePolicy),
        max_attempts=st.integers(1, 3),
    )
    def start(self, stream_len: int, policy: FailurePolicy, max_attempts: int) -> object:
        config = LedgerConfig(
            on_failure=policy, max_attempts=max_attempts, stream_len=stream_len, fingerprint="fp"
        )
        self.ledger = Ledger.start(config)
        self.model = Model(config)
        # A run that dies before its first checkpoint restarts from nothing.
        return (roundtrip(self.ledger.checkpoint()), self.model.snapshot(True))

    def _pick(self, data: st.DataObject, status: Status) -> list[int]:
        ordinals = list(self.ledger.ordinals(status))
        chosen = data.draw(
            st.lists(st.sampled_from(ordinals), unique=True) if ordinals else st.just([])
        )
        return chosen

    @rule(count=st.integers(0, 6))
    def stamp(self, count: int) -> None:
        step = self.ledger.stamp(count)
        yielded, kept = self.model.stamp(count)
        assert list(step.effect.stamped) == yielded
        # FILTER-COVERED: kept are exactly the yielded ordinals not covered.
        assert list(step.effect.kept) == kept
        assert list(step.effect.buffered) == self.model.last_buffered
        # FILTER-CLEARS: once past the horizon, everything yielded is kept.
        if not self.ledger.filtering:
            assert list(step.effect.kept) == yielded
        self.ledger = step.ledger

    @rule(n=st.integers(1, 5))
    def gap_fill(self, n: int) -> None:
        """Take the n lowest pending prompts for a target; the rest stay pending."""
        pending = list(self.ledger.ordinals(Status.PENDING))
        taken, rest = pending[:n], pending[n:]
        self.ledger = self.ledger.dispatch(taken).ledger
        self.model.move(taken, Status.PENDING, Status.OUTSTANDING)
        assert list(self.ledger.ordinals(Status.PENDING)) == rest

    @rule(data=st.data())
    def dispatch(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.PENDING)
        self.ledger = self.ledger.dispatch(chosen).ledger
        self.model.move(chosen, Status.PENDING, Status.OUTSTANDING)

    @rule(data=st.data())
    def buffer(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.OUTSTANDING)
        self.ledger = self.ledger.buffer(chosen).ledger
        self.model.move(chosen, Status.OUTSTANDING, Status.BUFFERED)

    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.OUTSTANDING)
        step = self.ledger.fail(chosen)
        expected = self.model.failure(chosen, Status.OUTSTANDING)
        effect = step.effect
        assert (list(effect.requeued), list(effect.unstamped), list(effect.dropped)) == expected
        self.ledger = step.ledger

    @rule(data=st.data())
    def evict(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.BUFFERED)
        step = self.ledger.evict(chosen)
        expected = self.model.failure(chosen, Status.BUFFERED)
        effect = step.effect
        assert (list(effect.requeued), list(effect.unstamped), list(effect.dropped)) == expected
        self.ledger = step.ledger

    @precondition(lambda self: self.ledger.count(Status.BUFFERED) > 0)
    @rule(data=st.data())
    def train(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.BUFFERED)
        self.ledger = self.ledger.train(chosen).ledger
        self.model.train(chosen)

    @rule(data=st.data())
    def land_and_train(self, data: st.DataObject) -> None:
        """A training step as a real loop takes it: whatever landed, some
        of what is still generating lands too, and a step trains a subset."""
        landing = self._pick(data, Status.OUTSTANDING)
        self.ledger = self.ledger.buffer(landing).ledger
        self.model.move(landing, Status.OUTSTANDING, Status.BUFFERED)
        chosen = self._pick(data, Status.BUFFERED)
        self.ledger = self.ledger.train(chosen).ledger
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
        return (saved, self.model.snapshot(save_buffer))

    @rule(saved=checkpoints, load_buffer=st.booleans(), data=st.data())
    def kill_and_resume(self, saved: tuple, load_buffer: bool, data: st.DataObject) -> None:
        """Crash, then restart from a checkpoint (the latest, or an older one
        when a newer record was lost); a kill right after a resume is the
        same rule drawn twice."""
        checkpoint, model_saved = saved
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
