"""The journal off the node: committed groups shipped to a store as
immutable segments, in the background; a lost local file restored from them.

Layout under the store's ``prefix``::

    prefix/base-00000000000000000042-<sha>   a whole journal file (header and
                                             records) whose last record is 42
    prefix/seg-00000000000000000043-00000000000000000057
                                             the frames of records 43 to 57,
                                             exactly as the file holds them

Theory of operation. The journal's writer hands every group it writes
(``committed``: the group's frames and their first and last sequence
numbers) and every whole new file it puts in place (``replaced``: the file
it opened, after its torn tail was cut, and each compaction) to the
``Shipper``. Groups are gathered into the open segment, which is rolled
(queued for upload) when it holds ``segment_bytes`` or its oldest group has
waited ``segment_seconds``; a whole file becomes a base, and once a base is
up, every object it supersedes (bases and segments ending at or below it)
is deleted: compaction deletes the segments below the window. One daemon
thread uploads the queue in order, each object with ``Store.create``
(create-if-absent: an object is immutable, and a retried upload whose
answer was lost finds its own bytes), retrying a failed upload with
backoff; ``shipped`` is the last record that is up. ``flush(timeout)``
rolls the open segment and waits until the queue is up: the rollout
journal calls it after every mark and every attempt reservation, so a
checkpoint never relies on a record that only the node holds, and no
attempt of a lost node's life is dealt again.

The queue is bounded. While the store is slow or down, what the writer
hands over waits in memory (the local file holds it too); at most
``max_queued_bytes`` (256 MiB by default: minutes of generation at 10^4
records/s) are held. A blip of the store is absorbed without the writer
noticing; past the bound the writer is held back (``committed`` and
``replaced`` wait, in the writer's thread, for uploads to make room: the
run generates no faster than the store takes it), for at most
``backlog_timeout`` seconds (300 by default), after which they raise
``JournalShipBacklogError`` (a ``JournalShipError``) naming the store, the
bytes queued, what is shipped and the last upload error; the writer is
then failed (its file stays readable; reopen it when the store is back).
An outage that long also holds every checkpoint, which waits for the
store, so the run could not make durable progress meanwhile anyway. A
single group or base larger than the bound is taken when the queue is
empty.

Lives. A ``Shipper`` of ``epoch`` (the life's, ``claim_epoch``'s; 0 for
a shipper outside the fencing, whose names carry no epoch: those of
before epochs) names every object it ships with it
(``base-...-e<epoch>``, ``seg-...-e<epoch>``), and a life ships its whole
journal as a base before any segment. So objects of two lives never
share a name, a base prunes its own epoch's superseded objects and every
older epoch's (never a newer one's: finding one, the shipper is fenced),
and with ``fence`` (what reads the run's current epoch) the shipper
checks before each upload that no newer life claimed the run, and
otherwise stops with ``JournalFencedError`` and refuses the writer's next
group: a node that comes back after a resume elsewhere stops at once.

Restoring. ``restore`` reads the newest epoch's newest base and that
epoch's segments that continue it without a gap (an older life's objects,
fenced or not yet pruned, are never chained), and joins them into the bytes of a journal file,
which the core then decodes with every check a file gets (frames bound to
their journal, sequence numbers, torn tails). A gap between two segments
that both exist, a segment overlapping its base, an object whose name is
not one of these, are errors; segments after the last one of an unbroken
chain cannot exist (uploads go in order and each waits for the one before).

What it assumes of the store: ``create`` is atomic and durable on return
(a reader sees all of an object or nothing) and ``list`` sees every object
created before it was called (read-after-write: S3 since December 2020, GCS,
Azure, SeaweedFS, a POSIX directory).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from frontier_core.journal import (
    Decoded,
    JournalCorruptError,
    JournalError,
    JournalMismatchError,
    JournalSequenceError,
)

from .._errors import MAX_EPOCH, CheckpointFencedError
from ..store import PosixStore, StoreConflictError

if TYPE_CHECKING:
    from ..store import Store

#: Roll the open segment at this size, or when its oldest group is this old.
SEGMENT_BYTES: Final = 4 << 20
SEGMENT_SECONDS: Final = 2.0
#: The largest object ``restore`` reads (a base is a journal file: the
#: writer's own bound on one).
MAX_OBJECT_BYTES: Final = 4 << 30
#: The most objects under a journal's prefix (a segment every 2 s for a
#: week without a checkpoint's compaction).
MAX_OBJECTS: Final = 1 << 19
#: The most bytes handed over and not yet up held in memory, and how long
#: the writer is held back past it before ``JournalShipBacklogError``.
MAX_QUEUED_BYTES: Final = 256 << 20
BACKLOG_TIMEOUT_S: Final = 300.0
#: A failed upload is tried again after this (doubling up to the cap).
_RETRY_FIRST, _RETRY_CAP = 0.05, 5.0
_SEQ = 20
_EPOCH = r"(?:-e(\d{20}))?"
_BASE = re.compile(r"base-(\d{20})-([0-9a-f]{16})" + _EPOCH)
_SEG = re.compile(r"seg-(\d{20})-(\d{20})" + _EPOCH)


class JournalShipError(JournalError):
    """The shipped journal is behind and could not catch up in time (the
    store refuses or is unreachable): ``flush`` names the last error."""


class JournalShipBacklogError(JournalShipError):
    """The shipper held ``max_queued_bytes`` for the store and no room was
    made within ``backlog_timeout`` seconds: the group (or base) handed over
    was not taken, and the writer that handed it over is failed."""


class JournalFencedError(JournalShipError, CheckpointFencedError):
    """The shipper of a life of epoch ``epoch`` found the run claimed by a
    newer life (``current``: its fence read it, or its listing held that
    life's objects): it ships nothing more, and the writer is failed at
    its next group, mark or reservation. Also a ``CheckpointFencedError``
    (one ``except`` stops an older life wherever it is refused)."""

    def __init__(self, where: str, epoch: int, current: int) -> None:
        CheckpointFencedError.__init__(self, where, epoch, current, "this journal's shipper")


def _suffix(epoch: int) -> str:
    # Epoch 0 (a shipper outside the fencing) keeps the names of before epochs.
    return f"-e{epoch:0{_SEQ}d}" if epoch else ""


def base_key(prefix: str, last: int, data: bytes, epoch: int = 0) -> str:
    sha = hashlib.sha256(data).hexdigest()[:16]
    return f"{prefix}/base-{last:0{_SEQ}d}-{sha}{_suffix(epoch)}"


def segment_key(prefix: str, first: int, last: int, epoch: int = 0) -> str:
    return f"{prefix}/seg-{first:0{_SEQ}d}-{last:0{_SEQ}d}{_suffix(epoch)}"


@attrs.frozen
class _Name:
    """A shipped object's name, parsed: a base (``first`` is ``None``) or a
    segment, its last record and the epoch of the life that shipped it."""

    first: int | None
    last: int
    epoch: int


def _parse(name: str) -> _Name | None:
    """A shipped object's name parsed; ``None`` for any other name, and
    for one whose epoch is above ``MAX_EPOCH`` (no life can claim it, so
    no shipper made it): a foreign name, which a restore refuses and a
    base's pruning leaves, as any other."""
    if (m := _BASE.fullmatch(name)) is not None:
        got = _Name(None, int(m.group(1)), int(m.group(3) or 0))
    elif (m := _SEG.fullmatch(name)) is not None:
        got = _Name(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    else:
        return None
    return got if got.epoch <= MAX_EPOCH else None


@attrs.frozen
class _Upload:
    key: str
    data: bytes
    last: int
    #: For a base: delete every object this one supersedes once it is up.
    base: bool = False


class Shipper:
    """Ships a journal's groups to ``store`` under ``prefix`` (see the module
    doc). Give it to ``RolloutJournal(ship_to=...)``, which wires it to the
    writer; ``shipped`` and ``error`` report how far it is."""

    def __init__(
        self,
        store: Store,
        prefix: str = "journal",
        *,
        segment_bytes: int = SEGMENT_BYTES,
        segment_seconds: float = SEGMENT_SECONDS,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        backlog_timeout: float = BACKLOG_TIMEOUT_S,
        epoch: int = 0,
        fence: Callable[[], int] | None = None,
    ) -> None:
        if type(segment_bytes) is not int or segment_bytes < 1:
            raise ValueError(f"segment_bytes must be an int >= 1, got {segment_bytes!r:.40}")
        if type(max_queued_bytes) is not int or max_queued_bytes < 1:
            raise ValueError(f"max_queued_bytes must be an int >= 1, got {max_queued_bytes!r:.40}")
        if not isinstance(backlog_timeout, int | float) or not 0 <= backlog_timeout < float("inf"):
            raise ValueError(
                f"backlog_timeout must be >= 0 and finite, got {backlog_timeout!r:.40}"
            )
        if not isinstance(segment_seconds, int | float) or not 0 < segment_seconds < float("inf"):
            raise ValueError(f"segment_seconds must be > 0, got {segment_seconds!r:.40}")
        if not isinstance(prefix, str) or not prefix.strip("/"):
            raise ValueError(f"prefix must be a non-empty str, got {prefix!r:.60}")
        if type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r:.40}")
        #: The epoch of the life this shipper ships for (its objects' names
        #: carry it; 0: outside the fencing), and what reads the run's
        #: current epoch before each upload (``None``: nothing is checked).
        self.epoch = epoch
        self.fence = fence
        self.store = store
        self.prefix = prefix.strip("/")
        self.segment_bytes = segment_bytes
        self.segment_seconds = float(segment_seconds)
        self.max_queued_bytes = max_queued_bytes
        self.backlog_timeout = float(backlog_timeout)
        #: The bytes handed over and not yet up (the open segment included).
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._queue: deque[_Upload] = deque()
        self._open: list[bytes] = []
        self._open_bytes = 0
        self._open_first = 0
        self._open_last = 0
        self._open_since = 0.0
        #: The last record whose object is up (-1: none yet).
        self._shipped = -1
        #: The last upload failure (kept until an upload succeeds).
        self.error: BaseException | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: A failure no retry can mend (``_create``): ``flush`` raises it.
        self.failure: JournalShipError | None = None

    # -- what the writer hands over (the caller's thread) ------------------------

    def committed(self, data: bytes, first: int, last: int) -> None:
        """The writer wrote records ``first`` to ``last`` (their frames are
        ``data``)."""
        with self._cond:
            self._check_failed()
            if self._open and first != self._open_last + 1:  # the writer's invariant, checked
                raise JournalSequenceError(self._open_bytes, self._open_last + 1, first)
            self._make_room(len(data))
            if not self._open:
                self._open_first, self._open_since = first, time.monotonic()
            self._open.append(data)
            self._open_bytes += len(data)
            self._queued_bytes += len(data)
            self._open_last = last
            if self._open_bytes >= self.segment_bytes:
                self._roll()
            self._start()
            self._cond.notify_all()

    def replaced(self, data: bytes, last: int) -> None:
        """The writer put a whole new journal file in place (``data``, its
        last record ``last``): the file it opened, or a compaction."""
        with self._cond:
            self._make_room(len(data))
            self._roll()
            key = base_key(self.prefix, last, data, self.epoch)
            self._queue.append(_Upload(key, data, last, base=True))
            self._queued_bytes += len(data)
            self._start()
            self._cond.notify_all()

    # -- state ------------------------------------------------------------------

    @property
    def queued_bytes(self) -> int:
        """The bytes handed over and not yet up (at most about
        ``max_queued_bytes``)."""
        return self._queued_bytes

    @property
    def shipped(self) -> int:
        """The last record whose object is up in the store (-1: none)."""
        return self._shipped

    def flush(self, timeout: float) -> int:
        """Roll the open segment and wait until everything handed over is
        up; ``shipped``. Raises ``JournalShipError`` when ``timeout``
        seconds pass first."""
        with self._cond:
            self._wait_until(
                lambda: not self._queue,
                timeout,
                lambda: JournalShipError(
                    f"the journal is shipped to {self.store.where} up to record "
                    f"{self._shipped}, and {len(self._queue)} objects could not be "
                    f"uploaded within {timeout:g} s ({self._last_error()})"
                ),
            )
            return self._shipped

    def close(self, timeout: float = 30.0) -> None:
        """Ship what is left (up to ``timeout`` s), then stop the thread.
        What could not be shipped stays in the local file."""
        deadline = time.monotonic() + timeout
        try:
            if self._thread is not None:
                self.flush(timeout)
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            if self._thread is not None:
                # One bound for the whole close: an upload the store holds
                # keeps the (daemon) thread past it, never the caller.
                self._thread.join(max(deadline - time.monotonic(), 0.001))

    # -- internals ----------------------------------------------------------------

    def _last_error(self) -> str:
        """What a ship error says of the store's last failure."""
        if self.error is None:
            return "no upload failed: each is still waiting for the store to answer"
        return f"last error: {self.error!r:.300}"

    def _check_failed(self) -> None:
        """Raise the failure no retry mends (the lock is held): a fenced
        shipper takes no more groups, so the writer stops at its next
        commit instead of generating for a run that went on elsewhere."""
        if self.failure is not None:
            raise self.failure

    def _make_room(self, size: int) -> None:
        """Wait (the lock is held; ``wait`` releases it) until ``size`` more
        bytes fit under ``max_queued_bytes`` or nothing is queued, for at
        most ``backlog_timeout`` s: then ``JournalShipBacklogError``. A
        failure no retry mends is raised as it is."""

        def roomy() -> bool:
            return self._queued_bytes == 0 or self._queued_bytes + size <= self.max_queued_bytes

        if roomy():
            return
        self._wait_until(
            roomy,
            self.backlog_timeout,
            lambda: JournalShipBacklogError(
                f"the journal is shipped to {self.store.where} up to record "
                f"{self._shipped}, {self._queued_bytes} bytes are waiting for the store "
                f"(the bound is max_queued_bytes={self.max_queued_bytes}), and no room was "
                f"made within {self.backlog_timeout:g} s ({self._last_error()})"
            ),
        )

    def _wait_until(
        self, done: Callable[[], bool], timeout: float, late: Callable[[], JournalShipError]
    ) -> None:
        """Roll the open segment, wake the uploads and wait (the lock is
        held; ``wait`` releases it) until ``done()``: ``late()`` is raised
        after ``timeout`` s, a failure no retry mends at once."""
        deadline = time.monotonic() + timeout
        self._roll()
        self._start()
        self._cond.notify_all()
        while not done():
            if self.failure is not None:
                raise self.failure
            left = deadline - time.monotonic()
            if left <= 0:
                raise late()
            self._cond.wait(left)

    def _roll(self) -> None:
        """Queue the open segment (the lock is held)."""
        if self._open:
            key = segment_key(self.prefix, self._open_first, self._open_last, self.epoch)
            self._queue.append(_Upload(key, b"".join(self._open), self._open_last))
            self._open, self._open_bytes = [], 0

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="frontier-journal-shipper", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        delay = _RETRY_FIRST
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    if self._open:
                        due = self._open_since + self.segment_seconds - time.monotonic()
                        if due <= 0:
                            self._roll()
                            continue
                        self._cond.wait(due)
                    else:
                        self._cond.wait(self.segment_seconds)
                if not self._queue:
                    return  # stopping, and nothing left
                upload = self._queue[0]
            try:
                self._check_fence()
                self._create(upload)
            except JournalShipError as exc:  # fenced, or another copy's bytes under our key: final
                with self._cond:
                    self.error = self.failure = exc
                    self._cond.notify_all()
                return
            except Exception as exc:  # kept, reported, and tried again
                with self._cond:
                    self.error = exc
                    if self._stopping:
                        return
                    self._cond.wait(delay)
                delay = min(delay * 2, _RETRY_CAP)
                continue
            delay = _RETRY_FIRST
            pruned: Exception | None = None
            if upload.base:
                # Best effort, never retried with the upload: what a failed
                # prune leaves, the next base's removes (and ``restore``
                # skips what a base supersedes).
                try:
                    self._prune(upload.last, upload.key)
                except JournalFencedError as exc:
                    with self._cond:
                        self.error = self.failure = exc
                        self._cond.notify_all()
                    return
                except Exception as exc:
                    pruned = exc
            with self._cond:
                self._queue.popleft()
                self._queued_bytes -= len(upload.data)
                self._shipped = max(self._shipped, upload.last)
                self.error = pruned
                self._cond.notify_all()

    def _create(self, upload: _Upload) -> None:
        """Create the object; one that exists already with the same bytes
        is this upload done before (a reopened file's base, a put whose
        answer was lost). Other bytes under the key: ``JournalShipError``,
        not retried (another life of the journal wrote it: the shipped copy
        and this one diverged)."""
        try:
            self.store.create(upload.key, upload.data)
        except StoreConflictError:
            there = self.store.get(upload.key, max_bytes=len(upload.data) + 1)
            if there != upload.data:
                raise JournalShipError(
                    f"{self.store.where}: {upload.key!r} holds other bytes than this journal's "
                    "records under that name: another life of the journal shipped there "
                    "(the shipped copy and the local one diverged)"
                ) from None

    def _check_fence(self) -> None:
        """``JournalFencedError`` when the run's current epoch (``fence``)
        is not this shipper's: a newer life claimed the run."""
        if self.fence is not None:
            current = self.fence()
            if current != self.epoch:
                raise JournalFencedError(self.store.where, self.epoch, current)

    def _prune(self, last: int, keep: str) -> None:
        """Delete the objects a base of this epoch ending at ``last``
        supersedes: this epoch's ending at or below it, and every object of
        an older epoch (this life's first base holds all it restored). An
        object of a newer epoch is never touched: it means this life is
        fenced (``JournalFencedError``)."""
        keys = self.store.list(self.prefix, limit=MAX_OBJECTS)
        names = [(key, _parse(key.rsplit("/", 1)[-1])) for key in keys]
        newer = max((n.epoch for _, n in names if n is not None), default=0)
        if newer > self.epoch:
            raise JournalFencedError(self.store.where, self.epoch, newer)
        for key, n in names:
            if n is None or key == keep:
                continue
            if n.epoch < self.epoch or n.last <= last:
                self.store.delete(key)


@attrs.frozen
class Shipped:
    """A journal as its shipped objects hold it: the bytes of the journal
    file they join into, and the last record they hold."""

    data: bytes
    last: int
    objects: int


def restore(
    store: Store, prefix: str = "journal", *, max_bytes: int = MAX_OBJECT_BYTES
) -> Shipped | None:
    """The journal shipped under ``prefix`` (see the module doc), ``None``
    if nothing was shipped: the newest epoch's newest base and that
    epoch's segments that continue it (an older life's objects, fenced or
    not deleted yet, are never chained). Raises ``JournalCorruptError`` for
    an object that is not a base or a segment, ``JournalSequenceError`` for
    a gap or an overlap, and the store's errors."""
    prefix = prefix.strip("/")
    found: list[tuple[_Name, str]] = []
    for key in store.list(prefix, limit=MAX_OBJECTS):
        name = _parse(key[len(prefix) + 1 :])
        if name is None:
            raise JournalCorruptError(
                0,
                f"{store.where}: {key!r:.200} under the journal's prefix is neither a base "
                "nor a segment of it",
            )
        if name.first is not None and name.last < name.first:
            raise JournalCorruptError(0, f"{store.where}: segment {key!r} ends before it starts")
        found.append((name, key))
    if not found:
        return None
    # Every life ships its base before any segment, so the newest epoch
    # with objects has a base: the newest life's copy of the whole history.
    epoch = max(name.epoch for name, _ in found)
    bases = [(n.last, key) for n, key in found if n.epoch == epoch and n.first is None]
    segments = [
        (n.first, n.last, key) for n, key in found if n.epoch == epoch and n.first is not None
    ]
    if not bases:
        raise JournalCorruptError(
            0,
            f"{store.where}: segments of epoch {epoch} under {prefix!r} but no base of that "
            "epoch for them to continue",
        )
    top, key = max(bases)
    parts = [_get(store, key, max_bytes, 0)]
    end, offset = top, len(parts[0])
    for first, last, key in sorted(segments):
        if last <= top:
            continue  # superseded by the base (its deletion did not run yet)
        if first != end + 1:  # a gap, or an overlap: named as in a file
            raise JournalSequenceError(offset, end + 1, first)
        parts.append(_get(store, key, max_bytes, offset))
        end, offset = last, offset + len(parts[-1])
    return Shipped(b"".join(parts), end, len(parts))


def _get(store: Store, key: str, max_bytes: int, offset: int) -> bytes:
    data: bytes | None = store.get(key, max_bytes=max_bytes)
    if data is None:
        raise JournalCorruptError(offset, f"{store.where}: {key!r} was listed and is gone")
    return data


@attrs.frozen
class Restored:
    """Which copy of the journal a life starts from, and why: ``source`` is
    ``"local"`` (the node's file, at or past what was shipped), ``"shipped"``
    (no local file, or one behind the shipped copy: a lost or stale node;
    written in its place) or ``"new"`` (neither exists). ``local_last`` and
    ``shipped_last`` are the last records each held (-1: none). What a lost
    node held past ``shipped_last`` is lost: it is generated again."""

    source: str
    local_last: int
    shipped_last: int


def restore_local(
    path: Path, shipper: Shipper, fingerprint: str, lineage: str
) -> tuple[Restored, tuple[bytes, Decoded] | None]:
    """Make ``path`` the journal a life should start from: the local file
    when it extends the shipped one (its bytes begin with the shipped
    journal's: the same history, as far or further, which is what a
    process crash on a healthy node leaves), else the shipped one written
    in its place. A local file that is behind, or that diverged (a node
    that comes back after another life went on from the shipped copy), is
    kept beside it as ``<name>.stale-<hex>`` and never replayed. Raises the
    core's ``JournalError``s for a shipped journal that does not decode
    (another run's, a foreign segment, a corrupt object) and
    ``JournalMismatchError`` for a local file of another journal than the
    shipped one (another run's file at this path: nothing is replaced).
    With it, the bytes now at ``path`` and their decoding (the shipped
    copy it wrote, or the local file it kept), for the writer's open not to
    decode them again; ``None`` when there is neither."""
    from frontier_core.journal import DEFAULT_MAX_FRAME

    from ._files import (
        DEFAULT_MAX_BYTES,
        _decode_file,
        _fsync_dir,
        _read_path,
        _write_temp,
    )

    if isinstance(shipper.store, PosixStore):
        # What killed uploads left: this life claimed the run (or is its
        # only writer), so no upload of another life is to be waited for.
        shipper.store.sweep(shipper.prefix)
    shipped = restore(shipper.store, shipper.prefix)
    raw = _read_path(path, DEFAULT_MAX_BYTES) if os.path.lexists(path) else None
    local = (
        None if raw is None else _decode_file(raw, path, fingerprint, lineage, DEFAULT_MAX_FRAME)
    )
    local_last = -1 if local is None else local.last_seq
    if shipped is None:
        kept = None if raw is None or local is None else (raw, local)
        return Restored("new" if local is None else "local", local_last, -1), kept
    if local is not None and raw is not None and raw.startswith(shipped.data):
        # The same bytes from the header on (so the same journal id), as
        # far or further: the shipped copy needs no decoding of its own.
        return Restored("local", local_last, shipped.last), (raw, local)
    where = Path(f"{shipper.store.where}/{shipper.prefix}")
    remote = _decode_file(shipped.data, where, fingerprint, lineage, DEFAULT_MAX_FRAME)
    if remote.torn is not None or remote.last_seq != shipped.last:
        # Objects are whole (``create`` is atomic): a short, torn or foreign
        # last object is damage to acknowledged records, never a torn tail.
        # Taken for one, it would drop the dead life's last reservation and
        # deal its attempts again, accepting its late answers.
        raise JournalCorruptError(
            remote.end,
            f"{where}: the shipped objects are named for records up to {shipped.last} but "
            f"hold {remote.last_seq} whole"
            + (f" and {remote.torn.length} bytes that are no record" if remote.torn else "")
            + ": an object was damaged in the store. To resume from the checkpoint alone, "
            "remove every object under this prefix and the node's journal file: the run "
            "then counts its journal as lost with its node and fences every lost life",
        )
    if local is not None and raw is not None:
        if local.header.journal_id != remote.header.journal_id:
            raise JournalMismatchError(
                "journal_id",
                remote.header.journal_id.hex(),
                local.header.journal_id.hex(),
                f"{path}: the local journal (id {local.header.journal_id.hex()}) is not the "
                f"one shipped to {where} (id {remote.header.journal_id.hex()}): remove one",
            )
        os.replace(path, path.with_name(f"{path.name}.stale-{secrets.token_hex(4)}"))
    tmp, _ = _write_temp(path, shipped.data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return Restored("shipped", local_last, remote.last_seq), (shipped.data, remote)
