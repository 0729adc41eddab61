"""The integration harness, sibling by sibling, on this project's own
adapter: a ``StreamCollector`` over a ``SequenceSource`` (two epochs, batches of 3),
with a sample store and a replay buffer saved next to the collector state
in one JSON checkpoint, and the attempt counter reserved on "disk" (it
survives the crash, as the rollout journal's reserve does). The harness sees
the adapter from the outside, through the hooks a framework author writes.
No torch: the collector needs only frontier_core."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
from frontier_adapters import SequenceSource, StreamCollector
from hypothesis import HealthCheck, settings

from frontier_core import Effect, FailurePolicy, Granularity, Lease, LedgerConfig, Status
from frontier_core.testing import Integration, run_integration_test

ROWS = 4
EPOCHS = 2
SETTINGS = settings(
    max_examples=60,
    derandomize=True,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


class CollectorIntegration(Integration):
    """A trainer's wiring of ``StreamCollector``: every accepted sample goes
    to a store keyed by sibling, a group that lands moves to the replay
    buffer with what the store holds of it, and both are saved with the
    collector state (``save_sealed``: the record names the store's
    siblings)."""

    stream_len, samples, max_failures = ROWS * EPOCHS, 2, 2
    granularity = Granularity.SIBLING

    def _collector(self) -> StreamCollector:
        config = LedgerConfig(
            stream_len=self.stream_len,
            samples=self.samples,
            on_failure=FailurePolicy.RETRY,
            max_failures=self.max_failures,
            granularity=self.granularity,
        )
        source = SequenceSource([f"p{i}" for i in range(ROWS)], epochs=EPOCHS, batch_size=3)
        return StreamCollector(source, config)

    def start(self) -> None:
        self.disk: dict[str, Any] = {"floor": 0}
        self._boot()

    def _boot(self) -> None:
        """A new process: a new source and collector, nothing in memory."""
        self.collector = self._collector()
        self.store: dict[tuple[int, int], Lease] = {}
        self.buffer: dict[int, list[Lease]] = {}
        self.restarted: list[Lease] = []

    def _reserve(self) -> None:
        self.disk["floor"] = self.collector.ledger.next_attempt

    def _settle(self, effect: Effect) -> None:
        for x in effect.sealed:
            self.store[x.ordinal, x.sibling] = x
        for o in (*effect.requeued, *effect.unstamped, *effect.dropped):
            self._forget(o)
        for o in effect.landed:
            self.buffer[o] = [self.store.pop(k) for k in sorted(self.store) if k[0] == o]

    def _forget(self, ordinal: int) -> None:
        for s in range(self.samples):
            self.store.pop((ordinal, s), None)

    def _pending(self) -> set[int]:
        return set(self.collector.ledger.ordinals(Status.PENDING))

    def stamp(self, n: int) -> Iterable[int]:
        before = self._pending()
        self.collector.pull()
        return sorted(self._pending() - before)

    def dispatch(self, n: int) -> tuple[Iterable[Lease], Iterable[Lease]]:
        # Restarted siblings whose group failed whole since are not current
        # any more: a loop would abort those requests.
        started = [x for x in self.restarted if self.collector.current(x)]
        self.restarted = []
        reused: list[Lease] = []
        complete = []
        for taken in self.collector.take_samples(n):
            assert taken.row == f"p{taken.ordinal % ROWS}", taken
            started += taken.leases
            reused += taken.reused
            if taken.complete:  # every sibling held: into the buffer, then report it
                self.buffer[taken.ordinal] = [self.store.pop(x[:2]) for x in taken.reused]
                complete.append(taken.ordinal)
        if complete:
            self.collector.land_complete(complete)
        self._reserve()
        return started, reused

    def seal(self, leases: list[Lease]) -> Iterable[Lease]:
        effect = self.collector.sealed(leases)
        self._settle(effect)
        return effect.sealed

    def fail_sample(self, leases: list[Lease]) -> Iterable[int]:
        effect = self.collector.failed_samples(leases)
        self._settle(effect)
        self.restarted += self.collector.restart(effect.restart)
        self._reserve()
        return effect.dropped

    def fail(self, ordinals: list[int]) -> Iterable[int]:
        effect = self.collector.failed(ordinals)
        self._settle(effect)
        for o in ordinals:
            self._forget(o)
        return effect.dropped

    def train(self, ordinals: list[int]) -> Iterable[Lease]:
        self.collector.trained(ordinals)
        return [x for o in ordinals for x in self.buffer.pop(o)]

    def checkpoint(self) -> object:
        state = self.collector.checkpoint_state(save_buffer=True, save_sealed=True)
        return json.dumps(
            {
                "collector": state,
                "buffer": sorted(self.buffer.items()),
                "store": sorted(self.store.values()),
            }
        )

    def crash(self) -> None:
        del self.collector, self.store, self.buffer, self.restarted

    def _held(self, saved: dict[str, Any]) -> list[Lease]:
        """The sealed siblings whose samples the new process has."""
        return [Lease(*x) for x in saved["store"]]

    def resume(self, checkpoint: object) -> Iterable[int]:
        assert isinstance(checkpoint, str)
        saved = json.loads(checkpoint)
        self._boot()
        held = self._held(saved)
        resumed = self.collector.resume(
            saved["collector"],
            load_replay_buffer=True,
            sealed=held,
            attempt_floor=self.disk["floor"],
        )
        kept = set(resumed.reused)  # the others' groups need no generation
        self.store = {(x.ordinal, x.sibling): x for x in held if x in kept}
        self.buffer = {o: [Lease(*x) for x in xs] for o, xs in saved["buffer"]}
        return list(self.buffer)


class Journaled(CollectorIntegration):
    """Also journals every accepted sample on disk and resumes holding the
    latest of each sibling: samples sealed after the checkpoint come back,
    and a group whose siblings are all held lands at its dispatch
    (``take_samples`` marks it complete)."""

    def start(self) -> None:
        super().start()
        self.disk["journal"] = []

    def seal(self, leases: list[Lease]) -> Iterable[Lease]:
        sealed = list(super().seal(leases))
        self.disk["journal"] += sealed
        return sealed

    def _held(self, saved: dict[str, Any]) -> list[Lease]:
        latest = {x[:2]: x for x in [*super()._held(saved), *self.disk["journal"]]}
        return sorted(latest.values())


class GroupGranularity(CollectorIntegration):
    granularity = Granularity.GROUP


class ThreeSamples(CollectorIntegration):
    samples = 3


@pytest.mark.parametrize(
    "integration", [CollectorIntegration, Journaled, GroupGranularity, ThreeSamples]
)
def test_the_sample_collector_trains_every_group_once_with_its_samples(
    integration: type[Integration],
) -> None:
    run_integration_test(integration, settings=SETTINGS)
