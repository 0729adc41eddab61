"""The torch binding's checkpoint directories: the framework-free protocol
of ``frontier_adapters.checkpoints`` (layout, lineage, validation: see its
docstring) with the torch codec for tensor parts (``name.pt``, written with
``torch.save`` and read with ``torch.load(weights_only=True)``), and the
dataset's fingerprint, which hashes tensors and arrays by content.

``write_checkpoint``, ``read_checkpoint`` and ``read_checkpoint_dir`` are
the protocol's functions with this codec; the rest is re-exported as is.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import torch

from ..checkpoints import LoadedCheckpoint as LoadedCheckpoint
from ..checkpoints import PartCodec
from ..checkpoints import checkpoint_name as checkpoint_name
from ..checkpoints import latest_checkpoint as latest_checkpoint
from ..checkpoints import published_checkpoints as published_checkpoints
from ..checkpoints import read_checkpoint as _read_checkpoint
from ..checkpoints import read_checkpoint_dir as _read_checkpoint_dir
from ..checkpoints import write_checkpoint as _write_checkpoint

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


# -- tensor parts ---------------------------------------------------------------------


def _torch_save(value: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def _torch_load(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


#: Tensor parts: ``name.pt``, what ``torch.save`` stores and
#: ``torch.load(weights_only=True)`` reads back (state dicts of tensors and
#: plain values; never a pickled object).
TENSOR_PARTS: Final = PartCodec(suffix="pt", encode=_torch_save, decode=_torch_load)


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
    """Write checkpoint ``step`` atomically and publish it as the latest:
    ``frontier_adapters.checkpoints.write_checkpoint`` with ``tensor_parts``
    stored as ``name.pt`` (``torch.save``; what ``torch.load(weights_only=True)``
    reads back: state dicts of tensors and plain values). See that function
    for ``parent``, ``keep``, ``between_parts`` and what it refuses."""
    return _write_checkpoint(
        root,
        step,
        fingerprint=fingerprint,
        json_parts=json_parts,
        tensor_parts=tensor_parts,
        codec=TENSOR_PARTS,
        keep=keep,
        between_parts=between_parts,
        parent=parent,
    )


def read_checkpoint(
    root: str | os.PathLike[str],
    *,
    fingerprint: str | None,
    require: Collection[str] = (),
    previous: int = 0,
) -> LoadedCheckpoint | None:
    """Read and validate the latest published checkpoint under ``root`` (or
    its ``previous``-th ancestor), tensor parts loaded with
    ``torch.load(weights_only=True)``: ``frontier_adapters.checkpoints.read_checkpoint``
    with the torch codec. ``None`` only when the root holds no checkpoint at
    all; raises ``CheckpointFileError``, ``CheckpointFileVersionError`` and
    ``DatasetChangedError``, each naming the file."""
    return _read_checkpoint(
        root, fingerprint=fingerprint, require=require, previous=previous, codec=TENSOR_PARTS
    )


def read_checkpoint_dir(
    path: str | os.PathLike[str], *, fingerprint: str | None, require: Collection[str] = ()
) -> LoadedCheckpoint:
    """Read and validate one checkpoint directory on its own (its manifest's
    checksum and parts; not whether it was published; what a write
    continues is not changed); see ``read_checkpoint``."""
    return _read_checkpoint_dir(path, fingerprint=fingerprint, require=require, codec=TENSOR_PARTS)
