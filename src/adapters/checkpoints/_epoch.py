"""A run's epoch: which life of a run may move its pointer (``LATEST``).

A life claims the next epoch when it opens, before it reads the state it
will continue from (``claim_epoch``): ``LATEST`` is rewritten, by one
compare-and-swap against the version read, with the same lineage and
the epoch one above the one it named. Every later publish of that life
(``write_checkpoint(epoch=...)``) is a compare-and-swap that succeeds
only while ``LATEST`` still names its epoch, so once a newer life has
claimed, nothing an older one does moves the pointer: its publish raises
``CheckpointFencedError`` naming both epochs, whether it began before
the claim (its swap loses: the claim changed ``LATEST``'s bytes, hence
its version on either store) or after it (it reads the newer epoch
first). The same number names what the life ships of its journal
(``frontier_adapters.journal.Shipper(epoch=...)``), so a restore never
chains an older life's segments past a newer life's base, and the
shipper of an older life stops with ``JournalFencedError`` when it finds
a newer epoch (``epoch_reader``).

What it assumes of the store: a compare-and-swap on ``LATEST`` is atomic
(``frontier_adapters.store``); in a directory that holds between the
processes of one host through the ``PosixStore``'s ``flock`` (and across
hosts only where the filesystem honours it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from .._errors import MAX_EPOCH, CheckpointConflictError, CheckpointFileError
from ..store import PosixStore, Store, StoreConflictError, local_path, open_store
from ..store._errors import at_path, typed_io
from ._dirs import LATEST, PUBLISHED
from ._lineage import LineageFile, lineage_bytes, read_versioned, refuse_unlisted
from ._objects import MAX_OBJECTS, PUBLISHED_OBJECTS, dirs_of

#: How many times a claim is tried when a writer of the older life moves
#: ``LATEST`` between the claim's read and its swap (that writer is fenced
#: from the next try on, so a second loss means another life claims too).
CLAIM_TRIES: Final = 4


def _root(root: str | os.PathLike[str]) -> tuple[Store, LineageFile[object], str]:
    local = local_path(root)
    if local is not None:
        store: Store = PosixStore(local)
        return store, PUBLISHED, str(local / LATEST)  # type: ignore[return-value]
    store = open_store(str(root))
    return store, PUBLISHED_OBJECTS, f"{store.where}/{LATEST}"  # type: ignore[return-value]


@typed_io(at_path)
def claim_epoch(root: str | os.PathLike[str]) -> int:
    """Claim the next epoch of the checkpoint root ``root`` (a directory or
    a URL) for this life and return it: ``LATEST`` is rewritten with the
    lineage it lists (an empty one in a fresh root) and that epoch, by one
    compare-and-swap. Every writer of an older epoch is fenced from then
    on (see the module doc). Raises ``CheckpointConflictError`` when
    ``LATEST`` moved under each of ``CLAIM_TRIES`` claims (other lives
    claiming at once), and the lineage reader's ``CheckpointFileError``s
    (a missing ``LATEST`` beside checkpoints, a garbled one), also for a
    ``LATEST`` that names the last epoch (2**63 - 1), after which none can be
    claimed: nothing is written then."""
    store, kind, shown = _root(root)
    where = local_path(root)
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
    for _ in range(CLAIM_TRIES):
        lineage, current, version = read_versioned(store, shown, kind)
        if lineage is None:
            names = (
                os.listdir(where) if where is not None else dirs_of(store.list(limit=MAX_OBJECTS))
            )
            refuse_unlisted(shown, kind, None, names)
        if current >= MAX_EPOCH:
            raise CheckpointFileError(
                shown,
                f"names epoch {current}, the last a life can claim: no life can claim after "
                "it (a forged or damaged LATEST); refusing to rewrite it",
            )
        data = lineage_bytes(kind, lineage or [], epoch=current + 1)
        try:
            if version is None:
                store.create(LATEST, data)
            else:
                store.swap(LATEST, data, expected=version)
        except StoreConflictError:
            continue
        return current + 1
    raise CheckpointConflictError(
        shown,
        f"moved by another writer under each of {CLAIM_TRIES} claims of the next epoch: "
        "another life of the run is opening at the same time",
    )


@typed_io(at_path)
def epoch_reader(root: str | os.PathLike[str]) -> Callable[[], int]:
    """A function that reads the epoch ``LATEST`` of the checkpoint root
    ``root`` names now (0 when it is absent or older than epochs), through
    one store opened here: what a journal's shipper checks before each
    upload (``Shipper(fence=...)``). It raises the store's errors and
    ``CheckpointFileError`` for a garbled ``LATEST``."""
    store, kind, shown = _root(root)

    def read() -> int:
        return read_versioned(store, shown, kind)[1]

    return read
