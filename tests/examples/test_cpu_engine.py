"""The CPU engine honours the AsyncLLM contract (n samples, EOS, abort,
cancellation, interleaving), and the replay buffer and GRPO step work on
the tiny model: a real update raises the probability of rewarded samples."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from frontier_adapters import SequenceSource, StreamCollector  # noqa: E402
from frontier_adapters.examples.cpu_engine import (  # noqa: E402
    EOS,
    CpuEngine,
    CpuSamplingParams,
    TinyCausalLM,
)
from frontier_adapters.examples.grpo import grpo_step, make_prompts, reward  # noqa: E402
from frontier_adapters.rollout import Group, ReplayBuffer, RequestOutput, RolloutLoop  # noqa: E402

from frontier_core import LedgerConfig, Status  # noqa: E402


def engine(**kw: Any) -> CpuEngine:
    return CpuEngine(TinyCausalLM(vocab=16, seed=3), seed=1, **kw)


async def collect(e: CpuEngine, rid: str, params: CpuSamplingParams) -> list[RequestOutput]:
    return [out async for out in e.generate([2, 3, 4], params, rid)]


def test_samples_n_completions_with_varied_lengths_deterministically() -> None:
    params = CpuSamplingParams(n=16, max_tokens=10)
    outs = asyncio.run(collect(engine(), "r1", params))
    assert len(outs) == 1 and outs[0].finished and outs[0].request_id == "r1"
    comps = outs[0].outputs
    assert [c.index for c in comps] == list(range(16))
    lengths = {len(c.token_ids) for c in comps}
    assert len(lengths) > 1  # EOS ends some samples early
    for c in comps:
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == EOS and EOS not in c.token_ids[:-1]
        else:
            assert c.finish_reason == "length" and len(c.token_ids) == 10
    again = asyncio.run(collect(engine(), "r1", params))
    other = asyncio.run(collect(engine(), "r2", params))
    assert again == outs and other != outs


def test_cumulative_outputs_stream_until_the_final_one() -> None:
    params = CpuSamplingParams(n=2, max_tokens=6, stop_token_ids=(), output_kind="cumulative")
    outs = asyncio.run(collect(engine(), "r", params))
    assert [o.finished for o in outs] == [False] * 5 + [True]
    assert [len(o.outputs[0].token_ids) for o in outs] == [1, 2, 3, 4, 5, 6]


def test_abort_ends_a_running_request_with_abort_reasons() -> None:
    # The abort comes after the request's first token, not after a fixed
    # sleep: under load a 30 ms sleep could end before any token existed.
    async def main() -> list[RequestOutput]:
        e = engine(token_latency=0.01)
        params = CpuSamplingParams(n=2, max_tokens=20, stop_token_ids=(), output_kind="cumulative")
        gen = e.generate([2, 3, 4], params, "r")
        first = await gen.__anext__()
        assert not first.finished and e.running == ("r",)
        await e.abort("r")
        outs = [first, *[out async for out in gen]]
        assert e.aborted == ["r"] and e.running == ()
        return outs

    outs = asyncio.run(asyncio.wait_for(main(), 120))
    assert outs[-1].finished
    assert {c.finish_reason for c in outs[-1].outputs} == {"abort"}
    assert 0 < len(outs[-1].outputs[0].token_ids) < 20


def test_cancelling_or_closing_the_consumer_aborts_the_request() -> None:
    async def main() -> CpuEngine:
        e = engine(token_latency=0.01)
        params = CpuSamplingParams(n=1, max_tokens=20, stop_token_ids=(), output_kind="cumulative")
        first = asyncio.Event()

        async def consume() -> None:
            async for _ in e.generate([2, 3, 4], params, "cancelled"):
                first.set()

        task = asyncio.create_task(consume())
        await first.wait()  # running, with a token out: cancel it mid-request
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gen = e.generate([2], CpuSamplingParams(output_kind="cumulative"), "closed")
        await gen.__anext__()
        await gen.aclose()  # type: ignore[attr-defined]
        return e

    e = asyncio.run(asyncio.wait_for(main(), 120))
    assert e.aborted == ["cancelled", "closed"] and e.running == ()


def test_concurrent_requests_interleave() -> None:
    async def main() -> CpuEngine:
        e = engine()
        params = CpuSamplingParams(n=2, max_tokens=8, stop_token_ids=())
        await asyncio.gather(*(collect(e, f"r{i}", params) for i in range(5)))
        return e

    assert asyncio.run(main()).peak_running == 5


def test_rollout_loop_over_the_cpu_engine_lands_every_prompt() -> None:
    prompts = make_prompts(20, vocab=16, seed=2)
    collector = StreamCollector(SequenceSource(prompts, batch_size=5), LedgerConfig(stream_len=20))
    buffer = ReplayBuffer(max_trajectory_age_steps=1)
    e = engine()

    async def main() -> None:
        async with RolloutLoop(
            collector,
            e,
            buffer,
            prompt_of=lambda row: {"prompt_token_ids": row},
            sampling_params=CpuSamplingParams(n=4, max_tokens=6),
            max_in_flight=6,
        ) as loop:
            await loop.until(lambda: loop.idle)

    asyncio.run(main())
    assert buffer.ordinals == list(range(20)) and e.peak_running == 6
    assert all(collector.ledger.status(o) is Status.BUFFERED for o in range(20))
    groups = buffer.take(3)
    assert [g.row for g in groups] == prompts[:3]
    assert all(len(g.completions) == 4 for g in groups)


def group(o: int, version: int, completions: tuple[tuple[int, ...], ...] = ((3,),)) -> Group:
    return Group(o, [3, 4], completions, ("stop",) * len(completions), version, 0, f"o{o}-a0")


def test_replay_buffer_ages_orders_and_round_trips_through_json() -> None:
    import json

    buf = ReplayBuffer(max_trajectory_age_steps=2)
    for o, v in [(5, 0), (2, 3), (9, 1)]:
        buf.add(group(o, v))
    with pytest.raises(ValueError, match="already buffered"):
        buf.add(group(5, 4))
    assert buf.stale(3) == [5] and buf.stale(2) == [] and buf.stale(4) == [5, 9]
    copy = ReplayBuffer(2)
    copy.load_state_dict(json.loads(json.dumps(buf.state_dict())))
    assert copy.state_dict() == buf.state_dict()
    buf.evict([5])
    assert [g.ordinal for g in buf.take(5)] == [2, 9] and len(buf) == 0


def test_grpo_step_raises_the_probability_of_rewarded_samples() -> None:
    torch.manual_seed(0)
    model = TinyCausalLM(vocab=16, seed=0)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    prompt = [7, 3, 4, 5]
    good, bad = (7, EOS), (9, EOS)
    g = Group(0, prompt, (good, bad, bad, good), ("stop",) * 4, 0, 0, "o0-a0")
    assert [reward(prompt, c) for c in g.completions] == [1.0, 0.0, 0.0, 1.0]

    def p_first(token: int) -> float:
        with torch.no_grad():
            return float(torch.softmax(model(torch.tensor([prompt]))[0, -1], -1)[token])

    before_good, before_bad = p_first(7), p_first(9)
    stats = grpo_step(model, optim, [g])
    assert stats.mean_reward == 0.5 and stats.tokens == 8
    assert p_first(7) > before_good and p_first(9) < before_bad
    # A group whose samples all scored the same weighs nothing.
    flat = Group(1, prompt, (bad, bad), ("stop",) * 2, 0, 0, "o1-a0")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    optim2 = torch.optim.SGD(model.parameters(), lr=1.0)
    assert grpo_step(model, optim2, [flat]).loss == 0.0
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
