"""The rollout loop's cost over bare ``AsyncLLM.generate``, on real vLLM.

One engine (the tiny Llama of ``examples.tiny_llm``, on vLLM's CPU build
here or on a GPU), and per round two runs over the same requests, in an
order that alternates from round to round:

* ``bare``: ``AsyncLLM.generate`` called directly, at most ``in_flight``
  requests at once (a semaphore), every output consumed;
* ``loop``: the same prompts through a ``StreamCollector`` and its ledger,
  a ``RolloutLoop`` with ``max_in_flight = in_flight`` over ``VllmEngine``
  and a ``ReplayBuffer``: dispatch, landing and the buffer included.

Every request asks for the same fixed work (``ignore_eos``, a fixed seed),
so both runs generate the same tokens. The ratio of their wall times is
the loop's cost (goal: at most 1.05x). As context, the section also reports
the time to import vLLM, to start the engine (``AsyncLLM.from_engine_args``)
and to get the first token of the first request, and the time to first
token of a single request on the idle engine. Wall time throughout.

    frontier bench --only vllm [--quick] [--rounds 5]

Needs vLLM (``scripts/setup-vllm.sh`` for the CPU build in ``.venv-vllm``,
or the ``vllm`` extra on a GPU); ``frontier bench`` skips the section with
a message where vllm is absent. The engine's sockets stay on loopback.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from frontier_core import LedgerConfig
from frontier_core.bench import Row, ratios_of, row

from .._collector import StreamCollector
from .._sources import SequenceSource
from ..rollout._buffer import ReplayBuffer
from ..rollout._loop import RolloutLoop
from ..rollout._vllm import VllmEngine, vllm_sampling_params

SECTION = "vllm"
TARGET = 1.05


def workload(quick: bool) -> dict[str, int]:
    if quick:
        return {"requests": 32, "n": 4, "tokens": 16, "in_flight": 8}
    return {"requests": 96, "n": 8, "tokens": 32, "in_flight": 16}


def prompts(count: int) -> list[list[int]]:
    """Token prompts: ``<s>`` and four letters, all different."""
    return [[1, 68 + i % 16, 68 + (i // 16) % 16, 68 + (i // 256) % 16, 70] for i in range(count)]


def _prompt(row: list[int]) -> dict[str, list[int]]:
    return {"prompt_token_ids": list(row)}


async def _bare(
    engine: VllmEngine, rows: list[list[int]], params: Any, in_flight: int, tag: str
) -> float:
    llm = engine.llm
    gate = asyncio.Semaphore(in_flight)
    finals: list[Any] = []

    async def one(i: int, r: list[int]) -> None:
        async with gate:
            last = None
            async for out in llm.generate(_prompt(r), params, f"{tag}-{i}"):
                last = out
            finals.append(last)

    start = time.perf_counter()
    await asyncio.gather(*(one(i, r) for i, r in enumerate(rows)))
    seconds = time.perf_counter() - start
    assert len(finals) == len(rows) and all(f is not None and f.finished for f in finals)
    return seconds


async def _loop(engine: VllmEngine, rows: list[list[int]], params: Any, in_flight: int) -> float:
    collector = StreamCollector(
        SequenceSource(rows, batch_size=in_flight), LedgerConfig(stream_len=len(rows))
    )
    buffer = ReplayBuffer(max_trajectory_age_steps=1_000_000)
    start = time.perf_counter()
    async with RolloutLoop(
        collector,
        engine,
        buffer,
        prompt_of=_prompt,
        sampling_params=params,
        max_in_flight=in_flight,
    ) as loop:
        await loop.until(lambda: loop.idle)
    seconds = time.perf_counter() - start
    assert len(buffer) == len(rows), "every group lands"
    return seconds


async def first_token(engine: VllmEngine, tag: str) -> float:
    """Seconds from submitting one request to its first streamed token."""
    params = vllm_sampling_params(n=1, max_tokens=8, output_kind="delta", ignore_eos=True)
    start = time.perf_counter()
    seconds = 0.0
    async for _ in engine.llm.generate(_prompt(prompts(1)[0]), params, tag):
        if not seconds:
            seconds = time.perf_counter() - start
    return seconds


async def measure(engine: VllmEngine, *, quick: bool, rounds: int) -> list[Row]:
    """The loop-against-bare rows (and time to first token on the idle
    engine) on a running ``engine``, in the caller's event loop (the one the
    engine is bound to)."""
    w = workload(quick)
    rows = prompts(w["requests"])
    params = vllm_sampling_params(
        n=w["n"], max_tokens=w["tokens"], temperature=1.0, seed=0, ignore_eos=True
    )
    # Warm up both paths once (first-request costs are the engine's).
    await _bare(engine, rows[: w["in_flight"]], params, w["in_flight"], "warm")
    await _loop(engine, rows[: w["in_flight"]], params, w["in_flight"])
    bare: list[float] = []
    looped: list[float] = []
    ttft: list[float] = []
    for r in range(rounds):
        if r % 2 == 0:
            bare.append(await _bare(engine, rows, params, w["in_flight"], f"bare{r}"))
            looped.append(await _loop(engine, rows, params, w["in_flight"]))
        else:
            looped.append(await _loop(engine, rows, params, w["in_flight"]))
            bare.append(await _bare(engine, rows, params, w["in_flight"], f"bare{r}"))
        ttft.append(await first_token(engine, f"ttft{r}"))
    ratios = ratios_of(looped, bare)
    median = statistics.median(ratios)
    what = (
        f"{w['requests']} requests x {w['n']} samples x {w['tokens']} tokens, "
        f"{w['in_flight']} in flight"
    )
    base = f"bare AsyncLLM.generate: {what}"
    return [
        row(SECTION, base, bare, "s wall", workload=w),
        row(
            SECTION,
            "RolloutLoop (collector, ledger, buffer): the same requests",
            looped,
            "s wall",
            ratios=ratios,
            baseline=base,
            target=f"<= {TARGET}x wall",
            met=median <= TARGET,
            workload=w,
        ),
        row(SECTION, "time to first token, one request on the idle engine", ttft, "s wall"),
    ]


def bench_vllm(*, quick: bool = False, rounds: int = 5) -> list[Row]:
    """``frontier bench`` rows: start an engine on the tiny model, measure,
    shut it down (see the module docstring)."""
    from ..examples import tiny_llm

    # The table goes to stdout; vLLM logs there by default.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    rpc = tempfile.mkdtemp(prefix="frontier-bench-rpc-")
    try:
        t0 = time.perf_counter()
        importlib.import_module("vllm.v1.engine.async_llm")
        imported = time.perf_counter() - t0
        tiny_llm.tiny_llm()  # built (or found) before the clock starts
        t0 = time.perf_counter()
        engine = tiny_llm.tiny_vllm_engine(rpc)
        started = time.perf_counter() - t0
        try:
            with asyncio.Runner() as runner:
                first = runner.run(first_token(engine, "first"))
                rows = runner.run(measure(engine, quick=quick, rounds=rounds))
        finally:
            engine.shutdown(timeout=1)
    finally:
        shutil.rmtree(rpc, ignore_errors=True)
    context = [
        row(SECTION, "import vllm (AsyncLLM)", [imported], "s wall"),
        row(SECTION, "engine start (AsyncLLM.from_engine_args)", [started], "s wall"),
        row(SECTION, "first token of the first request after start", [first], "s wall"),
    ]
    return context + rows
