"""Real kill tests: a tiny training run is SIGKILLed at random moments (some
inside a checkpoint write) and resumed until its stream is done; the training
log must show every ordinal trained or dropped exactly once.

The long run is a command, not a test:
    python -m frontier_adapters.examples.torch_job torture --workdir /tmp/torture --kills 100
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.examples.torch_job import torture


def test_sigkilled_training_run_covers_every_prompt_once(tmp_path: Path) -> None:
    # 20 rows x 2 epochs, shuffled: the stream crosses an epoch boundary.
    result = torture(tmp_path, kills=10, seed=1, rows=20, epochs=2, timeout=150)
    assert result.kills >= 10
    assert result.in_write_kills >= 1
    assert result.skipped == ()
    assert result.duplicated == ()
    assert result.trained + result.dropped == result.stream_len
    assert result.audit_exit in (None, 0)
