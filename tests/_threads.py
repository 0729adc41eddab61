"""Ranks (or racing writers) as threads of one process: collectives over a
barrier, and a runner that returns each thread's result or exception."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Hub:
    """Collectives for ranks that are threads of one process."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=30)
        self.slots: list[Any] = [None] * world

    def rank(self, rank: int) -> RankComm:
        return RankComm(self, rank)


class RankComm:
    def __init__(self, hub: Hub, rank: int) -> None:
        self.hub, self.r = hub, rank

    def all_gather_object(self, obj: Any) -> list[Any]:
        self.hub.slots[self.r] = obj
        self.hub.barrier.wait()
        out = list(self.hub.slots)
        self.hub.barrier.wait()
        return out

    def broadcast_object(self, obj: Any) -> Any:
        if self.r == 0:
            self.hub.slots[0] = obj
        self.hub.barrier.wait()
        out = self.hub.slots[0]
        self.hub.barrier.wait()
        return out

    def wait(self) -> None:
        """Until every thread is here (a race's start line)."""
        self.hub.barrier.wait()


def on_threads(world: int, fn: Callable[[int, RankComm], Any]) -> list[Any]:
    """``fn(i, comm)`` on ``world`` threads at once: each one's result, or
    the exception it raised (never re-raised here). Each thread has 60 s."""
    hub = Hub(world)
    results: list[Any] = [None] * world

    def body(rank: int) -> None:
        try:
            results[rank] = fn(rank, hub.rank(rank))
        except BaseException as exc:  # the caller asserts on it
            results[rank] = exc

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        if t.is_alive():
            raise TimeoutError("a thread did not finish in 60 s")
    return results
