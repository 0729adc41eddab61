"""Checkpoints on an object store (``s3://...``, ``gs://...``, ``az://...``
roots): the same files, lineage and validation as a directory, committed
with conditional writes instead of renames.

Layout under the root (a bucket and prefix)::

    LATEST                                   the published lineage (the same JSON)
    ckpt-000012-<12 hex>/state.json          parts, each created once
    ckpt-000012-<12 hex>/manifest.json       created after every part

A write reads ``LATEST`` and its version first, creates every part and
then the manifest under a fresh random name (``create``: if-absent, so
nothing is ever overwritten), and publishes by ``swap``ping ``LATEST``
against the version it read. So of two writers publishing at once one
wins and the other gets ``CheckpointConflictError`` (its objects are
garbage), and a write that a newer resume's write overtook is refused the
same way. Only after its swap does a writer delete garbage: the
checkpoint directories it listed *before* its swap that the new lineage
does not keep (a writer's objects created after that listing are never
touched, and one whose objects were listed read ``LATEST`` before the
swap, so its own swap must fail). A first write creates an empty
``LATEST`` before any part, so objects beside a missing ``LATEST`` are
damage, refused as on a directory; unlisted directories beside a
``LATEST`` are garbage of losers or killed writes (no bound, unlike a
directory's). Reads validate exactly as on a directory: ``LATEST``'s
seal and chain of parents, the manifest's seal and SHA-256 as ``LATEST``
saved it, the step against the name, each part's size and SHA-256."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Final

import attrs

from .._errors import CheckpointConflictError as CheckpointConflictError
from .._errors import CheckpointFencedError, CheckpointFileError
from ..store import Store, StoreConflictError, StoreError, StoreLimitError, open_store
from ._dirs import (
    LATEST,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    PUBLISHED,
    LoadedCheckpoint,
    _Entry,
    check_manifest,
    manifest_bytes,
    parse_entry_named,
    part_entry,
)
from ._lineage import (
    Link,
    ancestry,
    lineage_bytes,
    next_lineage,
    note_resumed,
    parent_dir,
    publish_fenced,
    read_versioned,
    refuse_fenced,
    refuse_unlisted,
)
from ._parts import JSON_SUFFIX, PartCodec, decode_part, fetch_part
from ._sealed import check_fingerprint, is_int

#: A checkpoint directory on an object store: its step, then a random tag.
_OBJECT_NAME: Final = re.compile(r"^ckpt-(\d{6,})-([0-9a-f]{12})$")
#: The most objects a root's listing may hold.
MAX_OBJECTS: Final = 1 << 18


def _parse(shown: Path, raw: object) -> _Entry:
    return parse_entry_named(_OBJECT_NAME, shown, raw)


#: ``LATEST`` on an object store: the same file, with random-tagged names;
#: unlisted directories beside an empty lineage are losers' garbage (no
#: bound), and nothing is left under a temporary name.
PUBLISHED_OBJECTS: Final = attrs.evolve(
    PUBLISHED, dirs=_OBJECT_NAME, unlisted_when_empty=None, leftovers=(), parse_entry=_parse
)


def dirs_of(keys: list[str]) -> list[str]:
    """The top-level names of a root's keys that hold objects (its directories)."""
    return sorted({k.split("/", 1)[0] for k in keys if "/" in k})


def _read_lineage(store: Store, shown: str) -> tuple[list[Link[_Entry]] | None, int, str | None]:
    """(the published lineage or ``None`` if nothing was ever published,
    the epoch ``LATEST`` names, its version)."""
    lineage, epoch, version = read_versioned(store, shown, PUBLISHED_OBJECTS)
    if lineage is None:
        refuse_unlisted(shown, PUBLISHED_OBJECTS, None, dirs_of(store.list(limit=MAX_OBJECTS)))
    return lineage, epoch, version


def published_in_store(root: str) -> list[Path]:
    """The published lineage's names (relative paths), newest first."""
    store = open_store(root)
    lineage, _, _ = _read_lineage(store, f"{store.where}/{LATEST}")
    return [Path(link.entry.name) for link in lineage or []]


def write_to_store(
    root: str,
    step: int,
    fingerprint: str,
    blobs: list[tuple[str, bytes]],
    *,
    keep: int,
    between_parts: Callable[[str], None] | None,
    parent: object,
    epoch: int | None,
) -> Path:
    """``write_checkpoint`` on an object store; the new checkpoint's name
    relative to ``root`` (a relative ``Path``)."""
    parent_name = None if parent is None else parent_dir(None, parent, "parent")
    store = open_store(root)
    shown = f"{store.where}/{LATEST}"
    old, current, version = _read_lineage(store, shown)
    refuse_fenced(shown, epoch, current)
    continued = ancestry(store.where, store.where, PUBLISHED_OBJECTS, old or [], step, parent_name)
    try:
        if old is None:
            old = []
            version = store.swap(
                LATEST, lineage_bytes(PUBLISHED_OBJECTS, [], epoch=current), expected=None
            )
        name = f"ckpt-{step:06d}-{secrets.token_hex(6)}"
        parts: list[dict[str, Any]] = []
        for filename, data in blobs:
            store.create(f"{name}/{filename}", data)
            parts.append(part_entry(filename, data))
            if between_parts is not None:
                between_parts(filename)
        manifest, manifest_sha = manifest_bytes(step, fingerprint, parts)
        store.create(f"{name}/{MANIFEST}", manifest)
        if between_parts is not None:
            between_parts(LATEST)
        before = store.list(limit=MAX_OBJECTS)
        new = _Entry(name, step, manifest_sha)
        lineage = next_lineage(PUBLISHED_OBJECTS, new, continued, keep)
    except StoreConflictError as exc:
        raise CheckpointConflictError(
            shown,
            f"another writer published while checkpoint {step} was written ({exc}): not published",
        ) from None
    try:
        publish_fenced(
            store, shown, PUBLISHED_OBJECTS, lineage, epoch, expected=version, current=current
        )
    except CheckpointFencedError:
        raise
    except CheckpointConflictError as exc:
        raise CheckpointConflictError(
            shown,
            f"another writer published while checkpoint {step} was written "
            f"({exc.args[0].removeprefix(shown + ': ')}): not published",
        ) from None
    note_resumed(PUBLISHED_OBJECTS, store.where, new)
    kept = {link.entry.name for link in lineage}
    for key in before:
        if key.split("/", 1)[0] not in kept and _OBJECT_NAME.match(key.split("/", 1)[0]):
            try:
                store.delete(key)
            except StoreError:
                pass  # garbage is removed best effort; the lineage is published
    return Path(name)


def read_from_store(
    root: str,
    *,
    fingerprint: str | None,
    require: Collection[str],
    previous: int,
    codec: PartCodec | None,
) -> LoadedCheckpoint | None:
    """``read_checkpoint`` on an object store."""
    if not is_int(previous) or previous < 0:
        raise ValueError(f"previous must be an int >= 0, got {previous!r}")
    store = open_store(root)
    shown = f"{store.where}/{LATEST}"
    lineage, _, _ = _read_lineage(store, shown)
    if not lineage:
        return None
    if previous >= len(lineage):
        raise CheckpointFileError(
            shown,
            f"the published lineage holds {len(lineage)} checkpoint(s); "
            f"there is no checkpoint {previous} back",
        )
    entry = lineage[previous].entry
    loaded = _read_one(store, entry, fingerprint=fingerprint, require=require, codec=codec)
    note_resumed(PUBLISHED_OBJECTS, store.where, entry)
    return loaded


def _read_one(
    store: Store,
    entry: _Entry,
    *,
    fingerprint: str | None,
    require: Collection[str],
    codec: PartCodec | None,
) -> LoadedCheckpoint:
    name = entry.name
    where = f"{store.where}/{name}"
    shown = f"{where}/{MANIFEST}"
    try:
        raw = store.get(f"{name}/{MANIFEST}", max_bytes=MAX_MANIFEST_BYTES)
    except StoreLimitError:
        raise CheckpointFileError(
            shown, f"more than the {MAX_MANIFEST_BYTES} bytes allowed"
        ) from None
    if raw is None:
        raise CheckpointFileError(shown, "missing: the checkpoint is incomplete")
    step, saved_fp, parts, _ = check_manifest(shown, raw, name, entry, codec, _OBJECT_NAME)
    check_fingerprint(shown, fingerprint, saved_fp)
    stems = {p["name"].rpartition(".")[0] for p in parts}
    missing = [n for n in require if n not in stems]
    if missing:
        raise CheckpointFileError(shown, f"saved no part(s) {missing}")
    json_parts: dict[str, Any] = {}
    tensor_parts: dict[str, Any] = {}
    for part in parts:
        file = f"{where}/{part['name']}"
        data = fetch_part(
            store, f"{name}/{part['name']}", file, size=part["size"], sha256=part["sha256"]
        )
        stem, _, ext = part["name"].rpartition(".")
        target = json_parts if ext == JSON_SUFFIX else tensor_parts
        target[stem] = decode_part(data, file, codec)
    return LoadedCheckpoint(
        path=Path(name), step=step, json_parts=json_parts, tensor_parts=tensor_parts
    )
