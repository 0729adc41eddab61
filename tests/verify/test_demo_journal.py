"""``frontier demo --journal``: the sample-level async GRPO demo, with the
rollout journal, under real SIGKILLs at chosen points (a queued journal
append, the middle of a group commit, a compaction before and after it is in
place, right after a resume, and at random), audited sample by sample.

The kill points are tested here on their own (a forked child SIGKILLed at
the point, the journal inspected after), the per-sample audit on handmade
logs (it must catch a token lost, repeated or changed across a
continuation, an attempt trained twice, a group without all its samples),
and the whole demo end to end on a small stream.

The long run is a command, not a test:
    frontier demo --journal
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.journal import RolloutJournal, read_journal
from frontier_adapters.verify import _killpoints as kp
from frontier_adapters.verify.demo import (
    COUNTS,
    KILL_KINDS,
    audit_samples,
    journal_kill_schedule,
    run_demo,
)

from frontier_core import Lease, _cli
from frontier_core.journal import CommitPolicy, Mark, Progress, Sealed, TokenPayload

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

FP = "demo-journal-test"


def test_the_journal_kill_schedule_covers_every_kind_first() -> None:
    a = journal_kill_schedule(2, 6, 24)
    assert a == journal_kill_schedule(2, 6, 24) and a != journal_kill_schedule(3, 6, 24)
    assert sorted(k.at for k in a) == sorted(KILL_KINDS)  # each kind once
    assert a[0].at != "resume"  # the first life is a fresh start
    twelve = journal_kill_schedule(0, 12, 96)
    assert sorted(k.at for k in twelve) == sorted(KILL_KINDS * 2)
    for k in (*a, *twelve):
        if k.at == "resume":
            assert k.steps == 0 and 0.02 <= k.delay <= 0.2
        elif k.at == "random":
            assert k.steps >= 1 and 0 <= k.delay <= 0.12
        else:
            assert k.steps >= 1 and 1 <= k.count <= COUNTS[k.at]


def test_a_kill_point_fires_once_and_only_after_its_steps() -> None:
    point = kp.KillPoint("commit:2:3")
    passes = []
    for steps in (0, 1, 2, 2, 2, 2, 3):
        point.steps = steps
        passes.append(point.passed("commit") or point.passed("append"))
    assert passes == [False, False, False, False, True, False, False]
    assert not kp.KillPoint("").passed("commit")
    for bad in ("nowhere:1:1", "commit:1", "commit:-1:1", "commit:1:0"):
        with pytest.raises(ValueError):
            kp.KillPoint(bad)


def _payload(n: int, version: int = 0) -> TokenPayload:
    return TokenPayload.of(range(10, 10 + n), [-0.5] * n, version)


def _journal(path: Path, spec: str, delay: float = 60.0) -> kp.KillPointJournal:
    return kp.KillPointJournal(
        path,
        fingerprint=FP,
        lineage="L",
        policy=CommitPolicy(max_delay=delay),
        progress_every=2,
        point=kp.KillPoint(spec),
    )


def _sigkilled_at_the_point(monkeypatch: pytest.MonkeyPatch, work: Callable[[], None]) -> None:
    """Run ``work`` in a forked child that must die of a SIGKILL at its kill
    point (the point SIGKILLs its own process when nobody else does)."""
    monkeypatch.setattr(kp, "KILL_WAIT", 0.0)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            work()
        finally:
            os._exit(3)  # the kill point never fired
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def test_killed_in_a_group_commit_the_journal_keeps_the_whole_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal"

    def work() -> None:
        journal = _journal(path, "commit:0:2")
        journal.sealed(Lease(0, 0, 0), _payload(3))
        journal.writer.sync()  # the first commit: whole
        journal.sealed(Lease(0, 1, 1), _payload(2))
        journal.progress(Lease(1, 0, 2), _payload(2))
        journal.writer.sync()  # the second: torn in its last frame, and the kill

    _sigkilled_at_the_point(monkeypatch, work)
    decoded = read_journal(path, fingerprint=FP, lineage="L")
    assert decoded.torn is not None and decoded.torn.length > 0
    assert decoded.records == (Sealed(0, 0, 0, _payload(3)), Sealed(0, 1, 1, _payload(2)))
    journal = RolloutJournal(path, fingerprint=FP, lineage="L")  # cuts the torn tail
    assert journal.writer.torn is not None and journal.writer.durable == 2
    journal.close()
    assert read_journal(path, fingerprint=FP, lineage="L").torn is None


def test_killed_on_a_queued_append_nothing_of_it_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal"

    def work() -> None:
        journal = _journal(path, "append:0:2")
        journal.sealed(Lease(0, 0, 0), _payload(3))
        journal.writer.sync()
        journal.progress(Lease(0, 1, 1), _payload(2))  # queued, then the kill

    _sigkilled_at_the_point(monkeypatch, work)
    decoded = read_journal(path, fingerprint=FP, lineage="L")
    assert decoded.torn is None and decoded.records == (Sealed(0, 0, 0, _payload(3)),)


@pytest.mark.parametrize("point", ["compact", "compacted"])
def test_killed_in_a_compaction_the_journal_is_the_old_one_or_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    path = tmp_path / "journal"

    def work() -> None:
        journal = _journal(path, f"{point}:0:1")
        journal.sealed(Lease(0, 0, 0), _payload(3))
        journal.progress(Lease(5, 1, 1), _payload(2))
        journal.mark(7)
        journal.compact(range(3, 1 << 62))  # keeps ordinal 5 only

    _sigkilled_at_the_point(monkeypatch, work)
    leftovers = list(tmp_path.glob(".journal.tmp-*"))
    decoded = read_journal(path, fingerprint=FP, lineage="L")
    if point == "compact":  # the compacted journal was not in place yet
        assert len(leftovers) == 1
        assert decoded.header.base == 0 and decoded.records == (
            Sealed(0, 0, 0, _payload(3)),
            Progress(5, 1, 1, _payload(2)),
            Mark(7),
        )
        assert read_journal(leftovers[0], fingerprint=FP, lineage="L").records == (
            Progress(5, 1, 1, _payload(2)),
        )
    else:  # in place: it stands for every record up to its base
        assert leftovers == []
        assert decoded.header.base == 3
        assert decoded.records == (Progress(5, 1, 1, _payload(2)),)
    decoded.check_mark(3, 7)  # the checkpoint's mark holds either way
    RolloutJournal(path, fingerprint=FP, lineage="L").close()  # removes the leftover
    assert list(tmp_path.glob(".journal.tmp-*")) == []


# -- the per-sample audit ----------------------------------------------------------


def _lines(path: Path, *objs: object, torn: str = "") -> None:
    with open(path, "a") as f:
        for obj in objs:
            f.write(json.dumps(obj) + "\n")
        f.write(torn)


def _run(tmp_path: Path, group0: list[list[object]], *, extra: bool = False) -> Path:
    """A two-life run of two prompts of two samples each. Life 1 generated
    sibling 0 of prompt 0 up to two tokens (attempt 0) and sealed sibling 1
    (attempt 1), trained a step that died with it; life 2 continued sibling
    0 (attempt 2, after the prefix) and generated prompt 1 whole."""
    work = tmp_path / "run"
    work.mkdir()
    _lines(
        work / "generated-1.jsonl",
        {"r": "o0-s0-a0", "at": 0, "t": [5]},
        {"r": "o0-s0-a0", "at": 1, "t": [6]},
        {"r": "o0-s1-a1", "at": 0, "t": [7, 8]},
        {"r": "o0-s1-a1", "at": 2, "t": [9], "f": "stop"},
        {"r": "o1-s0-a9", "at": 0, "t": [1, 1], "f": "length"},  # a dead branch's
        torn='{"r": "o1-s0-a9", "at": 2, "t"',
    )
    _lines(
        work / "generated-2.jsonl",
        {"r": "o0-s0-a2", "at": 2, "t": [3], "f": "stop"},
        {"r": "o1-s0-a3", "at": 0, "t": [4, 4], "f": "length"},
        {"r": "o1-s1-a4", "at": 0, "t": [2]},
        {"r": "o1-s1-a4", "at": 1, "t": [], "f": "stop"},
    )
    step0 = {"0": group0, "1": [[3, [4, 4]], [4, [2]]]}
    dead = {"step": 0, "groups": {"1": [[9, [1, 1]], [9, [1, 1]]]}}
    _lines(work / "samples.jsonl", {"resume": 0}, dead, {"resume": 0}, {"step": 0, "groups": step0})
    steps = [{"step": 0, "ordinals": [0, 1]}]
    if extra:
        steps.append({"step": 1, "ordinals": [2]})
    _lines(work / "train_log.jsonl", {"step": 0, "ordinals": [1]}, {"resume": 0}, *steps)
    return work


def test_the_sample_audit_checks_each_sample_against_what_was_generated(
    tmp_path: Path,
) -> None:
    good = [[2, [5, 6, 3]], [1, [7, 8, 9]]]
    audit = audit_samples(_run(tmp_path, good), 2)
    assert audit.clean, audit
    assert (audit.groups, audit.samples) == (2, 4)
    assert audit.tokens_needed == 9 and audit.by_life == (7, 4)
    assert audit.tokens_redone == 2  # the dead branch's two tokens


@pytest.mark.parametrize(
    ("group0", "broken"),
    [
        ([[2, [5, 6, 6, 3]], [1, [7, 8, 9]]], "unexplained"),  # a token repeated
        ([[2, [5, 3]], [1, [7, 8, 9]]], "unexplained"),  # a token lost
        ([[2, [5, 0, 3]], [1, [7, 8, 9]]], "unexplained"),  # a prefix not generated
        ([[2, [5, 6, 3]], [1, [7, 8]]], "unexplained"),  # a sample cut short
        ([[0, [5, 6]], [1, [7, 8, 9]]], "unexplained"),  # a prefix is no sample
        ([[2, [5, 6, 3]], [1, [7, 8, 9, 9]]], "unexplained"),  # a token past the end
        ([[2, [5, 6, 3]], [2, [5, 6, 3]]], "attempts_twice"),
        ([[2, [5, 6, 3]]], "wrong_size"),
    ],
)
def test_the_sample_audit_catches_a_broken_sample(
    tmp_path: Path, group0: list[list[object]], broken: str
) -> None:
    audit = audit_samples(_run(tmp_path, group0), 2)
    assert not audit.clean and getattr(audit, broken), audit


def test_the_sample_audit_compares_the_lineage_with_the_training_log(tmp_path: Path) -> None:
    good = [[2, [5, 6, 3]], [1, [7, 8, 9]]]
    audit = audit_samples(_run(tmp_path, good, extra=True), 2)
    assert audit.log_mismatch == (1,) and not audit.clean


# -- end to end ----------------------------------------------------------------------


def test_demo_journal_refuses_what_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli.main(["demo", "--journal", "--mode", "legacy"]) == 2
    assert "no mode 'legacy'" in capsys.readouterr().err
    # The CPU engine only (without vLLM installed, refused for that first).
    assert _cli.main(["demo", "--journal", "--engine", "vllm"]) == 2
    with pytest.raises(ValueError, match="CPU engine"):
        run_demo(kills=1, prompts=8, journal=True, engine="vllm")
    with pytest.raises(ValueError, match="modes must be among"):
        run_demo(kills=1, prompts=8, journal=True, modes=("frontier",))


def _demo(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str, kills: int) -> Any:
    code = _cli.main(
        ["demo", "--journal", "--mode", mode, "--prompts", "96", "--kills", str(kills),
         "--seed", "1", "--json", "--workdir", str(tmp_path / "runs")]
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    run = out[mode]
    audit, samples = run["audit"], run["samples"]
    assert audit["clean"] and audit["skipped"] == 0 and audit["duplicated"] == 0
    assert audit["trained_once"] + audit["dropped"] == 96
    assert samples["clean"] and samples["samples"] == 8 * samples["groups"]
    assert samples["groups"] == audit["trained_once"]
    assert samples["tokens_generated"] >= samples["tokens_needed"]
    # Every kill landed where it was planned.
    assert run["kills"] == kills and run["kills_at"] == [k["at"] for k in out["schedule"]]
    assert len(samples["tokens_by_life"]) == run["lives"] == kills + 1
    return run


def test_demo_journal_under_real_sigkills_loses_and_duplicates_no_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _demo(tmp_path, capsys, "journal", 6)
    assert sorted(run["kills_at"]) == sorted(KILL_KINDS)  # each kind once
    # The kill in a group commit left a torn tail, the one in a compaction
    # a temporary file: the next open removed both.
    assert run["resumes"]["torn_tails"] >= 1 and run["resumes"]["leftovers"] >= 1
    # The resumes brought back sealed siblings and continued prefixes.
    assert run["resumes"]["reused"] > 0 and run["counters"]["continued"] > 0
    # A kill costs the journal at most what was not durable yet: per sample
    # in flight (96) a few tokens since its last progress record, plus a
    # stale eviction's whole group now and then.
    redone = run["samples"]["tokens_redone"]
    assert redone <= 6 * 96 * 4 + 64 * run["counters"]["evicted"], redone


def test_demo_coverage_only_regenerates_but_loses_and_duplicates_no_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _demo(tmp_path, capsys, "coverage", 3)
    assert run["resumes"]["reused"] == 0 and run["counters"].get("continued", 0) == 0
