"""One life of a durable run of verifiers episodes (``python -m
tests.adapters.agents.verifiers_life ROOT REPORT ENGINE``): runs the example
of docs/agents.md as written (its ``episodes``) over the unchanged
``verifiers_env.KvTask``, the run at ROOT, appending one JSON line per sealed
episode to REPORT. ENGINE is the policy:

* ``cpu``: the CPU engine's random-weights model with ``TinyDecoding``;
* ``vllm``: vLLM's ``AsyncLLM`` (``VllmEngine``) over the tiny Llama of
  ``examples.tiny_llm`` (built locally), with the page's ``HermesDecoding``
  over the model's tokenizer given the Hermes chat template ``TEMPLATE``;
  the random weights cannot write a call, so vLLM's structured outputs hold
  every turn to the Hermes format over the Toolset's arguments (``CALLS``).

The life also keeps ROOT/episodes.jsonl, the log ``agent_job.audit`` reads:
the life's durable turns and pending calls at its start, each turn the engine
generated (logged as it is generated: a killed life's turns count), each
episode, and each group trained with its episodes' transcripts."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from frontier_adapters import Run, SequenceSource
from frontier_adapters.verify.agent_job import CountingEngine, append_event, log_life

from frontier_core import LedgerConfig
from frontier_core.journal import JsonPayload

from ..._docs import filename, python_blocks
from .verifiers_env import KvTask, restore

CONFIG = LedgerConfig(stream_len=1, samples=1, fingerprint="verifiers-test")
#: The Task's prompt (KvTask's), and the engine's: its chat rendering.
PROMPT = "Add to cells."
#: A Hermes chat template for the tiny tokenizer (it has none): a turn is
#: ``<|role|>\\n`` and its text; an assistant turn's calls follow its text
#: as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` and it ends
#: with the eos token, which the model generates.
TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}"
    "<|assistant|>\n{{ m['content'] or '' }}"
    "{% for c in m['tool_calls'] or [] %}"
    '<tool_call>{"name": "{{ c["function"]["name"] }}", "arguments": '
    "{% if c['function']['arguments'] is string %}{{ c['function']['arguments'] }}"
    "{% else %}{{ c['function']['arguments'] | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}{{ eos_token }}"
    "{% else %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
#: Every turn a Hermes call of one of KvToolset's tools (``call_key`` is the
#: endpoint's to fill), as vLLM's ``tool_choice="required"`` constrains one.
CALLS = (
    r'<tool_call>(\{"name": "add", "arguments": \{"k": "cell[0-3]", "v": [1-3]\}\}'
    r'|\{"name": "get", "arguments": \{"k": "cell[0-3]"\}\})</tool_call>'
)
#: Most tokens of one turn (a call is ~70 of the tiny tokenizer's).
MAX_TOKENS = 128


def page(name: str) -> Any:
    """The object ``name`` the page's one block that defines it defines,
    compiled from docs/agents.md (public names only)."""
    (block,) = [
        b for b in python_blocks("agents.md") if f"def {name}(" in b or f"class {name}:" in b
    ]
    assert "._" not in block  # public names only
    namespace: dict[str, Any] = {"__name__": "agents_page_verifiers"}
    exec(compile(block, filename("agents.md"), "exec"), namespace)
    return namespace[name]


def chat_tokenizer() -> Any:
    """The tiny Llama's tokenizer with ``TEMPLATE`` as its chat template."""
    from frontier_adapters.examples import tiny_llm
    from transformers import AutoTokenizer

    os.environ.update(tiny_llm.OFFLINE_ENV)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llm.tiny_llm())
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def _policy(engine_kind: str, root: Path) -> tuple[Any, Any, Any, list[list[int]]]:
    """(engine, params, decoding, prompts) of the ``engine_kind`` policy."""
    if engine_kind == "cpu":
        from frontier_adapters.agents import TinyDecoding
        from frontier_adapters.examples.cpu_engine import (
            CpuEngine,
            CpuSamplingParams,
            TinyCausalLM,
        )

        engine = CpuEngine(TinyCausalLM(vocab=16, max_len=64, seed=3))
        return engine, CpuSamplingParams(max_tokens=3), TinyDecoding(), [[2, 3]]
    if engine_kind != "vllm":
        raise SystemExit(f"ENGINE must be cpu or vllm, not {engine_kind!r}")
    from frontier_adapters.examples import tiny_llm
    from frontier_adapters.rollout import vllm_sampling_params
    from vllm.sampling_params import StructuredOutputsParams

    decoding = page("HermesDecoding")(chat_tokenizer())
    params = vllm_sampling_params(
        n=1,
        max_tokens=MAX_TOKENS,
        seed=11,
        logprobs=0,
        structured_outputs=StructuredOutputsParams(regex=CALLS),
    )
    # vLLM's unix sockets: in the test's short directory (a socket path has
    # at most 107 bytes), removed by the test, which outlives a killed life.
    rpc = tempfile.mkdtemp(prefix="rpc-", dir=os.environ.get("FRONTIER_VF_RPC"))
    engine = tiny_llm.tiny_vllm_engine(rpc)
    return engine, params, decoding, [decoding.prompt([{"role": "user", "content": PROMPT}])]


def _transcript(episode: Any) -> list[list[Any]]:
    """``agent_job``'s transcript of an episode: each turn's key and answer,
    the answer the tool's (the message content is its JSON)."""
    out: list[list[Any]] = []
    for t in episode.turns:
        answer = json.loads(t.answer.value()) if isinstance(t.answer, JsonPayload) else None
        out.append([None if t.call is None else t.call.key, answer])
    return out


def main(root: Path, report: Path, engine_kind: str) -> None:
    os.environ.setdefault("FRONTIER_VF_KEY", "sk-loopback")
    episodes = page("episodes")
    root.mkdir(parents=True, exist_ok=True)
    log = root / "episodes.jsonl"
    engine, params, decoding, prompts = _policy(engine_kind, root)
    siblings: dict[int, dict[int, list[Any]]] = {}

    def make_task(lease: Any) -> Any:
        return KvTask(vf.TaskData(id=f"kv-{lease.ordinal}", prompt=PROMPT))

    def done(policy: Any, out: Any) -> None:
        assert out.effect is not None and out.episode is not None
        lease, episode = out.lease, out.episode
        append_event(log, {"event": "episode", "lease": list(lease), "retried": out.retried})
        sealed = lease in out.effect.sealed
        if sealed:
            siblings.setdefault(lease.ordinal, {})[lease.sibling] = [
                lease.attempt,
                _transcript(episode),
            ]
        for ordinal in sorted(out.effect.landed):
            append_event(
                log, {"event": "trained", "ordinal": ordinal, "episodes": siblings.pop(ordinal)}
            )
        line = {
            "lease": str(lease),
            "durable": out.reused + out.retried,
            "generated": out.generated,
            "reused": out.reused,
            "retried": out.retried,
            "turns": len(episode.turns),
            "keys": [t.call.key for t in episode.turns if t.call],
            "calls": [[t.call.name, t.call.args.value()] for t in episode.turns if t.call],
            "tokens": [list(t.tokens.tokens()) for t in episode.turns],
            "logprobs": [list(t.tokens.logprobs()) for t in episode.turns],
            "replayed": policy.traffic[lease].replayed,
            "sealed": sealed,
            "prompt": prompts[lease.ordinal],
        }
        append_event(report, line)

    try:
        with Run.open(root, SequenceSource(prompts), CONFIG) as run:
            log_life(run, log)
            counted = CountingEngine(engine, log)
            asyncio.run(episodes(run, counted, params, decoding, prompts, make_task, restore, done))
    finally:
        if hasattr(engine, "shutdown"):
            engine.shutdown(timeout=1)  # vLLM's default grace is ~5 s of idle wait


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
