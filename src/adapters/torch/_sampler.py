"""A seekable prompt stream for map-style datasets.

The stream position is a pure function of the ordinal: ordinal ``o`` is
position ``o % n`` of epoch ``o // n`` (``n`` the dataset length), and that
position maps to a dataset index through the identity or through the epoch's
permutation, drawn from a ``torch.Generator`` seeded from ``(seed, epoch)``.
Nothing depends on what was yielded before, so a checkpoint is a few
integers and a resume seeks straight to the cut, with any batch size and any
worker count.

The sampler yields ``(ordinal, index)`` pairs; ``OrdinalDataset`` turns a
pair into ``(ordinal, row)`` inside the workers and ``collate_ordinals``
gathers a batch into an ``OrdinalBatch``, whose ``ordinals`` field carries the
rows' stream positions for the ledger. One loader iteration walks the whole
stream, all epochs, so batches may straddle an epoch boundary.

With a ``share`` (``frontier_core.Share``: one data-parallel rank's part of
the stream) the sampler walks that rank's local stream instead: local
ordinal ``l`` is global ordinal ``g = share.base + share.rank + l *
share.world``, which is row ``g % n`` of epoch ``g // n`` as above. It
yields ``(l, index)``: the rank's collector and ledger count local
ordinals, and every rank sees the same global order, whatever the world
size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar

import attrs
import torch
from torch.utils.data import Dataset, Sampler

from frontier_core import CheckpointCorruptError, CheckpointMismatchError, Share

T = TypeVar("T")

KEY_NEXT: Final = "next_ordinal"
KEY_SEED: Final = "seed"
KEY_DATASET_LEN: Final = "dataset_len"
KEY_SHUFFLE: Final = "shuffle"
KEY_STREAM_LEN: Final = "stream_len"
#: Only in the state of a sampler with a share (a rank's part of the stream).
KEY_SHARE: Final = "share"
_KEYS: Final = frozenset({KEY_NEXT, KEY_SEED, KEY_DATASET_LEN, KEY_SHUFFLE, KEY_STREAM_LEN})


def epoch_seed(seed: int, epoch: int) -> int:
    """The generator seed of ``epoch``: a hash of ``(seed, epoch)``, 63 bits."""
    digest = hashlib.sha256(f"frontier:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@attrs.frozen
class StreamOrder:
    """The order of a stream over a dataset of ``dataset_len`` rows.

    ``index(o)`` is O(1) once the epoch's permutation is cached (one
    ``torch.randperm`` per epoch, the last two epochs are kept).
    """

    dataset_len: int
    seed: int = 0
    shuffle: bool = True
    _cache: dict[int, list[int]] = attrs.field(
        factory=dict, init=False, eq=False, repr=False, alias="_cache"
    )

    def __attrs_post_init__(self) -> None:
        if type(self.dataset_len) is not int or self.dataset_len < 1:
            raise ValueError(f"dataset_len must be an int >= 1, got {self.dataset_len!r}")
        if type(self.seed) is not int or self.seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {self.seed!r}")

    def locate(self, ordinal: int) -> tuple[int, int]:
        """``(epoch, position)`` of ``ordinal``."""
        if ordinal < 0:
            raise ValueError(f"ordinals are >= 0, got {ordinal}")
        return divmod(ordinal, self.dataset_len)

    def index(self, ordinal: int) -> int:
        """The dataset index of ``ordinal``."""
        epoch, position = self.locate(ordinal)
        if not self.shuffle:
            return position
        return self.permutation(epoch)[position]

    def permutation(self, epoch: int) -> list[int]:
        perm = self._cache.get(epoch)
        if perm is None:
            g = torch.Generator()
            g.manual_seed(epoch_seed(self.seed, epoch))
            perm = [int(i) for i in torch.randperm(self.dataset_len, generator=g).tolist()]
            if len(self._cache) >= 2:
                self._cache.pop(min(self._cache))
            self._cache[epoch] = perm
        return perm


class SeekableSampler(Sampler[tuple[int, int]]):
    """Yields ``(ordinal, dataset index)`` from the sampler's position to the
    stream's end (``epochs * dataset_len``, or forever if ``epochs`` is None).

    torchdata ``Stateful``: ``state_dict()`` is a fresh dict of JSON ints and
    bools describing the position of the most recently created iterator;
    ``load_state_dict`` (or ``seek``) sets a one-shot start that the next
    iterator to yield consumes; later iterators start again at ordinal 0.
    ``__iter__`` may be called before ``load_state_dict`` (torchdata does):
    the body is lazy, so those early iterators are harmless.

    With ``share``, ordinals are the share's local ordinals (see the
    module's docstring) and ``stream_len`` the share's local length; the
    state names the share, and a state of another share is refused.
    """

    def __init__(
        self,
        dataset_len: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        epochs: int | None = 1,
        share: Share | None = None,
    ) -> None:
        if epochs is not None and (type(epochs) is not int or epochs < 1):
            raise ValueError(f"epochs must be None or an int >= 1, got {epochs!r}")
        if share is not None and not isinstance(share, Share):
            raise TypeError(f"share must be a frontier_core.Share, got {type(share).__name__}")
        self.order = StreamOrder(dataset_len, seed, shuffle)
        self.epochs = epochs
        self.share = share
        self._next = 0
        self._seek: int | None = None

    @property
    def global_stream_len(self) -> int | None:
        """Ordinals of the whole stream (all ranks), ``None`` when unbounded."""
        return None if self.epochs is None else self.epochs * self.order.dataset_len

    @property
    def stream_len(self) -> int | None:
        """Ordinals this sampler will yield (its share's, with a share), or
        ``None`` when unbounded."""
        if self.share is not None:
            return self.share.local_len(self.global_stream_len)
        return self.global_stream_len

    def __len__(self) -> int:
        if self.stream_len is None:
            raise TypeError("an unbounded SeekableSampler has no length")
        return self.stream_len

    def seek(self, ordinal: int) -> None:
        """Make the next iterator start at ``ordinal``."""
        n = self.stream_len
        if type(ordinal) is not int or ordinal < 0 or (n is not None and ordinal > n):
            raise ValueError(f"cannot seek to {ordinal!r}: the stream holds ordinals [0, {n})")
        self._seek = ordinal

    @property
    def position(self) -> int:
        """The ordinal the sampler yields next."""
        return self._next if self._seek is None else self._seek

    def __iter__(self) -> Iterator[tuple[int, int]]:
        start = self._seek if self._seek is not None else 0
        self._seek = None
        self._next = start
        stop = self.stream_len
        n = self.order.dataset_len
        o = start
        if self.share is not None:
            yield from self._iter_share(o, stop)
            return
        # One epoch at a time over its permutation: the per-row work is a
        # list step and two stores (this loop runs once per prompt).
        while stop is None or o < stop:
            epoch, position = divmod(o, n)
            end = n if stop is None else min(n, position + stop - o)
            indices: Sequence[int] = (
                self.order.permutation(epoch)[position:end]
                if self.order.shuffle
                else range(position, end)
            )
            for index in indices:
                o += 1
                self._next = o
                yield o - 1, index

    def _iter_share(self, o: int, stop: int | None) -> Iterator[tuple[int, int]]:
        """The share's local ordinals from ``o``: one epoch at a time, every
        ``world``-th position of its permutation from the first global
        ordinal of the share in that epoch."""
        share = self.share
        assert share is not None
        world = share.world
        n = self.order.dataset_len
        while stop is None or o < stop:
            epoch, position = divmod(share.global_ordinal(o), n)
            count = -((position - n) // world)  # positions position, +world, ... < n
            if stop is not None:
                count = min(count, stop - o)
            end = position + count * world
            indices: Sequence[int] = (
                self.order.permutation(epoch)[position:end:world]
                if self.order.shuffle
                else range(position, end, world)
            )
            for index in indices:
                o += 1
                self._next = o
                yield o - 1, index

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            KEY_NEXT: self.position,
            KEY_SEED: self.order.seed,
            KEY_DATASET_LEN: self.order.dataset_len,
            KEY_SHUFFLE: self.order.shuffle,
            KEY_STREAM_LEN: self.stream_len,
        }
        if self.share is not None:
            state[KEY_SHARE] = self.share.to_json()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Seek to the saved position after checking that the saved stream is
        this one (same seed, dataset length, shuffle flag and length).

        Raises ``CheckpointCorruptError`` for a malformed state and
        ``CheckpointMismatchError`` for another stream."""
        self.seek(read_position(state_dict, self))


def read_position(state: Mapping[str, Any], sampler: SeekableSampler) -> int:
    """Validate a sampler state against ``sampler``; return its position."""
    if not isinstance(state, Mapping):
        raise CheckpointCorruptError(f"sampler state must be a dict, got {type(state).__name__}")
    keys = set(state)
    expected = _KEYS | {KEY_SHARE} if sampler.share is not None else _KEYS
    if keys != expected:
        if sampler.share is None and keys == _KEYS | {KEY_SHARE}:
            raise CheckpointMismatchError(
                f"the saved stream is one rank's share ({state[KEY_SHARE]!r:.80}) but this "
                "sampler reads the whole stream: build it with that share"
            )
        if sampler.share is not None and keys == _KEYS:
            raise CheckpointMismatchError(
                f"the saved stream is the whole stream but this sampler reads {sampler.share}"
            )
        raise CheckpointCorruptError(
            f"sampler state has missing keys {sorted(expected - keys)} "
            f"and unknown keys {sorted(keys - expected)}"
        )
    mine = sampler.state_dict()
    if sampler.share is not None:
        saved_share = Share.from_json(state[KEY_SHARE])
        if saved_share != sampler.share:
            raise CheckpointMismatchError(
                f"the saved stream is {saved_share}, but this sampler reads {sampler.share}: "
                "reshard the checkpoint (frontier_core.reshard) and build the sampler "
                "with the share of the resharded record"
            )
    for key in (KEY_SEED, KEY_DATASET_LEN, KEY_SHUFFLE):
        if state[key] != mine[key] or type(state[key]) is not type(mine[key]):
            raise CheckpointMismatchError(
                f"the saved stream has {key}={state[key]!r} but this sampler has "
                f"{key}={mine[key]!r}: resuming would put the cut on the wrong prompts"
            )
    # More epochs continue the saved stream (an ordinal's row does not depend
    # on how many epochs follow); fewer would cut saved ordinals off.
    saved_len, my_len = state[KEY_STREAM_LEN], mine[KEY_STREAM_LEN]
    if saved_len is not None and (type(saved_len) is not int or saved_len < 0):
        raise CheckpointCorruptError(f"sampler stream_len {saved_len!r:.40} is not an int >= 0")
    if my_len is not None and (saved_len is None or my_len < saved_len):
        raise CheckpointMismatchError(
            f"the saved stream has stream_len={saved_len!r} but this sampler has "
            f"stream_len={my_len!r}: a resume may lengthen the stream, never shorten it"
        )
    position = state[KEY_NEXT]
    n = sampler.stream_len
    if type(position) is not int or position < 0 or (n is not None and position > n):
        raise CheckpointCorruptError(f"sampler position {position!r} is outside [0, {n}]")
    return position


class OrdinalDataset(Dataset[tuple[int, T]], Generic[T]):
    """Wraps a map-style dataset: ``ds[(ordinal, index)] == (ordinal, dataset[index])``."""

    def __init__(self, dataset: Sequence[T] | Dataset[T]) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> tuple[int, T]:
        ordinal, index = key
        return ordinal, self.dataset[index]

    def __getitems__(self, keys: Sequence[tuple[int, int]]) -> list[tuple[int, T]]:
        """A batch in one call (torch's fetcher prefers this), delegated to
        the dataset's own ``__getitems__`` when it has one."""
        batched = getattr(self.dataset, "__getitems__", None)
        if batched is not None:
            rows = batched([index for _, index in keys])
            return [(o, row) for (o, _), row in zip(keys, rows, strict=True)]
        dataset = self.dataset
        return [(o, dataset[index]) for o, index in keys]


@attrs.frozen
class OrdinalBatch(Generic[T]):
    """A batch of rows with their stream ordinals, ``ordinals[i]`` for
    ``rows[i]``. Rows are not collated: collate what ``take`` returns."""

    ordinals: tuple[int, ...]
    rows: list[T]

    def __len__(self) -> int:
        return len(self.ordinals)


def collate_ordinals(items: Sequence[tuple[int, T]]) -> OrdinalBatch[T]:
    """The ``collate_fn`` for ``OrdinalDataset``: keeps every row's ordinal."""
    return OrdinalBatch(tuple(map(int, [o for o, _ in items])), [row for _, row in items])


class CollateRows:
    """A ``collate_fn`` for ``OrdinalDataset`` that also collates the rows
    with ``collate`` (e.g. torch's ``default_collate``) inside the worker, so
    one batch, not one object per row, crosses the process boundary. The
    batch's ``rows`` is then the collated batch, which must still be a
    sequence of the rows (``len`` and iteration by row), as a stacked tensor
    is: the collector holds one view per row. Picklable (for spawn)."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, items: Sequence[tuple[int, Any]]) -> OrdinalBatch[Any]:
        return OrdinalBatch(
            tuple(map(int, [o for o, _ in items])), self.collate([row for _, row in items])
        )
