"""The TRL example (``python -m frontier_adapters.examples.trl_grpo``) as its
docstring promises: SIGKILLed mid-run (its whole process group) and sent a
SIGTERM in a later life (it drains and exits 143), then started again on the
same directory, it trains every prompt exactly once."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ._need import need_trl

need_trl()

from frontier_core._audit import audit_log  # noqa: E402

#: A life that neither finishes nor is stopped within this is a hang.
LIFE_DEADLINE = 240.0
STREAM_LEN = 32  # the example's 16 rows, 2 epochs


def life(out: Path, after: int | None, sig: int) -> int:
    """One life of the example; sent ``sig`` (to its process group for a
    SIGKILL) once it printed ``after`` more steps, or run to its end.
    Returns its exit code."""
    child = subprocess.Popen(
        [sys.executable, "-m", "frontier_adapters.examples.trl_grpo", str(out)],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert child.stdout is not None
    deadline = time.monotonic() + LIFE_DEADLINE
    seen, buffered = 0, b""
    try:
        while after is None or seen < after:
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
            seen = buffered.count(b"step ")
        if after is not None and seen >= after:
            if sig == signal.SIGKILL:
                os.killpg(child.pid, sig)
            else:
                os.kill(child.pid, sig)
        _, err = child.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    if child.returncode not in (0, 143, -signal.SIGKILL):
        pytest.fail(f"the example exited {child.returncode}: {err.decode()[-3000:]}")
    return child.returncode


def test_the_example_trains_every_prompt_once_across_a_sigkill_and_a_sigterm(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    codes = [life(out, 3, signal.SIGKILL), life(out, 3, signal.SIGTERM), life(out, None, 0)]
    assert codes[0] == -signal.SIGKILL and codes[2] == 0, codes
    assert codes[1] == 143, codes  # drained at a block boundary, not killed
    report = audit_log(out / "frontier_train_log.jsonl", STREAM_LEN)
    assert report.clean and report.trained_once == STREAM_LEN, report
