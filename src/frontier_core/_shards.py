"""Shares of one global stream: per-rank records, merged and split for any world size.

Data-parallel ranks that each read their own part of the data run one
ledger each. The ledger assumes its source yields consecutive ordinals, so a
rank's ledger works in *local* ordinals ``0, 1, 2, ...`` and a ``Share``
maps them to the global stream: rank ``r`` of ``world`` ranks from ``base``
reads the global ordinals

    base + r, base + r + world, base + r + 2 * world, ...

in that order (local ordinal ``l`` is global ordinal ``base + r + l * world``),
up to the end of the global stream. Every global ordinal at or above ``base``
belongs to exactly one rank; every ordinal below ``base`` must be resolved
(the base of a reshard is at or below the merged cut). A rank's local
stream has ``Share.local_len(stream_len)`` ordinals.

Think of the global ordinals at or above ``base`` as a grid of ``world``
columns, read row by row: column ``r`` is rank ``r``'s local stream, row
``l`` its local ordinal ``l``. A local record (``Checkpoint``) describes one
column as a cut and ranges; the global record describes the grid row-major.

* ``merge_shards``: the ``world`` records of one checkpoint -> one global
  ``Checkpoint``. The global cut is the lowest unresolved global ordinal
  (the lowest of the ranks' cuts, mapped). Above it: resolved is the union
  of the ranks' resolved ordinals (their local cut prefixes included),
  retained the union of their retained ones, attempts mapped. A rank's
  ledger forgets below its local cut whether an ordinal was trained or
  dropped; those ordinals are resolved all the same and the global record
  lists them as trained (``trained_above_cut`` and ``dropped_above_cut``
  together are exactly the resolved set; the split between them is exact
  for what the ranks still recorded).
* ``split_checkpoint``: a global record -> the records of ``world`` ranks
  from a new ``base`` (at or below its cut, by default the cut). Each rank's
  cut is its lowest unresolved local ordinal.
* ``reshard``: both. Same world size: the shares (and so the ranks'
  buffers) stay where they were, and the records come back exactly as they
  were written; another world size: new shares from the merged cut.

Retained (buffered) groups are mapped like everything else: the merged
record says which groups were in some rank's buffer, the split says which
new rank owns each. Whether they come back is the resume's decision
(``load_replay_buffer``), as for one ledger: a rank that loads the groups of
its share from the saved buffers passes ``True``; one that does not passes
``False`` and they are generated again. Nothing is lost either way.

Cost: a merge sweeps the grid's rows at the ranges' end points, keeping the
set of covered columns as sorted edges, and emits whole rows as one range;
a split sweeps the same rows the other way and visits only the columns
whose coverage changes from one covered row pattern to the next, each the
start or end of a local range. Both cost O(ranges x log + output ranges),
never the run's length, and never one step per ordinal of a range.

No I/O here; the multi-rank checkpoint directories are the torch binding's.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import attrs

from ._checkpoint import Checkpoint, _checksum
from ._errors import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FingerprintMismatchError,
    shown,
    shown_keys,
)
from ._groups import LedgerConfig
from ._ranges import LIMIT, Range

FORMAT: Final = "frontier_core.shard_checkpoint"
VERSION: Final = 1
KEY_FORMAT: Final = "format"
KEY_VERSION: Final = "version"
KEY_SHARE: Final = "share"
KEY_STEP: Final = "step"
KEY_LEDGER: Final = "ledger"
KEY_CHECKSUM: Final = "checksum"
_BODY_KEYS: Final = frozenset({KEY_FORMAT, KEY_VERSION, KEY_SHARE, KEY_STEP, KEY_LEDGER})
_SHARE_KEYS: Final = frozenset({"base", "world", "rank"})
#: More ranks than this is a forged record, not a cluster.
MAX_WORLD: Final = 1 << 20


class ShardMismatchError(CheckpointMismatchError):
    """A set of per-rank records is not one consistent checkpoint (a rank
    missing or twice, mixed steps or fingerprints, shares that do not tile
    one stream), or a rank's record does not belong to its share.
    ``reason`` says which; ``ranks`` names the ranks concerned."""

    def __init__(self, reason: str, ranks: Iterable[int] = ()) -> None:
        self.reason = reason
        self.ranks: tuple[int, ...] = tuple(sorted(set(ranks)))
        shown = f" (ranks {list(self.ranks[:16])}{' ...' if len(self.ranks) > 16 else ''})"
        super().__init__(
            f"not one consistent multi-rank checkpoint: {reason}{shown if self.ranks else ''}"
        )


def _ceil_div(n: int, d: int) -> int:
    return -((-n) // d)


def _check_count(name: str, value: object, *, low: int = 0) -> int:
    # At most LIMIT, as every number of a checkpoint record.
    if type(value) is not int or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {shown(value)}")
    if value > LIMIT:
        raise ValueError(f"{name} must be at most 2**64, got {shown(value)}")
    return value


@attrs.frozen
class Share:
    """Rank ``rank`` of ``world`` ranks reading the global stream from
    ``base``: local ordinal ``l`` is global ordinal
    ``base + rank + l * world``, ascending."""

    base: int
    world: int
    rank: int

    def __attrs_post_init__(self) -> None:
        _check_count("base", self.base)
        _check_count("world", self.world, low=1)
        if self.world > MAX_WORLD:
            raise ValueError(f"world must be at most {MAX_WORLD}, got {self.world}")
        _check_count("rank", self.rank)
        if self.rank >= self.world:
            raise ValueError(f"rank must be below world={self.world}, got {self.rank}")

    @classmethod
    def tiling(cls, world: int, *, base: int = 0) -> tuple[Share, ...]:
        """The ``world`` shares of one stream from ``base``, rank order."""
        return tuple(cls(base, world, r) for r in range(_check_count("world", world, low=1)))

    def global_ordinal(self, local: int) -> int:
        """The global ordinal of local ordinal ``local``."""
        return self.base + self.rank + local * self.world

    def owns(self, ordinal: int) -> bool:
        """Whether global ``ordinal`` is in this share."""
        return ordinal >= self.base and (ordinal - self.base) % self.world == self.rank

    def local_ordinal(self, ordinal: int) -> int:
        """The local ordinal of global ``ordinal``; ``ValueError`` if this
        share does not own it."""
        if not self.owns(ordinal):
            raise ValueError(f"global ordinal {ordinal} is not in {self}")
        return (ordinal - self.base) // self.world

    def global_ordinals(self, local: Iterable[int]) -> list[int]:
        base, world = self.base + self.rank, self.world
        return [base + o * world for o in local]

    def local_ordinals(self, ordinals: Iterable[int]) -> list[int]:
        return [self.local_ordinal(o) for o in ordinals]

    def local_len(self, stream_len: int | None) -> int | None:
        """How many ordinals of a global stream of ``stream_len`` (``None``:
        unbounded) this share holds."""
        if stream_len is None:
            return None
        return max(0, _ceil_div(stream_len - self.base - self.rank, self.world))

    def fingerprint(self, fingerprint: str) -> str:
        """The fingerprint of this share's local stream, derived from the
        global stream's: a local record resumes only into its own share."""
        return f"{fingerprint}#share={self.base}/{self.world}/{self.rank}"

    def config(self, config: LedgerConfig) -> LedgerConfig:
        """The configuration of this share's local ledger, from the global
        stream's: the same policy, group size and window, the local length
        and fingerprint."""
        return attrs.evolve(
            config,
            stream_len=self.local_len(config.stream_len),
            fingerprint=self.fingerprint(config.fingerprint),
        )

    def to_json(self) -> dict[str, int]:
        return {"base": self.base, "world": self.world, "rank": self.rank}

    @classmethod
    def from_json(cls, value: object) -> Share:
        """Read ``to_json``'s dict; ``CheckpointCorruptError`` otherwise."""
        if not isinstance(value, Mapping) or set(value) != _SHARE_KEYS:
            raise CheckpointCorruptError(
                f"a share must be a dict with keys {sorted(_SHARE_KEYS)}, got {shown(value, 120)}"
            )
        try:
            return cls(value["base"], value["world"], value["rank"])
        except ValueError as exc:
            raise CheckpointCorruptError(f"bad share {shown(value, 120)}: {exc}") from None

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.world} from ordinal {self.base}"


@attrs.frozen
class ShardCheckpoint:
    """One rank's record at training step ``step``: its share and its local
    ledger's ``checkpoint`` (local ordinals, fingerprint and length of the
    share's local stream). Built with ``checkpoint`` from a ledger whose
    configuration is ``share.config(...)``; raises ``ShardMismatchError``
    when the checkpoint's fingerprint is not one of this share."""

    share: Share
    step: int
    checkpoint: Checkpoint

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.share, Share) or not isinstance(self.checkpoint, Checkpoint):
            raise TypeError("ShardCheckpoint needs a Share and a Checkpoint")
        _check_count("step", self.step)
        self._global_fingerprint()

    @property
    def fingerprint(self) -> str:
        """The global stream's fingerprint."""
        return self._global_fingerprint()

    def _global_fingerprint(self) -> str:
        suffix = self.share.fingerprint("")
        found = self.checkpoint.fingerprint
        if not found.endswith(suffix):
            raise ShardMismatchError(
                f"the record of {self.share} was written for the local stream "
                f"{found!r}, not one of this share (its fingerprint must end in {suffix!r}: "
                "build the rank's ledger with share.config(config))",
                [self.share.rank],
            )
        return found[: len(found) - len(suffix)]

    def state_dict(self) -> dict[str, Any]:
        """The record: JSON types only, checksummed (the ledger record
        inside keeps its own checksum)."""
        body: dict[str, Any] = {
            KEY_FORMAT: FORMAT,
            KEY_VERSION: VERSION,
            KEY_SHARE: self.share.to_json(),
            KEY_STEP: self.step,
            KEY_LEDGER: self.checkpoint.state_dict(),
        }
        body[KEY_CHECKSUM] = _checksum(body)
        return body

    @classmethod
    def from_state_dict(
        cls, record: Mapping[str, Any], *, fingerprint: str | None = None
    ) -> ShardCheckpoint:
        """Validate ``record`` and return it. ``fingerprint`` is the global
        stream's (``None`` skips that check). Raises the ``CheckpointError``
        subclasses of ``Checkpoint.from_state_dict``, and
        ``ShardMismatchError`` for a ledger record of another share."""
        if not isinstance(record, Mapping):
            raise CheckpointCorruptError(
                f"shard record must be a dict, got {type(record).__name__}"
            )
        if record.get(KEY_FORMAT) != FORMAT:
            raise CheckpointVersionError(
                f"not a shard record: {KEY_FORMAT!r} is {shown(record.get(KEY_FORMAT))}, "
                f"expected {FORMAT!r}"
            )
        version = record.get(KEY_VERSION)
        if type(version) is not int or version != VERSION:
            raise CheckpointVersionError(
                f"shard record version {shown(version, 40)} is not supported "
                f"(this library reads version {VERSION})"
            )
        keys = set(record)
        if keys != _BODY_KEYS | {KEY_CHECKSUM}:
            raise CheckpointCorruptError(
                f"shard record has missing keys {sorted(_BODY_KEYS | {KEY_CHECKSUM} - keys)} "
                f"and unknown keys {shown_keys(keys - _BODY_KEYS - {KEY_CHECKSUM})}"
            )
        body = {k: record[k] for k in _BODY_KEYS}
        try:
            expected = _checksum(body)
        except (TypeError, ValueError, RecursionError) as exc:
            raise CheckpointCorruptError(
                f"shard record is not JSON data: {str(exc)[:200]}"
            ) from None
        if record[KEY_CHECKSUM] != expected:
            raise CheckpointCorruptError(
                "shard record checksum mismatch: the record was altered or truncated"
            )
        share = Share.from_json(record[KEY_SHARE])
        step = record[KEY_STEP]
        if type(step) is not int or not 0 <= step <= LIMIT:
            raise CheckpointCorruptError(
                f"shard record step must be an int in [0, 2**64], got {shown(step, 40)}"
            )
        checkpoint = Checkpoint.from_state_dict(record[KEY_LEDGER])
        shard = cls(share, step, checkpoint)
        if fingerprint is not None and shard.fingerprint != fingerprint:
            raise FingerprintMismatchError(expected=fingerprint, found=shard.fingerprint)
        return shard


# -- range arithmetic on the grid -------------------------------------------------


def _append(out: list[Range], start: int, stop: int) -> None:
    """Append ``[start, stop)`` to ascending ranges, merging a touching one."""
    if out and out[-1][1] == start:
        out[-1] = (out[-1][0], stop)
    else:
        out.append((start, stop))


def _union(a: Sequence[Range], b: Sequence[Range]) -> list[Range]:
    """The union of two ascending lists of disjoint ranges, coalesced."""
    out: list[Range] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if j >= len(b) or (i < len(a) and a[i][0] <= b[j][0]):
            start, stop = a[i]
            i += 1
        else:
            start, stop = b[j]
            j += 1
        if out and out[-1][1] >= start:
            if stop > out[-1][1]:
                out[-1] = (out[-1][0], stop)
        else:
            out.append((start, stop))
    return out


def _subtract(a: Sequence[Range], b: Sequence[Range]) -> list[Range]:
    """``a`` minus ``b``, both ascending and disjoint."""
    out: list[Range] = []
    j = 0
    for start, stop in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while start < stop and k < len(b) and b[k][0] < stop:
            if b[k][0] > start:
                out.append((start, b[k][0]))
            start = max(start, b[k][1])
            k += 1
        if start < stop:
            out.append((start, stop))
    return out


def _above(ranges: Sequence[Range], floor: int) -> list[Range]:
    """The parts of ascending ``ranges`` at or above ``floor``."""
    i = bisect.bisect_right(ranges, floor, key=lambda r: r[1])
    out = list(ranges[i:])
    if out and out[0][0] < floor:
        out[0] = (floor, out[0][1])
    return out


def interleave(columns: Sequence[Sequence[Range]], base: int, world: int) -> list[Range]:
    """The global ranges of per-rank local ranges: column ``r``'s local
    ``[a, b)`` covers global ``base + r + l * world`` for ``l`` in it.

    A sweep over the rows at the ranges' end points. Between two end points
    the set of covered columns is constant, kept as the sorted list of
    column positions where coverage changes (``edges``; a column's toggle
    flips the edges on both its sides), so each row of that stretch is the
    same runs of columns: all columns covered is one range for the whole
    stretch, none is nothing. O(E log E + output) for E end points; ranges
    of one column may touch (retained groups), never overlap."""
    events: list[tuple[int, int]] = []
    for r, ranges in enumerate(columns):
        for a, b in ranges:
            events.append((a, r))
            events.append((b, r))
    events.sort()
    edges: list[int] = []
    out: list[Range] = []
    full = [0, world]
    i, n = 0, len(events)
    while i < n:
        row = events[i][0]
        while i < n and events[i][0] == row:
            column = events[i][1]
            for x in (column, column + 1):
                k = bisect.bisect_left(edges, x)
                if k < len(edges) and edges[k] == x:
                    del edges[k]
                else:
                    edges.insert(k, x)
            i += 1
        if not edges or i >= n:
            continue  # nothing covered; after the last end point nothing is
        stop_row = events[i][0]
        if edges == full:
            _append(out, base + row * world, base + stop_row * world)
            continue
        runs = list(zip(edges[::2], edges[1::2], strict=True))
        for offset in range(base + row * world, base + stop_row * world, world):
            for a, b in runs:
                _append(out, offset + a, offset + b)
    return out


def _rows(ranges: Iterable[Range], base: int, world: int) -> Iterator[tuple[int, int, list[Range]]]:
    """The grid rows that global ``ranges`` cover, as ``(first, stop,
    columns)``: rows ``[first, stop)`` each have the covered ``columns``
    (ascending column intervals); rows not listed have none. A range over
    several rows gives its first row's tail, one stretch of full rows and
    its last row's head, so the output follows the ranges, not the rows."""
    row: int | None = None
    columns: list[Range] = []
    for x, y in ranges:
        if x < base:
            raise ValueError(f"range [{x}, {y}) lies below the base {base}")
        first, a = divmod(x - base, world)
        last, b = divmod(y - base, world)
        if row is not None and first != row:
            yield row, row + 1, columns
            columns = []
        row = first
        if first == last:
            _append(columns, a, b)
            continue
        _append(columns, a, world)
        yield first, first + 1, columns
        if last > first + 1:
            yield first + 1, last, [(0, world)]
        row, columns = (last, [(0, b)]) if b else (None, [])
    if row is not None:
        yield row, row + 1, columns


def deal(ranges: Iterable[Range], base: int, world: int) -> list[list[Range]]:
    """The inverse of ``interleave``: global ``ranges`` (ascending, at or
    above ``base``) as each rank's local ranges, coalesced.

    A sweep down the rows that the ranges cover (``_rows``): between two
    consecutive patterns of covered columns, only the columns that change
    are visited, each opening or closing one local range; a stretch of rows
    with the same pattern costs nothing. O(ranges + output)."""
    columns: list[list[Range]] = [[] for _ in range(world)]
    opened = [0] * world
    current: list[Range] = []
    until = 0  # the row at which ``current`` stops holding

    def switch(new: list[Range], row: int) -> None:
        for a, b in _subtract(current, new):
            for c in range(a, b):
                columns[c].append((opened[c], row))
        for a, b in _subtract(new, current):
            for c in range(a, b):
                opened[c] = row

    for first, stop, pattern in _rows(ranges, base, world):
        if first > until and current:
            switch([], until)
            current = []
        switch(pattern, first)
        current, until = pattern, stop
    switch([], until)
    return columns


# -- merge and split ------------------------------------------------------------------


def _consistent(
    shards: Sequence[ShardCheckpoint], fingerprint: str | None
) -> tuple[int, int, int, str, int | None]:
    """(base, world, step, global fingerprint, global stream_len) of one
    consistent set of records, or ``ShardMismatchError``."""
    if not shards:
        raise ShardMismatchError("no records given")
    for s in shards:
        if not isinstance(s, ShardCheckpoint):
            raise TypeError(f"merge_shards takes ShardCheckpoint values, got {type(s).__name__}")
    first = shards[0].share
    base, world = first.base, first.world
    other = [s.share.rank for s in shards if (s.share.base, s.share.world) != (base, world)]
    if other:
        raise ShardMismatchError(
            f"the shares do not tile one stream: rank {first.rank} reads {world} ranks "
            f"from {base}, others another tiling",
            other,
        )
    seen: set[int] = set()
    duplicated: set[int] = set()
    for s in shards:
        (duplicated if s.share.rank in seen else seen).add(s.share.rank)
    if duplicated:
        raise ShardMismatchError("a rank's record is given twice", duplicated)
    missing = sorted(set(range(world)) - seen)
    if missing:
        raise ShardMismatchError(f"{len(missing)} of {world} ranks' records are missing", missing)
    steps = sorted({s.step for s in shards})
    if len(steps) > 1:
        first_step = shards[0].step
        raise ShardMismatchError(
            f"the records were taken at different steps {steps[:8]}",
            [s.share.rank for s in shards if s.step != first_step],
        )
    fps = {s.fingerprint for s in shards}
    if len(fps) > 1:
        found = shards[0].fingerprint
        raise ShardMismatchError(
            "the records belong to different streams (fingerprints differ)",
            [s.share.rank for s in shards if s.fingerprint != found],
        )
    (global_fp,) = fps
    if fingerprint is not None and global_fp != fingerprint:
        raise FingerprintMismatchError(expected=fingerprint, found=global_fp)
    lens = [s.checkpoint.stream_len for s in shards]
    if all(n is None for n in lens):
        return base, world, steps[0], global_fp, None
    if any(n is None for n in lens):
        raise ShardMismatchError(
            "some records are of an unbounded stream, others of a finite one",
            [s.share.rank for s in shards if s.checkpoint.stream_len is None],
        )
    stream_len = base + sum(n for n in lens if n is not None)
    off = [s.share.rank for s in shards if s.checkpoint.stream_len != s.share.local_len(stream_len)]
    if off:
        raise ShardMismatchError(
            f"the ranks' stream lengths do not add up to one stream of {stream_len} ordinals",
            off,
        )
    return base, world, steps[0], global_fp, stream_len


def merge_shards(
    shards: Iterable[ShardCheckpoint],
    *,
    fingerprint: str | None = None,
    max_window: int = LedgerConfig().max_window,
) -> Checkpoint:
    """The global record of one multi-rank checkpoint: the records of ranks
    ``0..world-1`` of one tiling, taken at one step.

    The cut is the lowest unresolved global ordinal; resolved above it is
    the union of the ranks' resolved ordinals (a rank's cut prefix is listed
    as trained: its ledger forgot which of those were dropped), retained the
    union of their retained ones, attempts are mapped. Every ordinal below
    the tiling's base is taken as resolved: a base is at or below the cut
    of the record it was split from. ``fingerprint`` (the global stream's)
    is checked if given.

    ``max_window`` is the ranks' ``LedgerConfig.max_window``: the set is
    refused, before anything is merged, when it spans more than ``world *
    max_window`` global ordinals above the merged cut, more than the ranks'
    ledgers could have held (a forged record's huge range, or a rank's cut
    far past the others'). A merge emits up to a range per row of the grid,
    so this bounds its work by the records' count and the window, never by
    a number written in a record.

    Raises ``ShardMismatchError`` for a set that is not one checkpoint (a
    rank missing or twice, mixed steps, mixed streams, another tiling, stream
    lengths that do not add up), ``CheckpointMismatchError`` for a set
    spanning more than the window, ``FingerprintMismatchError`` for another
    stream than ``fingerprint``."""
    shards = list(shards)
    base, world, _, global_fp, stream_len = _consistent(shards, fingerprint)
    _check_count("max_window", max_window, low=1)
    by_rank = sorted(shards, key=lambda s: s.share.rank)
    resolved: list[list[Range]] = []
    dropped: list[list[Range]] = []
    retained: list[list[Range]] = []
    attempts: list[tuple[int, int]] = []
    sealed: list[tuple[int, int, int]] = []
    sizes = {s.checkpoint.samples for s in by_rank}
    if len(sizes) > 1:
        raise ShardMismatchError(f"the ranks' groups have different sizes {sorted(sizes)}")
    cut: int | None = None
    for s in by_rank:
        c = s.checkpoint
        share = s.share
        sealed.extend((share.global_ordinal(o), sib, a) for o, sib, a in c.sealed)
        resolved.append(
            _union(_union([(0, c.cut)] if c.cut else [], c.trained_above_cut), c.dropped_above_cut)
        )
        dropped.append(list(c.dropped_above_cut))
        retained.append(list(c.retained))
        attempts.extend((share.global_ordinal(o), n) for o, n in c.failures)
        if c.stream_len is None or c.cut < c.stream_len:
            g = share.global_ordinal(c.cut)
            cut = g if cut is None else min(cut, g)
    if cut is None:  # every rank drained its share
        assert stream_len is not None
        cut = stream_len
    # The highest global ordinal any record names (its cut prefix included),
    # from the ranks' end points alone: nothing is expanded yet.
    top = -1
    for s in by_rank:
        local_top = s.checkpoint.highest_ordinal()
        if local_top >= 0:
            top = max(top, s.share.global_ordinal(local_top))
    if top + 1 - cut > world * max_window:
        raise CheckpointMismatchError(
            f"the {world} ranks' records span {top + 1 - cut} global ordinals above the merged "
            f"cut {cut}, more than world * max_window = {world * max_window}: refused before "
            "merging (pass the ranks' max_window if a real run had that many in flight)"
        )
    floor = cut + 1
    all_resolved = interleave(resolved, base, world)
    all_dropped = _above(interleave(dropped, base, world), floor)
    attempts.sort()
    sealed.sort()
    return Checkpoint(
        cut=cut,
        trained_above_cut=_above(_subtract(all_resolved, all_dropped), floor),
        dropped_above_cut=all_dropped,
        retained=_above(interleave(retained, base, world), cut),
        failures=attempts,
        fingerprint=global_fp,
        stream_len=stream_len,
        samples=sizes.pop(),
        # Each rank numbers its own attempts; the highest counter is above
        # every attempt of every rank, so any rank may resume from it.
        next_attempt=max(s.checkpoint.next_attempt for s in by_rank),
        sealed=sealed,
    )


def split_checkpoint(
    checkpoint: Checkpoint, world: int, *, step: int, base: int | None = None
) -> tuple[ShardCheckpoint, ...]:
    """The records of ``world`` ranks reading the stream of ``checkpoint``
    (a global record: ``merge_shards``' or one ledger's) from ``base``, at
    or below its cut (default: the cut), in rank order. Each rank's cut is
    its lowest unresolved local ordinal; what a rank resolved below it is
    forgotten, as its ledger would. ``step`` is stamped on every record."""
    _check_count("world", world, low=1)
    _check_count("step", step)
    if base is None:
        base = checkpoint.cut
    _check_count("base", base)
    if base > checkpoint.cut:
        raise ValueError(
            f"base {base} lies above the cut {checkpoint.cut}: the ordinals between are "
            "not all resolved, and no share would read them"
        )
    shares = Share.tiling(world, base=base)
    prefix = [(base, checkpoint.cut)] if base < checkpoint.cut else []
    trained = deal(_union(prefix, checkpoint.trained_above_cut), base, world)
    dropped = deal(checkpoint.dropped_above_cut, base, world)
    retained = deal(checkpoint.retained, base, world)
    attempts: list[list[tuple[int, int]]] = [[] for _ in range(world)]
    for o, n in checkpoint.failures:
        row, r = divmod(o - base, world)
        attempts[r].append((row, n))
    sealed: list[list[tuple[int, int, int]]] = [[] for _ in range(world)]
    for o, sib, a in checkpoint.sealed:
        row, r = divmod(o - base, world)
        sealed[r].append((row, sib, a))
    out = []
    for share in shares:
        t, d = trained[share.rank], dropped[share.rank]
        cut = i = j = 0
        while True:  # the cut: past every range that starts where it stands
            if i < len(t) and t[i][0] == cut:
                cut = t[i][1]
                i += 1
            elif j < len(d) and d[j][0] == cut:
                cut = d[j][1]
                j += 1
            else:
                break
        local = Checkpoint(
            cut=cut,
            trained_above_cut=t[i:],
            dropped_above_cut=d[j:],
            retained=retained[share.rank],
            failures=attempts[share.rank],
            fingerprint=share.fingerprint(checkpoint.fingerprint),
            stream_len=share.local_len(checkpoint.stream_len),
            samples=checkpoint.samples,
            next_attempt=checkpoint.next_attempt,
            sealed=sealed[share.rank],
        )
        out.append(ShardCheckpoint(share, step, local))
    return tuple(out)


def reshard(
    shards: Iterable[ShardCheckpoint],
    world: int,
    *,
    fingerprint: str | None = None,
    max_window: int = LedgerConfig().max_window,
) -> tuple[ShardCheckpoint, ...]:
    """The resume records of ``world`` ranks from one multi-rank checkpoint
    of any world size, in rank order (rank ``r`` resumes from ``[r]``).

    With the same world size the shares are kept (same base), so every rank
    resumes from exactly the record it wrote and its buffer stays its own;
    with another, the new shares start at the merged cut. Every rank of the
    new world computes the same plan from the same records, with no
    communication. Raises as ``merge_shards`` (``max_window`` is its)."""
    shards = list(shards)
    merged = merge_shards(shards, fingerprint=fingerprint, max_window=max_window)
    old = shards[0].share
    base = old.base if world == old.world else merged.cut
    return split_checkpoint(merged, world, step=shards[0].step, base=base)
