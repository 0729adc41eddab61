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

Streaming: with ``output_kind=RequestOutputKind.DELTA`` each output holds
only the samples that produced tokens in that engine step, with only the
new tokens; with ``CUMULATIVE`` each sample's tokens so far. Either way the
samples of one request start and finish staggered, so the final output may
carry only some of the ``k`` samples: a consumer keeps state per
``index`` (``RolloutLoop`` does, and reports the partial tokens through
``on_progress``).

An ``AsyncLLM`` binds to the first event loop that uses it: its output
handler is a task of that loop. From another loop, every request fails with
``EngineDeadError`` once the first loop is closed, or hangs while it is
still open. ``check_event_loop(engine)`` detects that before a request is
sent and raises ``EngineLoopError`` naming the cause; ``RolloutLoop``
calls it when it starts.

``vllm.v1.engine.async_llm.AsyncLLM`` satisfies ``AsyncEngine`` as it is;
``CpuEngine`` (``frontier_adapters.examples.cpu_engine``) satisfies it with a
tiny torch model. The output classes here are the CPU engine's; the rollout
loop reads only the attributes the protocols name, so vLLM's own classes pass
through it.

This module imports nothing heavy.
"""

from __future__ import annotations

import asyncio
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
    """The CPU engine's ``CompletionOutput``. ``logprobs`` holds the
    sampled token's log-prob for each of ``token_ids`` (vLLM's holds, per
    token, a dict from token id to a ``Logprob``; ``token_logprobs`` reads
    both)."""

    index: int
    token_ids: tuple[int, ...]
    finish_reason: str | None = None
    logprobs: tuple[float, ...] | None = None


@attrs.frozen
class RequestOutput:
    """The CPU engine's ``RequestOutput``."""

    request_id: str
    outputs: tuple[Completion, ...]
    finished: bool


def token_logprobs(completion: Any, token_ids: Sequence[int]) -> list[float] | None:
    """The log-prob of each of ``token_ids`` in ``completion.logprobs``
    (aligned with ``completion.token_ids``, whose last ``len(token_ids)``
    they are), or ``None`` when the engine reported none. Accepts plain
    floats (the CPU engine) and vLLM's per-token dicts of ``Logprob``
    (``SamplingParams(logprobs=0)`` asks vLLM for the sampled token's)."""
    entries = getattr(completion, "logprobs", None)
    if entries is None:
        return None
    entries = list(entries)[len(entries) - len(token_ids) :] if token_ids else []
    if len(entries) != len(token_ids):
        raise ValueError(f"{len(entries)} log-probs for {len(token_ids)} tokens")
    out = []
    for tok, entry in zip(token_ids, entries, strict=True):
        if isinstance(entry, float | int):
            out.append(float(entry))
        else:
            chosen = entry[tok]
            out.append(float(getattr(chosen, "logprob", chosen)))
    return out


class EngineLoopError(RuntimeError):
    """The engine is bound to another event loop than the running one.

    vLLM's ``AsyncLLM`` runs its output handler as a task of the first loop
    that used it, for the engine's whole life. From any other loop a request
    fails with ``EngineDeadError`` (the first loop is closed, although the
    engine core is alive) or hangs (it is open but not running). Raised
    before any request is sent; the ledger is untouched."""

    def __init__(self, message: str, *, bound: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(message)
        self.bound = bound


def bound_loop(engine: Any) -> asyncio.AbstractEventLoop | None:
    """The event loop ``engine`` is bound to, if it says: an engine's own
    ``bound_loop`` property, or the loop of an ``AsyncLLM``'s output handler
    task (``None`` until its first request when it was built outside a
    loop)."""
    own = getattr(type(engine), "bound_loop", None)
    if own is not None:
        loop: asyncio.AbstractEventLoop | None = engine.bound_loop
        return loop
    handler = getattr(engine, "output_handler", None)
    if isinstance(handler, asyncio.Future):
        return handler.get_loop()
    return None


def check_event_loop(engine: Any) -> None:
    """Raise ``EngineLoopError`` if ``engine`` is bound to an event loop
    other than the running one (call it from a coroutine)."""
    running = asyncio.get_running_loop()
    bound = bound_loop(engine)
    if bound is None or bound is running:
        return
    if bound.is_closed():
        state = (
            "that loop is closed, so vLLM would fail every request with EngineDeadError "
            "although the engine core is alive"
        )
    elif bound.is_running():
        state = "that loop is running in another thread"
    else:
        state = (
            "that loop is open but not running (another asyncio.Runner?), so every "
            "request would hang"
        )
    raise EngineLoopError(
        f"the engine is bound to another event loop than this one: an AsyncLLM serves "
        f"only the first loop that used it, and {state}. Use one event loop for the "
        f"engine's whole life (one asyncio.run or asyncio.Runner around all its use; "
        f"in tests a module- or session-scoped loop), or build a new engine in this loop",
        bound=bound,
    )
