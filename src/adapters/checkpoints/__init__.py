"""Checkpoint directories: atomic writes, a published lineage that follows
ancestry, reads that never trust what they read. Framework-free: the
standard library, attrs and the core; a binding passes a ``PartCodec`` for
the parts that are not JSON (the torch binding's ``frontier_adapters.torch``
functions pass theirs, for ``.pt`` tensor parts), and a root that holds only
JSON parts is written and read without any framework imported.

Layout under a root directory::

    root/LATEST                     the published lineage (JSON), newest first
    root/ckpt-000012/manifest.json  the parts, their sizes and SHA-256s
    root/ckpt-000012/state.json     JSON parts (the collector state, ...)
    root/ckpt-000012/model.pt       parts of a codec (the torch binding's: torch.save)

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
ancestry of what it resumes. The same lineage code reads, continues,
publishes and prunes the torch binding's multi-rank ``COMMIT``
(``frontier_adapters.torch.DistributedCheckpointer``); only its names,
bounds and entries are its own.

Writing: dead directories (renamed but never published: a kill between
the rename and ``LATEST``) are removed first, so that a root holds at most
one checkpoint directory outside its published lineage while that lineage
is empty. The parts go into a fresh temporary directory in the root
(created with a random name, files opened with ``O_EXCL | O_NOFOLLOW``, so
nothing planted at a predictable name can redirect a write); every file and
the directory are fsynced, the directory is renamed to a name no other
directory has (``ckpt-000012``, or ``ckpt-000012-1`` when a published
checkpoint already holds that step), and only then is ``LATEST`` replaced
by the ``PosixStore``'s compare-and-swap (under its ``flock`` on
``root/.store-lock``: a temporary file, fsync, rename, fsync of the root). Every other
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
JSON parts are parsed; a codec's parts are decoded by it (the torch
binding's with ``torch.load(weights_only=True)``); a part no codec given
reads is refused. Each failure raises a ``CheckpointError`` subclass
naming the offending file; ``read_checkpoint`` returns ``None`` only for a
root that holds no checkpoint at all. ``LATEST`` files of version 1 (step
order, no parents) are still read, as the chain they list; the next write
replaces them with version 2.

What it assumes of the filesystem: a rename of a directory and an
``os.replace`` of a file within the root are atomic (a reader sees the old
name or the new one, never a mix); an fsync of a file makes its bytes
durable and an fsync of a directory makes the names created, renamed or
replaced in it durable (so a crash after ``LATEST``'s fsync keeps the new
lineage, and one before keeps the old); a listing of the root shows every
name renamed into it; ``O_NOFOLLOW``, ``O_EXCL`` and descriptor-relative
opens behave as POSIX says. Local filesystems (ext4, xfs, APFS) keep these;
some network filesystems do not. Every such call lives in ``_fs``, so that
another storage (an object store) can stand behind the same protocol.

One writer per root: two processes writing the same root concurrently are
not supported (the second would prune the first's directory), except that
a writer of an older life, once a newer life claimed the root (below),
removes nothing: in a directory every removal of a writer (dead
directories before it writes, pruned ones after it publishes) runs under
the ``PosixStore``'s lock after ``LATEST`` is read again there, not at
all once it names a newer epoch, and never of a directory it lists.

On an object store: a root may also be a URL (``s3://bucket/prefix``,
``gs://...``, ``az://...``; ``file://`` and plain paths are directories),
opened with ``frontier_adapters.store.open_store``. There nothing is
renamed: a checkpoint is immutable objects under ``ckpt-000012-<random>/``
(the parts, then the manifest, each created if absent), and ``LATEST``
(the same file, through the same lineage code) is moved only by a
compare-and-swap against the version read at the start of the write. Two
writers publishing at once cannot both win: the loser gets
``CheckpointConflictError`` and its objects are garbage that the next
successful write removes; a write overtaken by a newer resume's write is
refused the same way. Reads validate exactly as on a directory. The paths
returned (``write_checkpoint``, ``LoadedCheckpoint.path``,
``published_checkpoints``) are then names relative to the root (what
``parent=`` takes); ``read_checkpoint_dir`` takes directories only.
Details: ``_objects``'s docstring.

A node that comes back: each life of a run claims the next *epoch* of the
root when it opens (``claim_epoch``: ``LATEST`` rewritten with the same
lineage and that epoch, by one compare-and-swap, on either store), and
writes with ``write_checkpoint(..., epoch=...)``, which publishes only
while ``LATEST`` still names that epoch. A life from before a resume
elsewhere (a preempted or partitioned node whose process kept running) is
refused with ``CheckpointFencedError`` (a ``CheckpointConflictError``)
naming both epochs, and publishes nothing. ``LATEST`` of version 3 names
the epoch; versions 1 and 2 are read as epoch 0. Details: ``_epoch``'s
docstring.
"""

from __future__ import annotations

from .._errors import CheckpointFencedError as CheckpointFencedError
from .._errors import CheckpointFileError as CheckpointFileError
from .._errors import CheckpointFileVersionError as CheckpointFileVersionError
from .._errors import DatasetChangedError as DatasetChangedError
from ._dirs import LoadedCheckpoint as LoadedCheckpoint
from ._dirs import checkpoint_name as checkpoint_name
from ._dirs import latest_checkpoint as latest_checkpoint
from ._dirs import published_checkpoints as published_checkpoints
from ._dirs import read_checkpoint as read_checkpoint
from ._dirs import read_checkpoint_dir as read_checkpoint_dir
from ._dirs import write_checkpoint as write_checkpoint
from ._epoch import claim_epoch as claim_epoch
from ._epoch import epoch_reader as epoch_reader
from ._objects import CheckpointConflictError as CheckpointConflictError
from ._parts import PartCodec as PartCodec

__all__ = [
    "CheckpointConflictError",
    "CheckpointFencedError",
    "CheckpointFileError",
    "CheckpointFileVersionError",
    "DatasetChangedError",
    "LoadedCheckpoint",
    "PartCodec",
    "checkpoint_name",
    "claim_epoch",
    "epoch_reader",
    "latest_checkpoint",
    "published_checkpoints",
    "read_checkpoint",
    "read_checkpoint_dir",
    "write_checkpoint",
]
