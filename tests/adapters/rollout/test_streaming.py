"""Streamed outputs (vLLM's DELTA and CUMULATIVE kinds), the progress
observer, and the event-loop check, against scripted engines: no vllm, no
torch. The same behaviours on real vLLM are in test_vllm.py."""

from __future__ import annotations

import asyncio
import enum
import sys
import types
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
from frontier_adapters import SequenceSource, StreamCollector
from frontier_adapters.rollout import (
    EngineLoopError,
    Group,
    RolloutEvent,
    RolloutLoop,
    SampleProgress,
    VllmEngine,
    check_event_loop,
)
from frontier_adapters.rollout._engine import Completion, RequestOutput
from frontier_adapters.rollout._loop import is_delta

from frontier_core import FailurePolicy, LedgerConfig, Status

from ._deadline import run_within

N = 3
#: Sample i produces TOKENS[i], one token per step, starting at step i
#: (staggered, as vLLM's samples are), so the final output holds only the
#: last sample.
TOKENS = ((10, 11), (20, 21, 22), (30, 31, 32))


class Kind(enum.Enum):  # vLLM's RequestOutputKind, by name
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@attrs.frozen
class Params:
    n: int = N
    output_kind: Kind = Kind.DELTA


class Sink:
    def __init__(self) -> None:
        self.groups: dict[int, Group] = {}

    def add(self, group: Group) -> None:
        self.groups[group.ordinal] = group

    def __len__(self) -> int:
        return len(self.groups)


def steps() -> list[list[tuple[int, int]]]:
    """Per engine step, the (sample, position) pairs that advance."""
    out: list[list[tuple[int, int]]] = []
    step = 0
    while True:
        advancing = [(i, step - i) for i, toks in enumerate(TOKENS) if 0 <= step - i < len(toks)]
        if not advancing:
            return out
        out.append(advancing)
        step += 1


class StreamEngine:
    """Streams ``TOKENS`` per request in the kind its params ask for; a
    request listed in ``shrink`` sends a cumulative output that loses a
    token; ``gate`` holds every request after its first step."""

    def __init__(self, shrink: frozenset[str] = frozenset()) -> None:
        self.shrink = shrink
        self.gate: asyncio.Event | None = None
        self.submitted: list[str] = []

    async def abort(self, request_id: str) -> None:
        pass

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        self.submitted.append(request_id)
        kind = sampling_params.output_kind
        plan = steps()
        for k, advancing in enumerate(plan):
            await asyncio.sleep(0)
            if k == 1 and self.gate is not None:
                await self.gate.wait()
            last = k == len(plan) - 1
            outs = []
            for i, pos in advancing:
                done = pos == len(TOKENS[i]) - 1
                reason = "length" if done else None
                if kind is Kind.DELTA:
                    ids: tuple[int, ...] = (TOKENS[i][pos],)
                else:
                    ids = TOKENS[i][: pos + 1]
                    if request_id in self.shrink and k == 2:
                        ids = ids[:-2]
                outs.append(Completion(i, ids, reason))
            if kind is Kind.FINAL_ONLY:
                if last:
                    yield RequestOutput(
                        request_id,
                        tuple(Completion(i, t, "length") for i, t in enumerate(TOKENS)),
                        True,
                    )
                continue
            yield RequestOutput(request_id, tuple(outs), last)


def make(
    n: int, engine: Any, params: Any, **kw: Any
) -> tuple[StreamCollector, Sink, RolloutLoop, list[SampleProgress], list[RolloutEvent]]:
    collector = StreamCollector(
        SequenceSource([f"r{o}" for o in range(n)], batch_size=4),
        LedgerConfig(stream_len=n, on_failure=FailurePolicy.RETRY),
    )
    sink = Sink()
    progress: list[SampleProgress] = []
    events: list[RolloutEvent] = []
    kw.setdefault("on_progress", progress.append)
    loop = RolloutLoop(
        collector,
        engine,
        sink,
        prompt_of=str,
        sampling_params=params,
        on_event=events.append,
        **kw,
    )
    return collector, sink, loop, progress, events


def arun(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


@pytest.mark.parametrize("kind", [Kind.DELTA, Kind.CUMULATIVE, Kind.FINAL_ONLY])
def test_streamed_samples_are_kept_per_index_and_observed_in_order(kind: Kind) -> None:
    async def main() -> None:
        collector, sink, loop, progress, _ = make(2, StreamEngine(), Params(output_kind=kind))
        async with loop:
            await loop.until(lambda: loop.idle)
        assert sorted(sink.groups) == [0, 1]
        for o in (0, 1):
            assert sink.groups[o].completions == TOKENS
            assert sink.groups[o].finish_reasons == ("length",) * N
            assert collector.ledger.status(o) is Status.BUFFERED
            mine = [p for p in progress if p.ordinal == o]
            assert {p.request_id for p in mine} == {f"o{o}-a0"}
            for i in range(N):
                seen = [p for p in mine if p.index == i]
                # Each advance starts where the previous one ended; the
                # tokens add up to the sample; the reason comes last.
                assert [p.start for p in seen] == [
                    sum(len(q.token_ids) for q in seen[:j]) for j in range(len(seen))
                ]
                assert sum((p.token_ids for p in seen), ()) == TOKENS[i]
                assert [p.finish_reason for p in seen][-1] == "length"
                assert all(p.finish_reason is None for p in seen[:-1])
                assert len(seen) == (1 if kind is Kind.FINAL_ONLY else len(TOKENS[i]))

    arun(main())


def test_partial_tokens_are_visible_while_the_request_runs() -> None:
    async def main() -> None:
        engine = StreamEngine()
        engine.gate = asyncio.Event()
        _, sink, loop, progress, _ = make(1, engine, Params())
        async with loop:
            while not progress:
                await asyncio.sleep(0)
            await asyncio.sleep(0.01)
            assert loop.partial(0) == {0: (10,)}  # one step, held at the gate
            assert loop.partial(5) == {}
            engine.gate.set()
            await loop.until(lambda: loop.idle)
        assert loop.partial(0) == {} and sink.groups[0].completions == TOKENS

    arun(main())


@pytest.mark.parametrize("kind", [Kind.DELTA, Kind.CUMULATIVE])
def test_until_sees_tokens_as_they_stream(kind: Kind) -> None:
    # A predicate on the tokens in flight holds mid-request, before any
    # event of the loop: ``until`` must re-check on streamed outputs too.
    async def main() -> None:
        engine = StreamEngine()
        engine.gate = asyncio.Event()
        _, sink, loop, _, events = make(1, engine, Params(output_kind=kind))
        async with loop:
            await loop.until(lambda: loop.partial(0).get(0) == (10,), timeout=5)
            assert not sink.groups and [e.kind for e in events] == ["dispatch", "submit"]
            engine.gate.set()
            await loop.until(lambda: loop.idle, timeout=5)
        assert sink.groups[0].completions == TOKENS

    arun(main())


def test_an_observer_that_raises_stops_the_loop_with_the_ordinal_outstanding() -> None:
    def observe(p: SampleProgress) -> None:
        raise OSError("journal disk full")

    async def main() -> None:
        collector, sink, loop, _, events = make(1, StreamEngine(), Params(), on_progress=observe)
        with pytest.raises(OSError, match="journal disk full"):
            async with loop:
                await loop.until(lambda: loop.idle)
        assert await loop.aclose() == (0,)
        assert collector.ledger.status(0) is Status.OUTSTANDING
        assert collector.ledger.failures(0) == 0 and not sink.groups
        assert "fail" not in [e.kind for e in events]

    arun(main())


def test_a_cumulative_output_that_loses_tokens_fails_the_request() -> None:
    async def main() -> None:
        engine = StreamEngine(shrink=frozenset({"o0-a0"}))
        _, sink, loop, _, events = make(1, engine, Params(output_kind=Kind.CUMULATIVE))
        async with loop:
            await loop.until(lambda: loop.idle)
        fails = [e for e in events if e.kind == "fail"]
        assert len(fails) == 1 and "fewer than" in fails[0].detail
        assert engine.submitted == ["o0-a0", "o0-a1"]
        assert sink.groups[0].completions == TOKENS and sink.groups[0].attempt == 1

    arun(main())


def test_is_delta_reads_the_output_kind_by_name() -> None:
    assert is_delta(Params(output_kind=Kind.DELTA))
    assert not is_delta(Params(output_kind=Kind.CUMULATIVE))
    assert not is_delta(Params(output_kind=Kind.FINAL_ONLY)) and not is_delta(None)


# -- the event loop an AsyncLLM is bound to -------------------------------------------


class BoundLLM:
    """An ``AsyncLLM`` stand-in: ``output_handler`` is a task of the loop
    that first used it; ``generate`` records every request."""

    def __init__(self) -> None:
        self.output_handler: asyncio.Task[None] | None = None
        self.requests: list[str] = []

    def bind(self) -> None:
        async def handler() -> None:
            await asyncio.sleep(3600)

        self.output_handler = asyncio.get_running_loop().create_task(handler())

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        self.requests.append(request_id)
        if self.output_handler is None:
            self.bind()
        yield RequestOutput(request_id, (Completion(0, (1,), "stop"),), True)

    async def abort(self, request_id: str) -> None:
        pass


def run_loop(runner: asyncio.Runner, engine: Any) -> tuple[StreamCollector, Sink]:
    collector = StreamCollector(
        SequenceSource(["a", "b"], batch_size=2), LedgerConfig(stream_len=2)
    )
    sink = Sink()

    async def main() -> None:
        async with RolloutLoop(
            collector, engine, sink, prompt_of=str, sampling_params=Params(n=1)
        ) as loop:
            await loop.until(lambda: loop.idle)

    runner.run(main())
    return collector, sink


@pytest.mark.parametrize("wrap", [False, True], ids=["bare AsyncLLM", "VllmEngine"])
def test_another_event_loop_is_refused_before_anything_is_taken(wrap: bool) -> None:
    llm = BoundLLM()
    engine: Any = VllmEngine(llm) if wrap else llm
    with asyncio.Runner() as first:
        _, sink = run_loop(first, engine)  # binds the engine to `first`
        assert len(sink) == 2 and llm.requests == ["o0-a0", "o1-a0"]
        with asyncio.Runner() as second:  # `first` is open but not running
            collector = StreamCollector(
                SequenceSource(["a"], batch_size=1), LedgerConfig(stream_len=1)
            )
            with pytest.raises(EngineLoopError, match="open but not running") as exc:

                async def main() -> None:
                    async with RolloutLoop(
                        collector, engine, Sink(), prompt_of=str, sampling_params=Params(n=1)
                    ):
                        pass

                second.run(main())
            assert exc.value.bound is first.get_loop()
            assert collector.ledger.status(0) is Status.UNSTAMPED
            assert collector.ledger.next_ordinal == 0  # nothing taken
            assert llm.requests == ["o0-a0", "o1-a0"]  # nothing was sent
    with asyncio.Runner() as third:  # `first` is closed now
        with pytest.raises(EngineLoopError, match="closed") as exc:
            run_loop(third, engine)
        assert "EngineDeadError" in str(exc.value) and "one event loop" in str(exc.value)
    assert llm.requests == ["o0-a0", "o1-a0"]


def test_check_event_loop_passes_an_unbound_or_unknown_engine() -> None:
    async def main() -> None:
        check_event_loop(BoundLLM())  # not bound yet: the first use binds it
        check_event_loop(object())  # no output handler: nothing to say
        llm = BoundLLM()
        llm.bind()
        check_event_loop(llm)
        VllmEngine(llm).check_event_loop()
        assert VllmEngine(llm).bound_loop is asyncio.get_running_loop()

    run_within(main())


def test_a_bare_asyncllm_stops_on_vllms_engine_dead_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``fatal_errors`` of its own, an engine gets vLLM's
    ``EngineDeadError`` when vllm is loaded (never imported by the loop),
    and ``EngineLoopError`` always."""

    class EngineDeadError(Exception):
        pass

    fake = types.ModuleType("vllm.v1.engine.exceptions")
    fake.EngineDeadError = EngineDeadError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.v1.engine.exceptions", fake)
    collector = StreamCollector(SequenceSource(["a"], batch_size=1), LedgerConfig(stream_len=1))
    loop = RolloutLoop(collector, BoundLLM(), Sink(), prompt_of=str, sampling_params=Params(n=1))
    assert loop.fatal_errors == (EngineDeadError, EngineLoopError)
    monkeypatch.delitem(sys.modules, "vllm.v1.engine.exceptions")
    loop = RolloutLoop(collector, BoundLLM(), Sink(), prompt_of=str, sampling_params=Params(n=1))
    assert loop.fatal_errors == (EngineLoopError,)
