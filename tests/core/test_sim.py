"""The async GRPO simulator: determinism, the seed's A/B, the kill/resume
torture sweep, the torn checkpoint, and the ``frontier simulate`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core import FailurePolicy
from frontier_core._audit import audit_log
from frontier_core._cli import main
from frontier_core._trainlog import ResumeRecord, StepRecord, read_train_log
from frontier_core.sim import (
    CheckpointStore,
    Kill,
    KillKind,
    Workload,
    _report,
    random_workload,
    run_ab,
    run_mode,
    simulate,
)
from frontier_core.sim._frontier import FrontierBackend
from frontier_core.sim._legacy import LegacyBackend
from frontier_core.sim._pipeline import Saved

SMALL = Workload(dataset_len=96, prompts_per_step=8, batch_size=8, workers=16)


def frontier_is_exact(result: _report.ABResult) -> None:
    """Nothing skipped, nothing duplicated, and every ordinal of the stream
    either trained once or dropped on purpose."""
    f = result.frontier.audit
    assert f.skipped == () and f.duplicated == () and f.out_of_range == (), result.workload
    assert f.trained_once + len(f.dropped) == result.workload.stream_len, result.workload
    assert result.frontier.stats.reached == result.workload.stream_len


# -- determinism ---------------------------------------------------------


def test_a_run_is_a_function_of_its_seed(tmp_path: Path) -> None:
    w = attrs.evolve(SMALL, failure_rate=0.1, on_failure=FailurePolicy.RETRY, shuffle=True)
    a = run_ab(w, tmp_path / "a")
    b = run_ab(w, tmp_path / "b")
    assert a.kills == b.kills
    assert a.summary() == b.summary()
    for mode in ("legacy", "frontier"):
        assert (tmp_path / f"a.{mode}").read_bytes() == (tmp_path / f"b.{mode}").read_bytes()
    other = run_ab(attrs.evolve(w, seed=w.seed + 1))
    assert other.kills != a.kills


def test_both_modes_see_the_same_workload() -> None:
    w = attrs.evolve(SMALL, shuffle=True, epochs=2)
    # Lengths and failures are pure functions of (seed, ordinal, attempt).
    assert w.sibling_tokens(17, 2) == w.sibling_tokens(17, 2)
    n = w.dataset_len
    epochs = [[w.prompt_id(o) for o in range(e * n, (e + 1) * n)] for e in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(n))
    assert epochs[0] != epochs[1]  # a new order every epoch
    r = run_ab(w)
    assert r.legacy.reached_mean_tokens == r.frontier.reached_mean_tokens
    assert r.legacy.stats.kill_kinds.keys() <= {k.value for k in KillKind} | {"follow-up"}


# -- the seed's A/B ------------------------------------------------------


def test_default_scenario_reproduces_the_seed() -> None:
    """512 prompts, 32 per step, a checkpoint every step, kills mid-run:
    legacy loses a large, length-biased share; frontier loses nothing."""
    r = run_ab(Workload())
    legacy, frontier = r.legacy.summary(), r.frontier.summary()
    assert legacy["skipped"] >= 0.15 * legacy["reached"]
    assert legacy["skipped_mean_tokens"] > legacy["reached_mean_tokens"]
    assert frontier["skipped"] == 0 and frontier["duplicated"] == 0
    assert frontier["trained_once"] == 512 and frontier["regenerated"] > 0
    assert frontier["kills"] >= 4 and frontier["kills_in_flight"] >= 4


def test_seed_miniature_through_the_backends() -> None:
    """16 prompts in batches of 4: trained 0..4, retained {6, 7, 10}, in
    flight {5, 8, 9, 11}. Legacy loses them; frontier regenerates them."""
    w = Workload(dataset_len=16)
    outcomes = {}
    for backend in (LegacyBackend(w), FrontierBackend(w)):
        pulled = [o for _ in range(3) for o in backend.pull(4)]
        assert pulled == list(range(12))
        backend.dispatch(pulled)
        backend.buffer([0, 1, 2, 3, 4, 6, 7, 10])
        backend.train([0, 1, 2, 3, 4])
        record = backend.snapshot()
        backend.restore(record, load_buffer=True, evicted=[])
        outcomes[backend.name] = [o for _ in range(8) for o in backend.pull(4)]
    assert outcomes["legacy"] == [12, 13, 14, 15]
    assert outcomes["frontier"] == [5, 8, 9, 11, 12, 13, 14, 15]


# -- the torture sweep ---------------------------------------------------

CONFIGS = {
    "retry": dict(failure_rate=0.2, on_failure=FailurePolicy.RETRY, max_failures=3),
    "drop": dict(failure_rate=0.2, on_failure=FailurePolicy.DROP),
    "retry-once": dict(failure_rate=0.3, on_failure=FailurePolicy.RETRY, max_failures=1),
    "interleaved": dict(max_age=4, batch_size=5, prompts_per_step=7),
    "gap-fill": dict(batch_size=13, prompts_per_step=4, failure_rate=0.1),
    "no-buffer": dict(load_replay_buffer=False, failure_rate=0.1),
    "shuffled-epochs": dict(shuffle=True, epochs=3, dataset_len=40),
    "double-kills": dict(kills=0, torn_kills=0, after_resume_kills=3, double_kills=3),
    "torn": dict(kills=1, torn_kills=4, checkpoint_every=1, checkpoint_time=1.0),
    "stale": dict(targets=6, max_age=2, on_failure=FailurePolicy.RETRY),
    "one-worker": dict(workers=1, max_age=2),
    "sparse-checkpoints": dict(checkpoint_every=5, kills=6),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_named_configurations_lose_nothing(name: str, seed: int) -> None:
    r = run_ab(attrs.evolve(SMALL, seed=seed, **CONFIGS[name]))  # type: ignore[arg-type]
    frontier_is_exact(r)
    assert r.frontier.stats.kills >= 1


def test_the_named_configurations_exercise_their_paths() -> None:
    """The sweep is only as good as what it reaches: failures, drops,
    evictions, torn writes and follow-up kills all happen."""
    seen: dict[str, int] = {}
    for name in ("retry", "drop", "stale", "torn", "double-kills", "no-buffer"):
        for seed in (0, 1, 2):
            s = run_ab(attrs.evolve(SMALL, seed=seed, **CONFIGS[name])).frontier.summary()  # type: ignore[arg-type]
            for key in ("failures", "dropped", "evicted", "torn_checkpoints", "regenerated"):
                seen[key] = seen.get(key, 0) + int(s[key])
            seen["follow-up"] = seen.get("follow-up", 0) + s["kill_kinds"].get("follow-up", 0)
    assert all(seen.values()), seen


def test_random_configurations_lose_nothing() -> None:
    for seed in range(60):
        frontier_is_exact(run_ab(random_workload(seed, Workload())))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(1000, 10**9))
def test_hypothesis_random_configurations_lose_nothing(seed: int) -> None:
    frontier_is_exact(run_ab(random_workload(seed, Workload())))


# -- checkpoints ---------------------------------------------------------


def test_checkpoint_store_never_returns_a_torn_write() -> None:
    first = Saved("{}", 0, (), 0)
    store = CheckpointStore(first)
    store.write_part(Saved('{"x": 1}', 1, (), 1))
    assert store.latest() is first
    store.crash()
    assert store.latest() is first and store.torn == 1
    second = Saved('{"x": 2}', 2, (), 2)
    store.write_part(second)
    store.commit()
    assert store.latest() is second and store.commits == 1


def test_a_torn_checkpoint_leaves_the_previous_one_in_force(tmp_path: Path) -> None:
    w = attrs.evolve(SMALL, kills=0, torn_kills=1, after_resume_kills=0, double_kills=0)
    log = tmp_path / "log"
    log.write_bytes(b"")
    stats = simulate(w, FrontierBackend, (Kill(3.0, KillKind.TORN_CHECKPOINT),), log)
    assert stats.torn_checkpoints == 1 and stats.resumes == 1
    records = list(read_train_log(log))
    marker = next(i for i, r in enumerate(records) if isinstance(r, ResumeRecord))
    before = records[:marker]
    assert all(isinstance(r, StepRecord) for r in before)
    # The torn write was the checkpoint after the last step before the
    # kill; the resume went back to the one before it.
    resume = records[marker]
    assert isinstance(resume, ResumeRecord) and resume.records == len(before) - 1
    assert audit_log(log, w.stream_len).clean


def test_the_frontier_checkpoint_goes_through_json(tmp_path: Path) -> None:
    w = SMALL
    backend = FrontierBackend(w)
    backend.dispatch(backend.pull(8))
    record = json.loads(backend.snapshot())
    assert record["format"] == "frontier_core.samples" and record["ledger"]["cut"] == 0
    tampered = json.dumps({**record, "next_attempt": 3})
    with pytest.raises(ValueError, match="checksum"):
        backend.restore(tampered, load_buffer=True, evicted=[])


def test_a_deterministic_frontier_run_trains_exact_windows(tmp_path: Path) -> None:
    """No failures, batches of one step: every step trains exactly its
    window, kills and all, as the seed's Run A checked by hand."""
    r = run_mode(Workload(), "frontier", run_ab(Workload()).kills, tmp_path / "log")
    assert r.stats.kills >= 4
    assert audit_log(tmp_path / "log", 512, window=32).clean
    assert not audit_log(tmp_path / "log", 512, window=16).clean


# -- the command ---------------------------------------------------------


def test_simulate_default_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"legacy", "frontier"}
    for mode in out.values():
        for key in ("reached", "trained_once", "skipped", "duplicated", "dropped", "regenerated"):
            assert type(mode[key]) is int
    assert out["legacy"]["skipped"] > 0 and out["frontier"]["skipped"] == 0


def test_simulate_table_log_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    args = ["simulate", "--prompts", "64", "--step-prompts", "8", "--batch-size", "8"]
    args += ["--log", str(tmp_path / "run"), "--plot", str(tmp_path / "cov.png")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "skipped (lost)" in out and "frontier: 0 skipped, 0 duplicated: OK" in out
    assert (tmp_path / "cov.png").stat().st_size > 1000
    assert main(["audit", str(tmp_path / "run.frontier"), "--stream-len", "64"]) == 0


def test_simulate_sweep_reports_the_worst(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--runs", "4", "--seed", "7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"] == 4 and out["frontier_failures"] == []
    assert 7 <= out["worst_legacy"]["seed"] <= 10


def test_simulate_exits_1_when_the_frontier_mode_loses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Stand the live-cursor backend in for the ledger: the check must fail.
    monkeypatch.setitem(_report.MODES, "frontier", LegacyBackend)
    assert main(["simulate"]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert main(["simulate", "--runs", "3", "--json"]) == 1


def test_simulate_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--failure-rate", "1.5"])
    with pytest.raises(SystemExit):
        main(["simulate", "--step-prompts", "0"])


@pytest.mark.parametrize("waste", [False, True])
@pytest.mark.parametrize("option", ["--log", "--plot"])
def test_an_output_path_that_cannot_be_written_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, waste: bool
) -> None:
    # It ran the whole simulation, then exited 3 with a traceback.
    target = tmp_path / "missing" / "out.png"
    argv = ["simulate", option, str(target), "--prompts", "64", *(["--waste"] if waste else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{option} {target}: no such directory" in err and "Traceback" not in err


def test_importing_the_core_does_not_import_the_simulator() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, frontier_core; print('frontier_core.sim' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "False"


def test_a_huge_max_age_costs_the_run_not_the_number() -> None:
    """Issue 21's class (work proportional to a number in the input):
    ``--max-age 1e23`` used to run for ever. More targets than the run has
    steps change nothing, so the run is the same as with exactly that many."""
    argv = ["-m", "frontier_core._cli", "simulate", "--prompts", "64", "--json"]
    runs = [
        subprocess.run(
            [sys.executable, *argv, "--max-age", age],
            capture_output=True,
            text=True,
            timeout=300,
        )
        for age in (str(10**23), "3")
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-300:] for r in runs]
    huge, steps = (json.loads(r.stdout) for r in runs)
    # 64 prompts, 32 a step: 2 steps, so at most 3 targets are ever in flight.
    assert huge == steps
    assert huge["frontier"]["skipped"] == 0 and huge["frontier"]["duplicated"] == 0
