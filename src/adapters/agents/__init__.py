"""frontier_adapters.agents: agentic rollouts that survive a crash at the turn.

An *episode* is a multi-turn rollout of one sibling: the policy speaks (a
turn's tokens), the tool call its words make is executed by a tool or an
environment, its answer joins the conversation, and the policy speaks
again, until it makes no call. The run's journal records each turn and
each answer (``frontier_core.journal.Turn``, ``Answer``) through the run
(``Run.turn``, ``Run.answer``), the call's intent durable before the tool
runs; after a crash a resumed life continues every unfinished episode at
its last durable turn (``drive``): the conversation so far goes back to the
engine as the prompt of the next turn, answers already received are not
asked for again, and a call left *pending* (its intent durable, its answer
not) is handled by the ``Pending`` policy.

Every call carries an idempotency key (``Run.call_key``): a tool honours the
contract of docs/agents.md (execute a key at most once, answer a repeated
key with the recorded answer), and side effects happen at most once per
key across any crash. ``drive`` runs over the ``AsyncEngine`` contract of
the rollout binding (vLLM's ``AsyncLLM``, the CPU engine); an
``Environment`` turns the policy's tokens into calls and answers into
tokens.

An environment library that calls its model over HTTP runs through
``serve_policy``: an OpenAI-compatible chat-completions endpoint on
127.0.0.1 over the engine that journals each turn before it answers and
answers a journaled turn from the journal. ``run_task`` runs a verifiers
0.4.0 ``Task`` (the ``agents`` extra) as a durable episode over it and
``continue_task`` continues one at its last durable turn.
"""

from ._episode import Environment as Environment
from ._episode import EpisodeOutcome as EpisodeOutcome
from ._episode import Pending as Pending
from ._episode import drive as drive
from ._policy import Decoding as Decoding
from ._policy import EpisodeTraffic as EpisodeTraffic
from ._policy import PolicyEndpointError as PolicyEndpointError
from ._policy import PolicyServer as PolicyServer
from ._policy import TinyDecoding as TinyDecoding
from ._policy import conversation as conversation
from ._policy import serve_policy as serve_policy
from ._verifiers import VerifiersEpisodeError as VerifiersEpisodeError
from ._verifiers import continue_task as continue_task
from ._verifiers import run_task as run_task

__all__ = [
    "Decoding",
    "Environment",
    "EpisodeOutcome",
    "EpisodeTraffic",
    "Pending",
    "PolicyEndpointError",
    "PolicyServer",
    "TinyDecoding",
    "VerifiersEpisodeError",
    "conversation",
    "continue_task",
    "drive",
    "run_task",
    "serve_policy",
]
