"""``frontier bench``'s ``agents`` section: what the turn journal adds to an
episode's wall time.

Episodes of a few turns are driven over the CPU engine (``agents.drive``)
with a tool that takes ``TOOL_SECONDS`` per call (a sandbox command, a
service call) and an engine that takes ``TOKEN_SECONDS`` per decoding step.
The journaled run records every turn, its call (synced before the tool
runs: one fsync per call) and its answer. The baseline, in the same round
over an identical run, is the same driver whose turns and answers are not
journaled (``_Unjournaled``: a run that only seals, what a sample-level
journal without turn semantics records). The issue's goal: the turn
journal adds at most 5% to an episode's wall time.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from frontier_core import Effect, Lease, LedgerConfig
from frontier_core.bench import Row, ratios_of, row
from frontier_core.journal import (
    Answer,
    Payload,
    SiblingState,
    TokenPayload,
    ToolCall,
    Turn,
    advance,
)

from .._sources import SequenceSource
from ..agents import drive
from ..run import Run

SECTION = "agents"
TURNS = 4
TOOL_SECONDS = 0.02
TOKEN_SECONDS = 0.001
GOAL = 1.05


class _Tool:
    def act(self, turn: int, tokens: Sequence[int]) -> tuple[str, Any] | None:
        return "run", {"turn": turn}

    async def call(self, name: str, args: Any, key: str) -> tuple[Any, Any]:
        await asyncio.sleep(TOOL_SECONDS)
        return {"ok": True}, {"turn": args["turn"]}

    def observe(self, answer: Any) -> Sequence[int]:
        return [2]

    def reward(self, episode: SiblingState) -> float:
        return 1.0


class _Unjournaled:
    """The baseline: a run whose episodes are kept in memory only (every
    other call goes to the real run)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.turns: dict[Lease, SiblingState] = {}

    def episode(self, lease: Lease) -> SiblingState | None:
        return self.turns.get(lease)

    def call_key(self, lease: Lease, turn: int) -> str:
        return self.run.call_key(lease, turn)

    def turn(
        self, lease: Lease, turn: int, tokens: TokenPayload, call: ToolCall | None = None
    ) -> bool:
        state = advance(self.turns.get(lease), Turn(*lease, turn, tokens, call))
        assert state is not None
        self.turns[lease] = state
        return True

    def answer(
        self, lease: Lease, turn: int, key: str, answer: Payload, state: Payload | None = None
    ) -> bool:
        after = advance(self.turns.get(lease), Answer(*lease, turn, key, answer, state))
        assert after is not None
        self.turns[lease] = after
        return True

    def seal(self, lease: Lease, sample: Payload) -> Effect:
        return self.run.seal(lease, sample)

    def fail(self, lease: Lease) -> Effect:
        return self.run.fail(lease)


async def _episodes(run: Any, engine: Any, params: Any, leases: list[Lease]) -> None:
    await asyncio.gather(
        *(
            drive(run, engine, lease, [2, 3], _Tool(), params=params, max_turns=TURNS)
            for lease in leases
        )
    )


def bench_agents(*, quick: bool, rounds: int) -> list[Row]:
    from ..examples.cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM

    groups = 1 if quick else 16
    config = LedgerConfig(stream_len=groups, samples=4, fingerprint="bench-agents")
    params = CpuSamplingParams(max_tokens=8, stop_token_ids=())
    times: dict[str, list[float]] = {"journaled": [], "baseline": []}
    for r in range(rounds):
        for kind in ("journaled", "baseline") if r % 2 == 0 else ("baseline", "journaled"):
            with tempfile.TemporaryDirectory(prefix="frontier-bench-agents-") as tmp:
                engine = CpuEngine(TinyCausalLM(vocab=16, max_len=64), token_latency=TOKEN_SECONDS)
                with Run.open(Path(tmp), SequenceSource(list(range(groups))), config) as run:
                    leases = [lease for t in run.take(groups) for lease in t.leases]
                    driven: Any = run if kind == "journaled" else _Unjournaled(run)
                    start = time.perf_counter()
                    asyncio.run(_episodes(driven, engine, params, leases))
                    times[kind].append(time.perf_counter() - start)
    ratios = ratios_of(times["journaled"], times["baseline"])
    return [
        row(
            SECTION,
            f"{groups * 4} episodes of {TURNS} turns, not journaled",
            times["baseline"],
            "s",
        ),
        row(
            SECTION,
            f"{groups * 4} episodes of {TURNS} turns, every turn and answer journaled "
            f"(tool {TOOL_SECONDS * 1000:g} ms, {TOKEN_SECONDS * 1000:g} ms per token)",
            times["journaled"],
            "s",
            ratios=ratios,
            baseline="the same episodes, not journaled",
            target=f"<= {GOAL:g}x",
            met=statistics.median(ratios) <= GOAL,  # a shared machine's noise: the median
        ),
    ]
