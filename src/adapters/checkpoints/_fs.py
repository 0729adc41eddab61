"""Every filesystem call of the checkpoint protocol, in one place.

The rest of the package names files and directories relative to a root's
directory descriptor and calls these; a later storage implementation (an
object store) replaces this module's operations behind the same protocol.
What the protocol assumes of them (the package's docstring): a rename and
a replace are atomic, an fsync of a file or a directory makes what it
covers durable, and a directory listing shows every name renamed into it.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Final

from .._errors import CheckpointFileError
from ..store._posix import read_exactly, write_synced

#: The prefix of what a write in progress creates in a root (a killed write
#: leaves it behind; the next write removes it).
TMP_PREFIX: Final = ".tmp-"

_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


def open_dir(name: str, *, dir_fd: int | None, shown: Path) -> int:
    """A directory descriptor; ``O_NOFOLLOW`` when inside the root."""
    flags = _DIR_FLAGS | (os.O_NOFOLLOW if dir_fd is not None else 0)
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise CheckpointFileError(shown, "missing: the checkpoint directory is gone") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise CheckpointFileError(shown, "not a directory (a symlink or a file)") from None
        raise CheckpointFileError(shown, f"cannot be opened: {exc.strerror}") from None


def close(fd: int) -> None:
    os.close(fd)


def read_file(
    name: str | Path,
    *,
    dir_fd: int | None,
    shown: Path,
    limit: int | None = None,
    size: int | None = None,
) -> bytes:
    """The bytes of a regular file ``name`` in ``dir_fd`` (``None``: a path;
    only its last component is refused as a symlink): at most ``limit``
    bytes, or exactly ``size``, checked with ``fstat`` before reading.
    Raises ``FileNotFoundError`` for a missing file (the caller names what
    is missing) and ``CheckpointFileError`` naming ``shown`` otherwise."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CheckpointFileError(shown, "is a symlink; refusing to follow it") from None
        raise CheckpointFileError(shown, f"cannot be opened: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointFileError(shown, "not a regular file (a FIFO, device or directory)")
        if size is not None and st.st_size != size:
            state = "truncated" if st.st_size < size else "too long"
            raise CheckpointFileError(
                shown, f"{state}: {st.st_size} bytes on disk, {size} bytes saved"
            )
        if limit is not None and st.st_size > limit:
            raise CheckpointFileError(shown, f"{st.st_size} bytes, more than the {limit} allowed")
        data = read_exactly(fd, st.st_size)
        if data is None:
            raise CheckpointFileError(shown, "changed size while being read")
        return data
    except OSError as exc:
        raise CheckpointFileError(shown, f"cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)


def make_root(root: Path) -> None:
    """Create ``root`` (and its parents) if it is absent."""
    root.mkdir(parents=True, exist_ok=True)


def root_fd(root: Path) -> int | None:
    """The root's directory descriptor, or ``None`` if the root is absent.
    The root itself may be a symlink: it is the caller's choice of place."""
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointFileError(root, f"not a usable directory: {exc.strerror}") from None


def root_identity(root_fd: int) -> tuple[int, int]:
    """What tells this root apart from every other one in this process:
    (``st_dev``, ``st_ino``)."""
    st = os.fstat(root_fd)
    return (st.st_dev, st.st_ino)


def same_place(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are the same directory (``False`` if either
    cannot be reached)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def listing(root_fd: int, root: Path) -> list[str]:
    try:
        return os.listdir(root_fd)
    except OSError as exc:
        raise CheckpointFileError(root, f"cannot be listed: {exc.strerror}") from None


def fsync_fd(fd: int) -> None:
    os.fsync(fd)


def write_new(name: str, data: bytes, *, dir_fd: int) -> None:
    """Create ``name`` in ``dir_fd`` (it must not exist, not even as a
    symlink), write ``data`` and fsync it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    try:
        write_synced(fd, data)
    finally:
        os.close(fd)


def replace_file(root: Path, root_fd: int, name: str, data: bytes) -> None:
    """Atomically replace ``root/name`` with ``data``: a temporary file under
    a random name created with ``O_EXCL`` (a planted file or symlink at a
    predictable name can be neither followed nor overwritten), fsync,
    ``os.replace``, fsync of the root."""
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{name}-", dir=root)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_fd(root_fd)


def make_tmp_dir(root: Path, prefix: str) -> Path:
    """A fresh directory in ``root`` under a random name with ``prefix``."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def rename_into(root: Path, root_fd: int, tmp: Path, name: str) -> None:
    """Rename ``tmp`` (in ``root``) to ``root/name`` and fsync the root."""
    os.rename(tmp, root / name)
    fsync_fd(root_fd)


def lexists(path: Path) -> bool:
    return os.path.lexists(path)


def remove(root: Path, name: str) -> None:
    """Remove a directory entry of the root without following a symlink."""
    target = root / name
    try:
        if target.is_symlink() or not target.is_dir():
            target.unlink(missing_ok=True)
        else:
            shutil.rmtree(target, ignore_errors=True)
    except OSError:
        pass  # pruning is best effort; the published lineage is already durable
