"""Checkpoint directories: atomic writes, validated reads.

Layout under a root directory::

    root/LATEST                 the name of the newest complete checkpoint
    root/ckpt-000012/manifest.json
    root/ckpt-000012/state.json     JSON parts (the collector state, ...)
    root/ckpt-000012/model.pt       tensor parts (torch.save)

A checkpoint is written into a temporary directory in the same root, every
file and the directory are fsynced, the directory is renamed into place, and
only then is ``LATEST`` replaced (written to a temporary file, fsynced,
``os.replace``d, the root fsynced). A crash at any moment leaves ``LATEST``
naming the previous, complete checkpoint.

Reading validates the manifest's format and schema version, the dataset
fingerprint, and every part's size and SHA-256 before anything is parsed;
tensor parts are read with ``torch.load(weights_only=True)``. Each failure
raises a ``CheckpointError`` subclass naming the offending file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import torch

from .._errors import CheckpointFileError, CheckpointFileVersionError, DatasetChangedError

FORMAT: Final = "frontier_adapters.checkpoint_dir"
VERSION: Final = 1
MANIFEST: Final = "manifest.json"
LATEST: Final = "LATEST"
_NAME: Final = re.compile(r"^ckpt-(\d{6,})$")
_PART: Final = re.compile(r"^[A-Za-z0-9_.-]+\.(json|pt)$")
_MANIFEST_KEYS: Final = frozenset({"format", "version", "step", "fingerprint", "parts"})


def _canonical(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "data": value.tolist()}
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def dataset_fingerprint(dataset: Any, *, sample: int = 32, user_id: str | None = None) -> str:
    """The identity of a map-style dataset: ``user_id`` if given, else its
    length plus the SHA-256 of ``sample`` evenly spaced rows (first and last
    included; tensors hashed by value). Cheap, and catches a changed length,
    order or content of the sampled rows."""
    if user_id is not None:
        return f"id:{user_id}"
    n = len(dataset)
    if n == 0:
        return "len=0"
    k = max(1, min(sample, n))
    indices = sorted({(i * (n - 1)) // max(1, k - 1) for i in range(k)})
    h = hashlib.sha256()
    for i in indices:
        h.update(json.dumps([i, _canonical(dataset[i])], sort_keys=True).encode())
    return f"len={n};sha256={h.hexdigest()[:32]}"


@attrs.frozen
class LoadedCheckpoint:
    """A validated checkpoint: its ``step``, JSON parts and tensor parts."""

    path: Path
    step: int
    json_parts: dict[str, Any]
    tensor_parts: dict[str, Any]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:06d}"


def write_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    *,
    fingerprint: str,
    json_parts: Mapping[str, Any],
    tensor_parts: Mapping[str, Any] | None = None,
    keep: int = 2,
    between_parts: Callable[[str], None] | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically and make it the latest.

    ``json_parts`` maps a name to JSON data (``name.json``), ``tensor_parts``
    a name to what ``torch.save`` stores and ``torch.load(weights_only=True)``
    reads back (``name.pt``: state dicts of tensors and plain values).
    ``keep`` complete checkpoints are kept. ``between_parts(name)`` is called
    after each part is written (a hook for crash tests)."""
    if type(step) is not int or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = checkpoint_name(step)
    if _latest_name(root) == name:
        raise ValueError(f"{root / name} is the latest checkpoint; refusing to overwrite it")
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    parts: list[dict[str, Any]] = []
    blobs: list[tuple[str, bytes]] = []
    for key, value in json_parts.items():
        data = json.dumps(value, sort_keys=True, allow_nan=False).encode()
        blobs.append((f"{key}.json", data))
    for key, value in (tensor_parts or {}).items():
        buf = io.BytesIO()
        torch.save(value, buf)
        blobs.append((f"{key}.pt", buf.getvalue()))
    for filename, data in blobs:
        if not _PART.match(filename) or filename == MANIFEST:
            raise ValueError(f"bad part name {filename!r}")
        _write_file(tmp / filename, data)
        parts.append(
            {"name": filename, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        )
        if between_parts is not None:
            between_parts(filename)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "step": step,
        "fingerprint": fingerprint,
        "parts": parts,
    }
    _write_file(tmp / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode())
    _fsync_dir(tmp)
    final = root / name
    if final.exists():
        # A complete but never-published checkpoint of a dead branch.
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    if between_parts is not None:
        between_parts(LATEST)
    pointer = root / f".{LATEST}.tmp-{os.getpid()}"
    _write_file(pointer, (name + "\n").encode())
    os.replace(pointer, root / LATEST)
    _fsync_dir(root)
    _prune(root, keep)
    return final


def _latest_name(root: Path) -> str | None:
    try:
        return (root / LATEST).read_text().strip() or None
    except FileNotFoundError:
        return None


def _prune(root: Path, keep: int) -> None:
    latest = _latest_name(root)
    steps = sorted(
        (int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and p.is_dir()
    )
    latest_step = next((s for s, p in steps if p.name == latest), None)
    if latest_step is None:
        return
    older = [p for s, p in steps if s <= latest_step]
    for p in older[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
    for p in root.iterdir():
        # Leftovers of crashed writes, and checkpoints of dead branches.
        if p.name.startswith(".tmp-") or (p.name.startswith(f".{LATEST}.tmp-")):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def latest_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """The directory ``LATEST`` names, or ``None`` when there is none yet."""
    name = _latest_name(Path(root))
    if name is None:
        return None
    if not _NAME.match(name):
        raise CheckpointFileError(Path(root) / LATEST, f"names {name!r}, not a checkpoint")
    return Path(root) / name


def read_checkpoint(
    root: str | os.PathLike[str], *, fingerprint: str | None
) -> LoadedCheckpoint | None:
    """Read and validate the latest checkpoint under ``root`` (``None`` if
    there is none). ``fingerprint`` is the current dataset's; ``None`` skips
    that check. Raises ``CheckpointFileError`` (missing, truncated or
    corrupted file), ``CheckpointFileVersionError`` and
    ``DatasetChangedError``, each naming the file."""
    path = latest_checkpoint(root)
    if path is None:
        return None
    return read_checkpoint_dir(path, fingerprint=fingerprint)


def read_checkpoint_dir(path: Path, *, fingerprint: str | None) -> LoadedCheckpoint:
    """Read and validate one checkpoint directory; see ``read_checkpoint``."""
    manifest_path = path / MANIFEST
    try:
        raw = manifest_path.read_bytes()
    except FileNotFoundError:
        raise CheckpointFileError(manifest_path, "missing: the checkpoint is incomplete") from None
    try:
        manifest = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointFileError(manifest_path, f"truncated or corrupted: {exc}") from None
    if not isinstance(manifest, dict):
        raise CheckpointFileError(manifest_path, "not a JSON object")
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointFileVersionError(
            manifest_path,
            f"format {manifest.get('format')!r} version {manifest.get('version')!r}; "
            f"this library reads {FORMAT!r} version {VERSION}",
        )
    if set(manifest) != _MANIFEST_KEYS:
        raise CheckpointFileError(
            manifest_path, f"has keys {sorted(manifest)}, expected {sorted(_MANIFEST_KEYS)}"
        )
    step, saved_fp, parts = manifest["step"], manifest["fingerprint"], manifest["parts"]
    if type(step) is not int or step < 0 or not isinstance(saved_fp, str):
        raise CheckpointFileError(manifest_path, "bad 'step' or 'fingerprint'")
    if fingerprint is not None and saved_fp != fingerprint:
        raise DatasetChangedError(manifest_path, expected=fingerprint, found=saved_fp)
    if not isinstance(parts, list):
        raise CheckpointFileError(manifest_path, "'parts' must be a list")
    json_parts: dict[str, Any] = {}
    tensor_parts: dict[str, Any] = {}
    for part in parts:
        if (
            not isinstance(part, dict)
            or set(part) != {"name", "size", "sha256"}
            or not isinstance(part["name"], str)
            or not _PART.match(part["name"])
        ):
            raise CheckpointFileError(manifest_path, f"bad part entry {part!r}")
        file = path / part["name"]
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            raise CheckpointFileError(file, "missing part of the checkpoint") from None
        if len(data) != part["size"]:
            raise CheckpointFileError(
                file, f"truncated: {len(data)} bytes, the manifest says {part['size']}"
            )
        if hashlib.sha256(data).hexdigest() != part["sha256"]:
            raise CheckpointFileError(file, "corrupted: SHA-256 differs from the manifest")
        stem, _, ext = part["name"].rpartition(".")
        if ext == "json":
            try:
                json_parts[stem] = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CheckpointFileError(file, f"not JSON: {exc}") from None
        else:
            try:
                tensor_parts[stem] = torch.load(
                    io.BytesIO(data), weights_only=True, map_location="cpu"
                )
            except Exception as exc:
                raise CheckpointFileError(file, f"cannot be loaded: {exc}") from None
    return LoadedCheckpoint(path=path, step=step, json_parts=json_parts, tensor_parts=tensor_parts)


def require_parts(loaded: LoadedCheckpoint, names: Sequence[str]) -> None:
    """Raise ``CheckpointFileError`` naming the manifest if a part is absent."""
    have = set(loaded.json_parts) | set(loaded.tensor_parts)
    missing = [n for n in names if n not in have]
    if missing:
        raise CheckpointFileError(loaded.path / MANIFEST, f"lists no part(s) {missing}")
