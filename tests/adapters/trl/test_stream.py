"""The TRL binding's stream: order, layout, fingerprint, and the sampler's
layout against TRL's own ``RepeatSampler``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ._need import need_trl

need_trl()

from frontier_adapters.run import Run  # noqa: E402
from frontier_adapters.trl import (  # noqa: E402
    FrontierSampler,
    GenerationBlocks,
    Layout,
    OrdinalRows,
    StreamOrder,
    dataset_fingerprint,
    stream_source,
)

from frontier_core import FailurePolicy, LedgerConfig, Status  # noqa: E402


def make_blocks(
    tmp: Path,
    n: int = 12,
    *,
    prompts: int = 3,
    g: int = 2,
    repeat: int = 2,
    epochs: int = 2,
    shuffle: bool = False,
    grad_accum: int = 1,
) -> GenerationBlocks:
    """Blocks over a fresh run in ``tmp`` (closed when the test ends)."""
    order = StreamOrder(n, seed=0, shuffle=shuffle)
    config = LedgerConfig(stream_len=epochs * n, fingerprint="fp", on_failure=FailurePolicy.DROP)
    run = Run.open(tmp, stream_source(order, epochs=epochs, batch_size=prompts), config)
    layout = Layout(prompts=prompts, num_generations=g, repeat=repeat, grad_accum=grad_accum)
    return GenerationBlocks(run, order, layout, None)


def test_the_order_is_the_torch_bindings() -> None:
    """The torch binding's order: a loader and a TRL run over one dataset
    and seed walk the same stream, and epochs differ."""
    from frontier_adapters.torch import StreamOrder as TorchOrder

    assert StreamOrder is TorchOrder
    order = StreamOrder(17, seed=5, shuffle=True)
    assert order.permutation(0) != order.permutation(1)
    assert sorted(order.index(o) for o in range(17, 34)) == list(range(17))


def test_one_epoch_of_the_sampler_is_repeat_samplers_layout(tmp_path: Path) -> None:
    """Without shuffle, ordinals of epoch 0 are dataset indices: the
    sampler's sequence is RepeatSampler's, index for index."""
    from trl.trainer.utils import RepeatSampler

    blocks = make_blocks(tmp_path, 12, prompts=3, g=2, repeat=2, epochs=1)
    theirs = list(
        RepeatSampler(
            list(range(12)), mini_repeat_count=2, batch_size=3, repeat_count=2, shuffle=False
        )
    )
    assert len(FrontierSampler(blocks)) == len(theirs)
    mine = list(FrontierSampler(blocks))
    assert mine == theirs


def test_blocks_straddle_the_epoch_boundary_and_the_tail_is_dropped_on_record(
    tmp_path: Path,
) -> None:
    blocks = make_blocks(tmp_path, 10, prompts=3, g=1, repeat=1, epochs=2)
    assert len(FrontierSampler(blocks)) == 18  # 20 ordinals: 6 blocks of 3, a tail of 2
    dealt = []
    while (block := blocks.next_block()) is not None:
        dealt.append(block)
    assert dealt == [tuple(range(i, i + 3)) for i in range(0, 18, 3)]  # (9, 10, 11) straddles
    assert [blocks.run.ledger.status(o) for o in (18, 19)] == [Status.DROPPED, Status.DROPPED]


def test_layout_updates() -> None:
    assert Layout(prompts=2, num_generations=4, repeat=1, grad_accum=1).updates(12) == 12
    assert Layout(prompts=2, num_generations=4, repeat=2, grad_accum=1).updates(12) == 24
    assert Layout(prompts=2, num_generations=4, repeat=1, grad_accum=4).updates(6) == 2
    assert Layout(prompts=2, num_generations=4, repeat=3, grad_accum=2).updates(3) == 5
    with pytest.raises(ValueError):
        Layout(prompts=0, num_generations=4, repeat=1, grad_accum=1)


def test_ordinal_rows_carry_the_ordinal() -> None:
    import datasets

    ds = datasets.Dataset.from_list([{"prompt": f"p{i}"} for i in range(5)])
    order = StreamOrder(5, seed=0, shuffle=True)
    rows = OrdinalRows(ds, order)
    got = rows.__getitems__([0, 7, 7])
    assert [r["frontier_ordinal"] for r in got] == [0, 7, 7]
    assert got[1]["prompt"] == f"p{order.index(7)}"
    assert rows[3] == {"prompt": f"p{order.index(3)}", "frontier_ordinal": 3}


def test_the_fingerprint_covers_rows_seed_and_shuffle_not_the_layout() -> None:
    import datasets

    rows: list[dict[str, Any]] = [{"prompt": f"p{i}", "answer": str(i)} for i in range(7)]
    ds = datasets.Dataset.from_list(rows)
    fp = dataset_fingerprint(ds, seed=0, shuffle=True)
    assert fp == dataset_fingerprint(datasets.Dataset.from_list(rows), seed=0, shuffle=True)
    assert fp != dataset_fingerprint(ds, seed=1, shuffle=True)
    assert fp != dataset_fingerprint(ds, seed=0, shuffle=False)
    changed = [*rows[:3], {"prompt": "p3!", "answer": "3"}, *rows[4:]]
    assert fp != dataset_fingerprint(datasets.Dataset.from_list(changed), seed=0, shuffle=True)
    assert LedgerConfig(fingerprint=fp).fingerprint == fp
