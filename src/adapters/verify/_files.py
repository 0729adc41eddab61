"""The verification jobs' own files: JSON-lines logs, atomic writes, a first
training-data log, the run's lineage id, and the order of writes of a
checkpoint that refers to a rollout journal (``commit_checkpoint``).

Shared by ``torch_job``, ``grpo_worker`` and ``ray_job``. The logs are the
jobs' evidence for their audits, so they are written to survive a SIGKILL
anywhere: one ``write`` per line
(a kill leaves at most a torn last line, which the next life cuts off and
a reader ignores), fsynced where a checkpoint will count them.

Not API: a test fixture of the verification jobs.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from frontier_core import TrainLogWriter

from ..journal import RolloutJournal
from ..journal._files import _write_all

#: The end of a checkpoint's journal window: every ordinal at or past its cut.
_END: Final = 1 << 62

_M = TypeVar("_M")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, durably: a reader (or a life after a
    kill) finds the old content or the new, whole; the directory entry is
    synced too."""
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def append_line(path: Path, line: dict[str, Any], *, sync: bool) -> None:
    """Append ``line`` to a JSON-lines log in one ``write``; ``sync``: fsync
    it (a checkpoint may count it). Without: a SIGKILL still loses no
    written byte (the page cache outlives the process), a power cut may."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        _write_all(fd, (json.dumps(line) + "\n").encode())
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def drop_torn_line(path: Path) -> None:
    """Cut off a last line without its newline (a kill inside an append),
    so that the next append starts a line of its own."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines log's records (none if the file does not exist); a last
    line without its newline is a write a kill cut short, not a record."""
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    lines.pop()  # b"" after the last newline, or a torn line
    return [json.loads(line) for line in lines if line.strip()]


def fresh_train_log(path: Path) -> TrainLogWriter:
    """The training-data log of a run's first start: empty, or, when a life
    was killed before its first checkpoint, a dead branch that a resume
    marker of no records discards."""
    fresh = not path.exists() or path.stat().st_size == 0
    return TrainLogWriter(path, resume_records=None if fresh else 0)


def lineage(workdir: Path) -> str:
    """The run's lineage id (for its journal), chosen at its first start
    and kept in ``workdir/lineage``."""
    path = workdir / "lineage"
    if not path.exists():
        write_atomic(path, secrets.token_hex(8).encode())
    return path.read_text()


def commit_checkpoint(
    mark: Callable[[], _M], write: Callable[[_M], None], compact: Callable[[_M], object]
) -> _M:
    """Write a checkpoint that refers to a rollout journal, in the one safe
    order, and return the mark.

    ``mark()`` appends the checkpoint's mark to the journal and syncs it
    (it returns what the checkpoint records of it: the journal position,
    or a snapshot that holds it); ``write(mark)`` writes the checkpoint and
    returns once it is durable; only then ``compact(mark)`` compacts the
    journal to the checkpoint's window. So a checkpoint refers only to
    journal records that are durable, and a compaction never discards a
    record that the durable checkpoint's resume still needs: a death before
    the write leaves the previous checkpoint and its records, one after it
    a journal that holds more than the new checkpoint needs. A kill point
    inside the write or the compaction fires there."""
    marked = mark()
    write(marked)
    compact(marked)
    return marked


def checkpoint_journal(
    journal: RolloutJournal, *, checkpoint_id: int, cut: int, write: Callable[[int], None]
) -> int:
    """``commit_checkpoint`` with a journal this process writes: the mark
    of ``checkpoint_id``, ``write(position)``, then a compaction to the
    ordinals at or past ``cut`` (the checkpoint's ledger's). Returns the
    mark's position."""
    return commit_checkpoint(
        lambda: journal.mark(checkpoint_id),
        write,
        lambda _: journal.compact(range(cut, _END)),
    )
