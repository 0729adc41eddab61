"""The persistent map against a dict, and its structural sharing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core._trie import IntMap

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
