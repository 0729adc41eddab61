"""The persistent map against a dict, its structural sharing, and the
range codec of the checkpoint record (``_trie.py`` and ``_ranges.py``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core._ranges import to_ranges
from frontier_core._trie import IntMap

pytestmark = pytest.mark.mutation

keys = st.one_of(st.integers(0, 70), st.integers(0, 5000), st.integers(0, 10**8))
batches = st.lists(
    st.lists(st.tuples(keys, st.one_of(st.none(), st.integers(0, 9))), max_size=12), max_size=25
)


@settings(max_examples=300, deadline=None)
@given(batches=batches, start=keys)
def test_intmap_behaves_like_a_dict_and_never_changes_old_versions(
    batches: list[list[tuple[int, int | None]]], start: int
) -> None:
    versions = [(IntMap(), {})]
    for batch in batches:
        m, ref = versions[-1]
        new_ref = dict(ref)
        for k, v in batch:
            if v is None:
                new_ref.pop(k, None)
            else:
                new_ref[k] = v
        versions.append((m.updated(batch), new_ref))
    for m, ref in versions:
        assert dict(m.items()) == ref
        assert len(m) == len(ref)
        assert list(m) == sorted(ref)
        assert list(m.items(start)) == sorted((k, v) for k, v in ref.items() if k >= start)
        assert m.min_key() == (min(ref) if ref else None)
        assert m.max_key() == (max(ref) if ref else None)
        for k in ref:
            assert m.get(k) == ref[k] and k in m
        assert m.get(start) == ref.get(start)
        probe = [*ref, start, start + 1, start + 33, *ref]
        assert m.get_many(probe) == [ref.get(k) for k in probe]


def test_empty_nodes_are_pruned_so_memory_follows_the_keys() -> None:
    m = IntMap().updated([(k, 1) for k in range(100_000)])
    assert m.node_count() > 3000
    m = m.updated([(k, None) for k in range(99_990)])
    assert len(m) == 10
    assert m.node_count() <= 5  # one path to the remaining leaf


def test_an_update_copies_only_its_path() -> None:
    m = IntMap().updated([(k, 1) for k in range(32 * 1024)])
    m2 = m.updated([(5, 2)])
    # The untouched subtrees are the very same objects.
    shared = sum(a is b for a, b in zip(m._root, m2._root, strict=True))  # type: ignore[arg-type]
    assert shared == 31


def test_to_ranges_refuses_unsorted_input_by_ordinal() -> None:
    assert to_ranges([0, 1, 2, 5, 7, 8]) == ((0, 3), (5, 6), (7, 9))
    for bad, at in (([3, 1], 1), ([0, 1, 1], 1)):
        with pytest.raises(ValueError) as info:
            to_ranges(bad)
        assert str(info.value) == f"ordinals not ascending and distinct at {at}"


def test_intmap_truth_membership_and_construction() -> None:
    empty = IntMap()
    one = IntMap.from_items([(7, 3)])
    assert not empty and one and IntMap.from_items([(0, 1), (40, 2)])
    assert 7 in one and 6 not in one and -1 not in one and "7" not in one
    assert list(one.items()) == [(7, 3)]


def test_intmap_get_many_switches_leaves_correctly() -> None:
    """``get_many`` caches the last leaf: keys whose leaf ids collide under
    a wrong shift (1 and 1024, 0 and 32) must still read their own leaf."""
    m = IntMap.from_items([(0, 9), (1, 5), (32, 6), (1024, 7), (1025, 8)])
    assert m.get_many([1024, 1, 1025, 0, 32, 33]) == [7, 5, 8, 9, 6, None]
    assert m.get_many([1, 1024, 32, 0]) == [5, 7, 6, 9]


def test_intmap_node_count_counts_each_node_once() -> None:
    """One leaf; a root over two leaves; two levels over two leaves."""
    assert IntMap.from_items([(0, 1)]).node_count() == 1
    assert IntMap.from_items([(0, 1), (32, 2)]).node_count() == 3
    assert IntMap.from_items([(0, 1), (1024, 2)]).node_count() == 5


def test_intmap_bulk_update_groups_keys_by_child() -> None:
    keys = list(range(0, 3000, 7))
    m = IntMap().updated([(k, k + 1) for k in keys])
    assert list(m.items()) == [(k, k + 1) for k in keys]
    m = m.updated([(k, None) for k in keys[::2]] + [(5000, 1)])
    assert list(m.items()) == [(k, k + 1) for k in keys[1::2]] + [(5000, 1)]
