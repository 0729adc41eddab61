"""The torch-loop example (``python -m frontier_adapters.examples.torch_loop``)
as its docstring promises: SIGKILLed at random moments and started again on
the same directory, it trains every prompt exactly once."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from frontier_core import fold_lineage, read_train_log

STEPS, GROUPS_PER_STEP = 8, 4
#: A life that neither finishes nor is killed within this is a hang.
LIFE_DEADLINE = 240.0


def life(root: Path, kill_after: int | None) -> bool:
    """One life of the example; SIGKILLed (its whole process group) once it
    has printed ``kill_after`` more steps (the kill then lands inside the
    next step), or run to its end. Returns whether it was killed (a life
    may finish before its kill)."""
    example = ["-m", "frontier_adapters.examples.torch_loop", str(root), "--steps", str(STEPS)]
    child = subprocess.Popen(
        [sys.executable, *example],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    deadline = time.monotonic() + LIFE_DEADLINE
    seen, buffered = 0, b""
    try:
        while kill_after is None or seen < kill_after:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"a life of the example did not end within {LIFE_DEADLINE} s")
            ready, _, _ = select.select([child.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(child.stdout.fileno(), 4096)
            if not chunk:  # the life ended by itself
                break
            buffered += chunk
            seen = buffered.count(b"\n")
        if kill_after is not None and seen >= kill_after:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
            return True
        _, err = child.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    assert child.returncode == 0, err.decode()[-3000:]
    return False


def test_the_example_trains_every_prompt_once_across_sigkills(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("FRONTIER_EXAMPLE_KILL_SEED", "0")))
    root = tmp_path / "run"
    killed = 0
    began = time.monotonic()
    for _ in range(3):
        killed += life(root, rng.randint(1, 2))
    assert not life(root, None)
    lineage = fold_lineage(read_train_log(root / "train_log.jsonl"))
    trained = Counter(o for ordinals in lineage.steps.values() for o in ordinals)
    assert sorted(trained) == list(range(STEPS * GROUPS_PER_STEP)), "a prompt was lost"
    assert set(trained.values()) == {1}, "a prompt was trained twice"
    assert sorted(lineage.steps) == list(range(1, STEPS + 1))
    assert killed, f"no life was killed in {time.monotonic() - began:.0f} s"
