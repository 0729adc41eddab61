"""One life of a durable run of verifiers episodes (``python -m
tests.adapters.agents.verifiers_life ROOT REPORT``): opens the run at
ROOT, serves the CPU engine's tiny model through ``serve_policy`` and runs
every episode the run hands out with ``run_task`` over the unchanged
``verifiers_env.KvTask``, appending one JSON line per episode to REPORT."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import verifiers.v1 as vf
from frontier_adapters import Run, SequenceSource
from frontier_adapters.agents import TinyDecoding, run_task, serve_policy
from frontier_adapters.examples.cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM
from verifiers.v1.harnesses.null.harness import NullHarnessConfig

from frontier_core import LedgerConfig

from .verifiers_env import KvTask, restore

PROMPTS = [[2, 3]]
CONFIG = LedgerConfig(stream_len=1, samples=1, fingerprint="verifiers-test")
MAX_TURNS = 3


async def life(root: Path, report: Path) -> None:
    os.environ.setdefault("FRONTIER_VF_KEY", "sk-loopback")
    engine = CpuEngine(TinyCausalLM(vocab=16, max_len=64, seed=3))
    config = vf.AgentConfig(
        model="tiny",
        harness=NullHarnessConfig(id="null"),
        runtime=vf.SubprocessConfig(),
        client=vf.EvalClientConfig(base_url="http://127.0.0.1:9/v1", api_key_var="FRONTIER_VF_KEY"),
        max_turns=MAX_TURNS + 1,
    )
    with Run.open(root, SequenceSource(PROMPTS), CONFIG) as run:
        async with serve_policy(
            run,
            engine,
            params=CpuSamplingParams(max_tokens=3),
            decoding=TinyDecoding(),
            max_turns=MAX_TURNS,
        ) as policy:
            while not run.drained:
                for group in run.take(1):
                    for lease in group.leases:
                        before = run.episode(lease)
                        task = KvTask(vf.TaskData(id=f"kv-{lease.ordinal}", prompt="Add to cells."))
                        out = await run_task(
                            run,
                            policy,
                            lease,
                            PROMPTS[lease.ordinal],
                            task,
                            config,
                            restore=restore,
                        )
                        assert out.effect is not None and out.episode is not None
                        line = {
                            "lease": str(lease),
                            "durable": 0 if before is None else len(before.turns),
                            "pending": None
                            if before is None or before.pending is None
                            else before.pending.key,
                            "generated": out.generated,
                            "reused": out.reused,
                            "retried": out.retried,
                            "turns": len(out.episode.turns),
                            "keys": [t.call.key for t in out.episode.turns if t.call],
                            "replayed": policy.traffic[lease].replayed,
                        }
                        with report.open("a") as f:
                            f.write(json.dumps(line) + "\n")
                        if out.effect.landed:
                            run.trained(sorted(out.effect.landed))
                run.checkpoint(run.step + 1)


if __name__ == "__main__":
    asyncio.run(life(Path(sys.argv[1]), Path(sys.argv[2])))
