"""The vLLM-style example (``python -m frontier_adapters.examples.vllm_loop``)
on the CPU engine, as its docstring promises: SIGKILLed at random moments
(mid-step: requests streaming, groups buffered) and started again on the
same directory, it trains every prompt exactly once, and the lives after a
kill take samples back from the run's journal instead of generating them
again. The same example on real vLLM: tests/adapters/rollout/test_vllm_example.py."""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

from ._lives import audit, life

STEPS, GROUPS_PER_STEP = 6, 4


def reused(lines: list[str]) -> int:
    """Samples the life took back from the journal, by its last step line
    (samples reused plus prefixes continued, this life)."""
    found = [re.search(r"reused (\d+) samples, continued (\d+) prefixes", x) for x in lines]
    counts = [int(m[1]) + int(m[2]) for m in found if m]
    return counts[-1] if counts else 0


def test_the_example_trains_every_prompt_once_across_sigkills(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("FRONTIER_EXAMPLE_KILL_SEED", "0")))
    root = tmp_path / "run"
    example = ["-m", "frontier_adapters.examples.vllm_loop", str(root), "--steps", str(STEPS)]
    killed, taken_back = 0, 0
    began = time.monotonic()
    for i in range(3):
        was_killed, lines = life(example, rng.randint(1, 2) if i < 2 else None)
        killed += was_killed
        taken_back += reused(lines) if i else 0
    assert not was_killed  # the last life ran to its end
    audit(root, STEPS, GROUPS_PER_STEP)
    assert killed, f"no life was killed in {time.monotonic() - began:.0f} s"
    # The engine generated while the trainer stepped (up to max_ahead): a
    # kill after a checkpoint left groups buffered and siblings sealed,
    # which the next life took back from the journal.
    assert taken_back > 0
