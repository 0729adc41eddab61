"""The stand-in engine's samples and the per-sample audit of the jobs that
train them.

Sibling ``s`` of prompt ``o`` is a fixed token sequence of a heavy-tailed
length (``full_sample``), so a kill lands mid-generation and a sample can be
checked token by token. ``audit_log`` folds a per-sample training log (a
resume marker per life discards the dead branch's steps) and checks every
sample of the surviving lineage against it: every prompt trained once (or
dropped on record), with exactly its siblings, each from one attempt, no
attempt twice, each exactly the engine's sequence (nothing lost or doubled
across a continuation); it counts the tokens generated again. Written and
audited by the torch job at its ``journal`` level (``torch_job``) and by the
Ray job (``ray_job``, ``ray_workers``).

Not API: a test fixture of the verification jobs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from frontier_core.journal import TokenPayload


def length(o: int, s: int, seed: int) -> int:
    """Heavy-tailed sample lengths, a pure function of the sibling."""
    h = int.from_bytes(hashlib.blake2b(f"{seed}:{o}:{s}".encode(), digest_size=8).digest())
    u = (h % 10_000) / 10_000
    return 4 + int(8 / max(1e-3, 1 - u) ** 0.7)  # Pareto-like, 12 at the median


def token(o: int, s: int, i: int) -> int:
    return (o * 7919 + s * 104_729 + i * 31) % 50_000


def full_sample(o: int, s: int, seed: int) -> list[int]:
    return [token(o, s, i) for i in range(min(length(o, s, seed), 400))]


def digest(tokens: Sequence[int]) -> str:
    return hashlib.sha256(json.dumps(list(tokens)).encode()).hexdigest()[:16]


def payload(tokens: Sequence[int], start: int, version: int) -> TokenPayload:
    """``tokens`` from position ``start`` of a sample, generated at policy
    ``version``, with log-probs that are a pure function of the position."""
    return TokenPayload.of(
        tokens, [-0.05 - ((start + i) % 7) / 10 for i in range(len(tokens))], version
    )


@attrs.frozen
class Audit:
    """The per-sample verdict of a run's surviving lineage (``audit_log``).

    ``lost``: prompts neither trained nor dropped; ``duplicated``: trained
    more than once; ``bad_groups``: trained with wrong siblings, a reused
    attempt or wrong tokens. ``samples`` counts the trained samples and
    ``attempts`` the attempts that sealed them (equal when no attempt was
    used twice). ``tokens_needed`` is what the trained samples
    hold, ``tokens_generated`` what the engine made in every life,
    ``tokens_failed`` what it made for attempts the job failed on purpose
    (a failure, not a kill, threw them away)."""

    prompts: int
    trained: int
    lost: tuple[int, ...]
    duplicated: tuple[int, ...]
    bad_groups: tuple[int, ...]  # wrong siblings, a reused attempt, wrong tokens
    tokens_needed: int
    tokens_generated: int
    lives: int
    samples: int
    attempts: int
    dropped: tuple[int, ...] = ()
    tokens_failed: int = 0

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.bad_groups)

    @property
    def tokens_redone(self) -> int:
        """Tokens generated again because a kill lost them."""
        return self.tokens_generated - self.tokens_needed - self.tokens_failed


def audit_log(
    trained: Iterable[Mapping[str, Any]],
    generated: Iterable[Mapping[str, Any]],
    *,
    prompts: int,
    samples: int,
    seed: int,
) -> Audit:
    """Fold a per-sample training log and check every sample of the lineage
    against the stand-in engine (``full_sample(ordinal, sibling, seed)``).

    ``trained`` holds ``{"resume": k}`` when a life starts from the
    checkpoint of step ``k`` (it discards the dead branch's lines after
    it), ``{"step": k, "groups": {ordinal: [[sibling, attempt, length,
    digest], ...]}}`` per training step (steps count from 1, a checkpoint
    after step ``k`` resumes at ``k``), and ``{"dropped": [ordinals],
    "at": k}`` for groups the failure policy dropped after ``k`` steps (a
    resume at ``k`` keeps the drops at ``j < k``: a checkpoint of step
    ``k`` counts every drop logged before it, a drop at ``k`` came after).
    ``generated`` holds ``{"tokens": n}`` lines (``"failed": m`` of them
    for attempts the job failed)."""
    steps: list[tuple[int, dict[str, Any]]] = []
    drops: list[tuple[int, list[int]]] = []
    lives = 0
    for entry in trained:
        if "resume" in entry:
            lives += 1
            steps = [(k, g) for k, g in steps if k <= entry["resume"]]
            drops = [(k, d) for k, d in drops if k < entry["resume"]]
        elif "dropped" in entry:
            drops.append((entry["at"], list(entry["dropped"])))
        else:
            steps.append((entry["step"], entry["groups"]))
    seen: dict[int, int] = {}
    bad: set[int] = set()
    attempts: set[int] = set()
    trained_samples = 0
    for _, groups in steps:
        for key, group in groups.items():
            o = int(key)
            seen[o] = seen.get(o, 0) + 1
            if sorted(s for s, _, _, _ in group) != list(range(samples)):
                bad.add(o)
            for s, a, n, d in group:
                trained_samples += 1
                want = full_sample(o, s, seed)
                if a in attempts or n != len(want) or d != digest(want):
                    bad.add(o)
                attempts.add(a)
    dropped: dict[int, int] = {}
    for _, ordinals in drops:
        for o in ordinals:
            dropped[o] = dropped.get(o, 0) + 1
    made = failed = 0
    for line in generated:
        made += line["tokens"]
        failed += line.get("failed", 0)
    needed = sum(
        len(full_sample(o, s, seed)) for o in range(prompts) if o in seen for s in range(samples)
    )
    resolved = {o: seen.get(o, 0) + dropped.get(o, 0) for o in {*seen, *dropped}}
    return Audit(
        prompts=prompts,
        trained=len(seen),
        lost=tuple(o for o in range(prompts) if o not in resolved),
        duplicated=tuple(sorted(o for o, k in resolved.items() if k > 1 or not 0 <= o < prompts)),
        bad_groups=tuple(sorted(bad)),
        tokens_needed=needed,
        tokens_generated=made,
        lives=lives,
        samples=trained_samples,
        attempts=len(attempts),
        dropped=tuple(sorted(dropped)),
        tokens_failed=failed,
    )
