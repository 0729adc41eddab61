"""The journal's errors: bad journal bytes, as the checkpoint's errors are bad
checkpoint records.

A journal is read at resume time, next to the checkpoint, and a journal that
cannot be trusted must stop the resume exactly as a bad checkpoint does: each
error here subclasses both ``JournalError`` and the ``CheckpointError`` of
the same meaning, so a handler written for checkpoints (``except
CheckpointCorruptError``) catches the journal's too. A torn tail is not an
error: it is the expected trace of a crash during an append, and ``decode``
reports it instead (``TornTail``).

Invalid *values* handed to a constructor (a negative ordinal, a bool where an
int belongs) raise plain ``ValueError``/``TypeError``, as ``LedgerConfig``
does: that is the caller's bug, not bad input bytes.
"""

from __future__ import annotations

from .._errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointVersionError,
)


class JournalError(CheckpointError):
    """Base of the journal's errors: the journal cannot be used to resume.
    Not raised itself."""


class JournalCorruptError(JournalError, CheckpointCorruptError):
    """A frame is malformed or fails its checksum, and non-zero bytes follow
    it (or it is the header, or its head was written whole): not a torn
    tail, so nothing after it can be trusted either. ``offset`` is the byte
    offset of the frame in the journal, ``reason`` what is wrong with it."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        super().__init__(f"journal corrupt at byte {offset}: {reason}")


class JournalSequenceError(JournalCorruptError):
    """A sound frame carries the wrong sequence number: a gap (frames are
    missing) or a repeat or decrease (frames from elsewhere were spliced in)."""

    def __init__(self, offset: int, expected: int, found: int) -> None:
        self.expected = expected
        self.found = found
        what = "a gap" if found > expected else "a repeat or decrease"
        super().__init__(
            offset, f"sequence number {found} where {expected} was due ({what} in the journal)"
        )


class JournalVersionError(JournalError, CheckpointVersionError):
    """The header names another format or an unknown schema version."""


class JournalMismatchError(JournalError, CheckpointMismatchError):
    """The journal is sound but belongs to another run: its ``field``
    (``"fingerprint"`` or ``"lineage"``) is ``found``, not ``expected``.
    Replaying it would hand this run samples of other prompts or of another
    lineage."""

    def __init__(self, field: str, expected: str, found: str, reason: str = "") -> None:
        self.field = field
        self.expected = expected
        self.found = found
        super().__init__(
            reason
            or f"journal was written for {field} {found!r}, but this run's {field} is "
            f"{expected!r}: it belongs to another run"
        )


class JournalBehindError(JournalError, CheckpointMismatchError):
    """The journal does not hold the checkpoint's mark: it ends before the
    position the checkpoint recorded (records the checkpoint counted as
    durable are missing: a stale copy; a journal lost whole, with no record
    at all, is not refused by ``RolloutJournal.recover``), or another
    record stands there (a copy of another branch). ``position`` is the
    checkpoint's, ``last`` the journal's last sequence number."""

    def __init__(self, position: int, last: int, reason: str) -> None:
        self.position = position
        self.last = last
        super().__init__(reason)


class JournalEpisodeError(JournalError, CheckpointCorruptError):
    """A turn or answer record that contradicts its episode under an attempt
    replay accepts: a turn out of order (not the episode's next, or after a
    call still pending), a new attempt continuing from a turn the episode
    does not hold answered, an answer for an unknown key (no pending call
    with that key at that turn). The single writer never journals one
    (it checks with the same rule first), so in a journal it is damage or
    a foreign writer: nothing after it can be trusted. ``ordinal`` and
    ``sibling`` name the episode; ``index`` is the record's index in the
    records replayed (``None`` when one record was checked on its own)."""

    def __init__(self, ordinal: int, sibling: int, reason: str, index: int | None = None) -> None:
        self.ordinal = ordinal
        self.sibling = sibling
        self.reason = reason
        self.index = index
        where = "" if index is None else f"record {index}: "
        super().__init__(f"{where}episode of ordinal {ordinal} sibling {sibling}: {reason}")
