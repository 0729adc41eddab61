"""The rollout journal of the journal modes: real records, simulated disk.

The records are the journal's own (``Sealed``, ``Progress``, ``Mark``), the
resume reads them back through the real format (``encode`` then ``decode``,
with the header's fingerprint and lineage checked and the checkpoint's mark
checked at its position), folds them with the real ``replay`` and compacts
them with the real ``compact``; only the disk is simulated:

* Group commit, worst case: a record appended at ``t`` is durable at
  ``t + commit_delay`` (``CommitPolicy.max_delay``: a record waits at most
  that long for its group; the simulator makes every record wait the whole
  delay), or at the first sync after it (a checkpoint's ``mark`` syncs).
  Records are durable in append order, so a crash keeps a prefix.
* A node loss (the ``node-*`` modes of ``frontier simulate --waste``):
  what survives is what left the node. A journal shipped with a lag of
  ``ship_lag`` keeps the records appended at least ``commit_delay +
  ship_lag`` before the kill, and every record up to the last
  checkpoint's mark (the mark waits for the store); a journal on the node
  only is lost whole, and the resume goes on from the checkpoint alone, as
  ``RolloutJournal.recover`` does for a journal that ends before the
  checkpoint's mark: the journal then remembers the mark in its header, so
  the next resume from the same checkpoint is proven against it. At a lag
  of 0 a node loss costs what a process crash does.
* Progress every ``progress_every`` tokens. A real writer appends a running
  sample's snapshot each time it has that many new tokens; each snapshot is
  whole and supersedes the previous ones of its attempt, so after a crash
  only the latest durable one can matter (replay keeps no other, and
  ``compact`` would drop the rest). The simulator writes that one, at the
  crash, from the attempt's timeline (when it started, from which prefix,
  until when it ran), instead of ``tokens / progress_every`` records a run;
  ``progress_records`` counts those a real writer would have appended.

What a sample is to the journal is a ``BytesPayload`` of its metadata (its
tokens, its draw, the weight version of its oldest token: ``<dIq``), not the
tokens themselves.

Versions across a fork. A payload's version is counted on the lineage of the
process that wrote it. A resume from the checkpoint of step ``fork`` trains
on a lineage where a version above ``fork`` is a dead branch's: its age goes
through the fork (``journal._reuse.lineage_age``), and the resume rebases
every replayed sibling's version to the new lineage once, so that a sample
journaled before one crash and still waiting at the next is not taken for
younger than it is.
"""

from __future__ import annotations

import bisect
import math
import struct
from typing import Final

import attrs

from ..journal import (
    MAX_MARKS,
    BytesPayload,
    CommitPolicy,
    JournalHeader,
    JournalState,
    Mark,
    Progress,
    Record,
    Sealed,
    compact,
    decode,
    encode,
    replay,
)
from ..journal._reuse import lineage_age
from ._pipeline import Generation, Sample
from ._workload import Workload

_EARLY = -math.inf  # the append time of a record already durable
#: What a kill destroys: the process (the journal's file survives), or the
#: node with the journal shipped off it, or the node with the journal on it.
LOSSES: Final = ("process", "node-shipped", "node-local")


_PAYLOAD: Final = struct.Struct("<dIq")


def payload(tokens: float, draw: int, version: int) -> BytesPayload:
    """A sample (or prefix) as the simulator journals it."""
    return BytesPayload(_PAYLOAD.pack(tokens, draw, version))


def _fields(p: object) -> tuple[float, int, int]:
    assert isinstance(p, BytesPayload)
    tokens, draw, version = _PAYLOAD.unpack(p.data)
    return tokens, draw, version


@attrs.define
class _Timeline:
    """When an attempt generated: from ``start``, from a prefix of
    ``prefix`` tokens, up to ``length``, until ``end`` (``None``: still
    running)."""

    ordinal: int
    generation: Generation
    end: float | None = None


class SimJournal:
    """One run's journal: the records, their append times, the sync point,
    and the generation timeline of each attempt (for the progress records).
    ``progress_every`` is ``None`` for a journal of seals only."""

    def __init__(
        self,
        workload: Workload,
        *,
        progress: bool,
        lineage: str,
        loss: str = "process",
        at_turns: bool = False,
    ) -> None:
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
        self.w = workload
        #: Progress at the end of every turn (the turn journal:
        #: ``Run.turn``) instead of every ``progress_every`` tokens.
        self.at_turns = at_turns
        self.policy = CommitPolicy(max_delay=workload.commit_delay)
        #: How long after its append a record survives the kills of this
        #: run (``None``: nothing survives, the node took the journal).
        self.survives_after: float | None = (
            workload.commit_delay
            if loss == "process"
            else workload.commit_delay + workload.ship_lag
            if loss == "node-shipped"
            else None
        )
        #: Records lost with the node at resumes (``node-local``).
        self.lost_records = 0
        self.every: int | None = workload.progress_every if progress else None
        self.fingerprint = workload.fingerprint
        self.lineage = lineage
        self.base = 0  # the sequence number of the header: records follow at base + 1, ...
        #: The marks compactions folded into the base (``JournalHeader.marks``).
        self.marks: list[tuple[int, int]] = []
        self.records: list[Record] = []
        self.appended: list[float] = []
        self.synced = 0  # records[:synced] are durable
        self.synced_at = _EARLY
        self.timelines: dict[int, _Timeline] = {}
        self.rebased: dict[int, int] = {}  # attempt -> its version on the current lineage
        #: Statistics: records appended, progress records a real writer
        #: would have appended, journal bytes read at resumes.
        self.appends = 0
        self.progress_records = 0
        self.bytes_read = 0

    # -- writing ----------------------------------------------------------

    def _append(self, record: Record, at: float) -> int:
        self.records.append(record)
        self.appended.append(at)
        self.appends += 1
        return self.base + len(self.records)

    def started(self, ordinal: int, generation: Generation) -> None:
        """A new attempt began (from its prefix, if any): its first record,
        which fences every older attempt of the sibling."""
        lease = generation.lease
        self.timelines[lease.attempt] = _Timeline(ordinal, generation)
        body = payload(generation.prefix, generation.draw, generation.version)
        self._append(Progress(ordinal, lease.sibling, lease.attempt, body), generation.start)

    def sealed(self, ordinal: int, sample: Sample, at: float) -> None:
        """The ledger accepted this sample: journal it."""
        assert sample.attempt is not None
        self.ended(sample.attempt, at)
        body = payload(sample.tokens, sample.draw, sample.version)
        self._append(Sealed(ordinal, sample.sibling, sample.attempt, body), at)

    def ended(self, attempt: int, at: float) -> None:
        """The attempt stopped generating (sealed, failed, or killed)."""
        timeline = self.timelines[attempt]
        if timeline.end is None:
            timeline.end = at
            if self.every is not None:
                gen = timeline.generation
                made = self.w.made(gen.length, gen.prefix, at - gen.start)
                if self.at_turns:
                    self.progress_records += self.w.calls(gen.length, made) - self.w.calls(
                        gen.length, gen.prefix
                    )
                    return
                done = made - gen.prefix
                whole = math.ceil((gen.length - gen.prefix) / self.every) - 1
                self.progress_records += max(0, min(math.floor(done / self.every), whole))

    def mark(self, checkpoint: int, at: float) -> int:
        """Append checkpoint ``checkpoint``'s mark and sync: the position
        the checkpoint records."""
        position = self._append(Mark(checkpoint), at)
        self.synced, self.synced_at = len(self.records), at
        return position

    # -- the disk ---------------------------------------------------------

    def _horizon(self, at: float) -> float:
        """Records appended by this time survive a kill at ``at``."""
        if self.survives_after is None:
            return _EARLY
        return max(at - self.survives_after, self.synced_at)

    def _durable(self, at: float) -> int:
        """How many records survive a kill at ``at``: those synced, and
        those appended by the horizon (``commit_delay`` before it for a
        process crash; see the module's docstring for a node loss)."""
        if self.survives_after is None:
            return 0  # the node took the journal, synced or not
        waited = bisect.bisect_right(self.appended, self._horizon(at))
        return max(self.synced, waited)

    def _settle(self, records: list[Record], pending: int) -> None:
        """Keep ``records`` as the durable journal, then the last ``pending``
        records appended, still pending."""
        keep_times = self.appended[len(self.appended) - pending :] if pending else []
        keep = self.records[len(self.records) - pending :] if pending else []
        self.records = records + keep
        self.appended = [_EARLY] * len(records) + keep_times
        self.synced = len(records)

    def compact(self, window: range, at: float) -> None:
        """After a checkpoint committed: the durable records rewritten as
        the fewest that replay to their state on ``window`` (the ordinals at
        or above its cut), numbered on from the old journal's end, atomically;
        the pending ones follow."""
        n = self._durable(at)
        kept: list[Record] = list(compact(self.records[:n], window))
        self.marks += [
            (self.base + 1 + i, r.checkpoint)
            for i, r in enumerate(self.records[:n])
            if type(r) is Mark
        ]
        del self.marks[:-MAX_MARKS]
        self.base += n
        self._settle(kept, len(self.records) - n)
        self.timelines = {a: t for a, t in self.timelines.items() if t.ordinal >= window.start}
        self.rebased = {a: v for a, v in self.rebased.items() if a in self.timelines}

    def crash(self, at: float) -> None:
        """The process died at ``at``: what was not durable is gone; the
        latest durable progress of each unsealed attempt is written (the one
        record of its snapshots that a replay can still see)."""
        n = self._durable(at)
        horizon = self._horizon(at)
        if self.at_turns:
            # ``Run.turn`` syncs before the tool is called: every record
            # appended by the latest turn end before the kill is durable,
            # that turn's record with them.
            turn_sync = self._last_turn_end(at)
            n = max(n, bisect.bisect_right(self.appended, turn_sync))
            horizon = at
        records = self.records[:n]
        if self.every is not None:
            for o, s, st in replay(records).siblings():
                timeline = self.timelines.get(st.attempt)
                if st.sealed or timeline is None:
                    continue
                tokens = self._progress(timeline, horizon)
                if tokens > _fields(st.payload)[0]:
                    gen = timeline.generation
                    records.append(
                        Progress(o, s, st.attempt, payload(tokens, gen.draw, gen.version))
                    )
        self._settle(records, 0)

    def _last_turn_end(self, at: float) -> float:
        """When the last turn that ended by ``at`` ended, in any attempt."""
        latest = _EARLY
        for timeline in self.timelines.values():
            gen = timeline.generation
            until = at if timeline.end is None else min(at, timeline.end)
            made = self.w.made(gen.length, gen.prefix, until - gen.start)
            turns = self.w.calls(gen.length, made)
            if turns > self.w.calls(gen.length, gen.prefix):
                end = turns * self.w.turn_tokens(gen.length)
                latest = max(latest, gen.start + self.w.duration(gen.length, gen.prefix, end))
        return latest

    def _progress(self, timeline: _Timeline, horizon: float) -> float:
        """The tokens of the latest progress record of this attempt appended
        by ``horizon``: one every ``every`` new tokens while it ran (or one
        at the end of every turn, ``at_turns``), none at or past its full
        length (that is the seal)."""
        assert self.every is not None
        gen = timeline.generation
        until = horizon if timeline.end is None else min(horizon, timeline.end)
        if until <= gen.start:
            return 0.0
        made = self.w.made(gen.length, gen.prefix, until - gen.start)
        if self.at_turns:
            turns = self.w.calls(gen.length, made)  # the turns ended, the last excepted
            tokens = turns * self.w.turn_tokens(gen.length)
            return tokens if turns > self.w.calls(gen.length, gen.prefix) else 0.0
        records = math.floor((made - gen.prefix) / self.every)
        records = min(records, math.ceil((gen.length - gen.prefix) / self.every) - 1)
        return gen.prefix + records * self.every if records > 0 else 0.0

    # -- resume -----------------------------------------------------------

    def recover(self, position: int, checkpoint: int, *, fork: int) -> JournalState:
        """The journal as a resume from the checkpoint of step ``fork`` reads
        it: encoded, decoded (the header and the checkpoint's mark checked),
        replayed; every sibling's version rebased onto the new lineage.
        Raises what ``decode`` and ``Decoded.check_mark`` raise."""
        # A fixed journal id: the simulation is a pure function of its seed.
        header = JournalHeader(self.fingerprint, self.lineage, self.base, bytes(16), self.marks)
        data = encode(header, self.records)
        self.bytes_read += len(data)
        decoded = decode(data, fingerprint=self.fingerprint, lineage=self.lineage)
        if position > decoded.last_seq and position > decoded.header.base:
            # Lost with the node (``RolloutJournal.recover``): what
            # survived, renumbered after the lost mark, which the header
            # now remembers.
            self.lost_records += position - decoded.last_seq
            self.records = [r for r in self.records if type(r) is not Mark]
            self.appended = [_EARLY] * len(self.records)
            self.synced = len(self.records)
            self.marks = [*self.marks, (position, checkpoint)][-MAX_MARKS:]
            self.base = position
            return self.recover(position, checkpoint, fork=fork)
        decoded.check_mark(position, checkpoint)
        state = replay(decoded.records)
        for _, _, st in state.siblings():
            if st.attempt not in self.rebased:
                version = _fields(st.payload)[2]
                self.rebased[st.attempt] = fork - lineage_age(version, fork=fork, step=fork)
        return state

    def sample(self, ordinal: int, sibling: int, state: JournalState) -> Sample:
        """The journaled sample (sealed) or prefix (progress) of a sibling,
        on the current lineage."""
        st = state.get(ordinal, sibling)
        assert st is not None
        tokens, draw, _ = _fields(st.payload)
        return Sample(sibling, tokens, self.rebased[st.attempt], draw, st.attempt)
