"""The workload: everything both modes must see identically.

A ``Workload`` is a frozen configuration; every random quantity of a run is
a pure function of ``(seed, what, ordinal, attempt, ...)``, computed with a
``random.Random`` seeded by a string (hashed with SHA-512 by the stdlib), so
every mode sees the same prompt order, the same rollout lengths and the
same failures for the same (ordinal, attempt), however
differently they schedule the work. Kill times are drawn once per workload
and shared by every mode.
"""

from __future__ import annotations

import enum
import functools
import math
import random
from collections.abc import Iterable

import attrs

from .._events import FailurePolicy


class KillKind(enum.Enum):
    """Where a kill lands.

    ``MID_GENERATION``: at its time, whatever is happening (rollouts are in
    flight nearly always). ``TORN_CHECKPOINT``: armed at its time, it fires
    between the two parts of the next checkpoint write, so that write never
    commits. ``AFTER_RESUME``: at its time, and again right after the
    restart, before anything new was checkpointed. ``DOUBLE``: at its time,
    and again a fraction of a step into the restarted run.
    """

    MID_GENERATION = "mid-generation"
    TORN_CHECKPOINT = "torn-checkpoint"
    AFTER_RESUME = "after-resume"
    DOUBLE = "double"


@attrs.frozen
class Kill:
    time: float
    kind: KillKind


def _check_positive(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value}")


def _check_nonneg(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


#: The most turns an episode may have (the clock walks them one by one).
MAX_TURNS = 4096


def _check_turns(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not 1 <= value <= MAX_TURNS:
        raise ValueError(f"{attribute.name} must be in [1, {MAX_TURNS}], got {value}")


def _check_rate(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{attribute.name} must be in [0, 1), got {value}")


def _check_delay(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{attribute.name} must be finite and >= 0, got {value}")


@attrs.frozen
class Workload:
    """One simulated async GRPO run, up to its kills.

    Units: time is measured in "training steps" (one step takes
    ``train_time``); rollout lengths are in tokens, generated at
    ``tokens_per_time``. ``max_age`` is ``max_trajectory_age_steps``: up to
    that many steps' worth of groups (targets) are in flight, and a group
    generated at weight version ``v`` is stale at step ``s > v + max_age``.
    """

    seed: int = 0
    dataset_len: int = attrs.field(default=512, validator=_check_positive)
    epochs: int = attrs.field(default=1, validator=_check_positive)
    shuffle: bool = False
    batch_size: int = attrs.field(default=32, validator=_check_positive)
    prompts_per_step: int = attrs.field(default=32, validator=_check_positive)
    num_generations: int = attrs.field(default=8, validator=_check_positive)
    workers: int = attrs.field(default=64, validator=_check_positive)
    max_age: int = attrs.field(default=3, validator=_check_positive)
    #: Targets generated ahead of the trainer; ``None``: ``max_age``. More
    #: than ``max_age + 1`` makes the far targets' groups stale (evicted).
    targets: int | None = None
    checkpoint_every: int = attrs.field(default=1, validator=_check_positive)
    failure_rate: float = attrs.field(default=0.0, validator=_check_rate)
    on_failure: FailurePolicy = attrs.field(default=FailurePolicy.DROP, converter=FailurePolicy)
    max_failures: int = attrs.field(default=3, validator=_check_positive)
    load_replay_buffer: bool = True
    kills: int = attrs.field(default=3, validator=_check_nonneg)
    torn_kills: int = attrs.field(default=1, validator=_check_nonneg)
    after_resume_kills: int = attrs.field(default=1, validator=_check_nonneg)
    double_kills: int = attrs.field(default=1, validator=_check_nonneg)
    median_tokens: float = 1000.0
    #: Rollouts are truncated here (the generation's max_tokens).
    max_tokens: float = 6000.0
    length_sigma: float = 1.0
    tokens_per_time: float = 1000.0
    train_time: float = 1.0
    checkpoint_time: float = 0.4
    restart_time: float = 2.0
    #: The rollout journal's group commit (the journal modes of ``frontier
    #: simulate --waste``): a record is durable at most this long after its
    #: append (``CommitPolicy.max_delay``; the simulator takes the worst
    #: case, every record waits the whole delay), in training steps. The
    #: default is 5 ms against a step of 5 s or more (a median rollout of
    #: 1000 tokens at 200 tokens/s per sequence, or slower).
    commit_delay: float = attrs.field(default=0.001, validator=_check_delay)
    #: Journal plus progress: a running sample's progress is journaled every
    #: this many new tokens (``RolloutJournal``'s default ``progress_every``).
    progress_every: int = attrs.field(default=256, validator=_check_positive)
    #: The journal shipped off the node (``frontier_adapters.journal.Shipper``):
    #: a record is off the node at most this long after it is durable on it
    #: (the segment roll, ``segment_seconds``, and the upload), in training
    #: steps; a checkpoint's mark is shipped before the checkpoint returns.
    #: The default is 0.4: 2 s against a step of 5 s.
    ship_lag: float = attrs.field(default=0.4, validator=_check_delay)
    #: Multi-turn episodes (agents): every sample is an episode of this many
    #: turns of equal length (its tokens split evenly; the lengths stay
    #: heavy-tailed), and between two turns the tool called at the end of
    #: the first answers after ``tool_latency`` (training steps), during
    #: which the episode generates nothing. 1 turn: single-turn samples.
    turns: int = attrs.field(default=1, validator=_check_turns)
    tool_latency: float = attrs.field(default=0.0, validator=_check_delay)

    def turn_tokens(self, length: float) -> float:
        """The tokens of one turn of a sample of ``length`` tokens."""
        return length / self.turns

    def calls(self, length: float, tokens: float) -> int:
        """The tool calls an episode of ``length`` tokens has made once it
        holds ``tokens``: one at the end of each turn but the last."""
        if self.turns == 1 or tokens <= 0:
            return 0
        return min(self.turn_at(length, tokens)[0], self.turns - 1)

    def turns_between(self, length: float, start: float, end: float) -> int:
        """The turns of a sample of ``length`` tokens that hold any of its
        tokens ``start`` (exclusive) to ``end``: what a resume that keeps
        ``start`` of ``end`` tokens generates again, in turns."""
        if end <= start:
            return 0
        first = self.turn_at(length, start)[0]
        turn, boundary = self.turn_at(length, end)
        last = turn - 1 if boundary else turn
        return max(0, min(last, self.turns - 1) - first + 1)

    def turn_at(self, length: float, tokens: float) -> tuple[int, bool]:
        """The turn a sample holding ``tokens`` tokens generates next, and
        whether it stands at that turn's start (after a tool call: a
        continuation from there asks that call again, under its key). A
        token count within a hair of a boundary is at it (prefixes at turn
        boundaries are computed as multiples of ``turn_tokens``)."""
        ratio = tokens / self.turn_tokens(length)
        nearest = round(ratio)
        if abs(ratio - nearest) < 1e-9:
            return nearest, nearest >= 1
        return math.floor(ratio), False

    def duration(self, length: float, prefix: float, tokens: float | None = None) -> float:
        """How long a sample of ``length`` tokens takes to generate from a
        prefix of ``prefix`` tokens to ``tokens`` (default: all of them):
        its tokens at ``tokens_per_time``, and a tool wait at every turn
        boundary on the way (one at the prefix, if it stands at one)."""
        end = length if tokens is None else tokens
        time = (end - prefix) / self.tokens_per_time
        if self.turns == 1 or self.tool_latency == 0.0 or prefix >= end:
            return time
        first, boundary = self.turn_at(length, prefix)
        first += 0 if boundary else 1  # the first boundary at or after the prefix
        last, at_end = self.turn_at(length, end)
        last = min(last - 1 if at_end else last, self.turns - 1)  # the last before ``end``
        return time + max(0, last - first + 1) * self.tool_latency

    def made(self, length: float, prefix: float, elapsed: float) -> float:
        """The tokens a sample of ``length`` tokens holds ``elapsed`` after
        it started from ``prefix`` (the inverse of ``duration``)."""
        rate = self.tokens_per_time
        if elapsed <= 0 or prefix >= length:
            return min(prefix, length)
        if self.turns == 1 or self.tool_latency == 0.0:
            return min(length, prefix + rate * elapsed)
        size = self.turn_tokens(length)
        turn, boundary = self.turn_at(length, prefix)
        at, left = prefix, elapsed
        while True:
            if boundary:  # the tool answers the previous turn's call first
                if left <= self.tool_latency:
                    return at
                left -= self.tool_latency
            end = length if turn >= self.turns - 1 else (turn + 1) * size
            need = max(0.0, end - at) / rate
            if left <= need:
                return at + left * rate
            if turn >= self.turns - 1:
                return length
            left -= need
            turn, at, boundary = turn + 1, end, True

    @property
    def in_flight_targets(self) -> int:
        """Targets in flight: ``targets`` (``max_age`` if ``None``), at most
        one more than the run has steps (more changes nothing: every target
        is in flight from the start), so the simulation's work follows the
        run, not the number on the command line."""
        wanted = self.max_age if self.targets is None else max(1, self.targets)
        return min(wanted, -(-self.stream_len // self.prompts_per_step) + 1)

    @property
    def stream_len(self) -> int:
        return self.dataset_len * self.epochs

    @property
    def fingerprint(self) -> str:
        return f"sim:{self.seed}:{self.dataset_len}x{self.epochs}:shuffle={self.shuffle}"

    def rng(self, *key: object) -> random.Random:
        """A generator that is a pure function of the seed and ``key``."""
        return random.Random(":".join(str(k) for k in (self.seed, *key)))

    def prompt_id(self, ordinal: int) -> int:
        """The dataset row at stream position ``ordinal`` (per-epoch order)."""
        epoch, index = divmod(ordinal, self.dataset_len)
        if not self.shuffle:
            return index
        return _permutation(self.seed, self.dataset_len, epoch)[index]

    def prompt_tokens(self, prompt: int) -> float:
        """A prompt's typical rollout length: heavy-tailed (lognormal) across
        prompts, so that some prompts are long ones whatever the sample;
        truncated at ``max_tokens`` like the rollouts."""
        draw = self.rng("len", prompt).lognormvariate(0.0, self.length_sigma)
        return min(self.median_tokens * draw, self.max_tokens)

    def sibling_tokens(self, ordinal: int, attempt: int) -> tuple[float, ...]:
        """The lengths of the ``num_generations`` rollouts (siblings) of the
        ``attempt``-th generation of ``ordinal``'s group: around the prompt's
        typical length, each with its own spread, truncated at
        ``max_tokens``. Sibling ``s`` generated afresh for the ``k``-th time
        has length ``sibling_tokens(ordinal, k)[s]``, in every mode."""
        return _sibling_tokens(self, ordinal, attempt)

    def fails(self, ordinal: int, attempt: int) -> bool:
        """Whether that generation attempt fails (a tolerated failure)."""
        if self.failure_rate <= 0.0:
            return False
        return self.rng("fail", ordinal, attempt).random() < self.failure_rate

    def kill_schedule(self, duration: float, warmup: float) -> tuple[Kill, ...]:
        """Kill times, ascending, for a run whose uninterrupted length is
        ``duration`` and whose first checkpoint commits at ``warmup``.

        A restarted run needs ``restart_time`` plus about ``warmup`` to
        refill its pipeline and commit again, so consecutive kills are at
        least that far apart, plus a random share of the run: each lands
        mid-run, mostly while rollouts are in flight, and not merely before
        the first checkpoint of the previous restart."""
        rng = self.rng("kills")
        kinds = (
            [KillKind.MID_GENERATION] * self.kills
            + [KillKind.TORN_CHECKPOINT] * self.torn_kills
            + [KillKind.AFTER_RESUME] * self.after_resume_kills
            + [KillKind.DOUBLE] * self.double_kills
        )
        rng.shuffle(kinds)
        share = duration / (len(kinds) + 1)
        kills: list[Kill] = []
        at = 0.0
        for kind in kinds:
            at += (self.restart_time + warmup if kills else warmup) + rng.uniform(0.2, 1.0) * share
            kills.append(Kill(at, kind))
        return tuple(kills)

    def mean_tokens(self, ordinals: Iterable[int]) -> float:
        """Mean typical rollout length of the prompts at these ordinals."""
        values = [self.prompt_tokens(self.prompt_id(o)) for o in ordinals]
        return math.fsum(values) / len(values) if values else 0.0


@functools.lru_cache(maxsize=1 << 16)
def _sibling_tokens(w: Workload, ordinal: int, attempt: int) -> tuple[float, ...]:
    base = w.prompt_tokens(w.prompt_id(ordinal))
    rng = w.rng("gen", ordinal, attempt)
    return tuple(
        min(base * rng.lognormvariate(0.0, 0.35), w.max_tokens) for _ in range(w.num_generations)
    )


@functools.lru_cache(maxsize=64)
def _permutation(seed: int, n: int, epoch: int) -> tuple[int, ...]:
    """Epoch ``epoch``'s order of ``n`` rows: a pure function of the seed, as
    a stateful sampler that replays its permutation would give."""
    order = list(range(n))
    random.Random(f"{seed}:perm:{epoch}").shuffle(order)
    return tuple(order)
