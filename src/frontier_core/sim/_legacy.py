"""The legacy mode's backend: a live-cursor checkpoint, as the seed found it.

The checkpoint saves the source's live cursor (its position at save time)
and the replay buffer. Prompts the cursor has passed but that are neither
trained nor in the saved buffer (in flight, or waiting in the gap-fill
remainder) are in no checkpoint: a resume continues from the cursor and they
are never trained. Failures follow the same policy as the frontier mode, but
attempt counts die with the process.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._events import FailurePolicy
from ._workload import Workload


class LegacyBackend:
    """A cursor and a failure counter (see ``_pipeline.Backend``)."""

    name = "legacy"

    def __init__(self, workload: Workload) -> None:
        self.stream_len = workload.stream_len
        self.retry = workload.on_failure is FailurePolicy.RETRY
        self.max_failures = workload.max_failures
        self.cursor = 0
        self.attempts: dict[int, int] = {}

    @property
    def position(self) -> int:
        return self.cursor

    @property
    def exhausted(self) -> bool:
        return self.cursor >= self.stream_len

    @property
    def done(self) -> bool:
        return self.exhausted

    def pull(self, count: int) -> list[int]:
        stop = min(self.cursor + count, self.stream_len)
        out = list(range(self.cursor, stop))
        self.cursor = stop
        return out

    def dispatch(self, ordinals: Sequence[int]) -> None:
        pass

    def buffer(self, ordinals: Sequence[int]) -> None:
        pass

    def train(self, ordinals: Sequence[int]) -> None:
        pass

    def fail(self, ordinals: Sequence[int]) -> tuple[list[int], list[int]]:
        requeued: list[int] = []
        dropped: list[int] = []
        for o in ordinals:
            n = self.attempts.get(o, 0) + 1
            if self.retry and n < self.max_failures:
                self.attempts[o] = n
                requeued.append(o)
            else:
                self.attempts.pop(o, None)
                dropped.append(o)
        return requeued, dropped

    def evict(self, ordinals: Sequence[int]) -> tuple[list[int], list[int]]:
        return self.fail(ordinals)

    def buffered(self) -> set[int] | None:
        return None  # nothing to cross-check against

    def snapshot(self) -> str:
        return json.dumps({"cursor": self.cursor})

    def restore(self, record: str, *, load_buffer: bool, evicted: Sequence[int]) -> None:
        # Groups the restore's age filter discards are simply gone: the
        # cursor is past them.
        self.cursor = int(json.loads(record)["cursor"])
        self.attempts = {}
