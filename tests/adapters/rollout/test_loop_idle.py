"""The rollout loop ends, under either schedule: whatever fails at once, a
loop whose requests all resolved is ``idle`` and its trainer stops waiting (every wait here has
a deadline, so a loop that never goes idle fails the test, not hangs it).

The case from the field (a ``frontier demo --journal`` life that hung):
under load, the siblings of a group, dispatched together, timed out in
the same turn of the event loop; the first failures restarted their
siblings, the third dropped the group and cancelled those restarts before
their tasks had run a single step. Such a task never runs its coroutine,
so the loop kept it filed for ever and was never idle again. No torch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import pytest
from frontier_adapters import SequenceSource, StreamCollector
from frontier_adapters.rollout import RolloutLoop, request_id_of
from frontier_adapters.rollout._engine import Completion, RequestOutput
from frontier_adapters.rollout._loop import RolloutStalledError
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core import FailurePolicy, Lease, LedgerConfig, Status

from ._deadline import run_within
from ._sample_support import Sink

#: Seconds a test waits for a loop at most: these loops finish in a few
#: milliseconds, so passing it means a loop that never ends.
DEADLINE = 10.0

_T = TypeVar("_T")


def within(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to its end, or fail once ``DEADLINE`` passes."""
    return run_within(coro, DEADLINE)


class LockstepEngine:
    """Every sample is ``tokens`` tokens, one per turn of the event loop, so
    requests started together advance together. A request of a ``doomed``
    ordinal raises after ``fail_after[sibling]`` tokens, every attempt:
    siblings started in one turn fail in one turn. A group's request (its
    ``sampling_params`` an ``(ordinal, n)`` pair) streams ``n`` samples and
    fails after ``fail_after[0]`` tokens."""

    def __init__(self, doomed: set[int], fail_after: list[int], tokens: int = 3) -> None:
        self.doomed = doomed
        self.fail_after = fail_after
        self.tokens = tokens
        self.submitted: list[str] = []

    async def abort(self, request_id: str) -> None:
        pass

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        if isinstance(sampling_params, Lease):
            lease = sampling_params
            ordinal, siblings, n = lease.ordinal, [lease.sibling], 1
            assert request_id == request_id_of(ordinal, lease.attempt, sibling=lease.sibling)
        else:
            ordinal, n = sampling_params
            siblings = list(range(n))
            assert request_id.startswith(f"o{ordinal}-a")
        self.submitted.append(request_id)
        out: list[int] = []
        for i in range(self.tokens):
            await asyncio.sleep(0)
            if ordinal in self.doomed and i == self.fail_after[siblings[0]]:
                raise RuntimeError("injected engine failure")
            out.append(i)
            done = i == self.tokens - 1
            yield RequestOutput(
                request_id,
                tuple(
                    Completion(
                        k,
                        tuple(10 * s + t for t in out),
                        "length" if done else None,
                        logprobs=(-0.5,) * len(out),
                    )
                    for k, s in enumerate(siblings)
                ),
                finished=done,
            )


def rollout_of(
    schedule: str, collector: StreamCollector, engine: Any, sink: Sink, **kw: Any
) -> RolloutLoop:
    """A loop over ``LockstepEngine`` under ``schedule``; ``max_in_flight``
    counts groups."""
    groups = kw.pop("max_in_flight")
    n = collector.config.samples
    if schedule == "group":
        return RolloutLoop(
            collector, engine, sink, prompt_of=list, num_generations=n,
            sampling_params=lambda ordinal, attempt: (ordinal, n), max_in_flight=groups, **kw,
        )  # fmt: skip
    return RolloutLoop(
        collector, engine, sink, schedule="sibling", prompt_of=lambda row, prefix: [*row, *prefix],
        sampling_params=lambda lease, prefix_len: lease, max_in_flight=groups * n, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("schedule", ["group", "sibling"])
@settings(max_examples=60, deadline=None)
@given(
    prompts=st.integers(1, 4),
    samples=st.integers(2, 4),
    max_failures=st.integers(1, 4),
    doomed=st.sets(st.integers(0, 3)),
    fail_after=st.lists(st.integers(0, 2), min_size=4, max_size=4),
    max_in_flight=st.integers(1, 12),
)
def test_a_loop_whose_groups_all_landed_or_dropped_goes_idle(
    schedule: str,
    prompts: int,
    samples: int,
    max_failures: int,
    doomed: set[int],
    fail_after: list[int],
    max_in_flight: int,
) -> None:
    """Doomed groups fail on every attempt, their siblings in lockstep
    (the burst of simultaneous timeouts): they are dropped, the others
    land, and the loop goes idle with nothing in flight."""
    doomed = {o for o in doomed if o < prompts}
    source = SequenceSource([[o] for o in range(prompts)], batch_size=2)
    collector = StreamCollector(
        source,
        LedgerConfig(
            stream_len=prompts,
            samples=samples,
            on_failure=FailurePolicy.RETRY,
            max_failures=max_failures,
            fingerprint="deadline",
        ),
    )
    engine = LockstepEngine(doomed, fail_after)
    sink = Sink()
    dropped: list[int] = []

    async def main() -> tuple[int, tuple[int, ...]]:
        rollout = rollout_of(
            schedule, collector, engine, sink, max_in_flight=max_in_flight,
            on_dropped=dropped.extend,
        )  # fmt: skip
        async with rollout:
            await rollout.until(lambda: rollout.idle)
            return rollout.in_flight, rollout.outstanding

    assert within(main()) == (0, ())
    assert sorted(dropped) == sorted(doomed)
    assert sorted(sink.groups) == [o for o in range(prompts) if o not in doomed]
    for o, group in sink.groups.items():
        assert collector.ledger.status(o) is Status.BUFFERED
        assert group.completions == tuple((10 * s, 10 * s + 1, 10 * s + 2) for s in range(samples))
    if schedule == "group":  # one request per try of a group: a doomed one tries max_failures
        assert len(engine.submitted) == len(sink.groups) + len(doomed) * max_failures


def test_the_demo_case_three_siblings_failing_in_one_turn_drop_their_group() -> None:
    """Three siblings, three attempts: the first two failures restart their
    siblings, the third drops the group in the same turn, before those
    restarts ran. The loop is idle then, and nothing was generated for the
    cancelled restarts."""
    collector = StreamCollector(
        SequenceSource([[0]], batch_size=1),
        LedgerConfig(
            stream_len=1,
            samples=3,
            on_failure=FailurePolicy.RETRY,
            max_failures=3,
            fingerprint="deadline",
        ),
    )
    engine = LockstepEngine({0}, [1, 1, 1])
    sink = Sink()
    dropped: list[int] = []

    async def main() -> tuple[bool, int]:
        async with RolloutLoop(
            collector,
            engine,
            sink,
            schedule="sibling",
            prompt_of=lambda row, prefix: [*row, *prefix],
            sampling_params=lambda lease, prefix_len: lease,
            max_in_flight=6,
            on_dropped=dropped.extend,
        ) as rollout:
            await rollout.until(lambda: rollout.idle)
            return rollout.idle, rollout.in_flight

    assert within(main()) == (True, 0)
    assert dropped == [0]
    assert engine.submitted == [request_id_of(0, s, sibling=s) for s in range(3)]


class SlowAbortEngine:
    """The prompt-level engine of ``test_a_retry_filed_during_an_abort_
    stays_filed``: ``o0-a0`` fails at once; ``o1-a0`` lands while that
    failure's abort is still being awaited (``abort`` takes a while), which
    wakes the feeder to take the requeued ``o0`` again; ``o0-a1`` takes
    longer than the abort."""

    def __init__(self) -> None:
        self.finished: list[str] = []

    async def abort(self, request_id: str) -> None:
        await asyncio.sleep(0.05)

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        await asyncio.sleep(0)
        if request_id == "o0-a0":
            raise RuntimeError("injected engine failure")
        await asyncio.sleep(0.01 if request_id == "o1-a0" else 0.2)
        self.finished.append(request_id)
        yield RequestOutput(request_id, (Completion(0, (1,), "stop"),), finished=True)


def test_a_retry_filed_during_an_abort_stays_filed() -> None:
    """A worker that fails, then awaits the engine's abort, must unfile only
    itself: the retry of its ordinal the feeder filed under the same key in
    the meantime is generating, so the loop is not idle until it lands (a
    loop that forgot it would report idle early and could not cancel it)."""
    collector = StreamCollector(
        SequenceSource([[0], [1]], batch_size=2),
        LedgerConfig(stream_len=2, on_failure=FailurePolicy.RETRY, max_failures=3),
    )
    engine = SlowAbortEngine()
    sink = Sink()

    async def main() -> None:
        async with RolloutLoop(
            collector,
            engine,
            sink,
            prompt_of=list,
            sampling_params=None,
            num_generations=1,
            max_in_flight=4,
        ) as rollout:
            await rollout.until(lambda: rollout.idle)

    within(main())
    assert engine.finished == ["o1-a0", "o0-a1"]
    assert sorted(sink.groups) == [0, 1]
    assert collector.ledger.status(0) is Status.BUFFERED


class HangingEngine:
    """Never answers (a request with no per-request timeout)."""

    async def abort(self, request_id: str) -> None:
        pass

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        await asyncio.Event().wait()
        yield RequestOutput(request_id, (), finished=True)  # pragma: no cover


@pytest.mark.parametrize("schedule", ["group", "sibling"])
def test_a_wait_with_a_timeout_ends_with_a_typed_error_and_the_loop_closes(schedule: str) -> None:
    """``until(predicate, timeout)`` on a loop that can never satisfy it
    raises ``RolloutStalledError`` after the timeout; the loop is still
    whole: closing it leaves the ordinal outstanding, as any shutdown."""
    collector = StreamCollector(
        SequenceSource([[0]], batch_size=1), LedgerConfig(stream_len=1, max_failures=3)
    )
    sink = Sink()

    async def main() -> tuple[float, tuple[int, ...]]:
        rollout = rollout_of(schedule, collector, HangingEngine(), sink, max_in_flight=1)
        async with rollout:
            t0 = asyncio.get_running_loop().time()
            with pytest.raises(RolloutStalledError, match=r"waited 0\.2 s"):
                await rollout.until(lambda: len(sink) == 1, timeout=0.2)
            waited = asyncio.get_running_loop().time() - t0
        return waited, await rollout.aclose()

    waited, outstanding = within(main())
    assert 0.2 <= waited < DEADLINE
    assert outstanding == (0,) and collector.ledger.status(0) is Status.OUTSTANDING
