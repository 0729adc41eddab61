"""The rollout loop's event order against a scripted engine: success,
failure, timeout, engine-side abort, shutdown mid-flight, and a checkpoint
taken between a group landing and its worker exiting. No torch: the loop
and the collector need only asyncio and frontier_core."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from frontier_adapters import SequenceSource, StreamCollector, Taken
from frontier_adapters._collector import Pull
from frontier_adapters.rollout._engine import Completion, RequestOutput
from frontier_adapters.rollout._loop import Group, RolloutEvent, RolloutLoop

from frontier_core import FailurePolicy, LedgerConfig, Status

from ._deadline import run_within

N_GEN = 3


def ListSource(n: int, batch: int = 4) -> SequenceSource:
    """A seekable in-memory stream of rows ``r0, r1, ...`` in batches."""
    return SequenceSource([f"r{o}" for o in range(n)], batch_size=batch)


class Sink:
    def __init__(self) -> None:
        self.groups: dict[int, Group] = {}

    def add(self, group: Group) -> None:
        assert group.ordinal not in self.groups
        self.groups[group.ordinal] = group

    def __len__(self) -> int:
        return len(self.groups)


def final(rid: str, reason: str = "stop", n: int = N_GEN) -> RequestOutput:
    return RequestOutput(rid, tuple(Completion(i, (5, i), reason) for i in range(n)), finished=True)


class ScriptEngine:
    """Behaviour per request id (default ``ok``); records what it saw.

    ``ok`` one final output; ``raise`` an exception; ``hang`` never answers;
    ``gate`` the final output, then waits for ``gate`` before ending;
    ``gate_raise`` the same, then raises; ``abort`` a final output whose
    samples were aborted; ``short`` fewer samples than asked; ``stray`` an
    output for another request id."""

    def __init__(self, collector: StreamCollector, script: dict[str, str] | None = None) -> None:
        self.collector = collector
        self.script = script or {}
        self.submitted: list[str] = []
        self.status_at_submit: dict[str, Status | None] = {}
        self.aborted: list[str] = []
        self.cancelled: list[str] = []
        self.gate = asyncio.Event()

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        ordinal = int(prompt[1:])  # test-side only: the loop never does this
        self.submitted.append(request_id)
        self.status_at_submit[request_id] = self.collector.ledger.status(ordinal)
        how = self.script.get(request_id, "ok")
        try:
            await asyncio.sleep(0)
            if how == "raise":
                raise RuntimeError("worker died")
            if how == "hang":
                await asyncio.sleep(3600)
            if how == "abort":
                yield final(request_id, "abort")
                return
            if how == "short":
                yield final(request_id, n=N_GEN - 1)
                return
            if how == "stray":
                yield final("o999-a0")
                return
            yield final(request_id, "length" if how == "length" else "stop")
            if how.startswith("gate"):
                await self.gate.wait()
                if how == "gate_raise":
                    raise RuntimeError("worker crashed on its way out")
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled.append(request_id)
            raise


def make(
    n: int = 4,
    script: dict[str, str] | None = None,
    *,
    policy: FailurePolicy = FailurePolicy.RETRY,
    max_failures: int = 2,
    **kw: Any,
) -> tuple[StreamCollector, ScriptEngine, Sink, RolloutLoop, list[RolloutEvent], list[int]]:
    collector = StreamCollector(
        ListSource(n), LedgerConfig(stream_len=n, on_failure=policy, max_failures=max_failures)
    )
    engine = ScriptEngine(collector, script)
    sink = Sink()
    events: list[RolloutEvent] = []
    dropped: list[int] = []
    kw.setdefault("max_in_flight", 8)
    kw.setdefault("sampling_params", None)
    kw.setdefault("num_generations", N_GEN)
    loop = RolloutLoop(
        collector,
        engine,
        sink,
        prompt_of=str,
        on_event=events.append,
        on_dropped=dropped.extend,
        **kw,
    )
    return collector, engine, sink, loop, events, dropped


def kinds(events: list[RolloutEvent], ordinal: int) -> list[str]:
    return [e.kind for e in events if e.ordinal == ordinal]


def arun(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


async def eventually(predicate: Callable[[], bool]) -> None:
    """Poll an engine-side condition (``until`` re-checks on loop events only)."""
    while not predicate():
        await asyncio.sleep(0)


def test_success_reports_dispatch_before_submission_and_lands_every_group() -> None:
    async def main() -> None:
        collector, engine, sink, loop, events, _ = make(4)
        async with loop:
            await loop.until(lambda: loop.idle)
        assert sorted(sink.groups) == [0, 1, 2, 3]
        for o in range(4):
            assert kinds(events, o) == ["dispatch", "submit", "land", "exit"]
            assert collector.ledger.status(o) is Status.BUFFERED
            # The engine saw the ordinal already outstanding: dispatch first.
            assert engine.status_at_submit[f"o{o}-a0"] is Status.OUTSTANDING
        g = sink.groups[2]
        assert g.row == "r2" and g.request_id == "o2-a0" and g.attempt == 0
        assert g.completions == ((5, 0), (5, 1), (5, 2))
        assert engine.aborted == [] and engine.cancelled == []

    arun(main())


def test_failure_requeues_then_the_retry_lands_under_a_new_request_id() -> None:
    async def main() -> None:
        collector, engine, sink, loop, events, dropped = make(2, {"o1-a0": "raise"})
        async with loop:
            await loop.until(lambda: loop.idle)
        assert kinds(events, 1) == [
            "dispatch", "submit", "fail", "requeue", "abort", "exit",
            "dispatch", "submit", "land", "exit",
        ]  # fmt: skip
        assert engine.submitted.count("o1-a1") == 1
        assert sorted(sink.groups) == [0, 1] and sink.groups[1].attempt == 1
        assert collector.ledger.failures(1) == 1 and dropped == []

    arun(main())


def test_failure_past_max_failures_is_dropped_on_record() -> None:
    async def main() -> None:
        script = {"o0-a0": "raise", "o0-a1": "raise"}
        collector, _, sink, loop, events, dropped = make(2, script, max_failures=2)
        async with loop:
            await loop.until(lambda: loop.idle)
        assert [e.kind for e in events if e.ordinal == 0].count("fail") == 2
        assert "drop" in kinds(events, 0) and dropped == [0]
        assert 0 not in sink.groups and collector.ledger.status(0) is None  # resolved
        assert collector.ledger.cut == 1  # 1 is buffered, not trained

    arun(main())


def test_drop_policy_drops_on_the_first_failure() -> None:
    async def main() -> None:
        _, _, _, loop, events, dropped = make(1, {"o0-a0": "raise"}, policy=FailurePolicy.DROP)
        async with loop:
            await loop.until(lambda: loop.idle)
        assert kinds(events, 0) == ["dispatch", "submit", "fail", "drop", "abort", "exit"]
        assert dropped == [0]

    arun(main())


def test_timeout_fails_the_request_and_aborts_it_in_the_engine() -> None:
    async def main() -> None:
        script = {"o0-a0": "hang"}
        collector, engine, sink, loop, events, _ = make(1, script, timeout=0.05)
        async with loop:
            await loop.until(lambda: loop.idle)
        fail = [e for e in events if e.kind == "fail"]
        assert [(e.ordinal, e.detail) for e in fail] == [(0, "timeout")]
        assert "o0-a0" in engine.cancelled and "o0-a0" in engine.aborted
        assert sorted(sink.groups) == [0] and sink.groups[0].request_id == "o0-a1"
        assert collector.ledger.failures(0) == 1

    arun(main())


@pytest.mark.parametrize("how", ["abort", "short", "stray"])
def test_unusable_final_outputs_are_failures_not_landings(how: str) -> None:
    async def main() -> None:
        collector, _, sink, loop, events, _ = make(1, {"o0-a0": how})
        async with loop:
            await loop.until(lambda: loop.idle)
        assert kinds(events, 0)[:3] == ["dispatch", "submit", "fail"]
        # The retry landed under the ordinal the loop submitted, whatever
        # request id the stray output claimed.
        assert list(sink.groups) == [0] and sink.groups[0].attempt == 1
        assert 999 not in sink.groups and collector.ledger.status(0) is Status.BUFFERED

    arun(main())


def test_shutdown_mid_flight_aborts_requests_and_leaves_them_outstanding() -> None:
    async def main() -> None:
        script = {f"o{o}-a0": "hang" for o in (1, 2)}
        collector, engine, sink, loop, events, dropped = make(4, script)
        loop.start()
        await loop.until(lambda: len(sink) == 2)
        left = await loop.aclose()
        assert left == (1, 2)
        assert sorted(engine.cancelled) == ["o1-a0", "o2-a0"]
        assert {"o1-a0", "o2-a0"} <= set(engine.aborted)
        assert not any(e.kind in ("fail", "drop", "requeue") for e in events)
        assert [e.detail for e in events if e.kind == "exit" and e.ordinal == 1] == ["cancelled"]
        assert loop.in_flight == 0 and dropped == []
        # Still outstanding in the ledger: the checkpoint holds the cut at 1
        # and a resume regenerates exactly 1 and 2.
        for o in (1, 2):
            assert collector.ledger.status(o) is Status.OUTSTANDING
            assert collector.ledger.failures(o) == 0
        state = collector.checkpoint_state()
        assert state["ledger"]["ledger"]["cut"] == 0
        fresh = StreamCollector(ListSource(4), collector.config)
        fresh.resume(state, load_replay_buffer=True, sealed=())
        assert [t.ordinal for t in fresh.take_samples(4)] == [1, 2]

    arun(main())


def test_checkpoint_between_landing_and_worker_exit_sees_the_group_buffered() -> None:
    """NeMo-RL's window: the group is in the buffer but its worker has not
    exited. The checkpoint must retain it (not list it in flight), and a
    crash of the worker on its way out must not fail it."""

    async def main() -> None:
        collector, engine, sink, loop, events, _ = make(1, {"o0-a0": "gate_raise"})
        async with loop:
            await loop.until(lambda: len(sink) == 1)
            assert loop.in_flight == 1 and loop.outstanding == ()
            assert kinds(events, 0) == ["dispatch", "submit", "land"]
            state = collector.checkpoint_state(save_buffer=True)
            engine.gate.set()
            await loop.until(lambda: loop.in_flight == 0)
        assert kinds(events, 0) == ["dispatch", "submit", "land", "exit"]
        assert events[-1].detail == "RuntimeError: worker crashed on its way out"
        assert collector.ledger.status(0) is Status.BUFFERED
        assert collector.ledger.failures(0) == 0
        assert state["ledger"]["ledger"]["retained"] == [[0, 1]]
        # Resume with the buffer: 0 is covered, nothing to regenerate.
        restored = StreamCollector(ListSource(1), collector.config)
        assert restored.resume(state, load_replay_buffer=True, sealed=()).covered == (0,)
        assert restored.take_samples(1) == []
        # Resume without it: 0 is regenerated, once.
        regen = StreamCollector(ListSource(1), collector.config)
        regen.resume(state, load_replay_buffer=False, sealed=())
        assert [t.ordinal for t in regen.take_samples(2)] == [0]

    arun(main())


def test_in_flight_is_bounded_and_back_pressure_waits_for_the_trainer() -> None:
    async def main() -> None:
        script = {f"o{o}-a0": "gate" for o in range(6)}
        _, engine, sink, loop, _, _ = make(6, script, max_in_flight=3, max_ahead=4)
        async with loop:
            await loop.until(lambda: len(sink) == 3)
            assert len(engine.submitted) == 3 and loop.room() == 0
            engine.gate.set()
            await loop.until(lambda: len(sink) == 4 and loop.in_flight == 0)
            assert len(engine.submitted) == 4  # max_ahead: 4 generating or buffered
            sink.groups.clear()  # the trainer consumed them
            loop.wake()
            await loop.until(lambda: len(sink) == 2 and loop.idle)
        assert len(engine.submitted) == 6

    arun(main())


def test_a_misaligned_source_stops_the_loop_instead_of_hanging() -> None:
    class Bad(SequenceSource):
        def pull(self) -> Pull | None:
            return Pull(5, ["x"], None)

    async def main() -> None:
        collector = StreamCollector(Bad(["r0", "r1", "r2"]), LedgerConfig(stream_len=3))
        loop = RolloutLoop(
            collector, ScriptEngine(collector), Sink(), prompt_of=str,
            sampling_params=None, num_generations=1,
        )  # fmt: skip
        with pytest.raises(Exception, match="ledger expects 0"):
            async with loop:
                await loop.until(lambda: loop.idle)

    arun(main())


def test_sampling_params_callable_gets_ordinal_and_attempt() -> None:
    seen: list[tuple[int, int]] = []

    def params(o: int, attempt: int) -> Callable[[], None]:
        seen.append((o, attempt))
        return lambda: None

    async def main() -> None:
        _, _, _, loop, _, _ = make(2, {"o1-a0": "raise"}, sampling_params=params)
        async with loop:
            await loop.until(lambda: loop.idle)

    with pytest.raises(ValueError, match="num_generations"):
        make(1, num_generations=0)
    arun(main())
    assert sorted(seen) == [(0, 0), (1, 0), (1, 1)]


def test_vllm_engine_passes_the_asyncllm_calls_through() -> None:
    """``VllmEngine`` over a stand-in with AsyncLLM's signatures (the real
    engine is exercised in test_rollout_vllm.py where a GPU is present)."""
    from frontier_adapters.rollout._vllm import VllmEngine

    calls: list[tuple[str, Any]] = []

    class FakeAsyncLLM:
        async def generate(
            self, prompt: Any, sampling_params: Any, request_id: str, *, priority: int = 0
        ) -> AsyncIterator[RequestOutput]:
            calls.append(("generate", (prompt, sampling_params, request_id)))
            yield final(request_id)

        async def abort(self, request_id: str, internal: bool = False) -> None:
            calls.append(("abort", request_id))

        def shutdown(self, timeout: float | None = None) -> None:
            calls.append(("shutdown", timeout))

    async def main() -> Sink:
        collector = StreamCollector(ListSource(2), LedgerConfig(stream_len=2))
        sink = Sink()
        engine = VllmEngine(FakeAsyncLLM())
        async with RolloutLoop(
            collector, engine, sink, prompt_of=str, sampling_params="SP", num_generations=N_GEN
        ) as loop:
            await loop.until(lambda: loop.idle)
        await engine.abort("x")
        engine.shutdown()
        return sink

    sink = run_within(main())
    assert sorted(sink.groups) == [0, 1]
    assert ("generate", ("r0", "SP", "o0-a0")) in calls
    assert calls[-2:] == [("abort", "x"), ("shutdown", None)]


def test_a_sink_that_refuses_a_group_stops_the_loop_with_the_ordinal_outstanding() -> None:
    """A refusal is the trainer's, not a failed generation: the group is
    not reported landed, no attempt is burned and nothing is dropped (even
    under ``drop``); the loop stops, and the ordinal is left outstanding for
    the resume to regenerate."""

    class Picky(Sink):
        def add(self, group: Group) -> None:
            if group.ordinal == 1:
                raise ValueError("buffer full")
            super().add(group)

    async def main() -> None:
        config = LedgerConfig(stream_len=3, on_failure=FailurePolicy.DROP)
        collector = StreamCollector(ListSource(3), config)
        sink = Picky()
        engine = ScriptEngine(collector)
        events: list[RolloutEvent] = []
        dropped: list[int] = []
        loop = RolloutLoop(
            collector, engine, sink, prompt_of=str, sampling_params=None,
            num_generations=N_GEN, max_in_flight=1, on_event=events.append,
            on_dropped=dropped.extend,
        )  # fmt: skip
        with pytest.raises(ValueError, match="buffer full"):
            async with loop:
                await loop.until(lambda: loop.idle)
        assert list(sink.groups) == [0] and "land" not in kinds(events, 1)
        assert not any(e.kind in ("fail", "drop", "requeue") for e in events) and dropped == []
        assert [e.detail for e in events if e.kind == "exit" and e.ordinal == 1] == [
            "ValueError: buffer full"
        ]
        # The loop stopped feeding: 2 was never submitted.
        assert engine.submitted == ["o0-a0", "o1-a0"]
        assert await loop.aclose() == (1,) == loop.outstanding
        assert tuple(collector.ledger.ordinals(Status.OUTSTANDING)) == (1,)
        assert collector.ledger.failures(1) == 0
        fresh = StreamCollector(ListSource(3), config)
        fresh.resume(collector.checkpoint_state(), load_replay_buffer=True, sealed=())
        assert [t.ordinal for t in fresh.take_samples(3)] == [1, 2]

    arun(main())


def test_request_ids_continue_from_the_ledgers_attempts_after_a_resume() -> None:
    """The attempt in the request id is the ledger's count, which a
    checkpoint carries: a restarted loop does not start again at ``a0``.
    Stale evictions count as attempts too."""

    async def main() -> None:
        script = {"o1-a0": "raise", "o1-a1": "hang"}
        collector, engine, sink, loop, _, _ = make(3, script, max_failures=4)
        async with loop:
            await eventually(lambda: len(sink) == 2 and "o1-a1" in engine.submitted)
            state = collector.checkpoint_state()  # o1 has failed once
        assert engine.submitted == ["o0-a0", "o1-a0", "o2-a0", "o1-a1"]
        assert loop.outstanding == (1,) and collector.failures(1) == 1

        # The process restarts from the checkpoint, buffer restored.
        resumed = StreamCollector(ListSource(3), collector.config)
        resumed.resume(json.loads(json.dumps(state)), load_replay_buffer=True, sealed=())
        assert resumed.failures(1) == 1
        engine2 = ScriptEngine(resumed, {"o1-a1": "raise"})
        sink2 = Sink()
        async with RolloutLoop(
            resumed, engine2, sink2, prompt_of=str, sampling_params=None,
            num_generations=N_GEN,
        ) as loop2:  # fmt: skip
            await loop2.until(lambda: 1 in sink2.groups)
            assert engine2.submitted == ["o1-a1", "o1-a2"]
            assert sink2.groups[1].attempt == 2 and sink2.groups[1].request_id == "o1-a2"
            assert resumed.evicted([0]).requeued == (0,)  # restored, then too stale
            loop2.wake()
            await loop2.until(lambda: 0 in sink2.groups)
        assert engine2.submitted[2:] == ["o0-a1"] and sink2.groups[0].attempt == 1

    arun(main())


def test_a_wiring_error_in_a_worker_stops_the_loop_instead_of_vanishing() -> None:
    from frontier_core import IllegalTransitionError

    async def main() -> None:
        collector = StreamCollector(ListSource(2), LedgerConfig(stream_len=2))
        sink = Sink()
        loop = RolloutLoop(
            collector, ScriptEngine(collector), sink, prompt_of=str,
            sampling_params=None, num_generations=N_GEN,
        )  # fmt: skip
        # Someone else reports ordinal 0 landed behind the loop's back.
        real_take = collector.take_samples

        def take(n: int) -> list[Taken]:
            items = real_take(n)
            collector.landed([t.ordinal for t in items if t.ordinal == 0])
            return items

        collector.take_samples = take  # type: ignore[method-assign]
        with pytest.raises(IllegalTransitionError):
            async with loop:
                await loop.until(lambda: loop.idle)

    arun(main())


def test_a_dead_engine_stops_the_loop_and_burns_no_attempt() -> None:
    class EngineDead(RuntimeError):
        pass

    class Dying(ScriptEngine):
        fatal_errors = (EngineDead,)

        async def generate(
            self, prompt: Any, sampling_params: Any, request_id: str
        ) -> AsyncIterator[RequestOutput]:
            await asyncio.sleep(0)
            raise EngineDead("EngineCore died")
            yield  # pragma: no cover

    async def main() -> None:
        config = LedgerConfig(stream_len=3, on_failure=FailurePolicy.DROP)
        collector = StreamCollector(ListSource(3), config)
        events: list[RolloutEvent] = []
        dropped: list[int] = []
        loop = RolloutLoop(
            collector, Dying(collector), Sink(), prompt_of=str, sampling_params=None,
            num_generations=N_GEN, on_event=events.append, on_dropped=dropped.extend,
        )  # fmt: skip
        with pytest.raises(EngineDead):
            async with loop:
                await loop.until(lambda: loop.idle)
        assert not any(e.kind in ("fail", "drop") for e in events) and dropped == []
        for o in range(3):  # outstanding: the restart regenerates them
            assert collector.ledger.status(o) is Status.OUTSTANDING
            assert collector.ledger.failures(o) == 0
        assert await loop.aclose() == (0, 1, 2)

    arun(main())


def test_aclose_returns_what_a_dead_engine_left_outstanding() -> None:
    """Issue 12: the engine dies with requests in flight. ``aclose`` (also
    after the ``async with`` exited) returns exactly the ordinals the ledger
    still holds outstanding, and a resume regenerates exactly those and the
    rest of the stream."""

    class EngineDead(RuntimeError):
        pass

    class Dying(ScriptEngine):
        fatal_errors = (EngineDead,)

        def __init__(self, collector: StreamCollector) -> None:
            super().__init__(collector)
            self.dead = asyncio.Event()

        async def generate(
            self, prompt: Any, sampling_params: Any, request_id: str
        ) -> AsyncIterator[RequestOutput]:
            self.submitted.append(request_id)
            await asyncio.sleep(0)
            if request_id == "o0-a0":
                yield final(request_id)
                return
            await self.dead.wait()
            raise EngineDead("EngineCore died")

    async def main() -> None:
        config = LedgerConfig(stream_len=6, on_failure=FailurePolicy.RETRY, max_failures=2)
        collector = StreamCollector(ListSource(6), config)
        engine = Dying(collector)
        sink = Sink()
        events: list[RolloutEvent] = []
        loop = RolloutLoop(
            collector, engine, sink, prompt_of=str, sampling_params=None,
            num_generations=N_GEN, max_in_flight=3, on_event=events.append,
        )  # fmt: skip
        with pytest.raises(EngineDead):
            async with loop:
                await eventually(lambda: len(sink) == 1 and len(engine.submitted) == 4)
                assert loop.outstanding == (1, 2, 3)
                engine.dead.set()  # mid-flight: 1, 2 and 3 are generating
                await loop.until(lambda: False)
        held = tuple(collector.ledger.ordinals(Status.OUTSTANDING))
        assert held == (1, 2, 3)
        assert await loop.aclose() == held == loop.outstanding
        assert await loop.aclose() == held  # idempotent
        assert loop.in_flight == 0 and len(engine.submitted) == 4  # no feeding after the death
        assert not any(e.kind in ("fail", "drop", "requeue") for e in events)
        assert all(collector.ledger.failures(o) == 0 for o in held)
        fresh = StreamCollector(ListSource(6), config)
        fresh.resume(collector.checkpoint_state(), load_replay_buffer=True, sealed=())
        assert [t.ordinal for t in fresh.take_samples(6)] == [1, 2, 3, 4, 5]

    arun(main())


def test_a_ledger_that_refuses_a_failure_stops_the_loop_and_keeps_the_ordinal() -> None:
    """A failure the collector refuses (here: it lost the row it would
    requeue) is a wiring bug: the loop stops and the ordinal, still
    outstanding in the ledger, is returned by ``aclose``."""
    from frontier_core import IllegalTransitionError

    async def main() -> None:
        collector, _, _, loop, events, _ = make(2, {"o1-a0": "raise"})
        real_take = collector.take_samples

        def take(n: int) -> list[Taken]:
            items = real_take(n)
            collector._rows.pop(1, None)  # the bug under test
            return items

        collector.take_samples = take  # type: ignore[method-assign]
        with pytest.raises(IllegalTransitionError, match="holds no row"):
            async with loop:
                await loop.until(lambda: loop.idle)
        assert "fail" not in kinds(events, 1)
        assert await loop.aclose() == (1,)
        assert collector.ledger.status(1) is Status.OUTSTANDING

    arun(main())


def buffered(*ordinals: int) -> Any:
    from frontier_adapters.rollout._buffer import ReplayBuffer

    buf = ReplayBuffer(max_trajectory_age_steps=2)
    for o in ordinals:
        buf.add(Group(o, [o, 1], ((5, o), (6,)), ("stop", "length"), o % 3, 1, f"o{o}-a1"))
    return buf


def test_replay_buffer_state_is_a_tagged_json_dict_that_round_trips() -> None:
    from frontier_adapters.rollout import _buffer as b

    buf = buffered(7, 2, 4)
    state = buf.state_dict()
    assert isinstance(state, dict)
    assert (state[b.KEY_FORMAT], state[b.KEY_VERSION]) == (b.FORMAT, b.VERSION)
    assert [g[b.KEY_ORDINAL] for g in state[b.KEY_GROUPS]] == [2, 4, 7]
    assert set(state[b.KEY_GROUPS][0]) == b.GROUP_KEYS
    copy = buffered()
    copy.load_state_dict(json.loads(json.dumps(state)))
    assert copy.state_dict() == state and copy.ordinals == [2, 4, 7]
    assert copy.take(1) == buf.take(1)  # the same Group, field for field
    empty = buffered()
    empty.load_state_dict(json.loads(json.dumps(buffered().state_dict())))
    assert len(empty) == 0


def test_replay_buffer_refuses_a_wrong_or_missing_key_and_stays_unchanged() -> None:
    from frontier_adapters.rollout import _buffer as b

    from frontier_core import CheckpointCorruptError, CheckpointVersionError

    good = buffered(1, 3).state_dict()
    group = good[b.KEY_GROUPS][0]
    bad_group: list[tuple[dict[str, Any], str]] = [
        ({k: v for k, v in group.items() if k != b.KEY_ATTEMPT}, "missing keys \\['attempt'\\]"),
        ({**group, "extra": 1}, "unknown keys \\['extra'\\]"),
        ({**group, b.KEY_ORDINAL: "1"}, "ordinal must be an int"),
        ({**group, b.KEY_ORDINAL: True}, "ordinal must be an int"),
        ({**group, b.KEY_COMPLETIONS: [[1, -2], [3]]}, "completions token"),
        ({**group, b.KEY_FINISH_REASONS: ["stop"]}, "one string per completion"),
        ({**group, b.KEY_POLICY_VERSION: 1.5}, "policy_version must be an int"),
        ({**group, b.KEY_REQUEST_ID: 3}, "request_id must be a string"),
    ]
    cases: list[tuple[Any, type[Exception], str]] = [
        ([group], CheckpointCorruptError, "must be a dict, got list"),  # the old list shape
        ({**good, b.KEY_FORMAT: "other"}, CheckpointVersionError, "format 'other'"),
        ({**good, b.KEY_VERSION: 2}, CheckpointVersionError, "version 2"),
        ({k: v for k, v in good.items() if k != b.KEY_VERSION}, CheckpointVersionError, "None"),
        ({k: v for k, v in good.items() if k != b.KEY_GROUPS}, CheckpointCorruptError, "keys"),
        ({**good, "extra": []}, CheckpointCorruptError, "expected \\['format', 'groups'"),
        ({**good, b.KEY_GROUPS: {}}, CheckpointCorruptError, "groups must be a list"),
        ({**good, b.KEY_GROUPS: [group, group]}, CheckpointCorruptError, "saved twice"),
        *(({**good, b.KEY_GROUPS: [g]}, CheckpointCorruptError, m) for g, m in bad_group),
    ]
    target = buffered(9)
    for state, error, message in cases:
        with pytest.raises(error, match=message):
            target.load_state_dict(state)
        assert target.ordinals == [9]


@pytest.mark.parametrize(
    "state",
    [
        {1: "x", "format": "frontier_adapters.replay_buffer", "version": 1, "groups": []},
        {"format": "frontier_adapters.replay_buffer", "version": 1}
        | {f"k{i}": i for i in range(10_000)},
    ],
    ids=["a-non-string-key", "ten-thousand-keys"],
)
def test_a_buffer_state_with_foreign_keys_is_a_typed_error_of_bounded_size(
    state: dict[Any, Any],
) -> None:
    from frontier_adapters.rollout import ReplayBuffer

    from frontier_core import CheckpointError

    buffer = ReplayBuffer(max_trajectory_age_steps=2)
    with pytest.raises(CheckpointError) as info:
        buffer.load_state_dict(state)
    assert len(str(info.value)) < 2_000
    assert len(buffer) == 0


def test_the_schedule_is_one_option_checked_at_construction(tmp_path: Any) -> None:
    """What a request is, is ``schedule``; arguments that make no sense for
    the schedule are refused before anything runs."""
    from frontier_adapters.journal import RolloutJournal
    from frontier_adapters.rollout import Schedule, request_id_of

    collector = StreamCollector(ListSource(2), LedgerConfig(stream_len=2))
    engine, sink = ScriptEngine(collector), Sink()
    assert Schedule("sibling") is Schedule.SIBLING
    with pytest.raises(ValueError, match="'whole'"):
        RolloutLoop(collector, engine, sink, prompt_of=str, sampling_params=None, schedule="whole")
    journal = RolloutJournal(tmp_path / "journal", fingerprint="f", lineage="l")
    with pytest.raises(ValueError, match="schedule='sibling'"):
        RolloutLoop(
            collector, engine, sink, prompt_of=str, sampling_params=None, num_generations=2,
            journal=journal,
        )  # fmt: skip
    with pytest.raises(ValueError, match="ledger's samples"):
        RolloutLoop(
            collector, engine, sink, prompt_of=str, sampling_params=lambda lease, n: None,
            schedule="sibling", num_generations=2,
        )  # fmt: skip
    with pytest.raises(TypeError, match="sampling_params"):
        RolloutLoop(
            collector, engine, sink, prompt_of=str, sampling_params=None, schedule="sibling"
        )
    assert collector.journal is None  # nothing was bound by a refused loop
    assert request_id_of(17, 0) == "o17-a0"
    assert request_id_of(17, 5, sibling=2) == "o17-s2-a5"


def test_a_group_the_group_schedule_cannot_land_stops_it_and_keeps_the_rest_on_record() -> None:
    """A resume that holds every sibling of an unresolved group (from a
    journal) hands it out complete, for the journal's samples to land it; a
    group schedule has no journal, so the loop stops naming it rather than
    drop the group or generate it beside the ledger. The groups taken with
    it were dispatched and are outstanding in the ledger: ``aclose`` returns
    them, so a resume regenerates them."""
    from frontier_adapters.rollout import RolloutError

    config = LedgerConfig(stream_len=3, samples=2)
    first = StreamCollector(ListSource(3), config)
    (taken,) = first.take_samples(1)
    first.sealed(taken.leases[:1])
    state = first.checkpoint_state()
    resumed = StreamCollector(ListSource(3), config)
    resumed.resume(state, load_replay_buffer=True, sealed=taken.leases)
    engine, sink = ScriptEngine(resumed), Sink()
    loop = RolloutLoop(
        resumed, engine, sink, prompt_of=str, sampling_params=None, num_generations=2,
    )  # fmt: skip

    async def main() -> tuple[int, ...]:
        with pytest.raises(RolloutError, match="no recovered journal"):
            async with loop:
                await loop.until(lambda: loop.idle)
        return await loop.aclose()

    assert arun(main()) == (1, 2) and engine.submitted == [] and len(sink) == 0
    assert tuple(resumed.ledger.ordinals(Status.OUTSTANDING)) == (1, 2)
