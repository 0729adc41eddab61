"""The adapters' errors: each subclasses the core error whose meaning it shares."""

from __future__ import annotations

import os
from typing import Final

from frontier_core import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FingerprintMismatchError,
    FrontierError,
)
from frontier_core.journal import JournalError


class StreamMisalignedError(FrontierError, RuntimeError):
    """The loader yielded rows at other ordinals than the ledger expected: a
    mis-seeked or foreign loader. Never papered over: training on would skip
    or duplicate prompts."""


class ConcurrentUseError(FrontierError, RuntimeError):
    """A ``StreamCollector`` was entered from a second thread while a call
    from another thread was still inside it. The collector is not
    thread-safe: use it from one thread, or serialise every call with your
    own lock (calls that never overlap are fine from any thread)."""


class SnapshotMissingError(CheckpointError):
    """The snapshot binding holds no loader snapshot at or below the cut, so
    the stream position cannot be saved (or restored) without loss."""


def _name_file(exc: Exception, path: str | os.PathLike[str]) -> str:
    """Prefix ``exc``'s message with ``path``; return the path."""
    name = os.fspath(path)
    exc.args = (f"{name}: {exc.args[0]}",)
    return name


class CheckpointFileError(CheckpointCorruptError):
    """A checkpoint file is missing, truncated, corrupted or malformed.
    ``path`` names the file."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(reason)
        self.path = _name_file(self, path)


class CheckpointFileVersionError(CheckpointVersionError):
    """A checkpoint directory was written by another format or schema
    version. ``path`` names its manifest."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(reason)
        self.path = _name_file(self, path)


class DatasetChangedError(FingerprintMismatchError):
    """The checkpoint was written for another dataset (its fingerprint
    differs). ``path`` names the manifest that holds the saved fingerprint."""

    def __init__(self, path: str | os.PathLike[str], expected: str, found: str) -> None:
        super().__init__(expected, found)
        self.path = _name_file(self, path)


class JournalWithoutCheckpointError(JournalError, CheckpointMismatchError):
    """A rollout journal holds samples (or was compacted after a
    checkpoint), but the resume has no checkpoint: a missing checkpoint is
    not a fresh start, so the journal is refused rather than read as
    another start's. ``path`` names the journal. A ``ValueError``, as every
    ``CheckpointError``."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(reason)
        self.path = _name_file(self, path)


class CheckpointConflictError(FrontierError, RuntimeError):
    """Another writer moved the published lineage while this write was in
    progress (two writers publishing at once, or a newer resume's write):
    this checkpoint was not published, and its objects are garbage the
    next successful write removes. ``path`` names ``LATEST``."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path


#: The highest epoch a life can claim (``claim_epoch``; what ``LATEST`` and
#: a shipped object's name may carry): a signed 64-bit integer's largest,
#: so that every epoch a reader accepts is one some life could claim.
MAX_EPOCH: Final = (1 << 63) - 1


class CheckpointFencedError(CheckpointConflictError):
    """A writer of an older life was fenced: a newer life of the run claimed
    the root (``claim_epoch``: ``LATEST`` names the newer ``current``
    epoch) after this writer claimed ``epoch``, so nothing this writer
    publishes may move the run's pointer any more. Nothing was published.
    What a node that comes back after a resume elsewhere gets: stop, the
    run goes on in the newer life. ``path`` names ``LATEST``."""

    def __init__(self, path: str, epoch: int, current: int, what: str = "this writer") -> None:
        self.epoch = epoch
        self.current = current
        super().__init__(
            path,
            f"{what} is of epoch {epoch}, but the run's pointer is claimed by epoch {current}: "
            "a newer life resumed the run, and this one is fenced (nothing was published)",
        )
