"""The rollout binding of frontier_core: an asyncio loop over an engine with
vLLM's ``AsyncLLM`` contract, plus a CPU engine and a GRPO trainer to run it
without a GPU. Imports torch (vLLM needs it too); vllm itself is imported
only by ``VllmEngine`` and ``vllm_sampling_params``.

Bind a vLLM rollout loop::

    from frontier_adapters.rollout import RolloutLoop, VllmEngine, vllm_sampling_params

    engine = VllmEngine.from_engine_args(model="Qwen/Qwen2.5-0.5B-Instruct", seed=0)
    params = vllm_sampling_params(n=8, max_tokens=512, stop_token_ids=[eos])
    async with RolloutLoop(collector, engine, buffer, prompt_of=to_prompt,
                           sampling_params=params, max_in_flight=64, timeout=600,
                           version=lambda: step, on_dropped=log.dropped) as rollout:
        while not collector.drained:
            await rollout.until(lambda: len(buffer) >= groups_per_step or rollout.idle)
            ...   # evict stale -> collector.evicted; train -> collector.trained; checkpoint

``collector`` is a ``frontier_adapters.torch.StreamCollector``; the loop
reports dispatch (inside ``collector.take``), landing and failure, and never
decides coverage itself.
"""

from __future__ import annotations

from ._cpu_engine import EOS as EOS
from ._cpu_engine import CpuEngine as CpuEngine
from ._cpu_engine import CpuSamplingParams as CpuSamplingParams
from ._cpu_engine import TinyCausalLM as TinyCausalLM
from ._engine import AsyncEngine as AsyncEngine
from ._engine import Completion as Completion
from ._engine import CompletionLike as CompletionLike
from ._engine import RequestOutput as RequestOutput
from ._engine import RequestOutputLike as RequestOutputLike
from ._grpo import ReplayBuffer as ReplayBuffer
from ._grpo import StepStats as StepStats
from ._grpo import grpo_step as grpo_step
from ._grpo import make_prompts as make_prompts
from ._grpo import reward as reward
from ._rollout import Collector as Collector
from ._rollout import Group as Group
from ._rollout import GroupSink as GroupSink
from ._rollout import RolloutError as RolloutError
from ._rollout import RolloutEvent as RolloutEvent
from ._rollout import RolloutLoop as RolloutLoop
from ._rollout import default_request_id as default_request_id
from ._vllm import VllmEngine as VllmEngine
from ._vllm import vllm_sampling_params as vllm_sampling_params

__all__ = [
    "EOS",
    "AsyncEngine",
    "Collector",
    "Completion",
    "CompletionLike",
    "CpuEngine",
    "CpuSamplingParams",
    "Group",
    "GroupSink",
    "ReplayBuffer",
    "RequestOutput",
    "RequestOutputLike",
    "RolloutError",
    "RolloutEvent",
    "RolloutLoop",
    "StepStats",
    "TinyCausalLM",
    "VllmEngine",
    "default_request_id",
    "grpo_step",
    "make_prompts",
    "reward",
    "vllm_sampling_params",
]
