"""Compaction keeps exactly what the window needs (COMPACTION-PRESERVES-WINDOW)."""

from __future__ import annotations

from collections.abc import Container

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier_core.journal import (
    BytesPayload,
    JournalHeader,
    Mark,
    Progress,
    Record,
    Sealed,
    compact,
    decode,
    encode,
    replay,
)

from ._strategies import budget, fold_records, windows

pytestmark = pytest.mark.mutation


@budget(200)
@given(st.lists(fold_records, max_size=40), windows)
def test_replay_of_the_compaction_is_the_replay_restricted_to_the_window(
    recs: list[Record], window: Container[int]
) -> None:
    compacted = compact(recs, window)
    assert replay(compacted) == replay(recs).restrict(window)
    # Minimal: one record per sibling of the window, nothing outside it, no
    # mark, nothing fenced; and a fixed point.
    expected = replay(recs).restrict(window)
    assert len(compacted) == sum(len(g) for g in expected.groups.values())
    assert all(r.ordinal in window for r in compacted)
    assert len({(r.ordinal, r.sibling) for r in compacted}) == len(compacted)
    assert replay(compacted).fenced == 0
    assert compact(compacted, window) == compacted


@budget(150)
@given(st.lists(fold_records, max_size=30), st.lists(fold_records, max_size=15), windows)
def test_a_compacted_journal_stays_equivalent_as_it_grows(
    recs: list[Record], later: list[Record], window: Container[int]
) -> None:
    """What is appended after a compaction folds onto the compacted state as
    it would have onto the full one: the current attempts keep fencing."""
    compacted = list(compact(recs, window))
    assert replay(compacted + later).restrict(window) == replay(recs + later).restrict(window)


@budget(50)
@given(st.lists(fold_records, max_size=30), windows, st.integers(0, 10**6))
def test_the_compaction_survives_its_own_bytes(
    recs: list[Record], window: Container[int], base: int
) -> None:
    """Written as a journal continuing at ``base``, read back, replayed."""
    data = encode(JournalHeader("fp", "run", base), compact(recs, window))
    decoded = decode(data, fingerprint="fp", lineage="run")
    assert decoded.header.base == base
    assert replay(decoded.records) == replay(recs).restrict(window)


def test_what_compaction_keeps() -> None:
    p = BytesPayload
    recs: list[Record] = [
        Sealed(0, 0, 0, p(b"trained: outside the window")),
        Progress(1, 0, 0, p(b"old progress")),
        Progress(1, 0, 0, p(b"new progress")),
        Sealed(1, 1, 3, p(b"sealed")),
        Sealed(1, 1, 2, p(b"late, fenced")),
        Mark(5),
        Progress(2, 0, 1, p(b"attempt 1")),
        Progress(2, 0, 2, p(b"")),  # attempt 2 opened, nothing yet
    ]
    assert compact(recs, range(1, 10)) == (
        Progress(1, 0, 0, p(b"new progress")),
        Sealed(1, 1, 3, p(b"sealed")),
        Progress(2, 0, 2, p(b"")),
    )
    # The opened attempt still fences attempt 1 after the compaction.
    after = [*compact(recs, {2}), Sealed(2, 0, 1, p(b"late"))]
    assert replay(after).get(2, 0) == replay(recs).get(2, 0)
    assert compact(recs, set()) == ()
