"""What the example tests share: one life of an example's process, SIGKILLed
(its whole process group, engines included) once it has printed some steps,
or run to its end, and nothing of it left running either way; the
exactly-once audit of its training log. Every wait bounded."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from frontier_core import fold_lineage, read_train_log

#: A life that neither finishes nor is killed within this is a hang.
LIFE_DEADLINE = 240.0


def life(
    argv: Sequence[str],
    kill_after: int | None,
    *,
    deadline: float = LIFE_DEADLINE,
    sig: int = signal.SIGKILL,
    env: dict[str, str] | None = None,
) -> tuple[bool, list[str]]:
    """Run ``python argv`` as one life (``env`` added to the environment);
    once it has printed ``kill_after`` more lines starting with ``step``,
    SIGKILL its whole process group (the kill then lands inside the next
    step), or, with ``sig=signal.SIGTERM``, send it a termination notice,
    which it must drain and answer by exiting 143; or let it end (``None``,
    or a life that ends first). Returns whether it was stopped and the
    lines it printed."""
    child = subprocess.Popen(
        [sys.executable, *argv],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=None if env is None else {**os.environ, **env},
    )
    assert child.stdout is not None
    ends = time.monotonic() + deadline
    buffered = b""

    def steps() -> int:
        return sum(line.startswith(b"step") for line in buffered.split(b"\n")[:-1])

    try:
        while kill_after is None or steps() < kill_after:
            left = ends - time.monotonic()
            if left <= 0:
                pytest.fail(f"a life of {argv[:2]} did not end within {deadline} s")
            ready, _, _ = select.select([child.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(child.stdout.fileno(), 4096)
            if not chunk:  # the life ended by itself
                break
            buffered += chunk
        if kill_after is not None and steps() >= kill_after:
            if sig == signal.SIGKILL:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(timeout=30)
                gone(child.pid)
                return True, buffered.decode().splitlines()
            os.kill(child.pid, sig)
            out, err = child.communicate(timeout=max(ends - time.monotonic(), 1))
            assert child.returncode == 143, (child.returncode, err.decode()[-3000:])
            gone(child.pid)
            return True, (buffered + out).decode().splitlines()
        out, err = child.communicate(timeout=max(ends - time.monotonic(), 1))
        buffered += out
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    assert child.returncode == 0, err.decode()[-3000:]
    gone(child.pid)
    return False, buffered.decode().splitlines()


def gone(group: int, timeout: float = 30.0) -> None:
    """Wait until no process of the life's process group ``group`` is left
    (an engine's processes included); fail the test after ``timeout`` s."""
    ends = time.monotonic() + timeout
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > ends:
            os.killpg(group, signal.SIGKILL)
            pytest.fail(f"processes of a life were still running {timeout} s after it ended")
        time.sleep(0.05)


def audit(root: Path, steps: int, groups_per_step: int) -> None:
    """Every prompt trained exactly once, in steps 1..steps
    (``root/train_log.jsonl``)."""
    lineage = fold_lineage(read_train_log(root / "train_log.jsonl"))
    trained = Counter(o for ordinals in lineage.steps.values() for o in ordinals)
    assert sorted(trained) == list(range(steps * groups_per_step)), "a prompt was lost"
    assert set(trained.values()) == {1}, "a prompt was trained twice"
    assert sorted(lineage.steps) == list(range(1, steps + 1))
