"""docs/guides/trl-async-grpo.md: TRL AsyncGRPO's real consumer path on CPU.

The trainer cannot run here (it wants a model *path*, calls
``torch.cuda.get_device_name`` and a vLLM server over HTTP), but its data
path past generation is plain Python: ``RolloutQueueDataset`` pulls scored
``RolloutSample`` groups from the rollout queue and drops stale ones. This
test feeds it real ``RolloutSample`` objects, with one group gone stale,
and measures what TRL's checkpoint formula (``rollout_state.json``'s
``prompt_index``: the first ``group_id`` not in ``groups_trained``) does
with it (#7274), against the ledger bound at the same points.
"""

from __future__ import annotations

import itertools
import queue

import numpy as np

from ._need import need_trl

need_trl()

from frontier_core import FailurePolicy, Ledger, LedgerConfig  # noqa: E402

GROUPS, G, STALE = 10, 4, 3


def rollout_queue() -> queue.Queue[object]:
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    q: queue.Queue[object] = queue.Queue()
    for gid in range(GROUPS):
        for _ in range(G):
            q.put(
                RolloutSample(
                    prompt=[{"role": "user", "content": f"q{gid}"}],
                    completion=[{"role": "assistant", "content": "a"}],
                    input_ids=np.zeros(4, dtype=np.int64),
                    completion_mask=np.ones(4, dtype=np.int64),
                    old_log_probs=np.zeros(4, dtype=np.float32),
                    advantage=0.0,
                    # Group 3 was generated under policy 0: stale at version 5.
                    model_version=0 if gid == STALE else 5,
                    group_id=gid,
                    metrics={},
                )
            )
    return q


class Watched:
    """The rollout queue, seen by the binding: what was pulled, in order
    (``RolloutQueueDataset`` yields or drops each pull before the next)."""

    def __init__(self, inner: queue.Queue[object]) -> None:
        self.inner = inner
        self.pulled: list[int] = []

    def get(self, timeout: float | None = None) -> object:
        item = self.inner.get(timeout=timeout)
        self.pulled.append(item.group_id)  # type: ignore[attr-defined]
        return item

    def qsize(self) -> int:
        return self.inner.qsize()


def test_a_stale_group_pins_trls_resume_point_but_not_the_cut() -> None:
    from accelerate import PartialState
    from trl.experimental.async_grpo.async_grpo_trainer import RolloutQueueDataset

    PartialState(cpu=True)  # its logger needs the state; the trainer makes it
    watched = Watched(rollout_queue())
    dataset = RolloutQueueDataset(
        watched,
        model_version_fn=lambda: 5,
        check_health_fn=lambda _s: None,
        stale_after_s=60.0,
        metrics={
            "sample/dropped_stale_total": [],
            "sample/rollout_queue_size": [],
            "sample/time_in_queue_s": [],
            "sample/staleness_mean": [],
            "sample/staleness_max": [],
        },
        max_staleness=3,
    )
    # The binding, at TRL's own points: stamp and dispatch when the worker's
    # _repeat_iterator hands out a group (ordinal = dataset_start_index +
    # group_id), buffer when the scored group is queued, drop (on record) what
    # RolloutQueueDataset discards as stale, train what it yields.
    ledger = Ledger.start(LedgerConfig(stream_len=GROUPS, on_failure=FailurePolicy.DROP))
    ledger = ledger.stamp(GROUPS).ledger.dispatch(range(GROUPS)).ledger
    ledger = ledger.buffer(range(GROUPS)).ledger
    groups_trained: set[int] = set()  # what DataCollatorForRollout records
    yielded = 0
    for sample in itertools.islice(iter(dataset), (GROUPS - 1) * G):
        yielded += 1
        gid = sample["group_id"]
        groups_trained.add(gid)
        # Every pull before this one that was not yielded was dropped stale.
        dropped = {g for g in watched.pulled[:-1] if g not in groups_trained}
        if dropped:
            ledger = ledger.evict(sorted(dropped)).ledger
            watched.pulled = [g for g in watched.pulled if g not in dropped]
        if yielded % G == 0:
            ledger = ledger.train([gid]).ledger
    assert groups_trained == set(range(GROUPS)) - {STALE}
    # TRL's rollout_state.json: the first untrained group id, pinned at 3.
    first_untrained = next(g for g in itertools.count() if g not in groups_trained)
    assert first_untrained == STALE
    retrained_by_trl = [g for g in groups_trained if g >= first_untrained]
    assert retrained_by_trl == [4, 5, 6, 7, 8, 9]
    # The ledger: the stale group is resolved (dropped, on record); the cut
    # is past every group, so a resume regenerates nothing.
    record = ledger.checkpoint()
    assert record.cut == GROUPS and ledger.drained
    assert len(dataset.metrics["sample/dropped_stale_total"]) == G
