"""The integration harness on this project's own rollout adapter: a
``RolloutLoop`` over a ``StreamCollector``, under either schedule, driven
by an engine whose every request waits until the harness says it lands or
fails, with the replay buffer (the loop's sink) saved next to the collector
state. Per sibling, the prompts are single-sample groups whose failed
sample fails the group (``Granularity.GROUP``), so the harness's
prompt-level model holds for both. The engine also checks that every
request id names what the ledger holds: the group's attempt count (which a
checkpoint carries across crashes), or the sibling's running attempt. No
torch: the loop needs only asyncio and frontier_core."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from frontier_core import FailurePolicy, Granularity, LedgerConfig, Sibling, Status
from frontier_core.testing import Integration, run_integration_test

rollout = pytest.importorskip("frontier_adapters.rollout._loop")
from frontier_adapters import SequenceSource, StreamCollector  # noqa: E402

engine_module = pytest.importorskip("frontier_adapters.rollout._engine")

N = 9
N_GEN = 2
SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


class HeldEngine:
    """Each request waits for the harness's verdict on its ordinal.
    ``misnamed`` collects request ids whose attempt is not the ledger's
    (checked by the harness: an assertion in here would be a failed
    generation)."""

    def __init__(self, collector: Any) -> None:
        self.verdicts: dict[int, asyncio.Future[str]] = {}
        self.collector = collector
        self.misnamed: list[str] = []

    def expected_id(self, ordinal: int, sampling_params: Any) -> str:
        if sampling_params is None:  # a group's request
            return f"o{ordinal}-a{self.collector.failures(ordinal)}"
        status, attempt = self.collector.ledger.sibling(ordinal, 0)
        return f"o{ordinal}-s0-a{attempt}" if status is Sibling.RUNNING else "not running"

    def verdict(self, ordinal: int) -> asyncio.Future[str]:
        if ordinal not in self.verdicts:
            self.verdicts[ordinal] = asyncio.get_running_loop().create_future()
        return self.verdicts[ordinal]

    async def abort(self, request_id: str) -> None:
        pass

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[Any]:
        ordinal = int(prompt[1:])  # test side only: the loop never parses rows
        if request_id != (expected := self.expected_id(ordinal, sampling_params)):
            self.misnamed.append(f"{request_id} (the ledger holds {expected})")
        how = await self.verdict(ordinal)
        del self.verdicts[ordinal]
        if how == "fail":
            raise RuntimeError("generation failed")
        yield engine_module.RequestOutput(
            request_id,
            tuple(
                engine_module.Completion(i, (1, i), "stop", logprobs=(-0.5, -0.5))
                for i in range(1 if sampling_params is not None else N_GEN)
            ),
            finished=True,
        )


class Sink:
    def __init__(self) -> None:
        self.groups: dict[int, Any] = {}

    def add(self, group: Any) -> None:
        assert group.ordinal not in self.groups
        self.groups[group.ordinal] = group.row

    def __len__(self) -> int:
        return len(self.groups)


class RolloutIntegration(Integration):
    stream_len = N
    max_failures = 2
    schedule = "group"

    def start(self) -> None:
        self.aio = asyncio.new_event_loop()
        self.collector = StreamCollector(
            SequenceSource([f"r{o}" for o in range(N)], batch_size=3),
            LedgerConfig(
                stream_len=N,
                on_failure=FailurePolicy.RETRY,
                max_failures=2,
                granularity=Granularity.GROUP,
            ),
        )
        self.engine = HeldEngine(self.collector)
        self.sink = Sink()
        self.dropped: list[int] = []
        if self.schedule == "group":
            per: dict[str, Any] = {
                "prompt_of": lambda row: row,
                "sampling_params": None,
                "num_generations": N_GEN,
            }
        else:  # the lease is the engine's sampling params: it names the sibling
            per = {
                "schedule": "sibling",
                "prompt_of": lambda row, prefix: row,
                "sampling_params": lambda lease, prefix_len: lease,
            }
        self.loop = rollout.RolloutLoop(
            self.collector,
            self.engine,
            self.sink,
            **per,
            max_in_flight=1,
            on_dropped=self.dropped.extend,
        )

    def _settle(self, done: Iterable[int] = ()) -> None:
        """Run the event loop until the workers of ``done`` have exited."""
        waiting = set(done)

        async def settle() -> None:
            for _ in range(200):
                await asyncio.sleep(0)
                if not waiting & set(self.loop.outstanding) and not waiting & set(
                    self.engine.verdicts
                ):
                    return
            raise AssertionError(f"workers of {sorted(waiting)} did not finish")

        self.aio.run_until_complete(settle())
        assert not self.engine.misnamed, self.engine.misnamed

    def stamp(self, n: int) -> Iterable[int]:
        before = set(self.collector.ledger.ordinals(Status.PENDING))
        self.collector.pull()
        return sorted(set(self.collector.ledger.ordinals(Status.PENDING)) - before)

    def dispatch(self, n: int) -> Iterable[int]:
        before = set(self.loop.outstanding)
        # ``fill`` takes as many as there is room for: make room for n.
        self.loop.max_in_flight = self.loop.in_flight + n

        async def fill() -> None:
            self.loop.fill()

        self.aio.run_until_complete(fill())
        self._settle()  # the workers submit and wait for their verdicts
        return sorted(set(self.loop.outstanding) - before)

    def _decide(self, ordinals: list[int], how: str) -> None:
        async def decide() -> None:
            for o in ordinals:
                self.engine.verdict(o).set_result(how)

        self.aio.run_until_complete(decide())
        self._settle(ordinals)

    def land(self, ordinals: list[int]) -> None:
        self._decide(ordinals, "ok")
        assert set(ordinals) <= set(self.sink.groups)

    def fail(self, ordinals: list[int]) -> Iterable[int]:
        already = len(self.dropped)
        self._decide(ordinals, "fail")
        return self.dropped[already:]

    def train(self, ordinals: list[int]) -> None:
        self.collector.trained(ordinals)
        for o in ordinals:
            del self.sink.groups[o]

    def checkpoint(self) -> object:
        buffer = sorted(self.sink.groups.items())
        return json.dumps({"collector": self.collector.state_dict(), "buffer": buffer})

    def crash(self) -> None:
        # The process dies: its tasks go with it (aclose reports nothing to
        # the ledger, as a kill would not).
        self.close()
        del self.loop, self.collector, self.sink, self.engine

    def close(self) -> None:
        if hasattr(self, "aio") and not self.aio.is_closed():
            self.aio.run_until_complete(self.loop.aclose())
            self.aio.close()

    def resume(self, checkpoint: object) -> Iterable[int]:
        assert isinstance(checkpoint, str)
        state = json.loads(checkpoint)
        self.start()
        self.collector.resume(state["collector"], load_replay_buffer=True, sealed=())
        self.sink.groups = {o: row for o, row in state["buffer"]}
        return list(self.sink.groups)


class SiblingIntegration(RolloutIntegration):
    schedule = "sibling"


@pytest.mark.parametrize("integration", [RolloutIntegration, SiblingIntegration])
def test_the_rollout_loop_trains_every_prompt_exactly_once(
    integration: type[RolloutIntegration],
) -> None:
    run_integration_test(integration, settings=SETTINGS)
