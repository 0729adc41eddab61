"""The rollout loop against real vLLM 0.33 (``pip install 'frontier-core[vllm]'``).

Skipped, with the reason, where vllm is not importable or no CUDA GPU is
present. The model defaults to a small public one; set FRONTIER_VLLM_MODEL
to use another (a local path works offline).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip(
    "vllm", reason="vllm is not installed (pip install 'frontier-core[vllm]'; needs a GPU)"
)
if not torch.cuda.is_available():
    pytest.skip("vllm is installed but no CUDA GPU is available", allow_module_level=True)

from frontier_adapters import SequenceSource, StreamCollector  # noqa: E402
from frontier_adapters.rollout import (  # noqa: E402
    ReplayBuffer,
    RolloutEvent,
    RolloutLoop,
    VllmEngine,
    vllm_sampling_params,
)

from frontier_core import LedgerConfig, Status  # noqa: E402

MODEL = os.environ.get("FRONTIER_VLLM_MODEL", "facebook/opt-125m")


def texts(n: int) -> SequenceSource:
    return SequenceSource([f"Count from {o}:" for o in range(n)], batch_size=4)


@pytest.fixture(scope="module")
def engine() -> Any:
    e = VllmEngine.from_engine_args(
        model=MODEL, seed=0, gpu_memory_utilization=0.3, enforce_eager=True, max_model_len=512
    )
    yield e
    e.shutdown()


def test_groups_land_from_real_vllm(engine: VllmEngine) -> None:
    collector = StreamCollector(texts(6), LedgerConfig(stream_len=6))
    buffer = ReplayBuffer(max_trajectory_age_steps=4)
    events: list[RolloutEvent] = []

    async def main() -> None:
        async with RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=str,
            sampling_params=vllm_sampling_params(n=4, max_tokens=16, seed=0),
            max_in_flight=4,
            timeout=120,
            on_event=events.append,
        ) as loop:
            await loop.until(lambda: loop.idle)

    asyncio.run(main())
    assert buffer.ordinals == list(range(6))
    assert all(collector.ledger.status(o) is Status.BUFFERED for o in range(6))
    assert all(len(g.completions) == 4 for g in buffer.take(6))
    assert not any(e.kind == "fail" for e in events)


def test_shutdown_mid_flight_aborts_real_requests(engine: VllmEngine) -> None:
    collector = StreamCollector(texts(4), LedgerConfig(stream_len=4))
    buffer = ReplayBuffer(max_trajectory_age_steps=4)

    async def main() -> tuple[int, ...]:
        loop = RolloutLoop(
            collector,
            engine,
            buffer,
            prompt_of=str,
            sampling_params=vllm_sampling_params(n=2, max_tokens=400, seed=0),
            max_in_flight=4,
        )
        loop.start()
        await asyncio.sleep(0.2)
        left = await loop.aclose()
        await asyncio.sleep(0.2)
        assert engine.llm.get_num_unfinished_requests() == 0
        return left

    left = asyncio.run(main())
    assert left and all(collector.ledger.status(o) is Status.OUTSTANDING for o in left)
