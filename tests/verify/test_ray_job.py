"""The Ray torture command delivers the kills it is asked for, or says why
not before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("ray")

from frontier_adapters.verify.ray_job import JobConfig, check_kills


def test_a_stream_too_short_for_the_kills_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="48 rows at 4 groups a step make 12: pass --rows 124"):
        check_kills(JobConfig(), 10)
    check_kills(JobConfig(rows=124), 10)
    with pytest.raises(ValueError, match="pass --rows 248 or more"):
        check_kills(JobConfig(rows=64, samples=1, groups_per_step=8), 10)  # 8 steps


def test_the_command_exits_2_naming_the_fix_before_starting_ray(tmp_path: object) -> None:
    argv = ["ray-torture", f"--workdir={tmp_path}", "--kills=10", "--samples=1", "--no-journal"]
    proc = subprocess.run(
        [sys.executable, "-m", "frontier_adapters.verify", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "pass --rows 124" in proc.stderr, proc.stderr
