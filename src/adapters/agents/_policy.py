"""The policy behind an OpenAI-compatible chat-completions endpoint on
127.0.0.1, journaling every turn through a ``Run`` before it answers: how
an environment library that calls its model over HTTP (verifiers' harness
program) runs durable episodes with its API unchanged.

One URL per episode (``PolicyServer.episode(lease, prompt)`` gives its
``base_url``): a request's turn is the number of assistant messages it
holds (a continued episode's prefix counts, so the numbering survives a
resume). For turn ``t`` of ``lease``:

1. if turn ``t - 1`` made a call and its answer is not journaled, the
   request's tool message for that call (``tool_call_id`` = the key) is
   journaled first (``Run.answer``);
2. a turn already journaled (a repeated request after a crash, or the
   pending turn of a continued episode) is answered from the journal: same
   text, same call, same key, nothing generated;
3. otherwise the engine generates the turn from the durable conversation
   (prompt, then each turn's tokens and its answer's tokens, as ``drive``
   builds it), the ``Decoding`` reads a call from the tokens, and
   ``Run.turn`` journals tokens, log-probs, policy version and call,
   durable before the reply is sent.

The call's idempotency key (``Run.call_key``) is its ``tool_call_id``,
and is also put into the call's arguments under ``call_key`` when the tool
declares that parameter: verifiers 0.4.0 hands a ``@vf.tool`` function its
arguments only, not the call id, so a tool that must execute at most once
(docs/agents.md, the idempotency contract) declares ``call_key: str``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from frontier_core import Lease
from frontier_core.journal import JournalError, JsonPayload, TokenPayload, ToolCall, TurnState

from ..rollout import AsyncEngine
from ..run import Run
from ._episode import _generate

#: Seconds a client may take to send one request (a stalled client is cut off).
READ_TIMEOUT = 30.0
#: The largest request body accepted (a conversation's JSON).
MAX_BODY = 8 << 20
_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
#: The argument a tool declares to receive its call's idempotency key.
KEY_ARG = "call_key"


class PolicyEndpointError(RuntimeError):
    """The policy endpoint did not start or stop within its deadline."""


class Decoding(Protocol):
    """How the served policy's tokens become chat messages (text and tool
    calls) and a tool's answer becomes tokens: the chat template and tool
    parser of a real model; a deterministic map for a test policy."""

    def act(
        self, turn: int, tokens: Sequence[int], tools: Sequence[Mapping[str, Any]]
    ) -> tuple[str, dict[str, Any]] | None:
        """The call ``tokens`` make at ``turn`` among ``tools`` (the
        request's OpenAI tool schemas): ``(name, JSON args)``, or ``None``."""
        ...

    def text(self, tokens: Sequence[int]) -> str:
        """The turn's text (the assistant message's content)."""
        ...

    def observe(self, answer: Any) -> Sequence[int]:
        """The tokens a tool's ``answer`` (its message content) adds."""
        ...


@attrs.frozen
class TinyDecoding:
    """The test policy's decoding for the CPU engine's random-weights model,
    which cannot write tool-call JSON: a turn's first token picks the tool
    (``tokens[0] % len(tools)``) and fills each required argument from the
    tokens (an integer: ``1 + tokens[-1] % 3``; a string:
    ``"cell" + str(tokens[0] % 4)``); the text is the token ids; an answer
    is one token. Deterministic: a replayed turn decodes the same call.
    The tokens and log-probs journaled are the engine's own."""

    vocab: int = 16

    def act(
        self, turn: int, tokens: Sequence[int], tools: Sequence[Mapping[str, Any]]
    ) -> tuple[str, dict[str, Any]] | None:
        if not tokens or not tools:
            return None
        function = tools[tokens[0] % len(tools)].get("function", {})
        schema = function.get("parameters") or {}
        args: dict[str, Any] = {}
        for name in schema.get("required", []):
            if name == KEY_ARG:
                continue
            kind = (schema.get("properties", {}).get(name) or {}).get("type")
            args[name] = 1 + tokens[-1] % 3 if kind == "integer" else f"cell{tokens[0] % 4}"
        return str(function.get("name", "")), args

    def text(self, tokens: Sequence[int]) -> str:
        return " ".join(str(t) for t in tokens)

    def observe(self, answer: Any) -> Sequence[int]:
        return [2 + sum(str(answer).encode()) % (self.vocab - 2)]


@attrs.define
class EpisodeTraffic:
    """What the endpoint did for one episode: turns ``generated`` by the
    engine and turns ``replayed`` from the journal."""

    generated: int = 0
    replayed: int = 0


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class PolicyServer:
    """An OpenAI-compatible ``/v1/chat/completions`` (streaming and not)
    on 127.0.0.1 over ``engine``, journaling through ``run`` (see the
    module doc). Use as ``async with serve_policy(...) as policy``."""

    def __init__(
        self,
        run: Run,
        engine: AsyncEngine,
        *,
        params: Any,
        decoding: Decoding,
        max_turns: int,
        version: int = 0,
    ) -> None:
        if type(max_turns) is not int or max_turns < 1:
            raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r:.40}")
        self.run = run
        self.engine = engine
        self.params = params
        self.decoding = decoding
        self.max_turns = max_turns
        self.version = version
        self.port = 0
        self._server: asyncio.Server | None = None
        self._episodes: dict[str, tuple[Lease, list[int]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.traffic: dict[Lease, EpisodeTraffic] = {}

    async def __aenter__(self) -> PolicyServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            try:
                await asyncio.wait_for(self._server.wait_closed(), READ_TIMEOUT)
            except TimeoutError:
                raise PolicyEndpointError(
                    f"the policy endpoint did not close within {READ_TIMEOUT} s"
                ) from None

    def episode(self, lease: Lease, prompt: Sequence[int]) -> str:
        """Serve ``lease``'s episode, whose prompt is the token ids
        ``prompt``: the ``base_url`` (ending in ``/v1``) its harness calls."""
        token = f"{lease.ordinal}.{lease.sibling}.{lease.attempt}"
        self._episodes[token] = (lease, [int(t) for t in prompt])
        self._locks.setdefault(token, asyncio.Lock())
        self.traffic.setdefault(lease, EpisodeTraffic())
        return f"http://127.0.0.1:{self.port}/e/{token}/v1"

    # -- HTTP ------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                path, body = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT)
                parts = path.strip("/").split("/")
                if len(parts) == 4 and parts[0] == "e" and parts[2:] == ["v1", "models"]:
                    await _send_json(writer, 200, {"object": "list", "data": []})
                    return
                chat = ["v1", "chat", "completions"]
                if not (len(parts) == 5 and parts[0] == "e" and parts[2:] == chat):
                    raise _Refused(404, f"no such path {path[:80]!r}")
                if parts[1] not in self._episodes:
                    raise _Refused(404, f"no episode {parts[1][:40]!r} is served")
                request = json.loads(body)
                if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
                    raise _Refused(400, "a chat completion needs a list of messages")
                async with self._locks[parts[1]]:
                    message, finish = await self._turn(parts[1], request)
            except _Refused as exc:
                await _send_json(writer, exc.status, {"error": {"message": str(exc)}})
                return
            except JournalError as exc:  # not this episode's next turn or answer
                await _send_json(writer, 409, {"error": {"message": str(exc)[:200]}})
                return
            except (ValueError, TimeoutError) as exc:
                await _send_json(writer, 400, {"error": {"message": str(exc)[:200]}})
                return
            except Exception as exc:
                # The engine or the run failed: the harness gets an answer
                # (its client retries or fails the rollout, whose trace
                # carries this message), not a hang.
                await _send_json(writer, 500, {"error": {"message": repr(exc)[:200]}})
                return
            if request.get("stream"):
                await _send_stream(writer, request, message, finish)
            else:
                await _send_json(writer, 200, _completion(request, message, finish))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        finally:
            writer.close()

    # -- one turn --------------------------------------------------------------

    async def _turn(self, token: str, request: dict[str, Any]) -> tuple[dict[str, Any], str]:
        lease, prompt = self._episodes[token]
        messages: list[Any] = request["messages"]
        tools = [t for t in request.get("tools") or [] if isinstance(t, dict)]
        turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        turns = self._turns(lease)
        if turn > len(turns):
            raise _Refused(409, f"turn {turn} asked, {len(turns)} journaled: not this episode's")
        if turn > 0 and turns[turn - 1].pending:
            call = turns[turn - 1].call
            assert call is not None
            answer = _tool_answer(messages, call.key)
            if not self.run.answer(lease, turn - 1, call.key, JsonPayload.of(answer)):
                raise _Refused(409, f"{lease} is fenced: a newer attempt owns it")
            turns = self._turns(lease)
        traffic = self.traffic[lease]
        if turn < len(turns):
            traffic.replayed += 1
            return _message(self.decoding, turns[turn]), _finish(turns[turn])
        conversation = list(prompt)
        for t in turns:
            conversation += t.tokens.tokens()
            if t.answer is not None:
                conversation += self.decoding.observe(_value(t.answer))
        # The request id drive uses: a turn is generated at most once per
        # attempt (the lock; a journaled turn is replayed), so it is unique,
        # and a seeded engine samples the same turn for the same episode.
        ids, logprobs = await _generate(self.engine, conversation, self.params, f"{lease}-{turn}")
        action = self.decoding.act(turn, ids, tools) if turn < self.max_turns - 1 else None
        call = None
        if action is not None:
            key = self.run.call_key(lease, turn)
            name, args = action
            if any(_declares_key(t, name) for t in tools):
                args = {**args, KEY_ARG: key}
            call = ToolCall(name, JsonPayload.of(args), key)
        state = TurnState(TokenPayload.of(ids, logprobs, self.version), call)
        if not self.run.turn(lease, turn, state.tokens, call):
            raise _Refused(409, f"{lease} is fenced: a newer attempt owns it")
        traffic.generated += 1
        return _message(self.decoding, state), _finish(state)

    def _turns(self, lease: Lease) -> tuple[TurnState, ...]:
        episode = self.run.episode(lease)
        return () if episode is None else episode.turns


def serve_policy(
    run: Run,
    engine: AsyncEngine,
    *,
    params: Any,
    decoding: Decoding,
    max_turns: int,
    version: int = 0,
) -> PolicyServer:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 over
    ``engine`` (the ``AsyncEngine`` contract: vLLM's ``AsyncLLM``, the CPU
    engine), journaling each turn through ``run`` before it answers;
    ``params`` are one turn's sampling parameters (``n = 1``), ``version``
    the policy version of the weights, ``max_turns`` the most turns of an
    episode (the last makes no call). Start it with ``async with``, then
    give each episode's harness ``policy.episode(lease, prompt)`` as its
    base URL."""
    return PolicyServer(
        run, engine, params=params, decoding=decoding, max_turns=max_turns, version=version
    )


def conversation(decoding: Decoding, turns: Sequence[TurnState]) -> list[dict[str, Any]]:
    """The chat messages of the answered ``turns`` of an episode (an
    assistant message with its tool call, then the tool's answer), up to the
    first unanswered one: the prefix a continued episode starts from. The
    messages are the ones the endpoint sent (the call id is the key)."""
    out: list[dict[str, Any]] = []
    for t in turns:
        if t.call is None or t.answer is None:
            break
        out.append(_message(decoding, t))
        out.append(
            {"role": "tool", "tool_call_id": t.call.key, "content": _content(_value(t.answer))}
        )
    return out


def _message(decoding: Decoding, turn: TurnState) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": decoding.text(turn.tokens.tokens())}
    if turn.call is not None:
        message["tool_calls"] = [
            {
                "id": turn.call.key,
                "type": "function",
                "function": {
                    "name": turn.call.name,
                    "arguments": json.dumps(turn.call.args.value(), sort_keys=True),
                },
            }
        ]
    return message


def _finish(turn: TurnState) -> str:
    return "tool_calls" if turn.call is not None else "stop"


def _declares_key(tool: Mapping[str, Any], name: str) -> bool:
    function = tool.get("function") or {}
    properties = (function.get("parameters") or {}).get("properties") or {}
    return bool(function.get("name") == name and KEY_ARG in properties)


def _tool_answer(messages: Sequence[Any], key: str) -> Any:
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id") == key:
            return _content(m.get("content"))
    raise _Refused(400, f"the request holds no answer to the pending call {key[:80]!r}")


def _content(content: Any) -> str:
    """A message's text (OpenAI content parts joined)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _value(payload: Any) -> Any:
    return payload.value() if isinstance(payload, JsonPayload) else payload


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    line = (await reader.readline()).decode("latin-1")
    fields = line.split()
    if len(fields) != 3:
        raise _Refused(400, "not an HTTP request")
    method, path, _ = fields
    length = 0
    while True:
        header = (await reader.readline()).decode("latin-1")
        if header in ("\r\n", "\n", ""):
            break
        name, _, value = header.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if not 0 <= length <= MAX_BODY:
        raise _Refused(413, f"a body of {length} bytes (at most {MAX_BODY})")
    body = await reader.readexactly(length)
    if method == "GET":
        return path, b"{}"
    if method != "POST":
        raise _Refused(405, f"method {method[:10]!r} not allowed")
    return path, body


async def _send_json(writer: asyncio.StreamWriter, status: int, body: Any) -> None:
    data = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + data)
    await asyncio.wait_for(writer.drain(), READ_TIMEOUT)


def _completion(request: Mapping[str, Any], message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-frontier",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.get("model", "policy")),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _USAGE,
    }


async def _send_stream(
    writer: asyncio.StreamWriter, request: Mapping[str, Any], message: dict[str, Any], finish: str
) -> None:
    """The reply as server-sent events, one delta with the whole message
    (verifiers' client sends ``stream: true`` and refuses a plain reply)."""
    base = {
        "id": "chatcmpl-frontier",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": str(request.get("model", "policy")),
    }
    delta = dict(message)
    if "tool_calls" in delta:
        delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(message["tool_calls"])]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": _USAGE},
    ]
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
    )
    for c in chunks:
        writer.write(f"data: {json.dumps(c)}\n\n".encode())
    writer.write(b"data: [DONE]\n\n")
    await asyncio.wait_for(writer.drain(), READ_TIMEOUT)
