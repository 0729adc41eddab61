"""The episode driver: one sibling's multi-turn episode over an engine,
journaled turn by turn through a ``Run``, continued at its last durable
turn after a crash.

Order of one turn, which the invariants rely on (proofs/JOURNAL.md,
TURN-CONTINUATION-EXACT, TOOL-AT-MOST-ONCE, FENCED-ANSWER-NEVER-TRAINED):

1. the engine generates the turn from the conversation so far (the prompt,
   then each earlier turn's tokens and its answer's tokens);
2. ``Run.turn`` journals the tokens and the call, durable before it
   returns (write-ahead): a crash from here on finds the call pending;
3. the tool is called with the call's key;
4. ``Run.answer`` journals its answer (durable at the next group commit:
   a crash before finds the call pending again, and the tool replays);
5. no call: the episode ends (nothing may follow that turn), sealed with
   every turn's tokens; the seal keeps the turns (the transcript a
   trainer masks). A continuation that finds that last turn durable seals
   at once.

A fenced lease (``Run.turn`` or ``Run.answer`` returns ``False``: the
attempt is stale, a newer one owns the sibling) stops at once: nothing of
it is journaled after, so nothing of it is trained.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from frontier_core import Effect, Lease
from frontier_core.journal import JsonPayload, SiblingState, TokenPayload, ToolCall

from ..rollout import AsyncEngine
from ..rollout._engine import token_logprobs
from ..run import Run


class Pending(enum.Enum):
    """What a continued episode does with a call a crash left pending (its
    intent durable, no durable answer: it may or may not have run).

    ``RETRY`` (the default): call again under the same key; a tool that
    honours the idempotency contract executed it at most once and answers
    from its record. ``RESTART``: the sample starts from scratch under its
    new attempt (earlier calls keep their effects; the new calls have new
    keys). ``DROP``: the sample fails on record (``Run.fail``: the ledger's
    failure policy restarts it or fails its group)."""

    RETRY = "retry"
    RESTART = "restart"
    DROP = "drop"


class Environment(Protocol):
    """A tool or environment, as the driver sees it."""

    def act(self, turn: int, tokens: Sequence[int]) -> tuple[str, Any] | None:
        """The call the policy's ``tokens`` at ``turn`` make: ``(tool name,
        JSON args)``, or ``None``: the episode ends."""
        ...

    async def call(self, name: str, args: Any, key: str) -> tuple[Any, Any]:
        """Execute the call under its idempotency ``key`` (at most once per
        key; a repeated key gets the recorded answer): ``(answer, state)``,
        JSON values (``state``: the environment's state after it, or a
        reference to a snapshot, or ``None``)."""
        ...

    def observe(self, answer: Any) -> Sequence[int]:
        """The tokens ``answer`` adds to the conversation."""
        ...

    def reward(self, episode: SiblingState) -> float:
        """The finished episode's reward."""
        ...


@attrs.frozen
class EpisodeOutcome:
    """What ``drive`` did for one lease: the ``effect`` of its seal or
    failure (``None``: the lease was fenced, nothing more of it
    journaled); the turns it ``generated`` and the turns it ``reused``
    from the journal; the calls it made, and of them those ``retried``
    under a pending key; the policy ``tokens`` it generated; and whether a
    pending call ``restarted`` or ``dropped`` the sample; ``episode``, the
    turns sealed (each with its call, answer and state: the transcript a
    trainer masks and scores), ``None`` if not sealed."""

    lease: Lease
    effect: Effect | None
    generated: int = 0
    reused: int = 0
    calls: int = 0
    retried: int = 0
    tokens: int = 0
    restarted: bool = False
    dropped: bool = False
    episode: SiblingState | None = None


async def drive(
    run: Run,
    engine: AsyncEngine,
    lease: Lease,
    prompt: Sequence[int],
    env: Environment,
    *,
    params: Any,
    max_turns: int,
    version: int = 0,
    pending: Pending = Pending.RETRY,
) -> EpisodeOutcome:
    """Run ``lease``'s episode to its seal, continuing it at its last
    durable turn if an earlier life journaled some (``Run.episode``).

    ``prompt`` is the prompt's token ids, ``params`` the engine's sampling
    parameters for one turn (one sample: ``n = 1``), ``version`` the policy
    version of the weights generating (the turns' tokens carry it),
    ``max_turns`` the most turns (the last one makes no call whatever the
    tokens say). ``pending`` is the policy for a call a crash left pending.
    A dropped sample's ``effect`` is ``Run.fail``'s: drive the leases it
    restarts (``effect.leases``) like any other."""
    if type(max_turns) is not int or max_turns < 1:
        raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r:.40}")
    episode = run.episode(lease)
    turns = () if episode is None else episode.turns
    out = EpisodeOutcome(lease, None, reused=len(turns))
    if episode is not None and episode.pending is not None:
        if pending is Pending.DROP:
            return attrs.evolve(out, effect=run.fail(lease), dropped=True)
        if pending is Pending.RESTART:
            turns = ()
            out = attrs.evolve(out, reused=0, restarted=True)
        else:
            again = episode.pending
            answer, state = await env.call(again.name, again.args.value(), again.key)
            if not run.answer(lease, len(turns) - 1, again.key, *_payloads(answer, state)):
                return out
            out = attrs.evolve(out, retried=1, reused=len(turns) - 1)
            got = run.episode(lease)
            assert got is not None
            turns = got.turns
    if turns and turns[-1].call is None:
        # The episode's last turn is durable (a crash came before its
        # seal): nothing follows it, it is sealed as it stands. Journaled
        # again under this attempt first (the same tokens), so the seal is
        # of the attempt that holds the turns and keeps them as its
        # transcript (a seal of a newer attempt would drop them).
        if not run.turn(lease, len(turns) - 1, turns[-1].tokens):
            return out
        return await _seal(run, lease, env, out)
    conversation = list(prompt)
    for t in turns:
        conversation += t.tokens.tokens()
        if t.answer is not None:
            conversation += env.observe(_value(t.answer))
    for index in range(len(turns), max_turns):
        ids, logprobs = await _generate(engine, conversation, params, f"{lease}-{index}")
        tokens = TokenPayload.of(ids, logprobs, version)
        out = attrs.evolve(out, generated=out.generated + 1, tokens=out.tokens + len(ids))
        action = env.act(index, ids) if index < max_turns - 1 else None
        call: ToolCall | None = None
        if action is not None:
            call = ToolCall(action[0], JsonPayload.of(action[1]), run.call_key(lease, index))
        if not run.turn(lease, index, tokens, call):
            return out
        if call is None:
            break
        # The tool and the conversation get the values as journaled (the
        # JSON round-trip), the same a continuation reads back.
        answer, state = await env.call(call.name, call.args.value(), call.key)
        out = attrs.evolve(out, calls=out.calls + 1)
        answered, after = _payloads(answer, state)
        if not run.answer(lease, index, call.key, answered, after):
            return out
        conversation += ids
        conversation += env.observe(answered.value())
    return await _seal(run, lease, env, out)


async def _seal(run: Run, lease: Lease, env: Environment, out: EpisodeOutcome) -> EpisodeOutcome:
    """Seal ``lease``'s finished episode (its durable turns) with its reward."""
    final = run.episode(lease)
    assert final is not None
    sample = _sample(final, env.reward(final))
    return attrs.evolve(out, effect=run.seal(lease, sample), episode=final)


def _payloads(answer: Any, state: Any) -> tuple[JsonPayload, JsonPayload | None]:
    return JsonPayload.of(answer), None if state is None else JsonPayload.of(state)


def _value(payload: Any) -> Any:
    return payload.value() if isinstance(payload, JsonPayload) else payload


def _sample(episode: SiblingState, reward: float) -> TokenPayload:
    """The trained sample: every turn's tokens, in order, with the reward."""
    joined = TokenPayload(b"", b"", ())
    for t in episode.turns:
        joined = joined.followed_by(t.tokens)
    return TokenPayload(joined.token_data, joined.logprob_data, joined.version_runs, reward)


async def _generate(
    engine: AsyncEngine, conversation: list[int], params: Any, request_id: str
) -> tuple[list[int], list[float]]:
    """One turn: the engine's final output for the conversation so far."""
    final = None
    async for output in engine.generate({"prompt_token_ids": conversation}, params, request_id):
        final = output
    if final is None or not final.outputs:
        raise RuntimeError(f"the engine gave no output for {request_id}")
    completion = final.outputs[0]
    ids = [int(t) for t in completion.token_ids]
    logprobs = token_logprobs(completion, ids)
    return ids, [0.0] * len(ids) if logprobs is None else logprobs
