"""A real kill on real vLLM: ``frontier demo --engine vllm``, frontier mode.

A worker process runs the async GRPO loop of ``verify.grpo_worker`` on a
real ``AsyncLLM`` (the tiny Llama, trained by torch through transformers,
its weights pushed into the engine after every step). It is SIGKILLed with
requests in flight, as a whole process tree (the worker and vLLM's
engine-core and worker processes, in one process group), restarted from
its last checkpoint with a fresh engine, and run to the end of the stream;
``frontier audit`` must then find every prompt trained exactly once (or
dropped on record), and nothing of either life may be left running.

One kill and two lives (two engine starts): the CI budget. More kills:
``.venv-vllm/bin/frontier demo --engine vllm`` (both modes, 2 kills each).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from ._vllm_support import engine_processes, require_vllm

require_vllm()

from frontier_core import _cli  # noqa: E402

PROMPTS = 64  # 8 steps of 8 groups


def test_sigkilled_mid_generation_and_resumed_on_real_vllm_nothing_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lives_tmp = set(Path(tempfile.gettempdir()).glob("frontier-life-*"))
    code = _cli.main(
        ["demo", "--engine", "vllm", "--mode", "frontier", "--kills", "1",
         "--prompts", str(PROMPTS), "--seed", "3", "--json", "--workdir", str(tmp_path / "runs")]
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["engine"] == "vllm"
    run = out["frontier"]
    audit = run["audit"]
    assert run["kills"] == 1 and run["lives"] == 2
    assert audit["clean"] and audit["skipped"] == 0 and audit["duplicated"] == 0
    assert audit["trained_once"] + audit["dropped"] == PROMPTS
    # Killed with requests generating in the engine (the worker's last
    # step line before the kill said how many were in flight).
    assert run["in_flight_at_kills"][0] > 0
    # Weights went into the engine after every step, and at the resume.
    steps = len(run["rewards"])
    assert steps >= PROMPTS // 8
    assert run["counters"]["weight_pushes"] >= steps + 1
    # Nothing left behind: no process (run_mode also waits for each life's
    # process group to be empty), no private temporary directory.
    assert engine_processes() == []  # (our own resource tracker may live on)
    assert set(Path(tempfile.gettempdir()).glob("frontier-life-*")) <= lives_tmp
    log = (tmp_path / "runs" / "frontier" / "stderr.log").read_text(errors="replace")
    assert "EngineCore" in log  # it was vLLM
    assert os.environ.get("VLLM_HOST_IP") in (None, "127.0.0.1")
