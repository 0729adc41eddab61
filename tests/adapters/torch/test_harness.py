"""The integration harness on this project's own torch adapter: the
``StreamCollector`` over a seekable loader (shuffled, two epochs) and over a
snapshotting ``StatefulDataLoader``, with a replay buffer saved next to the
collector state in one JSON checkpoint. The harness sees the adapter from
the outside, through the same hooks a framework author writes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.torch import (  # noqa: E402
    SeekableSource,
    SnapshotMissingError,
    SnapshotSource,
    StreamCollector,
    make_seekable_loader,
)
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from frontier_core import FailurePolicy, LedgerConfig, Status  # noqa: E402
from frontier_core.testing import CoverageViolation, Integration, run_integration_test  # noqa: E402

from .test_collector import Counting  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

ROWS = 5
EPOCHS = 2
SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


class CollectorIntegration(Integration):
    """A trainer's wiring of ``StreamCollector``: a replay buffer of rows
    keyed by ordinal, saved with the collector state."""

    stream_len = ROWS * EPOCHS
    max_failures = 2
    snapshot = False

    def _collector(self) -> StreamCollector:
        config = LedgerConfig(
            stream_len=self.stream_len, on_failure=FailurePolicy.RETRY, max_failures=2
        )
        if self.snapshot:
            loader = StatefulDataLoader(Counting(self.stream_len), batch_size=3, collate_fn=list)
            return StreamCollector(SnapshotSource(loader, stream_len=self.stream_len), config)
        seekable = make_seekable_loader(
            [f"r{i}" for i in range(ROWS)], batch_size=3, seed=5, shuffle=True, epochs=EPOCHS
        )
        return StreamCollector(SeekableSource(seekable), config)

    def start(self) -> None:
        self.collector = self._collector()
        self.buffer: dict[int, Any] = {}
        self.taken: dict[int, Any] = {}

    def _pending(self) -> set[int]:
        return set(self.collector.ledger.ordinals(Status.PENDING))

    def stamp(self, n: int) -> Iterable[int]:
        before = self._pending()
        self.collector.pull()
        return sorted(self._pending() - before)

    def dispatch(self, n: int) -> Iterable[int]:
        items = self.collector.take(n)
        self.taken.update(items)
        if self.snapshot:  # rows are where the stream says they are
            assert all(row == 100 + o for o, row in items), items
        return [o for o, _ in items]

    def land(self, ordinals: list[int]) -> None:
        self.collector.landed(ordinals)
        for o in ordinals:
            self.buffer[o] = self.taken.pop(o)

    def fail(self, ordinals: list[int]) -> Iterable[int]:
        for o in ordinals:
            self.taken.pop(o)
        return self.collector.failed(ordinals).dropped

    def train(self, ordinals: list[int]) -> None:
        self.collector.trained(ordinals)
        for o in ordinals:
            del self.buffer[o]

    def checkpoint(self) -> object:
        try:
            state = {"collector": self.collector.state_dict()}
        except SnapshotMissingError:
            # SnapshotSource holds no snapshot before its first pull (see
            # test_a_snapshot_source_checkpoints_before_its_first_pull): a
            # run that has not pulled yet restarts from scratch.
            assert self.collector.ledger.next_ordinal == 0
            return json.dumps(None)
        state["buffer"] = sorted(self.buffer.items())
        return json.dumps(state)

    def crash(self) -> None:
        del self.collector, self.buffer, self.taken

    def resume(self, checkpoint: object) -> Iterable[int]:
        assert isinstance(checkpoint, str)
        state = json.loads(checkpoint)
        self.start()  # a new process: a new loader and collector
        if state is None:
            return []
        self.collector.resume(state["collector"], load_replay_buffer=True)
        self.buffer = {o: row for o, row in state["buffer"]}
        return list(self.buffer)


class SnapshotIntegration(CollectorIntegration):
    snapshot = True


@pytest.mark.parametrize("integration", [CollectorIntegration, SnapshotIntegration])
def test_the_torch_collector_trains_every_prompt_exactly_once(
    integration: type[Integration],
) -> None:
    run_integration_test(integration, settings=SETTINGS)


class CheckpointsBeforeTheBufferLands(CollectorIntegration):
    """A wiring bug: the buffer is saved from a copy taken when the last
    training step ended, so groups that landed since are neither in the
    saved buffer nor regenerated (the ledger says they are retained)."""

    def start(self) -> None:
        super().start()
        self.saved_buffer: dict[int, Any] = {}

    def train(self, ordinals: list[int]) -> None:
        super().train(ordinals)
        self.saved_buffer = dict(self.buffer)

    def checkpoint(self) -> object:
        state = {
            "collector": self.collector.state_dict(),
            "buffer": sorted(self.saved_buffer.items()),
        }
        return json.dumps(state)


def test_the_harness_catches_a_buffer_saved_out_of_step() -> None:
    with pytest.raises(CoverageViolation) as info:
        run_integration_test(
            CheckpointsBeforeTheBufferLands,
            settings=settings(SETTINGS, max_examples=200, phases=[Phase.generate]),
        )
    assert info.value.invariant == "NO-SKIP"


def test_a_resume_to_a_snapshot_below_the_cut_is_not_a_fresh_run() -> None:
    """Regression, found by the harness in this file's first version: after
    a resume to the snapshot at ordinal 0 (the only one at or below the cut)
    the ledger's source position is 0 again, and an integration that took
    ``next_ordinal == 0`` to mean "nothing pulled yet" checkpointed a fresh
    run, so ordinal 0, already trained, was trained again."""
    integration = SnapshotIntegration()
    integration.start()
    assert list(integration.stamp(2)) == [0, 1, 2]
    assert list(integration.dispatch(2)) == [0, 1]
    integration.land([0, 1])
    integration.train([0])
    saved = integration.checkpoint()
    integration.crash()
    assert list(integration.resume(saved)) == [1]
    assert integration.collector.ledger.next_ordinal == 0  # the snapshot's base
    again = integration.checkpoint()
    integration.crash()
    assert list(integration.resume(again)) == [1]
    assert 0 not in [o for o, _ in integration.collector.take(10)]


def test_a_snapshot_source_checkpoints_before_its_first_pull() -> None:
    """Regression (found by the harness): a checkpoint before the first pull
    (step 0) used to raise SnapshotMissingError."""
    integration = SnapshotIntegration()
    integration.start()
    saved = integration.collector.state_dict()
    integration.start()
    integration.collector.resume(json.loads(json.dumps(saved)), load_replay_buffer=True)
    assert integration.collector.take(20)[0] == (0, 100)
