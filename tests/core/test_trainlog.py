"""The training-data log: the writer refuses what its reader would refuse, a
torn last record is discarded exactly and reported, and a reopened writer
never glues its resume marker onto the fragment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frontier_core import TrainLogError, TrainLogWriter, fold_lineage, read_train_log
from frontier_core._trainlog import ResumeRecord, StepRecord, TornTail


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda w: w.step(True, [0]), "step must be an int"),
        (lambda w: w.step(-1, [0]), "step must be an int"),
        (lambda w: w.step(1.0, [0]), "step must be an int"),
        (lambda w: w.step("1", [0]), "step must be an int"),
        (lambda w: w.step(0, [0, True]), "an ordinal must be an int"),
        (lambda w: w.step(0, [0, -3]), "an ordinal must be an int"),
        (lambda w: w.step(0, [0.5]), "an ordinal must be an int"),
        (lambda w: w.dropped(["7"]), "an ordinal must be an int"),
    ],
)
def test_the_writer_refuses_what_the_reader_would_refuse(
    tmp_path: Path, call: object, match: str
) -> None:
    path = tmp_path / "log.jsonl"
    with TrainLogWriter(path) as w:
        w.step(0, [1, 0])
        with pytest.raises(ValueError, match=match):
            call(w)  # type: ignore[operator]
        assert w.records == 1
    assert list(read_train_log(path)) == [StepRecord(0, (0, 1), 1)]


@pytest.mark.parametrize("bad", [True, -1, 1.5, "2"])
def test_resume_records_is_validated_before_the_file_is_touched(
    tmp_path: Path, bad: object
) -> None:
    path = tmp_path / "log.jsonl"
    with pytest.raises(ValueError, match="resume_records"):
        TrainLogWriter(path, resume_records=bad)  # type: ignore[arg-type]
    assert not path.exists()


def test_a_torn_tail_is_discarded_exactly_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with TrainLogWriter(path) as w:
        w.step(0, [0, 1])
        w.dropped([2])
    fragment = b'{"step":1,"ordinals":[3,4,5'
    with open(path, "ab") as f:
        f.write(fragment)
    records = list(read_train_log(path))
    assert records[-1] == TornTail(len(fragment), 3)
    lineage = fold_lineage(records)
    assert lineage.steps == {0: (0, 1)} and lineage.dropped == ((2,),)
    assert lineage.torn_tail_bytes == len(fragment)


def test_reopening_for_a_resume_truncates_the_fragment_before_the_marker(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with TrainLogWriter(path) as w:
        w.step(0, [0])
        w.step(1, [1])
    with open(path, "ab") as f:
        f.write(b'{"step":2,"ordi')
    with TrainLogWriter(path, resume_records=2) as w:
        assert w.torn_tail_bytes == len(b'{"step":2,"ordi')
        w.step(2, [2])
    records = list(read_train_log(path))
    assert records == [
        StepRecord(0, (0,), 1),
        StepRecord(1, (1,), 2),
        ResumeRecord(2, 3),
        StepRecord(2, (2,), 4),
    ]
    assert fold_lineage(records).steps == {0: (0,), 1: (1,), 2: (2,)}


def test_a_torn_line_in_the_middle_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"step":0,"ordinals":[0]}\n{"step":1,"ordi\n{"step":2,"ordinals":[2]}\n')
    with pytest.raises(TrainLogError) as info:
        list(read_train_log(path))
    assert info.value.line == 2 and "not JSON" in info.value.reason


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xef\xbb\xbf" + b'{"step":0,"ordinals":[0]}', "byte-order mark"),
        ('{"step":0,"ordinals":[0]}'.encode("utf-16"), "not UTF-8"),
        (b'{"step":0,"ordinals":[\xff]}', "not UTF-8"),
        (b"[" * 50_000, "nested too deeply"),
        (b'{"step":' + b"9" * 5_000 + b',"ordinals":[]}', "not JSON"),
    ],
)
def test_hostile_lines_are_errors_naming_the_line(tmp_path: Path, raw: bytes, reason: str) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"step":0,"ordinals":[0]}\n' + raw + b"\n")
    with pytest.raises(TrainLogError) as info:
        list(read_train_log(path))
    assert info.value.line == 2 and reason in info.value.reason


WRITER = """
import sys
from frontier_core import TrainLogWriter
w = TrainLogWriter(sys.argv[1], resume_records=int(sys.argv[2]) if len(sys.argv) > 2 else None)
big = list(range(1_000_000))          # about 7 MB a record
print("ready", flush=True)
step = 0
while True:
    w.step(step, big)
    step += 1
"""


def test_a_sigkill_during_a_large_record_tears_at_most_the_tail(tmp_path: Path) -> None:
    """Real kills of a writer of megabyte records, at random moments: every
    log reads back, with at most its last record torn, and a reopened
    writer continues it cleanly."""
    path = tmp_path / "log.jsonl"
    torn_seen = 0
    for i in range(6):
        args = [sys.executable, "-c", WRITER, str(path)]
        if i:
            args.append("0")  # a resume that keeps nothing: the count does not matter here
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.07 * i)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        records = list(read_train_log(path))
        assert all(not isinstance(r, TornTail) for r in records[:-1])
        torn_seen += bool(records) and isinstance(records[-1], TornTail)
        fold_lineage(records)
    # Whether a kill tore a record depends on timing; the reads above must
    # hold either way, and the final reopen must leave a clean log.
    with TrainLogWriter(path, resume_records=0):
        pass
    assert not any(isinstance(r, TornTail) for r in read_train_log(path))
    print(f"torn tails seen: {torn_seen} of 6")


def test_a_directory_or_a_fifo_as_the_log_is_a_typed_error(tmp_path: Path) -> None:
    """Issue 21 item 7's class: these raised a bare ``IsADirectoryError`` and
    an ``ESPIPE`` from the torn-tail check's seek."""
    directory = tmp_path / "log"
    directory.mkdir()
    with pytest.raises(TrainLogError, match="is a directory"):
        TrainLogWriter(directory)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(TrainLogError, match="not a regular file"):
        TrainLogWriter(fifo, resume_records=0)
    assert directory.is_dir() and not list(directory.iterdir())
