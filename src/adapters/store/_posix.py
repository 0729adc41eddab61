"""``PosixStore``: the store interface over a directory."""

from __future__ import annotations

import builtins
import errno
import fcntl
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from ._api import DEFAULT_LIST_LIMIT, Versioned, check_key, check_limit
from ._errors import (
    StoreConflictError,
    StoreLimitError,
    StoreObjectError,
    StoreUnavailableError,
    typed_io,
    unavailable,
)

_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC
_READ: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_NEW: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
#: The lock file that serialises ``swap`` and ``delete`` (a name no key can have).
LOCK: Final = ".store-lock"
#: The prefix of a write in progress (a killed write leaves it behind).
TMP_PREFIX: Final = ".tmp-"
#: The prefix of an entry a writer moved aside, under the lock, to remove
#: it after the lock is released (a checkpoint writer's dead and pruned
#: directories): garbage whatever it holds, so ``sweep`` removes it whole
#: (a kill between the rename and the removal leaves one behind).
DEAD_PREFIX: Final = f"{TMP_PREFIX}dead-"
#: How long a ``swap`` or ``delete`` waits for the lock.
LOCK_WAIT_S: Final = 30.0
#: Errors of ``link`` on a filesystem without hard links.
_NO_LINKS: Final = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


def _version(st: os.stat_result) -> str:
    # A write replaces the file by a new one (a new inode); mtime and size
    # tell apart an inode number reused after a delete.
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


def _place(store: PosixStore, *args: Any) -> tuple[str, str | None]:
    return store.where, args[0] if args and isinstance(args[0], str) else None


#: Every failure of a store call is a ``StoreError``: an ``OSError`` the
#: directory raises on its own (a read-only or full filesystem, an I/O
#: error) becomes a ``StoreUnavailableError`` naming the store and the key,
#: as a refused request of an object store does.
_typed = typed_io(_place)


class PosixStore:
    """The store interface over a directory (``directory`` may itself be a
    symlink: it is the caller's choice of place; nothing under it is
    followed).

    A key ``a/b/c`` is the file ``directory/a/b/c``. Writes go to a
    temporary file under a random name (``O_EXCL | O_NOFOLLOW``), fsynced,
    then ``link``ed (``create``: atomic create-if-absent, no lock needed)
    or ``rename``d (``swap``) into place, and the directory is fsynced;
    directories a key needs are created and fsynced into their parent.
    Reads open the file with ``O_NOFOLLOW | O_NONBLOCK`` through
    descriptors opened the same way, so a symlink (at the key or in a
    component) is refused and a FIFO or device is refused without
    blocking; the size is checked with ``fstat`` before a byte is read.

    The version is the file's (inode, mtime, size). ``swap`` and
    ``delete`` hold an ``flock`` on ``directory/.store-lock`` while they
    compare and write, so compare-and-swap holds between processes of one
    host, and on a shared filesystem only where ``flock`` is honoured
    across hosts (NFSv4 with lock support; not every network filesystem).
    ``create`` relies on ``link`` failing for an existing name; on a
    filesystem without hard links it falls back to the lock. Empty
    directories left by ``delete`` are kept (removing them could race a
    ``create`` into them)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    @property
    def where(self) -> str:
        return str(self.directory)

    def __repr__(self) -> str:
        return f"PosixStore({str(self.directory)!r})"

    # -- descriptors ---------------------------------------------------------

    def _root(self, create: bool) -> int | None:
        if create and not self.directory.is_dir():
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                # The new root's name, durable in its parent.
                parent = os.open(self.directory.parent, _DIR)
                try:
                    os.fsync(parent)
                finally:
                    os.close(parent)
            except OSError as exc:
                raise self._unavailable(None, exc) from None
        try:
            return os.open(self.directory, _DIR)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unavailable(None, exc) from None

    def _unavailable(self, key: str | None, exc: OSError) -> StoreUnavailableError:
        return unavailable(self.where, key, exc)

    @contextmanager
    def _parent(self, key: str, *, create: bool) -> Iterator[tuple[int, str] | None]:
        """(descriptor of the key's directory, the key's last component),
        ``None`` when a directory on the way is absent and not created."""
        *dirs, name = key.split("/")
        fd = self._root(create)
        if fd is None:
            yield None
            return
        try:
            for i, part in enumerate(dirs):
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        os.fsync(fd)
                    except FileExistsError:
                        pass
                try:
                    nxt = os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    yield None
                    return
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise StoreObjectError(
                            self.where,
                            "/".join(dirs[: i + 1]),
                            "not a directory (a symlink or a file); refusing to follow it",
                        ) from None
                    raise self._unavailable(key, exc) from None
                os.close(fd)
                fd = nxt
            yield fd, name
        finally:
            os.close(fd)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the lock ``swap`` and ``delete`` hold (an ``flock`` on
        ``.store-lock``, waited for at most ``LOCK_WAIT_S``, else
        ``StoreUnavailableError``), so that a caller's read, check and act
        in the directory is atomic with respect to every ``swap``: what a
        checkpoint writer's removals do, so that none follows a newer
        life's claim. Not reentrant: a ``swap``, ``delete`` or ``sweep``
        of this directory inside it waits for the lock and fails."""
        with self._locked():
            yield

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = self._root(True)
        assert fd is not None
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | _CLOEXEC
            lock = os.open(LOCK, flags, 0o644, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR):
                raise StoreObjectError(self.where, LOCK, "is not a lock file") from None
            raise unavailable(self.where, LOCK, exc) from None
        finally:
            os.close(fd)
        try:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreUnavailableError(
                            self.where, None, f"{LOCK} held by another writer for {LOCK_WAIT_S}s"
                        ) from None
                    time.sleep(0.005)
            yield
        finally:
            os.close(lock)  # releases the flock

    def _write_tmp(self, fd: int, data: bytes) -> tuple[str, str]:
        """A temporary file in ``fd`` holding ``data``, fsynced: (name, version)."""
        tmp = f"{TMP_PREFIX}{secrets.token_hex(8)}"
        out = os.open(tmp, _NEW, 0o644, dir_fd=fd)
        try:
            write_synced(out, data)
            return tmp, _version(os.fstat(out))
        except BaseException:
            os.close(out)
            out = -1
            _unlink(tmp, fd)
            raise
        finally:
            if out >= 0:
                os.close(out)

    def _stat(self, key: str, fd: int, name: str) -> os.stat_result | None:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise StoreObjectError(self.where, key, _not_regular(st.st_mode))
        return st

    # -- the interface -------------------------------------------------------

    def get(self, key: str, *, max_bytes: int) -> bytes | None:
        got = self.get_versioned(key, max_bytes=max_bytes)
        return None if got is None else got.data

    @_typed
    def get_versioned(self, key: str, *, max_bytes: int) -> Versioned | None:
        check_key(self.where, key)
        check_limit(max_bytes, "max_bytes")
        with self._parent(key, create=False) as at:
            if at is None:
                return None
            fd, name = at
            try:
                f = os.open(name, _READ, dir_fd=fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise StoreObjectError(
                        self.where, key, "is a symlink; refusing to follow it"
                    ) from None
                raise self._unavailable(key, exc) from None
            try:
                st = os.fstat(f)
                if not stat.S_ISREG(st.st_mode):
                    raise StoreObjectError(self.where, key, _not_regular(st.st_mode))
                if st.st_size > max_bytes:
                    raise StoreLimitError(
                        self.where, key, f"{st.st_size} bytes, more than the {max_bytes} allowed"
                    )
                data = read_exactly(f, st.st_size)
                if data is None:
                    raise StoreObjectError(self.where, key, "changed size while being read")
                return Versioned(data, _version(st))
            except OSError as exc:
                if isinstance(exc, StoreLimitError | StoreObjectError):
                    raise
                raise self._unavailable(key, exc) from None
            finally:
                os.close(f)

    @_typed
    def head(self, key: str) -> str | None:
        check_key(self.where, key)
        with self._parent(key, create=False) as at:
            if at is None:
                return None
            st = self._stat(key, *at)
            return None if st is None else _version(st)

    @_typed
    def create(self, key: str, data: bytes) -> str:
        check_key(self.where, key)
        data = bytes(data)
        with self._parent(key, create=True) as at:
            assert at is not None
            fd, name = at
            tmp, version = self._write_tmp(fd, data)
            try:
                try:
                    os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    return self._exists(key, fd, name)
                except OSError as exc:
                    if exc.errno not in _NO_LINKS:
                        raise self._unavailable(key, exc) from None
                    _unlink(tmp, fd)
                    with self._locked():
                        if self._stat(key, fd, name) is not None:
                            return self._exists(key, fd, name)
                        # Written again under the lock a ``sweep`` holds, so
                        # none can take it before the rename.
                        tmp, version = self._write_tmp(fd, data)
                        try:
                            os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
                        except OSError as exc:
                            raise self._unavailable(key, exc) from None
            finally:
                _unlink(tmp, fd)
            os.fsync(fd)
            return version

    def _exists(self, key: str, fd: int, name: str) -> str:
        """A create found ``key``: ``StoreObjectError`` if it is not a
        regular file, else ``StoreConflictError``."""
        self._stat(key, fd, name)
        raise StoreConflictError(self.where, key, "exists already (create-if-absent lost)")

    @_typed
    def swap(self, key: str, data: bytes, *, expected: str | None) -> str:
        check_key(self.where, key)
        if expected is None:
            return self.create(key, data)
        data = bytes(data)
        with self._locked(), self._parent(key, create=False) as at:
            if at is None:
                raise StoreConflictError(self.where, key, "absent: it was deleted (swap lost)")
            fd, name = at
            st = self._stat(key, fd, name)
            if st is None:
                raise StoreConflictError(self.where, key, "absent: it was deleted (swap lost)")
            if _version(st) != expected:
                raise StoreConflictError(
                    self.where, key, "moved: its version is not the one expected (swap lost)"
                )
            tmp, version = self._write_tmp(fd, data)
            try:
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except FileNotFoundError:
                # The temporary file was removed by something outside the
                # lock (a sweep of leftovers): nothing was written.
                raise StoreConflictError(
                    self.where, key, f"{tmp} was removed before its rename (swap lost)"
                ) from None
            except OSError as exc:
                _unlink(tmp, fd)
                raise self._unavailable(key, exc) from None
            except BaseException:
                _unlink(tmp, fd)
                raise
            os.fsync(fd)
            return version

    @_typed
    def list(self, prefix: str = "", *, limit: int = DEFAULT_LIST_LIMIT) -> list[str]:
        check_key(self.where, prefix, prefix=True)
        check_limit(limit, "limit")
        keys: list[str] = []
        if prefix:
            with self._parent(f"{prefix}/x", create=False) as at:
                if at is not None:
                    self._walk(at[0], f"{prefix}/", keys, limit)
        else:
            fd = self._root(False)
            if fd is not None:
                try:
                    self._walk(fd, "", keys, limit)
                finally:
                    os.close(fd)
        return sorted(keys)

    def _walk(self, fd: int, base: str, keys: builtins.list[str], limit: int) -> None:
        try:
            entries = sorted(os.listdir(fd))
        except OSError as exc:
            raise self._unavailable(base or None, exc) from None
        for name in entries:
            if name.startswith("."):
                continue
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
                try:
                    self._walk(sub, f"{base}{name}/", keys, limit)
                finally:
                    os.close(sub)
            else:
                keys.append(f"{base}{name}")
                if len(keys) > limit:
                    raise StoreLimitError(self.where, base or None, f"more than {limit} keys")

    @_typed
    def sweep(self, prefix: str = "") -> int:
        """Remove the temporary files that writes killed midway left under
        ``prefix`` (``.tmp-*``: a SIGKILL between a write's temporary file
        and its link or rename) and the entries a writer moved aside to
        remove (``.tmp-dead-*``, whole: a kill between the rename and the
        removal), in this directory only: no symlink is
        followed, nothing but a regular file of that name is removed, and
        nothing outside the directory is touched. It holds the lock
        ``swap`` holds, so a ``swap``'s temporary file is never taken;
        call it where no ``create`` into ``prefix`` is in flight (a life's
        open, once its claim fenced every older life): one in flight would
        lose its temporary file and fail with a ``StoreError``. Returns how
        many were removed. (An object store has no temporaries: a put is
        whole or absent.)"""
        check_key(self.where, prefix, prefix=True)
        fd = self._root(False)
        if fd is None:
            return 0  # no directory: nothing to sweep, and none made
        os.close(fd)
        with self._locked():
            return self._sweep(prefix)

    def _sweep(self, prefix: str) -> int:
        removed = 0

        def walk(fd: int, depth: int) -> None:
            nonlocal removed
            try:
                entries = os.listdir(fd)
            except OSError as exc:
                raise self._unavailable(prefix or None, exc) from None
            for name in entries:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if name.startswith(DEAD_PREFIX):
                    # Moved aside under this lock by a writer that was to
                    # remove it after: nothing in it is live.
                    if stat.S_ISDIR(st.st_mode):
                        shutil.rmtree(name, dir_fd=fd, onerror=_gone_is_fine)
                    else:
                        _unlink(name, fd)
                    removed += 1
                elif stat.S_ISDIR(st.st_mode) and not name.startswith(".") and depth < 64:
                    sub = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
                    try:
                        walk(sub, depth + 1)
                    finally:
                        os.close(sub)
                elif stat.S_ISREG(st.st_mode) and name.startswith(TMP_PREFIX):
                    _unlink(name, fd)
                    removed += 1
            os.fsync(fd)

        if prefix:
            with self._parent(f"{prefix}/x", create=False) as at:
                if at is not None:
                    walk(at[0], 0)
        else:
            fd = self._root(False)
            if fd is not None:
                try:
                    walk(fd, 0)
                finally:
                    os.close(fd)
        return removed

    @_typed
    def delete(self, key: str) -> None:
        check_key(self.where, key)
        with self._locked(), self._parent(key, create=False) as at:
            if at is None:
                return
            fd, name = at
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                return
            except IsADirectoryError:
                raise StoreObjectError(self.where, key, "is a directory") from None
            except OSError as exc:
                if exc.errno == errno.EPERM:  # unlink of a directory on Linux
                    raise StoreObjectError(self.where, key, "is a directory") from None
                raise self._unavailable(key, exc) from None
            os.fsync(fd)

    @_typed
    def delete_prefix(self, prefix: str, *, limit: int = DEFAULT_LIST_LIMIT) -> None:
        """Remove the directory ``prefix`` names, whole (the temporary files
        of killed writes in it included), without following a symlink in
        it; a symlink, FIFO or device planted at ``prefix`` is unlinked
        (never its target), a regular file there is an object, not under
        ``prefix``, and is kept."""
        check_key(self.where, prefix)
        check_limit(limit, "limit")
        with self._locked(), self._parent(prefix, create=False) as at:
            if at is None:
                return
            fd, name = at
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if stat.S_ISREG(st.st_mode):
                return
            try:
                if stat.S_ISDIR(st.st_mode):
                    self.list(prefix, limit=limit)  # StoreLimitError before a removal
                    shutil.rmtree(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                return
            except OSError as exc:
                if isinstance(exc, StoreLimitError):
                    raise
                raise self._unavailable(prefix, exc) from None
            os.fsync(fd)


def write_synced(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than
    asked) and fsync it: what every file write of the storage code does."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def read_exactly(fd: int, size: int) -> bytes | None:
    """The ``size`` bytes ``fd`` holds from its position (``fstat`` said
    so), read in bounded chunks; ``None`` if it held fewer or more by the
    time they were read (it changed meanwhile): never more than one byte
    past ``size`` is read."""
    chunks: list[bytes] = []
    got = 0
    while got < size:
        chunk = os.read(fd, min(size - got, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got != size or os.read(fd, 1):
        return None
    return b"".join(chunks)


def _gone_is_fine(
    _func: object, _path: object, exc_info: tuple[type, BaseException, object]
) -> None:
    """``rmtree``'s error handler: an entry removed meanwhile (by the writer
    that moved the tree aside) is what was wanted; any other error is
    raised."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def _unlink(name: str, fd: int) -> None:
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass


def _not_regular(mode: int) -> str:
    kind = (
        "a symlink"
        if stat.S_ISLNK(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device or socket"
    )
    return f"not a regular file ({kind}); refused"
