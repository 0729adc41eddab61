"""Random interleavings of every sample-level event, crashes and resumes,
against the naive model of ``_sample_model.py``; every invariant after every
step, and per-sample exactly-once over the drained lineage at the end.

Results are drawn from every lease ever handed out, in any life of the run,
so late answers, second answers and answers from before a crash all occur.
A crash resumes from any earlier checkpoint; the sealed siblings the resume
holds are what a journal made durable (a random subset of every seal ever
accepted, the latest attempt per sibling, as a journal replays) and, when
the framework restored them, the checkpoint's own. Each step ``note()``s
the call it made, so a failing example reads as a program.
"""

from __future__ import annotations

import json

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
    Checkpoint,
    FailurePolicy,
    Granularity,
    IllegalTransitionError,
    Lease,
    Ledger,
    LedgerConfig,
    Sibling,
    Status,
)

from ._sample_model import (
    SampleModel,
    SampleModelCheckpoint,
    check_all_samples,
    check_drained_exactly_once,
    check_sample_exactly_once,
)


def roundtrip(checkpoint: Checkpoint) -> Checkpoint:
    record = json.loads(json.dumps(checkpoint.state_dict()))
    return Checkpoint.from_state_dict(record, fingerprint="fp")


class SampleLedgerMachine(RuleBasedStateMachine):
    checkpoints = Bundle("checkpoints")

    def __init__(self) -> None:
        super().__init__()
        self.ledger: Ledger
        self.model: SampleModel
        self.saved = 0

    # -- helpers --------------------------------------------------------------------

    def _save(self, checkpoint: Checkpoint, save_buffer: bool, save_sealed: bool) -> object:
        name = f"checkpoint_{self.saved}"
        self.saved += 1
        note(f"{name} = ledger.checkpoint(save_buffer={save_buffer}, save_sealed={save_sealed})")
        return (checkpoint, self.model.snapshot(save_buffer, save_sealed), name)

    def _pick(self, data: st.DataObject, status: Status, least: int = 0) -> list[int]:
        ordinals = list(self.ledger.ordinals(status))
        if not ordinals:
            return []
        return data.draw(
            st.lists(st.sampled_from(ordinals), min_size=least, unique=True), label=status.name
        )

    def _results(self, data: st.DataObject) -> list[Lease]:
        """Some results: mostly of running attempts, the rest of any lease
        ever handed out; at most one per sibling (an event lists each once)."""
        everything = sorted(Lease(o, s, a) for a, (o, s) in self.model.issued.items())
        if not everything:
            return []
        running = sorted(self.ledger.running())
        pool = st.sampled_from(everything)
        if running:
            pool = st.one_of(st.sampled_from(running), st.sampled_from(running), pool)
        picked = data.draw(st.lists(pool, min_size=1, max_size=4), label="results")
        return list({x[:2]: x for x in picked}.values())

    def _issued(self, leases: tuple[Lease, ...]) -> None:
        """ATTEMPT-FENCING: every attempt handed out is new to the run,
        across every life (the model records it)."""
        for x in leases:
            assert x.attempt not in self.model.issued or self.model.issued[x.attempt] == x[:2]

    # -- configuration --------------------------------------------------------------

    @initialize(
        target=checkpoints,
        stream_len=st.integers(0, 10),
        samples=st.integers(1, 3),
        policy=st.sampled_from(FailurePolicy),
        granularity=st.sampled_from(Granularity),
        max_failures=st.integers(1, 3),
    )
    def start(
        self,
        stream_len: int,
        samples: int,
        policy: FailurePolicy,
        granularity: Granularity,
        max_failures: int,
    ) -> object:
        config = LedgerConfig(
            on_failure=policy,
            max_failures=max_failures,
            stream_len=stream_len,
            fingerprint="fp",
            samples=samples,
            granularity=granularity,
        )
        self.ledger = Ledger.start(config)
        self.model = SampleModel(config)
        note(
            f"config = LedgerConfig(on_failure=FailurePolicy.{policy.name}, max_failures="
            f"{max_failures}, stream_len={stream_len}, fingerprint='fp', samples={samples}, "
            f"granularity=Granularity.{granularity.name})"
        )
        note("ledger = Ledger.start(config)")
        return self._save(roundtrip(self.ledger.checkpoint()), True, True)

    # -- the source and the groups ------------------------------------------------------

    @rule(count=st.integers(0, 4))
    def stamp(self, count: int) -> None:
        step = self.ledger.stamp(count)
        note(f"ledger = ledger.stamp({count}).ledger  # kept {list(step.effect.kept)}")
        stamped, kept = self.model.groups.stamp(count)
        assert list(step.effect.stamped) == stamped
        assert list(step.effect.kept) == kept
        self.ledger = step.ledger

    @rule(data=st.data())
    def dispatch(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.PENDING, least=1)
        step = self.ledger.dispatch(chosen)
        e = step.effect
        note(
            f"ledger = ledger.dispatch({chosen}).ledger  # leases {list(e.leases)}, "
            f"reused {list(e.reused)}, landed {list(e.landed)}"
        )
        leases, reused, landed = self.model.dispatch(chosen)
        assert list(e.leases) == leases
        assert list(e.reused) == reused
        assert sorted(e.landed) == sorted(landed)
        self._issued(e.leases)
        self.ledger = step.ledger

    @rule(data=st.data())
    def seal(self, data: st.DataObject) -> None:
        results = self._results(data)
        step = self.ledger.seal(results)
        e = step.effect
        note(
            f"ledger = ledger.seal({[tuple(x) for x in results]}).ledger  # fenced "
            f"{[tuple(x) for x in e.fenced]}, landed {list(e.landed)}"
        )
        sealed, fenced, landed = self.model.seal(results)
        assert list(e.sealed) == sealed
        assert list(e.fenced) == fenced
        assert sorted(e.landed) == sorted(landed)
        self.ledger = step.ledger

    @rule(data=st.data())
    def fail_sample(self, data: st.DataObject) -> None:
        results = self._results(data)
        step = self.ledger.fail_sample(results)
        e = step.effect
        note(
            f"ledger = ledger.fail_sample({[tuple(x) for x in results]}).ledger  # restart "
            f"{list(e.restart)}, requeued {list(e.requeued)}, dropped {list(e.dropped)}, "
            f"fenced {[tuple(x) for x in e.fenced]}"
        )
        expected = self.model.fail_sample(results)
        # One event acts as its failures in turn; the order of the report
        # within each list is the ledger's.
        assert sorted(e.restart) == sorted(expected["restart"])  # type: ignore[type-var]
        assert sorted(e.requeued) == sorted(expected["requeued"])  # type: ignore[type-var]
        assert sorted(e.unstamped) == sorted(expected["unstamped"])  # type: ignore[type-var]
        assert sorted(e.dropped) == sorted(expected["dropped"])  # type: ignore[type-var]
        assert sorted(e.fenced) == sorted(expected["fenced"])  # type: ignore[type-var]
        self.ledger = step.ledger

    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        unstarted = sorted(
            k for k, (st_, _) in self.model.siblings.items() if st_ is Sibling.UNSTARTED
        )
        chosen = (
            data.draw(
                st.lists(st.sampled_from(unstarted), min_size=1, unique=True), label="restart"
            )
            if unstarted
            else []
        )
        step = self.ledger.restart(chosen)
        note(f"ledger = ledger.restart({chosen}).ledger  # leases {list(step.effect.leases)}")
        assert list(step.effect.leases) == self.model.restart(chosen)
        self._issued(step.effect.leases)
        self.ledger = step.ledger

    @rule(data=st.data(), count=st.integers(0, 4))
    def advance(self, data: st.DataObject, count: int) -> None:
        """A slice of a real loop: the source yields, groups go to rollout,
        results come back (a failure among them, perhaps, and its restart),
        a training step takes what landed."""
        self.stamp(count)
        self.dispatch(data)
        if data.draw(st.booleans(), label="a sample fails"):
            self.fail_sample(data)
            self.restart(data)
        self.seal(data)
        if self.ledger.count(Status.BUFFERED):
            self.train(data)

    @rule(data=st.data())
    def buffer_whole(self, data: st.DataObject) -> None:
        """The framework reports whole groups landed (the prompt-level API)."""
        chosen = self._pick(data, Status.OUTSTANDING)[:1]
        self.ledger = self.ledger.buffer(chosen).ledger
        note(f"ledger = ledger.buffer({chosen}).ledger")
        self.model.buffer_whole(chosen)

    @rule(data=st.data())
    def fail_whole(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.OUTSTANDING)
        step = self.ledger.fail(chosen)
        note(f"ledger = ledger.fail({chosen}).ledger  # dropped {list(step.effect.dropped)}")
        expected = self.model.fail_whole(chosen)
        assert (
            list(step.effect.requeued),
            list(step.effect.unstamped),
            list(step.effect.dropped),
        ) == expected
        self.ledger = step.ledger

    @rule(data=st.data())
    def evict(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.BUFFERED)
        step = self.ledger.evict(chosen)
        note(f"ledger = ledger.evict({chosen}).ledger")
        expected = self.model.evict(chosen)
        assert (
            list(step.effect.requeued),
            list(step.effect.unstamped),
            list(step.effect.dropped),
        ) == expected
        self.ledger = step.ledger

    @precondition(lambda self: self.ledger.count(Status.BUFFERED) > 0)
    @rule(data=st.data())
    def train(self, data: st.DataObject) -> None:
        chosen = self._pick(data, Status.BUFFERED)
        self.ledger = self.ledger.train(chosen).ledger
        note(f"ledger = ledger.train({chosen}).ledger")
        self.model.train(chosen)

    @rule(data=st.data(), kind=st.sampled_from(["attempt", "sibling", "restart", "dispatch"]))
    def illegal(self, data: st.DataObject, kind: str) -> None:
        """SAMPLE-ILLEGAL-NOCHANGE: an illegal sample event raises, names
        the ordinal, and the ledger is as it was."""
        before = self.ledger
        record = before.checkpoint().state_dict()
        n = self.model.n
        top = before.next_ordinal + 2
        o = data.draw(st.integers(0, top), label="ordinal")
        if kind in ("attempt", "sibling"):
            bad = (
                Lease(
                    o,
                    data.draw(st.integers(0, n - 1)),
                    before.next_attempt + data.draw(st.integers(0, 3)),
                )
                if kind == "attempt"
                else Lease(
                    o,
                    n + data.draw(st.integers(0, 2)),
                    data.draw(st.integers(0, max(before.next_attempt - 1, 0))),
                )
            )
            method = data.draw(st.sampled_from(["seal", "fail_sample"]))
            note(f"ledger.{method}([{tuple(bad)}])  # raises")
            with pytest.raises(IllegalTransitionError) as info:
                getattr(before, method)([*sorted(before.running())[:1], bad])
            assert info.value.event == method and o in info.value.ordinals
        elif kind == "restart":
            s = data.draw(st.integers(0, n))
            if self.model.siblings.get((o, s), (None,))[0] is Sibling.UNSTARTED and s < n:
                return
            note(f"ledger.restart([{(o, s)}])  # raises")
            with pytest.raises(IllegalTransitionError) as info:
                before.restart([(o, s)])
            assert info.value.event == "restart" and info.value.ordinals == (o,)
        else:
            if before.status(o) is Status.PENDING:
                return
            note(f"ledger.dispatch([{o}])  # raises")
            with pytest.raises(IllegalTransitionError) as info:
                before.dispatch([o])
            assert info.value.event == "dispatch" and info.value.ordinals == (o,)
        assert self.ledger is before
        assert before.checkpoint().state_dict() == record

    # -- checkpoints and crashes -------------------------------------------------------

    @rule(target=checkpoints, save_buffer=st.booleans(), save_sealed=st.booleans())
    def checkpoint(self, save_buffer: bool, save_sealed: bool) -> object:
        saved = roundtrip(self.ledger.checkpoint(save_buffer=save_buffer, save_sealed=save_sealed))
        assert saved.next_attempt == self.model.next_attempt
        assert list(saved.sealed) == (self.model.held() if save_sealed else [])
        return self._save(saved, save_buffer, save_sealed)

    @rule(saved=checkpoints, load_buffer=st.booleans(), data=st.data())
    def crash_and_resume(self, saved: tuple, load_buffer: bool, data: st.DataObject) -> None:
        checkpoint, model_saved, name = saved
        assert isinstance(checkpoint, Checkpoint)
        assert isinstance(model_saved, SampleModelCheckpoint)
        retained = sorted(checkpoint.retained_ordinals())
        evicted: list[int] = []
        if load_buffer and retained:
            evicted = data.draw(st.lists(st.sampled_from(retained), unique=True), label="evicted")
        # What the journal made durable: every seal ever accepted, or some.
        accepted = sorted(self.model.accepted)
        if data.draw(st.booleans(), label="whole journal"):
            durable = accepted
        else:
            durable = [x for x in accepted if data.draw(st.booleans())]
        restore_sealed = data.draw(st.booleans(), label="restore checkpoint.sealed")
        held: dict[tuple[int, int], Lease] = {}
        for x in sorted([*durable, *(checkpoint.sealed if restore_sealed else ())]):
            held[x[:2]] = x  # the latest attempt of each sibling
        sealed = sorted(held.values())
        # A journal knows how far the crashed run counted.
        floor = self.ledger.next_attempt
        resumed = Ledger.resume(
            self.ledger.config,
            checkpoint,
            load_replay_buffer=load_buffer,
            evicted_on_restore=evicted,
            sealed=sealed,
            attempt_floor=floor,
        )
        note(
            f"ledger = Ledger.resume(config, {name}, load_replay_buffer={load_buffer}, "
            f"evicted_on_restore={evicted}, sealed={[tuple(x) for x in sealed]}, "
            f"attempt_floor={floor}).ledger  # killed; reused {[tuple(x) for x in resumed.reused]}"
        )
        reused, ignored = self.model.restore(model_saved, load_buffer, set(evicted), sealed, floor)
        assert list(resumed.reused) == reused
        assert list(resumed.ignored) == ignored
        assert resumed.rewind_to == checkpoint.cut
        # ATTEMPT-MONOTONE across the crash.
        assert resumed.ledger.next_attempt >= max(floor, checkpoint.next_attempt)
        self.ledger = resumed.ledger

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        if hasattr(self, "ledger"):
            check_all_samples(self.ledger, self.model)

    def teardown(self) -> None:
        if not hasattr(self, "ledger"):
            return
        note("# then drain: stamp, dispatch, seal every running attempt, train")
        ledger, model = self.ledger, self.model
        assert model.config.stream_len is not None
        for _ in range(4 * model.config.stream_len + 8):
            if ledger.drained:
                break
            ledger = ledger.stamp(5).ledger
            model.groups.stamp(5)
            pending = list(ledger.ordinals(Status.PENDING))
            step = ledger.dispatch(pending)
            assert list(step.effect.leases) == model.dispatch(pending)[0]
            ledger = step.ledger
            unstarted = sorted(k for k, (s, _) in model.siblings.items() if s is Sibling.UNSTARTED)
            step = ledger.restart(unstarted)
            assert list(step.effect.leases) == model.restart(unstarted)
            ledger = step.ledger
            running = sorted(ledger.running())
            step = ledger.seal(running)
            assert list(step.effect.sealed) == model.seal(running)[0] == running
            ledger = step.ledger
            buffered = list(ledger.ordinals(Status.BUFFERED))
            ledger = ledger.train(buffered).ledger
            model.train(buffered)
            check_all_samples(ledger, model)
        assert ledger.drained, ledger
        assert ledger.sibling_count() == 0 and list(ledger.held()) == []
        check_drained_exactly_once(model)
        check_sample_exactly_once(ledger, model)


SampleLedgerMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSampleLedgerMachine = SampleLedgerMachine.TestCase
