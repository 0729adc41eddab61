"""The example of docs/trl.md runs as written, and again after it finished
(a restart of a finished run resumes and trains nothing)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ._need import need_trl

need_trl()

from frontier_adapters.examples.tiny_llm import OFFLINE_ENV, tiny_llm  # noqa: E402
from frontier_adapters.verify.trl_job import make_rows, reward  # noqa: E402

from frontier_core._audit import audit_log  # noqa: E402

from ..._docs import filename, python_blocks  # noqa: E402


def test_the_readme_trl_example_runs_and_audits_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.environ.update(OFFLINE_ENV)
    import datasets
    import torch
    import transformers

    torch.set_num_threads(1)
    (block,) = [b for b in python_blocks("trl.md") if "FrontierGRPOTrainer" in b]
    assert len(block.strip().splitlines()) <= 10
    path = tiny_llm()
    monkeypatch.chdir(tmp_path)

    def namespace() -> dict[str, Any]:
        return {
            "model": transformers.AutoModelForCausalLM.from_pretrained(path),
            "tokenizer": transformers.AutoTokenizer.from_pretrained(path),
            "reward": reward,
            "dataset": datasets.Dataset.from_list(make_rows(8)),
        }

    first = namespace()
    exec(compile(block, filename("trl.md"), "exec"), first)
    assert first["trainer"].state.global_step == 8
    again = namespace()
    exec(compile(block, filename("trl.md"), "exec"), again)  # resumes the finished run
    assert again["trainer"].state.global_step == 8
    report = audit_log(tmp_path / "out" / "frontier_train_log.jsonl", 16)
    assert report.clean and report.trained_once == 16
