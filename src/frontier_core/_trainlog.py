"""The training-data log: what a run actually trained, line by line.

One JSON object per line, appended as events happen:

* ``{"step": s, "ordinals": [...]}``: training step ``s`` (0-based, counted
  across the whole run) was executed on the groups of these ordinals.
* ``{"dropped": [...]}``: the failure policy dropped these ordinals.
* ``{"resume": n}``: the run restarted from a checkpoint that was taken when
  the surviving lineage held ``n`` records (steps and drops, markers not
  counted). Every earlier record past the first ``n`` belongs to a dead
  branch: it happened after that checkpoint and was lost with the crash.

The log is append-only: a crash leaves evidence of the work it threw away,
and the reader reconstructs the surviving lineage from the markers. A log
written without markers is read as "the last execution of each step wins",
which is exact when the steps are deterministic and drops are absent.

Each record is written with a single ``write`` on a descriptor opened with
``O_APPEND``, so a SIGKILL cannot leave half a line behind on a local file
system; a torn last line (a power cut, a full disk) is reported, not guessed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

import attrs

from ._errors import FrontierError

KEY_STEP: Final = "step"
KEY_ORDINALS: Final = "ordinals"
KEY_DROPPED: Final = "dropped"
KEY_RESUME: Final = "resume"


class TrainLogError(FrontierError, ValueError):
    """A training log line is malformed; ``line`` is its 1-based number."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}")


@attrs.frozen
class StepRecord:
    step: int
    ordinals: tuple[int, ...]
    line: int


@attrs.frozen
class DropRecord:
    ordinals: tuple[int, ...]
    line: int


@attrs.frozen
class ResumeRecord:
    records: int
    line: int


Record = StepRecord | DropRecord | ResumeRecord


class TrainLogWriter:
    """Appends records to a training log and counts the lineage's records.

    Store ``records`` in every checkpoint; after a crash, reopen the log with
    ``resume_records`` set to the stored count, which appends the marker that
    tells readers where the surviving lineage branched off.
    """

    def __init__(self, path: str | os.PathLike[str], *, resume_records: int | None = None) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.records = 0
        if resume_records is not None:
            if resume_records < 0:
                raise ValueError(f"resume_records must be >= 0, got {resume_records}")
            self._write({KEY_RESUME: resume_records})
            self.records = resume_records

    def step(self, step: int, ordinals: Iterable[int]) -> None:
        self._write({KEY_STEP: step, KEY_ORDINALS: sorted(ordinals)})
        self.records += 1

    def dropped(self, ordinals: Iterable[int]) -> None:
        ordinals = sorted(ordinals)
        if ordinals:
            self._write({KEY_DROPPED: ordinals})
            self.records += 1

    def _write(self, obj: dict[str, object]) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        written = os.write(self._fd, data)
        if written != len(data):  # pragma: no cover - regular files write whole
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")

    def sync(self) -> None:
        """Flush the log to stable storage (call before a checkpoint commits)."""
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> TrainLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_train_log(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Parse a training log, raising ``TrainLogError`` at the first bad line.

    A last line without its newline is a torn write and is an error too.
    """
    name = str(path)
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    elif lines[-1].strip():
        # No final newline: the last record may be cut short.
        raise TrainLogError(name, len(lines), "truncated: the last line has no newline")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        yield parse_record(name, number, raw)


def parse_record(name: str, number: int, raw: bytes | str) -> Record:
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TrainLogError(name, number, f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise TrainLogError(name, number, "a record must be a JSON object")
    keys = set(obj)
    if keys == {KEY_STEP, KEY_ORDINALS}:
        step = obj[KEY_STEP]
        if type(step) is not int or step < 0:
            raise TrainLogError(name, number, f"'step' must be an int >= 0, got {step!r}")
        return StepRecord(step, _ordinals(name, number, obj[KEY_ORDINALS], KEY_ORDINALS), number)
    if keys == {KEY_DROPPED}:
        return DropRecord(_ordinals(name, number, obj[KEY_DROPPED], KEY_DROPPED), number)
    if keys == {KEY_RESUME}:
        n = obj[KEY_RESUME]
        if type(n) is not int or n < 0:
            raise TrainLogError(name, number, f"'resume' must be an int >= 0, got {n!r}")
        return ResumeRecord(n, number)
    raise TrainLogError(
        name,
        number,
        f"unknown record with keys {sorted(keys)}; expected "
        "{'step','ordinals'}, {'dropped'} or {'resume'}",
    )


def _ordinals(name: str, number: int, value: object, key: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise TrainLogError(name, number, f"{key!r} must be a list of ordinals")
    for o in value:
        if type(o) is not int or o < 0:
            raise TrainLogError(name, number, f"{key!r} holds {o!r}, not an int ordinal >= 0")
    return tuple(value)


@attrs.frozen
class Lineage:
    """The surviving lineage of a log: its executed steps and drops."""

    #: step -> the ordinals of its last execution in the lineage.
    steps: dict[int, tuple[int, ...]]
    #: Every drop record of the lineage, in order.
    dropped: tuple[tuple[int, ...], ...]
    #: Executions thrown away: by a resume marker, or superseded by a later
    #: execution of the same step.
    discarded_steps: int


def fold_lineage(records: Iterable[Record], *, path: str = "<log>") -> Lineage:
    """Reduce a record stream to its surviving lineage.

    Raises ``TrainLogError`` when a resume marker keeps more records than
    the lineage holds at that point (the log does not match its checkpoints).
    """
    kept: list[StepRecord | DropRecord] = []
    discarded = 0
    for record in records:
        if isinstance(record, ResumeRecord):
            if record.records > len(kept):
                raise TrainLogError(
                    path,
                    record.line,
                    f"resume keeps {record.records} records but the lineage holds "
                    f"only {len(kept)}: the log does not belong to these checkpoints",
                )
            discarded += sum(isinstance(r, StepRecord) for r in kept[record.records :])
            del kept[record.records :]
        else:
            kept.append(record)
    steps: dict[int, tuple[int, ...]] = {}
    dropped: list[tuple[int, ...]] = []
    for record in kept:
        if isinstance(record, StepRecord):
            if record.step in steps:
                discarded += 1
            steps[record.step] = record.ordinals
        else:
            dropped.append(record.ordinals)
    return Lineage(steps=steps, dropped=tuple(dropped), discarded_steps=discarded)
