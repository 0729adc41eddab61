"""``serve_policy`` over the CPU engine, called as verifiers' client calls
it (HTTP on 127.0.0.1, ``stream: true``): each turn journaled before its
reply, its call's id the key ``Run.call_key`` gives; a repeated request
answered from the journal with nothing generated; the tool's answer
journaled from the next request; bad requests refused with an HTTP error
and nothing journaled."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")  # the CPU engine

from frontier_adapters import Run, SequenceSource
from frontier_adapters.agents import TinyDecoding, conversation, serve_policy
from frontier_adapters.examples.cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM

from frontier_core import LedgerConfig
from frontier_core.journal import JsonPayload

CONFIG = LedgerConfig(stream_len=1, samples=1, fingerprint="policy-test")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {
                    "k": {"type": "string"},
                    "v": {"type": "integer"},
                    "call_key": {"type": "string"},
                },
                "required": ["k", "v", "call_key"],
            },
        },
    }
]
USER = {"role": "user", "content": "add"}


def _post(url: str, body: Any) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url + "/chat/completions", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _message(raw: bytes) -> dict[str, Any]:
    """The assistant message of an SSE reply (one delta holds it whole)."""
    events = [x[6:] for x in raw.decode().split("\n\n") if x.startswith("data: ")]
    assert events[-1] == "[DONE]"
    message: dict[str, Any] = json.loads(events[0])["choices"][0]["delta"]
    for call in message.get("tool_calls", []):
        call.pop("index")
    return message


async def _scenario(run: Run) -> None:
    engine = CpuEngine(TinyCausalLM(vocab=16, max_len=64, seed=3))
    (group,) = run.take(1)
    (lease,) = group.leases
    async with serve_policy(
        run,
        engine,
        params=CpuSamplingParams(max_tokens=3),
        decoding=TinyDecoding(),
        max_turns=2,
        version=7,
    ) as policy:
        url = policy.episode(lease, [2, 3])
        body = {"model": "tiny", "stream": True, "messages": [USER], "tools": TOOLS}
        status, raw = await asyncio.to_thread(_post, url, body)
        assert status == 200
        first = _message(raw)
        episode = run.episode(lease)
        assert episode is not None and len(episode.turns) == 1  # journaled before the reply
        tokens = episode.turns[0].tokens
        assert len(tokens) > 0 and tokens.version_runs == ((0, 7),)  # the policy version
        assert all(lp < 0 for lp in tokens.logprobs())  # the engine's own log-probs
        (call,) = first["tool_calls"]
        key = run.call_key(lease, 0)
        assert call["id"] == key == episode.turns[0].call.key  # type: ignore[union-attr]
        assert json.loads(call["function"]["arguments"])["call_key"] == key
        # The same request again (a harness restarted): the journal answers.
        status, again = await asyncio.to_thread(_post, url, body)
        assert status == 200 and _message(again) == first
        assert policy.traffic[lease].generated == 1 and policy.traffic[lease].replayed == 1
        # Bad requests: refused, nothing journaled.
        ahead = {**body, "messages": [USER, first, first]}
        for bad, code in (
            (ahead, 409),
            (b"{not json", 400),
            ({**body, "messages": [USER, first]}, 400),  # no answer to the call
        ):
            status, _ = await asyncio.to_thread(_post, url, bad)
            assert status == code
        status, _ = await asyncio.to_thread(_post, url.replace("/e/", "/e/9"), body)
        assert status == 404
        after = run.episode(lease)
        assert after is not None and after.turns == episode.turns
        # The tool's answer comes with the next turn's request: journaled first.
        tool = {"role": "tool", "tool_call_id": key, "content": "7"}
        status, raw = await asyncio.to_thread(_post, url, {**body, "messages": [USER, first, tool]})
        assert status == 200
        last = _message(raw)
        assert "tool_calls" not in last  # max_turns=2: the last turn makes no call
        done = run.episode(lease)
        assert done is not None and len(done.turns) == 2
        assert done.turns[0].answer == JsonPayload.of("7")
        assert conversation(policy.decoding, done.turns) == [first, tool]


def test_turns_are_journaled_before_the_reply_and_replayed_from_the_journal(
    tmp_path: Path,
) -> None:
    with Run.open(tmp_path, SequenceSource([[2, 3]]), CONFIG) as run:
        asyncio.run(_scenario(run))
