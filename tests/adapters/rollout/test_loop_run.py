"""The rollout loop driving a ``Run`` (``RolloutLoop(run, engine, sink)``):
the run journals every sample the ledger accepts, reserves the attempts and
recovers on open, and the loop only reports (``take``, ``seal``,
``progress``, ``fail``). Against a scripted engine whose tokens the test
releases one by one, and real journal and checkpoint files; a new life is a
new ``Run.open`` on the same directory. No torch."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters import Run, SequenceSource
from frontier_adapters.journal import RolloutJournal
from frontier_adapters.rollout import RolloutLoop, request_id_of
from frontier_adapters.rollout._engine import Completion, RequestOutput

from frontier_core import FailurePolicy, LedgerConfig, Status
from frontier_core.journal import Extend, Progress, Reserve, Sealed

from ._deadline import run_within
from ._sample_support import Sink

N = 3
FP = "loop-run"


def full(o: int, s: int) -> list[int]:
    """The sibling's whole sample, whatever prefix it is asked to continue."""
    return [100 * o + 10 * s + i for i in range(3 + (o + s) % 4)]


class Engine:
    """Streams each sibling's ``full`` sample one token per output
    (cumulative, with log-probs). With ``fed``, a request makes a token only
    once the test has fed that many (``feed(k)``: up to ``k`` tokens per
    sample, a continued prefix counted). ``fail`` names request ids that
    raise after their first token."""

    def __init__(self, *, fed: bool = False, fail: set[str] | None = None) -> None:
        self.allowed = 0 if fed else math.inf
        self.fail = fail or set()
        self.fed = asyncio.Condition()
        self.submitted: list[tuple[str, tuple[int, ...]]] = []
        self.generated = 0

    async def feed(self, tokens: int) -> None:
        async with self.fed:
            self.allowed = tokens
            self.fed.notify_all()

    async def abort(self, request_id: str) -> None:
        pass

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        (o, _), prefix = prompt
        lease = sampling_params
        self.submitted.append((request_id, prefix))
        want = full(o, lease.sibling)
        assert tuple(want[: len(prefix)]) == prefix
        out: list[int] = []
        for i in range(len(prefix), len(want)):
            async with self.fed:
                await self.fed.wait_for(lambda i=i: i < self.allowed)
            if request_id in self.fail and out:
                raise RuntimeError("the worker died")
            out.append(want[i])
            self.generated += 1
            done = i == len(want) - 1
            c = Completion(0, tuple(out), "stop" if done else None, logprobs=(-0.5,) * len(out))
            yield RequestOutput(request_id, (c,), finished=done)


def open_run(root: Path, prompts: int = 2, **config: Any) -> Run:
    source = SequenceSource([(o, f"r{o}") for o in range(prompts)], batch_size=2)
    cfg = LedgerConfig(stream_len=prompts, samples=N, fingerprint=FP, **config)
    return Run.open(root, source, cfg, progress_every=2)


def loop(run: Run, engine: Engine, sink: Sink, **kw: Any) -> RolloutLoop:
    return RolloutLoop(
        run,
        engine,
        sink,
        prompt_of=lambda row, prefix: (row, prefix),
        sampling_params=lambda lease, prefix_len: lease,
        **{"max_in_flight": 6, **kw},
    )


async def streamed(predicate: Callable[[], bool]) -> None:
    """Wait until ``predicate()`` holds, for a condition on the tokens
    streamed so far (``partial``): a token is no loop event that ``until``
    wakes on. Bounded: a few turns of the event loop are plenty."""
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the engine did not stream the tokens fed to it")


def records(root: Path) -> list[Any]:
    journal = RolloutJournal(root / "journal", fingerprint=FP, lineage="run")
    try:
        return list(journal.writer.read().records)
    finally:
        journal.close()


def test_the_run_journals_each_sample_the_loop_seals_under_a_reserved_attempt(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        engine, sink = Engine(), Sink()
        with open_run(tmp_path) as run:
            async with loop(run, engine, sink) as rollout:
                await rollout.until(lambda: rollout.idle)
            assert [run.ledger.status(o) for o in range(2)] == [Status.BUFFERED] * 2
            assert run.metrics()["sealed"] == 2 * N

    run_within(main())
    got = records(tmp_path)
    sealed = {(r.ordinal, r.sibling): list(r.payload.tokens()) for r in got if type(r) is Sealed}
    assert sealed == {(o, s): full(o, s) for o in range(2) for s in range(N)}
    first = next(i for i, r in enumerate(got) if isinstance(r, Reserve))
    assert all(not hasattr(r, "attempt") for r in got[:first])  # reserved before dealt
    below = max(r.below for r in got if isinstance(r, Reserve))
    assert max(r.attempt for r in got if hasattr(r, "attempt")) < below
    # A running sample is journaled every 2 tokens: a snapshot, then extends.
    mine = [type(r) for r in got if getattr(r, "ordinal", None) == 1 and r.sibling == 2]
    assert mine == [Progress, Extend, Sealed]  # 6 tokens: at 2, at 4, sealed at 6


def test_a_failed_sibling_alone_is_generated_again_through_the_run(tmp_path: Path) -> None:
    async def main() -> tuple[Engine, Sink, Run]:
        failing = request_id_of(0, 1, sibling=1)  # sibling 1's first attempt
        engine, sink = Engine(fail={failing}), Sink()
        run = open_run(tmp_path, 1, on_failure=FailurePolicy.RETRY, max_failures=3)
        with run:
            async with loop(run, engine, sink) as rollout:
                await rollout.until(lambda: len(sink) == 1)
        return engine, sink, run

    engine, sink, run = run_within(main())
    ids = [rid for rid, _ in engine.submitted]
    assert ids[:N] == [request_id_of(0, s, sibling=s) for s in range(N)]
    again = ids[N:]
    assert len(again) == 1 and again[0].startswith("o0-s1-a")  # sibling 1 alone
    assert again[0] != ids[1]
    assert sink.groups[0].completions == tuple(tuple(full(0, s)) for s in range(N))
    assert run.ledger.failures(0) == 1


async def crash_mid_group(root: Path) -> None:
    """Life 1 on prompt 0 (siblings of 3, 4 and 5 tokens, a progress record
    every 2): every sample gets 3 tokens, so sibling 0 seals, 1 and 2 have a
    durable prefix of 2; then the life ends with nothing more reported
    (``aclose`` reports nothing; ``close`` keeps the journal)."""
    engine = Engine(fed=True)
    with open_run(root, 1) as run:
        async with loop(run, engine, Sink(), version=lambda: 0) as rollout:
            await engine.feed(3)
            await streamed(
                lambda: (
                    [len(rollout.partial(0).get(s, ())) for s in (1, 2)] == [3, 3]
                    and bool(run.ledger.held())  # sibling 0 sealed
                )
            )


def test_a_new_life_reuses_sealed_siblings_and_continues_durable_prefixes(tmp_path: Path) -> None:
    run_within(crash_mid_group(tmp_path))

    async def life2() -> tuple[Engine, Sink, dict[str, float]]:
        engine, sink = Engine(), Sink()
        with open_run(tmp_path, 1) as run:
            async with loop(run, engine, sink, version=lambda: 3) as rollout:
                await rollout.until(lambda: len(sink) == 1)
            return engine, sink, run.metrics()

    engine, sink, metrics = run_within(life2())
    prefixes = {rid.split("-a")[0]: prefix for rid, prefix in engine.submitted}
    assert prefixes == {"o0-s1": tuple(full(0, 1)[:2]), "o0-s2": tuple(full(0, 2)[:2])}
    assert engine.generated == (len(full(0, 1)) - 2) + (len(full(0, 2)) - 2)
    group = sink.groups[0]
    assert [list(p.tokens()) for p in group.samples] == [full(0, s) for s in range(N)]
    assert list(group.samples[1].versions()) == [0, 0] + [3] * (len(full(0, 1)) - 2)
    assert group.version == 0  # as old as its oldest token
    assert (metrics["samples_reused"], metrics["prefixes_continued"]) == (1, 2)


def test_a_group_buffered_at_a_checkpoint_comes_back_whole_without_a_request(
    tmp_path: Path,
) -> None:
    """The run does not checkpoint the sink: a group that was buffered (not
    trained) at the checkpoint is handed to the next life's loop as complete,
    from the journal, and lands in its sink with no request."""

    async def life(expect: int, train: list[int]) -> tuple[Engine, Sink]:
        engine, sink = Engine(), Sink()
        with open_run(tmp_path) as run:
            async with loop(run, engine, sink) as rollout:
                await rollout.until(lambda: len(sink) == expect)
            run.trained(train)
            run.checkpoint(run.step + 1)
        return engine, sink

    _, first = run_within(life(2, [0]))
    engine, second = run_within(life(1, [1]))
    assert engine.submitted == []
    assert second.groups[1].samples == first.groups[1].samples


def continued_prefixes(root: Path) -> dict[str, tuple[int, ...]]:
    """The next life on ``root``, run until both groups land: the prefix
    each of prompt 0's requests was submitted with, by sibling."""

    async def life() -> Engine:
        engine, sink = Engine(), Sink()
        with open_run(root) as run:
            async with loop(run, engine, sink) as rollout:
                await rollout.until(lambda: len(sink) == 2)
        return engine

    again = run_within(life())
    return {rid.split("-a")[0]: p for rid, p in again.submitted if rid.startswith("o0")}


def test_after_a_termination_notice_the_loop_takes_nothing_and_drain_keeps_the_tokens(
    tmp_path: Path,
) -> None:
    """A notice stops the dispatch (the loop goes idle once its requests
    end); the loop then reports every advance, so ``Run.drain`` journals each
    running sample's latest tokens, which the next life continues."""
    progress_every = 100

    async def main() -> tuple[Any, Engine]:
        engine = Engine(fed=True)
        source = SequenceSource([(o, f"r{o}") for o in range(2)], batch_size=2)
        cfg = LedgerConfig(stream_len=2, samples=N, fingerprint=FP)
        run = Run.open(tmp_path, source, cfg, progress_every=progress_every)
        async with loop(run, engine, Sink(), max_in_flight=N) as rollout:
            await engine.feed(1)
            await streamed(lambda: len(rollout.partial(0)) == N)
            run.notice(60)
            await engine.feed(2)  # one more token each, after the notice
            await streamed(lambda: all(len(t) == 2 for t in rollout.partial(0).values()))
            assert not rollout.idle  # its requests are running
        drained = run.drain()
        return drained, engine

    drained, engine = run_within(main())
    assert engine.submitted == [(request_id_of(0, s, sibling=s), ()) for s in range(N)]
    assert (drained.running, drained.progress_records) == (N, N)
    assert continued_prefixes(tmp_path) == {f"o0-s{s}": tuple(full(0, s)[:2]) for s in range(N)}


def test_the_loops_drain_keeps_tokens_streamed_before_the_notice(tmp_path: Path) -> None:
    """Tokens below the progress cadence, none after the notice: the loop's
    ``drain`` stops the requests, hands the run every running sample's
    tokens and drains it (no report reaches the closed run after), and the
    next life continues each sample from them."""

    async def main() -> tuple[Any, Engine]:
        engine = Engine(fed=True)
        source = SequenceSource([(o, f"r{o}") for o in range(2)], batch_size=2)
        cfg = LedgerConfig(stream_len=2, samples=N, fingerprint=FP)
        run = Run.open(tmp_path, source, cfg, progress_every=100)
        async with loop(run, engine, Sink(), max_in_flight=N) as rollout:
            await engine.feed(2)
            await streamed(lambda: [len(t) for t in rollout.partial(0).values()] == [2] * N)
            run.notice(60)
            drained = await rollout.drain()
        return drained, engine

    drained, _ = run_within(main())
    assert (drained.running, drained.progress_records) == (N, N)
    assert continued_prefixes(tmp_path) == {f"o0-s{s}": tuple(full(0, s)[:2]) for s in range(N)}


def test_a_preempted_run_leaves_the_loop_idle_with_nothing_taken(tmp_path: Path) -> None:
    async def main() -> Engine:
        engine = Engine()
        with open_run(tmp_path) as run:
            run.notice(60)
            async with loop(run, engine, Sink()) as rollout:
                await rollout.until(lambda: rollout.idle)
            assert run.ledger.count(Status.OUTSTANDING) == 0
        return engine

    assert run_within(main()).submitted == []


def test_a_run_owns_its_journal_and_journals_sample_by_sample(tmp_path: Path) -> None:
    with open_run(tmp_path) as run:
        journal = RolloutJournal(tmp_path / "other", fingerprint=FP, lineage="run")
        try:
            with pytest.raises(ValueError, match="owns its journal"):
                loop(run, Engine(), Sink(), journal=journal)
        finally:
            journal.close()
        with pytest.raises(ValueError, match="owns its journal"):
            loop(run, Engine(), Sink(), recovered=run.recovered)
        with pytest.raises(ValueError, match="schedule='sibling'"):
            loop(run, Engine(), Sink(), schedule="group")
        assert loop(run, Engine(), Sink()).schedule.value == "sibling"
