"""Kill points: a life stops at a chosen point of its journal's work and
dies there, for a torture to SIGKILL it at that very moment.

Shared by the sample-level lives of ``frontier demo --journal``
(``grpo_worker.run_journal``) and of ``torch-run --durability journal``
(``torch_job.run``); both take ``--kill-at KIND:STEPS:COUNT``.

The writer's points depend on these internals of ``JournalWriter``, and
on nothing else of it: the ``commit`` point overrides ``_commit`` (the one
place a group reaches the file) and reads ``_pending`` (the encoded frames
of the group not yet written), ``_fd`` (the journal's descriptor) and
``pending`` (their count); the ``compact`` points override ``compact_to``
and call ``sync()`` and read ``position``; the ``append`` point reads the
public ``durable``, and the journal's reopen the public ``torn`` and
``close()``. A change to those must keep the points faithful (a
``commit`` kill must still leave the group's frames whole but the last,
torn).

Not API: a test fixture of the verification jobs.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from frontier_core import Lease
from frontier_core.journal import (
    CommitPolicy,
    JournalHeader,
    Payload,
    Record,
    TokenPayload,
    encode,
)

from ..journal import Recovered, RolloutJournal
from ..journal._files import JournalWriter, _write_all

#: Where ``--kill-at`` can stop a life (``KillPoint``).
KILL_POINTS = ("append", "commit", "compact", "compacted", "resumed")
#: How long a life stopped at a kill point waits for its SIGKILL.
KILL_WAIT = 30.0


class KillPoint:
    """``--kill-at KIND:STEPS:COUNT``: once the life has committed ``STEPS``
    steps, the ``COUNT``-th time it passes the point ``KIND`` it prints
    ``kill-point KIND ...`` and blocks there, for the torture to SIGKILL its
    process group at that very point. The points: ``append``, a record
    queued for the journal and not yet committed; ``commit``, a group
    commit with the group written up to the middle of its last frame (what
    a SIGKILL during the ``write`` can leave: a torn tail); ``compact``, a
    compaction with the compacted journal in its temporary file, not yet in
    place; ``compacted``, just after the compacted journal replaced the old
    one; ``resumed``, a life resumed from a checkpoint right after it
    recovered the journal and dispatched its first leases (the life passes
    it itself: ``torch_job.run`` does). A life that nobody kills
    within ``KILL_WAIT`` seconds SIGKILLs itself: the point is a death
    either way. An empty spec never fires."""

    def __init__(self, spec: str) -> None:
        self.kind = ""
        self.after = self.count = 0
        if spec:
            try:
                kind, after, count = spec.split(":")
                valid = kind in KILL_POINTS and int(after) >= 0 and int(count) >= 1
            except ValueError:
                valid = False
            if not valid:
                raise ValueError(
                    f"--kill-at wants KIND:STEPS:COUNT, KIND in {KILL_POINTS}, got {spec!r}"
                )
            self.kind, self.after, self.count = kind, int(after), int(count)
        #: Steps this life has committed.
        self.steps = 0
        self._hits = 0

    def passed(self, kind: str) -> bool:
        """Whether this passage of ``kind`` is the one to die at."""
        if kind != self.kind or self.steps < self.after:
            return False
        self._hits += 1
        return self._hits == self.count

    def die(self, detail: str) -> None:
        print(f"kill-point {self.kind} {detail}", flush=True)
        deadline = time.monotonic() + KILL_WAIT
        while time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)


class KillPointWriter(JournalWriter):
    """The journal writer with the ``commit``, ``compact`` and ``compacted``
    kill points. A test hook on ``JournalWriter._commit``, the one place a
    group reaches the file: the ``commit`` point writes the group up to the
    middle of its last frame, as a SIGKILL in the middle of the ``write``
    can leave it, and stops there."""

    point: KillPoint | None = None
    fingerprint = ""
    lineage = ""

    def _commit(self) -> None:
        point = self.point
        if point is not None and self._pending and point.passed("commit"):
            data = b"".join(self._pending)
            # Cut inside the last frame: the group's other frames reach the
            # file whole, the last one torn.
            cut = len(data) - max(1, len(self._pending[-1]) // 2)
            _write_all(self._fd, data[:cut])
            point.die(f"{self.pending} records, {cut} of {len(data)} bytes written")
        super()._commit()

    def compact_to(
        self,
        new_path: str | os.PathLike[str],
        records: Iterable[Record],
        *,
        lost: tuple[int, int] | None = None,
        ship_timeout: float = 60.0,
    ) -> int:
        records = tuple(records)
        point = self.point
        if point is not None and point.passed("compact"):
            self.sync()
            target = Path(new_path)
            header = JournalHeader(self.fingerprint, self.lineage, self.position)
            tmp = target.with_name(f".{target.name}.tmp-{secrets.token_hex(8)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            try:
                _write_all(fd, encode(header, records))
                os.fsync(fd)
            finally:
                os.close(fd)
            point.die(f"compacted journal of {len(records)} records in {tmp.name}, not in place")
        durable = super().compact_to(new_path, records, lost=lost, ship_timeout=ship_timeout)
        if point is not None and point.passed("compacted"):
            point.die(f"compacted journal of {len(records)} records in place")
        return durable


class KillPointJournal(RolloutJournal):
    """A ``RolloutJournal`` whose writer is a ``KillPointWriter``, with the
    ``append`` kill point after a sealed, progress or extend record is
    queued. ``recover`` reports the torn tail the first open cut (the
    writer is opened twice)."""

    def __init__(
        self,
        path: Path,
        *,
        fingerprint: str,
        lineage: str,
        policy: CommitPolicy,
        progress_every: int,
        point: KillPoint,
    ) -> None:
        super().__init__(
            path,
            fingerprint=fingerprint,
            lineage=lineage,
            policy=policy,
            progress_every=progress_every,
        )
        # The first open cut a torn tail, if any: the reopened writer finds
        # none, so ``recover`` reports the first one's.
        torn = self.writer.torn
        self._torn = 0 if torn is None else torn.length
        self.writer.close()  # reopened with the kill points (one writer at a time)
        writer = KillPointWriter(path, JournalHeader(fingerprint, lineage), policy)
        writer.point, writer.fingerprint, writer.lineage = point, fingerprint, lineage
        self.writer = writer
        self.point = point

    def recover(self, *args: Any, **kwargs: Any) -> Recovered:
        return attrs.evolve(super().recover(*args, **kwargs), torn=self._torn)

    def sealed(self, lease: Lease, payload: Payload) -> int:
        return self._appended(super().sealed(lease, payload), f"sealed {tuple(lease)}")

    def progress(self, lease: Lease, payload: Payload) -> int:
        return self._appended(super().progress(lease, payload), f"progress {tuple(lease)}")

    def extend(self, lease: Lease, start: int, payload: TokenPayload) -> int:
        return self._appended(
            super().extend(lease, start, payload), f"extend {tuple(lease)} from {start}"
        )

    def _appended(self, position: int, what: str) -> int:
        # Queued and not yet written: ``durable`` would also count a group
        # written and waiting for its fsync on the commit thread, which a
        # SIGKILL does not lose (the page cache outlives the process).
        written = self.writer._written
        if written < position and self.point.passed("append"):
            self.point.die(f"{what} queued at {position}, written up to {written}")
        return position
