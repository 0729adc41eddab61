"""The TRL example (``python -m frontier_adapters.examples.trl_grpo``) as its
docstring promises: SIGKILLed mid-run (its whole process group) and sent a
SIGTERM in a later life (it drains and exits 143), then started again on the
same directory, it trains every prompt exactly once."""

from __future__ import annotations

import signal
from pathlib import Path

from ...examples._lives import life
from ._need import need_trl

need_trl()

from frontier_core._audit import audit_log  # noqa: E402

STREAM_LEN = 32  # the example's 16 rows, 2 epochs
EXAMPLE = ["-m", "frontier_adapters.examples.trl_grpo"]
#: One intra-op thread: two on these shared cores made GRPO steps ~50x slower.
THREADS = {"OMP_NUM_THREADS": "1"}


def test_the_example_trains_every_prompt_once_across_a_sigkill_and_a_sigterm(
    tmp_path: Path,
) -> None:
    argv = [*EXAMPLE, str(tmp_path / "out")]
    # SIGKILLed, then a notice it drains at a block boundary (exit 143), then to its end.
    assert life(argv, 3, env=THREADS)[0]
    assert life(argv, 3, sig=signal.SIGTERM, env=THREADS)[0]
    assert not life(argv, None, env=THREADS)[0]
    out = tmp_path / "out"
    report = audit_log(out / "frontier_train_log.jsonl", STREAM_LEN)
    assert report.clean and report.trained_once == STREAM_LEN, report
