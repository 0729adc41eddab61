"""Episodes through a ``Run``: driven over the CPU engine with an in-process
tool that counts its executions per key; continued after a simulated crash
(the run closed without sealing, reopened) at the last durable turn, with
a pending call handled by each policy; bad input refused with typed errors
and nothing journaled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")  # the CPU engine (the tests' own extra requires torch)

from frontier_adapters import Run, SequenceSource
from frontier_adapters.agents import Pending, drive
from frontier_adapters.examples.cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM

from frontier_core import FailurePolicy, Granularity, Lease, LedgerConfig
from frontier_core.journal import (
    BytesPayload,
    JournalEpisodeError,
    JournalError,
    JsonPayload,
    SiblingState,
    TokenPayload,
    ToolCall,
)

PROMPTS = [[2, 3], [4, 5]]
CONFIG = LedgerConfig(stream_len=2, samples=2, fingerprint="agents-test")


class Tool:
    """A tool honouring the idempotency contract, counting executions; it
    can crash the caller right after executing (``crash_after``)."""

    def __init__(self) -> None:
        self.executed: dict[str, int] = {}
        self.answers: dict[str, int] = {}
        self.crash_after: int | None = None
        self.calls: list[str] = []

    def act(self, turn: int, tokens: Sequence[int]) -> tuple[str, Any] | None:
        return ("add", {"v": len(tokens)}) if tokens else None

    async def call(self, name: str, args: Any, key: str) -> tuple[Any, Any]:
        self.calls.append(key)
        if key not in self.answers:
            self.executed[key] = self.executed.get(key, 0) + 1
            self.answers[key] = len(self.answers) + 10
        if self.crash_after is not None:
            self.crash_after -= 1
            if self.crash_after < 0:
                raise KeyboardInterrupt  # the process dies: the answer is not journaled
        return self.answers[key], {"n": len(self.answers)}

    def observe(self, answer: Any) -> Sequence[int]:
        return [2 + int(answer) % 14]

    def reward(self, episode: SiblingState) -> float:
        return 1.0


def _engine() -> tuple[CpuEngine, CpuSamplingParams]:
    return CpuEngine(TinyCausalLM(vocab=16, max_len=64, seed=3)), CpuSamplingParams(max_tokens=3)


async def _all(run: Run, tool: Tool, pending: Pending = Pending.RETRY) -> list[Any]:
    engine, params = _engine()
    outs = []
    while not run.drained:
        groups = run.take(2)
        landed: list[int] = [g.ordinal for g in groups if g.complete]
        for g in groups:
            for lease in g.leases:
                out = await drive(
                    run,
                    engine,
                    lease,
                    PROMPTS[lease.ordinal],
                    tool,
                    params=params,
                    max_turns=3,
                    pending=pending,
                )
                outs.append(out)
                if out.effect is not None:
                    landed += out.effect.landed
                    landed += [
                        ll.ordinal for ll in out.effect.leases
                    ]  # a restarted sibling: its group lands later
        run.trained(sorted({o for o in landed if run.ledger.status(o).name == "BUFFERED"}))
        run.checkpoint(run.step + 1)
    return outs


def test_episodes_run_to_their_seals_with_every_call_keyed_once(tmp_path: Path) -> None:
    tool = Tool()
    with Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG) as run:
        outs = asyncio.run(_all(run, tool))
        assert run.metrics()["calls"] == len(tool.calls) > 0
    assert all(n == 1 for n in tool.executed.values())
    assert len(set(tool.calls)) == len(tool.calls)  # no key reused across calls
    sealed = [o for o in outs if o.episode is not None]
    assert len(sealed) == 4
    for o in sealed:
        assert o.episode is not None
        for t in o.episode.turns:
            if t.call is not None:
                assert t.answer == JsonPayload.of(tool.answers[t.call.key])


def _crash_mid_call(tmp_path: Path, tool: Tool) -> None:
    """A life that dies right after a tool executed, its answer not journaled."""
    tool.crash_after = 1
    run = Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(_all(run, tool))
    run.sync()  # what was appended is durable; the answer never was
    run.close()


@pytest.mark.parametrize("policy", list(Pending))
def test_a_pending_call_is_handled_by_the_policy(tmp_path: Path, policy: Pending) -> None:
    tool = Tool()
    _crash_mid_call(tmp_path, tool)
    pending_key = tool.calls[-1]
    tool.crash_after = None
    with Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG) as run:
        outs = asyncio.run(_all(run, tool, policy))
        assert run.metrics()["calls_pending"] == 1
    first = outs[0]
    if policy is Pending.RETRY:
        # Re-issued under the same key: the tool replayed, executed once.
        assert first.retried == 1 and tool.calls.count(pending_key) == 2
        assert first.reused == 1  # the answered turn before it, not generated again
    elif policy is Pending.RESTART:
        assert first.restarted and first.reused == 0
        assert tool.calls.count(pending_key) == 1
    else:
        assert first.dropped and first.effect is not None
        assert tool.calls.count(pending_key) == 1
    assert all(n == 1 for n in tool.executed.values())


def test_bad_turns_and_answers_are_typed_errors_and_journal_nothing(tmp_path: Path) -> None:
    with Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG) as run:
        (group, *_) = run.take(1)
        lease = group.leases[0]
        tokens = TokenPayload.of([1], [-1.0], 0)
        before = run.journal.writer.position
        with pytest.raises(JournalEpisodeError, match="no call is pending"):
            run.answer(lease, 0, "nobody-asked", BytesPayload(b""))
        with pytest.raises(JournalEpisodeError, match="holds only 0 answered turns"):
            run.turn(lease, 1, tokens)
        key = run.call_key(lease, 0)
        for foreign in ("K", run.call_key(lease, 1), run.call_key(group.leases[1], 0)):
            # A key of another turn or sibling, or none of the run's: two
            # calls would share it (agents.md: distinct calls never do).
            with pytest.raises(JournalEpisodeError, match="not the run's"):
                run.turn(lease, 0, tokens, ToolCall("add", JsonPayload.of({}), foreign))
        assert run.turn(lease, 0, tokens, ToolCall("add", JsonPayload.of({}), key))
        with pytest.raises(JournalEpisodeError, match="an answer for key 'other'"):
            run.answer(lease, 0, "other", BytesPayload(b""))
        assert run.journal.writer.position == before + 1
        stale = Lease(lease.ordinal, lease.sibling, lease.attempt - 1)
        assert not run.answer(stale, 0, key, BytesPayload(b""))  # fenced, not journaled
        assert run.journal.writer.position == before + 1
        assert run.call_key(lease, 0) == key and run.namespace in key


RETRY_CONFIG = LedgerConfig(
    stream_len=1, samples=1, fingerprint="agents-fail", on_failure=FailurePolicy.RETRY
)
TOKENS = TokenPayload.of([5], [-1.0], 0)


def _call(run: Run, lease: Lease, turn: int) -> ToolCall:
    return ToolCall("add", JsonPayload.of({"t": turn}), run.call_key(lease, turn))


def test_a_group_dealt_again_starts_its_episodes_afresh_and_the_journal_reopens(
    tmp_path: Path,
) -> None:
    """A life continues an earlier life's episode (its call pending), then
    its whole group fails: the group's new lease gets no stale episode (the
    journal's is the failed attempt's), starts at turn 0, and the journal
    replays."""
    src = lambda: SequenceSource(["a"])  # noqa: E731
    run = Run.open(tmp_path, src(), RETRY_CONFIG)
    (group,) = run.take(1)
    first = group.leases[0]
    assert run.turn(first, 0, TOKENS, _call(run, first, 0))
    run.close()  # a crash with the call pending
    with Run.open(tmp_path, src(), RETRY_CONFIG) as run:
        (group,) = run.take(1)
        second = group.leases[0]
        recovered = run.episode(second)
        assert recovered is not None and recovered.pending == _call(run, first, 0)
        assert run.turn(second, 0, TOKENS, _call(run, second, 0))  # a restart
        assert run.failed([group.ordinal]).requeued == (group.ordinal,)
        (again,) = run.take(1)
        third = again.leases[0]
        assert third.attempt > second.attempt and run.episode(third) is None
        with pytest.raises(JournalEpisodeError):
            run.answer(third, 0, _call(run, first, 0).key, JsonPayload.of(1))
        assert run.turn(third, 0, TOKENS, _call(run, third, 0))
        assert run.answer(third, 0, _call(run, third, 0).key, JsonPayload.of(1))
        mine = run.episode(third)
    with Run.open(tmp_path, src(), RETRY_CONFIG) as run:
        (group,) = run.take(1)
        got = run.episode(group.leases[0])
        assert got is not None and got.turns == mine.turns  # type: ignore[union-attr]


def test_a_sibling_failing_its_group_drops_the_other_siblings_recovered_episodes(
    tmp_path: Path,
) -> None:
    """Under ``Granularity.GROUP`` one sibling's failure fails its group:
    the other sibling's episode recovered from an earlier life is not handed
    to its re-dealt lease."""
    cfg = LedgerConfig(
        stream_len=1,
        samples=2,
        fingerprint="agents-group",
        on_failure=FailurePolicy.RETRY,
        granularity=Granularity.GROUP,
    )
    run = Run.open(tmp_path, SequenceSource(["a"]), cfg)
    (group,) = run.take(1)
    first = group.leases[0]
    assert run.turn(first, 0, TOKENS, _call(run, first, 0))
    run.close()  # a crash with sibling 0's call pending
    with Run.open(tmp_path, SequenceSource(["a"]), cfg) as run:
        (group,) = run.take(1)
        zero, one = group.leases
        assert run.episode(zero) is not None
        effect = run.fail(one)
        assert effect.requeued == (group.ordinal,)
        (again,) = run.take(1)
        assert [run.episode(lease) for lease in again.leases] == [None, None]


def test_a_crash_after_the_last_turn_seals_it_without_generating(tmp_path: Path) -> None:
    """The last turn (no call) is durable, the seal is not: the continued
    episode is sealed as it stands; nothing is generated or called."""
    cfg = LedgerConfig(stream_len=1, samples=1, fingerprint="agents-final")
    run = Run.open(tmp_path, SequenceSource(["a"]), cfg)
    (group,) = run.take(1)
    lease = group.leases[0]
    assert run.turn(lease, 0, TOKENS, _call(run, lease, 0))
    assert run.answer(lease, 0, _call(run, lease, 0).key, JsonPayload.of(0))
    assert run.turn(lease, 1, TokenPayload.of([6], [-1.0], 0))
    run.sync()
    run.close()
    tool = Tool()
    engine, params = _engine()
    with Run.open(tmp_path, SequenceSource(["a"]), cfg) as run:
        (group,) = run.take(1)
        out = asyncio.run(
            drive(run, engine, group.leases[0], [2, 3], tool, params=params, max_turns=4)
        )
        assert out.effect is not None and out.effect.landed == (0,)
        run.sync()  # sealed, not trained: a crash
    assert (out.generated, out.calls, tool.calls) == (0, 0, [])
    assert out.episode is not None and [t.call is None for t in out.episode.turns] == [False, True]
    with Run.open(tmp_path, SequenceSource(["a"]), cfg) as run:
        (group,) = run.take(1)
        (reused,) = group.reused
        sealed = run.episode(reused)  # the seal kept the transcript
        assert sealed is not None and sealed.turns == out.episode.turns


def test_a_sealed_episode_gives_back_its_transcript_after_a_crash(tmp_path: Path) -> None:
    """Sealed, not trained, then a crash: the reused sibling's sample and its
    episode (each turn's tokens, call, answer and state) come back."""
    tool = Tool()
    engine, params = _engine()
    with Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG) as run:
        (group,) = run.take(1)
        outs = [
            asyncio.run(drive(run, engine, lease, PROMPTS[0], tool, params=params, max_turns=3))
            for lease in group.leases
        ]
        run.sync()  # the seals are durable, nothing trained
    with Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG) as run:
        (group, *_) = run.take(1)
        assert group.complete and len(group.reused) == 2
        for lease, out in zip(group.reused, outs, strict=True):
            episode = run.episode(lease)
            assert episode is not None and out.episode is not None
            assert episode.turns == out.episode.turns and len(episode.turns) >= 2
            assert run.sample(lease) == episode.payload and episode.sealed


def test_a_turn_retried_after_its_sync_failed_is_journaled_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG) as run:
        (group, *_) = run.take(1)
        lease = group.leases[0]
        sync = run.journal.writer.sync
        failures = [JournalError("the sync failed")]

        def flaky() -> None:
            if failures:
                raise failures.pop()
            sync()

        monkeypatch.setattr(run.journal.writer, "sync", flaky)
        call = _call(run, lease, 0)
        with pytest.raises(JournalError, match="the sync failed"):
            run.turn(lease, 0, TOKENS, call)
        before = run.journal.writer.position
        assert run.turn(lease, 0, TOKENS, call)  # waits for durability, journals nothing
        assert run.journal.writer.position == before and run.journal.writer.pending == 0
        assert run.answer(lease, 0, call.key, JsonPayload.of(1))
        assert run.answer(lease, 0, call.key, JsonPayload.of(1))  # the same again: a no-op
        assert run.journal.writer.position == before + 1
        assert run.metrics()["turns"] == 1
    with Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG) as run:  # replays
        (group, *_) = run.take(1)
        got = run.episode(group.leases[0])
        assert got is not None and len(got.turns) == 1 and got.pending is None


class JsonTool(Tool):
    """Acts with a tuple and answers with one: JSON has only lists."""

    def __init__(self) -> None:
        super().__init__()
        self.args: list[Any] = []
        self.observed: list[Any] = []

    def act(self, turn: int, tokens: Sequence[int]) -> tuple[str, Any] | None:
        return ("add", {"v": (turn, 1)})

    async def call(self, name: str, args: Any, key: str) -> tuple[Any, Any]:
        self.args.append(args)
        return (len(self.args),), None

    def observe(self, answer: Any) -> Sequence[int]:
        self.observed.append(answer)
        return [2 + answer[0] % 14]


def test_the_tool_and_observe_get_the_journaled_json_values(tmp_path: Path) -> None:
    """A fresh call sees what a continuation reads back: the JSON values."""
    tool = JsonTool()
    engine, params = _engine()
    with Run.open(tmp_path, SequenceSource(PROMPTS), CONFIG) as run:
        (group, *_) = run.take(1)
        asyncio.run(drive(run, engine, group.leases[0], [2], tool, params=params, max_turns=3))
    assert tool.args == [{"v": [0, 1]}, {"v": [1, 1]}]
    assert tool.observed == [[1], [2]]
