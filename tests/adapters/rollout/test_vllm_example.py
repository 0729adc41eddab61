"""The vLLM-style example on real vLLM: ``python -m
frontier_adapters.examples.vllm_loop RUN_DIR --engine vllm``, the same
``Run`` + ``RolloutLoop`` code the main suite SIGKILLs on the CPU engine
(tests/examples/test_vllm_loop.py), here with vLLM's ``AsyncLLM`` streaming
deltas and log-probs into the run's journal. Every prompt is trained exactly
once and nothing of the engine is left running.

One life (one engine start, about a minute on 2 cores): the CI budget.
Killed and resumed on real vLLM: ``FRONTIER_VLLM_EXAMPLE_KILLS=2`` (each
kill adds an engine start); a SIGKILL of a process tree with a real engine
in it is CI's in test_vllm_kill.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._vllm_support import require_vllm

require_vllm()

from ...examples._lives import audit, life  # noqa: E402

STEPS, GROUPS_PER_STEP = 4, 4  # the example's groups per step
#: An engine start is 20 to 50 s on 2 cores, more under load.
DEADLINE = 420.0


def test_the_example_runs_on_real_vllm_and_trains_every_prompt_once(tmp_path: Path) -> None:
    root = tmp_path / "run"
    example = [
        "-m", "frontier_adapters.examples.vllm_loop", str(root),
        "--steps", str(STEPS), "--engine", "vllm",
    ]  # fmt: skip
    kills = int(os.environ.get("FRONTIER_VLLM_EXAMPLE_KILLS", "0"))
    for _ in range(kills):
        life(example, 1, deadline=DEADLINE)
    killed, lines = life(example, None, deadline=DEADLINE)
    assert not killed
    assert [x.split(":")[0] for x in lines if x.startswith("step")][-1] == f"step {STEPS}"
    audit(root, STEPS, GROUPS_PER_STEP)
