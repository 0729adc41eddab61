"""Which distribution's log-probs vLLM journals as the behaviour policy.

The journal stores, per token, the log-prob vLLM reported for it; an
importance weight built on it is right only if that is the log-prob of the
distribution the token was sampled from. vLLM's default engine setting
(``logprobs_mode="raw_logprobs"``) reports the raw model's log-softmax,
whatever the temperature; ``logprobs_mode="processed_logprobs"`` reports
the distribution after temperature (and top-k/top-p). Both are checked here
against transformers on the same weights at temperature 0.7, where the two
differ, through ``RolloutLoop`` with ``vllm_sibling_params``.

Its own module: the processed-log-prob engine is a second engine start, and
it must not run beside ``test_vllm_samples.py``'s (one engine at a time on
this machine). Runs where ``test_vllm.py`` runs (``.venv-vllm``,
FRONTIER_REQUIRE_VLLM=1). Loopback only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ._vllm_support import require_vllm, tiny_engine

require_vllm()

import torch  # noqa: E402
from frontier_adapters.examples import tiny_llm  # noqa: E402
from frontier_adapters.rollout import RolloutLoop, VllmEngine, vllm_sibling_params  # noqa: E402

from ._sample_support import Sink, prompt_of  # noqa: E402
from .test_vllm_samples import PROMPTS, SEED, collector  # noqa: E402

TEMPERATURE = 0.7
#: vLLM (float32 on CPU) against transformers (float32): about 1e-5 measured.
TOL = 1e-3
GROUPS = 3


@pytest.fixture(scope="module")
def hf_model() -> Any:
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        tiny_llm.tiny_llm(), dtype=torch.float32
    )


def reference(model: Any, prompt: list[int], sample: list[int]) -> tuple[list[float], list[float]]:
    """transformers' log-prob of each sample token given everything before
    it: of the raw distribution, and of the distribution at ``TEMPERATURE``."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sample])).logits[0].float()
    rows = [len(prompt) - 1 + i for i in range(len(sample))]
    raw = torch.log_softmax(logits, -1)
    tempered = torch.log_softmax(logits / TEMPERATURE, -1)
    return (
        [float(raw[r, t]) for r, t in zip(rows, sample, strict=True)],
        [float(tempered[r, t]) for r, t in zip(rows, sample, strict=True)],
    )


def generate(engine: VllmEngine) -> Sink:
    sink, c = Sink(), collector(GROUPS)
    params = vllm_sibling_params(max_tokens=12, temperature=TEMPERATURE, seed=SEED)

    async def main() -> None:
        async with RolloutLoop(
            c, engine, sink, schedule="sibling", prompt_of=prompt_of, sampling_params=params,
            max_in_flight=9, timeout=120, version=lambda: 0,
        ) as rollout:  # fmt: skip
            await rollout.until(lambda: len(sink) == GROUPS)

    asyncio.run(main())
    return sink


def worst_gaps(sink: Sink, model: Any) -> tuple[float, float, int]:
    """The largest |reported - reference| against the raw and the tempered
    reference, and the number of tokens compared."""
    to_raw = to_tempered = 0.0
    tokens = 0
    for o, group in sink.groups.items():
        for sample in group.samples:
            toks, lps = list(sample.tokens()), list(sample.logprobs())
            assert toks and len(lps) == len(toks)
            raw, tempered = reference(model, PROMPTS[o], toks)
            to_raw = max(to_raw, *(abs(a - b) for a, b in zip(lps, raw, strict=True)))
            to_tempered = max(
                to_tempered, *(abs(a - b) for a, b in zip(lps, tempered, strict=True))
            )
            tokens += len(toks)
    return to_raw, to_tempered, tokens


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_the_journaled_logprobs_are_of_the_distribution_the_engine_mode_names(
    mode: str, hf_model: Any
) -> None:
    with tiny_engine(logprobs_mode=mode) as engine:
        sink = generate(engine)
    to_raw, to_tempered, tokens = worst_gaps(sink, hf_model)
    print(f"{mode}: {tokens} tokens, |vLLM - raw| <= {to_raw:.2e}, |vLLM - T| <= {to_tempered:.2e}")
    # The two references differ by far more than the tolerance on these
    # samples, so each mode matches one and only one of them.
    if mode == "raw_logprobs":
        assert to_raw < TOL < to_tempered
    else:
        assert to_tempered < TOL < to_raw
