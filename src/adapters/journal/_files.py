"""The journal on disk: one append-only file, group commit, atomic compaction.

``frontier_core.journal`` decides everything about the bytes (framing,
checks, torn tails, replay, compaction, when to fsync); this module owns the
file and does exactly what the core decides. Every binding shares it.

Writing. ``JournalWriter`` keeps appended frames in memory until the group
commit policy says the group is due (its oldest append has waited
``max_delay``, or it holds ``max_bytes``), then writes the whole group with
one ``write`` on an ``O_APPEND`` descriptor, in the caller's thread, and
hands its ``fsync`` to the writer's commit thread; only when that fsync has
returned are its records *durable* (``durable``; ``sync()`` waits for it).
The policy is consulted at each append, and ``poll()`` (call it from your
loop's timer, after the delay it returns) or ``sync()`` commit a group that
no further append comes to.

Theory of operation. A group is in one of three places: *open* (being
appended to, in ``_pending``), *written* (in the file, its fsync requested
or running) or *durable*. At most one group's fsync is requested or
running: the commit of the next group writes it, then waits for the
previous group's fsync to return before it hands over its own, so every
group gets its own ``write`` and its own ``fsync``, in order, as without
the thread, and ``durable`` moves from one group's end to the next's.
What the thread buys is overlap: while the disk flushes group k the caller
encodes group k + 1, and writes it (a ``write`` to the page
cache need not wait for the flush). The thread runs only ``os.fsync``, so
it needs the GIL only around it, and the hand-off waits until the thread
is inside the fsync: otherwise, behind a caller that encodes without
releasing the GIL, it could wait up to the interpreter's switch interval
(5 ms) to start. A group committed less than ``_OVERLAP_MIN`` after the
previous commit returned (a commit per record in a tight loop) is fsynced in
the caller's thread instead: with no work to hide an fsync behind, the
hand-off would only add its thread switches. Either way it is the same
fsync, in the same order, and ``durable`` means the same. The thread starts
at the first commit and ends at ``close()`` (or when an unclosed writer is
collected). A process killed at any moment leaves what it had written:
whole groups and at most a torn tail, which the next open truncates. A
writer is for the thread that uses it (it is not thread-safe) and for the
process that opened it (a forked child must open the journal itself).

Failures. A failed ``write`` raises its ``OSError`` from the call that
committed the group; a failed ``fsync``, on the commit thread, is kept and
raised as ``JournalWriterError`` (its ``__cause__`` the ``OSError``) from
the next call into the writer, or from ``close()`` when no call came. Either
leaves the writer unusable (after an fsync error the kernel may have dropped
the pages, so nothing it says about durability can be trusted): reopen the
journal, which discards whatever tail the failure left.

Opening. An existing journal is decoded whole before anything is appended:
a torn tail (a crash mid-append) is truncated away, fsynced and reported
(``recovered.torn``); a corrupt frame in the middle, a sequence gap, another
format or version, another run's fingerprint or lineage raise the core's
typed errors, naming the file, and the file is left as it is. A new journal
is created atomically with its header (a temporary file, fsync, a hard link
to its name, which never replaces an existing file, fsync of the
directory), so a journal file always starts with a complete header.

Safety. The journal file is never opened through a symlink (``O_NOFOLLOW``;
the directories above it are the deployment's to choose); a FIFO or a
device is refused without blocking; sizes are checked (``max_bytes``)
before a byte is read; temporary files get random names and are created
``O_EXCL | O_NOFOLLOW``, so nothing planted at a predictable name can
redirect a write. One writer per journal: the file is ``flock``ed, and a
second writer is refused.

Compaction. ``compact_to(new_path, records)`` writes ``records`` (normally
``frontier_core.journal.compact`` of this journal and the window) as a new
journal that continues this one's sequence numbers, atomically (temporary
file, fsync, ``os.replace``, fsync of the directory), and the writer
continues on it. A crash at any moment leaves either the old journal or the
new one at ``new_path``, never a mix.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import math
import os
import secrets
import stat
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from frontier_core import FrontierError
from frontier_core.journal import (
    DEFAULT_MAX_FRAME,
    MAX_MARKS,
    CommitPolicy,
    Decoded,
    JournalError,
    JournalHeader,
    Record,
    TornTail,
    decode,
    encode,
    encode_header,
)
from frontier_core.journal._format import append_frame, append_frames
from frontier_core.journal._records import JOURNAL_ID_SIZE

from .._errors import CheckpointFencedError
from ..store._errors import typed_io

if TYPE_CHECKING:
    from ._ship import Shipper

_log = logging.getLogger("frontier_adapters.journal")

#: The default bound on a journal file read whole at open.
DEFAULT_MAX_BYTES: Final = 4 << 30
_TMP_INFIX: Final = ".tmp-"
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_OPEN_FLAGS: Final = os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_CREATE_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
#: A group committed sooner than this (seconds) after the previous commit
#: returned is fsynced in the caller's thread: there was too little work
#: between them for an fsync to hide behind, and the hand-off to the commit
#: thread (two thread switches, 20 to 50 us on the 2-core machine) would cost
#: more than it hides (a commit per record in a tight loop: 0.97x of raw
#: write + fsync inline, 0.72 to 0.85x through the thread).
_OVERLAP_MIN: Final = 200e-6
#: How long a writer waits for one fsync (seconds) before it gives up with
#: ``JournalWriterError``: an fsync on a healthy disk takes milliseconds, one
#: on a loaded network file system seconds; one that has not returned after
#: this is a hung mount, and the writer says so instead of waiting for ever.
FSYNC_TIMEOUT: Final = 600.0
#: errno values of ``os.link`` on a file system without hard links.
_NO_LINKS: Final = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV}


class JournalFileError(JournalError):
    """The journal file cannot be opened or read as a journal: a symlink, not
    a regular file, larger than allowed, changed while being read, or held
    by another writer. ``path`` names it."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class JournalWriterError(FrontierError, RuntimeError):
    """The writer is closed, or unusable after a failed write or fsync
    (reopen the journal: the open discards what the failure left)."""


def _named(exc: JournalError, path: Path) -> JournalError:
    """``exc`` with the file's name in its message and ``path`` attribute."""
    setattr(exc, "path", os.fspath(path))  # noqa: B010 - not every JournalError declares it
    exc.args = (f"{path}: {exc.args[0] if exc.args else ''}",)
    return exc


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _open(path: Path, flags: int) -> int:
    """A descriptor on the regular file ``path``, never through a symlink.
    ``FileNotFoundError`` if there is none; ``JournalFileError`` for anything
    else that is not a readable (and, for a writer, writable) regular file."""
    try:
        fd = os.open(path, flags | _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise JournalFileError(path, "is a symlink; refusing to follow it") from None
        if exc.errno == errno.EISDIR:
            raise JournalFileError(path, "is a directory, not a journal file") from None
        raise JournalFileError(path, f"cannot be opened: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise JournalFileError(path, "not a regular file (a FIFO, device or directory)")
        # O_NONBLOCK was for the open (a FIFO must not block it); drop it.
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock(fd: int, path: Path) -> None:
    """Take the writer's lock on the journal file behind ``fd``, or raise
    ``JournalFileError`` when another writer holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise JournalFileError(path, "another writer holds this journal") from None
    except OSError as exc:
        # A filesystem without the lock (ENOLCK, an NFS mount without a lock
        # manager): no writer could be kept out, so none is allowed in.
        raise JournalFileError(path, f"cannot be locked: {exc.strerror or exc}") from None


def _read_fd(fd: int, path: Path, max_bytes: int) -> bytes:
    """The whole file behind ``fd``, its size checked before reading."""
    size = os.fstat(fd).st_size
    if size > max_bytes:
        raise JournalFileError(path, f"{size} bytes, more than the {max_bytes} allowed")
    chunks = []
    got = 0
    while got < size:
        chunk = os.pread(fd, min(size - got, 1 << 24), got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got != size or os.pread(fd, 1, got):
        raise JournalFileError(path, "changed size while being read")
    return b"".join(chunks)


def _decode_file(
    data: bytes, path: Path, fingerprint: str | None, lineage: str | None, max_frame: int
) -> Decoded:
    try:
        return decode(data, fingerprint=fingerprint, lineage=lineage, max_frame=max_frame)
    except JournalError as exc:
        raise _named(exc, path) from None


def read_journal(
    path: str | os.PathLike[str],
    *,
    fingerprint: str | None = None,
    lineage: str | None = None,
    max_frame: int = DEFAULT_MAX_FRAME,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Decoded:
    """Decode the journal at ``path`` without changing it (a torn tail is
    reported, not truncated). Raises ``FileNotFoundError`` if there is none,
    ``JournalFileError`` for a symlink, a non-regular file or one over
    ``max_bytes``, and the core's ``JournalError``s (named with the path)
    for what ``decode`` refuses."""
    shown = Path(path)
    return _decode_file(_read_path(shown, max_bytes), shown, fingerprint, lineage, max_frame)


def _read_path(path: Path, max_bytes: int) -> bytes:
    """The bytes of the journal file at ``path``, read as ``read_journal``
    reads it (no symlink, a regular file, at most ``max_bytes``)."""
    fd = _open(path, os.O_RDONLY)
    try:
        return _read_fd(fd, path, max_bytes)
    finally:
        os.close(fd)


def _temp_name(target: Path) -> Path:
    return target.with_name(f".{target.name}{_TMP_INFIX}{secrets.token_hex(8)}")


def _write_temp(target: Path, data: bytes) -> tuple[Path, int]:
    """``data`` in a fresh, fsynced temporary file beside ``target``; its path
    and inode number."""
    tmp = _temp_name(target)
    fd = os.open(tmp, _CREATE_FLAGS, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
        inode = os.fstat(fd).st_ino
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp, inode


def _create(path: Path, header: JournalHeader, max_frame: int) -> None:
    """Publish a journal holding only ``header`` at ``path``, under a journal
    id of its own (drawn here: two journals created from one header value are
    still two journals), unless a file is already there (then leave it: the
    caller opens it)."""
    header = attrs.evolve(header, journal_id=secrets.token_bytes(JOURNAL_ID_SIZE))
    tmp, _ = _write_temp(path, encode_header(header, max_frame=max_frame))
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            # No hard links here: a rename, which could replace a journal
            # created in between; one writer per journal makes that moot.
            if not os.path.lexists(path):
                os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


class _Syncer:
    """The commit thread of one writer: one ``os.fsync`` per written group,
    in order (see the module's docstring).

    Three locks make the protocol, each a binary semaphore: ``_idle`` is held
    from a group's hand-off until its fsync has returned (or failed), so a
    hand-off waits for the previous group; ``_work`` wakes the thread;
    ``_inside`` tells the caller that the thread has the request and is about
    to release the GIL in ``os.fsync``. It holds no reference to its writer:
    an unclosed writer is collected, and a finalizer ends the thread.
    """

    def __init__(self, durable: int, timeout: float = FSYNC_TIMEOUT) -> None:
        self.timeout = timeout
        #: The last durable sequence number: set by the thread after each
        #: fsync, and by the writer only while the thread is idle.
        self.durable = durable
        #: What an fsync raised, if one did; no fsync runs after it.
        self.failure: BaseException | None = None
        self._request: tuple[int, int] | None = None  # (descriptor, last seq); None: stop
        self._idle = threading.Lock()
        self._work = threading.Lock()
        self._work.acquire()
        self._inside = threading.Lock()
        self._inside.acquire()
        self._thread: threading.Thread | None = None
        #: Set once the thread was told to end (``abandon``): later
        #: fsyncs run in the caller's thread.
        self._stopped = False
        self._pid = os.getpid()

    def hand(self, fd: int, last: int, *, inline: bool) -> None:
        """Have the thread fsync ``fd`` and then call everything up to
        ``last`` durable; waits for the previous fsync first, and until the
        thread is inside this one. With ``inline``, fsync here instead, in
        the caller's thread. A failure of this fsync (inline) or of the
        previous one is left in ``failure`` for the writer to raise.
        ``JournalWriterError`` if the previous fsync, or the thread's start
        of this one, takes more than ``timeout`` seconds."""
        self._acquire(self._idle, "the previous group's fsync")
        if self.failure is not None:
            self._idle.release()
            return
        thread = self._thread
        if (
            inline
            or self._stopped
            or sys.is_finalizing()  # no new thread now, and an old one may be gone
            or (thread is not None and not thread.is_alive())
        ):
            try:
                os.fsync(fd)
                self.durable = last
            except OSError as exc:  # anything else (an interrupt) propagates as itself
                self.failure = exc
            finally:
                self._idle.release()
            return
        if self._thread is None:
            thread = threading.Thread(target=self._run, name="frontier-journal-fsync", daemon=True)
            try:
                thread.start()
            except BaseException:
                self._idle.release()
                raise
            self._thread = thread
        self._request = (fd, last)
        self._work.release()
        self._acquire(self._inside, "the commit thread to take the group")

    def _acquire(self, lock: threading.Lock, what: str) -> None:
        if not lock.acquire(timeout=self.timeout):
            raise JournalWriterError(
                f"gave up waiting for {what} after {self.timeout:g} s: the journal's file "
                "system does not answer (a hung mount?); the writer is unusable"
            )

    def check_process(self) -> None:
        """Refuse a forked child: the thread and the locks' holders stayed in
        the parent, and the child's copy of the open group is the parent's
        too (writing it would put its records in the journal twice)."""
        if os.getpid() != self._pid:
            raise JournalWriterError(
                "a journal writer cannot be used in a forked child: open the journal there"
            )

    def wait(self) -> None:
        """Until no fsync is requested or running (``JournalWriterError``
        after ``timeout`` seconds)."""
        self.check_process()
        self._acquire(self._idle, "the fsync in flight")
        self._idle.release()

    def stop(self) -> None:
        """Wait for the fsync in progress, if any, and end the thread (in a
        forked child: forget the parent's)."""
        if os.getpid() == self._pid:
            self.wait()
        thread, self._thread = self._thread, None
        if thread is not None:
            self.abandon()
            thread.join(self.timeout)  # idle after ``wait``: it ends at once

    def abandon(self) -> None:
        """End the thread without waiting (the finalizer of a writer that
        was never closed)."""
        self._stopped = True
        self._request = None
        try:
            self._work.release()
        except RuntimeError:  # already released: the thread will see the None
            pass

    def _run(self) -> None:
        while True:
            self._work.acquire()
            request = self._request
            if request is None:
                return
            fd, last = request
            self._inside.release()
            try:
                os.fsync(fd)
            except BaseException as exc:
                self.failure = exc
                self._idle.release()
                return
            self.durable = last
            self._idle.release()


def _journal_place(writer: JournalWriter | JournalHold, *args: Any) -> tuple[str, str | None]:
    return str(writer.path)[:300], None


#: A filesystem's own failure under the journal (an I/O error, a full disk,
#: a read-only remount) is a ``StoreUnavailableError`` naming the file, as
#: it is for the checkpoints and the store: one typed error for "the
#: directory failed", whose fate the writer's own rules then decide (a
#: failed write or fsync leaves the writer unusable: reopen).
_typed = typed_io(_journal_place)


class JournalHold:
    """A hold on one journal from before its writer is opened until after
    it is closed: an exclusive ``flock`` on ``<journal>.lock`` beside it
    (created if absent and never removed, so its inode outlives the
    journal file's, which a creation, a compaction or a restore replaces,
    and exists before the journal does). Taking it also checks that no
    writer holds the journal file itself (a writer opened outside a hold),
    then lets that check's lock go again: the writer this holder opens
    takes it. ``JournalFileError`` when either is held, or a lock the
    filesystem refuses. ``close()`` lets the hold go (idempotent)."""

    @_typed
    def __init__(self, path: Path) -> None:
        self.path = path
        lock = path.with_name(path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o644)
        except OSError as exc:
            raise JournalFileError(lock, f"cannot be opened: {exc.strerror or exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise JournalFileError(lock, "not a regular file (a FIFO, device or directory)")
            _lock(fd, path)
            try:
                # Opened for writing, as the writer opens it: on NFS an
                # exclusive flock is a byte-range write lock, refused on a
                # read-only descriptor.
                file = _open(path, os.O_RDWR)
            except FileNotFoundError:
                pass
            else:
                try:
                    _lock(file, path)
                finally:
                    os.close(file)  # releases that flock: the writer takes it
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def close(self) -> None:
        """Let the hold go (its ``flock`` with its descriptor)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> JournalHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JournalWriter:
    """The single writer of one journal file (see the module's docstring).

    ``header`` names the run (its stream fingerprint and lineage): a new
    journal is created with it, an existing one must carry the same
    fingerprint and lineage (its base is its own). ``policy`` is the group
    commit policy; ``clock`` (monotonic seconds) is injectable for tests.
    ``fsync_timeout`` bounds every wait for an fsync: past it the call
    raises ``JournalWriterError`` and the writer is unusable.
    ``recovered`` is what the journal held when it was opened (its records
    and the torn tail that was truncated, if any), for the resume to replay.

    Subclasses (test hooks) may override ``_commit``, the one place a group
    reaches the file: it runs in the caller's thread, with ``_pending`` the
    group's frames (byte strings whose concatenation is the group) and
    ``_fd`` the descriptor, and the base implementation writes them and
    hands the fsync to the commit thread.
    """

    @_typed
    def __init__(
        self,
        path: str | os.PathLike[str],
        header: JournalHeader,
        policy: CommitPolicy | None = None,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
        fsync_timeout: float = FSYNC_TIMEOUT,
        ship: Shipper | None = None,
        _decoded: tuple[bytes, Decoded] | None = None,
    ) -> None:
        if not isinstance(header, JournalHeader):
            raise TypeError(f"header must be a JournalHeader, got {type(header).__name__}")
        if type(max_bytes) is not int or max_bytes < 0:
            raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        self.path = Path(path)
        self._header = header
        self.policy = policy if policy is not None else CommitPolicy()
        self._max_frame = max_frame
        self._max_bytes = max_bytes
        self._clock = clock
        self._fd = -1
        #: Where every written group and every whole new file also goes
        #: (``frontier_adapters.journal.Shipper``: off the node), or ``None``.
        self.ship = ship
        # A failure of this writer's own calls (a write, a compaction), or
        # the commit thread's once it was raised.
        self._failed: BaseException | None = None
        if not isinstance(fsync_timeout, int | float) or not 0 < fsync_timeout < math.inf:
            raise ValueError(
                f"fsync_timeout must be a number of seconds > 0, got {fsync_timeout!r}"
            )
        self._syncer = _Syncer(0, float(fsync_timeout))
        # The open group: its frames, in parts, and their size. It holds the
        # records from ``_written + 1`` to ``_next - 1``; the written group,
        # if any, those from ``durable + 1`` to ``_written``.
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._oldest = 0.0
        # Held through a commit: a second thread committing at once (the
        # writer is for one thread at a time) is refused by name instead of
        # writing the open group a second time.
        self._committing = threading.Lock()
        self._handed = -math.inf  # when the last commit returned (``time.perf_counter``)
        if not os.path.lexists(self.path):
            try:
                _create(self.path, header, max_frame)
            except OSError as exc:
                raise JournalFileError(
                    self.path, f"cannot be created: {exc.strerror or exc}"
                ) from None
        self._fd = _open(self.path, os.O_RDWR | os.O_APPEND)
        try:
            self._lock(self._fd)
            data = _read_fd(self._fd, self.path, max_bytes)
            if (
                _decoded is not None
                and max_frame == DEFAULT_MAX_FRAME
                and _decoded[1].header.fingerprint == header.fingerprint
                and _decoded[1].header.lineage == header.lineage
                and data == _decoded[0]
            ):
                # The very bytes a restore just decoded (under the same
                # checks: decoding is a function of them): not again.
                self.recovered = _decoded[1]
            else:
                self.recovered = _decode_file(
                    data, self.path, header.fingerprint, header.lineage, max_frame
                )
            # The journal's own header from here on: its id keys every frame
            # appended (``JournalHeader.key``), and its marks are carried by
            # compactions.
            self._header = self.recovered.header
            self._key = self._header.key
            if self.recovered.torn is not None:
                os.ftruncate(self._fd, self.recovered.end)
            # What a killed writer wrote may still be only in the page cache:
            # make it durable before calling it so.
            os.fsync(self._fd)
            self._remove_leftovers()
            if ship is not None:
                # The file as this life starts it, tail cut: what the last
                # life wrote and did not ship goes up with it.
                ship.replaced(data[: self.recovered.end], self.recovered.last_seq)
        except BaseException:
            self.close()
            raise
        self._next = self.recovered.next_seq
        self._written = self._syncer.durable = self.recovered.last_seq
        # Until the first compaction: ``recovered`` is then still the file
        # while nothing was appended (``as_opened``).
        self._compacted = False
        # Ends the thread of a writer collected unclosed; not at exit, where
        # it would end the thread under a writer still to be closed (its
        # ``close`` then fsyncs in the caller's thread: see ``hand``).
        weakref.finalize(self, self._syncer.abandon).atexit = False

    # -- state ----------------------------------------------------------------

    @property
    def header(self) -> JournalHeader:
        """The journal's header (its identity: fingerprint, lineage, id)."""
        return self._header

    @property
    def torn(self) -> TornTail | None:
        """The torn tail truncated at open, or ``None``."""
        return self.recovered.torn

    @property
    def position(self) -> int:
        """The sequence number of the last record appended (durable or not);
        the base if none."""
        return self._next - 1

    @property
    def durable(self) -> int:
        """The sequence number of the last durable record: every record up to
        it was written and fsynced. It advances on the commit thread, and
        only after the fsync that covers it has returned."""
        return self._syncer.durable

    @property
    def pending(self) -> int:
        """Records appended but not yet durable (the open group's, and the
        written group's while its fsync runs)."""
        return self._next - 1 - self._syncer.durable

    # -- appending --------------------------------------------------------------

    @_typed
    def append(self, record: Record) -> int:
        """Queue ``record`` for the next group and return its sequence number;
        commits the group if the policy says it is due. Raises
        ``ValueError`` (and queues nothing) for a record over ``max_frame``."""
        # The path of every append, so ``_queue`` unrolled for one record.
        if self._failed is not None or self._fd < 0 or self._syncer.failure is not None:
            self._usable()
        seq = self._next
        if not self._pending:
            self._oldest = self._clock()
        # ``max_frame`` was checked at the open and ``_next`` comes from the
        # journal, so ``append_frame``, not ``encode_record``: the frame goes
        # into the group as it is, without the argument checks.
        self._pending_bytes += append_frame(self._pending, record, seq, self._max_frame, self._key)
        self._next = seq + 1
        if self._due() == 0.0:
            self._commit()
        return seq

    @_typed
    def extend(self, records: Iterable[Record]) -> int:
        """Queue ``records`` (all or none) and return the last one's sequence
        number; commits if due."""
        self._usable()
        records = tuple(records)
        if not records:
            return self._next - 1
        starts_group = not self._pending
        self._pending_bytes += append_frames(
            self._pending, records, self._next, self._max_frame, self._key
        )
        if starts_group:
            self._oldest = self._clock()
        self._next += len(records)
        if self._due() == 0.0:
            self._commit()
        return self._next - 1

    @_typed
    def poll(self) -> float | None:
        """Commit the open group if it is due; return the seconds until it is
        (``None``: nothing is waiting for a commit). A committed group needs
        no further call: its fsync completes on the commit thread."""
        self._usable()
        if self._due() == 0.0:
            self._commit()
        return self._due()

    @_typed
    def sync(self) -> int:
        """Commit whatever is pending, now, and wait until it is durable;
        return ``durable``. Call it before a checkpoint records the journal
        position."""
        self._usable()
        if self._pending:
            self._commit()
        try:
            self._syncer.wait()
        except JournalWriterError as exc:
            self._failed = exc  # the fsync's fate is unknown
            raise
        self._usable()
        return self._syncer.durable

    def as_opened(self) -> Decoded | None:
        """``recovered`` while it is still the journal on disk (nothing
        appended, nothing compacted since the open; a torn tail it
        reported is truncated), else ``None``: what ``read`` would return
        then, without reading and decoding the file again."""
        self._usable()
        if self._compacted or self._next - 1 != self.recovered.last_seq:
            return None
        return attrs.evolve(self.recovered, torn=None) if self.recovered.torn else self.recovered

    @_typed
    def read(self) -> Decoded:
        """Commit, then decode the journal as it now is on disk (for
        ``compact``)."""
        self.sync()
        data = _read_fd(self._fd, self.path, self._max_bytes)
        return _decode_file(
            data, self.path, self._header.fingerprint, self._header.lineage, self._max_frame
        )

    @_typed
    def compact_to(
        self,
        new_path: str | os.PathLike[str],
        records: Iterable[Record],
        *,
        lost: tuple[int, int] | None = None,
        ship_timeout: float = 60.0,
    ) -> int:
        """Commit, then write ``records`` as a new journal at ``new_path``
        (which may be this journal's own path) atomically, continuing this
        journal's sequence numbers: its base is this journal's ``position``,
        so a position a checkpoint saved keeps its meaning, and its header
        keeps this journal's id and remembers its marks (``Decoded.marks``:
        it reads the journal for them), so ``Decoded.check_mark`` still proves
        a checkpoint whose mark was compacted away. The writer then
        appends to the new journal; the old file, if at another path, is left
        for the caller to remove. Returns the new ``durable``. On an error
        before the new journal is in place, nothing changed.

        ``lost=(position, checkpoint)``: the journal lost its records from
        ``position`` on with its node (``position`` past this journal's
        end), where checkpoint ``checkpoint`` saved its mark. The new
        journal's base is ``position`` and its header remembers that mark,
        so the checkpoint is proven against it again after the next crash,
        and what this life appends is numbered after everything lost.

        Shipped (``ship``), the new journal is up in the store before it is
        put in place, waiting up to ``ship_timeout`` seconds: a restart on
        this node keeps its file only while the file extends the shipped
        copy, which a compacted file whose base is not up does not. A store
        that does not take it in time is logged at WARNING and the new
        journal is put in place anyway, its base left queued: until it is
        up, a restart on this node starts from the shipped copy (what the
        node held past it is generated again). A fence is raised, nothing
        changed."""
        marks = self.read().marks()  # commits: the commit thread is idle from here on
        base = self.position
        if lost is not None:
            position, checkpoint = lost
            if position <= base:
                raise ValueError(f"lost position {position} is not past the journal's end {base}")
            base = position
            marks = (*marks, (position, checkpoint))[-MAX_MARKS:]
        target = Path(new_path)
        header = JournalHeader(
            self._header.fingerprint,
            self._header.lineage,
            base,
            self._header.journal_id,
            marks,
        )
        records = tuple(records)
        data = encode(header, records, max_frame=self._max_frame)
        if self.ship is not None:
            from ._ship import JournalFencedError, JournalShipError

            self.ship.replaced(data, header.base + len(records))
            try:
                self.ship.flush(ship_timeout)
            except JournalFencedError:
                raise
            except JournalShipError as exc:
                _log.warning("%s: compacted before its base was shipped: %s", target, exc)
        tmp, inode = _write_temp(target, data)
        try:
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        # In place now: whatever fails below, the writer must not append to
        # the file it replaced.
        old, self._fd = self._fd, -1
        os.close(old)
        self._compacted = True
        self.path = target
        self._written = self._syncer.durable = header.base + len(records)
        self._next = self._written + 1
        try:
            fd = _open(target, os.O_RDWR | os.O_APPEND)
            self._fd = fd
            if os.fstat(fd).st_ino != inode:
                raise JournalFileError(target, "was replaced by another file during compaction")
            self._lock(fd)
            _fsync_dir(target.parent)
        except BaseException as exc:
            self._failed = exc
            raise
        return self._written

    # -- lifecycle ----------------------------------------------------------------

    @_typed
    def close(self) -> None:
        """Commit what is pending (if the writer is usable), wait until it is
        durable, and close. Raises the commit thread's failure if no call
        raised it yet."""
        if self._fd < 0:
            return
        try:
            if self._failed is None and self._syncer.failure is None and self._pending:
                self._commit()
        finally:
            try:
                self._syncer.stop()  # before the descriptor goes: it may be inside an fsync
            finally:
                os.close(self._fd)
                self._fd = -1
        if self._failed is None and self._syncer.failure is not None:
            self._usable()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------

    def _usable(self) -> None:
        """Raise if the writer cannot be used: a failure (the commit thread's
        the first time as itself, chained), or closed."""
        if self._failed is None and self._syncer.failure is not None:
            self._failed = failure = self._syncer.failure
            raise JournalWriterError(
                f"{self.path}: an fsync of the journal failed ({failure!r:.200}), so records "
                f"after {self._syncer.durable} may not be durable; reopen it"
            ) from failure
        if isinstance(self._failed, CheckpointFencedError):
            # A newer life claimed the run: said as itself at every call,
            # since reopening does not help (this life must stop).
            raise self._failed
        if self._failed is not None:
            raise JournalWriterError(
                f"{self.path}: the journal writer failed ({self._failed!r:.200}); reopen it"
            )
        if self._fd < 0:
            raise JournalWriterError(f"{self.path}: the journal writer is closed")

    def _lock(self, fd: int) -> None:
        _lock(fd, self.path)

    @staticmethod
    def hold(path: str | os.PathLike[str]) -> JournalHold:
        """Hold the journal at ``path`` for a writer this process opens
        later (``JournalHold``), or raise ``JournalFileError`` ("another
        writer holds this journal") when another holder or a writer of the
        file has it: what a run's open takes before it does anything
        another life would notice (claiming its epoch), and keeps until its
        writer is closed."""
        return JournalHold(Path(path))

    def _remove_leftovers(self) -> None:
        """Temporary files of creations and compactions killed midway."""
        prefix = f".{self.path.name}{_TMP_INFIX}"
        for entry in os.scandir(self.path.parent):
            if entry.name.startswith(prefix) and entry.is_file(follow_symlinks=False):
                Path(entry.path).unlink(missing_ok=True)

    def _due(self) -> float | None:
        return self.policy.due_in(
            pending_bytes=self._pending_bytes,
            pending_records=self._next - 1 - self._written,
            elapsed=self._clock() - self._oldest,
        )

    def _commit(self) -> None:
        """The one place a group reaches the file: one write of the whole
        open group, here, then its fsync handed to the commit thread, or
        done here when the group came due within ``_OVERLAP_MIN`` (either
        way after the previous group's fsync has returned)."""
        if not self._committing.acquire(blocking=False):
            raise JournalWriterError(
                f"{self.path}: two threads committed at once; a journal writer is for one "
                "thread at a time (a Run's: call run.sync(), which takes the run's lock)"
            )
        try:
            self._commit_group()
        finally:
            self._committing.release()

    def _commit_group(self) -> None:
        self._syncer.check_process()
        group = b"".join(self._pending)
        try:
            _write_all(self._fd, group)
        except BaseException as exc:
            self._failed = exc
            raise
        first, self._written = self._written + 1, self._next - 1
        self._pending = []
        self._pending_bytes = 0
        if self.ship is not None:
            try:
                self.ship.committed(group, first, self._written)
            except BaseException as exc:
                # Written but not handed to the shipper: the shipped copy
                # would have a hole, so the writer is done (reopen it).
                self._failed = exc
                raise
        inline = time.perf_counter() - self._handed < _OVERLAP_MIN
        try:
            self._syncer.hand(self._fd, self._written, inline=inline)
        except BaseException as exc:
            # The group is written and its fsync never ran (a thread that
            # could not start, an interrupt while waiting for the previous
            # fsync): its fate is unknown, as after a failed write.
            self._failed = exc
            raise
        self._handed = time.perf_counter()
        if self._syncer.failure is not None:
            self._usable()
