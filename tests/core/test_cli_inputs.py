"""The ``frontier`` command's own flags and paths: every bad value is exit 2
with a message naming it, never a verdict (exit 1) or a traceback (exit 3)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def frontier(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        # NaN made every token count NaN and the run a failed verdict (exit
        # 1); 1e308 made exp() overflow (exit 3); a negative spread passed.
        (["--length-sigma", "nan"], "--length-sigma"),
        (["--length-sigma", "inf"], "--length-sigma"),
        (["--length-sigma", "1e308"], "--length-sigma"),
        (["--length-sigma", "-1"], "--length-sigma"),
        # A stream past 2**64 ordinals was refused mid-run by LedgerConfig.
        (["--prompts", "9" * 29], "at most 2**64"),
    ],
    ids=["nan", "inf", "1e308", "negative", "stream-past-2^64"],
)
def test_a_bad_simulate_flag_is_exit_2(argv: list[str], words: str) -> None:
    proc = frontier("simulate", "--prompts", "16", *argv)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "."])
def test_replay_refuses_a_device_or_a_directory_before_a_read(path: str) -> None:
    """``frontier replay /dev/zero`` read one endless line: ``MemoryError``."""
    proc = frontier("replay", path)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr


def test_replay_reads_a_pipe_to_its_end() -> None:
    """A pipe is no device: ``frontier replay <(...)`` still works."""
    proc = subprocess.run(
        ["bash", "-c", f"{sys.executable} -m frontier_core._cli replay "
         "<(echo '{\"op\": \"stamp\", \"count\": 2}')"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert '"ordinals":[0,1]' in proc.stdout
