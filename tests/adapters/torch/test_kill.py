"""Real kill tests: a tiny training run is SIGKILLed at random moments (some
inside a checkpoint write) and resumed until its stream is done; then
``frontier audit`` must have run on the training log and found every ordinal
trained or dropped exactly once.

The long run is a command, not a test:
    python -m frontier_adapters.verify torch-torture --workdir /tmp/torture --kills 100
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.verify.torch_job import RunArgs, torture


def test_sigkilled_training_run_covers_every_prompt_once(tmp_path: Path) -> None:
    # 20 rows x 2 epochs, shuffled: the stream crosses an epoch boundary.
    args = RunArgs(str(tmp_path), rows=20, epochs=2, seed=1, write_pause=0.01)
    result = torture(args, kills=10, timeout=150)
    assert result.kills >= 10 and result.samples is None
    assert result.in_write_kills >= 1
    # The audit ran, on this log and this stream, and its verdict is clean.
    assert result.audit_exit == 0
    assert result.audit["clean"] is True
    assert result.audit["stream_len"] == result.stream_len == 40
    assert result.audit["steps"] > 0 and result.audit["discarded_steps"] >= 0
    assert result.skipped == () and result.duplicated == ()
    assert result.trained_once + result.dropped == result.stream_len
    assert result.clean


def test_the_torture_reports_the_audit_verdict(tmp_path: Path) -> None:
    """The torture's audit is the ``frontier audit`` command: a violated log
    gives exit 1 and its report, an unreadable one raises."""
    from frontier_adapters.verify.torch_job import run_audit

    log = tmp_path / "train_log.jsonl"
    log.write_text('{"step": 0, "ordinals": [0, 1]}\n{"step": 1, "ordinals": [1]}\n')
    code, report = run_audit(log, 3)
    assert code == 1 and report["clean"] is False
    assert report["skipped_ordinals"] == [2] and report["duplicated_ordinals"] == [1]
    log.write_text("not json\n")
    with pytest.raises(RuntimeError, match="frontier audit exited with 2"):
        run_audit(log, 3)
