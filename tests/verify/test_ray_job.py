"""The Ray torture command delivers the kills it is asked for, or says why
not before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("ray")

from frontier_adapters.verify.ray_job import JobConfig, check_kills
from frontier_adapters.verify.ray_sample_job import SampleJobConfig, check_sample_kills


def test_a_stream_too_short_for_the_kills_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="pass --rows 248 or more"):
        check_kills(JobConfig(), 10)  # 64 rows, 8 groups a step: 8 steps
    check_kills(JobConfig(rows=248), 10)
    with pytest.raises(ValueError, match="pass --rows 124 or more"):
        check_kills(JobConfig(rows=62, epochs=2), 10)  # 124 prompts: 16 steps
    check_kills(JobConfig(rows=124, epochs=2), 10)


def test_a_sample_stream_too_short_for_the_kills_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match="48 rows at 4 groups a step make 12: pass --rows 124"):
        check_sample_kills(SampleJobConfig(), 10)
    check_sample_kills(SampleJobConfig(rows=124), 10)


@pytest.mark.parametrize(
    ("command", "fix"), [("ray-torture", "248"), ("ray-samples-torture", "124")]
)
def test_the_command_exits_2_naming_the_fix_before_starting_ray(
    tmp_path: object, command: str, fix: str
) -> None:
    argv = [command, f"--workdir={tmp_path}", "--kills=10"]
    proc = subprocess.run(
        [sys.executable, "-m", "frontier_adapters.verify", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and f"pass --rows {fix}" in proc.stderr, proc.stderr
