"""TRL's GRPOTrainer on ``Run``, exactly once across kills: the whole script.

    python -m frontier_adapters.examples.trl_grpo OUT_DIR [--remote URL]

A tiny offline Llama (``tiny_llm``) learns to add by GRPO with TRL 1.16's
``GRPOTrainer`` on CPU, swapped for ``FrontierGRPOTrainer``: the run's
coverage checkpoints go to ``OUT_DIR/frontier`` (or to ``--remote``, a store
URL that survives the node), paired with the Trainer's ``checkpoint-N``.
Kill it at any moment (SIGKILL included) and start it again with the same
arguments: it resumes at its last paired checkpoint. A SIGTERM is a
termination notice: it saves at the next block boundary, drains the run and
exits 143. Every prompt is trained exactly once:
``frontier audit OUT_DIR/frontier_train_log.jsonl --stream-len 32``. It
prints one line per optimizer step. Public names only.
"""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path
from typing import Any

from ..trl import FrontierGRPOTrainer
from .tiny_llm import OFFLINE_ENV, tiny_llm

ROWS, EPOCHS = 16, 2


def make_dataset() -> Any:
    """``ROWS`` prompts ``"Q7: 3 + 4 ="`` with their ``answer``."""
    import datasets  # type: ignore[import-not-found]

    rng = random.Random("trl-example")
    rows = []
    for i in range(ROWS):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"prompt": f"Q{i}: {a} + {b} =", "answer": str(a + b)})
    return datasets.Dataset.from_list(rows)


def reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
    """1 for a completion that starts with the sum, else a little for digits
    (a reward that never varies would teach nothing)."""
    out = []
    for text, want in zip(completions, answer, strict=True):
        s = text.strip()
        out.append(1.0 if s.startswith(want) else 0.5 * sum(map(str.isdigit, s)) / max(1, len(s)))
    return out


def main(out: Path, remote: str | None) -> int:
    os.environ.update(OFFLINE_ENV)
    import torch
    import transformers  # type: ignore[import-not-found]
    from trl import GRPOConfig  # type: ignore[import-not-found]

    torch.set_num_threads(1)  # a tiny model gains nothing from more
    transformers.logging.set_verbosity_error()
    model_dir = tiny_llm()

    class Printer(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            print(f"step {state.global_step}", flush=True)
            return control

    args = GRPOConfig(
        output_dir=str(out),
        num_train_epochs=EPOCHS,
        save_steps=2,
        per_device_train_batch_size=8,
        num_generations=4,  # 2 prompts a step
        max_completion_length=4,
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to=[],
        disable_tqdm=True,
        logging_steps=10_000,
    )
    trainer = FrontierGRPOTrainer(
        model=transformers.AutoModelForCausalLM.from_pretrained(model_dir),
        processing_class=transformers.AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=reward,
        args=args,
        train_dataset=make_dataset(),
        callbacks=[Printer()],
        frontier_remote=remote,
        frontier_grace=30.0,  # SIGTERM: save at the next block boundary, drain
    )
    trainer.train(resume_from_checkpoint=True)  # every life: the run knows where it is
    run = trainer.frontier  # the run of this train() call, closed now
    if run is not None and run.preempted:
        print(f"drained: {trainer.frontier_callback.drained}", flush=True)
        return 143
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="TRL's GRPOTrainer on Run")
    parser.add_argument("out", type=Path)
    parser.add_argument("--remote", default=None, help="a store URL for the run's checkpoints")
    ns = parser.parse_args()
    raise SystemExit(main(ns.out, ns.remote))
