"""Real kill tests of the torch run sample by sample, with the rollout
journal (``torch-run --durability journal``): SIGKILLs in journal appends,
in group commits (a torn tail), in compactions, just after them, right after
a resume, at random moments, at boot and inside checkpoint writes; then
``frontier audit`` judges the prompt-level log and the per-sample audit
every sample of the surviving lineage (every prompt once, exactly its n
siblings, each from its own attempt, each exactly the engine's full token
sequence), and counts the tokens generated again. The lower levels of the
journal (sealed samples only, coverage only) go through the same.

The long runs are commands, not tests:
    python -m frontier_adapters.verify torch-torture --durability journal \
        --workdir /tmp/t --kills 100
    python -m frontier_adapters.verify torch-torture --durability journal \
        --progress-every 0 [--reuse nothing] --workdir /tmp/t0 --kills 100
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import attrs
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.verify import _killpoints as kp
from frontier_adapters.verify.__main__ import main
from frontier_adapters.verify._files import read_lines
from frontier_adapters.verify._sample_audit import audit_log, digest, full_sample
from frontier_adapters.verify.torch_job import (
    GENERATED_LOG,
    KILLS,
    LOG_NAME,
    SAMPLES_LOG,
    RunArgs,
    TortureResult,
    run,
    run_audit,
    torture,
)

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

SEED = 5


def test_sigkilled_journal_run_trains_every_sample_exactly_once(tmp_path: Path) -> None:
    # 20 rows x 2 epochs, shuffled, 4 siblings a prompt: 160 samples.
    args = RunArgs(
        str(tmp_path), durability="journal", rows=20, seed=1, write_pause=0.01, progress_every=4
    )
    result = torture(args, kills=8, timeout=240)
    assert result.kills >= 8 and result.lives == result.kills + 1  # then one to the end
    # Each kind of kill happened, and a commit kill left a torn tail that a
    # later open cut.
    assert set(KILLS["journal"]) <= set(result.kills_at), result.kills_at
    assert result.in_write_kills >= 1 and result.torn_tails >= 1
    # ``frontier audit``: every prompt trained or dropped exactly once.
    assert result.audit_exit == 0 and result.audit["clean"] is True
    assert result.skipped == () and result.duplicated == ()
    assert result.trained_once + result.dropped == result.stream_len == 40
    # The per-sample audit of the same lineage.
    samples = result.samples
    assert samples is not None
    assert samples.clean, samples
    assert samples.lost == () and samples.duplicated == () and samples.bad_groups == ()
    assert samples.trained == result.trained_once and len(samples.dropped) == result.dropped
    assert samples.lives >= 2
    # Redone tokens are counted, and bounded: a kill loses at most what was
    # not durable yet, per sibling in flight (7 groups of 4) the tokens since
    # its last progress record and those of the group commit not synced yet.
    assert samples.tokens_needed > 0
    assert samples.tokens_redone >= 0
    assert samples.tokens_redone <= result.kills * 7 * 4 * 2 * 4
    assert samples.tokens_generated == (
        samples.tokens_needed + samples.tokens_failed + samples.tokens_redone
    )
    assert result.clean


def test_sigkilled_journal_run_at_coverage_only_trains_every_sample_once(tmp_path: Path) -> None:
    """The journal at its lowest level: no progress records, nothing reused
    (every unfinished sample generated again; the journal fences and
    reserves attempts only), a checkpoint every other step (a resume
    replays a dead branch of up to two steps): the same audits, fewer
    kills. (Sealed samples only, ``--progress-every 0`` alone, takes the
    paths of both tortures: the long run is the command above.)"""
    args = RunArgs(
        str(tmp_path),
        durability="journal",
        rows=10,
        seed=3,
        write_pause=0.01,
        checkpoint_every=2,
        reuse="nothing",
        progress_every=0,
    )
    result = torture(args, kills=3, timeout=240)
    assert result.audit_exit == 0 and result.skipped == () and result.duplicated == ()
    samples = result.samples
    assert samples is not None and samples.clean, samples
    assert samples.trained + len(samples.dropped) == result.stream_len == 20
    assert samples.lives >= 2 and samples.tokens_redone >= 0
    assert result.clean


@pytest.mark.parametrize("fail_rate", [0.15, 0.0])
def test_an_uninterrupted_journal_run_generates_each_kept_token_once(
    tmp_path: Path, fail_rate: float
) -> None:
    """Without kills nothing is redone: every token the pool made is in a
    trained sample or in an attempt the job failed; failed attempts that
    answered late were fenced. Without failures, each token is made once."""
    args = RunArgs(
        str(tmp_path), durability="journal", rows=20, tick=0.0, seed=SEED, fail_rate=fail_rate
    )
    assert run(args) == 0
    generated = read_lines(tmp_path / GENERATED_LOG)
    result = audit_log(
        read_lines(tmp_path / SAMPLES_LOG), generated, prompts=40, samples=4, seed=SEED
    )
    assert result.clean and result.lives == 1 and result.trained == 40
    assert result.tokens_redone == 0
    assert (result.tokens_failed > 0) == (fail_rate > 0)
    assert (sum(line["fenced"] for line in generated) > 0) == (fail_rate > 0)
    if not fail_rate:
        assert result.tokens_generated == result.tokens_needed
    code, report = run_audit(tmp_path / LOG_NAME, 40)
    assert code == 0 and report["trained_once"] == 40
    # A rerun resumes from the last checkpoint: the stream is drained.
    assert run(args) == 0
    again = audit_log(
        read_lines(tmp_path / SAMPLES_LOG),
        read_lines(tmp_path / GENERATED_LOG),
        prompts=40,
        samples=4,
        seed=SEED,
    )
    assert again.clean and again.tokens_generated == result.tokens_generated


@pytest.mark.parametrize(
    "bad",
    [
        ["--kill-at", "append:0:1"],  # kill points are the journal's
        ["--durability", "journal", "--samples", "0"],
        ["--durability", "journal", "--progress-every", "-1"],
        ["--checkpoint-every", "0"],
    ],
)
def test_bad_options_exit_2_naming_them_and_write_nothing(
    tmp_path: Path, bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("torch-run", "torch-torture"):
        try:
            code = main([command, "--workdir", str(tmp_path / "w"), *bad])
        except SystemExit as exc:  # argparse's: the torture sets --kill-at itself
            code = exc.code
        assert code == 2
        assert bad[-2] in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_a_kill_point_journal_reports_the_torn_tail_it_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A life with kill points opens its journal twice (the second time
    with the kill-point writer): its resume still reports the torn tail the
    first open cut, as the ready line's ``torn`` and ``torn_tails`` need."""
    from frontier_core.journal import CommitPolicy, Reuse

    def journal(spec: str) -> kp.KillPointJournal:
        return kp.KillPointJournal(
            tmp_path / "journal",
            fingerprint="fp",
            lineage="L",
            policy=CommitPolicy(max_delay=60.0),
            progress_every=2,
            point=kp.KillPoint(spec),
        )

    monkeypatch.setattr(kp, "KILL_WAIT", 0.0)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            j = journal("commit:0:2")
            j.mark(0)  # the first commit, whole
            j.mark(1)  # the second, torn in its frame, and the kill
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    j = journal("append:99:1")
    got = j.recover(
        None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
    )
    assert got.torn > 0 and j.writer.torn is None  # the reopened writer found none
    j.close()


# -- the audit fails on bad logs, built by hand -------------------------------------


def _sample(o: int, s: int, a: int) -> list[Any]:
    want = full_sample(o, s, SEED)
    return [s, a, len(want), digest(want)]


def _changed(o: int, s: int, a: int) -> list[Any]:
    """The right length, one token wrong (a continuation that skipped or
    repeated a token would look like this)."""
    tokens = full_sample(o, s, SEED)
    tokens[len(tokens) // 2] += 1
    return [s, a, len(tokens), digest(tokens)]


def _group(o: int, attempts: list[int]) -> list[list[Any]]:
    return [_sample(o, s, a) for s, a in enumerate(attempts)]


def _audit(lines: list[dict[str, Any]], prompts: int = 3) -> Any:
    return audit_log(lines, [], prompts=prompts, samples=2, seed=SEED)


GOOD = [
    {"resume": 0},
    {"step": 1, "groups": {"0": _group(0, [0, 1]), "1": _group(1, [2, 3])}},
    {"step": 2, "groups": {"2": _group(2, [4, 5])}},
]


def test_the_audit_passes_a_good_log_and_follows_the_lineage() -> None:
    assert _audit(GOOD).clean
    # A dead branch's step 2, discarded by the resume from step 1, then
    # trained again: once in the surviving lineage.
    lines = [*GOOD, {"resume": 1}, {"step": 2, "groups": {"2": _group(2, [6, 7])}}]
    result = _audit(lines)
    assert result.clean and result.lives == 2 and result.trained == 3
    # A drop survives a resume from a checkpoint after it, not one before.
    kept = [GOOD[0], GOOD[1], {"dropped": [2], "at": 1}, {"resume": 2}]
    assert _audit(kept).clean and _audit(kept).dropped == (2,)
    lost = [GOOD[0], GOOD[1], {"dropped": [2], "at": 1}, {"resume": 1}]
    assert _audit(lost).lost == (2,)


@pytest.mark.parametrize(
    ("name", "lines", "lost", "duplicated", "bad"),
    [
        ("a prompt never trained", GOOD[:2], (2,), (), ()),
        (
            "a prompt trained twice",
            [*GOOD, {"step": 3, "groups": {"1": _group(1, [8, 9])}}],
            (),
            (1,),
            (),
        ),
        (
            "trained and dropped",
            [*GOOD, {"dropped": [0], "at": 2}],
            (),
            (0,),
            (),
        ),
        (
            "a sibling missing",
            [GOOD[0], GOOD[1], {"step": 2, "groups": {"2": [_sample(2, 0, 4)]}}],
            (),
            (),
            (2,),
        ),
        (
            "a sibling twice",
            [GOOD[0], GOOD[1], {"step": 2, "groups": {"2": [_sample(2, 0, 4), _sample(2, 0, 5)]}}],
            (),
            (),
            (2,),
        ),
        (
            "an attempt used twice in a group",
            [GOOD[0], GOOD[1], {"step": 2, "groups": {"2": _group(2, [4, 4])}}],
            (),
            (),
            (2,),
        ),
        (
            "an attempt reused by another prompt",
            [GOOD[0], GOOD[1], {"step": 2, "groups": {"2": _group(2, [3, 5])}}],
            (),
            (),
            (2,),
        ),
        (
            "a sample one token short",
            [
                GOOD[0],
                GOOD[1],
                {
                    "step": 2,
                    "groups": {
                        "2": [
                            [
                                0,
                                4,
                                len(full_sample(2, 0, SEED)) - 1,
                                digest(full_sample(2, 0, SEED)[:-1]),
                            ],
                            _sample(2, 1, 5),
                        ]
                    },
                },
            ],
            (),
            (),
            (2,),
        ),
        (
            "a sample with one token changed",
            [GOOD[0], GOOD[1], {"step": 2, "groups": {"2": [_changed(2, 0, 4), _sample(2, 1, 5)]}}],
            (),
            (),
            (2,),
        ),
        (
            "a sample with another sibling's tokens",
            [
                GOOD[0],
                GOOD[1],
                {"step": 2, "groups": {"2": [[0, 4, *_sample(2, 1, 4)[2:]], _sample(2, 1, 5)]}},
            ],
            (),
            (),
            (2,),
        ),
    ],
)
def test_the_audit_fails_a_bad_log(
    name: str,
    lines: list[dict[str, Any]],
    lost: tuple[int, ...],
    duplicated: tuple[int, ...],
    bad: tuple[int, ...],
) -> None:
    result = _audit(lines)
    assert not result.clean, name
    assert (result.lost, result.duplicated, result.bad_groups) == (lost, duplicated, bad), name


def test_the_torture_verdict_needs_the_per_sample_audit() -> None:
    """``TortureResult.clean`` is ``frontier audit``'s verdict and the
    per-sample audit's: a clean coverage report with a bad sample is not
    clean."""
    bad = _audit([GOOD[0], GOOD[1], {"step": 2, "groups": {"2": _group(2, [3, 5])}}])
    good = _audit(GOOD)
    base = TortureResult(
        kills=0,
        in_write_kills=0,
        lives=1,
        stream_len=3,
        trained_once=3,
        dropped=0,
        skipped=(),
        duplicated=(),
        audit={"clean": True},
        audit_exit=0,
        seconds=0.0,
        samples=good,
    )
    assert base.clean
    assert not attrs.evolve(base, samples=bad).clean
    assert not attrs.evolve(base, audit={"clean": False}, audit_exit=1).clean
