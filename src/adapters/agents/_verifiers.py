"""The verifiers 0.4.0 binding (``verifiers.v1``): a user's unchanged
``vf.Task`` run as a durable episode of a ``Run``, its model served by
``serve_policy``, continued at its last durable turn after a crash.

verifiers runs an episode as a harness program (a subprocess) that calls
the model over HTTP and the Task's tools over MCP; nothing of it is
imported here at module level, so the rest of ``frontier_adapters.agents``
works without the ``agents`` extra. Tested against verifiers 0.4.0 only
(the v1 API; 0.3's ``MultiTurnEnv`` is not supported).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import attrs

from frontier_core import Lease
from frontier_core.journal import SiblingState

from ..run import Run
from ._episode import EpisodeOutcome, _sample
from ._policy import Decoding, PolicyServer, conversation

#: Seconds one rollout may take (a rollout is ~25-40 s on 2 shared cores).
ROLLOUT_TIMEOUT = 600.0


class VerifiersEpisodeError(RuntimeError):
    """A verifiers rollout failed (its trace is not ``ok``): the episode
    is not sealed; its durable turns stay for the next attempt."""


def continue_task(
    task: Any,
    episode: SiblingState | None,
    decoding: Decoding,
    *,
    restore: Callable[[Any, SiblingState], None] | None = None,
) -> Any:
    """``task`` (a ``vf.Task``) continued at the last durable turn of
    ``episode`` (``Run.episode``): a copy whose prompt is the original
    prompt followed by every answered turn (the assistant message with its
    call, then the tool's answer), and whose ``setup`` runs the task's own,
    then ``restore(trace, episode)`` (put the tool state the task keeps in
    ``trace.state`` back). A call left pending is not in the prompt: the
    endpoint replays that turn from the journal, so the harness calls the
    tool again under the same key. ``task`` itself if nothing is answered."""
    if episode is None or not episode.turns:
        return task
    prefix = conversation(decoding, episode.turns)
    if not prefix:
        return task
    import verifiers.v1 as vf  # type: ignore[import-not-found]
    from pydantic import TypeAdapter  # type: ignore[import-not-found]

    original = task.data.prompt
    if isinstance(original, str):
        head: list[Any] = [{"role": "user", "content": original}]
    else:
        head = [m.model_dump(exclude_none=True) for m in original or []]
    messages = TypeAdapter(vf.Messages).validate_python(head + [_flat(m) for m in prefix])
    clone = task.with_data(prompt=messages)
    if restore is not None:
        own = task.setup
        # verifiers passes a hook the arguments it names (``invoke``).
        names = inspect.signature(own).parameters

        async def setup(trace: Any, runtime: Any) -> None:
            given = {"trace": trace, "runtime": runtime}
            await own(**{k: v for k, v in given.items() if k in names})
            restore(trace, episode)

        clone.setup = setup
    return clone


async def run_task(
    run: Run,
    policy: PolicyServer,
    lease: Lease,
    prompt: list[int],
    task: Any,
    config: Any,
    *,
    restore: Callable[[Any, SiblingState], None] | None = None,
    timeout: float = ROLLOUT_TIMEOUT,
) -> EpisodeOutcome:
    """Run ``lease``'s episode of the verifiers ``task`` to its seal: its
    model is ``policy`` (``prompt``: the prompt's token ids for the
    engine), ``config`` the user's ``vf.AgentConfig`` (its client's
    ``base_url`` is replaced by the episode's endpoint; set
    ``runtime=vf.SubprocessConfig()`` and the client's ``api_key_var``).
    An episode an earlier life began continues at its last durable turn
    (``continue_task``). The sealed sample is every turn's tokens with
    the trace's reward. Raises ``VerifiersEpisodeError`` if the rollout
    fails or takes over ``timeout`` seconds (nothing sealed)."""
    import verifiers.v1 as vf

    before = run.episode(lease)
    durable = 0 if before is None else len(before.turns)
    base_url = policy.episode(lease, prompt)
    traffic = policy.traffic[lease]
    generated = traffic.generated
    client = config.client.model_copy(update={"base_url": base_url})
    config = config.model_copy(update={"client": client})
    continued = continue_task(task, before, policy.decoding, restore=restore)
    try:
        async with vf.Agent(config) as agent:
            trace = await asyncio.wait_for(agent.run(continued), timeout)
    except TimeoutError:
        raise VerifiersEpisodeError(f"the rollout of {lease} took over {timeout} s") from None
    if not trace.ok:
        errors = "; ".join(str(getattr(e, "message", e))[:200] for e in trace.errors)
        raise VerifiersEpisodeError(f"the rollout of {lease} failed: {errors}")
    final = run.episode(lease)
    # A pending call's turn was answered from the journal (retried under
    # its key), not reused as an answered turn nor generated again.
    retried = int(before is not None and before.pending is not None)
    out = EpisodeOutcome(
        lease,
        None,
        generated=traffic.generated - generated,
        reused=durable - retried,
        retried=retried,
    )
    if final is None:  # fenced: a newer attempt owns the sibling
        return out
    calls = sum(t.call is not None for t in final.turns[durable:])
    tokens = sum(len(t.tokens) for t in final.turns[durable:])
    effect = run.seal(lease, _sample(final, float(trace.reward)))
    return attrs.evolve(out, effect=effect, calls=calls, tokens=tokens, episode=final)


def _flat(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as verifiers' ``Messages`` holds it (a tool
    call is flat: ``id, type, name, arguments``)."""
    if "tool_calls" not in message:
        return message
    calls = [{"id": c["id"], "type": "function", **c["function"]} for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}
