"""A persistent map from non-negative ints to small ints.

The ledger must hand out a new value on every transition and leave the old
one intact, yet a transition over k ordinals may not copy a state that holds
100k of them. This is a bit-partitioned trie (the structure behind Clojure's
vectors): 32-way nodes as tuples, ordinals as paths of 5-bit digits. An
update copies only the nodes on the paths it touches, so a batch of k keys
costs O(k + touched nodes * 32) and shares everything else with the old map.

Rules of this module:

* Values are ints and never ``None``; ``None`` marks an empty slot.
* Empty nodes are pruned to ``None``, so the size of a map is proportional to
  the keys it holds, never to the range of keys it has ever held. The height
  is that of the largest key ever stored (log32 of it: 5 levels for 10**7).
* Nothing here knows what the values mean; the ledger does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

_BITS = 5
_WIDTH = 1 << _BITS
_MASK = _WIDTH - 1
_EMPTY_NODE: tuple[None, ...] = (None,) * _WIDTH

# A node is a tuple of _WIDTH slots: child nodes above the leaf level, values
# (or None) at it. The slots are typed Any on purpose: the element type
# depends on the level, which mypy cannot express; the public methods are
# typed exactly.
_Node = tuple[Any, ...]


class IntMap:
    """An immutable map ``int -> int`` with cheap batched updates.

    Keys must be non-negative ints. Iteration is in ascending key order.
    """

    __slots__ = ("_root", "_shift", "_size")

    _root: _Node | None
    _shift: int
    _size: int

    def __init__(self) -> None:
        self._root = None
        self._shift = 0
        self._size = 0

    @classmethod
    def _make(cls, root: _Node | None, shift: int, size: int) -> IntMap:
        new = cls.__new__(cls)
        new._root = root
        new._shift = shift
        new._size = size
        return new

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def get(self, key: int) -> int | None:
        """Return the value at ``key``, or ``None`` when it is absent."""
        shift = self._shift
        if key >> (shift + _BITS):
            return None
        node: _Node | None = self._root
        while node is not None:
            slot = node[(key >> shift) & _MASK]
            if shift == 0:
                value: int | None = slot
                return value
            node = slot
            shift -= _BITS
        return None

    def get_many(self, keys: Iterable[int]) -> list[int | None]:
        """``[self.get(k) for k in keys]``, walking the trie once per leaf
        for runs of keys that share one (a batch of nearby ordinals)."""
        out: list[int | None] = []
        append = out.append
        leaf_id = -1
        leaf: _Node | None = None
        for key in keys:
            if key >> _BITS != leaf_id:
                leaf_id = key >> _BITS
                leaf = self._leaf(key)
            append(None if leaf is None else leaf[key & _MASK])
        return out

    def _leaf(self, key: int) -> _Node | None:
        shift = self._shift
        if key >> (shift + _BITS):
            return None
        node = self._root
        while node is not None and shift:
            node = node[(key >> shift) & _MASK]
            shift -= _BITS
        return node

    def __contains__(self, key: object) -> bool:
        return isinstance(key, int) and key >= 0 and self.get(key) is not None

    def updated(self, changes: Sequence[tuple[int, int | None]]) -> IntMap:
        """Return a map with each ``(key, value)`` applied; ``None`` deletes.

        Keys may come in any order; a key given twice takes its last value.
        """
        if not changes:
            return self
        items = sorted(dict(changes).items())
        top = items[-1][0]
        shift = self._shift
        root = self._root
        # Grow the root until the largest key fits under it. The old root
        # becomes slot 0 of the new one, so existing paths stay valid.
        while top >> (shift + _BITS):
            if root is not None:
                root = (root, *_EMPTY_NODE[1:])
            shift += _BITS
        root, delta = _update(root, shift, items, 0, len(items))
        return IntMap._make(root, shift, self._size + delta)

    def items(self, start: int = 0) -> Iterator[tuple[int, int]]:
        """Yield ``(key, value)`` pairs with ``key >= start``, ascending."""
        if self._root is not None:
            yield from _walk(self._root, self._shift, 0, max(start, 0))

    def __iter__(self) -> Iterator[int]:
        for key, _ in self.items():
            yield key

    def min_key(self) -> int | None:
        """The smallest key, in O(height) since empty nodes are pruned."""
        return self._edge(range(_WIDTH))

    def max_key(self) -> int | None:
        """The largest key, in O(height)."""
        return self._edge(range(_MASK, -1, -1))

    def _edge(self, order: range) -> int | None:
        # Follow the first non-empty slot in ``order`` at every level.
        node = self._root
        shift = self._shift
        prefix = 0
        while node is not None:
            index = next(i for i in order if node[i] is not None)
            prefix |= index << shift
            if shift == 0:
                return prefix
            node = node[index]
            shift -= _BITS
        return None

    def node_count(self) -> int:
        """How many nodes the map holds: its memory, for the size invariant."""
        return _count_nodes(self._root, self._shift)

    @classmethod
    def from_items(cls, pairs: Iterable[tuple[int, int]]) -> IntMap:
        return cls().updated(list(pairs))


def _update(
    node: _Node | None,
    shift: int,
    items: list[tuple[int, int | None]],
    lo: int,
    hi: int,
) -> tuple[_Node | None, int]:
    """Apply ``items[lo:hi]`` (sorted, all under ``node``); return the new
    node (``None`` when it ends up empty) and the change in key count."""
    slots: list[Any] = list(node) if node is not None else [None] * _WIDTH
    delta = 0
    if shift == 0:
        # Count the keys this leaf gains from its empty slots before and
        # after, in C, rather than branching on every key.
        empty = slots.count(None)
        for i in range(lo, hi):
            key, value = items[i]
            slots[key & _MASK] = value
        left = slots.count(None)
        return (None if left == _WIDTH else tuple(slots)), empty - left
    i = lo
    child_shift = shift - _BITS
    while i < hi:
        index = (items[i][0] >> shift) & _MASK
        j = i + 1
        while j < hi and (items[j][0] >> shift) & _MASK == index:
            j += 1
        slots[index], child_delta = _update(slots[index], child_shift, items, i, j)
        delta += child_delta
        i = j
    if slots.count(None) == _WIDTH:
        return None, delta
    return tuple(slots), delta


def _walk(node: _Node, shift: int, prefix: int, start: int) -> Iterator[tuple[int, int]]:
    # Skip whole subtrees that lie entirely below ``start``.
    first = 0
    if start > prefix:
        first = min((start - prefix) >> shift, _WIDTH)
    for index in range(first, _WIDTH):
        slot = node[index]
        if slot is None:
            continue
        base = prefix | (index << shift)
        if shift == 0:
            if base >= start:
                yield base, slot
        else:
            yield from _walk(slot, shift - _BITS, base, start)


def _count_nodes(node: _Node | None, shift: int) -> int:
    if node is None:
        return 0
    if shift == 0:
        return 1
    return 1 + sum(_count_nodes(child, shift - _BITS) for child in node)
