"""Real SIGKILLs of the sample-level job with a rollout journal: the audit is
per sample (every prompt once, exactly its n siblings, each from its own
attempt, each exactly the engine's full token sequence), and the tokens
generated again are bounded by what could not yet be durable.

The long run: ``python -m frontier_adapters.verify durable-torture
--workdir DIR --kills 200 --prompts 200 --tick 0.002``."""

from __future__ import annotations

from pathlib import Path

import pytest
from frontier_adapters.verify.durable_job import DurableArgs, audit, run_life, torture


@pytest.mark.parametrize(
    ("reuse", "progress_every"), [("everything", 8), ("everything", 0), ("nothing", 0)]
)
def test_sigkilled_lives_train_every_sample_exactly_once(
    tmp_path: Path, reuse: str, progress_every: int
) -> None:
    args = DurableArgs(
        workdir=str(tmp_path), prompts=40, tick=0.002, reuse=reuse, progress_every=progress_every
    )
    result = torture(args, kills=6, seed=3, max_delay=1.0)
    assert result.clean, result
    assert result.trained == args.prompts and result.lives >= 2
    if progress_every:
        # A kill costs at most what was not durable yet: per running sibling,
        # the tokens since its last progress record (< progress_every) and
        # those of the group commit not yet synced (a tick or two), so at most
        # 2 * progress_every per sibling in flight.
        in_flight = args.in_flight * args.samples
        assert result.tokens_redone <= (result.lives - 1) * in_flight * 2 * progress_every


def test_an_uninterrupted_run_generates_each_token_once(tmp_path: Path) -> None:
    args = DurableArgs(workdir=str(tmp_path), prompts=12, tick=0.0)
    assert run_life(args) == 0
    result = audit(args)
    assert result.clean and result.lives == 1
    assert result.tokens_generated == result.tokens_needed


def test_a_rerun_after_the_end_trains_nothing_more(tmp_path: Path) -> None:
    args = DurableArgs(workdir=str(tmp_path), prompts=8, tick=0.0)
    run_life(args)
    before = audit(args)
    run_life(args)  # resumes from the last checkpoint: the stream is drained
    after = audit(args)
    assert after.clean and after.tokens_generated == before.tokens_generated
