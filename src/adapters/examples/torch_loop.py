"""A torch GRPO loop on ``Run``: the whole integration, start to finish.

    python -m frontier_adapters.examples.torch_loop RUN_DIR [--steps 12]

A tiny causal LM learns the example task (``grpo.reward``) by GRPO, sampling
its own completions. Each step takes groups from the run, samples every
sibling the run hands out (a resumed run hands back the ones its journal
kept), seals each sample (journaled), trains one update over the complete
groups, records the step in the training log, and checkpoints the model and
the optimizer with the run. Kill it at any moment (SIGKILL included) and
start it again on the same ``RUN_DIR``: it resumes at its last checkpoint,
and every prompt is trained exactly once (``RUN_DIR/train_log.jsonl``, read
with ``frontier_core.fold_lineage``). Public names only.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import attrs
import torch

from frontier_core import LedgerConfig, TrainLogWriter
from frontier_core.journal import Payload, TokenPayload

from .. import Run, SequenceSource  # frontier_adapters
from ..torch import TENSOR_PARTS
from .cpu_engine import TinyCausalLM
from .grpo import grpo_step, make_prompts

GROUPS_PER_STEP, SAMPLES, VOCAB, NEW_TOKENS = 4, 4, 16, 3


@attrs.frozen
class Group:
    """A prompt and its samples, as ``grpo_step`` reads them."""

    row: list[int]
    samples: list[Payload]

    @property
    def completions(self) -> list[list[int]]:
        return [list(s.tokens()) for s in self.samples if isinstance(s, TokenPayload)]


def sample(model: TinyCausalLM, prompt: Sequence[int], version: int) -> TokenPayload:
    """One completion of ``prompt`` with its log-probs: the "engine"."""
    tokens, logprobs = list(prompt), []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logp = torch.log_softmax(model(torch.tensor([tokens]))[0, -1], -1)
            token = int(torch.multinomial(logp.exp(), 1))
            tokens.append(token)
            logprobs.append(float(logp[token]))
    return TokenPayload.of(tokens[len(prompt) :], logprobs, version)


def main(root: Path, steps: int) -> None:
    # One intra-op thread, as every torch job of the rig runs: a tiny model
    # gains nothing from more, and on 2 shared cores a life of this example
    # under CI load once aborted inside torch ("terminate called without an
    # active exception") with the default pool.
    torch.set_num_threads(1)
    prompts = make_prompts(GROUPS_PER_STEP * steps, vocab=VOCAB)
    config = LedgerConfig(stream_len=len(prompts), samples=SAMPLES, fingerprint="example-v1")
    model = TinyCausalLM(vocab=VOCAB)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with Run.open(root, SequenceSource(prompts), config, codec=TENSOR_PARTS) as run:
        log_records = None
        if run.resumed is not None:  # a resume: the weights, the optimizer, the log
            model.load_state_dict(run.resumed.tensor_parts["model"])
            optimizer.load_state_dict(run.resumed.tensor_parts["optimizer"])
            log_records = run.resumed.json_parts["log_records"]
        with TrainLogWriter(root / "train_log.jsonl", resume_records=log_records) as log:
            for step in range(run.step + 1, steps + 1):
                groups: dict[int, Group] = {}
                while len(groups) < GROUPS_PER_STEP and not run.drained:
                    for taken in run.take(GROUPS_PER_STEP - len(groups)):
                        done = [run.sample(lease) for lease in taken.reused]  # journaled
                        for lease in taken.leases:
                            payload = sample(model, prompts[lease.ordinal], step)
                            if run.seal(lease, payload).sealed:
                                done.append(payload)
                        groups[taken.ordinal] = Group(prompts[taken.ordinal], done)
                if not groups:
                    break  # every prompt trained
                stats = grpo_step(model, optimizer, list(groups.values()))
                log.step(step, sorted(groups))
                log.sync()
                run.trained(sorted(groups))
                run.checkpoint(
                    step,
                    json_parts={"log_records": log.records},
                    tensor_parts={"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                )
                print(f"step {step}: mean reward {stats.mean_reward:.2f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a torch GRPO loop on Run")
    parser.add_argument("root", type=Path)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    main(args.root, args.steps)
