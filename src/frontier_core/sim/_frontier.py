"""The frontier mode's coverage backend: the real ``Ledger``, nothing else.

Every coverage decision (what the source yields that must be generated,
what a failure or an eviction does, what a checkpoint holds, what a resume
re-yields) is the ledger's; this class only forwards the pipeline's events
and carries the checkpoint through its JSON wire form, as a real run would.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._checkpoint import Checkpoint
from .._events import Status
from .._groups import LedgerConfig
from .._ledger import Ledger
from ._workload import Workload


def requeued_pending(ledger: Ledger, ordinals: Sequence[int]) -> list[int]:
    """The requeued ordinals that go back to the pending queue. One the
    source has not re-yielded yet (restored, then evicted) comes back
    through the source instead."""
    return [o for o in ordinals if ledger.status(o) is Status.PENDING]


class FrontierBackend:
    """Drives a ``Ledger`` for the pipeline (see ``_pipeline.Backend``)."""

    name = "frontier"

    def __init__(self, workload: Workload) -> None:
        self.config = LedgerConfig(
            on_failure=workload.on_failure,
            max_failures=workload.max_failures,
            stream_len=workload.stream_len,
            fingerprint=workload.fingerprint,
        )
        self.ledger = Ledger.start(self.config)

    @property
    def position(self) -> int:
        return self.ledger.next_ordinal

    @property
    def exhausted(self) -> bool:
        return self.ledger.exhausted

    @property
    def done(self) -> bool:
        return self.ledger.drained

    def pull(self, count: int) -> list[int]:
        # The source yields ``count`` rows; the ledger keeps those that
        # still need generating (after a resume, the covered ones are not).
        step = self.ledger.stamp(count)
        self.ledger = step.ledger
        return list(step.effect.kept)

    def dispatch(self, ordinals: Sequence[int]) -> None:
        self.ledger = self.ledger.dispatch(ordinals).ledger

    def buffer(self, ordinals: Sequence[int]) -> None:
        self.ledger = self.ledger.buffer(ordinals).ledger

    def train(self, ordinals: Sequence[int]) -> None:
        self.ledger = self.ledger.train(ordinals).ledger

    def fail(self, ordinals: Sequence[int]) -> tuple[list[int], list[int]]:
        step = self.ledger.fail(ordinals)
        self.ledger = step.ledger
        return self._requeued(step.effect.requeued), list(step.effect.dropped)

    def evict(self, ordinals: Sequence[int]) -> tuple[list[int], list[int]]:
        step = self.ledger.evict(ordinals)
        self.ledger = step.ledger
        return self._requeued(step.effect.requeued), list(step.effect.dropped)

    def _requeued(self, ordinals: Sequence[int]) -> list[int]:
        return requeued_pending(self.ledger, ordinals)

    def buffered(self) -> set[int]:
        return set(self.ledger.ordinals(Status.BUFFERED))

    def snapshot(self) -> str:
        """The checkpoint's wire form: ``state_dict()`` as JSON text."""
        return json.dumps(self.ledger.checkpoint(save_buffer=True).state_dict())

    def restore(self, record: str, *, load_buffer: bool, evicted: Sequence[int]) -> None:
        """Resume from a committed record: validated, then ``Ledger.resume``;
        the source rewinds to the cut (the ledger's ``next_ordinal``)."""
        checkpoint = Checkpoint.from_state_dict(
            json.loads(record), fingerprint=self.config.fingerprint
        )
        resumed = Ledger.resume(
            self.config, checkpoint, load_replay_buffer=load_buffer, evicted_on_restore=evicted
        )
        self.ledger = resumed.ledger
