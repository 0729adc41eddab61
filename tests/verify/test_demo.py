"""``frontier demo`` end to end: real worker processes SIGKILLed at seeded
moments and resumed until the stream is done, then audited. The frontier
lineage must cover every prompt exactly once (or drop it on record); the
legacy live cursor, under the same kills, must lose some.

The default demo (1536 prompts, 6 kills per mode) is a command, not a test:
    frontier demo
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.verify.demo import buckets, kill_schedule, sparkline

from frontier_core import _cli

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


def test_kill_schedule_is_seeded_and_leaves_room_to_finish() -> None:
    a = kill_schedule(3, 6, 24)
    assert a == kill_schedule(3, 6, 24) and a != kill_schedule(4, 6, 24)
    assert len(a) == 6 and sum(k.steps for k in a) < 24
    assert all(k.steps >= 1 and 0 <= k.delay <= 0.12 for k in a)


def test_reward_curve_helpers() -> None:
    assert buckets([0.0, 1.0, 0.5, 0.5], 2) == [0.5, 0.5]
    assert buckets([1.0], 8) == [1.0] and buckets([], 8) == []
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert sparkline([0.1, 0.2], top=0.2) == "▅█"


def test_demo_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--kills", "-1"], ["--prompts", "0"]):
        with pytest.raises(SystemExit) as exc:
            _cli.main(["demo", *bad])
        assert exc.value.code == 2
    assert "must be >=" in capsys.readouterr().err


def test_the_rigs_commands_import_only_what_they_run() -> None:
    """``python -m frontier_adapters.verify``: the listing imports no
    framework, and a demo worker's options never import Ray."""
    code = (
        "import sys\n"
        "from frontier_adapters.verify.__main__ import main\n"
        "for argv in (['--help'], ['grpo-worker', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0\n"
        "    print(sorted({'torch', 'ray'} & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    lines = out.stdout.splitlines()
    assert all(c in out.stdout for c in ("grpo-worker", "torch-torture", "ray-torture"))
    assert lines.count("[]") == 1 and lines[-1] == "['torch']"
    assert "--skip-buffer-restore" in out.stdout


def test_demo_under_real_sigkills_frontier_loses_and_duplicates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "curve.png"
    code = _cli.main(
        ["demo", "--quick", "--seed", "1", "--json", "--plot", str(plot),
         "--workdir", str(tmp_path / "runs")]
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    stream_len = out["stream_len"]
    frontier, legacy = out["frontier"], out["legacy"]
    assert frontier["kills"] >= 5 and legacy["kills"] >= 5
    audit = frontier["audit"]
    assert audit["skipped"] == 0 and audit["duplicated"] == 0 and audit["out_of_range"] == 0
    assert audit["trained_once"] + audit["dropped"] == stream_len
    # The same kills cost the live cursor the prompts that were in flight.
    assert legacy["audit"]["skipped"] > 0
    # Training ran across the kills: one reward per step of the lineage.
    assert len(frontier["rewards"]) == audit["steps"] >= stream_len // 8
    assert plot.stat().st_size > 0
    log = tmp_path / "runs" / "frontier" / "train_log.jsonl"
    assert log.read_text().count('{"resume":') >= 5
