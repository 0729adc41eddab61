"""The journal file: group commit, recovery at open, refusals, compaction, and
real SIGKILLs.

The kill test runs a writer in a subprocess that appends deterministic
records under group commit and reports every sync; it is SIGKILLed at random
moments and reopened, and each reopen must hold a prefix of what was
appended that contains every record reported durable. The long run is

    FRONTIER_JOURNAL_KILLS=200 .venv/bin/python -m pytest \
        tests/adapters/test_journal_files.py -k sigkilled
"""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path
from unittest import mock

import pytest
from frontier_adapters.journal import _files as _journal_files
from frontier_adapters.journal._files import (
    JournalFileError,
    JournalWriter,
    JournalWriterError,
    read_journal,
)
from hypothesis import given
from hypothesis import strategies as st

from frontier_core import CheckpointCorruptError
from frontier_core.journal import (
    FRAME_OVERHEAD,
    BytesPayload,
    CommitPolicy,
    JournalBehindError,
    JournalCorruptError,
    JournalHeader,
    JournalMismatchError,
    Mark,
    Progress,
    Record,
    Sealed,
    TokenPayload,
    TornTail,
    compact,
    encode,
    encode_record,
    replay,
)
from tests.core.journal._strategies import budget, records

ROOT = Path(__file__).resolve().parents[2]
HEADER = JournalHeader("fp-v1", "lineage-a")


class Clock:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


_BASE_TOKENS = array("I", [(k * 7919) % 50_000 for k in range(1 << 15)])
_BASE_LOGPROBS = array("f", [-1.0 / (k + 1) for k in range(1 << 15)])


def record_for(i: int) -> Record:
    """The ``i``-th record of the kill test's stream (0-based): deterministic,
    cheap to build (slices of fixed arrays), and a mix of small frames and
    large ones (up to 256 KiB) so that groups span many pages."""
    rng = random.Random(i)
    if i % 97 == 96:
        return Mark(i)
    ordinal, sibling = divmod(i, 4)
    n = rng.randrange(4_000, 1 << 15) if rng.random() < 0.1 else rng.randrange(0, 64)
    start = rng.randrange(1 << 14)
    n = min(n, (1 << 15) - start)
    payload = TokenPayload.of(
        _BASE_TOKENS[start : start + n], _BASE_LOGPROBS[start : start + n], i // 50
    )
    cls = Sealed if rng.random() < 0.5 else Progress
    return cls(ordinal, sibling, rng.randrange(3), payload)


def sizes(path: Path) -> int:
    return path.stat().st_size


# -- creating, appending, group commit -------------------------------------------------


def test_a_new_journal_starts_with_its_header_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with JournalWriter(path, HEADER) as w:
        assert w.recovered.records == () and w.torn is None
        assert (w.position, w.durable) == (0, 0)
        header = read_journal(path).header
        assert (header.fingerprint, header.lineage, header.base) == ("fp-v1", "lineage-a", 0)
        assert header.journal_id != HEADER.journal_id  # drawn at creation
        assert w.append(record_for(0)) == 1
        assert w.extend([record_for(1), record_for(2)]) == 3
        assert w.sync() == 3
    decoded = read_journal(path, fingerprint="fp-v1", lineage="lineage-a")
    assert decoded.records == tuple(record_for(i) for i in range(3))
    with JournalWriter(path, HEADER) as w:
        assert w.recovered.records == decoded.records
        assert (w.position, w.durable) == (3, 3)
        assert w.append(record_for(3)) == 4
    assert len(read_journal(path).records) == 4
    # Only the journal is left in the directory: no temporary file.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal"]


def test_group_commit_writes_nothing_until_the_group_is_due(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    clock = Clock()
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=0.010, max_bytes=10_000), clock=clock)
    empty = sizes(path)
    small = Sealed(0, 0, 0, BytesPayload(b"x" * 10))
    for _ in range(5):
        w.append(small)
        clock.now += 0.001
    assert (w.pending, w.position, w.durable, sizes(path)) == (5, 5, 0, empty)
    assert w.poll() == pytest.approx(0.005)  # not due yet
    clock.now += 0.005
    assert w.poll() is None  # due: written, its fsync on the commit thread
    assert len(read_journal(path).records) == 5
    assert w.sync() == 5 and (w.pending, w.durable) == (0, 5)
    # The byte bound commits at the append that reaches it.
    big = Sealed(1, 0, 0, BytesPayload(bytes(6_000)))
    w.append(big)
    assert len(read_journal(path).records) == 5
    w.append(big)
    assert len(read_journal(path).records) == 7
    # The delay is checked at every append, too.
    w.append(small)
    clock.now += 0.011
    w.append(small)
    assert len(read_journal(path).records) == 9
    w.append(small)
    assert w.durable <= 9
    w.close()  # close commits, and waits for the fsync
    assert len(read_journal(path).records) == 10
    with pytest.raises(JournalWriterError, match="closed"):
        w.append(small)



def test_a_second_thread_committing_at_once_is_refused_and_the_group_written_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is for one thread at a time: a commit from a second
    thread while the first is inside its write is refused by name (it used
    to write the open group a second time: a journal read back as corrupt),
    and the group reaches the file once."""
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER)
    inside, release = threading.Event(), threading.Event()
    write = _journal_files._write_all

    def slow(fd: int, data: bytes | memoryview) -> None:
        inside.set()
        assert release.wait(10.0)
        write(fd, data)

    monkeypatch.setattr(_journal_files, "_write_all", slow)
    w.extend(Sealed(o, 0, 0, BytesPayload(b"x" * 10)) for o in range(3))
    first = threading.Thread(target=w.sync)
    first.start()
    assert inside.wait(10.0)
    with pytest.raises(JournalWriterError, match="two threads committed at once"):
        w.sync()
    release.set()
    first.join(10.0)
    assert not first.is_alive()
    monkeypatch.setattr(_journal_files, "_write_all", write)
    assert w.sync() == 3  # the refused call changed nothing
    w.close()
    assert [r.ordinal for r in read_journal(path).records] == [0, 1, 2]

def test_extend_queues_all_or_nothing(tmp_path: Path) -> None:
    w = JournalWriter(tmp_path / "j", HEADER, CommitPolicy(max_delay=1.0), max_frame=1000)
    good = Sealed(0, 0, 0, BytesPayload(b"ok"))
    with pytest.raises(ValueError, match="exceeds max_frame"):
        w.extend([good, Sealed(0, 1, 0, BytesPayload(bytes(2000))), good])
    assert (w.pending, w.position) == (0, 0)
    with pytest.raises(ValueError, match="exceeds max_frame"):
        w.append(Sealed(0, 1, 0, BytesPayload(bytes(2000))))
    assert w.extend([]) == 0
    w.close()


# -- recovery at open ---------------------------------------------------------------------


def test_a_torn_tail_is_truncated_reported_and_appended_after(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with JournalWriter(path, HEADER) as w:
        w.extend([record_for(i) for i in range(5)])
    whole = path.read_bytes()
    fragment = encode_record(record_for(5), 6, header=HEADER)[:-7]
    path.write_bytes(whole + fragment)
    with JournalWriter(path, HEADER) as w:
        assert w.torn is not None
        assert (w.torn.offset, w.torn.length) == (len(whole), len(fragment))
        assert sizes(path) == len(whole)
        assert w.append(record_for(5)) == 6
    assert read_journal(path).records == tuple(record_for(i) for i in range(6))


def test_a_group_cut_short_by_zero_bytes_is_truncated_reported_and_appended_after(
    tmp_path: Path,
) -> None:
    """A power cut during a group commit on a file system that extended the
    file: the group's first bytes persisted, zeros after them to the end."""
    path = tmp_path / "journal"
    with JournalWriter(path, HEADER) as w:
        w.extend([record_for(i) for i in range(5)])
    whole = path.read_bytes()
    first = encode_record(record_for(5), 6, header=HEADER)
    group = first + encode_record(record_for(6), 7, header=HEADER)
    written = len(first) // 2  # inside the group's first frame, past its head
    assert written > FRAME_OVERHEAD
    path.write_bytes(whole + group[:written] + bytes(len(group) - written))
    with JournalWriter(path, HEADER) as w:
        assert w.torn == TornTail(len(whole), len(group), "a frame cut short by zero bytes")
        assert w.recovered.records == tuple(record_for(i) for i in range(5))
        assert sizes(path) == len(whole)
        assert w.append(record_for(5)) == 6
    assert read_journal(path).records == tuple(record_for(i) for i in range(6))


def test_mid_file_corruption_is_refused_and_the_file_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with JournalWriter(path, HEADER) as w:
        w.extend([record_for(i) for i in range(5)])
    data = bytearray(path.read_bytes())
    data[len(encode(HEADER, [])) + 30] ^= 0x04  # inside the first record
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError) as info:
        JournalWriter(path, HEADER)
    assert info.value.offset == len(encode(HEADER, []))
    assert str(path) in str(info.value) and info.value.path == str(path)  # type: ignore[attr-defined]
    assert isinstance(info.value, CheckpointCorruptError)
    assert path.read_bytes() == bytes(data)
    with pytest.raises(JournalCorruptError):
        read_journal(path)


def test_a_journal_of_another_run_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    JournalWriter(path, HEADER).close()
    before = path.read_bytes()
    with pytest.raises(JournalMismatchError) as info:
        JournalWriter(path, JournalHeader("fp-v2", "lineage-a"))
    assert info.value.field == "fingerprint" and str(path) in str(info.value)
    with pytest.raises(JournalMismatchError) as info:
        JournalWriter(path, JournalHeader("fp-v1", "lineage-b"))
    assert info.value.field == "lineage"
    assert path.read_bytes() == before


def test_a_frame_of_another_run_spliced_in_is_refused_and_never_replayed(
    tmp_path: Path,
) -> None:
    """Issue 21 item 1: two runs with the same fingerprint and lineage (the
    README's names, another seed), a ``Sealed`` frame of one copied into the
    other at the same sequence number: the open refuses it in the middle and
    discards it as a torn tail at the end; its sample is never replayed."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    header = JournalHeader("my-dataset-v1", "run-42")
    mine = [Sealed(0, s, 0, BytesPayload(b"ours-%d" % s)) for s in range(3)]
    other = [Sealed(0, s, 0, BytesPayload(b"oth3-%d" % s)) for s in range(3)]
    for path, recs in ((ours, mine), (theirs, other)):
        with JournalWriter(path, header) as w:
            w.extend(recs)
    a, b = ours.read_bytes(), theirs.read_bytes()
    size = FRAME_OVERHEAD + len(encode_record(mine[0], 1, header=header)) - FRAME_OVERHEAD
    end = len(a)
    middle, last = end - 2 * size, end - size
    assert a[:middle] != b[:middle]  # two journals: their ids differ
    ours.write_bytes(a[:middle] + b[middle:last] + a[last:])
    with pytest.raises(JournalCorruptError) as info:
        JournalWriter(ours, header)
    assert info.value.offset == middle and "another journal" in info.value.reason
    assert ours.read_bytes() == a[:middle] + b[middle:last] + a[last:]  # left alone
    ours.write_bytes(a[:last] + b[last:])
    with JournalWriter(ours, header) as w:
        assert w.recovered.records == tuple(mine[:2])  # theirs discarded, not replayed
        assert w.torn is not None and w.torn.reason == "the last frame fails its check"
        w.append(mine[2])
    assert read_journal(ours).records == tuple(mine)


def test_a_reopened_journal_keeps_its_own_identity(tmp_path: Path) -> None:
    """The header handed to a writer names the run; the journal's id is the
    file's own, drawn when it was created: frames appended after a reopen (a
    new ``JournalHeader`` value, a new id) are keyed to the file's."""
    path = tmp_path / "journal"
    with JournalWriter(path, JournalHeader("fp", "run")) as w:
        w.append(record_for(0))
    created = read_journal(path).header.journal_id
    with JournalWriter(path, JournalHeader("fp", "run")) as w:
        w.append(record_for(1))
    decoded = read_journal(path)
    assert decoded.header.journal_id == created
    assert decoded.records == (record_for(0), record_for(1))


def test_a_directory_or_an_unreadable_file_at_the_journal_path_is_a_typed_error(
    tmp_path: Path,
) -> None:
    """Issue 21 item 7: these raised a bare ``IsADirectoryError`` and
    ``PermissionError``."""
    directory = tmp_path / "journal"
    directory.mkdir()
    with pytest.raises(JournalFileError, match="is a directory"):
        JournalWriter(directory, HEADER)
    with pytest.raises(JournalFileError, match="directory"):
        read_journal(directory)
    assert directory.is_dir() and not list(directory.iterdir())
    # An unreadable file (EACCES at the open: as root, mode 0 reads anyway,
    # so the open is made to fail as it does for another user).
    locked = tmp_path / "locked"
    JournalWriter(locked, HEADER).close()
    before = locked.read_bytes()
    real_open = os.open

    def refuse(path: object, *args: object, **kwargs: object) -> int:
        if os.fspath(path) == os.fspath(locked):  # type: ignore[arg-type]
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(locked))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    with mock.patch.object(_journal_files.os, "open", refuse):
        with pytest.raises(JournalFileError, match="cannot be opened: Permission denied"):
            JournalWriter(locked, HEADER)
        with pytest.raises(JournalFileError, match="cannot be opened: Permission denied"):
            read_journal(locked)
    assert locked.read_bytes() == before
    nowhere = tmp_path / "no-such-dir" / "journal"
    with pytest.raises(JournalFileError, match="cannot be created"):
        JournalWriter(nowhere, HEADER)
    assert not nowhere.parent.exists()


def test_a_symlink_a_fifo_and_an_oversized_file_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    JournalWriter(real, HEADER).close()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(JournalFileError, match="symlink"):
        JournalWriter(link, HEADER)
    with pytest.raises(JournalFileError, match="symlink"):
        read_journal(link)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(JournalFileError, match="symlink"):
        JournalWriter(dangling, HEADER)
    assert not (tmp_path / "nowhere").exists()  # nothing created through it
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(JournalFileError, match="not a regular file"):
        JournalWriter(fifo, HEADER)  # and it did not block
    with pytest.raises(JournalFileError, match="not a regular file"):
        read_journal(fifo)
    with pytest.raises(JournalFileError, match="more than the 10 allowed"):
        JournalWriter(real, HEADER, max_bytes=10)
    with pytest.raises(FileNotFoundError):
        read_journal(tmp_path / "absent")


def test_one_writer_per_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    with JournalWriter(path, HEADER):
        with pytest.raises(JournalFileError, match="another writer"):
            JournalWriter(path, HEADER)
    JournalWriter(path, HEADER).close()  # released with the first


def test_leftover_temporary_files_are_removed_at_open(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    JournalWriter(path, HEADER).close()
    (tmp_path / ".journal.tmp-0123456789abcdef").write_bytes(b"half a compaction")
    (tmp_path / ".other.tmp-0123456789abcdef").write_bytes(b"not ours")
    JournalWriter(path, HEADER).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.tmp-0123456789abcdef", "journal"]


class GatedFsync:
    """``os.fsync`` that, for the descriptors of one file, records the file's
    size when it starts, waits for ``gate``, then syncs or, with ``fail``,
    raises EIO (other files pass through)."""

    def __init__(self, path: Path, *, fail: bool = False) -> None:
        self.inode = path.stat().st_ino
        self.fail = fail
        self.started: list[int] = []
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)
        self.returned = 0
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        st = os.fstat(fd)
        if st.st_ino != self.inode:
            self.real(fd)
            return
        self.started.append(st.st_size)
        self.entered.release()
        assert self.gate.wait(timeout=60), "the test never opened the gate"
        if self.fail:
            raise OSError(5, "Input/output error")
        self.real(fd)
        self.returned += 1


def test_a_failed_fsync_makes_the_writer_unusable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=0))
    failing = GatedFsync(path, fail=True)
    monkeypatch.setattr(os, "fsync", failing)
    w.append(record_for(0))  # written; returns with its fsync running
    assert failing.entered.acquire(timeout=60)
    failing.gate.set()  # the fsync fails, on the commit thread, after the call returned
    with pytest.raises(JournalWriterError, match="fsync of the journal failed") as info:
        w.append(record_for(1))
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == 5
    monkeypatch.undo()
    assert w.durable == 0  # never advanced past the failed fsync
    for call in (lambda: w.append(record_for(2)), w.sync, w.poll, lambda: w.extend([])):
        with pytest.raises(JournalWriterError, match="failed"):
            call()
    w.close()  # raised already: close is quiet
    # Reopening recovers what reached the file.
    with JournalWriter(path, HEADER) as again:
        assert again.recovered.records in ((), (record_for(0),), (record_for(0), record_for(1)))


def test_an_fsync_that_never_returns_is_a_typed_error_within_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 item 5, no wait without a bound: a hung mount (an fsync that
    does not return) ends ``sync`` and the next append with
    ``JournalWriterError`` after ``fsync_timeout``, and the writer refuses
    further use (the group's fate is unknown)."""
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=0), fsync_timeout=0.5)
    hung = GatedFsync(path)
    monkeypatch.setattr(os, "fsync", hung)
    try:
        w.append(record_for(0))  # handed to the commit thread, which hangs in it
        assert hung.entered.acquire(timeout=60)
        start = time.monotonic()
        with pytest.raises(JournalWriterError, match=r"gave up waiting .* after 0.5 s"):
            w.sync()
        assert 0.4 < time.monotonic() - start < 30
        with pytest.raises(JournalWriterError):
            w.append(record_for(1))
        assert w.durable == 0
    finally:
        hung.gate.set()  # let the thread go (a daemon, blocked in the fake fsync)
        monkeypatch.undo()
    with pytest.raises(ValueError, match="fsync_timeout"):
        JournalWriter(tmp_path / "other", HEADER, fsync_timeout=0)


def test_a_failed_fsync_no_call_raised_is_raised_by_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=0))
    failing = GatedFsync(path, fail=True)
    monkeypatch.setattr(os, "fsync", failing)
    w.append(record_for(0))
    assert failing.entered.acquire(timeout=60)
    failing.gate.set()
    with pytest.raises(JournalWriterError, match="fsync of the journal failed"):
        w.close()
    assert w.durable == 0
    with pytest.raises(JournalWriterError):
        w.append(record_for(1))


def test_sync_raises_a_failure_of_the_fsync_it_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=60.0))
    w.extend([record_for(i) for i in range(3)])
    assert w.sync() == 3
    failing = GatedFsync(path, fail=True)
    failing.gate.set()
    monkeypatch.setattr(os, "fsync", failing)
    w.append(record_for(3))
    with pytest.raises(JournalWriterError, match="records after 3 may not be durable"):
        w.sync()
    assert w.durable == 3
    w.close()


def test_a_failed_write_raises_its_oserror_from_the_committing_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = JournalWriter(tmp_path / "journal", HEADER, CommitPolicy(max_delay=0))

    def fail(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", fail)
    with pytest.raises(OSError, match="No space"):
        w.append(record_for(0))
    monkeypatch.undo()
    with pytest.raises(JournalWriterError, match="failed"):
        w.append(record_for(1))
    w.close()


# -- the commit thread: durability under concurrency ----------------------------------


def test_durable_advances_only_when_the_fsync_covering_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=60.0, max_records=4))
    gated = GatedFsync(path)
    monkeypatch.setattr(os, "fsync", gated)
    w.extend([record_for(i) for i in range(4)])  # due: written, fsync held at the gate
    assert gated.entered.acquire(timeout=60)
    assert len(read_journal(path).records) == 4  # in the file...
    assert (w.durable, w.pending, w.position) == (0, 4, 4)  # ...but not durable
    w.append(record_for(4))  # the caller goes on appending meanwhile
    done: list[int] = []
    syncing = threading.Thread(target=lambda: done.append(w.sync()))
    syncing.start()
    syncing.join(timeout=0.3)
    assert syncing.is_alive() and not done and w.durable == 0  # sync waits for the fsync
    gated.gate.set()
    syncing.join(timeout=60)
    assert done == [5] and w.durable == 5 and w.pending == 0
    # Each durable step was covered by an fsync that started with its bytes
    # in the file: the group of 4, then the one record sync committed.
    assert gated.returned == 2
    decoded = read_journal(path)
    ends = [len(encode(HEADER, decoded.records[:k])) for k in (4, 5)]
    assert gated.started == ends
    w.close()


def test_close_waits_for_the_fsync_in_flight_before_closing_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=0))
    gated = GatedFsync(path)
    monkeypatch.setattr(os, "fsync", gated)
    w.append(record_for(0))
    assert gated.entered.acquire(timeout=60)
    closing = threading.Thread(target=w.close)
    closing.start()
    closing.join(timeout=0.3)
    assert closing.is_alive()  # held by the fsync, whose descriptor is still open
    gated.gate.set()
    closing.join(timeout=60)
    assert not closing.is_alive() and gated.returned == 1 and w.durable == 1
    monkeypatch.undo()
    assert read_journal(path).records == (record_for(0),)


#: ``_OVERLAP_MIN`` values that send every group's fsync to the commit thread,
#: or every one but the first to the caller's thread.
FSYNC_PATHS = pytest.mark.parametrize("overlap_min", [0.0, 1e9], ids=["thread", "inline"])


@FSYNC_PATHS
def test_each_group_gets_its_own_fsync_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overlap_min: float
) -> None:
    """The commit thread never merges groups: as many fsyncs as commits, in
    order, each starting once its group is whole in the file and the group
    before it durable, and ``durable`` only ever at a group's end."""
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=60.0, max_records=3))
    started: list[tuple[int, int]] = []  # (file size, durable) when each fsync starts
    real = os.fsync

    def recording(fd: int) -> None:
        started.append((os.fstat(fd).st_size, w.durable))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    monkeypatch.setattr(_journal_files, "_OVERLAP_MIN", overlap_min)
    seen = set()
    for i in range(20):
        w.append(record_for(i))
        seen.add(w.durable)
    w.close()
    monkeypatch.undo()
    decoded = read_journal(path)
    assert len(decoded.records) == 20
    group_ends = [*range(3, 20, 3), 20]
    assert len(started) == len(group_ends)
    for (size, durable), end, before in zip(started, group_ends, [0, *group_ends], strict=False):
        # Its group was whole in the file (the caller may have written the
        # next one already), and everything before it was durable.
        assert size >= len(encode(HEADER, decoded.records[:end]))
        assert durable == before
    assert seen <= {0, *group_ends}


EXIT_SCRIPT = """
import atexit, sys
from frontier_adapters.journal._files import JournalWriter
from frontier_core.journal import CommitPolicy, JournalHeader, Mark

path, how = sys.argv[1], sys.argv[2]
header = JournalHeader("fp-v1", "lineage-a")
if how == "atexit":
    # Registered before the writer exists, so it runs after anything the
    # writer registered: a writer still open at exit, closed then.
    holder = []
    atexit.register(lambda: holder[0].close())
    w = JournalWriter(path, header, CommitPolicy(max_delay=60))
    holder.append(w)
    w.append(Mark(1)); w.sync()  # the commit thread runs
    w.append(Mark(2))  # pending at exit
else:
    def life():
        with JournalWriter(path, header, CommitPolicy(max_delay=60)) as w:
            w.append(Mark(1)); w.sync()
            w.append(Mark(2))
            yield
    gen = life(); next(gen)  # suspended inside the with block until the exit
    sys.modules["__main__"].keep = gen
print("exiting", flush=True)
"""


@pytest.mark.parametrize("how", ["atexit", "suspended"])
def test_a_writer_closed_at_interpreter_exit_does_not_hang_and_keeps_its_records(
    tmp_path: Path, how: str
) -> None:
    """A writer closed while the interpreter exits (by an atexit handler,
    or a suspended ``with`` block collected at exit) commits its open group
    and returns, its fsync in the exiting thread if the commit thread is
    gone: it neither hangs nor loses the group."""
    path = tmp_path / "journal"
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(path), how],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    with JournalWriter(path, HEADER) as again:
        assert again.recovered.records == (Mark(1), Mark(2))
        assert again.torn is None


def test_a_commit_thread_that_cannot_start_leaves_the_writer_unusable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group was written, its fsync never ran: the committing call
    raises, and every later call refuses (a ``sync`` does not report the
    written group durable, nor does ``close`` return as if it were)."""
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=60))

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_journal_files, "_OVERLAP_MIN", -1.0)  # always hand to the thread
    monkeypatch.setattr(threading.Thread, "start", refuse)
    w.append(record_for(0))
    with pytest.raises(RuntimeError, match="can't start new thread"):
        w.sync()
    monkeypatch.undo()
    assert w.durable == 0
    for call in (w.sync, lambda: w.append(record_for(1))):
        with pytest.raises(JournalWriterError, match="failed"):
            call()
    w.close()
    with JournalWriter(path, HEADER) as again:
        assert again.recovered.records in ((), (record_for(0),))


def test_an_interrupt_during_an_inline_fsync_propagates_as_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt in the caller's own fsync is the caller's
    interrupt, not an fsync failure; the writer, whose group's fate is
    unknown, refuses further use."""
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=60))
    inode = path.stat().st_ino
    real = os.fsync

    def interrupted(fd: int) -> None:
        if os.fstat(fd).st_ino == inode:
            raise KeyboardInterrupt
        real(fd)

    # Inline: a group due right after the previous commit (a tight loop).
    monkeypatch.setattr(_journal_files, "_OVERLAP_MIN", float("inf"))
    w._handed = time.perf_counter()
    monkeypatch.setattr(os, "fsync", interrupted)
    w.append(record_for(0))
    with pytest.raises(KeyboardInterrupt):
        w.sync()
    monkeypatch.undo()
    assert w.durable == 0
    with pytest.raises(JournalWriterError, match="KeyboardInterrupt"):
        w.sync()
    w.close()


def test_a_forked_child_is_refused_a_writer_opened_by_its_parent(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=60.0))
    w.append(record_for(0))
    w.sync()
    w.append(record_for(1))  # open in the parent: the child must not write it too
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 3
        try:
            w.sync()
        except JournalWriterError:
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    w.close()
    assert read_journal(path).records == (record_for(0), record_for(1))


# Operations on a writer: ("append", record), ("extend", records), ("tick",
# seconds) advances the hand clock, ("poll",), ("sync",).
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), records),
        st.tuples(st.just("extend"), st.lists(records, max_size=4)),
        st.tuples(st.just("tick"), st.sampled_from([0.0, 0.002, 0.02])),
        st.tuples(st.just("poll")),
        st.tuples(st.just("sync")),
    ),
    max_size=30,
)
_policies = st.builds(
    CommitPolicy,
    max_delay=st.sampled_from([0.0, 0.005, 60.0]),
    max_bytes=st.sampled_from([0, 200, 1 << 20]),
    max_records=st.one_of(st.none(), st.integers(1, 5)),
)


@FSYNC_PATHS
@budget(30)
@given(_policies, _ops, st.booleans())
def test_whatever_the_batching_the_file_holds_exactly_what_was_appended(
    overlap_min: float, policy: CommitPolicy, ops: list[tuple[object, ...]], reopen: bool
) -> None:
    """Any policy, any interleaving of appends, polls, syncs and time: the
    file is always a prefix of the appended records at least as long as
    ``durable``, ``durable`` never decreases and never passes the position,
    a sync makes everything durable, and the closed (and reopened) journal
    decodes to exactly the appended records."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(_journal_files, "_OVERLAP_MIN", overlap_min),
    ):
        path = Path(tmp) / "journal"
        clock = Clock()
        appended: list[Record] = []
        w = JournalWriter(path, HEADER, policy, clock=clock)
        durable = 0
        for op in ops:
            if op[0] == "append":
                assert w.append(op[1]) == len(appended) + 1  # type: ignore[arg-type]
                appended.append(op[1])  # type: ignore[arg-type]
            elif op[0] == "extend":
                batch = list(op[1])  # type: ignore[call-overload]
                assert w.extend(batch) == len(appended) + len(batch)
                appended += batch
            elif op[0] == "tick":
                clock.now += op[1]  # type: ignore[operator]
            elif op[0] == "poll":
                w.poll()
            else:
                assert w.sync() == len(appended) == w.durable
            assert durable <= w.durable <= w.position == len(appended)
            durable = w.durable
            on_disk = read_journal(path).records
            assert w.durable <= len(on_disk) and on_disk == tuple(appended[: len(on_disk)])
        if reopen:
            w.sync()
            w.close()
            w = JournalWriter(path, HEADER, policy, clock=clock)
            assert w.recovered.records == tuple(appended)
            assert w.durable == w.position == len(appended)
        w.close()
        assert read_journal(path).records == tuple(appended)


# -- compaction -----------------------------------------------------------------------------


def test_compaction_in_place_keeps_the_window_and_the_numbering(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=1.0))
    w.extend([record_for(i) for i in range(40)])
    w.append(Mark(7))
    mark_at = w.position
    w.sync()
    window = range(5, 10)
    records = w.read().records
    assert w.compact_to(path, compact(records, window)) == w.position
    assert w.position == mark_at + len(compact(records, window))
    decoded = read_journal(path)
    assert decoded.header.base == mark_at
    assert replay(decoded.records) == replay(records).restrict(window)
    decoded.check_mark(mark_at, 7)  # folded into the base: remembered, still accepted
    assert decoded.header.marks == ((mark_at, 7),)
    with pytest.raises(JournalBehindError, match="another branch"):
        decoded.check_mark(mark_at, 8)  # it used to pass any position at or below the base
    with pytest.raises(JournalBehindError, match="another branch"):
        decoded.check_mark(mark_at - 1, 7)
    # Appends continue the numbering, on the new file.
    seq = w.append(record_for(40))
    w.close()
    assert seq == decoded.last_seq + 1
    again = read_journal(path)
    assert again.records[-1] == record_for(40) and again.last_seq == seq
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal"]


def test_compaction_to_another_path_leaves_the_old_journal(tmp_path: Path) -> None:
    old, new = tmp_path / "j1", tmp_path / "j2"
    w = JournalWriter(old, HEADER)
    w.extend([record_for(i) for i in range(8)])
    w.compact_to(new, compact(w.read().records, {0, 1}))
    w.append(record_for(8))
    w.close()
    assert len(read_journal(old).records) == 8
    assert read_journal(new).records[-1] == record_for(8)
    with pytest.raises(JournalFileError, match="another writer"):
        with JournalWriter(new, HEADER):
            JournalWriter(new, HEADER)


def test_a_compaction_that_fails_before_the_rename_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal"
    w = JournalWriter(path, HEADER)
    w.extend([record_for(i) for i in range(8)])
    w.sync()
    before = path.read_bytes()

    def fail(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        w.compact_to(path, compact(w.read().records, {0}))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal"]
    assert w.append(record_for(8)) == 9  # still usable, on the old journal
    w.close()
    assert len(read_journal(path).records) == 9


# -- real kills -----------------------------------------------------------------------------

CHILD = """
import sys
sys.path.insert(0, {root!r})
from tests.adapters.test_journal_files import child_main
child_main(sys.argv[1], int(sys.argv[2]))
"""
#: Bytes a child appends in one life before it idles (bounds the disk used).
LIFE_BYTES = 4 << 20
#: Lives per journal: the long run starts a fresh journal after this many.
LIVES = 10


def child_main(path: str, budget: int) -> None:
    """Append ``record_for(i)`` under group commit, printing the durable
    position after every commit, until ``budget`` bytes; then idle."""
    w = JournalWriter(path, HEADER, CommitPolicy(max_delay=0.002, max_bytes=1 << 20))
    torn = w.torn.length if w.torn is not None else 0
    print("open", len(w.recovered.records), torn, flush=True)
    i = len(w.recovered.records)
    durable = w.durable
    end = os.path.getsize(path) + budget
    while os.path.getsize(path) < end:
        w.append(record_for(i))
        i += 1
        if w.durable != durable:
            durable = w.durable
            print("durable", durable, flush=True)
    w.sync()
    print("durable", w.durable, flush=True)
    time.sleep(3600)


def kill_lives(path: Path, lives: int, rng: random.Random, expected: list[Record]) -> int:
    """Run ``lives`` children on ``path``, each SIGKILLed at a random moment,
    checking the journal after each; return how many reopens found a torn
    tail."""
    reported = 0  # the highest position a child reported durable
    torn_seen = 0
    for _ in range(lives):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD.format(root=str(ROOT)), str(path), str(LIFE_BYTES)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            assert proc.stdout is not None
            opened = proc.stdout.readline().split()
            assert opened[0] == "open", opened
            # The reopen holds everything reported durable before the last kill.
            assert int(opened[1]) >= reported
            torn_seen += int(opened[2]) > 0
            time.sleep(rng.uniform(0.0, 0.12))
        finally:
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        lines = [line.split() for line in out.splitlines()]
        assert all(kind == "durable" for kind, _ in lines)
        reported = max([reported, *(int(n) for _, n in lines)])
        decoded = read_journal(path, fingerprint="fp-v1", lineage="lineage-a")
        # A prefix of the appended stream, in order, every durable record in.
        assert decoded.last_seq >= reported
        while len(expected) < len(decoded.records):
            expected.append(record_for(len(expected)))
        assert decoded.records == tuple(expected[: len(decoded.records)])
        if decoded.torn is not None:
            assert decoded.torn.offset == decoded.end == sizes(path) - decoded.torn.length
    assert reported > 0
    return torn_seen


def test_sigkilled_appends_leave_a_durable_prefix(tmp_path: Path) -> None:
    kills = int(os.environ.get("FRONTIER_JOURNAL_KILLS", "6"))
    rng = random.Random(13)
    expected: list[Record] = []
    torn = 0
    for start in range(0, kills, LIVES):
        torn += kill_lives(tmp_path / f"journal-{start}", min(LIVES, kills - start), rng, expected)
    # Torn tails are likely, not certain, with kills at random moments.
    print(f"{kills} kills: {torn} reopens truncated a torn tail")


def test_a_journal_that_cannot_be_locked_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem that refuses the writer's lock (ENOLCK: an NFS mount
    without a lock manager) is a ``JournalFileError`` naming the file, for
    the writer and for a run's check before it claims, not a bare OSError:
    without the lock no second writer could be kept out."""
    path = tmp_path / "journal"
    JournalWriter(path, HEADER).close()

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(_journal_files.fcntl, "flock", no_locks)
    with pytest.raises(JournalFileError, match="cannot be locked"):
        JournalWriter(path, HEADER)
    with pytest.raises(JournalFileError, match="cannot be locked"):
        JournalWriter.hold(path)
