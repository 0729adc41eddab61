"""Checkpoint directories under a root and the root's published lineage
(``LATEST``): writing one atomically, reading one validated."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from .._errors import CheckpointFencedError, CheckpointFileError
from ..store import PosixStore, local_path
from ..store._errors import at_path, typed_io
from . import _fs
from ._lineage import (
    LineageFile,
    ancestry,
    lineage_dirs,
    parent_dir,
    publish_lineage,
    publish_next,
    read_lineage,
    read_previous,
    read_versioned,
    remove_dead,
)
from ._parts import (
    JSON_SUFFIX,
    PartCodec,
    bad_part_name,
    decode_part,
    encode_json,
    part_pattern,
    read_part,
)
from ._sealed import HEX64, check_fingerprint, check_sealed, digest, is_int, parse_json

FORMAT: Final = "frontier_adapters.checkpoint_dir"
VERSION: Final = 2
ROOT_FORMAT: Final = "frontier_adapters.checkpoint_root"
ROOT_VERSION: Final = 3
#: Older versions of ``LATEST`` this library still reads: version 1 listed
#: the lineage in step order without parents (read as the chain it lists),
#: version 2 named no epoch (read as epoch 0).
ROOT_VERSIONS_READ: Final = (1, 2)
MANIFEST: Final = "manifest.json"
LATEST: Final = "LATEST"
#: Bounds on what is read before it is trusted.
MAX_MANIFEST_BYTES: Final = 1 << 20
MAX_LATEST_BYTES: Final = 1 << 16
MAX_PARTS: Final = 1024
MAX_KEEP: Final = 256
_NAME: Final = re.compile(r"^ckpt-(\d{6,})(?:-([1-9]\d{0,5}))?$")
_MANIFEST_KEYS: Final = frozenset({"format", "version", "step", "fingerprint", "parts", "sha256"})
_ENTRY_KEYS: Final = frozenset({"name", "step", "manifest_sha256"})
_PART_KEYS: Final = frozenset({"name", "size", "sha256"})
#: Leftovers of writes killed midway, this version's and version 1's.
_LEFTOVER_PREFIXES: Final = (_fs.TMP_PREFIX, f".{LATEST}.tmp-")


@attrs.frozen
class LoadedCheckpoint:
    """A validated checkpoint: its ``step``, JSON parts and the parts its
    codec decoded (``tensor_parts``: the torch binding's codec stores
    tensors), each keyed by the part's name without its suffix."""

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


def checkpoint_name(step: int, branch: int = 0) -> str:
    """The directory name of checkpoint ``step``: ``ckpt-000012``, or
    ``ckpt-000012-1`` for the first ``branch`` of a step written again
    while a published checkpoint holds it."""
    return f"ckpt-{step:06d}" + (f"-{branch}" if branch else "")


def _parse_entry(shown: Path, raw: object) -> _Entry:
    return parse_entry_named(_NAME, shown, raw)


def parse_entry_named(names: re.Pattern[str], shown: Path, raw: object) -> _Entry:
    """A ``LATEST`` entry whose checkpoint name ``names`` matches (group 1:
    the step, which the entry's step must equal)."""
    if (
        not isinstance(raw, dict)
        or set(raw) != _ENTRY_KEYS
        or not isinstance(raw["name"], str)
        or not (m := names.match(raw["name"]))
        or not is_int(raw["step"])
        or int(m.group(1)) != raw["step"]
        or not isinstance(raw["manifest_sha256"], str)
        or not HEX64.match(raw["manifest_sha256"])
    ):
        raise CheckpointFileError(shown, f"bad lineage entry {str(raw)[:200]}")
    return _Entry(raw["name"], raw["step"], raw["manifest_sha256"])


#: ``LATEST``: the published lineage of a checkpoint root.
PUBLISHED: Final = LineageFile(
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
    epoch=True,
)


# -- reading -------------------------------------------------------------------------


@typed_io(at_path)
def published_checkpoints(root: str | os.PathLike[str]) -> list[Path]:
    """The published lineage under ``root``, newest first: the latest
    checkpoint, then its parent, that one's parent, ... (as many as ``keep``
    kept). ``[]`` for a root with no checkpoint. Raises
    ``CheckpointFileError`` for a missing, empty, garbled or forged
    ``LATEST`` next to checkpoint directories (an empty lineage beside more
    than one of them included)."""
    local = local_path(root)
    if local is None:
        from ._objects import published_in_store

        return published_in_store(str(root))
    return lineage_dirs(local, PUBLISHED)


@typed_io(at_path)
def latest_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """The directory of the latest published checkpoint, or ``None`` when
    the root holds no checkpoint at all; see ``published_checkpoints``."""
    lineage = published_checkpoints(root)
    return lineage[0] if lineage else None


@typed_io(at_path)
def read_checkpoint(
    root: str | os.PathLike[str],
    *,
    fingerprint: str | None,
    require: Collection[str] = (),
    previous: int = 0,
    codec: PartCodec | None = None,
) -> LoadedCheckpoint | None:
    """Read and validate the latest published checkpoint under ``root``.

    Returns ``None`` only when the root holds no checkpoint at all (absent,
    empty, or only leftovers of a first write that never published).
    ``fingerprint`` is the current dataset's (``None`` skips that check);
    ``require`` names parts that must be present (``"collector"`` for
    ``collector.json``). ``previous=k`` reads the latest one's ``k``-th
    ancestor along the published lineage instead: the fallback when the
    latest one is damaged. ``codec`` decodes the parts that are not JSON
    (without one, a checkpoint that holds such a part is refused). The
    checkpoint returned is what this process's run now continues: the
    next ``write_checkpoint`` into this root without ``parent=`` continues
    it, abandoning the newer ones. Raises ``CheckpointFileError`` (missing,
    truncated, corrupted or malformed file, a missing required part, a
    missing or garbled ``LATEST`` next to checkpoint directories, no
    ``k``-th previous one), ``CheckpointFileVersionError`` and
    ``DatasetChangedError``, each naming the file."""

    local = local_path(root)
    if local is None:
        from ._objects import read_from_store

        return read_from_store(
            str(root),
            fingerprint=fingerprint,
            require=require,
            previous=previous,
            codec=codec,
        )

    def read(root: Path, root_fd: int, entry: _Entry) -> LoadedCheckpoint:
        return _read_dir(
            root, root_fd, entry.name, entry, fingerprint=fingerprint, require=require, codec=codec
        )

    return read_previous(local, PUBLISHED, previous, read)


@typed_io(at_path)
def read_checkpoint_dir(
    path: str | os.PathLike[str],
    *,
    fingerprint: str | None,
    require: Collection[str] = (),
    codec: PartCodec | None = None,
) -> LoadedCheckpoint:
    """Read and validate one checkpoint directory on its own (its manifest's
    checksum and parts; not whether it was published; what a write
    continues is not changed); see ``read_checkpoint``. A directory (a
    path or a ``file://`` URL) only: ``ValueError`` for an object store's."""
    local = local_path(path)
    if local is None:
        raise ValueError(
            f"{str(path)[:200]}: read_checkpoint_dir reads a directory; on an object store "
            "use read_checkpoint (previous=k)"
        )
    path = local
    fd = _fs.root_fd(path.parent)
    if fd is None:
        raise CheckpointFileError(path, "missing: the checkpoint directory is gone")
    try:
        return _read_dir(
            path.parent, fd, path.name, None, fingerprint=fingerprint, require=require, codec=codec
        )
    finally:
        _fs.close(fd)


def _read_manifest(
    root: Path, ckpt_fd: int, name: str, entry: _Entry | None, codec: PartCodec | None
) -> tuple[int, str, list[dict[str, Any]], str]:
    """(step, fingerprint, parts, sha256) of a validated manifest."""
    shown = root / name / MANIFEST
    try:
        raw = _fs.read_file(MANIFEST, dir_fd=ckpt_fd, shown=shown, limit=MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise CheckpointFileError(shown, "missing: the checkpoint is incomplete") from None
    return check_manifest(shown, raw, name, entry, codec, _NAME)


def check_manifest(
    shown: Path | str,
    raw: bytes,
    name: str,
    entry: _Entry | None,
    codec: PartCodec | None,
    names: re.Pattern[str],
) -> tuple[int, str, list[dict[str, Any]], str]:
    """(step, fingerprint, parts, sha256) of the manifest ``raw`` of the
    checkpoint ``name`` (a name ``names`` matches, its group 1 the step),
    validated: its seal, the SHA-256 ``entry`` saved for it, the step
    against the name, every part entry."""
    manifest = parse_json(raw, shown, "truncated or corrupted")
    if not isinstance(manifest, dict):
        raise CheckpointFileError(shown, "not a JSON object")
    check_sealed(shown, manifest, FORMAT, VERSION, _MANIFEST_KEYS)
    sha = manifest["sha256"]
    if entry is not None and sha != entry.manifest_sha256:
        raise CheckpointFileError(
            shown, f"is not the manifest {LATEST} published for {name} (SHA-256 differs)"
        )
    step, saved_fp, parts = manifest["step"], manifest["fingerprint"], manifest["parts"]
    m = names.match(name)
    if not is_int(step) or step < 0 or m is None or int(m.group(1)) != step:
        raise CheckpointFileError(shown, f"saved step {step!r} does not match the directory {name}")
    if not isinstance(saved_fp, str):
        raise CheckpointFileError(shown, "'fingerprint' must be a string")
    if not isinstance(parts, list) or len(parts) > MAX_PARTS:
        raise CheckpointFileError(shown, f"'parts' must be a list of at most {MAX_PARTS}")
    allowed = part_pattern(codec)
    seen: set[str] = set()
    for part in parts:
        if not isinstance(part, dict) or set(part) != _PART_KEYS:
            raise CheckpointFileError(shown, f"bad part entry {str(part)[:200]}")
        pname, size, sha256 = part["name"], part["size"], part["sha256"]
        if not isinstance(pname, str):
            raise CheckpointFileError(shown, f"bad part name {str(pname)[:130]!r}")
        if not allowed.match(pname) or pname == MANIFEST:
            raise CheckpointFileError(shown, bad_part_name(pname, codec))
        if not is_int(size) or size < 0:
            raise CheckpointFileError(shown, f"part {pname}: size must be an int >= 0")
        if not isinstance(sha256, str) or not HEX64.match(sha256):
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
    codec: PartCodec | None,
) -> LoadedCheckpoint:
    path = root / name
    if not _NAME.match(name):
        raise CheckpointFileError(path, "not a checkpoint directory name")
    ckpt_fd = _fs.open_dir(name, dir_fd=root_fd, shown=path)
    try:
        step, saved_fp, parts, _ = _read_manifest(root, ckpt_fd, name, entry, codec)
        check_fingerprint(path / MANIFEST, fingerprint, saved_fp)
        stems = {p["name"].rpartition(".")[0] for p in parts}
        missing = [n for n in require if n not in stems]
        if missing:
            raise CheckpointFileError(path / MANIFEST, f"saved no part(s) {missing}")
        json_parts: dict[str, Any] = {}
        tensor_parts: dict[str, Any] = {}
        for part in parts:
            file = path / part["name"]
            data = read_part(
                part["name"], dir_fd=ckpt_fd, shown=file, size=part["size"], sha256=part["sha256"]
            )
            stem, _, ext = part["name"].rpartition(".")
            target = json_parts if ext == JSON_SUFFIX else tensor_parts
            target[stem] = decode_part(data, file, codec)
        return LoadedCheckpoint(
            path=path, step=step, json_parts=json_parts, tensor_parts=tensor_parts
        )
    finally:
        _fs.close(ckpt_fd)


# -- writing --------------------------------------------------------------------------


def part_entry(filename: str, data: bytes) -> dict[str, Any]:
    """A part's entry in its manifest."""
    return {"name": filename, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def manifest_bytes(step: int, fingerprint: str, parts: list[dict[str, Any]]) -> tuple[bytes, str]:
    """A manifest's bytes and its SHA-256 (what ``LATEST`` saves for it)."""
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "step": step,
        "fingerprint": fingerprint,
        "parts": parts,
    }
    manifest["sha256"] = digest(manifest)
    return json.dumps(manifest, sort_keys=True, indent=1).encode(), manifest["sha256"]


@typed_io(at_path)
def write_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    *,
    fingerprint: str,
    json_parts: Mapping[str, Any],
    tensor_parts: Mapping[str, Any] | None = None,
    codec: PartCodec | None = None,
    keep: int = 2,
    between_parts: Callable[[str], None] | None = None,
    parent: LoadedCheckpoint | str | os.PathLike[str] | None = None,
    epoch: int | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically and publish it as the latest.

    ``json_parts`` maps a name to JSON data (``name.json``), ``tensor_parts``
    a name to what ``codec`` encodes (``name.<codec.suffix>``; with the
    torch binding's codec, ``name.pt``: what ``torch.save`` stores and
    ``torch.load(weights_only=True)`` reads back).

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

    ``epoch`` is the epoch this life claimed (``claim_epoch``): the write
    publishes only while ``LATEST`` still names it, by one compare-and-swap
    (in a directory under the ``PosixStore``'s lock), and a writer of an
    older life, fenced by a newer claim, gets ``CheckpointFencedError``
    (a ``CheckpointConflictError``) and publishes nothing. ``None``: a
    writer outside the fencing, which keeps the epoch ``LATEST`` names.

    Refuses (``CheckpointFileError``, nothing written) a root whose
    ``LATEST`` is missing next to checkpoint directories, or garbled, and a
    ``parent`` that is not on the published lineage, and a dead directory
    that cannot be removed; raises ``ValueError`` for a ``parent`` outside
    ``root`` and ``TypeError`` for one that is neither a loaded checkpoint
    nor a path, and for ``tensor_parts`` without a ``codec``."""
    if not is_int(step) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    if not is_int(keep) or not 1 <= keep <= MAX_KEEP:
        raise ValueError(f"keep must be an int in [1, {MAX_KEEP}], got {keep!r}")
    if not isinstance(fingerprint, str):
        raise TypeError(f"fingerprint must be a str, got {type(fingerprint).__name__}")
    if tensor_parts and codec is None:
        raise TypeError("tensor_parts need a codec= to encode them (the torch binding's for .pt)")
    if epoch is not None and (not is_int(epoch) or epoch < 1):
        raise ValueError(f"epoch must be an int >= 1 (claim_epoch's), got {epoch!r:.40}")
    blobs: list[tuple[str, bytes]] = []
    for key, value in json_parts.items():
        blobs.append((f"{key}.{JSON_SUFFIX}", encode_json(value)))
    if codec is not None:
        for key, value in (tensor_parts or {}).items():
            blobs.append((f"{key}.{codec.suffix}", codec.encode(value)))
    names = [n for n, _ in blobs]
    allowed = part_pattern(codec)
    for filename in names:
        if not allowed.match(filename) or filename == MANIFEST:
            raise ValueError(f"bad part name {filename!r}")
    if len(set(names)) != len(names) or len(names) > MAX_PARTS:
        raise ValueError(f"part names must be unique and at most {MAX_PARTS}: {names}")
    local = local_path(root)
    if local is None:
        from ._objects import write_to_store

        return write_to_store(
            str(root),
            step,
            fingerprint,
            blobs,
            keep=keep,
            between_parts=between_parts,
            parent=parent,
            epoch=epoch,
        )
    root = local
    parent_name = None if parent is None else parent_dir(root, parent, "parent")
    _fs.make_root(root)
    root_fd = _fs.root_fd(root)
    assert root_fd is not None
    try:
        if epoch is not None:
            # Refused before anything is written (a cheap early check;
            # the removals below check again under the store's lock).
            shown = str(root / LATEST)
            _, current, _ = read_versioned(PosixStore(root), shown, PUBLISHED)
            if current != epoch:
                raise CheckpointFencedError(shown, epoch, current)
        old = read_lineage(root, root_fd, PUBLISHED)
        continued = ancestry(root, root_fd, PUBLISHED, old or [], step, parent_name)
        if old is None:
            # The first write publishes an empty lineage before anything
            # else, so that a checkpoint directory is never found next to a
            # missing LATEST unless something removed it.
            old = []
            publish_lineage(root, root_fd, PUBLISHED, old, epoch)
        published = {link.entry.name for link in old}
        remove_dead(root, root_fd, PUBLISHED, published, epoch)
        tmp = _fs.make_tmp_dir(root, f"{_fs.TMP_PREFIX}ckpt-")
        tmp_fd = _fs.open_dir(tmp.name, dir_fd=root_fd, shown=tmp)
        try:
            parts: list[dict[str, Any]] = []
            for filename, data in blobs:
                _fs.write_new(filename, data, dir_fd=tmp_fd)
                parts.append(part_entry(filename, data))
                if between_parts is not None:
                    between_parts(filename)
            manifest, manifest_sha = manifest_bytes(step, fingerprint, parts)
            _fs.write_new(MANIFEST, manifest, dir_fd=tmp_fd)
            _fs.fsync_fd(tmp_fd)
        finally:
            _fs.close(tmp_fd)
        # The step's own name, unless a published checkpoint holds it (a
        # step written again): that one is kept until the new lineage is
        # durable. The dead directories are gone already.
        branch = 0
        while checkpoint_name(step, branch) in published:
            branch += 1
        name = checkpoint_name(step, branch)
        _fs.rename_into(root, root_fd, tmp, name)
        if between_parts is not None:
            between_parts(LATEST)
        new = _Entry(name, step, manifest_sha)
        publish_next(root, root_fd, PUBLISHED, new, continued, keep, epoch)
        return root / name
    finally:
        _fs.close(root_fd)
