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
``O_APPEND``. That does not make it atomic: a SIGKILL, a power cut or a full
disk can leave the first part of a large record (megabytes of ordinals) as
the file's last line, without its newline. Only the last line can tear, and
the record it held was never covered by a checkpoint (the checkpoint that
would count it is written after it), so it belongs to a dead branch: the
reader discards exactly that fragment and reports its size
(``Lineage.torn_tail_bytes``), and a writer reopened for a resume truncates
it before appending its marker, so the marker never lands on the fragment.
A malformed line anywhere else is an error naming it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

import attrs

from ._errors import FrontierError, shown, shown_keys

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


@attrs.frozen
class TornTail:
    """The fragment of a record cut short at the end of the log (no
    newline): discarded, and reported."""

    size: int
    line: int


Record = StepRecord | DropRecord | ResumeRecord | TornTail


def _check_count(what: str, value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} must be an int >= 0, got {shown(value)}")
    return value


def _check_ordinals(ordinals: Iterable[int]) -> list[int]:
    out = sorted(_check_count("an ordinal", o) for o in ordinals)
    return out


class TrainLogWriter:
    """Appends records to a training log and counts the lineage's records.

    Store ``records`` in every checkpoint; after a crash, reopen the log with
    ``resume_records`` set to the stored count, which appends the marker that
    tells readers where the surviving lineage branched off.
    """

    def __init__(self, path: str | os.PathLike[str], *, resume_records: int | None = None) -> None:
        if resume_records is not None:
            _check_count("resume_records", resume_records)
        self.path = Path(path)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except IsADirectoryError:
            raise TrainLogError(str(self.path), 0, "is a directory, not a training log") from None
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            # A FIFO or a device: appends and the torn-tail check (a seek)
            # mean nothing there.
            os.close(self._fd)
            raise TrainLogError(str(self.path), 0, "not a regular file (a FIFO or a device)")
        self.records = 0
        #: Bytes of a torn last record removed when the log was reopened.
        self.torn_tail_bytes = 0
        try:
            self.torn_tail_bytes = _truncate_torn_tail(self._fd)
            if resume_records is not None:
                self._write({KEY_RESUME: resume_records})
                self.records = resume_records
        except BaseException:
            self.close()
            raise

    def step(self, step: int, ordinals: Iterable[int]) -> None:
        """Record training step ``step`` over ``ordinals``. Raises
        ``ValueError`` (and writes nothing) for a step or an ordinal that is
        not an int >= 0: the reader would refuse it forever."""
        _check_count("step", step)
        self._write({KEY_STEP: step, KEY_ORDINALS: _check_ordinals(ordinals)})
        self.records += 1

    def dropped(self, ordinals: Iterable[int]) -> None:
        """Record drops; validated as ``step`` validates ordinals."""
        ordinals = _check_ordinals(ordinals)
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


def _truncate_torn_tail(fd: int) -> int:
    """Cut a last line without its newline off the file; return its size."""
    end = os.lseek(fd, 0, os.SEEK_END)
    pos = end
    while pos > 0:
        step = min(pos, 1 << 16)
        chunk = os.pread(fd, step, pos - step)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            pos = pos - step + cut + 1
            break
        pos -= step
    if pos < end:
        os.ftruncate(fd, pos)
        os.fsync(fd)
    return end - pos


def open_input(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading bytes, if it is a regular file or a pipe;
    ``OSError`` (``EINVAL``) for a device, a socket or a directory, before
    a byte is read (``/dev/zero`` never ends). The readers of the core's
    command line inputs (the training log, a trace) open them here."""
    # O_NONBLOCK: opening a FIFO with no writer must not wait forever; it is
    # cleared for the reads, which end at the writer's EOF.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise OSError(errno.EINVAL, "not a regular file or a pipe", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb")


def read_train_log(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Parse a training log, raising ``TrainLogError`` at the first bad line.

    Lines must be UTF-8 JSON objects (no byte-order mark). A last line
    without its newline is a torn write: it is yielded as a ``TornTail``,
    not parsed (see the module's docstring). A device, a socket or a
    directory is refused with ``OSError`` (``open_input``).
    """
    name = str(path)
    with open_input(path) as f:
        data = f.read()
    lines = data.split(b"\n")
    torn = lines.pop()
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        yield parse_record(name, number, raw)
    if torn:
        yield TornTail(len(torn), len(lines) + 1)


class DuplicateKeyError(ValueError):
    """A JSON object of a line names one key twice (``parse_line``)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = ""
        for k, _ in pairs:
            if k in seen:
                twice = k
                break
            seen.add(k)
        raise DuplicateKeyError(
            f"the key {shown(twice, 40)} stands twice in one object: which value is meant "
            "is not said"
        )
    return obj


def parse_line(text: str) -> Any:
    """One line of a training log or a trace, as JSON. A key twice in an
    object is refused (``DuplicateKeyError``), never read as its last
    value as ``json.loads`` does: the line does not say which is meant.
    Raises ``ValueError`` (``RecursionError`` for absurd nesting)."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def parse_record(name: str, number: int, raw: bytes | str) -> Record:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise TrainLogError(name, number, f"not UTF-8: {exc}") from None
    if text.startswith("\ufeff"):
        raise TrainLogError(name, number, "starts with a byte-order mark: write plain UTF-8")
    try:
        obj = parse_line(text)
    except RecursionError:
        raise TrainLogError(name, number, "not JSON: nested too deeply") from None
    except DuplicateKeyError as exc:
        raise TrainLogError(name, number, str(exc)) from None
    except ValueError as exc:  # JSONDecodeError, and ints past the digit limit
        raise TrainLogError(name, number, f"not JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise TrainLogError(name, number, "a record must be a JSON object")
    keys = set(obj)
    if keys == {KEY_STEP, KEY_ORDINALS}:
        step = obj[KEY_STEP]
        if type(step) is not int or step < 0:
            raise TrainLogError(name, number, f"'step' must be an int >= 0, got {shown(step, 40)}")
        return StepRecord(step, _ordinals(name, number, obj[KEY_ORDINALS], KEY_ORDINALS), number)
    if keys == {KEY_DROPPED}:
        return DropRecord(_ordinals(name, number, obj[KEY_DROPPED], KEY_DROPPED), number)
    if keys == {KEY_RESUME}:
        n = obj[KEY_RESUME]
        if type(n) is not int or n < 0:
            raise TrainLogError(name, number, f"'resume' must be an int >= 0, got {shown(n, 40)}")
        return ResumeRecord(n, number)
    raise TrainLogError(
        name,
        number,
        f"unknown record with keys {shown_keys(keys)}; expected "
        "{'step','ordinals'}, {'dropped'} or {'resume'}",
    )


def _ordinals(name: str, number: int, value: object, key: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise TrainLogError(name, number, f"{key!r} must be a list of ordinals")
    for o in value:
        if type(o) is not int or o < 0:
            raise TrainLogError(
                name, number, f"{key!r} holds {shown(o, 40)}, not an int ordinal >= 0"
            )
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
    #: Bytes of a torn last record the reader discarded (0: none).
    torn_tail_bytes: int = 0


def fold_lineage(records: Iterable[Record], *, path: str = "<log>") -> Lineage:
    """Reduce a record stream to its surviving lineage.

    Raises ``TrainLogError`` when a resume marker keeps more records than
    the lineage holds at that point (the log does not match its checkpoints).
    """
    kept: list[StepRecord | DropRecord] = []
    discarded = 0
    torn = 0
    for record in records:
        if isinstance(record, TornTail):
            torn = record.size
        elif isinstance(record, ResumeRecord):
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
    return Lineage(
        steps=steps, dropped=tuple(dropped), discarded_steps=discarded, torn_tail_bytes=torn
    )
