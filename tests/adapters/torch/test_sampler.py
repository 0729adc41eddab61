"""The seekable sampler: order is a pure function of (seed, epoch), resume
seeks to the cut, and a resumed loader yields the uninterrupted tail."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.torch import (  # noqa: E402
    OrdinalBatch,
    SeekableSampler,
    StreamOrder,
    make_seekable_loader,
)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from frontier_core import CheckpointCorruptError, CheckpointMismatchError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


def rows(n: int) -> list[str]:
    return [f"row{i}" for i in range(n)]


def flatten(batches: list[OrdinalBatch[str]]) -> list[tuple[int, str]]:
    return [pair for b in batches for pair in zip(b.ordinals, b.rows, strict=True)]


@given(n=st.integers(1, 40), seed=st.integers(0, 2**32), epoch=st.integers(0, 5))
@settings(max_examples=60, deadline=None)
def test_each_epoch_is_a_permutation(n: int, seed: int, epoch: int) -> None:
    order = StreamOrder(n, seed, shuffle=True)
    indices = [order.index(epoch * n + p) for p in range(n)]
    assert sorted(indices) == list(range(n))
    # A pure function: a fresh instance, asked in another order, agrees.
    other = StreamOrder(n, seed, shuffle=True)
    assert [other.index(epoch * n + p) for p in reversed(range(n))] == indices[::-1]


def test_unshuffled_order_is_the_identity_per_epoch() -> None:
    order = StreamOrder(7, 3, shuffle=False)
    assert [order.index(o) for o in range(21)] == list(range(7)) * 3
    assert order.locate(15) == (2, 1)


def test_epochs_get_different_permutations() -> None:
    order = StreamOrder(50, 0, shuffle=True)
    assert order.permutation(0) != order.permutation(1)
    assert StreamOrder(50, 1).permutation(0) != order.permutation(0)


def test_sampler_state_is_fresh_json_and_one_shot() -> None:
    sampler = SeekableSampler(5, seed=2, epochs=2)
    early = iter(sampler)  # torchdata calls iter() before load_state_dict
    state = sampler.state_dict()
    assert state is not sampler.state_dict()
    state["next_ordinal"] = 7
    sampler.load_state_dict(json.loads(json.dumps(state)))
    first = [o for o, _ in sampler]
    assert first == [7, 8, 9]
    assert [o for o, _ in sampler] == list(range(10))  # the seek was one-shot
    del early


def test_sampler_refuses_another_stream() -> None:
    state = SeekableSampler(5, seed=2).state_dict()
    for kwargs, key in (
        ({"seed": 3}, "seed"),
        ({"shuffle": False, "seed": 2}, "shuffle"),
    ):
        with pytest.raises(CheckpointMismatchError, match=key):
            SeekableSampler(5, **kwargs).load_state_dict(state)  # type: ignore[arg-type]
    # More epochs continue the saved stream; fewer would cut it short.
    two = SeekableSampler(5, seed=2, epochs=2).state_dict()
    SeekableSampler(5, seed=2, epochs=3).load_state_dict(two)
    SeekableSampler(5, seed=2, epochs=None).load_state_dict(two)
    with pytest.raises(CheckpointMismatchError, match="never shorten"):
        SeekableSampler(5, seed=2, epochs=1).load_state_dict(two)
    with pytest.raises(CheckpointMismatchError, match="dataset_len"):
        SeekableSampler(6, seed=2).load_state_dict(state)
    with pytest.raises(CheckpointCorruptError, match="missing keys"):
        SeekableSampler(5, seed=2).load_state_dict({"next_ordinal": 1})
    with pytest.raises(CheckpointCorruptError, match="outside"):
        SeekableSampler(5, seed=2).load_state_dict({**state, "next_ordinal": 6})


def _resume_tail(
    *, n: int, epochs: int, shuffle: bool, bs1: int, bs2: int, k: int, nw1: int, nw2: int
) -> None:
    ds = rows(n)
    full = flatten(
        list(make_seekable_loader(ds, batch_size=bs1, seed=5, shuffle=shuffle, epochs=epochs))
    )
    assert [o for o, _ in full] == list(range(n * epochs))
    loader = make_seekable_loader(
        ds, batch_size=bs1, seed=5, shuffle=shuffle, epochs=epochs, num_workers=nw1
    )
    it = iter(loader)
    head = flatten([next(it) for _ in range(k)])
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    assert head == full[: len(head)]
    # Seek a fresh loader with another batch size and worker count.
    pos = len(head)
    other = make_seekable_loader(
        ds, batch_size=bs2, seed=5, shuffle=shuffle, epochs=epochs, num_workers=nw2
    )
    other.sampler.seek(pos)
    assert flatten(list(other)) == full[pos:]
    # And a plain torch.utils.data.DataLoader.
    plain = make_seekable_loader(
        ds,
        batch_size=bs2,
        seed=5,
        shuffle=shuffle,
        epochs=epochs,
        num_workers=nw2,
        stateful=False,
    )
    assert type(plain) is torch.utils.data.DataLoader
    plain.sampler.seek(pos)
    assert flatten(list(plain)) == full[pos:]
    if nw1 == nw2:
        # torchdata's own resume path, batch size changed, same worker count.
        native = make_seekable_loader(
            ds, batch_size=bs2, seed=5, shuffle=shuffle, epochs=epochs, num_workers=nw2
        )
        native.load_state_dict(state)
        assert flatten(list(native)) == full[pos:]


@pytest.mark.parametrize("shuffle", [True, False])
@given(
    n=st.integers(2, 12),
    epochs=st.integers(1, 3),
    bs1=st.integers(1, 5),
    bs2=st.integers(1, 5),
    data=st.data(),
)
@settings(max_examples=40, deadline=None)
def test_resumed_loader_yields_the_tail_workers_0(
    shuffle: bool, n: int, epochs: int, bs1: int, bs2: int, data: st.DataObject
) -> None:
    batches = -(-n * epochs // bs1)
    k = data.draw(st.integers(0, batches - 1), label="batches before the save")
    _resume_tail(n=n, epochs=epochs, shuffle=shuffle, bs1=bs1, bs2=bs2, k=k, nw1=0, nw2=0)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize(("nw1", "nw2"), [(2, 2), (0, 2), (2, 0)])
def test_resumed_loader_yields_the_tail_workers_2(shuffle: bool, nw1: int, nw2: int) -> None:
    # 9 rows, 2 epochs, saved after 3 batches of 4 (inside epoch 1), resumed
    # with batches of 5: the tail crosses the epoch boundary.
    _resume_tail(n=9, epochs=2, shuffle=shuffle, bs1=4, bs2=5, k=3, nw1=nw1, nw2=nw2)
