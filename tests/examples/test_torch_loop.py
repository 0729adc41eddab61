"""The torch-loop example (``python -m frontier_adapters.examples.torch_loop``)
as its docstring promises: SIGKILLed at random moments and started again on
the same directory, it trains every prompt exactly once."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from ._lives import audit, life

STEPS, GROUPS_PER_STEP = 8, 4


def test_the_example_trains_every_prompt_once_across_sigkills(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("FRONTIER_EXAMPLE_KILL_SEED", "0")))
    root = tmp_path / "run"
    example = ["-m", "frontier_adapters.examples.torch_loop", str(root), "--steps", str(STEPS)]
    killed = 0
    began = time.monotonic()
    for _ in range(3):
        killed += life(example, rng.randint(1, 2))[0]
    assert not life(example, None)[0]
    audit(root, STEPS, GROUPS_PER_STEP)
    assert killed, f"no life was killed in {time.monotonic() - began:.0f} s"
