"""A ``frontier`` command whose reader goes away after its first bytes."""

from __future__ import annotations

import subprocess
import sys


def closed_reader(argv: list[str], timeout: float = 120) -> tuple[int, bytes]:
    """Run ``frontier argv``, read 10 bytes of its output, close the pipe;
    returns its exit status and what it wrote to stderr (bounded by
    ``timeout``; the process is killed either way)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "frontier_core._cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdout.read(10)
        proc.stdout.close()
        err = proc.stderr.read()
        return proc.wait(timeout=timeout), err
    finally:
        proc.kill()
