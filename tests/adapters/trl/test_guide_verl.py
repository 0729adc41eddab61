"""docs/guides/verl-fully-async.md: verl's fully-async rollouter, its real
data path on CPU.

The rollouter itself needs Ray placement groups and vLLM or SGLang servers
on GPUs, but its prompt path is verl's own code and runs here: the sampler
of ``create_rl_sampler`` under the ``StatefulDataLoader`` that
``_create_dataloader`` builds (``gen_batch_size`` 1, verl's ``collate_fn``),
walked by ``FullyAsyncRollouter._create_continuous_iterator``, and
``FullyAsyncRollouter.save_checkpoint``, which saves
``train_dataloader.state_dict()`` while prompts sit in the pending queue,
in flight and in the message queue (its TODO). This test measures what a
resume from that file loses, and runs the same path bound to frontier_core
(``StreamCollector`` over ``SnapshotSource``) with the same crash.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import types
from pathlib import Path
from typing import Any

import pytest

REQUIRED = os.environ.get("FRONTIER_REQUIRE_VERL") == "1"
try:
    importlib.import_module("torchdata")
    verl_utils = importlib.import_module("verl.trainer.ppo.utils")
    rl_dataset = importlib.import_module("verl.utils.dataset.rl_dataset")
    rollouter = importlib.import_module(
        "verl.experimental.fully_async_policy.fully_async_rollouter"
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    if REQUIRED:
        raise
    pytest.skip(
        f"verl's fully-async rollouter does not import here ({exc}): pip install verl==0.9.1 "
        "cachetools uvicorn fastapi",
        allow_module_level=True,
    )

import torch  # noqa: E402
from frontier_adapters.torch import SnapshotSource, StreamCollector  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from frontier_core import LedgerConfig  # noqa: E402

ROWS = 16
TRAINED, PENDING, IN_FLIGHT, QUEUED = 6, 2, 1, 1  # where the 10 pulled prompts are at the crash


class Prompts(torch.utils.data.Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": torch.tensor([i, 1, 2]), "index": i, "raw_prompt": f"prompt {i}"}


def verl_loader() -> Any:
    """The train loader exactly as ``RayPPOTrainer._create_dataloader`` builds
    it for the fully-async rollouter."""
    config = OmegaConf.create({"shuffle": True, "seed": 7})
    dataset = Prompts()
    return StatefulDataLoader(
        dataset=dataset,
        batch_size=1,  # fully async: data.gen_batch_size == 1
        num_workers=0,
        drop_last=True,
        collate_fn=rl_dataset.collate_fn,
        sampler=verl_utils.create_rl_sampler(config, dataset),
    )


def rollouter_like(loader: Any) -> Any:
    """The attributes the rollouter's own methods read."""
    return types.SimpleNamespace(
        train_dataloader=loader,
        dataloader_lock=asyncio.Lock(),
        config=OmegaConf.create({"trainer": {"total_epochs": 1}}),
    )


def test_verls_checkpoint_loses_the_prompts_in_flight(tmp_path: Path) -> None:
    cls = rollouter.FullyAsyncRollouter  # a Ray actor class: take the Python class under it
    cls = getattr(cls, "__ray_actor_class__", cls)
    me = rollouter_like(verl_loader())
    feed = cls._create_continuous_iterator(me)
    pulled = [int(batch["index"][0]) for _, batch in (next(feed) for _ in range(10))]
    trained = pulled[:TRAINED]  # the rest: pending queue, in flight, message queue
    asyncio.run(cls.save_checkpoint(me, str(tmp_path)))  # verl's own save: data.pt
    # Crash. Resume as load_checkpoint does: the loader state from data.pt.
    again = rollouter_like(verl_loader())
    again.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    rest = [int(b["index"][0]) for _, b in cls._create_continuous_iterator(again)]
    trained += rest
    lost = sorted(set(range(ROWS)) - set(trained))
    assert lost == sorted(pulled[TRAINED:]) and len(lost) == PENDING + IN_FLIGHT + QUEUED
    assert len(trained) == len(set(trained)) == ROWS - 4


def test_bound_to_frontier_the_same_crash_loses_nothing() -> None:
    def rows_of(batch: dict[str, Any]) -> list[int]:
        return [int(i) for i in batch["index"]]

    config = LedgerConfig(stream_len=ROWS)
    collector = StreamCollector(
        SnapshotSource(verl_loader(), stream_len=ROWS, rows_of=rows_of), config
    )
    # _feed_samples: take one prompt per RolloutSample (stamped, dispatched);
    # put_sample succeeded: landed; the trainer's step: trained.
    taken = collector.take(10)
    collector.landed([o for o, _ in taken[: TRAINED + QUEUED]])
    collector.trained([o for o, _ in taken[:TRAINED]])
    trained = [row for _, row in taken[:TRAINED]]
    state = collector.checkpoint_state(save_buffer=False)  # instead of data.pt
    # Crash; a fresh verl loader, seeked through the snapshot ring.
    again = StreamCollector(SnapshotSource(verl_loader(), stream_len=ROWS, rows_of=rows_of), config)
    again.resume(state, load_replay_buffer=False)
    while not again.drained:
        step = again.take(1)
        if not step:
            break
        again.landed([o for o, _ in step])
        again.trained([o for o, _ in step])
        trained += [row for _, row in step]
    assert sorted(trained) == list(range(ROWS))
