"""One life of a durable run of verifiers episodes (``python -m
tests.adapters.agents.verifiers_life ROOT REPORT``): runs the example of
docs/agents.md as written (its ``episodes``) over the unchanged
``verifiers_env.KvTask``, the run at ROOT, appending one JSON line per
sealed episode to REPORT."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from frontier_adapters import Run, SequenceSource

from frontier_core import LedgerConfig

from ..._docs import filename, python_blocks
from .verifiers_env import KvTask, restore

PROMPTS = [[2, 3]]
CONFIG = LedgerConfig(stream_len=1, samples=1, fingerprint="verifiers-test")


def _example() -> Any:
    """The page's ``episodes``, compiled from docs/agents.md."""
    (block,) = [b for b in python_blocks("agents.md") if "run_task" in b]
    assert "._" not in block  # public names only
    namespace: dict[str, Any] = {"__name__": "agents_page_verifiers"}
    exec(compile(block, filename("agents.md"), "exec"), namespace)
    return namespace["episodes"]


def main(root: Path, report: Path) -> None:
    os.environ.setdefault("FRONTIER_VF_KEY", "sk-loopback")
    episodes = _example()

    def make_task(lease: Any) -> Any:
        return KvTask(vf.TaskData(id=f"kv-{lease.ordinal}", prompt="Add to cells."))

    def done(policy: Any, out: Any) -> None:
        assert out.effect is not None and out.episode is not None
        line = {
            "lease": str(out.lease),
            "durable": out.reused + out.retried,
            "generated": out.generated,
            "reused": out.reused,
            "retried": out.retried,
            "turns": len(out.episode.turns),
            "keys": [t.call.key for t in out.episode.turns if t.call],
            "replayed": policy.traffic[out.lease].replayed,
            "sealed": out.lease in out.effect.sealed,
        }
        with report.open("a") as f:
            f.write(json.dumps(line) + "\n")

    with Run.open(root, SequenceSource(PROMPTS), CONFIG) as run:
        asyncio.run(episodes(run, PROMPTS, make_task, restore, done))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
