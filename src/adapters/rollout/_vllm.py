"""The vLLM binding: build an ``AsyncLLM`` and ``SamplingParams`` the way
the rollout loop consumes them. Imports vllm lazily (``pip install
'frontier-core[vllm]'``, pinned to 0.33.0, whose signatures these are):

* ``vllm.v1.engine.async_llm.AsyncLLM.from_engine_args(AsyncEngineArgs(...))``
* ``AsyncLLM.generate(prompt, sampling_params, request_id)``: an async
  generator of ``RequestOutput``; cancelling it aborts the request;
* ``await AsyncLLM.abort(request_id)``; ``AsyncLLM.shutdown()`` (sync);
* ``SamplingParams(n=..., max_tokens=..., temperature=..., seed=...,
  stop_token_ids=..., output_kind=RequestOutputKind.FINAL_ONLY)``: with
  ``FINAL_ONLY`` the single final output carries all ``n`` samples.

``AsyncLLM`` already satisfies ``AsyncEngine``; ``VllmEngine`` only adds
construction and shutdown, so ``RolloutLoop(collector, engine, ...)`` takes
either.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ._engine import RequestOutputLike


def _vllm(module: str = "vllm") -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised where vllm is absent
        raise ImportError("the vLLM binding needs vllm: pip install 'frontier-core[vllm]'") from exc


def vllm_sampling_params(
    *,
    n: int,
    max_tokens: int,
    temperature: float = 1.0,
    seed: int | None = None,
    stop_token_ids: Sequence[int] | None = None,
    **kwargs: Any,
) -> Any:
    """``vllm.SamplingParams`` for one GRPO group per request: ``n``
    samples, delivered together in one final output (``FINAL_ONLY``)."""
    sampling = _vllm("vllm.sampling_params")
    return sampling.SamplingParams(
        n=n,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        stop_token_ids=list(stop_token_ids) if stop_token_ids is not None else None,
        output_kind=sampling.RequestOutputKind.FINAL_ONLY,
        **kwargs,
    )


class VllmEngine:
    """An ``AsyncEngine`` over a vLLM ``AsyncLLM`` (``llm``)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    @property
    def fatal_errors(self) -> tuple[type[BaseException], ...]:
        """``EngineDeadError``: the engine core died. The rollout loop stops
        on it instead of failing (and eventually dropping) every prompt that
        was in flight; the restart regenerates them."""
        try:
            exceptions = importlib.import_module("vllm.v1.engine.exceptions")
        except ImportError:
            return ()
        dead: type[BaseException] = exceptions.EngineDeadError
        return (dead,)

    @classmethod
    def from_engine_args(cls, **engine_args: Any) -> VllmEngine:
        """``AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))``,
        e.g. ``VllmEngine.from_engine_args(model="Qwen/Qwen2.5-0.5B", seed=0)``."""
        arg_utils = _vllm("vllm.engine.arg_utils")
        async_llm = _vllm("vllm.v1.engine.async_llm")
        return cls(async_llm.AsyncLLM.from_engine_args(arg_utils.AsyncEngineArgs(**engine_args)))

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutputLike]:
        gen: AsyncIterator[RequestOutputLike] = self.llm.generate(
            prompt, sampling_params, request_id
        )
        return gen

    async def abort(self, request_id: str) -> None:
        await self.llm.abort(request_id)

    def shutdown(self) -> None:
        self.llm.shutdown()
