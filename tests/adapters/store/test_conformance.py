"""Both stores, the same tests: what a missing object reads as, bounded
reads, create-if-absent and compare-and-swap under races, listing,
idempotent deletes, hostile keys; then what only one store has (a POSIX
directory's planted symlinks and FIFOs, an object store's server killed
mid-write)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters.store import (
    ObjectStore,
    PosixStore,
    Store,
    StoreConflictError,
    StoreError,
    StoreKeyError,
    StoreLimitError,
    StoreLocationError,
    StoreObjectError,
    StoreUnavailableError,
    Versioned,
    open_store,
)

from ..._seaweed import Seaweed, need_obstore

HOSTILE = [
    "",
    "/abs",
    "a//b",
    "a/",
    "..",
    "a/../b",
    "./a",
    "a/.hidden",
    ".store-lock",
    ".tmp-x",
    "nul\x00byte",
    "ctl\nline",
    "back\\slash",
    "x" * 513,
]


def race(n: int, act: Callable[[int], Any]) -> list[Any]:
    """Run ``act(i)`` for ``i < n`` in threads released together: each
    result, or the exception it raised."""
    barrier = threading.Barrier(n)
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = act(i)
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


def test_a_missing_object_is_none(store: Store) -> None:
    assert store.get("nothing/here", max_bytes=10) is None
    assert store.get_versioned("nothing", max_bytes=10) is None
    assert store.head("nothing") is None
    assert store.list() == [] and store.list("nothing") == []


def test_create_reads_back_and_refuses_a_second_create(store: Store) -> None:
    version = store.create("a/b/c.json", b'{"x": 1}')
    got = store.get_versioned("a/b/c.json", max_bytes=100)
    assert got is not None and got.data == b'{"x": 1}' and got.version == version
    assert store.head("a/b/c.json") == version
    with pytest.raises(StoreConflictError) as info:
        store.create("a/b/c.json", b"other")
    assert info.value.key == "a/b/c.json" and "a/b/c.json" in str(info.value)
    with pytest.raises(StoreConflictError):
        store.create("a/b/c.json", b'{"x": 1, "longer": true}')
    with pytest.raises(StoreConflictError):  # the same bytes: still a second create
        store.create("a/b/c.json", b'{"x": 1}')
    assert store.get("a/b/c.json", max_bytes=100) == b'{"x": 1}'
    assert store.head("a/b/c.json") == version
    assert store.create("empty", b"") and store.get("empty", max_bytes=0) == b""


def test_two_racing_creates_one_wins(store: Store) -> None:
    for round_ in range(3):
        key = f"race/{round_}"
        out = race(4, lambda i, key=key: store.create(key, f"writer {i}".encode()))
        winners = [i for i, r in enumerate(out) if isinstance(r, str)]
        assert len(winners) == 1, out
        assert all(isinstance(r, StoreConflictError) for r in out if not isinstance(r, str)), out
        assert store.get(key, max_bytes=100) == f"writer {winners[0]}".encode()


def test_swap_fences_a_stale_version(store: Store) -> None:
    v1 = store.swap("LATEST", b"one", expected=None)
    with pytest.raises(StoreConflictError):
        store.swap("LATEST", b"again", expected=None)
    v2 = store.swap("LATEST", b"two", expected=v1)
    assert v2 != v1 and store.head("LATEST") == v2
    with pytest.raises(StoreConflictError, match="swap lost"):
        store.swap("LATEST", b"stale", expected=v1)
    assert store.get("LATEST", max_bytes=10) == b"two"
    store.delete("LATEST")
    with pytest.raises(StoreConflictError):
        store.swap("LATEST", b"gone", expected=v2)
    with pytest.raises(StoreConflictError):
        store.swap("never/written", b"x", expected=v2)
    assert store.get("LATEST", max_bytes=10) is None


def test_racing_swaps_from_one_version_one_wins(store: Store) -> None:
    version = store.create("LATEST", b"base")
    out = race(4, lambda i: store.swap("LATEST", f"writer {i}".encode(), expected=version))
    winners = [i for i, r in enumerate(out) if isinstance(r, str)]
    assert len(winners) == 1, out
    assert all(isinstance(r, StoreConflictError) for r in out if not isinstance(r, str)), out
    got = store.get_versioned("LATEST", max_bytes=100)
    assert got is not None and got.data == f"writer {winners[0]}".encode()
    assert got.version == out[winners[0]]


def test_get_is_bounded_before_reading(store: Store) -> None:
    store.create("big", b"x" * 1000)
    assert store.get("big", max_bytes=1000) == b"x" * 1000
    with pytest.raises(StoreLimitError, match="1000 bytes, more than the 999 allowed"):
        store.get("big", max_bytes=999)
    with pytest.raises(StoreLimitError):
        store.get_versioned("big", max_bytes=0)
    with pytest.raises(ValueError, match="max_bytes"):
        store.get("big", max_bytes=-1)


def test_list_is_sorted_by_components_and_bounded(store: Store) -> None:
    for key in ("b/2", "a/x/1", "a/1", "ab/1", "c"):
        store.create(key, b"")
    assert store.list() == ["a/1", "a/x/1", "ab/1", "b/2", "c"]
    assert store.list("a") == ["a/1", "a/x/1"]
    assert store.list("a/x") == ["a/x/1"] and store.list("zz") == []
    assert store.list(limit=5) == store.list()
    with pytest.raises(StoreLimitError, match="more than 4 keys"):
        store.list(limit=4)
    with pytest.raises(StoreKeyError):
        store.list("../a")


def test_delete_is_idempotent(store: Store) -> None:
    store.create("a/b", b"1")
    store.delete("a/b")
    store.delete("a/b")
    store.delete("never/was")
    assert store.get("a/b", max_bytes=1) is None and store.list() == []
    store.create("a/b", b"2")  # a deleted key can be created again
    assert store.get("a/b", max_bytes=1) == b"2"


def test_delete_prefix_removes_what_is_under_it_and_only_that(store: Store) -> None:
    for key in ("d/a", "d/b/c", "dx/a", "e", "d2/a"):
        store.create(key, b"1")
    with pytest.raises(StoreLimitError):
        store.delete_prefix("d", limit=1)  # refused before anything is removed
    assert store.list() == ["d/a", "d/b/c", "d2/a", "dx/a", "e"]
    store.delete_prefix("d")
    store.delete_prefix("d")  # idempotent
    store.delete_prefix("never")
    store.delete_prefix("e")  # an object at the prefix itself is not under it
    assert store.list() == ["d2/a", "dx/a", "e"]
    store.create("d/a", b"2")  # created again under a removed prefix
    assert store.get("d/a", max_bytes=1) == b"2"
    with pytest.raises(StoreKeyError):
        store.delete_prefix("")


def test_posix_delete_prefix_unlinks_a_planted_symlink_not_its_target(tmp_path: Path) -> None:
    store = PosixStore(tmp_path / "s")
    store.create("keep/a", b"1")
    (tmp_path / "s" / "d").symlink_to(tmp_path / "s" / "keep")
    store.create("t/a", b"1")
    (tmp_path / "s" / "t" / ".tmp-left-by-a-kill").write_bytes(b"x")
    store.delete_prefix("d")
    store.delete_prefix("t")  # a killed write's temporary file goes with it
    assert not (tmp_path / "s" / "d").is_symlink() and not (tmp_path / "s" / "t").exists()
    assert store.list() == ["keep/a"]


@pytest.mark.parametrize("key", HOSTILE)
def test_hostile_keys_are_refused(store: Store, key: str) -> None:
    for call in (
        lambda: store.get(key, max_bytes=10),
        lambda: store.head(key),
        lambda: store.create(key, b"x"),
        lambda: store.swap(key, b"x", expected="v"),
        lambda: store.delete(key),
    ):
        with pytest.raises(StoreKeyError) as info:
            call()
        assert isinstance(info.value, ValueError) and isinstance(info.value, StoreError)
    with pytest.raises(StoreKeyError):
        store.get(7, max_bytes=1)  # type: ignore[arg-type]
    assert store.list() == []


def test_open_store_picks_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(open_store(tmp_path), PosixStore)
    need_obstore()
    posix = open_store(f"file://{tmp_path}/sub")
    assert isinstance(posix, PosixStore) and posix.where == f"{tmp_path}/sub"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    s3 = open_store("s3://bucket/some/prefix/")
    assert isinstance(s3, ObjectStore) and s3.where == "s3://bucket/some/prefix"
    for bad in (
        "ftp://x/y",
        "s3:///prefix",
        "file://host/x",
        "",
        "file://",
        "file://relative/x",
        "s3://bucket/../x",
        "s3://bucket/a//b",
        "s3://bucket/./a",
        "gs://",
        # A query or a fragment: nothing reads it, and the prefix it cut off
        # put two runs' files in one place (found by a new-user audit).
        "s3://bucket/p?v=1",
        "s3://bucket/p#frag",
        "s3://bucket/p?",
        "file:///tmp/x?y",
        "/tmp/a\0b",
        "s3://bucket/a\0b",
    ):
        with pytest.raises(StoreLocationError) as info:
            open_store(bad)
        assert isinstance(info.value, ValueError), bad


@pytest.mark.parametrize("fault", [28, 30, 5])  # ENOSPC, EROFS, EIO
def test_a_directory_that_refuses_a_write_is_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: int
) -> None:
    """A full or read-only filesystem under a ``PosixStore`` raised a bare
    ``OSError`` (found by a new-user audit against real tmpfs mounts); the
    fault is injected where the store writes (this machine's tests run as
    root, which a read-only mode bit does not stop)."""
    from frontier_adapters.store import StoreUnavailableError, _posix

    store = PosixStore(tmp_path / "store")
    version = store.create("a/old", b"1")

    def refuse(fd: int, data: bytes) -> None:
        raise OSError(fault, os.strerror(fault))

    monkeypatch.setattr(_posix, "write_synced", refuse)
    for call in (
        lambda: store.create("a/new", b"2"),
        lambda: store.swap("a/old", b"2", expected=version),
    ):
        with pytest.raises(StoreUnavailableError, match=os.strerror(fault)) as info:
            call()
        assert info.value.key in ("a/new", "a/old")
    monkeypatch.undo()
    assert store.list("a") == ["a/old"] and store.get("a/old", max_bytes=8) == b"1"


def test_a_location_that_names_no_store_touches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty path or a path-less file:// URL once meant the working
    # directory: a run's files landed wherever the process happened to be.
    monkeypatch.chdir(tmp_path)
    for bad in ("", "file://"):
        with pytest.raises(StoreLocationError):
            open_store(bad)
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_store_is_a_typed_error_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    need_obstore()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    store = open_store(
        "s3://bucket/p",
        endpoint="http://127.0.0.1:9",  # discard: nothing listens
        allow_http=True,
        region="us-east-1",
        max_retries=2,
        retry_deadline_s=2.0,
        connect_timeout_s=1.0,
    )
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        store.create("k", b"x")
    with pytest.raises(StoreUnavailableError):
        store.get("k", max_bytes=1)
    assert time.monotonic() - t0 < 20


# -- a POSIX directory: what is planted in it ---------------------------------------


def test_posix_refuses_planted_symlinks_fifos_and_directories(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = PosixStore(root)
    store.create("d/real", b"secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(b"outside")
    os.symlink(outside / "f", root / "link")
    os.symlink(outside, root / "dirlink")
    os.mkfifo(root / "fifo")
    (root / "dir").mkdir()
    for key, kind in (("link", "symlink"), ("fifo", "FIFO"), ("dir", "directory")):
        t0 = time.monotonic()
        with pytest.raises(StoreObjectError, match=kind):
            store.get(key, max_bytes=100)
        assert time.monotonic() - t0 < 5  # a FIFO is never opened blocking
        with pytest.raises(StoreObjectError):
            store.head(key)
        with pytest.raises(StoreObjectError):
            store.create(key, b"x")
        with pytest.raises(StoreObjectError):
            store.swap(key, b"x", expected="v")
    with pytest.raises(StoreObjectError, match="refusing to follow"):
        store.get("dirlink/f", max_bytes=100)
    with pytest.raises(StoreObjectError, match="refusing to follow"):
        store.create("dirlink/new", b"x")
    assert not (outside / "new").exists() and (outside / "f").read_bytes() == b"outside"
    with pytest.raises(StoreObjectError, match="directory"):
        store.delete("dir")
    store.delete("link")  # removes the link, never its target
    assert (outside / "f").read_bytes() == b"outside"


def test_posix_writes_leave_no_temporary_files_and_list_skips_them(tmp_path: Path) -> None:
    store = PosixStore(tmp_path)
    v = store.create("a/b", b"1")
    store.swap("a/b", b"2", expected=v)
    with pytest.raises(StoreConflictError):
        store.create("a/b", b"3")
    assert sorted(os.listdir(tmp_path / "a")) == ["b"]
    (tmp_path / "a" / ".tmp-killed").write_bytes(b"left by a kill")
    assert store.list() == ["a/b"]


def test_posix_version_changes_on_every_write(tmp_path: Path) -> None:
    store = PosixStore(tmp_path)
    seen = {store.create("k", b"same")}
    for _ in range(5):
        seen.add(store.swap("k", b"same", expected=store.head("k")))
    assert len(seen) == 6


# -- an object store: the server killed mid-write -----------------------------------


def test_every_acknowledged_create_survives_a_server_sigkill(seaweed: Seaweed, s3_url: str) -> None:
    store = open_store(s3_url, max_retries=1, retry_deadline_s=2.0)
    acknowledged: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            key = f"obj/{i:05d}"
            try:
                store.create(key, key.encode() * 50)
            except StoreError:
                return  # the server is gone: what was acknowledged is what counts
            acknowledged.append(key)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 20 and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    seaweed.kill()
    stop.set()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(acknowledged) >= 20
    seaweed.start()
    reader = open_store(s3_url)
    # The gateway answers before its volumes are back (500s for a while).
    back = time.monotonic() + 90
    while True:
        try:
            reader.get(acknowledged[0], max_bytes=1 << 16)
            break
        except StoreUnavailableError:
            assert time.monotonic() < back, "the server's volumes did not come back"
            time.sleep(0.5)
    for key in acknowledged:
        assert reader.get(key, max_bytes=1 << 16) == key.encode() * 50, key
    listed = set(reader.list("obj"))
    assert set(acknowledged) <= listed and len(listed) <= len(acknowledged) + 1


def test_a_counter_moved_only_by_swap_loses_no_update(store: Store) -> None:
    """Read-modify-swap from several threads, retrying lost swaps: every
    increment lands exactly once."""
    store.create("counter", b"0")
    per_thread = 8

    def bump(_: int) -> int:
        losses = 0
        for _ in range(per_thread):
            while True:
                got = store.get_versioned("counter", max_bytes=16)
                assert got is not None
                try:
                    store.swap("counter", str(int(got.data) + 1).encode(), expected=got.version)
                    break
                except StoreConflictError:
                    losses += 1
        return losses

    out = race(3, bump)
    assert all(isinstance(r, int) for r in out), out
    assert store.get("counter", max_bytes=16) == str(3 * per_thread).encode()


def test_a_write_whose_answer_was_lost_is_not_reported_lost(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put lands but its answer is lost (a reset after the server
    acted): the retry is refused with 412, finds its own bytes, and the
    write is a success; another writer's bytes stay a conflict."""
    import obstore

    real_put = obstore.put
    lose = {"answers": 0}

    def put(*args: Any, **kwargs: Any) -> Any:
        result = real_put(*args, **kwargs)
        if lose["answers"]:
            lose["answers"] -= 1
            raise ConnectionResetError("connection reset after the server acted")
        return result

    monkeypatch.setattr(obstore, "put", put)
    store = open_store(s3_url)
    lose["answers"] = 1
    version = store.create("k", b"mine")
    assert store.get_versioned("k", max_bytes=10) == Versioned(b"mine", version)
    lose["answers"] = 1
    moved = store.swap("k", b"mine, again", expected=version)
    assert store.head("k") == moved != version
    # A first attempt refused is a conflict, whatever the bytes.
    with pytest.raises(StoreConflictError):
        store.create("k", b"mine, again")
    # A lost answer, then a retry that finds another writer's bytes: a conflict.
    other = open_store(s3_url)

    def put_then_overwrite(*args: Any, **kwargs: Any) -> Any:
        real_put(*args, **kwargs)
        monkeypatch.setattr(obstore, "put", real_put)
        other.swap("k", b"theirs", expected=other.head("k"))
        raise ConnectionResetError("reset")

    monkeypatch.setattr(obstore, "put", put_then_overwrite)
    with pytest.raises(StoreConflictError):
        store.swap("k", b"lost", expected=moved)
    assert store.get("k", max_bytes=10) == b"theirs"


def test_posix_swap_holds_between_processes(tmp_path: Path) -> None:
    """Two processes move one counter by read-modify-swap under the store's
    ``flock``: no update is lost."""
    store = PosixStore(tmp_path)
    store.create("counter", b"0")
    code = f"""
from frontier_adapters.store import PosixStore, StoreConflictError
store = PosixStore({str(tmp_path)!r})
for _ in range(25):
    while True:
        got = store.get_versioned("counter", max_bytes=16)
        try:
            store.swap("counter", str(int(got.data) + 1).encode(), expected=got.version)
            break
        except StoreConflictError:
            pass
"""
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert store.get("counter", max_bytes=16) == b"50"


def test_posix_swap_whose_temporary_is_removed_is_a_lost_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something outside the lock removes the swap's temporary file between
    its write and its rename: a typed conflict, the object unchanged."""
    store = PosixStore(tmp_path)
    version = store.create("k", b"old")
    write_tmp = PosixStore._write_tmp

    def removed(self: PosixStore, fd: int, data: bytes) -> tuple[str, str]:
        tmp, got = write_tmp(self, fd, data)
        os.unlink(tmp, dir_fd=fd)
        return tmp, got

    monkeypatch.setattr(PosixStore, "_write_tmp", removed)
    with pytest.raises(StoreConflictError):
        store.swap("k", b"new", expected=version)
    monkeypatch.undo()
    got = store.get_versioned("k", max_bytes=8)
    assert got == Versioned(b"old", version)
    store.swap("k", b"new", expected=version)  # a retry swaps
    assert store.get("k", max_bytes=8) == b"new"


def test_posix_sweep_waits_for_the_lock_swap_holds(tmp_path: Path) -> None:
    """A sweep in another process while this one holds the store's lock
    (as a ``swap`` does between writing its temporary file and renaming
    it) removes nothing and fails typed once the lock's wait runs out."""
    store = PosixStore(tmp_path)
    (tmp_path / ".tmp-0123456789abcdef").write_bytes(b"a swap's temporary")
    code = f"""
import sys
from frontier_adapters.store import PosixStore, StoreUnavailableError, _posix
_posix.LOCK_WAIT_S = 0.2
try:
    PosixStore({str(tmp_path)!r}).sweep()
except StoreUnavailableError:
    sys.exit(3)
"""
    with store.locked():
        held = subprocess.run([sys.executable, "-c", code], timeout=120)
        assert held.returncode == 3
        assert (tmp_path / ".tmp-0123456789abcdef").exists()
    assert store.sweep() == 1
    assert not (tmp_path / ".tmp-0123456789abcdef").exists()


def test_posix_sweep_removes_what_a_killed_removal_moved_aside(tmp_path: Path) -> None:
    """``.tmp-dead-*`` entries (a checkpoint writer moved them aside under
    the lock and was killed before removing them) are garbage: the sweep
    removes them whole, directories and files, at any depth it walks, and
    leaves a write in progress (a ``.tmp-ckpt-*`` directory) alone."""
    store = PosixStore(tmp_path)
    store.create("a/b", b"1")
    dead = tmp_path / ".tmp-dead-0123456789abcdef"
    (dead / "ckpt-000003").mkdir(parents=True)
    (dead / "ckpt-000003" / "frontier.json").write_bytes(b"{}")
    (tmp_path / "a" / ".tmp-dead-fedcba9876543210").write_bytes(b"moved aside")
    (tmp_path / ".tmp-ckpt-live").mkdir()
    assert store.sweep() == 2
    assert not dead.exists() and not (tmp_path / "a" / ".tmp-dead-fedcba9876543210").exists()
    assert (tmp_path / ".tmp-ckpt-live").is_dir() and store.get("a/b", max_bytes=8) == b"1"


def test_posix_create_without_hard_links_survives_a_sweep_mid_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a filesystem without hard links ``create`` renames under the lock;
    a sweep that took its first temporary file before that (outside the
    lock) does not fail it with a bare ``FileNotFoundError``: the object is
    created whole."""
    import errno

    from frontier_adapters.store import _posix

    store = PosixStore(tmp_path)
    write_tmp = store._write_tmp
    swept: list[int] = []

    def then_sweep(fd: int, data: bytes) -> tuple[str, str]:
        written = write_tmp(fd, data)
        if not swept:
            swept.append(store.sweep())  # a life's open sweeping meanwhile
        return written

    def no_links(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(store, "_write_tmp", then_sweep)
    monkeypatch.setattr(_posix.os, "link", no_links)
    version = store.create("k/x", b"whole")
    monkeypatch.undo()
    assert swept == [1]
    assert store.get_versioned("k/x", max_bytes=8) == Versioned(b"whole", version)
    assert sorted(os.listdir(tmp_path / "k")) == ["x"]
    with pytest.raises(StoreConflictError):
        store.create("k/x", b"again")
