"""The replay buffer and the GRPO trainer around the rollout loop.

``ReplayBuffer`` holds landed groups keyed by ordinal, hands the trainer the
oldest first (lowest ordinal: the cut follows training closely), and evicts
the groups whose policy version is more than ``max_trajectory_age_steps``
behind the step about to train; the caller reports those to the collector
(``evicted``), whose ledger requeues or drops them. Its ``state_dict`` is
JSON and is saved in the same checkpoint as the collector's state.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import torch

from ._cpu_engine import PAD, TinyCausalLM
from ._rollout import Group

FIRST_CONTENT: Final = 2


def make_prompts(count: int, *, vocab: int, length: int = 4, seed: int = 0) -> list[list[int]]:
    """``count`` prompts of ``length`` content tokens (ids ``2..vocab-1``)."""
    rng = random.Random(f"prompts:{seed}")
    return [[rng.randrange(FIRST_CONTENT, vocab) for _ in range(length)] for _ in range(count)]


def reward(prompt: Sequence[int], completion: Sequence[int]) -> float:
    """1.0 when the completion starts with the prompt's first token."""
    return 1.0 if completion and completion[0] == prompt[0] else 0.0


class ReplayBuffer:
    """Landed groups by ordinal, with an age limit in training steps."""

    def __init__(self, max_trajectory_age_steps: int) -> None:
        if max_trajectory_age_steps < 0:
            raise ValueError(
                f"max_trajectory_age_steps must be >= 0, got {max_trajectory_age_steps}"
            )
        self.max_age = max_trajectory_age_steps
        self._groups: dict[int, Group] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def __contains__(self, ordinal: object) -> bool:
        return ordinal in self._groups

    @property
    def ordinals(self) -> list[int]:
        return sorted(self._groups)

    def add(self, group: Group) -> None:
        if group.ordinal in self._groups:
            raise ValueError(f"ordinal {group.ordinal} is already buffered")
        self._groups[group.ordinal] = group

    def stale(self, step: int) -> list[int]:
        """Ordinals too old to train at ``step``."""
        return sorted(o for o, g in self._groups.items() if step - g.version > self.max_age)

    def evict(self, ordinals: Iterable[int]) -> None:
        for o in ordinals:
            del self._groups[o]

    def take(self, k: int) -> list[Group]:
        """The ``k`` oldest groups (fewer if the buffer holds fewer), removed."""
        chosen = sorted(self._groups)[:k]
        return [self._groups.pop(o) for o in chosen]

    def state_dict(self) -> list[dict[str, Any]]:
        return [
            {
                "ordinal": g.ordinal,
                "row": g.row,
                "completions": [list(c) for c in g.completions],
                "finish_reasons": list(g.finish_reasons),
                "version": g.version,
                "attempt": g.attempt,
                "request_id": g.request_id,
            }
            for g in (self._groups[o] for o in sorted(self._groups))
        ]

    def load_state_dict(self, state: Sequence[Mapping[str, Any]]) -> None:
        self._groups = {}
        for d in state:
            self.add(
                Group(
                    ordinal=int(d["ordinal"]),
                    row=d["row"],
                    completions=tuple(tuple(int(t) for t in c) for c in d["completions"]),
                    finish_reasons=tuple(str(r) for r in d["finish_reasons"]),
                    version=int(d["version"]),
                    attempt=int(d["attempt"]),
                    request_id=str(d["request_id"]),
                )
            )


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
    groups: Sequence[Group],
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
