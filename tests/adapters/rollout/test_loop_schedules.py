"""What each schedule of ``RolloutLoop`` needs of its collector, and the
rule that every exit leaves the loop's record equal to the ledger's: after
any stop, ``aclose`` returns exactly the ordinals the ledger holds
OUTSTANDING (a group the loop took and cannot start, a sibling whose
restart the ledger refuses, a group landed just before an observer or the
journal raised). Also ``max_in_flight`` as a hard bound on the engine's
requests and ``max_ahead`` under the sibling schedule. Scripted engines, no
vLLM."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters import SequenceSource, StreamCollector, Taken
from frontier_adapters.journal import RolloutJournal
from frontier_adapters.rollout import (
    Group,
    RolloutError,
    RolloutEvent,
    RolloutLoop,
    ScheduleError,
    request_id_of,
)
from frontier_adapters.rollout._engine import Completion, RequestOutput

from frontier_core import FailurePolicy, IllegalTransitionError, LedgerConfig, Status

from ._deadline import run_within

FP = "schedules"


class Sink:
    """Keeps the groups it takes until the trainer ``take``s them."""

    def __init__(self) -> None:
        self.groups: dict[int, Group] = {}
        self.taken: list[int] = []

    def add(self, group: Group) -> None:
        assert group.ordinal not in self.groups and group.ordinal not in self.taken
        self.groups[group.ordinal] = group

    def take(self) -> None:
        self.taken.extend(self.groups)
        self.groups.clear()

    def __len__(self) -> int:
        return len(self.groups)


class Engine:
    """Answers each request with ``n`` two-token samples (with log-probs)
    after a few steps; raises for the request ids in ``fail`` and for the
    first request whose id starts with one of ``fail_first``. Counts the
    requests it has at once."""

    def __init__(self, fail: set[str] | None = None, fail_first: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.fail_first = set(fail_first or ())
        self.submitted: list[str] = []
        self.now = 0
        self.peak = 0

    async def abort(self, request_id: str) -> None:
        pass

    async def generate(self, prompt: Any, params: Any, request_id: str) -> AsyncIterator[Any]:
        self.submitted.append(request_id)
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            first = {p for p in self.fail_first if request_id.startswith(p)}
            if request_id in self.fail or first:
                self.fail_first -= first
                raise RuntimeError("the worker died")
            n = getattr(params, "n", 1)
            yield RequestOutput(
                request_id,
                tuple(Completion(i, (7, i), "stop", logprobs=(-0.1, -0.2)) for i in range(n)),
                finished=True,
            )
        finally:
            self.now -= 1


class Params:
    def __init__(self, n: int) -> None:
        self.n = n


def rows(n: int) -> SequenceSource:
    return SequenceSource([f"r{o}" for o in range(n)], batch_size=2)


def collector(n: int, **config: Any) -> StreamCollector:
    return StreamCollector(rows(n), LedgerConfig(stream_len=n, fingerprint=FP, **config))


def rollout(
    c: Any, engine: Engine, sink: Any, schedule: str, samples: int, **kw: Any
) -> RolloutLoop:
    if schedule == "sibling":
        return RolloutLoop(
            c,
            engine,
            sink,
            schedule="sibling",
            prompt_of=lambda row, prefix: row,
            sampling_params=lambda lease, prefix_len: Params(1),
            **kw,
        )
    return RolloutLoop(c, engine, sink, prompt_of=str, sampling_params=Params(samples), **kw)


def outstanding(c: StreamCollector) -> set[int]:
    return set(c.ledger.ordinals(Status.OUTSTANDING))


async def stopped(loop: RolloutLoop, error: type[BaseException]) -> tuple[int, ...]:
    """Run ``loop`` until it stops with ``error``; what ``aclose`` returns."""
    with pytest.raises(error):
        async with loop:
            await loop.until(lambda: loop.idle)
    return await loop.aclose()


# -- what a schedule needs of the collector -------------------------------------------


def test_a_rank_collector_drives_the_group_schedule_and_the_sibling_one_refuses_it() -> None:
    """A rank's ``RankCollector`` deals whole groups: the group schedule runs
    on it (typed as docs/elastic.md binds it, ``verify._conformance``, which
    mypy checks), and the sibling schedule refuses it when the loop is built,
    naming what it lacks, before anything is taken."""
    pytest.importorskip("torch")
    from frontier_adapters.torch import RankCollector
    from frontier_adapters.verify._conformance import rank_rollout

    from frontier_core import Share

    config = LedgerConfig(stream_len=4, fingerprint=FP)
    rank = RankCollector(rows(4), config, Share.tiling(1)[0])
    with pytest.raises(ScheduleError) as refused:
        rollout(rank, Engine(), Sink(), "sibling", 1)
    for name in ("sealed", "failed_samples", "restart", "completes", "land_complete"):
        assert name in str(refused.value)
    assert rank.pending == 0 and not tuple(rank.ledger.ordinals(Status.OUTSTANDING))

    async def main() -> None:
        engine, sink = Engine(), Sink()
        async with rank_rollout(
            rank, engine, sink, prompt_of=str, sampling_params=Params(2)
        ) as loop:
            await loop.until(lambda: loop.idle)
        assert sorted(sink.groups) == [0, 1, 2, 3]
        assert {rank.ledger.status(o) for o in range(4)} == {Status.BUFFERED}

    run_within(main())


class WholeGroups(StreamCollector):
    """Every sibling method, but groups dealt with no leases (as a collector
    whose ledger holds no sibling detail would)."""

    def take_samples(self, n: int) -> list[Taken]:
        return [Taken(t.ordinal, t.row, (), (), False) for t in super().take_samples(n)]


def test_a_group_with_nothing_to_generate_under_the_sibling_schedule_stops_the_loop() -> None:
    """The old sample loop refused such a collector; the merged loop took
    the whole stream, generated nothing and reported itself idle, with every
    ordinal outstanding off its record."""

    async def main() -> None:
        c = WholeGroups(rows(6), LedgerConfig(stream_len=6, samples=2, fingerprint=FP))
        engine = Engine()
        loop = rollout(c, engine, Sink(), "sibling", 2, max_in_flight=4)
        left = await stopped(loop, ScheduleError)
        assert engine.submitted == []
        assert left and set(left) == outstanding(c)

    run_within(main())


# -- every stop leaves aclose equal to the ledger ----------------------------------------


def test_a_group_that_cannot_start_is_left_outstanding_with_those_taken_after_it() -> None:
    """The feeder takes a batch of groups (group schedule) and the first
    cannot start (the version source raises): it was dispatched inside
    ``take_samples``, so it is outstanding, with the rest of the batch."""

    async def main() -> None:
        c = collector(3)
        calls: list[int] = []

        def version() -> int:
            calls.append(1)
            if len(calls) == 1:
                raise OSError("version source down")
            return 0

        engine = Engine()
        loop = rollout(c, engine, Sink(), "group", 1, version=version)
        left = await stopped(loop, OSError)
        assert engine.submitted == []
        assert set(left) == outstanding(c) == {0, 1, 2}

    run_within(main())


def test_a_reused_sibling_without_a_journal_names_the_way_out_and_strands_its_group() -> None:
    """A collector resumed with a sealed sibling, a sibling-scheduled loop
    given no ``recovered``: the group cannot be built; it stays outstanding
    and ``aclose`` says so, and the error tells what to pass."""
    config = LedgerConfig(stream_len=3, samples=2, fingerprint=FP)
    first = StreamCollector(rows(3), config)
    (taken,) = first.take_samples(1)
    first.sealed(taken.leases[:1])
    state = first.checkpoint_state(save_sealed=True)

    async def main() -> None:
        c = StreamCollector(rows(3), config)
        c.resume(state, load_replay_buffer=True, sealed=taken.leases[:1])
        loop = rollout(c, Engine(), Sink(), "sibling", 2)
        with pytest.raises(RolloutError) as err:
            async with loop:
                await loop.until(lambda: loop.idle)
        assert "recovered=" in str(err.value) and "sealed=()" in str(err.value)
        assert set(await loop.aclose()) == outstanding(c) == {0}

    run_within(main())


def test_a_restart_the_ledger_refuses_stops_the_loop_with_the_group_outstanding() -> None:
    """A sibling fails and its restart would pass ``attempt_limit``: the
    ledger refuses it; the group is outstanding with no request left, and
    ``aclose`` returns it."""
    config = LedgerConfig(
        stream_len=1, samples=2, fingerprint=FP, on_failure=FailurePolicy.RETRY, max_failures=3
    )
    state = StreamCollector(rows(1), config).checkpoint_state()

    async def main() -> None:
        c = StreamCollector(rows(1), config)
        c.resume(state, load_replay_buffer=True, sealed=(), attempt_limit=2)
        engine = Engine(fail={request_id_of(0, 1, sibling=1)})
        left = await stopped(rollout(c, engine, Sink(), "sibling", 2), IllegalTransitionError)
        assert set(left) == outstanding(c) == {0}

    run_within(main())


class Landed(Exception):
    """The event observer's failure, raised at the first landing."""


@pytest.mark.parametrize("schedule", ["group", "sibling"])
def test_a_group_the_ledger_landed_before_a_stop_is_not_outstanding(schedule: str) -> None:
    """The event observer raises at a landing, after the ledger took the
    group: the loop stops, and the group is buffered, not outstanding."""

    def on_event(event: RolloutEvent) -> None:
        if event.kind == "land":
            raise Landed(event.ordinal)

    async def main() -> None:
        c = collector(4, samples=2)
        sink = Sink()
        loop = rollout(c, Engine(), sink, schedule, 2, max_in_flight=2, on_event=on_event)
        left = await stopped(loop, Landed)
        assert sink.groups  # (a request already running may land too)
        for o in sink.groups:
            assert c.ledger.status(o) is Status.BUFFERED and o not in left
        assert set(left) == outstanding(c)

    run_within(main())


class FailingJournal(RolloutJournal):
    """Its disk fails when a sample seals."""

    def sealed(self, lease: Any, payload: Any) -> int:
        raise OSError("journal disk full")


def test_a_group_landed_before_its_journal_record_failed_is_not_outstanding(
    tmp_path: Path,
) -> None:
    """The last sibling seals, the ledger lands the group, then the journal
    fails to record the sample: the loop stops, the group is buffered (its
    samples are in the sink), and ``aclose`` does not return it."""

    async def main() -> None:
        c = collector(3, samples=1)
        journal = FailingJournal(tmp_path / "j", fingerprint=FP, lineage="L")
        sink = Sink()
        loop = rollout(c, Engine(), sink, "sibling", 1, max_in_flight=1, journal=journal)
        left = await stopped(loop, OSError)
        journal.close()
        assert list(sink.groups) == [0] and c.ledger.status(0) is Status.BUFFERED
        assert set(left) == outstanding(c) and 0 not in left

    run_within(main())


# -- back pressure --------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_max_in_flight_bounds_the_engines_requests_under_the_sibling_schedule(limit: int) -> None:
    """Groups of 4 siblings, some failing and restarted: the engine never
    has more than ``max_in_flight`` requests at once, and has that many."""

    async def main() -> None:
        c = collector(4, samples=4, on_failure=FailurePolicy.RETRY, max_failures=3)
        failing = {f"o{o}-s{o}-" for o in range(4)}  # a sibling of each group fails once
        engine, sink = Engine(fail_first=failing), Sink()
        async with rollout(c, engine, sink, "sibling", 4, max_in_flight=limit) as loop:
            await loop.until(lambda: loop.idle)
        assert sorted(sink.groups) == [0, 1, 2, 3] and not engine.fail_first
        assert len(engine.submitted) == 16 + 4  # the restarts were generated too
        assert engine.peak == limit

    run_within(main())


@pytest.mark.parametrize("schedule", ["group", "sibling"])
def test_max_ahead_holds_groups_back_until_the_trainer_takes_some(schedule: str) -> None:
    """With ``max_ahead=2`` and a trainer that takes nothing, two groups
    are generated and no more; each group the trainer takes lets one more
    through."""

    async def main() -> None:
        c = collector(6, samples=2)
        engine, sink = Engine(), Sink()
        async with rollout(c, engine, sink, schedule, 2, max_in_flight=8, max_ahead=2) as loop:
            await loop.until(lambda: len(sink) == 2 and loop.in_flight == 0)
            for _ in range(20):  # room for the loop to (wrongly) take more
                await asyncio.sleep(0)
            per_group = 1 if schedule == "group" else 2
            assert len(sink) == 2 and len(engine.submitted) == 2 * per_group
            sink.take()
            loop.wake()
            await loop.until(lambda: len(sink) == 2 and loop.in_flight == 0)
            for _ in range(20):
                await asyncio.sleep(0)
            assert len(sink) == 2 and len(engine.submitted) == 4 * per_group
            sink.take()
            loop.wake()
            await loop.until(lambda: len(sink) == 2 and loop.in_flight == 0)
        assert sorted(sink.taken + list(sink.groups)) == list(range(6))

    run_within(main())
