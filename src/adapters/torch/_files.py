"""Checkpoint directories: atomic writes, a published lineage that follows
ancestry, reads that never trust what they read.

Layout under a root directory::

    root/LATEST                     the published lineage (JSON), newest first
    root/ckpt-000012/manifest.json  the parts, their sizes and SHA-256s
    root/ckpt-000012/state.json     JSON parts (the collector state, ...)
    root/ckpt-000012/model.pt       tensor parts (torch.save)

The lineage is ancestry, not step order: ``LATEST`` lists the newest
checkpoint, then the checkpoint it continues (its *parent*, which each
entry names), then that one's parent, and so on, up to ``keep``, each with
its manifest's SHA-256; steps strictly decrease along it. A write's parent
is the checkpoint the run continues: ``parent=`` when given, otherwise the
one this process last resumed from (``read_checkpoint``) or wrote in this
root, otherwise (a process that has done neither) the newest published
one; when that checkpoint's step is not below the new step, the newest of
lower step on its ancestry (a step written again replaces it). So after a
resume from ``previous=k`` the next write abandons the ``k`` newer ones,
damaged or not, and the fall-back of any later resume walks only the
ancestry of what it resumes.

Writing: dead directories (renamed but never published: a kill between
the rename and ``LATEST``) are removed first, so that a root holds at most
one checkpoint directory outside its published lineage while that lineage
is empty. The parts go into a fresh temporary directory in the root
(created with a random name, files opened with ``O_EXCL | O_NOFOLLOW``, so
nothing planted at a predictable name can redirect a write); every file and
the directory are fsynced, the directory is renamed to a name no other
directory has (``ckpt-000012``, or ``ckpt-000012-1`` when a published
checkpoint already holds that step), and only then is ``LATEST`` replaced
(a temporary file, fsync, ``os.replace``, fsync of the root). Every other
checkpoint directory is removed after publishing: the ancestors beyond
``keep`` and the abandoned ones. A crash at any moment leaves ``LATEST``
naming the previous lineage intact.

Reading validates before it parses and never follows a symlink: the
checkpoint directory and every file are opened relative to the root's
directory descriptor with ``O_NOFOLLOW`` (a FIFO or a device is refused
without blocking, a symlinked part or directory is refused), sizes are
checked against the bound or the saved size before a byte is read, and
``LATEST``'s checksum and chain of parents, the manifest's checksum (the
whole manifest), the manifest's SHA-256 as ``LATEST`` saved it, the step
against the directory name, and each part's size and SHA-256 are verified.
Tensor parts are read with ``torch.load(weights_only=True)``. Each failure
raises a ``CheckpointError`` subclass naming the offending file;
``read_checkpoint`` returns ``None`` only for a root that holds no
checkpoint at all. ``LATEST`` files of version 1 (step order, no parents)
are still read, as the chain they list; the next write replaces them with
version 2.

One writer per root: two processes writing the same root concurrently are
not supported (the second would prune the first's directory).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import attrs
import torch

from .._errors import CheckpointFileError, CheckpointFileVersionError, DatasetChangedError

FORMAT: Final = "frontier_adapters.checkpoint_dir"
VERSION: Final = 2
ROOT_FORMAT: Final = "frontier_adapters.checkpoint_root"
ROOT_VERSION: Final = 2
#: Older versions of ``LATEST`` this library still reads: version 1 listed
#: the lineage in step order without parents (read as the chain it lists).
ROOT_VERSIONS_READ: Final = (1,)
MANIFEST: Final = "manifest.json"
LATEST: Final = "LATEST"
#: Bounds on what is read before it is trusted.
MAX_MANIFEST_BYTES: Final = 1 << 20
MAX_LATEST_BYTES: Final = 1 << 16
MAX_PARTS: Final = 1024
MAX_KEEP: Final = 256
_NAME: Final = re.compile(r"^ckpt-(\d{6,})(?:-([1-9]\d{0,5}))?$")
_PART: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\.(json|pt)$")
_HEX64: Final = re.compile(r"^[0-9a-f]{64}$")
_MANIFEST_KEYS: Final = frozenset({"format", "version", "step", "fingerprint", "parts", "sha256"})
#: The keys of a lineage file's document (``LATEST``, and ``_distributed``'s ``COMMIT``).
_LINEAGE_KEYS: Final = frozenset({"format", "version", "lineage", "sha256"})
_ENTRY_KEYS: Final = frozenset({"name", "step", "manifest_sha256"})
_PART_KEYS: Final = frozenset({"name", "size", "sha256"})
_TMP_PREFIX: Final = ".tmp-"
#: Leftovers of writes killed midway, this version's and version 1's.
_LEFTOVER_PREFIXES: Final = (_TMP_PREFIX, f".{LATEST}.tmp-")


# -- the dataset's identity -------------------------------------------------------


_PLAIN: Final = (str, int, float, bool, type(None))


def _canonical(value: Any) -> Any:
    """A JSON value that identifies ``value`` by content, or ``TypeError``."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if (kind is list or kind is tuple) and all(type(v) in _PLAIN for v in value):
        return list(value)  # the common row: token ids or strings, no recursion
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        return {
            "tensor": str(t.dtype),
            "shape": list(t.shape),
            "sha256": hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()
            if t.numel()
            else "",
        }
    if isinstance(value, Mapping):
        return {"map": [[_canonical(k), _canonical(v)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return {"bytes": bytes(value).hex()}
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if hasattr(value, "__array__") and hasattr(value, "dtype"):
        return _canonical(torch.as_tensor(value.__array__()))
    raise TypeError(
        f"dataset_fingerprint cannot hash a row value of type {type(value).__name__}; "
        "pass user_id= with a version string of your dataset instead"
    )


def dataset_fingerprint(
    dataset: Any,
    *,
    seed: int,
    shuffle: bool,
    sample: int | None = None,
    user_id: str | None = None,
) -> str:
    """The identity of a stream over a map-style ``dataset``: its rows and
    what defines their order (``seed`` and ``shuffle``, as given to
    ``make_seekable_loader``).

    By default every row is hashed (SHA-256, streaming: one row in memory at
    a time; tensors and arrays by dtype, shape and bytes), so a changed,
    added, removed or moved row changes the fingerprint. ``sample=k`` hashes
    only ``k`` evenly spaced rows (first and last included): cheaper, and
    weaker, since a change between the sampled rows goes unnoticed.
    ``user_id`` replaces the rows by a version string you vouch for.

    The number of epochs is not part of it: the ordinal's row does not depend
    on it, and the ledger checks the stream's length itself (a resume
    accepts a longer stream and refuses a record beyond a shorter one).
    Raises ``TypeError`` for a row value it cannot hash by content."""
    if type(seed) is not int or not isinstance(shuffle, bool):
        raise TypeError(f"seed must be an int and shuffle a bool, got {seed!r}, {shuffle!r}")
    order = f"seed={seed};shuffle={int(shuffle)}"
    if user_id is not None:
        return f"id:{user_id};{order}"
    n = len(dataset)
    if sample is None:
        indices: Iterable[int] = range(n)
        mode = "all"
    else:
        if type(sample) is not int or sample < 1:
            raise ValueError(f"sample must be an int >= 1, got {sample!r}")
        k = min(sample, n)
        indices = sorted({(i * (n - 1)) // max(1, k - 1) for i in range(k)}) if n else []
        mode = f"sample{k}"
    h = hashlib.sha256()
    chunk: list[Any] = []
    for i in indices:
        chunk.append([i, _canonical(dataset[i])])
        if len(chunk) == 1024:
            # One encode per chunk: the per-call overhead dominates small rows.
            h.update(json.dumps(chunk, separators=(",", ":")).encode())
            chunk = []
    if chunk:
        h.update(json.dumps(chunk, separators=(",", ":")).encode())
    return f"len={n};rows={mode};{order};sha256={h.hexdigest()[:32]}"


# -- values -------------------------------------------------------------------


@attrs.frozen
class LoadedCheckpoint:
    """A validated checkpoint: its ``step``, JSON parts and tensor parts."""

    path: Path
    step: int
    json_parts: dict[str, Any]
    tensor_parts: dict[str, Any]


@attrs.frozen
class _Entry:
    """One published checkpoint in ``LATEST``."""

    name: str
    step: int
    manifest_sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "step": self.step, "manifest_sha256": self.manifest_sha256}


def _digest(obj: Mapping[str, Any]) -> str:
    """The SHA-256 of ``obj`` without its ``sha256`` key, canonically encoded."""
    body = {k: v for k, v in obj.items() if k != "sha256"}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def checkpoint_name(step: int, branch: int = 0) -> str:
    return f"ckpt-{step:06d}" + (f"-{branch}" if branch else "")


def _is_int(value: object) -> bool:
    return type(value) is int


# -- reading, bounded ---------------------------------------------------------------


_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


def _open_dir(name: str, *, dir_fd: int | None, shown: Path) -> int:
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


def _read_file(
    name: str, *, dir_fd: int, shown: Path, limit: int | None = None, size: int | None = None
) -> bytes:
    """The bytes of a regular file ``name`` in ``dir_fd``: at most ``limit``
    bytes, or exactly ``size``, checked with ``fstat`` before reading."""
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
        want = st.st_size
        chunks: list[bytes] = []
        got = 0
        while got < want:
            chunk = os.read(fd, min(want - got, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got != want or os.read(fd, 1):
            raise CheckpointFileError(shown, "changed size while being read")
        return b"".join(chunks)
    except OSError as exc:
        raise CheckpointFileError(shown, f"cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)


def _parse_json(data: bytes, shown: Path, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CheckpointFileError(shown, f"{what}: not UTF-8 text") from None
    except RecursionError:
        raise CheckpointFileError(shown, f"{what}: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and ints past the digit limit
        raise CheckpointFileError(shown, f"{what}: {exc}") from None


def _root_fd(root: Path) -> int | None:
    """The root's directory descriptor, or ``None`` if the root is absent.
    The root itself may be a symlink: it is the caller's choice of place."""
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointFileError(root, f"not a usable directory: {exc.strerror}") from None


def _listing(root_fd: int, root: Path) -> list[str]:
    try:
        return os.listdir(root_fd)
    except OSError as exc:
        raise CheckpointFileError(root, f"cannot be listed: {exc.strerror}") from None


# -- a root's lineage file, shared with _distributed ------------------------------------

_E = TypeVar("_E")
_T = TypeVar("_T")


@attrs.frozen
class _LineageFile(Generic[_E]):
    """One kind of root's lineage file: ``LATEST`` of a checkpoint root
    (``_PUBLISHED``), ``COMMIT`` of a distributed one
    (``_distributed._COMMITTED``). Both are a bounded JSON document sealed
    by its SHA-256 whose ``lineage`` lists a chain of ancestry, newest
    first: each entry names its parent (the directory of the checkpoint it
    continues, ``null`` for a fresh start), which is the next entry's
    directory, and steps strictly decrease. One code reads them
    (``_read_lineage``, ``_lineage_dirs``, ``_read_previous``), chooses what
    a new checkpoint continues (``_ancestry``) and publishes them
    (``_publish_lineage``, ``_publish_next``); what differs is named
    here."""

    #: The file's name in the root, and the format and version it must hold.
    name: str
    format: str
    version: int
    #: Older versions still read: their lineage, listed in step order
    #: without parents, is read as the chain it lists.
    also_reads: tuple[int, ...]
    max_bytes: int
    max_entries: int
    #: The names of the root's checkpoint directories (group 1: the step),
    #: and what errors call them.
    dirs: re.Pattern[str]
    dirs_are: str
    #: What errors call the lineage: ``"published"``, ``"committed"``.
    lineage_is: str
    #: The most checkpoint directories a kill can leave beside an empty
    #: lineage (more is damage, refused rather than read as a fresh start),
    #: or ``None`` when there is no such bound.
    unlisted_when_empty: int | None
    #: What killed writes leave in the root: names with these prefixes.
    leftovers: tuple[str, ...]
    #: ``parse_entry(shown, raw)``: the validated entry (``raw`` without its
    #: ``parent``), or a ``CheckpointFileError`` naming ``shown``.
    parse_entry: Callable[[Path, object], _E]
    step_of: Callable[[_E], int]
    dir_of: Callable[[_E], str]
    to_json: Callable[[_E], dict[str, Any]]


@attrs.frozen
class _Link(Generic[_E]):
    """An entry of a lineage file and its parent: the directory of the
    checkpoint it continues (``None``: a fresh start, or not recorded by a
    version-1 file)."""

    entry: _E
    parent: str | None


def _check_sealed(
    shown: Path,
    doc: dict[str, Any],
    fmt: str,
    version: int,
    keys: frozenset[str],
    also: tuple[int, ...] = (),
) -> None:
    """Check a sealed document's format and version (``version``, or one of
    ``also``), then its keys (another version may have others), then its
    SHA-256 (``_digest``)."""
    found = doc.get("version")
    if doc.get("format") != fmt or not _is_int(found) or found not in (version, *also):
        older = f" (and versions {list(also)})" if also else ""
        raise CheckpointFileVersionError(
            shown,
            f"format {str(doc.get('format'))[:80]!r} version {str(found)[:20]!r}; "
            f"this library reads {fmt!r} version {version}{older}",
        )
    if set(doc) != keys:
        raise CheckpointFileError(shown, f"has keys {sorted(doc)[:20]}, expected {sorted(keys)}")
    if doc["sha256"] != _digest(doc):
        raise CheckpointFileError(shown, "corrupted: its SHA-256 does not match its content")


def _dir_step(kind: _LineageFile[_E], name: object) -> int | None:
    """The step in a checkpoint directory's name, ``None`` if not one."""
    m = kind.dirs.match(name) if isinstance(name, str) else None
    return int(m.group(1)) if m else None


def _read_lineage(root: Path, root_fd: int, kind: _LineageFile[_E]) -> list[_Link[_E]] | None:
    """The lineage ``kind`` lists, newest first; ``None`` when its file is
    absent from a root that holds no checkpoint directory (nothing was ever
    published). Raises ``CheckpointFileError`` for a missing file next to
    checkpoint directories, an empty lineage beside more of them than a
    kill leaves (``kind.unlisted_when_empty``), and for an empty, garbled or
    forged file, entries that do not form a chain of parents or whose steps
    do not strictly decrease (``CheckpointFileVersionError`` for another
    format or version)."""
    shown = root / kind.name
    try:
        data = _read_file(kind.name, dir_fd=root_fd, shown=shown, limit=kind.max_bytes)
    except FileNotFoundError:
        dirs = sorted(n for n in _listing(root_fd, root) if kind.dirs.match(n))
        if dirs:
            raise CheckpointFileError(
                shown,
                f"missing, but the root holds {kind.dirs_are} ({', '.join(dirs[:3])}"
                f"{', ...' if len(dirs) > 3 else ''}): refusing to treat it as a fresh start",
            ) from None
        return None
    if not data.strip():
        raise CheckpointFileError(shown, f"empty: it must list the {kind.lineage_is} checkpoints")
    doc = _parse_json(data, shown, "garbled")
    if not isinstance(doc, dict):
        raise CheckpointFileError(shown, "garbled: not a JSON object")
    _check_sealed(shown, doc, kind.format, kind.version, _LINEAGE_KEYS, kind.also_reads)
    lineage = doc["lineage"]
    if not isinstance(lineage, list) or len(lineage) > kind.max_entries:
        raise CheckpointFileError(shown, f"'lineage' must be a list of at most {kind.max_entries}")
    links: list[_Link[_E]] = []
    if doc["version"] == kind.version:
        for raw in lineage:
            if not isinstance(raw, dict) or "parent" not in raw:
                raise CheckpointFileError(shown, f"bad lineage entry {str(raw)[:200]}")
            parent = raw["parent"]
            entry = kind.parse_entry(shown, {k: v for k, v in raw.items() if k != "parent"})
            if parent is not None and _dir_step(kind, parent) is None:
                raise CheckpointFileError(
                    shown, f"entry {kind.dir_of(entry)}: bad parent {str(parent)[:80]!r}"
                )
            links.append(_Link(entry, parent))
    else:  # an older version: the chain it lists, its last parent unrecorded
        entries = [kind.parse_entry(shown, raw) for raw in lineage]
        links = [
            _Link(e, kind.dir_of(entries[i + 1]) if i + 1 < len(entries) else None)
            for i, e in enumerate(entries)
        ]
    steps = [kind.step_of(link.entry) for link in links]
    if steps != sorted(set(steps), reverse=True):
        raise CheckpointFileError(shown, "lineage steps must strictly decrease")
    for i, link in enumerate(links):
        name = kind.dir_of(link.entry)
        after = links[i + 1] if i + 1 < len(links) else None
        if after is not None and link.parent != kind.dir_of(after.entry):
            raise CheckpointFileError(
                shown,
                f"entry {name} names the parent {str(link.parent)[:80]}, but the next entry "
                f"is {kind.dir_of(after.entry)}: the lineage must be a chain of ancestry",
            )
        step = _dir_step(kind, link.parent)
        if step is not None and step >= kind.step_of(link.entry):
            raise CheckpointFileError(shown, f"entry {name}: its parent is not of a lower step")
    if not links and kind.unlisted_when_empty is not None:
        dirs = sorted(n for n in _listing(root_fd, root) if kind.dirs.match(n))
        if len(dirs) > kind.unlisted_when_empty:
            raise CheckpointFileError(
                shown,
                f"lists no checkpoint, but the root holds {len(dirs)} {kind.dirs_are} "
                f"({', '.join(dirs[:3])}{', ...' if len(dirs) > 3 else ''}); a killed write "
                f"leaves at most {kind.unlisted_when_empty}: refusing to treat it as a fresh start",
            )
    return links


def _lineage_dirs(root: str | os.PathLike[str], kind: _LineageFile[_E]) -> list[Path]:
    """The directories of the lineage ``kind`` lists under ``root``, newest
    first (``[]`` for a root with no checkpoint); raises as ``_read_lineage``."""
    root = Path(root)
    fd = _root_fd(root)
    if fd is None:
        return []
    try:
        return [root / kind.dir_of(link.entry) for link in _read_lineage(root, fd, kind) or []]
    finally:
        os.close(fd)


# What each root was last resumed from or written in this process, so that
# a write continues the checkpoint its run continues without being told:
# (lineage file, st_dev, st_ino of the root) -> that checkpoint's entry.
_RESUMED: dict[tuple[str, int, int], Any] = {}
_RESUMED_LOCK: Final = threading.Lock()


def _root_key(kind: _LineageFile[_E], root_fd: int) -> tuple[str, int, int]:
    st = os.fstat(root_fd)
    return (kind.name, st.st_dev, st.st_ino)


def _note_resumed(kind: _LineageFile[_E], root_fd: int, entry: _E) -> None:
    """Record ``entry`` as what this process's run in this root continues."""
    key = _root_key(kind, root_fd)
    with _RESUMED_LOCK:
        _RESUMED[key] = entry


def _noted_resumed(kind: _LineageFile[_E], root_fd: int) -> object:
    key = _root_key(kind, root_fd)
    with _RESUMED_LOCK:
        return _RESUMED.get(key)


def _on_lineage(root: Path, kind: _LineageFile[_E], lineage: list[_Link[_E]], name: str) -> int:
    """The index of directory ``name`` on ``lineage``; ``CheckpointFileError``
    naming the lineage file when it is not there."""
    names = [kind.dir_of(link.entry) for link in lineage]
    if name not in names:
        raise CheckpointFileError(
            root / kind.name,
            f"{name[:80]} is not on the {kind.lineage_is} lineage "
            f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}): "
            "a new checkpoint continues one of its checkpoints",
        )
    return names.index(name)


def _ancestry(
    root: Path,
    root_fd: int,
    kind: _LineageFile[_E],
    old: list[_Link[_E]],
    step: int,
    parent: str | None,
) -> list[_Link[_E]]:
    """The part of the ``old`` lineage that a new checkpoint at ``step``
    continues: from the checkpoint the run continues, the newest on its
    ancestry (itself included) with a step below ``step``. That checkpoint
    is the directory ``parent`` when given; otherwise the one this process
    last resumed from or wrote in this root, if it is still on ``old``;
    otherwise the newest of ``old``. Raises ``CheckpointFileError`` naming
    the lineage file when ``parent`` is not on ``old``."""
    start = 0
    if parent is not None:
        start = _on_lineage(root, kind, old, parent)
    else:
        noted = _noted_resumed(kind, root_fd)
        # Compared by value, not name: a stale note (a root removed and
        # made again, reusing the inode) names nothing on the new lineage.
        start = next((i for i, link in enumerate(old) if link.entry == noted), 0)
    for i in range(start, len(old)):
        if kind.step_of(old[i].entry) < step:
            return old[i:]
    return []


def _read_previous(
    root: str | os.PathLike[str],
    kind: _LineageFile[_E],
    previous: int,
    read: Callable[[Path, int, _E], _T],
) -> _T | None:
    """``read(root, root_fd, entry)`` of the entry ``previous`` back along
    the lineage ``kind`` lists (0: the newest; ``k``: its ``k``-th
    ancestor); ``None`` for a root that holds no checkpoint. What it
    returns is noted as what this process's run continues (``_ancestry``).
    Raises ``ValueError`` for a bad ``previous``, ``CheckpointFileError``
    when the lineage is shorter, and what ``_read_lineage`` and ``read``
    raise."""
    if not _is_int(previous) or previous < 0:
        raise ValueError(f"previous must be an int >= 0, got {previous!r}")
    root = Path(root)
    fd = _root_fd(root)
    if fd is None:
        return None
    try:
        lineage = _read_lineage(root, fd, kind)
        if not lineage:
            return None
        if previous >= len(lineage):
            raise CheckpointFileError(
                root / kind.name,
                f"the {kind.lineage_is} lineage holds {len(lineage)} checkpoint(s); "
                f"there is no checkpoint {previous} back",
            )
        entry = lineage[previous].entry
        loaded = read(root, fd, entry)
        _note_resumed(kind, fd, entry)
        return loaded
    finally:
        os.close(fd)


def _parent_dir(root: Path, parent: object, what: str) -> str:
    """The directory name of ``parent`` (a loaded checkpoint's ``path``, a
    path or a bare name), which must be in ``root``; ``ValueError``
    otherwise, ``TypeError`` for another type."""
    path = getattr(parent, "path", parent)
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"{what} must be a loaded checkpoint or a path, got {type(parent).__name__}"
        )
    path = Path(path)
    if path.parent != Path("."):
        try:
            same = os.path.samefile(path.parent, root)
        except OSError:
            same = False
        if not same:
            raise ValueError(f"{what} {str(path)[:200]} is not a checkpoint of {root}")
    return path.name


def _check_fingerprint(shown: Path, expected: str | None, saved: str) -> None:
    """Raise ``DatasetChangedError`` naming ``shown`` unless the checkpoint
    was saved for the ``expected`` dataset (``None``: not checked)."""
    if expected is not None and saved != expected:
        raise DatasetChangedError(shown, expected=expected, found=saved)


def _read_part(name: str, *, dir_fd: int, shown: Path, size: int, sha256: str) -> bytes:
    """The bytes of part ``name`` of a checkpoint directory, at the ``size``
    and with the ``sha256`` saved for it."""
    try:
        data = _read_file(name, dir_fd=dir_fd, shown=shown, size=size)
    except FileNotFoundError:
        raise CheckpointFileError(shown, "missing part of the checkpoint") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CheckpointFileError(shown, "corrupted: SHA-256 differs from the saved one")
    return data


def _decode_part(data: bytes, shown: Path) -> Any:
    """A part's content by its name's extension: a ``.json`` part parsed, a
    ``.pt`` part loaded with ``torch.load(weights_only=True)``."""
    if shown.suffix == ".json":
        return _parse_json(data, shown, "not JSON")
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise CheckpointFileError(shown, f"cannot be loaded: {exc}") from None


# -- reading a checkpoint root ---------------------------------------------------------


def _parse_entry(shown: Path, raw: object) -> _Entry:
    if (
        not isinstance(raw, dict)
        or set(raw) != _ENTRY_KEYS
        or not isinstance(raw["name"], str)
        or not (m := _NAME.match(raw["name"]))
        or not _is_int(raw["step"])
        or int(m.group(1)) != raw["step"]
        or not isinstance(raw["manifest_sha256"], str)
        or not _HEX64.match(raw["manifest_sha256"])
    ):
        raise CheckpointFileError(shown, f"bad lineage entry {str(raw)[:200]}")
    return _Entry(raw["name"], raw["step"], raw["manifest_sha256"])


#: ``LATEST``: the published lineage of a checkpoint root.
_PUBLISHED: Final = _LineageFile(
    name=LATEST,
    format=ROOT_FORMAT,
    version=ROOT_VERSION,
    also_reads=ROOT_VERSIONS_READ,
    max_bytes=MAX_LATEST_BYTES,
    max_entries=MAX_KEEP,
    dirs=_NAME,
    dirs_are="checkpoint directories",
    lineage_is="published",
    # A write removes the dead directories before it renames its own, so a
    # kill leaves at most that one beside the empty lineage of a first write.
    unlisted_when_empty=1,
    leftovers=_LEFTOVER_PREFIXES,
    parse_entry=_parse_entry,
    step_of=lambda e: e.step,
    dir_of=lambda e: e.name,
    to_json=_Entry.to_json,
)


def published_checkpoints(root: str | os.PathLike[str]) -> list[Path]:
    """The published lineage under ``root``, newest first: the latest
    checkpoint, then its parent, that one's parent, ... (as many as ``keep``
    kept). ``[]`` for a root with no checkpoint. Raises
    ``CheckpointFileError`` for a missing, empty, garbled or forged
    ``LATEST`` next to checkpoint directories (an empty lineage beside more
    than one of them included)."""
    return _lineage_dirs(root, _PUBLISHED)


def latest_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """The directory of the latest published checkpoint, or ``None`` when
    the root holds no checkpoint at all; see ``published_checkpoints``."""
    lineage = published_checkpoints(root)
    return lineage[0] if lineage else None


def read_checkpoint(
    root: str | os.PathLike[str],
    *,
    fingerprint: str | None,
    require: Collection[str] = (),
    previous: int = 0,
) -> LoadedCheckpoint | None:
    """Read and validate the latest published checkpoint under ``root``.

    Returns ``None`` only when the root holds no checkpoint at all (absent,
    empty, or only leftovers of a first write that never published).
    ``fingerprint`` is the current dataset's (``None`` skips that check);
    ``require`` names parts that must be present (``"collector"`` for
    ``collector.json``). ``previous=k`` reads the latest one's ``k``-th
    ancestor along the published lineage instead: the fallback when the
    latest one is damaged. The checkpoint returned is what this process's
    run now continues: the next ``write_checkpoint`` into this root without
    ``parent=`` continues it, abandoning the newer ones. Raises
    ``CheckpointFileError`` (missing, truncated, corrupted or malformed
    file, a missing required part, a missing or garbled ``LATEST`` next to
    checkpoint directories, no ``k``-th previous one),
    ``CheckpointFileVersionError`` and ``DatasetChangedError``, each naming
    the file."""

    def read(root: Path, root_fd: int, entry: _Entry) -> LoadedCheckpoint:
        return _read_dir(root, root_fd, entry.name, entry, fingerprint=fingerprint, require=require)

    return _read_previous(root, _PUBLISHED, previous, read)


def read_checkpoint_dir(
    path: str | os.PathLike[str], *, fingerprint: str | None, require: Collection[str] = ()
) -> LoadedCheckpoint:
    """Read and validate one checkpoint directory on its own (its manifest's
    checksum and parts; not whether it was published; what a write
    continues is not changed); see ``read_checkpoint``."""
    path = Path(path)
    fd = _root_fd(path.parent)
    if fd is None:
        raise CheckpointFileError(path, "missing: the checkpoint directory is gone")
    try:
        return _read_dir(path.parent, fd, path.name, None, fingerprint=fingerprint, require=require)
    finally:
        os.close(fd)


def _read_manifest(
    root: Path, ckpt_fd: int, name: str, entry: _Entry | None
) -> tuple[int, str, list[dict[str, Any]], str]:
    """(step, fingerprint, parts, sha256) of a validated manifest."""
    shown = root / name / MANIFEST
    try:
        raw = _read_file(MANIFEST, dir_fd=ckpt_fd, shown=shown, limit=MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise CheckpointFileError(shown, "missing: the checkpoint is incomplete") from None
    manifest = _parse_json(raw, shown, "truncated or corrupted")
    if not isinstance(manifest, dict):
        raise CheckpointFileError(shown, "not a JSON object")
    _check_sealed(shown, manifest, FORMAT, VERSION, _MANIFEST_KEYS)
    sha = manifest["sha256"]
    if entry is not None and sha != entry.manifest_sha256:
        raise CheckpointFileError(
            shown, f"is not the manifest {LATEST} published for {name} (SHA-256 differs)"
        )
    step, saved_fp, parts = manifest["step"], manifest["fingerprint"], manifest["parts"]
    m = _NAME.match(name)
    if not _is_int(step) or step < 0 or m is None or int(m.group(1)) != step:
        raise CheckpointFileError(shown, f"saved step {step!r} does not match the directory {name}")
    if not isinstance(saved_fp, str):
        raise CheckpointFileError(shown, "'fingerprint' must be a string")
    if not isinstance(parts, list) or len(parts) > MAX_PARTS:
        raise CheckpointFileError(shown, f"'parts' must be a list of at most {MAX_PARTS}")
    seen: set[str] = set()
    for part in parts:
        if not isinstance(part, dict) or set(part) != _PART_KEYS:
            raise CheckpointFileError(shown, f"bad part entry {str(part)[:200]}")
        pname, size, digest = part["name"], part["size"], part["sha256"]
        if not isinstance(pname, str) or not _PART.match(pname) or pname == MANIFEST:
            raise CheckpointFileError(shown, f"bad part name {str(pname)[:130]!r}")
        if not _is_int(size) or size < 0:
            raise CheckpointFileError(shown, f"part {pname}: size must be an int >= 0")
        if not isinstance(digest, str) or not _HEX64.match(digest):
            raise CheckpointFileError(shown, f"part {pname}: sha256 must be 64 hex digits")
        if pname in seen:
            raise CheckpointFileError(shown, f"part {pname} is listed twice")
        seen.add(pname)
    return step, saved_fp, parts, sha


def _read_dir(
    root: Path,
    root_fd: int,
    name: str,
    entry: _Entry | None,
    *,
    fingerprint: str | None,
    require: Collection[str],
) -> LoadedCheckpoint:
    path = root / name
    if not _NAME.match(name):
        raise CheckpointFileError(path, "not a checkpoint directory name")
    ckpt_fd = _open_dir(name, dir_fd=root_fd, shown=path)
    try:
        step, saved_fp, parts, _ = _read_manifest(root, ckpt_fd, name, entry)
        _check_fingerprint(path / MANIFEST, fingerprint, saved_fp)
        stems = {p["name"].rpartition(".")[0] for p in parts}
        missing = [n for n in require if n not in stems]
        if missing:
            raise CheckpointFileError(path / MANIFEST, f"saved no part(s) {missing}")
        json_parts: dict[str, Any] = {}
        tensor_parts: dict[str, Any] = {}
        for part in parts:
            file = path / part["name"]
            data = _read_part(
                part["name"], dir_fd=ckpt_fd, shown=file, size=part["size"], sha256=part["sha256"]
            )
            stem, _, ext = part["name"].rpartition(".")
            (json_parts if ext == "json" else tensor_parts)[stem] = _decode_part(data, file)
        return LoadedCheckpoint(
            path=path, step=step, json_parts=json_parts, tensor_parts=tensor_parts
        )
    finally:
        os.close(ckpt_fd)


# -- writing --------------------------------------------------------------------------


def _fsync_fd(fd: int) -> None:
    os.fsync(fd)


def _write_new(name: str, data: bytes, *, dir_fd: int) -> None:
    """Create ``name`` in ``dir_fd`` (it must not exist, not even as a
    symlink), write ``data`` and fsync it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_json(root: Path, root_fd: int, name: str, doc: dict[str, Any]) -> None:
    """Seal ``doc`` with its SHA-256 and atomically replace ``root/name`` with
    it: a temporary file under a random name created with ``O_EXCL`` (a
    planted file or symlink at a predictable name can be neither followed
    nor overwritten), fsync, ``os.replace``, fsync of the root."""
    doc = {**doc, "sha256": _digest(doc)}
    fd, tmp = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{name}-", dir=root)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write((json.dumps(doc, sort_keys=True, indent=1) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_fd(root_fd)


def _publish_lineage(
    root: Path, root_fd: int, kind: _LineageFile[_E], lineage: list[_Link[_E]]
) -> None:
    """Replace the lineage file ``kind`` names with one that lists ``lineage``."""
    doc: dict[str, Any] = {
        "format": kind.format,
        "version": kind.version,
        "lineage": [{**kind.to_json(link.entry), "parent": link.parent} for link in lineage],
    }
    _replace_json(root, root_fd, kind.name, doc)


def _publish_next(
    root: Path,
    root_fd: int,
    kind: _LineageFile[_E],
    new: _E,
    ancestry: list[_Link[_E]],
    keep: int,
) -> None:
    """Publish ``new`` as the newest checkpoint, continuing ``ancestry``
    (``_ancestry``'s: its parent first), ``keep`` entries in all, and note
    it as what this process's run continues. Then remove every other
    checkpoint directory of the root (ancestors beyond ``keep``, abandoned
    and dead branches) and every leftover of a killed write."""
    parent = kind.dir_of(ancestry[0].entry) if ancestry else None
    lineage = [_Link(new, parent), *ancestry[: keep - 1]]
    _publish_lineage(root, root_fd, kind, lineage)
    _note_resumed(kind, root_fd, new)
    kept = {kind.dir_of(link.entry) for link in lineage}
    for name in _listing(root_fd, root):
        if (kind.dirs.match(name) and name not in kept) or name.startswith(kind.leftovers):
            _remove(root, name)


def _remove_dead(root: Path, root_fd: int, kind: _LineageFile[_E], listed: set[str]) -> None:
    """Remove every checkpoint directory of the root that the lineage does
    not list (``listed``): dead branches, renamed but never published.
    Raises ``CheckpointFileError`` naming one that cannot be removed."""
    for name in _listing(root_fd, root):
        if kind.dirs.match(name) and name not in listed:
            _remove(root, name)
            if os.path.lexists(root / name):
                raise CheckpointFileError(
                    root / name, "a dead branch (never published) that cannot be removed"
                )


def _remove(root: Path, name: str) -> None:
    """Remove a directory entry of the root without following a symlink."""
    target = root / name
    try:
        if target.is_symlink() or not target.is_dir():
            target.unlink(missing_ok=True)
        else:
            shutil.rmtree(target, ignore_errors=True)
    except OSError:
        pass  # pruning is best effort; the published lineage is already durable


def write_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    *,
    fingerprint: str,
    json_parts: Mapping[str, Any],
    tensor_parts: Mapping[str, Any] | None = None,
    keep: int = 2,
    between_parts: Callable[[str], None] | None = None,
    parent: LoadedCheckpoint | str | os.PathLike[str] | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically and publish it as the latest.

    ``json_parts`` maps a name to JSON data (``name.json``), ``tensor_parts``
    a name to what ``torch.save`` stores and ``torch.load(weights_only=True)``
    reads back (``name.pt``: state dicts of tensors and plain values).

    The new checkpoint continues the checkpoint the run continues: ``parent``
    (a ``LoadedCheckpoint`` of this root, or a published checkpoint
    directory of it, such as the path a previous write returned) when
    given; otherwise the one this process last read with
    ``read_checkpoint`` or wrote in this root; otherwise the latest
    published one. When that one's step is not below ``step``, the newest
    checkpoint of lower step on its ancestry is the parent instead. The
    published lineage becomes the new checkpoint and that ancestry, ``keep``
    entries in all; every other checkpoint directory is removed (the newer
    checkpoints a resume from an older one abandoned, damaged or not).
    ``between_parts(name)`` is called after each part is written and with
    ``"LATEST"`` just before publishing (a hook for crash tests).

    Refuses (``CheckpointFileError``, nothing written) a root whose
    ``LATEST`` is missing next to checkpoint directories, or garbled, and a
    ``parent`` that is not on the published lineage, and a dead directory
    that cannot be removed; raises ``ValueError`` for a ``parent`` outside
    ``root`` and ``TypeError`` for one that is neither a loaded checkpoint
    nor a path."""
    if not _is_int(step) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    if not _is_int(keep) or not 1 <= keep <= MAX_KEEP:
        raise ValueError(f"keep must be an int in [1, {MAX_KEEP}], got {keep!r}")
    if not isinstance(fingerprint, str):
        raise TypeError(f"fingerprint must be a str, got {type(fingerprint).__name__}")
    root = Path(root)
    parent_dir = None if parent is None else _parent_dir(root, parent, "parent")
    blobs: list[tuple[str, bytes]] = []
    for key, value in json_parts.items():
        blobs.append((f"{key}.json", json.dumps(value, sort_keys=True, allow_nan=False).encode()))
    for key, value in (tensor_parts or {}).items():
        buf = io.BytesIO()
        torch.save(value, buf)
        blobs.append((f"{key}.pt", buf.getvalue()))
    names = [n for n, _ in blobs]
    for filename in names:
        if not _PART.match(filename) or filename == MANIFEST:
            raise ValueError(f"bad part name {filename!r}")
    if len(set(names)) != len(names) or len(names) > MAX_PARTS:
        raise ValueError(f"part names must be unique and at most {MAX_PARTS}: {names}")

    root.mkdir(parents=True, exist_ok=True)
    root_fd = _root_fd(root)
    assert root_fd is not None
    try:
        old = _read_lineage(root, root_fd, _PUBLISHED)
        ancestry = _ancestry(root, root_fd, _PUBLISHED, old or [], step, parent_dir)
        if old is None:
            # The first write publishes an empty lineage before anything
            # else, so that a checkpoint directory is never found next to a
            # missing LATEST unless something removed it.
            old = []
            _publish_lineage(root, root_fd, _PUBLISHED, old)
        published = {link.entry.name for link in old}
        _remove_dead(root, root_fd, _PUBLISHED, published)
        tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}ckpt-", dir=root))
        tmp_fd = _open_dir(tmp.name, dir_fd=root_fd, shown=tmp)
        try:
            parts: list[dict[str, Any]] = []
            for filename, data in blobs:
                _write_new(filename, data, dir_fd=tmp_fd)
                parts.append(
                    {
                        "name": filename,
                        "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest(),
                    }
                )
                if between_parts is not None:
                    between_parts(filename)
            manifest: dict[str, Any] = {
                "format": FORMAT,
                "version": VERSION,
                "step": step,
                "fingerprint": fingerprint,
                "parts": parts,
            }
            manifest["sha256"] = _digest(manifest)
            _write_new(
                MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode(), dir_fd=tmp_fd
            )
            _fsync_fd(tmp_fd)
        finally:
            os.close(tmp_fd)
        # The step's own name, unless a published checkpoint holds it (a
        # step written again): that one is kept until the new lineage is
        # durable. The dead directories are gone already.
        branch = 0
        while checkpoint_name(step, branch) in published:
            branch += 1
        name = checkpoint_name(step, branch)
        os.rename(tmp, root / name)
        _fsync_fd(root_fd)
        if between_parts is not None:
            between_parts(LATEST)
        new = _Entry(name, step, manifest["sha256"])
        _publish_next(root, root_fd, _PUBLISHED, new, ancestry, keep)
        return root / name
    finally:
        os.close(root_fd)
