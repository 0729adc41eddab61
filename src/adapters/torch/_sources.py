"""Prompt sources for the collector: a seekable loader and a snapshot binding.

``SeekableSource`` drives a loader built on ``SeekableSampler``: its position
at the cut is the cut itself plus the stream's identity (seed, dataset
length, shuffle flag), and a resume seeks the sampler straight to the cut,
so the loader may be rebuilt with another batch size or worker count.

``SnapshotSource`` binds any ``StatefulDataLoader`` (iterable datasets
included) whose stream cannot be seeked. It takes ``loader.state_dict()``
before each pull, keyed by the pull's first ordinal, and drops the snapshots
that the cut has passed (all but the newest at or below it). The ring is
therefore bounded by the in-flight window and never misses; should it hold no
snapshot at or below the cut anyway, saving raises ``SnapshotMissingError``
rather than saving a lossy position. Snapshots are encoded for JSON with
``torch.save`` into base64 and decoded with ``torch.load(weights_only=True)``:
nothing is unpickled.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
from collections.abc import Callable, Mapping
from typing import Any, Final

import torch

from frontier_core import CheckpointCorruptError, CheckpointMismatchError

from .._collector import Pull
from .._errors import SnapshotMissingError, StreamMisalignedError
from ._sampler import OrdinalBatch, SeekableSampler, read_position

KEY_KIND: Final = "kind"
KEY_SAMPLER: Final = "sampler"
KEY_BASE: Final = "base"
KEY_SNAPSHOT: Final = "snapshot"
KEY_SHA256: Final = "sha256"
KIND_SEEKABLE: Final = "seekable"
KIND_SNAPSHOT: Final = "snapshot"


def _check_keys(state: object, kind: str, keys: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(state, Mapping):
        raise CheckpointCorruptError(f"stream state must be a dict, got {type(state).__name__}")
    if state.get(KEY_KIND) != kind:
        raise CheckpointCorruptError(
            f"stream state is of kind {state.get(KEY_KIND)!r}, this source reads {kind!r}"
        )
    if set(state) != keys | {KEY_KIND}:
        raise CheckpointCorruptError(
            f"{kind} stream state has keys {sorted(state)}, expected {sorted(keys | {KEY_KIND})}"
        )
    return state


class SeekableSource:
    """The collector's source for a loader whose sampler is a
    ``SeekableSampler`` and whose collate function is ``collate_ordinals``
    (``torch.utils.data.DataLoader`` or ``StatefulDataLoader``)."""

    def __init__(self, loader: Any, sampler: SeekableSampler | None = None) -> None:
        found = sampler if sampler is not None else getattr(loader, "sampler", None)
        if not isinstance(found, SeekableSampler):
            raise TypeError(
                "SeekableSource needs a loader built on a SeekableSampler "
                "(see make_seekable_loader)"
            )
        self.loader = loader
        self.sampler = found
        self._it: Any = None

    @property
    def stream_len(self) -> int | None:
        return self.sampler.stream_len

    def pull(self) -> Pull | None:
        if self._it is None:
            self._it = iter(self.loader)
        try:
            batch = next(self._it)
        except StopIteration:
            self._it = None
            return None
        if not isinstance(batch, OrdinalBatch):
            raise StreamMisalignedError(
                f"the loader yielded a {type(batch).__name__}, not an OrdinalBatch: "
                "build it with collate_fn=collate_ordinals"
            )
        if not batch.ordinals:
            return Pull(self.sampler.position, [], ())
        return Pull(batch.ordinals[0], batch.rows, batch.ordinals)

    def position(self, cut: int) -> dict[str, Any]:
        state = self.sampler.state_dict()
        state["next_ordinal"] = cut
        return {KEY_KIND: KIND_SEEKABLE, KEY_SAMPLER: state}

    def base(self, state: Mapping[str, Any], cut: int) -> int:
        checked = _check_keys(state, KIND_SEEKABLE, frozenset({KEY_SAMPLER}))
        position = read_position(checked[KEY_SAMPLER], self.sampler)
        if position != cut:
            raise CheckpointCorruptError(
                f"the saved stream position {position} differs from the ledger's cut {cut}"
            )
        return cut

    def restore(self, state: Mapping[str, Any], cut: int) -> None:
        self._it = None  # drop the old iterator (and its prefetched batches)
        self.sampler.seek(self.base(state, cut))

    def prune(self, cut: int) -> None:
        pass


def encode_snapshot(snapshot: Mapping[str, Any]) -> dict[str, str]:
    """A loader snapshot as JSON: ``torch.save`` bytes in base64 and their
    SHA-256 (tensors, bytes and tuples survive; nothing is pickled by
    ``torch.load(weights_only=True)`` on the way back)."""
    buf = io.BytesIO()
    torch.save(dict(snapshot), buf)
    raw = buf.getvalue()
    return {
        KEY_SNAPSHOT: base64.b64encode(raw).decode("ascii"),
        KEY_SHA256: hashlib.sha256(raw).hexdigest(),
    }


def decode_snapshot(encoded: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of ``encode_snapshot``; raises ``CheckpointCorruptError``."""
    try:
        raw = base64.b64decode(encoded[KEY_SNAPSHOT], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointCorruptError(f"loader snapshot is not base64 data: {exc}") from None
    if hashlib.sha256(raw).hexdigest() != encoded.get(KEY_SHA256):
        raise CheckpointCorruptError("loader snapshot fails its SHA-256 checksum")
    try:
        value = torch.load(io.BytesIO(raw), weights_only=True)
    except Exception as exc:
        raise CheckpointCorruptError(f"loader snapshot cannot be loaded: {exc}") from None
    if not isinstance(value, dict):
        raise CheckpointCorruptError("loader snapshot is not a dict")
    return value


def _default_rows(batch: Any) -> list[Any]:
    if isinstance(batch, OrdinalBatch):
        return batch.rows
    return list(batch)


class SnapshotSource:
    """The collector's source for any ``StatefulDataLoader``.

    ``rows_of(batch)`` splits a batch into its rows (default: the rows of an
    ``OrdinalBatch``, else ``list(batch)``); ordinals are counted. The loader
    must yield the same stream again from a restored snapshot (same dataset,
    seed and ``num_workers``)."""

    def __init__(
        self,
        loader: Any,
        *,
        stream_len: int | None = None,
        rows_of: Callable[[Any], list[Any]] = _default_rows,
    ) -> None:
        if not (hasattr(loader, "state_dict") and hasattr(loader, "load_state_dict")):
            raise TypeError("SnapshotSource needs a StatefulDataLoader")
        self.loader = loader
        self._stream_len = stream_len
        self._rows_of = rows_of
        self._it: Any = None
        self._count = 0
        #: first ordinal of a pull -> the loader's state just before it,
        #: ascending by key.
        self._ring: dict[int, dict[str, Any]] = {}

    @property
    def stream_len(self) -> int | None:
        return self._stream_len

    @property
    def ring_size(self) -> int:
        return len(self._ring)

    def pull(self) -> Pull | None:
        if self._it is None:
            self._it = iter(self.loader)
        if self._count not in self._ring:
            self._ring[self._count] = copy.deepcopy(self.loader.state_dict())
        try:
            batch = next(self._it)
        except StopIteration:
            self._it = None
            return None
        rows = self._rows_of(batch)
        carried = batch.ordinals if isinstance(batch, OrdinalBatch) else None
        pull = Pull(self._count, rows, carried)
        self._count += len(rows)
        return pull

    def _floor(self, cut: int) -> int:
        if not self._ring and self._count == 0:
            # Nothing pulled yet (a checkpoint at step 0): the loader's
            # state now is the start of the stream.
            self._ring[0] = copy.deepcopy(self.loader.state_dict())
        below = [k for k in self._ring if k <= cut]
        if not below:
            raise SnapshotMissingError(
                f"no loader snapshot at or below the cut {cut} (held: {sorted(self._ring)[:8]}); "
                "refusing to save a position that would skip prompts"
            )
        return max(below)

    def position(self, cut: int) -> dict[str, Any]:
        base = self._floor(cut)
        encoded = encode_snapshot(self._ring[base])
        return {KEY_KIND: KIND_SNAPSHOT, KEY_BASE: base, KEY_SNAPSHOT: encoded}

    def _read(self, state: Mapping[str, Any], cut: int) -> tuple[int, dict[str, Any]]:
        checked = _check_keys(state, KIND_SNAPSHOT, frozenset({KEY_BASE, KEY_SNAPSHOT}))
        base = checked[KEY_BASE]
        if type(base) is not int or not 0 <= base <= cut:
            raise CheckpointCorruptError(f"snapshot base {base!r} is not an ordinal <= cut {cut}")
        if not isinstance(checked[KEY_SNAPSHOT], Mapping):
            raise CheckpointCorruptError("snapshot must be an encoded dict")
        return base, decode_snapshot(checked[KEY_SNAPSHOT])

    def _check_workers(self, snapshot: Mapping[str, Any]) -> None:
        """A multi-process loader's snapshot holds one entry per worker, and
        torchdata restores it only into a loader with as many workers
        (otherwise its first batch fails with a bare ``AssertionError``):
        refuse the mismatch at resume, before anything changes."""
        inner = snapshot.get("_snapshot")
        saved = len(inner.get("_worker_snapshots", ())) if isinstance(inner, Mapping) else 0
        have = getattr(self.loader, "num_workers", None)
        if type(have) is int and saved != have:
            raise CheckpointMismatchError(
                f"the loader snapshot was saved with num_workers={saved}, but this loader has "
                f"num_workers={have}; a snapshot restores only into a loader with the same "
                "number of workers (a SeekableSource resumes with any)"
            )

    def base(self, state: Mapping[str, Any], cut: int) -> int:
        base, snapshot = self._read(state, cut)
        self._check_workers(snapshot)
        return base

    def restore(self, state: Mapping[str, Any], cut: int) -> None:
        base, snapshot = self._read(state, cut)
        self._check_workers(snapshot)
        self.loader.load_state_dict(copy.deepcopy(snapshot))
        self._it = None
        self._count = base
        self._ring = {base: snapshot}

    def prune(self, cut: int) -> None:
        if len(self._ring) < 2:
            return
        below = [k for k in self._ring if k <= cut]
        if len(below) > 1:
            keep = max(below)
            for k in below:
                if k != keep:
                    del self._ring[k]
