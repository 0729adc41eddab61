"""The rollout loop scheduling one request per sibling (``RolloutLoop(schedule=
"sibling")``) against a scripted streaming engine and a real journal file:
groups landing when their last sibling seals, a failed sibling generated
alone again, and a resume that reuses sealed siblings and continues a
durable prefix, generating only the rest. No torch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters import SequenceSource, StreamCollector
from frontier_adapters.journal import RolloutJournal
from frontier_adapters.rollout import (
    Group,
    RolloutLoop,
    request_id_of,
)
from frontier_adapters.rollout._engine import Completion, RequestOutput

from frontier_core import FailurePolicy, LedgerConfig, Status
from frontier_core.journal import Reuse

from ._deadline import run_within
from ._sample_support import Sink

N = 3
FP = "sample-loop"


def full(o: int, s: int) -> list[int]:
    """The sibling's whole sample: what the engine generates, whatever the
    prefix it is asked to continue."""
    return [100 * o + 10 * s + i for i in range(3 + (o + s) % 4)]


class StreamEngine:
    """Streams each sample one token per step, cumulatively, with log-probs;
    ``fail`` names request ids that raise after their first token, ``hold``
    maps request ids to a token count at which they stop until ``gate`` is
    set."""

    def __init__(self, fail: set[str] | None = None, hold: dict[str, int] | None = None) -> None:
        self.fail = fail or set()
        self.hold = hold or {}
        self.gate = asyncio.Event()
        self.submitted: list[tuple[str, tuple[int, ...]]] = []
        self.generated = 0

    async def abort(self, request_id: str) -> None:
        pass

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        (o, row), prefix = prompt
        lease = sampling_params
        assert row == f"r{o}"
        assert request_id == request_id_of(lease.ordinal, lease.attempt, sibling=lease.sibling)
        self.submitted.append((request_id, prefix))
        want = full(o, lease.sibling)
        assert tuple(want[: len(prefix)]) == prefix  # a prefix is the sample's start
        out: list[int] = []
        for i in range(len(prefix), len(want)):
            await asyncio.sleep(0)
            if request_id in self.fail and out:
                raise RuntimeError("the worker died")
            if self.hold.get(request_id) == len(prefix) + len(out):
                await self.gate.wait()
            out.append(want[i])
            self.generated += 1
            done = i == len(want) - 1
            yield RequestOutput(
                request_id,
                (
                    Completion(
                        0,
                        tuple(out),
                        "stop" if done else None,
                        logprobs=tuple(-0.5 for _ in out),
                    ),
                ),
                finished=done,
            )


def collector(n_prompts: int, **config: Any) -> StreamCollector:
    source = SequenceSource([(o, f"r{o}") for o in range(n_prompts)], batch_size=2)
    return StreamCollector(
        source, LedgerConfig(stream_len=n_prompts, samples=N, fingerprint=FP, **config)
    )


def loop(c: StreamCollector, engine: StreamEngine, sink: Sink, **kw: Any) -> RolloutLoop:
    return RolloutLoop(
        c,
        engine,
        sink,
        schedule="sibling",
        prompt_of=lambda row, prefix: (row, prefix),
        sampling_params=lambda lease, prefix_len: lease,
        max_in_flight=6,
        **kw,
    )


def test_every_group_lands_with_each_sibling_from_its_own_request() -> None:
    async def main() -> None:
        c, engine, sink = collector(4), StreamEngine(), Sink()
        async with loop(c, engine, sink) as rollout:
            await rollout.until(lambda: len(sink) == 4)
        for o, group in sink.groups.items():
            assert group.completions == tuple(tuple(full(o, s)) for s in range(N))
            assert [list(p.tokens()) for p in group.samples] == [full(o, s) for s in range(N)]
            assert c.ledger.status(o) is Status.BUFFERED
        assert len(engine.submitted) == 4 * N  # one request per sibling, none twice

    run_within(main())


def test_a_failed_sibling_alone_is_generated_again() -> None:
    async def main() -> None:
        c = collector(1, on_failure=FailurePolicy.RETRY, max_failures=3)
        failing = request_id_of(0, 1, sibling=1)  # the first attempt of sibling 1
        engine, sink = StreamEngine(fail={failing}), Sink()
        async with loop(c, engine, sink) as rollout:
            await rollout.until(lambda: len(sink) == 1)
        ids = [rid for rid, _ in engine.submitted]
        assert ids[:3] == [request_id_of(0, s, sibling=s) for s in range(N)]
        assert ids[3:] == [request_id_of(0, 3, sibling=1)]  # only sibling 1, a new attempt
        assert c.ledger.failures(0) == 1  # the failed sample counts one attempt of its group
        assert sink.groups[0].completions[1] == tuple(full(0, 1))

    run_within(main())


def test_a_refusing_sink_leaves_the_group_unresolved() -> None:
    async def main() -> None:
        c, engine, sink = collector(1), StreamEngine(), Sink(refuse={0})
        with pytest.raises(RuntimeError, match="refused"):
            async with loop(c, engine, sink) as rollout:
                await rollout.until(lambda: len(sink) == 1)
        assert c.ledger.status(0) is Status.OUTSTANDING

    run_within(main())


async def crash_mid_group(journal_path: Path, *, version: int = 0) -> tuple[dict[str, Any], int]:
    """Life 1 (prompt 0's siblings have 3, 4 and 5 tokens), on weights of
    ``version``: a checkpoint at step 0, then sibling 0 seals, sibling 1
    streams 2 tokens (a progress record every 2), sibling 2 only 1; then the
    process dies. Returns the checkpoint's state and journal position."""
    c = collector(1)
    journal = RolloutJournal(journal_path, fingerprint=FP, lineage="L", progress_every=2)
    position = journal.mark(0)
    state = c.checkpoint_state()
    held = {request_id_of(0, 1, sibling=1): 2, request_id_of(0, 2, sibling=2): 1}
    engine = StreamEngine(hold=held)
    sink = Sink()
    rollout = loop(c, engine, sink, journal=journal, version=lambda: version)
    async with rollout:
        await rollout.until(lambda: (0, 0) in {(x.ordinal, x.sibling) for x in c.ledger.held()})
        await rollout.until(
            lambda: (
                len(rollout.partial(0).get(1, ())) == 2 and len(rollout.partial(0).get(2, ())) == 1
            )
        )
        journal.writer.sync()
        # The kill: nothing after this point reaches the disk.
    journal.close()
    return state, position


def test_a_resume_reuses_sealed_siblings_and_continues_the_durable_prefix(tmp_path: Path) -> None:
    """Life 2 after ``crash_mid_group`` reuses sibling 0 without a request,
    generates sibling 1 from token 2 and sibling 2 from nothing."""
    journal_path = tmp_path / "journal"
    state, position = run_within(crash_mid_group(journal_path))

    async def life2() -> tuple[StreamEngine, Sink]:
        c = collector(1)
        journal = RolloutJournal(journal_path, fingerprint=FP, lineage="L", progress_every=2)
        from frontier_core import Checkpoint

        checkpoint = Checkpoint.from_state_dict(state["ledger"])
        got = journal.recover(
            checkpoint, position=position, checkpoint_id=0, reuse=Reuse.everything(), fork=0, step=0
        )
        c.resume(state, load_replay_buffer=True, sealed=got.sealed, attempt_floor=got.attempt_floor)
        engine, sink = StreamEngine(), Sink()
        # The policy moved on to version 3 since the crash.
        async with loop(
            c, engine, sink, journal=journal, recovered=got, version=lambda: 3
        ) as rollout:
            await rollout.until(lambda: len(sink) == 1)
        journal.close()
        return engine, sink

    engine, sink = run_within(life2())
    prefixes = {rid.split("-a")[0]: prefix for rid, prefix in engine.submitted}
    assert set(prefixes) == {"o0-s1", "o0-s2"}  # sibling 0 is reused, not requested
    assert prefixes["o0-s1"] == tuple(full(0, 1)[:2])  # continued from its durable prefix
    assert prefixes["o0-s2"] == ()  # 1 token was not due for a progress record
    assert engine.generated == (len(full(0, 1)) - 2) + len(full(0, 2))
    group = sink.groups[0]
    assert group.completions == tuple(tuple(full(0, s)) for s in range(N))
    continued = group.samples[1]
    assert list(continued.tokens()) == full(0, 1)  # no token lost or repeated
    assert len(continued.logprobs()) == len(full(0, 1))
    # Each token keeps the version that generated it: the prefix 0, the rest 3.
    assert list(continued.versions()) == [0, 0] + [3] * (len(full(0, 1)) - 2)
    # The group is as old as its oldest token (for the buffer's age limit).
    assert group.version == 0


def test_a_running_sample_is_journaled_once_a_snapshot_then_extends(tmp_path: Path) -> None:
    from frontier_core.journal import Extend, Progress, Sealed

    async def main() -> None:
        c = collector(1)
        journal = RolloutJournal(tmp_path / "j", fingerprint=FP, lineage="L", progress_every=1)
        async with loop(c, StreamEngine(), Sink(), journal=journal) as rollout:
            await rollout.until(lambda: c.ledger.status(0) is Status.BUFFERED)
        records = journal.writer.read().records
        journal.close()
        for s in range(N):
            mine = [r for r in records if hasattr(r, "sibling") and r.sibling == s]
            kinds = [type(r) for r in mine]
            want = full(0, s)
            # One snapshot of the first token, one extend per later token but
            # the last (the seal carries the whole sample).
            assert kinds == [Progress] + [Extend] * (len(want) - 2) + [Sealed]
            assert [r.start for r in mine if isinstance(r, Extend)] == list(range(1, len(want) - 1))
            assert list(mine[-1].payload.tokens()) == want

    run_within(main())


async def resume_after_crash(
    journal_path: Path, saved: tuple[dict[str, Any], int], *, reuse: Reuse, fork: int, step: int
) -> Group:
    """Life 2 after ``crash_mid_group``: recover with ``reuse`` at ``fork``,
    generate at version ``step`` until prompt 0 lands; its group."""
    from frontier_core import Checkpoint

    state, position = saved
    c = collector(1)
    journal = RolloutJournal(journal_path, fingerprint=FP, lineage="L", progress_every=2)
    checkpoint = Checkpoint.from_state_dict(state["ledger"])
    got = journal.recover(
        checkpoint, position=position, checkpoint_id=0, reuse=reuse, fork=fork, step=step
    )
    assert got.fork == fork
    c.resume(state, load_replay_buffer=True, sealed=got.sealed, attempt_floor=got.attempt_floor)
    sink = Sink()
    async with loop(
        c, StreamEngine(), sink, journal=journal, recovered=got, version=lambda: step
    ) as rollout:
        await rollout.until(lambda: len(sink) == 1)
    journal.close()
    return sink.groups[0]


def test_a_journaled_token_of_the_dead_branch_dates_its_group_through_the_fork(
    tmp_path: Path,
) -> None:
    """Life 1 generated on the weights of step 5, after the checkpoint of
    step 2, and died: those weights are gone. Life 2 resumes at the fork 2
    and trains steps 3, 4, ... on a new lineage. The reused sample and the
    continued prefix are (5 - 2) + (step - 2) updates from the weights of
    ``step``, so the group is dated 2 * 2 - 5 = -1, and a buffer with an age
    limit of 3 evicts it at step 3 (age 4), where its raw version 5 would
    have looked younger than the trainer."""
    from frontier_adapters.rollout import ReplayBuffer

    path = tmp_path / "journal"
    saved = run_within(crash_mid_group(path, version=5))
    group = run_within(resume_after_crash(path, saved, reuse=Reuse.everything(), fork=2, step=3))
    assert list(group.samples[0].versions()) == [5] * len(full(0, 0))  # reused whole
    assert list(group.samples[1].versions())[:2] == [5, 5]  # the continued prefix
    assert group.version == -1
    buffer = ReplayBuffer(max_trajectory_age_steps=3)
    buffer.add(group)
    assert buffer.stale(2) == []  # age 3 at step 2: (5 - 2) + (2 - 2)
    assert buffer.stale(3) == [0]  # age 4
    again = ReplayBuffer(max_trajectory_age_steps=3)
    again.load_state_dict(buffer.state_dict())  # a negative version survives a checkpoint
    assert again.stale(3) == [0]


def test_tokens_generated_in_this_life_keep_their_own_version(tmp_path: Path) -> None:
    """After a resume at the fork 2 that reuses nothing, every token is this
    life's: generated at version 7 (> the fork), the group is dated 7, not
    reflected through the fork as a dead branch's token would be."""
    path = tmp_path / "journal"
    saved = run_within(crash_mid_group(path, version=5))
    group = run_within(resume_after_crash(path, saved, reuse=Reuse.nothing(), fork=2, step=7))
    assert all(set(x.versions()) == {7} for x in group.samples)
    assert group.version == 7


def test_a_loop_on_a_fresh_journal_reserves_every_attempt_before_dealing_it(
    tmp_path: Path,
) -> None:
    """Issue 21 item 3, safe by construction: a loop given a journal and no
    ``recovered`` recovers it as a fresh start and binds its collector, so
    every attempt it deals is below a durable ``Reserve``; a journal that
    holds samples is not taken for a fresh start."""
    from frontier_adapters import JournalWithoutCheckpointError

    from frontier_core.journal import Reserve

    path = tmp_path / "j"

    async def main() -> None:
        c = collector(2)
        journal = RolloutJournal(path, fingerprint=FP, lineage="L", progress_every=1)
        async with loop(c, StreamEngine(), Sink(), journal=journal) as rollout:
            await rollout.until(lambda: c.ledger.status(1) is Status.BUFFERED)
        records = journal.writer.read().records
        journal.close()
        reserved = max(r.below for r in records if isinstance(r, Reserve))
        dealt = [r.attempt for r in records if hasattr(r, "attempt")]
        assert dealt and max(dealt) < reserved
        # The reservation came first: no attempt was journaled before it.
        first = next(i for i, r in enumerate(records) if isinstance(r, Reserve))
        assert all(not hasattr(r, "attempt") for r in records[:first])

    run_within(main())
    again = RolloutJournal(path, fingerprint=FP, lineage="L")
    with pytest.raises(JournalWithoutCheckpointError):
        loop(collector(2), StreamEngine(), Sink(), journal=again)
    again.close()
