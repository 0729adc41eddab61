"""``frontier audit``: the coverage check of a training-data log, on
hand-made good and bad logs, and its exit statuses and messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core import TrainLogWriter, fold_lineage, read_train_log
from frontier_core._audit import audit_lineage, audit_log
from frontier_core._cli import main


def write(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_clean_log_is_clean(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log",
        {"step": 0, "ordinals": [0, 1, 2]},
        {"dropped": [3]},
        {"step": 1, "ordinals": [4, 5]},
    )
    r = audit_log(log, 6)
    assert r.clean
    assert (r.trained_once, r.skipped, r.duplicated, r.dropped) == (5, (), (), (3,))
    assert r.steps == 2


def test_skips_duplicates_and_trained_and_dropped(tmp_path: Path) -> None:
    log = write(
        tmp_path / "log",
        {"step": 0, "ordinals": [0, 1, 2]},
        {"step": 1, "ordinals": [2, 3]},  # 2 twice
        {"dropped": [3, 5]},  # 3 trained and dropped
        {"dropped": [6]},
        {"dropped": [6]},  # dropped twice
    )
    r = audit_log(log, 9)
    assert r.skipped == (4, 7, 8)
    assert r.duplicated == (2, 3, 6)
    assert r.dropped == (5,)
    assert r.trained_once == 2
    assert not r.clean


def test_an_ordinal_twice_in_one_step_is_duplicated(tmp_path: Path) -> None:
    r = audit_log(write(tmp_path / "log", {"step": 0, "ordinals": [0, 0, 1]}), 2)
    assert r.duplicated == (0,)


def test_the_last_execution_of_a_step_wins(tmp_path: Path) -> None:
    # No markers: a step re-executed after a kill replaces its first run.
    log = write(
        tmp_path / "log",
        {"step": 0, "ordinals": [0, 1]},
        {"step": 1, "ordinals": [2, 3]},
        {"step": 1, "ordinals": [2, 3]},
    )
    r = audit_log(log, 4)
    assert r.clean and r.discarded_steps == 1


def test_resume_markers_discard_the_dead_branch(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with TrainLogWriter(path) as w:
        w.step(0, [0, 1])
        checkpoint_records = w.records
        w.step(1, [2, 3])
        w.dropped([4])  # lost with the crash: regenerated after the resume
    with TrainLogWriter(path, resume_records=checkpoint_records) as w:
        w.step(1, [2, 3])
        w.step(2, [4, 5])
    r = audit_log(path, 6)
    assert r.clean and r.dropped == () and r.trained_once == 6
    assert r.discarded_steps == 1


def test_out_of_range_ordinals_fail(tmp_path: Path) -> None:
    r = audit_log(write(tmp_path / "log", {"step": 0, "ordinals": [0, 1, 7]}), 2)
    assert r.out_of_range == (7,) and not r.clean


def test_window_checks_each_step(tmp_path: Path) -> None:
    good = write(
        tmp_path / "good",
        {"step": 0, "ordinals": [1, 0]},
        {"step": 1, "ordinals": [2, 3]},
        {"step": 2, "ordinals": [4]},
    )
    assert audit_log(good, 5, window=2).clean
    swapped = write(
        tmp_path / "bad",
        {"step": 0, "ordinals": [0, 2]},
        {"step": 1, "ordinals": [1, 3]},
        {"step": 2, "ordinals": [4]},
    )
    r = audit_log(swapped, 5, window=2)
    assert r.window_mismatch == (0, 1) and not r.skipped and not r.clean
    missing = write(tmp_path / "missing", {"step": 0, "ordinals": [0, 1]})
    assert audit_log(missing, 4, window=2).window_mismatch == (1,)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 40),
    data=st.data(),
)
def test_audit_partitions_the_stream(n: int, data: st.DataObject) -> None:
    """Every ordinal of the stream is exactly one of: trained once, skipped,
    duplicated or dropped; and the audit agrees with a naive count."""
    from frontier_core._trainlog import DropRecord, StepRecord

    ordinal = st.integers(0, max(0, n - 1)) if n else st.nothing()
    steps = data.draw(st.lists(st.lists(ordinal, max_size=5), max_size=8)) if n else []
    drops = data.draw(st.lists(st.lists(ordinal, min_size=1, max_size=3), max_size=3)) if n else []
    records: list[StepRecord | DropRecord] = [
        StepRecord(s, tuple(o), s + 1) for s, o in enumerate(steps)
    ]
    records += [DropRecord(tuple(o), 100 + i) for i, o in enumerate(drops)]
    r = audit_lineage(fold_lineage(records), n)
    times = [0] * n
    for group in steps + drops:
        for o in group:
            times[o] += 1
    dropped_once = {o for d in drops for o in d if times[o] == 1}
    assert r.skipped == tuple(o for o in range(n) if times[o] == 0)
    assert r.duplicated == tuple(o for o in range(n) if times[o] > 1)
    assert r.dropped == tuple(sorted(dropped_once))
    assert r.trained_once + len(r.skipped) + len(r.duplicated) + len(r.dropped) == n


# -- the command ---------------------------------------------------------


def test_cli_exit_statuses_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path / "good", {"step": 0, "ordinals": [0, 1]}, {"dropped": [2]})
    assert main(["audit", str(good), "--stream-len", "3"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["audit", str(good), "--stream-len", "4"]) == 1
    out = capsys.readouterr().out
    assert "skipped" in out and "[3]" in out and "FAILED" in out
    assert main(["audit", str(good), "--stream-len", "4", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["skipped"] == 1 and report["skipped_ordinals"] == [3]
    assert report["trained_once"] == 2 and report["dropped"] == 1


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        (
            '{"step": 0, "ordinals": [0]}\n{"step": 1, "ordin\n{"step": 2, "ordinals": [1]}\n',
            2,
            "not JSON",
        ),
        ('\ufeff{"step": 0, "ordinals": [0, 1]}\n', 1, "byte-order mark"),
        ('{"step": 0, "ordinals": [0]}\nnot json\n', 2, "not JSON"),
        ('{"step": 0, "ordinals": [0, "1"]}\n', 1, "not an int ordinal"),
        ('{"step": 0, "ordinals": [0, 1.5]}\n', 1, "not an int ordinal"),
        ('{"step": -1, "ordinals": []}\n', 1, "'step' must be"),
        ('\n{"steps": 0}\n', 2, "unknown record"),
        ("[1, 2]\n", 1, "JSON object"),
        ('{"step": 0, "ordinals": [0]}\n{"resume": 5}\n', 2, "resume keeps 5"),
        # A key twice: json.loads keeps the last; which is meant is not said.
        ('{"step": 0, "ordinals": [0], "ordinals": [0, 1]}\n', 1, "'ordinals' stands twice"),
        ('{"step": 0, "ordinals": [0]}\n{"step": 1, "step": 0, "ordinals": [1]}\n', 2, "twice"),
    ],
)
def test_cli_bad_input_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, line: int, reason: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    assert main(["audit", str(path), "--stream-len", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"frontier audit: {path}:{line}: "), err
    assert reason in err


def test_cli_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(tmp_path / "nope"), "--stream-len", "2"]) == 2
    assert "frontier audit:" in capsys.readouterr().err


def test_read_back_matches_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with TrainLogWriter(path) as w:
        w.step(0, [3, 1, 2])
        w.dropped([])  # an empty drop writes nothing
        w.dropped([0])
    assert len(list(read_train_log(path))) == 2
    assert audit_log(path, 4).clean


def test_window_work_follows_the_stream_not_a_step_number(tmp_path: Path) -> None:
    """A step numbered 10**12 in the log used to loop 10**12 times; now it
    is a mismatch like any other (the timeout only guards against a hang)."""
    import subprocess
    import sys

    path = tmp_path / "log.jsonl"
    path.write_text(
        '{"step": 0, "ordinals": [0, 1]}\n{"step": 1000000000000, "ordinals": [2, 3]}\n'
    )
    argv = ["audit", str(path), "--stream-len", "4", "--window", "2", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["window_mismatch"] == [1, 1000000000000]


# -- the log read whole, the work bounded by the log -----------------------------


@pytest.mark.parametrize(
    "tail",
    [b'{"step": 1, "ordi', b'{"step": 1, "ordinals": [1]}', b"\xff", b"x" * 100_000],
    ids=["torn", "complete-without-newline", "one-byte", "long"],
)
def test_a_last_line_without_its_newline_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tail: bytes
) -> None:
    """docs/cli.md promises exit 2 for a truncated line: the audit discarded
    a torn last line and exited 0, and dropped a complete last record that
    only lacked its newline (the lineage it proved was not the log's)."""
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"step": 0, "ordinals": [0]}\n' + tail)
    assert main(["audit", str(path), "--stream-len", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"frontier audit: {path}:2: truncated"), err
    assert f"({len(tail)} bytes)" in err
    path.write_bytes(b'{"step": 0, "ordinals": [0]}\n' + tail + b"\n")
    assert main(["audit", str(path), "--stream-len", "1"]) in (0, 1, 2)
    # Whole, a complete record reads: step 1 trained ordinal 1, out of range.
    if tail.endswith(b"]}"):
        assert main(["audit", str(path), "--stream-len", "2"]) == 0


@pytest.mark.parametrize(
    ("argv", "skipped", "off"),
    [
        (["--stream-len", "1000000000"], 999_999_998, None),
        (["--stream-len", "1000000000", "--window", "1"], 999_999_998, 1_000_000_000),
        (["--stream-len", "1000000000", "--window", "1000000000000"], 999_999_998, 1),
        (["--stream-len", str(2**70)], 2**70 - 2, None),
    ],
    ids=["stream", "window-1", "window-huge", "stream-2^70"],
)
def test_the_audit_works_in_the_logs_size_not_the_streams(
    tmp_path: Path, argv: list[str], skipped: int, off: int | None
) -> None:
    """``--stream-len 1000000000`` exited 3 on ``MemoryError``: the skipped
    ordinals were a tuple of the stream's length. They are ranges now, and
    so are the steps off their window; the JSON lists the first
    ``MAX_LISTED`` of each and every range."""
    import resource
    import subprocess
    import sys

    from frontier_core._audit import MAX_LISTED

    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 0, "ordinals": [0, 5]}\n')

    def capped() -> None:  # the audit of a one-line log needs no 1 GiB
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", "audit", str(path), *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=capped,
    )
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["skipped"] == skipped and report["trained_once"] == 2
    assert report["skipped_ranges"][:2] == [[1, 5], [6, int(argv[1])]]
    assert report["skipped_ordinals"][:5] == [1, 2, 3, 4, 6]
    assert len(report["skipped_ordinals"]) == MAX_LISTED
    if off is not None:
        listed = report["window_mismatch"]
        assert sum(b - a for a, b in report["window_mismatch_ranges"]) == off
        assert listed[0] == 0 and len(listed) == min(off, MAX_LISTED)


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "."], ids=["zero", "null", "dir"])
def test_a_device_or_a_directory_is_refused_before_a_read(
    capsys: pytest.CaptureFixture[str], path: str
) -> None:
    """``/dev/zero`` as the log read forever (``MemoryError``, exit 3)."""
    assert main(["audit", path, "--stream-len", "1"]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_a_closed_stdout_is_not_a_traceback(tmp_path: Path) -> None:
    """``frontier audit --json | head`` exited 3 with a ``BrokenPipeError``
    traceback; a closed reader is exit 141, as the shell reports SIGPIPE."""
    from ._pipes import closed_reader

    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 0, "ordinals": [0]}\n')
    status, err = closed_reader(["audit", str(path), "--stream-len", "3000000", "--json"], 60)
    assert status == 141
    assert b"Traceback" not in err
