"""Attempt reservations: the attempts a ledger incarnation may hand out.

Why it exists. ``SampleLedger`` fences a result unless it names its
sibling's current attempt, and numbers attempts from one counter for the
whole run. After the single writer dies, a resume starts the counter at
``attempt_floor``: one above every attempt the journal names, and at or above
the checkpoint's counter. That is not enough when workers outlive the writer
(a Ray ledger actor killed while its rollout actors run on): an attempt the
dead writer handed out *after* its last checkpoint, whose worker had not yet
reported anything durable, is named nowhere. The next incarnation, resumed
from the same checkpoint and journal, deals the same numbers again, in the
same order, often to the very same siblings; when the surviving worker then
answers, its result names a current attempt and is accepted, though it came
from the previous incarnation (and was generated under its lineage).

The fix is a reservation: before an incarnation hands out attempt ``a``, a
durable record says that attempts below some ``R > a`` may be in use; a new
incarnation starts its counter at or above the last ``R``. Reserving in
blocks (``block``) makes that one atomic file write per block of attempts,
not one fsync per attempt.

Why a file of its own. The journal's record kinds are fixed by its format
(sealed, progress, mark; ``frontier_core.journal``), and none of them says
"attempts below R are taken": a mark is a checkpoint's, and replay and
compaction ignore it; a progress record on a pseudo-ordinal would be a lie
the replay and the reuse policy would act on. So the reservation lives beside
the journal, in a small JSON file with the run's fingerprint and lineage and
a checksum, replaced atomically (a temporary file with a random name,
``O_EXCL | O_NOFOLLOW``, fsync, ``os.replace``, fsync of the directory). Its
writer is the journal's single writer: open the journal (which is
``flock``ed) before the reservation.

Not thread-safe; imports the standard library and frontier_core only.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Final

from frontier_core import CheckpointCorruptError, CheckpointMismatchError, CheckpointVersionError

FORMAT: Final = "frontier_adapters.attempt_reservation"
VERSION: Final = 1
_MAX_BYTES: Final = 1 << 14
_TMP_INFIX: Final = ".tmp-"
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_KEYS: Final = frozenset({"format", "version", "fingerprint", "lineage", "reserved", "checksum"})


def _checksum(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AttemptReservation:
    """The reservation file at ``path`` of the run named by ``fingerprint``
    and ``lineage``: ``reserved`` is the number below which every attempt of
    the run may have been handed out (0 when there is no file yet).

    Opening reads it and removes temporary files a killed write left; a file
    of another run raises ``CheckpointMismatchError``, a damaged one
    ``CheckpointCorruptError`` (``CheckpointVersionError`` for another
    format), a symlink or a non-regular file ``CheckpointCorruptError``.
    ``cover(top)`` makes sure attempts below ``top`` are reserved, writing a
    new reservation of ``top + block`` if they are not.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fingerprint: str, lineage: str, block: int = 1024
    ) -> None:
        if type(block) is not int or block < 1:
            raise ValueError(f"block must be an int >= 1, got {block!r}")
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.lineage = lineage
        self.block = block
        #: How many reservations this object wrote.
        self.writes = 0
        self._remove_leftovers()
        self.exists = os.path.lexists(self.path)
        self.reserved = self._read() if self.exists else 0

    def cover(self, top: int) -> bool:
        """Reserve every attempt below ``top`` (durably, before returning);
        returns whether a new reservation was written."""
        if top <= self.reserved:
            return False
        self._write(top + self.block)
        return True

    # -- the file -----------------------------------------------------------------

    def _read(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC)
        except OSError as exc:
            raise CheckpointCorruptError(f"{self.path}: cannot open: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise CheckpointCorruptError(f"{self.path}: not a regular file")
            if info.st_size > _MAX_BYTES:
                raise CheckpointCorruptError(f"{self.path}: {info.st_size} bytes, too large")
            data = os.read(fd, _MAX_BYTES + 1)
        finally:
            os.close(fd)
        try:
            record = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise CheckpointCorruptError(f"{self.path}: not JSON") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise CheckpointVersionError(f"{self.path}: not an attempt reservation")
        if record.get("version") != VERSION:
            raise CheckpointVersionError(
                f"{self.path}: reservation version {record.get('version')!r:.20}, this library "
                f"reads {VERSION}"
            )
        if set(record) != _KEYS:
            raise CheckpointCorruptError(f"{self.path}: keys {sorted(map(str, record))}")
        body = {k: v for k, v in record.items() if k != "checksum"}
        if record["checksum"] != _checksum(body):
            raise CheckpointCorruptError(f"{self.path}: checksum mismatch")
        if record["fingerprint"] != self.fingerprint or record["lineage"] != self.lineage:
            raise CheckpointMismatchError(
                f"{self.path}: the reservation of run {record['fingerprint']!r:.80} lineage "
                f"{record['lineage']!r:.80}, not of this one"
            )
        reserved = record["reserved"]
        if type(reserved) is not int or reserved < 0:
            raise CheckpointCorruptError(f"{self.path}: reserved must be an int >= 0")
        return reserved

    def _write(self, reserved: int) -> None:
        body: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "fingerprint": self.fingerprint,
            "lineage": self.lineage,
            "reserved": reserved,
        }
        body["checksum"] = _checksum(body)
        data = json.dumps(body, sort_keys=True).encode()
        tmp = self.path.with_name(f".{self.path.name}{_TMP_INFIX}{secrets.token_hex(8)}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
        fd = os.open(tmp, flags, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        try:
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.path.parent)
        self.reserved = reserved
        self.exists = True
        self.writes += 1

    def _remove_leftovers(self) -> None:
        prefix = f".{self.path.name}{_TMP_INFIX}"
        try:
            entries = list(os.scandir(self.path.parent))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.name.startswith(prefix) and entry.is_file(follow_symlinks=False):
                Path(entry.path).unlink(missing_ok=True)
