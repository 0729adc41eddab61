"""The toy GRPO trainer of the examples: a task, its reward, one update.

``grpo_step`` is one real GRPO update on a ``TinyCausalLM``: each group's
rewards are normalised within the group (``(r - mean) / (std + eps)``; a
group whose samples all scored the same teaches nothing and weighs zero),
the loss is the advantage-weighted negative log-likelihood of the sampled
completion tokens under the current weights (REINFORCE with a group
baseline; no importance ratio or KL term: the trajectories are at most
``max_trajectory_age_steps`` old), and the optimizer takes one step.

The default task is verifiable and learnable by a randomly initialised
model within a couple of minutes on a CPU: each prompt is a few random
content tokens and the reward is 1 when the completion starts by repeating
the prompt's first token, 0 otherwise (1 in 16 by chance at the start).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import attrs
import torch

from .cpu_engine import PAD, TinyCausalLM

FIRST_CONTENT: Final = 2


def make_prompts(count: int, *, vocab: int, length: int = 4, seed: int = 0) -> list[list[int]]:
    """``count`` prompts of ``length`` content tokens (ids ``2..vocab-1``)."""
    rng = random.Random(f"prompts:{seed}")
    return [[rng.randrange(FIRST_CONTENT, vocab) for _ in range(length)] for _ in range(count)]


def reward(prompt: Sequence[int], completion: Sequence[int]) -> float:
    """1.0 when the completion starts with the prompt's first token."""
    return 1.0 if completion and completion[0] == prompt[0] else 0.0


class Scored(Protocol):
    """What ``grpo_step`` reads of a group (``rollout.Group`` is one): the
    prompt's token list and its completions."""

    @property
    def row(self) -> Any: ...

    @property
    def completions(self) -> Sequence[Sequence[int]]: ...


@attrs.frozen
class StepStats:
    """What one GRPO step saw: the mean reward of its samples, the loss,
    and how many completion tokens it scored."""

    mean_reward: float
    loss: float
    tokens: int


def grpo_step(
    model: TinyCausalLM,
    optimizer: torch.optim.Optimizer,
    groups: Sequence[Scored],
    *,
    reward_fn: Callable[[Sequence[int], Sequence[int]], float] = reward,
    eps: float = 1e-4,
    max_grad_norm: float = 1.0,
) -> StepStats:
    """One GRPO update over ``groups`` (each ``row`` a prompt token list)."""
    seqs: list[list[int]] = []
    prompt_lens: list[int] = []
    advantages: list[float] = []
    total_reward = 0.0
    samples = 0
    for g in groups:
        prompt = list(g.row)
        rewards = torch.tensor([reward_fn(prompt, c) for c in g.completions])
        total_reward += float(rewards.sum())
        samples += len(g.completions)
        adv = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + eps)
        for c, a in zip(g.completions, adv.tolist(), strict=True):
            seqs.append(prompt + list(c))
            prompt_lens.append(len(prompt))
            advantages.append(a)
    if not seqs:
        raise ValueError("grpo_step needs at least one group")
    width = max(len(s) for s in seqs)
    tokens = torch.full((len(seqs), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(seqs), width - 1))
    for i, (s, p) in enumerate(zip(seqs, prompt_lens, strict=True)):
        tokens[i, : len(s)] = torch.tensor(s)
        # Position t predicts token t + 1: score the completion tokens only.
        mask[i, p - 1 : len(s) - 1] = 1.0
    logits = model(tokens[:, :-1])
    logp = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
    adv_t = torch.tensor(advantages).unsqueeze(1)
    scored = mask.sum().clamp(min=1.0)
    loss = -(adv_t * logp * mask).sum() / scored
    optimizer.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return StepStats(
        mean_reward=total_reward / max(1, samples), loss=float(loss.detach()), tokens=int(scored)
    )
