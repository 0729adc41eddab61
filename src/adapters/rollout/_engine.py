"""The engine contract: the part of vLLM's ``AsyncLLM`` a rollout loop uses.

Written against vLLM 0.33 (``vllm/v1/engine/async_llm.py``)::

    async def generate(self, prompt, sampling_params, request_id, *, ...)
        -> AsyncGenerator[RequestOutput, None]
    async def abort(self, request_id: str | Iterable[str], internal: bool = False) -> None

``generate`` is an async generator that yields ``RequestOutput``s until one
has ``finished=True``; cancelling the consuming task or ``aclose()``-ing the
generator aborts the request inside the engine. An ``abort`` from outside
ends a running ``generate`` with a last output whose completions have
``finish_reason == "abort"``. With ``SamplingParams(n=k,
output_kind=RequestOutputKind.FINAL_ONLY)`` the one final output holds all
``k`` completions, told apart by ``CompletionOutput.index``.

``vllm.v1.engine.async_llm.AsyncLLM`` satisfies ``AsyncEngine`` as it is;
``CpuEngine`` (``_cpu_engine``) satisfies it with a tiny torch model. The
output classes here are the CPU engine's; the rollout loop reads only the
attributes the protocols name, so vLLM's own classes pass through it.

This module imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Final, Protocol

import attrs

#: ``CompletionOutput.finish_reason`` values (vLLM's ``FinishReason``).
STOP: Final = "stop"
LENGTH: Final = "length"
ABORT: Final = "abort"
ERROR: Final = "error"
#: Reasons after which a completion is a usable trajectory.
USABLE: Final = frozenset({STOP, LENGTH})


class CompletionLike(Protocol):
    """One sample of a request (vLLM's ``CompletionOutput``)."""

    @property
    def index(self) -> int: ...

    @property
    def token_ids(self) -> Sequence[int]: ...

    @property
    def finish_reason(self) -> str | None: ...


class RequestOutputLike(Protocol):
    """What ``generate`` yields (vLLM's ``RequestOutput``)."""

    @property
    def request_id(self) -> str: ...

    @property
    def outputs(self) -> Sequence[CompletionLike]: ...

    @property
    def finished(self) -> bool: ...


class AsyncEngine(Protocol):
    """The engine a ``RolloutLoop`` drives (vLLM's ``AsyncLLM``)."""

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutputLike]: ...

    async def abort(self, request_id: str) -> None: ...


@attrs.frozen
class Completion:
    """The CPU engine's ``CompletionOutput``."""

    index: int
    token_ids: tuple[int, ...]
    finish_reason: str | None = None


@attrs.frozen
class RequestOutput:
    """The CPU engine's ``RequestOutput``."""

    request_id: str
    outputs: tuple[Completion, ...]
    finished: bool
