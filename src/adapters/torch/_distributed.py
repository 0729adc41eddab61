"""Data-parallel ranks that read their own share of the stream, and their
all-or-nothing multi-rank checkpoints.

``RankCollector`` is one rank's ``StreamCollector`` on its ``Share`` of the
global stream (``frontier_core.Share``: rank ``r`` of ``W`` from ``base``
reads global ordinals ``base + r, base + r + W, ...`` in that order). Its
ledger counts the share's local ordinals, as every ledger needs; the
collector speaks global ordinals both ways, so the trainer, its buffer and
its training log never see a local one. Its record is a
``ShardCheckpoint`` (share, step, local ledger record): the core merges the
records of one checkpoint and splits them for any world size
(``frontier_core.reshard``), so a job resumes on any number of ranks.

``DistributedCheckpointer`` writes one checkpoint of all ranks, following
the metadata-commit model of ``torch.distributed.checkpoint``: every rank
writes its own part, the coordinator (rank 0) gathers what each wrote and,
only when every part is durable, publishes the one commit marker that makes
the checkpoint exist. The root is a directory or an object store (a path,
``file://...``, ``s3://bucket/prefix``, ``gs://...``, ``az://...``), both
through ``frontier_adapters.store``: one protocol, the same objects and
bytes on either. Layout under the root::

    COMMIT                                  the committed lineage (JSON), newest first
    step-00000012-<session>/rank-00000-of-00003.json   rank 0's JSON part
    step-00000012-<session>/rank-00000-of-00003.pt     its tensor part (optional)
    step-00000012-<session>/rank-00001-of-00003.json   ...

Building the checkpointer (collectively) draws a session token on rank 0,
broadcast to every rank, so a later life never writes into a directory a
dead one left, and claims the root on rank 0: ``COMMIT`` is rewritten by
one compare-and-swap against the version read, listing the same lineage
(none in a fresh root) and naming the new session as its owner (so its
bytes, hence its version on either store, change), and every
checkpointer built before is fenced at once. Writing step ``s``: each rank
creates its files in the step's directory, each once (create-if-absent:
in a directory a temporary file, fsynced, linked into place, the
directory fsynced; on an object store one conditional put); the ranks
gather their ``WrittenPart`` descriptions (file names, sizes and
SHA-256s) on rank 0, which checks that every rank of the world wrote
exactly its part at this step and only then publishes ``COMMIT`` by one
compare-and-swap against the version it last saw (in a directory:
under an ``flock``, a temporary file, fsync, rename, fsync of the root).
So of two writers publishing at once exactly one wins, and a
checkpointer built before another one was built or committed (a second
job on the root, a life from before a resume) is fenced: its commits
raise ``CheckpointConflictError`` and publish nothing, even when it goes
on before the newer one has committed anything. ``COMMIT`` lists the new
checkpoint then its ancestry, up to ``keep``, each entry with every
part's size and SHA-256 and naming its parent: the checkpoint the run
continues, chosen as for a checkpoint root's ``LATEST``
(``frontier_adapters.checkpoints``: ``resumed_from``, or what this
process last read or committed in this root, or the newest committed
one; the newest of lower step on its ancestry). Rank 0 then removes every
step directory it listed before its swap that the new lineage does not
keep (torn ones, ancestors beyond ``keep``, abandoned branches, a
loser's: a writer whose objects it listed was built before the swap and
is fenced, one built after wrote nothing it listed) and tells every rank
the outcome, so ``save`` returns on all ranks once the checkpoint exists,
and raises on all ranks if any rank failed to write or the commit lost. A
kill at any moment leaves ``COMMIT`` naming the previous lineage intact:
a torn checkpoint (parts without a commit) is never read, and the reader
picks the newest committed one.

Reading validates before it trusts: ``COMMIT``'s checksum, every entry's
structure (one JSON part per rank of its world, names matching the rank),
and each part's size (a longer object is refused before its body is read)
and SHA-256 as committed; in a directory nothing is followed through a
symlink and a FIFO or device is refused without blocking (the
``PosixStore``). ``COMMIT`` of version 3 names its owner (the session of
the checkpointer that last claimed or committed); versions 1 and 2 are
still read. Tensor parts load with ``torch.load(weights_only=True)``
(the binding's ``TENSOR_PARTS`` codec). ``COMMIT`` is parsed, continued and
serialised by the code that does so for a checkpoint root's ``LATEST``
(``frontier_adapters.checkpoints``'s ``LineageFile``): only its names,
bounds and entries are its own (``_COMMITTED``). A ``COMMIT`` of version 1
(step order, no parents) is still read, as the chain it lists. In a
directory the paths returned are paths; on an object store, names
relative to the root (what ``resumed_from`` takes there).

What it assumes of the store: ``frontier_adapters.store``'s docstring
(read-after-write, list-after-write, atomic conditional writes). One job
writes a root at a time; a second is refused, not merged.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

import attrs

from frontier_core import (
    CheckpointCorruptError,
    Effect,
    Ledger,
    LedgerConfig,
    Resumed,
    ShardCheckpoint,
    ShardMismatchError,
    Share,
    reshard,
)

from .. import Taken
from .._collector import FORMAT as COLLECTOR_FORMAT
from .._collector import (
    KEY_LEDGER,
    KEY_STREAM,
    StreamCollector,
    StreamSource,
)
from .._collector import VERSION as COLLECTOR_VERSION
from .._errors import CheckpointFileError
from .._state import KEY_FORMAT, KEY_VERSION
from ..checkpoints import CheckpointConflictError
from ..checkpoints._lineage import LineageFile as _LineageFile
from ..checkpoints._lineage import Link as _Link
from ..checkpoints._lineage import ancestry as _ancestry
from ..checkpoints._lineage import lineage_bytes as _lineage_bytes
from ..checkpoints._lineage import next_lineage as _next_lineage
from ..checkpoints._lineage import note_resumed as _note_resumed
from ..checkpoints._lineage import on_lineage as _on_lineage
from ..checkpoints._lineage import parent_dir as _parent_dir
from ..checkpoints._lineage import parse_lineage as _parse_lineage
from ..checkpoints._lineage import refuse_unlisted as _refuse_unlisted
from ..checkpoints._lineage import store_root as _store_root
from ..checkpoints._objects import MAX_OBJECTS, dirs_of
from ..checkpoints._parts import decode_part, fetch_part
from ..checkpoints._sealed import check_fingerprint as _check_fingerprint
from ..checkpoints._sealed import is_int as _is_int
from ..store import (
    Store,
    StoreConflictError,
    StoreError,
    StoreLimitError,
    StoreObjectError,
    local_path,
    open_store,
)
from ..store._errors import unavailable
from ._checkpoints import TENSOR_PARTS

# -- one rank's collector ---------------------------------------------------------------


def _strided(share: Share, local: range) -> range:
    """The global ordinals of a range of local ordinals."""
    return range(share.global_ordinal(local.start), share.global_ordinal(local.stop), share.world)


class RankCollector:
    """One data-parallel rank's collector: a ``StreamCollector`` on the
    rank's ``share`` of the global stream, in global ordinals.

    ``source`` yields the share's local stream (a loader built with
    ``make_seekable_loader(..., share=share)`` in a ``SeekableSource``);
    ``config`` is the global stream's (its ``stream_len`` and fingerprint:
    the local ledger gets ``share.config(config)``). Every ordinal passed in
    or returned is global; passing one of another share raises
    ``ValueError`` and changes nothing.

    torchdata ``Stateful``: ``state_dict`` is the rank's ``ShardCheckpoint``
    record at ``step`` (set ``step`` to your training step before saving: it
    is how a merge tells one checkpoint from a mix of two), and
    ``load_state_dict`` resumes from a record of this very share with the
    replay buffer not restored. After a world-size change, each rank resumes
    from its record of ``frontier_core.reshard(old_records, world)``, whose
    share it builds its loader with; see ``resume``.
    """

    def __init__(
        self, source: StreamSource, config: LedgerConfig, share: Share, *, step: int = 0
    ) -> None:
        if not isinstance(share, Share):
            raise TypeError(f"share must be a frontier_core.Share, got {type(share).__name__}")
        self.share = share
        self.global_config = config
        self.collector = StreamCollector(source, share.config(config))
        self.step = step

    # -- queries ------------------------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        """The rank's ledger (local ordinals)."""
        return self.collector.ledger

    @property
    def pending(self) -> int:
        return self.collector.pending

    @property
    def exhausted(self) -> bool:
        return self.collector.exhausted

    @property
    def drained(self) -> bool:
        """Every ordinal of the rank's share is trained or dropped."""
        return self.collector.drained

    def owns(self, ordinal: int) -> bool:
        return self.share.owns(ordinal)

    def row(self, ordinal: int) -> Any:
        return self.collector.row(self.share.local_ordinal(ordinal))

    def failures(self, ordinal: int) -> int:
        return self.collector.failures(self.share.local_ordinal(ordinal))

    # -- the stream and its events, in global ordinals -----------------------------------

    def take(self, n: int) -> list[tuple[int, Any]]:
        """As ``StreamCollector.take``: ``(global ordinal, row)`` items."""
        g = self.share.global_ordinal
        return [(g(o), row) for o, row in self.collector.take(n)]

    def take_samples(self, n: int) -> list[Taken]:
        """``take``'s groups as ``Taken`` values, for ``RolloutLoop``'s
        group schedule (a rank collector is a ``rollout.Collector``): the
        rank's ledger holds no sibling detail, so they carry no leases, and
        ``schedule="sibling"`` refuses this collector (``ScheduleError``)."""
        return [Taken(o, row, (), (), False) for o, row in self.take(n)]

    def landed(self, ordinals: Iterable[int]) -> None:
        self.collector.landed(self.share.local_ordinals(ordinals))

    def trained(self, ordinals: Iterable[int]) -> None:
        self.collector.trained(self.share.local_ordinals(ordinals))

    def failed(self, ordinals: Iterable[int]) -> Effect:
        return self._global(self.collector.failed(self.share.local_ordinals(ordinals)))

    def evicted(self, ordinals: Iterable[int]) -> Effect:
        return self._global(self.collector.evicted(self.share.local_ordinals(ordinals)))

    def _global(self, effect: Effect) -> Effect:
        g = self.share.global_ordinals
        return Effect(
            event=effect.event,
            stamped=_strided(self.share, effect.stamped),
            kept=tuple(g(effect.kept)),
            buffered=tuple(g(effect.buffered)),
            requeued=tuple(g(effect.requeued)),
            unstamped=tuple(g(effect.unstamped)),
            dropped=tuple(g(effect.dropped)),
        )

    # -- checkpoints ------------------------------------------------------------------

    def checkpoint(self, *, save_buffer: bool = True, step: int | None = None) -> ShardCheckpoint:
        """The rank's record now, at ``step`` (default ``self.step``)."""
        return ShardCheckpoint(
            self.share,
            self.step if step is None else step,
            self.collector.ledger.checkpoint(save_buffer=save_buffer),
        )

    def state_dict(self) -> dict[str, Any]:
        return self.checkpoint().state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """torchdata ``Stateful``: resume from a record of this share, the
        replay buffer not restored (see ``StreamCollector.load_state_dict``)."""
        self.resume(state_dict, load_replay_buffer=False)

    def resume(
        self,
        record: ShardCheckpoint | Mapping[str, Any],
        *,
        load_replay_buffer: bool,
        evicted_on_restore: Iterable[int] = (),
    ) -> Resumed:
        """Resume from ``record`` (a ``ShardCheckpoint`` or its
        ``state_dict``), which must be of this rank's share: one it wrote, or
        its part of ``frontier_core.reshard``. ``load_replay_buffer`` says
        whether the groups the record retains (the retained ordinals of this
        share, whichever rank generated them) are back in this rank's
        buffer; ``evicted_on_restore`` are global ordinals. Sets ``step``
        to the record's. Raises ``ShardMismatchError`` for a record of
        another share, and what ``StreamCollector.resume`` raises. The
        source must be seekable (its position is a function of the cut);
        the returned ``Resumed`` is in local ordinals."""
        if not isinstance(record, ShardCheckpoint):
            record = ShardCheckpoint.from_state_dict(
                record, fingerprint=self.global_config.fingerprint
            )
        if record.share != self.share:
            raise ShardMismatchError(
                f"the record is of {record.share}, but this collector reads {self.share}: "
                "reshard the checkpoint (frontier_core.reshard) and build each rank's loader "
                "and collector with the share of its resharded record",
                [self.share.rank],
            )
        evicted = self.share.local_ordinals(evicted_on_restore)
        cut = record.checkpoint.cut
        state = {
            KEY_FORMAT: COLLECTOR_FORMAT,
            KEY_VERSION: COLLECTOR_VERSION,
            KEY_LEDGER: record.checkpoint.state_dict(),
            KEY_STREAM: self.collector.source.position(cut),
        }
        resumed = self.collector.resume(
            state, load_replay_buffer=load_replay_buffer, evicted_on_restore=evicted
        )
        self.step = record.step
        return resumed


# -- collectives ------------------------------------------------------------------------


class Collectives(Protocol):
    """What the checkpointer needs of the process group."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""


class TorchCollectives:
    """``Collectives`` over ``torch.distributed`` (any backend that supports
    object collectives, gloo included), on ``group`` or the default group."""

    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.group = group

    def all_gather_object(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self._dist.get_world_size(self.group)
        self._dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        box = [obj]
        self._dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]


# -- the multi-rank checkpoint ------------------------------------------------------------

ROOT_FORMAT: Final = "frontier_adapters.distributed_checkpoint"
ROOT_VERSION: Final = 3
#: Older versions of ``COMMIT`` still read (version 1: step order, no
#: parents; version 2: no owner).
ROOT_VERSIONS_READ: Final = (1, 2)
COMMIT: Final = "COMMIT"
MAX_COMMIT_BYTES: Final = 64 << 20
MAX_KEEP: Final = 64
MAX_WORLD: Final = 1 << 16
_STEP_DIR: Final = re.compile(r"^step-(\d{8,})-([0-9a-f]{16})$")
_PART_FILE: Final = re.compile(r"^rank-(\d{5,})-of-(\d{5,})\.(json|pt)$")
_HEX64: Final = re.compile(r"^[0-9a-f]{64}$")
_ENTRY_KEYS: Final = frozenset({"dir", "step", "world", "fingerprint", "parts"})
_FILE_KEYS: Final = frozenset({"rank", "name", "size", "sha256"})


def step_dir_name(step: int, session: str) -> str:
    return f"step-{step:08d}-{session}"


def part_name(rank: int, world: int, ext: str) -> str:
    return f"rank-{rank:05d}-of-{world:05d}.{ext}"


@attrs.frozen
class PartFile:
    """One file of a rank's part, as written: its name, size and SHA-256."""

    name: str
    size: int
    sha256: str


@attrs.frozen
class WrittenPart:
    """What one rank wrote for one checkpoint: gathered on rank 0, which
    commits only a complete set."""

    rank: int
    world: int
    step: int
    dir: str
    files: tuple[PartFile, ...]


@attrs.frozen
class RankPart:
    """One rank's part of a committed checkpoint, read and verified."""

    rank: int
    json_part: Any
    tensor_part: Any | None


@attrs.frozen
class LoadedDistributedCheckpoint:
    """A committed multi-rank checkpoint: every rank's part, rank order."""

    path: Path
    step: int
    world: int
    fingerprint: str
    parts: tuple[RankPart, ...]

    def shards(self, key: str) -> list[ShardCheckpoint]:
        """The ranks' ``ShardCheckpoint`` records, saved under ``key`` of
        each JSON part (validated; of this checkpoint's stream)."""
        out = []
        for part in self.parts:
            if not isinstance(part.json_part, Mapping) or key not in part.json_part:
                raise CheckpointFileError(
                    self.path / part_name(part.rank, self.world, "json"),
                    f"holds no {key!r} record",
                )
            out.append(
                ShardCheckpoint.from_state_dict(part.json_part[key], fingerprint=self.fingerprint)
            )
        return out

    def reshard(self, world: int, key: str) -> tuple[ShardCheckpoint, ...]:
        """The resume records of ``world`` ranks (``frontier_core.reshard``
        of the records under ``key``), rank order. Raises
        ``ShardMismatchError`` if the records are not of this checkpoint's
        step and world (a forged or mixed-up part)."""
        shards = self.shards(key)
        wrong = [s.share.rank for s in shards if s.step != self.step]
        if wrong:
            raise ShardMismatchError(
                f"records of another step than the committed step {self.step}", wrong
            )
        if [s.share.rank for s in shards] != list(range(self.world)) or any(
            s.share.world != self.world for s in shards
        ):
            raise ShardMismatchError(
                f"the parts' records do not match their ranks of a world of {self.world}"
            )
        return reshard(shards, world, fingerprint=self.fingerprint)


class _Root:
    """A checkpoint root and the store it is: a directory (a ``PosixStore``;
    paths are returned and errors name files) or an object store (names
    relative to the root are returned, errors name URLs)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.local = local_path(root)
        self.store: Store = open_store(root)
        #: The root as given back: the directory, or the URL.
        self.root: Path | str = self.local if self.local is not None else self.store.where

    def shown(self, key: str) -> Path | str:
        return self.local / key if self.local is not None else f"{self.store.where}/{key}"

    def path(self, name: str) -> Path:
        """What a checkpoint directory is returned as."""
        return self.local / name if self.local is not None else Path(name)

    def read_commit(self) -> tuple[list[_Link[dict[str, Any]]] | None, str | None]:
        """(the committed lineage, ``None`` if nothing was ever committed;
        ``COMMIT``'s version)."""
        shown = self.shown(COMMIT)
        try:
            got = self.store.get_versioned(COMMIT, max_bytes=MAX_COMMIT_BYTES)
        except StoreLimitError:
            raise _bad(shown, f"more than the {MAX_COMMIT_BYTES} bytes allowed") from None
        except StoreObjectError as exc:
            raise _bad(shown, exc.reason) from None
        if got is None:
            _refuse_unlisted(shown, _COMMITTED, None, self.top_names())
            return None, None
        return _parse_lineage(shown, got.data, _COMMITTED), got.version

    def top_names(self) -> list[str]:
        """The names of the root's directories (what holds objects)."""
        try:
            keys = self.store.list(limit=MAX_OBJECTS)
        except StoreLimitError:
            raise _bad(self.root, f"holds more than {MAX_OBJECTS} objects") from None
        except StoreObjectError as exc:
            raise _bad(self.root, exc.reason) from None
        names = dirs_of(keys)
        if self.local is None:
            return names
        # A write failed or killed between creating its step directory and
        # linking its first file leaves the directory empty: no object
        # lists it, and a commit would never remove it (one per failure).
        steps = set(names)
        try:
            with os.scandir(self.local) as found:
                for n, entry in enumerate(found):
                    if n > MAX_OBJECTS:
                        raise _bad(self.root, f"holds more than {MAX_OBJECTS} entries")
                    if _STEP_DIR.match(entry.name) and entry.is_dir(follow_symlinks=False):
                        steps.add(entry.name)
        except FileNotFoundError:
            pass  # a fresh root, not created yet
        except OSError as exc:
            raise unavailable(str(self.root), None, exc) from exc
        return sorted(steps)


def _bad(path: Path | str, reason: str) -> CheckpointFileError:
    return CheckpointFileError(path, reason)


def _parse_entry(shown: Path, entry: object) -> dict[str, Any]:
    if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
        raise _bad(shown, f"bad lineage entry {str(entry)[:200]}")
    name, step, world = entry["dir"], entry["step"], entry["world"]
    m = _STEP_DIR.match(name) if isinstance(name, str) else None
    if m is None or not _is_int(step) or int(m.group(1)) != step:
        raise _bad(shown, f"entry {str(name)[:80]!r}: directory name and step {step!r} disagree")
    if not _is_int(world) or not 1 <= world <= MAX_WORLD:
        raise _bad(shown, f"entry {name}: world must be an int in [1, {MAX_WORLD}]")
    if not isinstance(entry["fingerprint"], str):
        raise _bad(shown, f"entry {name}: 'fingerprint' must be a string")
    parts = entry["parts"]
    if not isinstance(parts, list) or len(parts) > 2 * world:
        raise _bad(shown, f"entry {name}: 'parts' must list at most two files per rank")
    seen: set[str] = set()
    json_ranks: list[int] = []
    for f in parts:
        if not isinstance(f, dict) or set(f) != _FILE_KEYS:
            raise _bad(shown, f"entry {name}: bad part {str(f)[:200]}")
        rank, fname, size, digest = f["rank"], f["name"], f["size"], f["sha256"]
        pm = _PART_FILE.match(fname) if isinstance(fname, str) else None
        if (
            pm is None
            or not _is_int(rank)
            or int(pm.group(1)) != rank
            or int(pm.group(2)) != world
            or fname in seen
        ):
            raise _bad(
                shown, f"entry {name}: part {str(fname)[:80]!r} does not match rank {rank!r}"
            )
        if not _is_int(size) or size < 0 or not isinstance(digest, str) or not _HEX64.match(digest):
            raise _bad(shown, f"entry {name}: part {fname}: bad size or sha256")
        seen.add(fname)
        if pm.group(3) == "json":
            json_ranks.append(rank)
    if sorted(json_ranks) != list(range(world)):
        raise _bad(shown, f"entry {name}: a JSON part for each of its {world} ranks is required")
    return entry


#: ``COMMIT``: the committed lineage of a distributed checkpoint root.
_COMMITTED: Final = _LineageFile(
    name=COMMIT,
    format=ROOT_FORMAT,
    version=ROOT_VERSION,
    also_reads=ROOT_VERSIONS_READ,
    max_bytes=MAX_COMMIT_BYTES,
    max_entries=MAX_KEEP,
    dirs=_STEP_DIR,
    dirs_are="step directories",
    lineage_is="committed",
    # No bound: torn checkpoints (parts without a commit, one per life that
    # died before committing, or per failed save) stay until a commit.
    unlisted_when_empty=None,
    leftovers=(),
    parse_entry=_parse_entry,
    step_of=lambda e: int(e["step"]),
    dir_of=lambda e: str(e["dir"]),
    to_json=lambda e: e,
    owned=True,
)


def committed_checkpoints(root: str | os.PathLike[str]) -> list[Path]:
    """The committed lineage under ``root`` (a directory or a URL), newest
    first: the newest checkpoint, then its parent, ... (``[]`` if none).
    In a directory these are paths; on an object store, names relative to
    the root."""
    where = _Root(root)
    lineage, _ = where.read_commit()
    return [where.path(link.entry["dir"]) for link in lineage or []]


def read_distributed_checkpoint(
    root: str | os.PathLike[str],
    *,
    fingerprint: str | None,
    previous: int = 0,
    tensors: bool = True,
) -> LoadedDistributedCheckpoint | None:
    """Read and verify the newest committed checkpoint under ``root`` (a
    directory, or a URL: ``s3://bucket/prefix``, ``file://...``), or its
    ``previous``-th ancestor along the committed lineage (the fallback when
    the newest is damaged). The checkpoint returned is what this process's
    run now continues: the next commit in this root (of any
    ``DistributedCheckpointer`` of this process) continues it. ``None``
    only for a root with no committed checkpoint and no step directory.
    ``tensors=False`` skips loading the tensor parts (their sizes and
    SHA-256s are still checked). Raises ``CheckpointFileError`` (a missing,
    garbled or forged ``COMMIT``, a missing, truncated or corrupted part),
    ``CheckpointFileVersionError`` and ``DatasetChangedError`` (another
    ``fingerprint``), naming the file; a store that cannot be reached is a
    ``frontier_adapters.store.StoreUnavailableError``."""
    if not _is_int(previous) or previous < 0:
        raise ValueError(f"previous must be an int >= 0, got {previous!r}")
    where = _Root(root)
    lineage, _ = where.read_commit()
    if not lineage:
        return None
    if previous >= len(lineage):
        raise _bad(
            where.shown(COMMIT),
            f"the committed lineage holds {len(lineage)} checkpoint(s); "
            f"there is no checkpoint {previous} back",
        )
    entry = lineage[previous].entry
    _check_fingerprint(where.shown(COMMIT), fingerprint, entry["fingerprint"])
    world = entry["world"]
    json_parts: dict[int, Any] = {}
    tensor_parts: dict[int, Any] = {}
    for f in entry["parts"]:
        key = f"{entry['dir']}/{f['name']}"
        shown = str(where.shown(key))
        data = fetch_part(where.store, key, shown, size=f["size"], sha256=f["sha256"])
        if f["name"].endswith(".json"):
            json_parts[f["rank"]] = decode_part(data, shown, TENSOR_PARTS)
        elif tensors:
            tensor_parts[f["rank"]] = decode_part(data, shown, TENSOR_PARTS)
    loaded = LoadedDistributedCheckpoint(
        path=where.path(entry["dir"]),
        step=entry["step"],
        world=world,
        fingerprint=entry["fingerprint"],
        parts=tuple(
            RankPart(rank=r, json_part=json_parts[r], tensor_part=tensor_parts.get(r))
            for r in range(world)
        ),
    )
    _note_resumed(_COMMITTED, _store_root(where.store), entry)
    return loaded


class DistributedCheckpointer:
    """Writes all-or-nothing checkpoints of ``world`` ranks under ``root``
    (a directory, or a URL: ``s3://bucket/prefix``, ``file://...``; see the
    module's docstring). Build one on every rank, collectively: rank 0
    draws the session token and broadcasts it through ``comm``, and claims
    the root: it rewrites ``COMMIT`` (creating an empty one in a fresh
    root, so that a root with step directories and no ``COMMIT`` is never
    mistaken for a fresh start) with the same lineage and this session as
    its owner, by a compare-and-swap against the version it read. Every
    commit of this checkpointer is a compare-and-swap against the version
    it last saw, so a checkpointer built before another one was built or
    committed in this root (two jobs at once, or a life from before a
    resume) is fenced from the moment the newer one is built: its commit
    raises ``CheckpointConflictError`` and publishes nothing. When the
    claim itself loses (another job built or committed meanwhile), every
    rank raises ``CheckpointConflictError``.

    ``resumed_from`` (a ``LoadedDistributedCheckpoint`` of this root, or
    its directory; on an object store its name) is the committed
    checkpoint this life resumed from: the first commit continues it.
    Without it, a commit continues what this process last read
    (``read_distributed_checkpoint``) or committed in this root, or else
    the newest committed checkpoint; a commit's step not above that one's
    continues the newest of lower step on its ancestry. Only rank 0's
    ``resumed_from`` is used; when it is not on the committed lineage
    (``CheckpointFileError``) or not in ``root`` (``ValueError``), every
    rank raises ``CheckpointFileError``.

    ``save`` is collective too; a save that failed (at its commit, say)
    may be retried at the same step with the same parts: a part already
    written with the same bytes counts as written, one with other bytes is
    refused. ``hook(phase)`` is called with ``"part"``
    once this rank's part is durable, and on rank 0 with ``"commit"`` just
    before ``COMMIT`` is replaced (for crash tests). ``comm=None`` is for a
    single process writing every part itself (``write_part`` per rank, then
    ``commit``): tests and tools."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        rank: int,
        world: int,
        fingerprint: str,
        comm: Collectives | None,
        keep: int = 2,
        hook: Callable[[str], None] | None = None,
        resumed_from: LoadedDistributedCheckpoint | str | os.PathLike[str] | None = None,
    ) -> None:
        if not _is_int(world) or not 1 <= world <= MAX_WORLD:
            raise ValueError(f"world must be an int in [1, {MAX_WORLD}], got {world!r}")
        if not _is_int(rank) or not 0 <= rank < world:
            raise ValueError(f"rank must be an int in [0, {world}), got {rank!r}")
        if not _is_int(keep) or not 1 <= keep <= MAX_KEEP:
            raise ValueError(f"keep must be an int in [1, {MAX_KEEP}], got {keep!r}")
        if not isinstance(fingerprint, str):
            raise TypeError("fingerprint must be a str")
        self._where = _Root(root)
        #: The root: a directory, or the store's URL.
        self.root: Path | str = self._where.root
        self.rank = rank
        self.world = world
        self.fingerprint = fingerprint
        self.keep = keep
        self.comm = comm
        self.hook = hook
        #: ``COMMIT``'s version as this checkpointer last saw it (rank 0).
        self._version: str | None = None
        error: str | None = None
        # A lost claim (another job built or committed meanwhile) is a
        # conflict on every rank, not a damaged root.
        conflict = False
        token = secrets.token_hex(8)
        if rank == 0:
            try:
                # Only rank 0 commits: the other ranks' resumed_from is unused.
                self._prepare_root(
                    token,
                    None
                    if resumed_from is None
                    else _parent_dir(self._where.local, resumed_from, "resumed_from"),
                )
            except CheckpointConflictError as exc:
                conflict, error = True, str(exc).removeprefix(f"{exc.path}: ")
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        if comm is not None:
            token, error, conflict = comm.broadcast_object((token, error, conflict))
        if conflict:
            raise CheckpointConflictError(str(self._where.shown(COMMIT)), str(error))
        if error is not None:
            raise _bad(self._where.shown(COMMIT), f"rank 0 could not prepare the root: {error}")
        self.session: str = token

    def _prepare_root(self, session: str, resumed: str | None) -> None:
        """Claim the root for ``session``: rewrite ``COMMIT`` with the
        lineage it lists (an empty one in a fresh root) and ``session`` as
        its owner, by a compare-and-swap against the version read, so that
        every checkpointer built before is fenced from now on; note
        ``resumed`` (a directory of the committed lineage) as what this
        process's run continues."""
        where = self._where
        lineage, version = where.read_commit()
        if resumed is not None:
            old = lineage or []
            _note_resumed(
                _COMMITTED,
                _store_root(where.store),
                old[_on_lineage(where.root, _COMMITTED, old, resumed)].entry,
            )
        try:
            self._version = where.store.swap(
                COMMIT, _lineage_bytes(_COMMITTED, lineage or [], session), expected=version
            )
        except StoreConflictError as exc:
            raise CheckpointConflictError(
                str(where.shown(COMMIT)),
                f"another writer created or moved it while this checkpointer claimed the root "
                f"({exc})",
            ) from None

    def write_part(
        self,
        step: int,
        json_part: Any,
        tensor_part: Any | None = None,
        *,
        rank: int | None = None,
    ) -> WrittenPart:
        """Write this rank's part of checkpoint ``step`` durably (``rank``
        overrides the rank, for a single process writing every part): each
        file created once (create-if-absent), never replaced."""
        rank = self.rank if rank is None else rank
        if not _is_int(step) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        blobs = [
            (
                part_name(rank, self.world, "json"),
                json.dumps(json_part, sort_keys=True, allow_nan=False).encode(),
            )
        ]
        if tensor_part is not None:
            blobs.append((part_name(rank, self.world, "pt"), TENSOR_PARTS.encode(tensor_part)))
        name = step_dir_name(step, self.session)
        files = []
        for fname, data in blobs:
            key = f"{name}/{fname}"
            try:
                self._where.store.create(key, data)
            except StoreConflictError:  # a part, once written, is never replaced
                if self._existing(key, len(data)) != data:
                    raise _bad(
                        self._where.shown(key), "already written in this session, other bytes"
                    ) from None
                # The same bytes: written by a save of this step that failed
                # later (at its commit), so a retry of the save goes on.
            except StoreObjectError as exc:
                raise _bad(self._where.shown(key), exc.reason) from None
            files.append(PartFile(fname, len(data), hashlib.sha256(data).hexdigest()))
        if self.hook is not None:
            self.hook("part")
        return WrittenPart(rank=rank, world=self.world, step=step, dir=name, files=tuple(files))

    def _existing(self, key: str, size: int) -> bytes | None:
        """The bytes of part ``key`` already there, ``None`` when they are not
        ``size`` bytes (or it is gone, or unreadable: not the same part)."""
        try:
            return self._where.store.get(key, max_bytes=size)
        except (StoreLimitError, StoreObjectError):
            return None

    def commit(self, step: int, parts: Sequence[WrittenPart]) -> Path:
        """Commit checkpoint ``step`` from every rank's ``WrittenPart``
        (rank 0, after gathering them): check that the world's every rank
        wrote exactly its part of this step, publish ``COMMIT`` listing the
        new checkpoint and the ancestry it continues (see the class) by one
        compare-and-swap against the version this checkpointer last saw,
        then remove every step directory listed before the swap that the
        new lineage does not keep. Raises ``CheckpointConflictError`` when
        another writer committed since (nothing published)."""
        name = step_dir_name(step, self.session)
        ranks = sorted(p.rank for p in parts)
        if ranks != list(range(self.world)):
            raise ShardMismatchError(
                f"commit of step {step} needs the parts of ranks 0..{self.world - 1}", ranks
            )
        for p in parts:
            if (p.world, p.step, p.dir) != (self.world, step, name):
                raise ShardMismatchError(
                    f"rank {p.rank} wrote step {p.step} of a world of {p.world} in {p.dir}, "
                    f"not step {step} of {self.world} in {name}",
                    [p.rank],
                )
        where = self._where
        old, seen = where.read_commit()
        if seen != self._version:  # the swap below would lose: say so before anything else
            raise self._conflict(step, "its version moved")
        for p in parts:  # where rank 0 sees them (each was created once, never replaced)
            for f in p.files:
                key = f"{name}/{f.name}"
                try:
                    found = where.store.head(key)
                except StoreObjectError as exc:
                    raise _bad(where.shown(key), exc.reason) from None
                if found is None:
                    raise _bad(where.shown(key), "missing at commit")
        # Listed before the swap: a writer whose objects are listed built its
        # checkpointer before this swap, so its own swap fails; one built
        # after writes only objects this listing never saw.
        before = where.top_names()
        ancestry = _ancestry(
            where.root, _store_root(where.store), _COMMITTED, old or [], step, None
        )
        entry = {
            "dir": name,
            "step": step,
            "world": self.world,
            "fingerprint": self.fingerprint,
            "parts": [
                {"rank": p.rank, "name": f.name, "size": f.size, "sha256": f.sha256}
                for p in sorted(parts, key=lambda p: p.rank)
                for f in p.files
            ],
        }
        if self.hook is not None:
            self.hook("commit")
        lineage = _next_lineage(_COMMITTED, entry, ancestry, self.keep)
        try:
            self._version = where.store.swap(
                COMMIT,
                _lineage_bytes(_COMMITTED, lineage, self.session),
                expected=self._version,
            )
        except StoreConflictError as exc:
            raise self._conflict(step, str(exc)) from None
        _note_resumed(_COMMITTED, _store_root(where.store), entry)
        kept = {link.entry["dir"] for link in lineage}
        for d in before:
            if _STEP_DIR.match(d) and d not in kept:
                try:
                    where.store.delete_prefix(d, limit=MAX_OBJECTS)
                except StoreError:
                    pass  # pruning is best effort: the lineage is published
        return where.path(name)

    def _conflict(self, step: int, why: str) -> CheckpointConflictError:
        return CheckpointConflictError(
            str(self._where.shown(COMMIT)),
            f"another writer committed since this checkpointer was built or last committed "
            f"({why}): checkpoint {step} was not committed",
        )

    def save(self, step: int, json_part: Any, tensor_part: Any | None = None) -> Path:
        """Write this rank's part of checkpoint ``step`` and, collectively,
        commit it: returns on every rank once the checkpoint exists, raises
        on every rank if it was not committed: ``CheckpointConflictError``
        when another writer committed since this checkpointer was built
        (see the class), ``CheckpointFileError`` when any rank failed."""
        if self.comm is None:
            if self.world != 1:
                raise RuntimeError("save needs comm with more than one rank")
            return self.commit(step, [self.write_part(step, json_part, tensor_part)])
        part: WrittenPart | str
        try:
            part = self.write_part(step, json_part, tensor_part)
        except Exception as exc:
            part = f"rank {self.rank}: {type(exc).__name__}: {exc}"
        gathered = self.comm.all_gather_object(part)
        outcome: tuple[bool, str] | None = None
        if self.rank == 0:
            failures = [p for p in gathered if isinstance(p, str)]
            if failures:
                outcome = (False, "; ".join(failures))
            else:
                try:
                    self.commit(step, gathered)
                except CheckpointConflictError as exc:
                    outcome = (True, str(exc))
                except Exception as exc:
                    outcome = (False, f"commit: {type(exc).__name__}: {exc}")
        outcome = self.comm.broadcast_object(outcome)
        if outcome is not None:
            conflict, reason = outcome
            if conflict:
                raise CheckpointConflictError(str(self._where.shown(COMMIT)), reason)
            raise _bad(self.root, f"checkpoint {step} was not committed: {reason}")
        return self._where.path(step_dir_name(step, self.session))


_ORDINAL_KEY: Final = re.compile(r"^(0|[1-9][0-9]{0,18})$")


def owned_groups(
    parts: Iterable[RankPart], key: str, owner: ShardCheckpoint | Share
) -> dict[int, Any]:
    """The saved buffered groups of one rank of the new world, gathered
    from every rank's part: ``json_part[key]`` maps a global ordinal (a
    JSON key, in decimal) to its group. After a reshard, a rank restores
    the groups its new share owns, whoever generated them.

    ``owner`` is the rank's record of the resume plan (``reshard``'s): the
    groups returned are then exactly those of the ordinals the record
    retains, and a retained ordinal with no saved group, or a saved group
    of the share that the record does not retain, raises
    ``CheckpointCorruptError`` (restoring such a buffer would wait for ever
    for a group it lacks, or train one the ledger does not hold). A bare
    ``Share`` returns the groups it owns, unchecked. Also raises
    ``CheckpointCorruptError`` for a part whose ``key`` is not a dict, a
    key that is not an ordinal, and an ordinal saved twice."""
    share = owner.share if isinstance(owner, ShardCheckpoint) else owner
    out: dict[int, Any] = {}
    for part in parts:
        groups = part.json_part.get(key, {}) if isinstance(part.json_part, Mapping) else {}
        if not isinstance(groups, Mapping):
            raise CheckpointCorruptError(f"rank {part.rank}'s {key!r} is not a dict")
        for o, group in groups.items():
            if not isinstance(o, str) or not _ORDINAL_KEY.match(o):
                raise CheckpointCorruptError(
                    f"rank {part.rank}'s {key!r} has key {str(o)[:40]!r}, not an ordinal"
                )
            ordinal = int(o)
            if not share.owns(ordinal):
                continue
            if ordinal in out:
                raise CheckpointCorruptError(
                    f"rank {part.rank}'s {key!r} holds ordinal {ordinal}, saved by another part too"
                )
            out[ordinal] = group
    if isinstance(owner, ShardCheckpoint):
        _check_retained(out, key, owner)
    return out


def _check_retained(groups: Mapping[int, Any], key: str, record: ShardCheckpoint) -> None:
    """Raise ``CheckpointCorruptError`` unless ``groups`` (global ordinals
    of ``record``'s share) are exactly the ordinals ``record`` retains.
    The retained ordinals are ranges: the check costs O((G + R) log R) for
    G groups and R ranges, never the number of ordinals a range spans."""
    share, ranges = record.share, record.checkpoint.retained
    starts = [a for a, _ in ranges]
    local = {share.local_ordinal(o) for o in groups}

    def retained(o: int) -> bool:
        i = bisect.bisect_right(starts, o) - 1
        return i >= 0 and o < ranges[i][1]

    extra = sorted(share.global_ordinal(o) for o in local if not retained(o))
    held = len(local) - len(extra)
    lacking = sum(b - a for a, b in ranges) - held
    shown: list[int] = []
    for a, b in ranges:  # each step past a held ordinal uses up one group
        o = a
        while o < b and len(shown) < 5 and len(shown) < lacking:
            if o not in local:
                shown.append(share.global_ordinal(o))
            o += 1
    if lacking or extra:
        raise CheckpointCorruptError(
            f"the saved {key!r} groups of {share} do not match its record's retained "
            f"ordinals: {lacking} retained without a saved group {shown}, "
            f"{len(extra)} saved but not retained {extra[:5]}"
        )
