"""A root's lineage file: the chain of ancestry a root publishes (a
checkpoint root's ``LATEST``, a distributed root's ``COMMIT``), read,
continued, published and pruned by one code."""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Generic, TypeVar, cast

import attrs

from .._errors import (
    MAX_EPOCH,
    CheckpointConflictError,
    CheckpointFencedError,
    CheckpointFileError,
)
from ..store import (
    PosixStore,
    Store,
    StoreConflictError,
    StoreError,
    StoreLimitError,
    StoreObjectError,
)
from ..store._posix import DEAD_PREFIX
from . import _fs
from ._sealed import check_sealed, is_int, parse_json, sealed_bytes

#: The keys of a lineage file's document (``LATEST``, and the torch
#: binding's ``COMMIT``).
_LINEAGE_KEYS: Final = frozenset({"format", "version", "lineage", "sha256"})

#: The version of both kinds whose entries name their parents.
_PARENTS_SINCE: Final = 2

#: An owned lineage file's owner: a writer's token.
_OWNER: Final = re.compile(r"^[0-9a-f]{16}$")

_E = TypeVar("_E")
_T = TypeVar("_T")


@attrs.frozen
class LineageFile(Generic[_E]):
    """One kind of root's lineage file: ``LATEST`` of a checkpoint root
    (``_dirs.PUBLISHED``), ``COMMIT`` of a distributed one (the torch
    binding's ``_distributed._COMMITTED``). Both are a bounded JSON
    document sealed by its SHA-256 whose ``lineage`` lists a chain of
    ancestry, newest first: each entry names its parent (the directory of
    the checkpoint it continues, ``null`` for a fresh start), which is the
    next entry's directory, and steps strictly decrease. One code reads
    them (``read_lineage``, ``lineage_dirs``, ``read_previous``), chooses
    what a new checkpoint continues (``ancestry``) and publishes them
    (``publish_lineage``, ``publish_next``); what differs is named here."""

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
    #: The file of ``version`` also names its owner (``"owner"``: a
    #: writer's token), so that a writer claims the root by rewriting it
    #: with the same lineage: the file's bytes, hence its version on any
    #: store (an ETag is a digest of them), change (``COMMIT``).
    owned: bool = False
    #: The file of ``version`` also names the run's *epoch* (``"epoch"``,
    #: an int >= 0; 0 in older versions): the number of the newest life
    #: that claimed the root (``_epoch.claim_epoch``). A claim rewrites the
    #: file with the same lineage and the next epoch, so its version
    #: changes, and a publish of a writer of an older epoch is refused
    #: (``LATEST``).
    epoch: bool = False


@attrs.frozen
class Link(Generic[_E]):
    """An entry of a lineage file and its parent: the directory of the
    checkpoint it continues (``None``: a fresh start, or not recorded by a
    version-1 file)."""

    entry: _E
    parent: str | None


def _dir_step(kind: LineageFile[_E], name: object) -> int | None:
    """The step in a checkpoint directory's name, ``None`` if not one."""
    m = kind.dirs.match(name) if isinstance(name, str) else None
    return int(m.group(1)) if m else None


def read_lineage(root: Path, root_fd: int, kind: LineageFile[_E]) -> list[Link[_E]] | None:
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
        data = _fs.read_file(kind.name, dir_fd=root_fd, shown=shown, limit=kind.max_bytes)
    except FileNotFoundError:
        refuse_unlisted(shown, kind, None, _fs.listing(root_fd, root))
        return None
    links = parse_lineage(shown, data, kind)
    if not links:
        refuse_unlisted(shown, kind, links, _fs.listing(root_fd, root))
    return links


def refuse_unlisted(
    shown: Path | str, kind: LineageFile[_E], links: list[Link[_E]] | None, names: list[str]
) -> None:
    """Raise ``CheckpointFileError`` when a root whose lineage file is
    missing (``links`` is ``None``) holds checkpoint directories among
    ``names``, or one whose lineage is empty holds more of them than a
    kill leaves (``kind.unlisted_when_empty``)."""
    dirs = sorted(n for n in names if kind.dirs.match(n))
    some = f"{', '.join(dirs[:3])}{', ...' if len(dirs) > 3 else ''}"
    if links is None and dirs:
        raise CheckpointFileError(
            shown,
            f"missing, but the root holds {kind.dirs_are} ({some}): "
            "refusing to treat it as a fresh start",
        )
    bound = kind.unlisted_when_empty
    if links == [] and bound is not None and len(dirs) > bound:
        raise CheckpointFileError(
            shown,
            f"lists no checkpoint, but the root holds {len(dirs)} {kind.dirs_are} "
            f"({some}); a killed write leaves at most {bound}: refusing to treat it as a "
            "fresh start",
        )


def parse_lineage(shown: Path | str, data: bytes, kind: LineageFile[_E]) -> list[Link[_E]]:
    """The lineage a lineage file's bytes list, newest first, validated:
    ``CheckpointFileError`` naming ``shown`` for an empty, garbled or
    forged file, entries that do not form a chain of parents or whose
    steps do not strictly decrease (``CheckpointFileVersionError`` for
    another format or version). Where the bytes come from (a directory, a
    store) is the caller's."""
    return parse_lineage_epoch(shown, data, kind)[0]


def parse_lineage_epoch(
    shown: Path | str, data: bytes, kind: LineageFile[_E]
) -> tuple[list[Link[_E]], int]:
    """``parse_lineage``'s lineage and the epoch the file names (0 for a
    kind or a version without one)."""
    if not data.strip():
        raise CheckpointFileError(shown, f"empty: it must list the {kind.lineage_is} checkpoints")
    doc = parse_json(data, shown, "garbled")
    if not isinstance(doc, dict):
        raise CheckpointFileError(shown, "garbled: not a JSON object")
    keys = _LINEAGE_KEYS
    if kind.owned and doc.get("version") == kind.version:
        keys = _LINEAGE_KEYS | {"owner"}
    if kind.epoch and doc.get("version") == kind.version:
        keys = keys | {"epoch"}
    check_sealed(shown, doc, kind.format, kind.version, keys, kind.also_reads)
    if "owner" in doc and not (isinstance(doc["owner"], str) and _OWNER.match(doc["owner"])):
        raise CheckpointFileError(shown, f"bad owner {str(doc['owner'])[:80]!r}")
    epoch = doc.get("epoch", 0)
    if not is_int(epoch) or not 0 <= epoch <= MAX_EPOCH:
        raise CheckpointFileError(shown, f"bad epoch {str(epoch)[:80]!r}")
    lineage = doc["lineage"]
    if not isinstance(lineage, list) or len(lineage) > kind.max_entries:
        raise CheckpointFileError(shown, f"'lineage' must be a list of at most {kind.max_entries}")
    links: list[Link[_E]] = []
    if doc["version"] >= _PARENTS_SINCE:
        for raw in lineage:
            if not isinstance(raw, dict) or "parent" not in raw:
                raise CheckpointFileError(shown, f"bad lineage entry {str(raw)[:200]}")
            parent = raw["parent"]
            # The entry parsers only name ``shown`` in their errors.
            entry = kind.parse_entry(
                cast(Path, shown), {k: v for k, v in raw.items() if k != "parent"}
            )
            if parent is not None and _dir_step(kind, parent) is None:
                raise CheckpointFileError(
                    shown, f"entry {kind.dir_of(entry)}: bad parent {str(parent)[:80]!r}"
                )
            links.append(Link(entry, parent))
    else:  # an older version: the chain it lists, its last parent unrecorded
        entries = [kind.parse_entry(cast(Path, shown), raw) for raw in lineage]
        links = [
            Link(e, kind.dir_of(entries[i + 1]) if i + 1 < len(entries) else None)
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
    return links, epoch


def lineage_dirs(root: str | os.PathLike[str], kind: LineageFile[_E]) -> list[Path]:
    """The directories of the lineage ``kind`` lists under ``root``, newest
    first (``[]`` for a root with no checkpoint); raises as ``read_lineage``."""
    root = Path(root)
    fd = _fs.root_fd(root)
    if fd is None:
        return []
    try:
        return [root / kind.dir_of(link.entry) for link in read_lineage(root, fd, kind) or []]
    finally:
        _fs.close(fd)


# What each root was last resumed from or written in this process, so that
# a write continues the checkpoint its run continues without being told:
# (lineage file, the root's identity) -> that checkpoint's entry.
_RESUMED: dict[tuple[str, object], Any] = {}
_RESUMED_LOCK: Final = threading.Lock()


#: A root as the notes know it: a directory's descriptor (keyed by its
#: identity), or what ``store_root`` gives for a store.
RootId = int | str | tuple[int, int]


def _root_key(kind: LineageFile[_E], root: RootId) -> tuple[str, object]:
    """A root's key: a directory's identity for a descriptor, else as given."""
    return (kind.name, _fs.root_identity(root) if isinstance(root, int) else root)


def store_root(store: Store) -> RootId:
    """A store's root as the notes know it: a ``PosixStore``'s directory by
    its identity (the same key as its descriptor's, so a directory read
    through either is one root), any other by its location."""
    if isinstance(store, PosixStore):
        try:
            st = os.stat(store.directory)
        except OSError:
            return store.where
        return (st.st_dev, st.st_ino)
    return store.where


def note_resumed(kind: LineageFile[_E], root_fd: RootId, entry: _E) -> None:
    """Record ``entry`` as what this process's run in this root (a
    directory's descriptor, or a store's ``store_root``) continues."""
    key = _root_key(kind, root_fd)
    with _RESUMED_LOCK:
        _RESUMED[key] = entry


def _noted_resumed(kind: LineageFile[_E], root_fd: RootId) -> object:
    key = _root_key(kind, root_fd)
    with _RESUMED_LOCK:
        return _RESUMED.get(key)


def on_lineage(root: Path | str, kind: LineageFile[_E], lineage: list[Link[_E]], name: str) -> int:
    """The index of directory ``name`` on ``lineage``; ``CheckpointFileError``
    naming the lineage file when it is not there."""
    names = [kind.dir_of(link.entry) for link in lineage]
    if name not in names:
        raise CheckpointFileError(
            f"{root}/{kind.name}",
            f"{name[:80]} is not on the {kind.lineage_is} lineage "
            f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}): "
            "a new checkpoint continues one of its checkpoints",
        )
    return names.index(name)


def ancestry(
    root: Path | str,
    root_fd: RootId,
    kind: LineageFile[_E],
    old: list[Link[_E]],
    step: int,
    parent: str | None,
) -> list[Link[_E]]:
    """The part of the ``old`` lineage that a new checkpoint at ``step``
    continues: from the checkpoint the run continues, the newest on its
    ancestry (itself included) with a step below ``step``. That checkpoint
    is the directory ``parent`` when given; otherwise the one this process
    last resumed from or wrote in this root, if it is still on ``old``;
    otherwise the newest of ``old``. Raises ``CheckpointFileError`` naming
    the lineage file when ``parent`` is not on ``old``."""
    start = 0
    if parent is not None:
        start = on_lineage(root, kind, old, parent)
    else:
        noted = _noted_resumed(kind, root_fd)
        # Compared by value, not name: a stale note (a root removed and
        # made again, reusing the inode) names nothing on the new lineage.
        start = next((i for i, link in enumerate(old) if link.entry == noted), 0)
    for i in range(start, len(old)):
        if kind.step_of(old[i].entry) < step:
            return old[i:]
    return []


def read_previous(
    root: str | os.PathLike[str],
    kind: LineageFile[_E],
    previous: int,
    read: Callable[[Path, int, _E], _T],
) -> _T | None:
    """``read(root, root_fd, entry)`` of the entry ``previous`` back along
    the lineage ``kind`` lists (0: the newest; ``k``: its ``k``-th
    ancestor); ``None`` for a root that holds no checkpoint. What it
    returns is noted as what this process's run continues (``ancestry``).
    Raises ``ValueError`` for a bad ``previous``, ``CheckpointFileError``
    when the lineage is shorter, and what ``read_lineage`` and ``read``
    raise."""
    if not is_int(previous) or previous < 0:
        raise ValueError(f"previous must be an int >= 0, got {previous!r}")
    root = Path(root)
    fd = _fs.root_fd(root)
    if fd is None:
        return None
    try:
        lineage = read_lineage(root, fd, kind)
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
        note_resumed(kind, fd, entry)
        return loaded
    finally:
        _fs.close(fd)


def parent_dir(root: Path | None, parent: object, what: str) -> str:
    """The directory name of ``parent`` (a loaded checkpoint's ``path``, a
    path or a bare name), which must be in the directory ``root``;
    ``ValueError`` otherwise, ``TypeError`` for another type. On an object
    store (``root`` is ``None``) a checkpoint is named relative to its
    root, as the writes and reads there return it: ``ValueError`` for a
    path with a directory."""
    path = getattr(parent, "path", parent)
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"{what} must be a loaded checkpoint or a path, got {type(parent).__name__}"
        )
    path = Path(path)
    if path.parent != Path(".") and root is None:
        raise ValueError(
            f"{what} {str(path)[:200]}: on an object store a checkpoint is named relative "
            "to its root (what a write returns, a loaded checkpoint's path)"
        )
    if path.parent != Path(".") and not _fs.same_place(path.parent, root):  # type: ignore[arg-type]
        raise ValueError(f"{what} {str(path)[:200]} is not a checkpoint of {root}")
    return path.name


def publish_lineage(
    root: Path, root_fd: int, kind: LineageFile[_E], lineage: list[Link[_E]], epoch: int | None
) -> None:
    """Replace the lineage file ``kind`` names with one that lists
    ``lineage``. A kind with an epoch is replaced by one compare-and-swap
    (a ``PosixStore``'s, under its lock) that keeps the file's epoch and,
    for a writer of ``epoch``, only if that is still the file's
    (``publish_fenced``); another kind by a plain atomic replace."""
    if kind.epoch:
        publish_fenced(PosixStore(root), str(root / kind.name), kind, lineage, epoch, expected=None)
    else:
        _fs.replace_file(root, root_fd, kind.name, lineage_bytes(kind, lineage))


def lineage_bytes(
    kind: LineageFile[_E],
    lineage: list[Link[_E]],
    owner: str | None = None,
    epoch: int = 0,
) -> bytes:
    """The bytes of a lineage file ``kind`` that lists ``lineage``; an
    owned kind's names its ``owner`` (required there, refused elsewhere),
    a kind with an epoch's names ``epoch``."""
    if kind.owned != (owner is not None) or (owner is not None and not _OWNER.match(owner)):
        raise ValueError(f"{kind.name}: owner {owner!r} does not fit the file")
    if not is_int(epoch) or not 0 <= epoch <= MAX_EPOCH or (epoch and not kind.epoch):
        raise ValueError(f"{kind.name}: epoch {epoch!r} does not fit the file")
    doc: dict[str, Any] = {
        "format": kind.format,
        "version": kind.version,
        "lineage": [{**kind.to_json(link.entry), "parent": link.parent} for link in lineage],
    }
    if owner is not None:
        doc["owner"] = owner
    if kind.epoch:
        doc["epoch"] = epoch
    return sealed_bytes(doc)


def read_versioned(
    store: Store, shown: str, kind: LineageFile[_E]
) -> tuple[list[Link[_E]] | None, int, str | None]:
    """(the lineage ``kind``'s file lists, ``None`` if it is absent; the
    epoch it names, 0 if absent; its version, ``None`` if absent), read
    together from ``store``. Raises ``CheckpointFileError`` for a file
    larger than its bound or not a regular file, and ``parse_lineage``'s
    errors."""
    try:
        got = store.get_versioned(kind.name, max_bytes=kind.max_bytes)
    except StoreLimitError:
        raise CheckpointFileError(shown, f"more than the {kind.max_bytes} bytes allowed") from None
    except StoreObjectError as exc:
        raise CheckpointFileError(shown, exc.reason) from None
    if got is None:
        return None, 0, None
    links, epoch = parse_lineage_epoch(shown, got.data, kind)
    return links, epoch, got.version


def refuse_fenced(shown: str, epoch: int | None, current: int) -> None:
    """Raise ``CheckpointFencedError`` naming both epochs when the lineage
    file names ``current`` and a writer of ``epoch`` is about to act on it
    (``None``: a writer outside the fencing, never refused)."""
    if epoch is not None and current != epoch:
        raise CheckpointFencedError(shown, epoch, current)


def publish_fenced(
    store: Store,
    shown: str,
    kind: LineageFile[_E],
    lineage: list[Link[_E]],
    epoch: int | None,
    *,
    expected: str | None,
    current: int | None = None,
) -> str:
    """Move the lineage file ``kind`` names in ``store`` to list
    ``lineage``, by one compare-and-swap: against ``expected`` (the
    version the caller read, with ``current`` its epoch) or, with
    ``expected=None``, against the version read now (a missing file is
    created). The file keeps its epoch; a writer of ``epoch`` (``None``:
    a writer outside the fencing, which keeps whatever epoch it finds)
    publishes only while the file names that epoch: else
    ``CheckpointFencedError`` naming both, also when the swap loses to a
    newer life's claim. A swap lost to a writer of the same epoch is a
    ``CheckpointConflictError``. Returns the new version."""
    if expected is None:
        _, current, expected = read_versioned(store, shown, kind)
    assert current is not None
    refuse_fenced(shown, epoch, current)
    try:
        if expected is None:
            return store.create(kind.name, lineage_bytes(kind, lineage, epoch=current))
        return store.swap(kind.name, lineage_bytes(kind, lineage, epoch=current), expected=expected)
    except StoreConflictError as exc:
        _, now, _ = read_versioned(store, shown, kind)
        if epoch is not None and now != epoch:
            # As refuse_fenced, without the lost swap as its context.
            raise CheckpointFencedError(shown, epoch, now) from None
        raise CheckpointConflictError(
            shown, f"another writer moved it while this one published ({exc.reason})"
        ) from None


def next_lineage(
    kind: LineageFile[_E], new: _E, ancestry: list[Link[_E]], keep: int
) -> list[Link[_E]]:
    """The lineage that publishes ``new`` continuing ``ancestry``
    (``ancestry()``'s: its parent first), ``keep`` entries in all."""
    parent = kind.dir_of(ancestry[0].entry) if ancestry else None
    return [Link(new, parent), *ancestry[: keep - 1]]


def publish_next(
    root: Path,
    root_fd: int,
    kind: LineageFile[_E],
    new: _E,
    ancestry: list[Link[_E]],
    keep: int,
    epoch: int | None,
) -> None:
    """Publish ``new`` as the newest checkpoint, continuing ``ancestry``
    (``ancestry()``'s: its parent first), ``keep`` entries in all, as a
    writer of ``epoch`` (``publish_lineage``), and note it as what this
    process's run continues. Then remove, of what the root held before
    the publish, every other checkpoint directory (ancestors beyond
    ``keep``, abandoned and dead branches) and every leftover of a killed
    write (``remove_unlisted``): nothing when a newer life claimed the
    root after the publish (the newer life prunes it)."""
    lineage = next_lineage(kind, new, ancestry, keep)
    # Listed before the publish: a newer life can claim only after the
    # publish succeeded, so nothing it makes is on this list.
    before = _fs.listing(root_fd, root)
    publish_lineage(root, root_fd, kind, lineage, epoch)
    note_resumed(kind, root_fd, new)
    kept = {kind.dir_of(link.entry) for link in lineage}
    doomed = [
        name
        for name in before
        if (kind.dirs.match(name) and name not in kept) or name.startswith(kind.leftovers)
    ]
    try:
        remove_unlisted(root, root_fd, kind, epoch, lambda names: doomed, strict=False)
    except CheckpointFencedError:
        pass  # published, then fenced: the newer life's writes prune the root


def remove_dead(
    root: Path, root_fd: int, kind: LineageFile[_E], listed: set[str], epoch: int | None
) -> None:
    """Remove every checkpoint directory of the root that the lineage does
    not list (``listed``, nor the lineage file read again under the lock):
    dead branches, renamed but never published; and what an earlier
    removal moved aside and was killed before removing (``.tmp-dead-*``,
    garbage, so a root is cleaned by its next write whether or not that
    write publishes; ``PosixStore.sweep`` takes them too). Raises
    ``CheckpointFencedError`` (nothing removed) when the file no longer
    names ``epoch``, and ``CheckpointFileError`` naming a directory that
    cannot be removed."""
    remove_unlisted(
        root,
        root_fd,
        kind,
        epoch,
        lambda names: [
            n
            for n in names
            if (kind.dirs.match(n) and n not in listed) or n.startswith(DEAD_PREFIX)
        ],
        strict=True,
    )


def remove_unlisted(
    root: Path,
    root_fd: int,
    kind: LineageFile[_E],
    epoch: int | None,
    doomed: Callable[[list[str]], list[str]],
    *,
    strict: bool,
) -> None:
    """Remove the entries of the root that ``doomed(listing)`` names,
    except a directory the lineage file lists. The file is read again and
    the entries are moved aside (renamed to a ``.tmp-`` name) under the
    ``PosixStore``'s lock, the one a newer life's claim swaps under, after
    checking that the file still names ``epoch`` (``None``: a writer
    outside the fencing, not checked): ``CheckpointFencedError`` when it
    does not, and nothing is removed. So no removal follows a newer
    life's claim, whose checkpoints, published or not, are never taken.
    What was moved aside is removed after the lock is released (a kill
    leaves it to the next write's sweep of leftovers). ``strict``: an
    entry that cannot be moved aside is a ``CheckpointFileError``; else it
    is left (pruning is best effort)."""
    shown = str(root / kind.name)
    aside: list[str] = []
    try:
        store = PosixStore(root)
        with store.locked():
            links, current, _ = read_versioned(store, shown, kind)
            refuse_fenced(shown, epoch, current)
            listed = {kind.dir_of(link.entry) for link in links or []}
            for name in doomed(_fs.listing(root_fd, root)):
                if name in listed or name == kind.name:
                    continue
                trash = f"{DEAD_PREFIX}{secrets.token_hex(8)}"
                try:
                    os.rename(name, trash, src_dir_fd=root_fd, dst_dir_fd=root_fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if strict:
                        raise CheckpointFileError(
                            root / name,
                            f"a dead branch (never published) that cannot be removed: {exc}",
                        ) from None
                    continue
                aside.append(trash)
            if aside:
                _fs.fsync_fd(root_fd)
    except StoreError as exc:
        if strict:
            raise CheckpointFileError(shown, f"cannot take the store's lock: {exc}") from None
    finally:
        for trash in aside:
            _fs.remove(root, trash)
