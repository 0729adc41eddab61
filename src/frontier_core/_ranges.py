"""Sorted disjoint half-open ranges of ordinals: the checkpoint's wire form.

A long healthy run resolves ordinals almost in order, so the resolved
ordinals above the cut compress to a handful of ``[start, stop)`` pairs. The
worst case (every other ordinal) grows with the number of holes, never with
the length of the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

Range = tuple[int, int]

#: Every ordinal lies below this (the rollout journal's u64), and so does
#: every count: the ledger stamps no ordinal at or past it and every record
#: reader refuses a number above it, so that no value read from a record
#: costs more than its width (a cut of 2**5000 once made the next stamp
#: build a trie 1000 levels deep and raise ``RecursionError``).
LIMIT: Final = 1 << 64


def to_ranges(ordinals: Iterable[int]) -> tuple[Range, ...]:
    """Compress ascending, distinct ordinals into maximal half-open ranges."""
    out: list[Range] = []
    start = stop = -1
    for o in ordinals:
        if o == stop:
            stop += 1
            continue
        if o < stop:
            raise ValueError(f"ordinals not ascending and distinct at {o}")
        if stop >= 0:
            out.append((start, stop))
        start, stop = o, o + 1
    if stop >= 0:
        out.append((start, stop))
    return tuple(out)


def expand(ranges: Iterable[Range]) -> Iterator[int]:
    """The ordinals of ``ranges``, ascending."""
    for start, stop in ranges:
        yield from range(start, stop)


def count(ranges: Iterable[Range]) -> int:
    return sum(stop - start for start, stop in ranges)
