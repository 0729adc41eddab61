"""A vLLM-style asynchronous GRPO loop on ``Run``: the engine generates while
the trainer steps, and the run makes it durable.

    python -m frontier_adapters.examples.vllm_loop RUN_DIR [--steps 8] [--engine cpu|vllm]

The integration is three calls: ``Run.open`` (recovers on every start),
``RolloutLoop(run, engine, buffer, ...)`` (one request per sibling; the loop
reports each sample to the run, which journals it, reserves its attempt and
fences a stale one), and ``run.checkpoint`` after each training step. The
trainer steps in a thread, so the engine keeps generating meanwhile, then
pushes its weights to the engine between two awaits. The engine has vLLM's
``AsyncLLM`` contract: the project's CPU engine over a tiny torch model
(the default), or real vLLM over a tiny Llama built offline (``--engine
vllm``: the rollout is real, the samples are only scored; push your
trainer's weights with ``VllmEngine.load_weights``).

Kill it at any moment (SIGKILL included) and start it again on the same
``RUN_DIR``: it resumes at its last checkpoint; the groups that were in the
buffer come back from the journal without a request, the siblings sealed
since come back too, and a sample that was streaming continues from its
last journaled tokens. Every prompt is trained exactly once
(``RUN_DIR/train_log.jsonl``, read with ``frontier_core.fold_lineage``).
Public names only.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import torch

from frontier_core import LedgerConfig, TrainLogWriter

from .. import Run, SequenceSource  # frontier_adapters
from ..rollout import (
    Group,
    ReplayBuffer,
    RolloutLoop,
    continued_prompt,
    sibling_params,
    vllm_sibling_params,
)
from ..torch import TENSOR_PARTS
from .cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM
from .grpo import grpo_step, make_prompts, reward
from .tiny_llm import tiny_vllm_engine

GROUPS_PER_STEP, SAMPLES, VOCAB, NEW_TOKENS = 4, 4, 16, 8


class Trainer:
    """GRPO on the toy model, whose weights the CPU engine samples after
    each step (the weight sync)."""

    def __init__(self, engine: CpuEngine) -> None:
        self.engine = engine
        self.model = TinyCausalLM(vocab=VOCAB)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=3e-3)

    def step(self, groups: list[Group]) -> float:
        """One update (in a thread: the engine generates meanwhile); the
        mean reward."""
        return grpo_step(self.model, self.optimizer, groups).mean_reward

    def push(self) -> None:
        """The weight sync, between two awaits: no request sees half of it."""
        self.engine.model.load_state_dict(self.model.state_dict())

    def parts(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load(self, parts: dict[str, Any]) -> None:
        self.model.load_state_dict(parts["model"])
        self.optimizer.load_state_dict(parts["optimizer"])


class Scorer:
    """``Trainer``'s part on vLLM, where the samples are only scored: your
    trainer steps here, then pushes its weights with
    ``VllmEngine.load_weights``."""

    def step(self, groups: list[Group]) -> float:
        scores = [reward(g.row, c) for g in groups for c in g.completions]
        return sum(scores) / len(scores)

    def push(self) -> None:
        pass

    def parts(self) -> dict[str, Any]:
        return {}

    def load(self, parts: dict[str, Any]) -> None:
        pass


def cpu_engine() -> tuple[CpuEngine, Any, Trainer]:
    """The CPU engine, its ``sampling_params(lease, prefix_len)`` (an output
    per token, so that a running sample is journaled) and its trainer."""
    engine = CpuEngine(TinyCausalLM(vocab=VOCAB), token_latency=0.002)
    params = sibling_params(
        CpuSamplingParams, max_tokens=NEW_TOKENS, seed=0, output_kind="cumulative"
    )
    return engine, params, Trainer(engine)


def vllm_engine(private_dir: str) -> tuple[Any, Any, Scorer]:
    """Real vLLM (its CPU build here; on a GPU, your model), its sockets on
    loopback and in ``private_dir``: streamed deltas, each token with its
    log-prob."""
    engine = tiny_vllm_engine(private_dir)
    return engine, vllm_sibling_params(max_tokens=NEW_TOKENS, seed=0), Scorer()


async def main(root: Path, steps: int, engine_kind: str, private_dir: str) -> None:
    prompts = make_prompts(GROUPS_PER_STEP * steps, vocab=VOCAB)
    config = LedgerConfig(stream_len=len(prompts), samples=SAMPLES, fingerprint="vllm-loop-v1")
    engine, params, trainer = cpu_engine() if engine_kind == "cpu" else vllm_engine(private_dir)
    with Run.open(
        root, SequenceSource(prompts), config, codec=TENSOR_PARTS, progress_every=2
    ) as run:
        log_records = None
        if run.resumed is not None:  # a resume: the weights, the optimizer, the log
            trainer.load(run.resumed.tensor_parts)
            log_records = run.resumed.json_parts["log_records"]
        trainer.push()
        buffer = ReplayBuffer(max_trajectory_age_steps=steps)  # not checkpointed: the run is
        step = run.step
        with TrainLogWriter(root / "train_log.jsonl", resume_records=log_records) as log:
            async with RolloutLoop(
                run,
                engine,
                buffer,
                prompt_of=continued_prompt,  # (row, prefix): the row's ids, then the prefix
                sampling_params=params,
                max_in_flight=2 * GROUPS_PER_STEP * SAMPLES,
                max_ahead=2 * GROUPS_PER_STEP,  # the trainer's back pressure
                timeout=60,
                version=lambda: step,  # each token is dated with the policy that sampled it
            ) as rollout:
                while not run.drained:
                    await rollout.until(
                        lambda: len(buffer) >= GROUPS_PER_STEP or rollout.idle, timeout=300
                    )
                    groups = buffer.take(GROUPS_PER_STEP)
                    rollout.wake()  # the buffer has room again
                    mean = await asyncio.to_thread(trainer.step, groups)
                    step += 1
                    trainer.push()
                    ordinals = [g.ordinal for g in groups]
                    log.step(step, ordinals)
                    log.sync()
                    run.trained(ordinals)
                    run.checkpoint(
                        step, json_parts={"log_records": log.records}, tensor_parts=trainer.parts()
                    )
                    m = run.metrics()
                    print(
                        f"step {step}: mean reward {mean:.2f}; this life reused "
                        f"{m['samples_reused']:.0f} samples, continued "
                        f"{m['prefixes_continued']:.0f} prefixes",
                        flush=True,
                    )
    shutdown = getattr(engine, "shutdown", None)
    if shutdown is not None:
        shutdown()  # vLLM's processes


if __name__ == "__main__":
    torch.set_num_threads(1)  # a tiny model gains nothing from more on shared cores
    parser = argparse.ArgumentParser(description="a vLLM-style GRPO loop on Run")
    parser.add_argument("root", type=Path)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--engine", choices=("cpu", "vllm"), default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="frontier-vllm-") as private_dir:
        asyncio.run(main(args.root, args.steps, args.engine, private_dir))
