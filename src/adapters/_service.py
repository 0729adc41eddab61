"""The ledger service: the single writer behind sibling work, as a Ray actor hosts it.

``LedgerService`` holds a ``StreamCollector`` (the ``Ledger`` of groups of
``config.samples`` siblings, n = 1 by default, and the prompt source), the
sealed samples of open groups, the replay buffer of complete ones and,
optionally, the run's rollout journal
(``frontier_adapters.journal.RolloutJournal``, built inside the service by
the factory it is given: the adapters' root imports no binding, see
ARCHITECTURE.md). It imports no Ray: ``frontier_adapters.ray.LedgerActor``
is this class as an actor, and the same object runs in-process for tests or
under another framework's actor.

Theory of operation
-------------------
Work leaves the service one sibling at a time. ``take(n)`` returns an
``Assignment`` of up to ``n`` ``SampleTask``s: each is a
``frontier_core.Lease`` ``(ordinal, sibling, attempt)``, the prompt's row,
and, after a resume or a failed attempt, the durable ``prefix`` the new
attempt continues (a ``TokenPayload``: the worker generates the rest and
seals prefix + rest). Groups are dispatched whole through the ledger and
their tasks queued, so one group's siblings may go to several workers.
Workers report with ``report(sealed=[(lease, payload)], failed=[lease],
progress=[(lease, payload)], incarnation=assignment.incarnation)``. The
service is the single writer:

* a result counts only if its lease is its sibling's *current* attempt
  (``StreamCollector.current``); anything else is *stale* and refused: a
  late answer, a worker declared dead (``release``), a duplicate, or a
  worker of a previous incarnation of the service. Stale results are never
  journaled, never buffered, never trained.
* an accepted seal is applied to the ledger, then journaled
  (``RolloutJournal.sealed``, with a journal); when a group's last sibling
  seals, the group goes to the buffer in the same call (``SampleGroup``: its
  leases and samples in sibling order). A group whose siblings all came back
  from the journal is added to the buffer and then landed
  (``land_complete``).
* accepted progress (a running sample's whole snapshot so far) is journaled
  (with a journal), and remembered: a new attempt of that sibling, after a
  failure or a worker's death, continues from it.
* an accepted failure fails that attempt (``fail_sample``): the sibling is
  generated again under a new attempt (queued first), or, at the attempt
  limit or under ``granularity="group"``, the group fails whole
  (``requeued``: dispatched again first; ``unstamped``: restored groups
  evicted before the source re-yielded their prompt, taken when the stream
  reaches them again; ``dropped``: resolved, log them).

Checkpoints and resume. ``checkpoint(step=)`` (and ``trained``, which ends
with it) appends the journal's mark, syncs it, and takes the checkpoint
state in the same call (from one moment: the view cannot be torn, because
the ledger, the buffer and the journal live in one single-threaded object):
the ledger record, the stream position, the buffer, the mark's position and
id, the trainer step. Write the state durably, then call
``compact(snapshot.checkpoint_id)``. A service built with
``state=`` resumes: the journal must hold that checkpoint's mark
(``RolloutJournal.recover``), the reuse policy says what comes back, sealed
siblings of groups that need generation return at their dispatch without
generation, running ones continue from their last durable prefix. A fresh
service must write a first checkpoint before ``take`` hands anything out
(``take`` refuses otherwise), so that a journal with samples always has a
checkpoint to resume from. Without a journal a checkpoint is the state
alone, a resume generates again every sibling that was not in the buffer,
and ``take`` needs no first checkpoint.

Attempts across incarnations. The journal's ``attempt_floor`` is one above
every attempt it names, which misses attempts the dead writer handed out
whose workers had not yet reported anything durable; a new incarnation
would deal those numbers again, and a surviving worker's answer would pass
as current. So attempts are reserved before they leave the service (a
``Reserve`` record in the journal, synced, once per ``reserve`` attempts:
``RolloutJournal.recover`` reserves the first block, the collector, bound
to the journal, the next ones before each dispatch or restart), and a
resumed incarnation starts at or above the last reservation (the journal's
``attempt_floor`` includes it): every lease of a previous incarnation is
below this incarnation's first attempt (``floor``) and stale for good.
Without a journal nothing durable numbers the attempts, so a report or a
release names the incarnation it answers (``Assignment.incarnation``): a
lost incarnation's answers and releases are refused by that name (and it
must be given).

Rules of the house: every coverage and fencing decision is the ledger's; the
service pre-checks currency only so that an unknown or foreign attempt is
refused rather than raised, sequences ledger, journal and buffer, and owns
the files. Not thread-safe: host it in a single-threaded actor.
"""

from __future__ import annotations

import base64
import itertools
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, cast

import attrs

from frontier_core import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    Lease,
    LedgerConfig,
    Resumed,
    Status,
)
from frontier_core._errors import shown
from frontier_core.journal import (
    BytesPayload,
    JsonPayload,
    Payload,
    Reuse,
    TokenPayload,
)

from ._collector import StreamCollector, StreamSource, Taken
from ._state import KEY_FORMAT, KEY_VERSION, check_state
from .journal import JournalFileError, JournalShipError, Recovered, RolloutJournal
from .run import Drained
from .run._run import Awaiting, checkpoint_fits, collector_record, drain_journal, recover

FORMAT: Final = "frontier_adapters.ledger_service"
VERSION: Final = 1
KEY_COLLECTOR: Final = "collector"
KEY_BUFFER: Final = "buffer"
KEY_JOURNAL: Final = "journal"
KEY_STEP: Final = "step"
_KEYS: Final = frozenset(
    {KEY_FORMAT, KEY_VERSION, KEY_COLLECTOR, KEY_BUFFER, KEY_JOURNAL, KEY_STEP}
)
#: The window a compaction keeps: every ordinal at or above the cut.
_END: Final = 1 << 62
_PAYLOADS: Final = (TokenPayload, JsonPayload, BytesPayload)
#: The progress cadence workers are told without a journal (a hint: progress
#: only lets a new attempt after a failure continue a sample).
PROGRESS_EVERY: Final = 256


@attrs.frozen
class SampleTask:
    """One sibling to generate: ``lease`` names the attempt, ``row`` the
    prompt, ``prefix`` (or ``None``) the durable tokens this attempt
    continues: seal ``prefix`` then what you generate after it
    (``frontier_adapters.journal.resumed_sample``)."""

    lease: Lease
    row: Any
    prefix: Payload | None = None


@attrs.frozen
class Assignment:
    """What one ``take`` hands a worker: ``tasks`` (possibly of several
    groups; a group's siblings may be spread over several assignments).
    ``version`` is the trainer step the service last heard of (stamp the
    tokens with your policy's version if you know better); report progress
    every ``progress_every`` new tokens. An empty assignment is
    ``throttled`` when ``max_ahead`` held it back (ask again after a
    training step), else nothing was ready."""

    tasks: tuple[SampleTask, ...]
    version: int = 0
    progress_every: int = 256
    throttled: bool = False
    incarnation: str = ""

    @property
    def leases(self) -> tuple[Lease, ...]:
        return tuple(t.lease for t in self.tasks)


@attrs.frozen
class SampleGroup:
    """A complete group in the buffer: ``leases[s]`` is the attempt that
    sealed sibling ``s`` and ``samples[s]`` its sample."""

    ordinal: int
    leases: tuple[Lease, ...]
    samples: tuple[Payload, ...]


@attrs.frozen
class Reported:
    """What a report, a release or an eviction did. ``stale`` results were
    refused (not the sibling's current attempt), ``foreign`` those of them
    from a previous incarnation of the service (below its first attempt).
    ``landed``: groups now in the buffer; ``restarted``: the new attempts of
    failed siblings (queued, handed out first). Groups that failed whole (or
    were evicted) are kept apart as the core keeps them: ``requeued`` are
    dispatched again first, ``unstamped`` come back when the source
    re-yields them (restored groups evicted before their prompt was
    re-read), ``dropped`` are resolved (log them)."""

    sealed: int = 0
    failed: int = 0
    progress: int = 0
    stale: tuple[Lease, ...] = ()
    foreign: int = 0
    landed: tuple[int, ...] = ()
    restarted: tuple[Lease, ...] = ()
    requeued: tuple[int, ...] = ()
    unstamped: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()


@attrs.frozen
class Snapshot:
    """The service at a checkpoint: ``state`` (JSON types; write it, then
    ``compact(checkpoint_id)``), the ordinals ``dropped`` since the previous
    snapshot (log them before the checkpoint commits), whether the stream is
    ``drained``, the cut, the buffered groups, and the incarnation's
    counters (``stats``, a copy)."""

    state: dict[str, Any]
    dropped: tuple[int, ...]
    drained: bool
    cut: int
    buffered: int
    checkpoint_id: int
    stats: dict[str, int]


# -- payloads in the checkpoint state ---------------------------------------------------


def payload_to_json(payload: Payload) -> dict[str, Any]:
    """A payload as JSON types (bytes as base64), for the saved buffer."""
    if isinstance(payload, TokenPayload):
        return {
            "tokens": base64.b64encode(payload.token_data).decode(),
            "logprobs": base64.b64encode(payload.logprob_data).decode(),
            "runs": [list(r) for r in payload.version_runs],
            "reward": payload.reward,
        }
    if isinstance(payload, JsonPayload):
        return {"json": payload.text}
    if isinstance(payload, BytesPayload):
        return {"bytes": base64.b64encode(payload.data).decode()}
    raise TypeError(f"not a journal payload: {type(payload).__name__}")


def payload_from_json(value: Any) -> Payload:
    """The payload ``payload_to_json`` wrote; ``CheckpointCorruptError`` for
    anything else."""
    try:
        if isinstance(value, dict) and set(value) == {"tokens", "logprobs", "runs", "reward"}:
            return TokenPayload(
                base64.b64decode(value["tokens"], validate=True),
                base64.b64decode(value["logprobs"], validate=True),
                value["runs"],
                value["reward"],
            )
        if isinstance(value, dict) and set(value) == {"json"}:
            return JsonPayload(value["json"])
        if isinstance(value, dict) and set(value) == {"bytes"}:
            return BytesPayload(base64.b64decode(value["bytes"], validate=True))
    except (TypeError, ValueError) as exc:
        raise CheckpointCorruptError(f"a saved sample is damaged: {str(exc)[:200]}") from None
    raise CheckpointCorruptError(f"a saved sample is not a payload: {shown(value)}")


def _lease(value: Any) -> Lease:
    """``value`` as a ``Lease`` of ints >= 0 (a worker's report, checked)."""
    if not isinstance(value, tuple | list) or len(value) != 3:
        raise TypeError(f"not a lease (ordinal, sibling, attempt): {shown(value)}")
    if any(type(x) is not int or x < 0 for x in value):
        raise ValueError(f"a lease holds ints >= 0, got {shown(value)}")
    return Lease(*value)


def _payload(value: Any) -> Payload:
    if not isinstance(value, _PAYLOADS):
        raise TypeError(
            f"a sample must be a TokenPayload, JsonPayload or BytesPayload, got "
            f"{type(value).__name__}"
        )
    return value


def _open_journal(factory: Callable[[], RolloutJournal], lock_timeout: float) -> RolloutJournal:
    """The journal, waiting up to ``lock_timeout`` s for a dying previous
    writer (a killed actor's process) to release its lock."""
    deadline = time.monotonic() + lock_timeout
    while True:
        try:
            return factory()
        except JournalFileError as exc:
            if "another writer" not in exc.reason or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


class LedgerService:
    """The ledger, its prompt source, the replay buffer and (optionally) the
    rollout journal, behind batch methods (see the module doc).

    ``source`` is a ``StreamSource`` or a callable building one (so that a
    torch loader is built inside the actor); ``config.samples`` is the
    group size (``config`` defaults to the source's stream, n = 1).
    ``journal`` (optional) builds the run's journal inside the service, e.g.
    ``functools.partial(RolloutJournal, "run/journal",
    fingerprint=config.fingerprint, lineage=run_id)`` (its fingerprint must
    be the config's; its ``progress_every`` is the cadence the workers are
    told; the lineage names the run, chosen once and kept across resumes).
    ``state`` (``Snapshot.state``) resumes; ``load_replay_buffer`` says
    whether its saved groups come back (else they are rebuilt from the
    journal if the reuse policy allows, or regenerated). ``reuse`` is the
    resume's policy (default ``Reuse.everything()``); ``reserve`` the
    attempts reserved at a time; ``lock_timeout`` how long to wait for a
    dead predecessor's journal lock.

    Raises the core's ``CheckpointError``s for a bad state,
    the journal's errors (``JournalMismatchError``, ``JournalBehindError``)
    for a journal that is not the checkpoint's (one that lost its tail
    with its node is not refused: ``RolloutJournal.recover``), and
    ``JournalWithoutCheckpointError`` (a ``ValueError``) for a journal with
    samples but no checkpoint. A journal that holds only reservations (a
    start that died before its first checkpoint) is a fresh start, above
    them.
    """

    def __init__(
        self,
        source: StreamSource | Callable[[], StreamSource],
        config: LedgerConfig | None = None,
        *,
        journal: Callable[[], RolloutJournal] | None = None,
        state: Mapping[str, Any] | None = None,
        load_replay_buffer: bool = True,
        reuse: Reuse | None = None,
        reserve: int = 1024,
        lock_timeout: float = 30.0,
    ) -> None:
        if hasattr(source, "pull"):
            built = cast(StreamSource, source)
        else:
            built = source()
        self._incarnation = os.urandom(4).hex()
        #: A termination notice came (``drain``): ``take`` deals nothing more.
        self._draining = False
        self._journal = None if journal is None else _open_journal(journal, lock_timeout)
        try:
            # Bound to the journal: attempts are reserved before they are dealt.
            self._collector = StreamCollector(built, config, journal=self._journal, reserve=reserve)
            self.config = config = self._collector.config
            self._n = config.samples
            self._block = reserve
            if self._journal is not None:
                header = self._journal.writer.recovered.header
                if header.fingerprint != config.fingerprint:
                    raise ValueError(
                        f"the journal is of stream {header.fingerprint!r:.80}, the config's is "
                        f"{config.fingerprint!r:.80}"
                    )
            #: Sealed samples of open groups: (ordinal, sibling) -> (lease, sample).
            self._held: dict[tuple[int, int], tuple[Lease, Payload]] = {}
            #: The latest prefix a new attempt of a sibling continues.
            self._prefix: dict[tuple[int, int], Payload] = {}
            #: Tasks dispatched in the ledger, not handed out yet (restarts first).
            self._queue: deque[SampleTask] = deque()
            #: Groups dispatched and not complete yet, with their rows.
            self._open: dict[int, Any] = {}
            self._buffer: dict[int, SampleGroup] = {}
            self._dropped: list[int] = []
            #: The checkpoint ids awaiting ``compact``.
            self._awaiting = Awaiting()
            #: The last checkpoint's duration, from ``checkpoint`` to its
            #: ``compact`` (the caller's write included): ``drain``'s rule.
            self._checkpoint_seconds = math.nan
            self._next_id = 0
            self._step = 0
            self._checkpointed = False
            self.recovered: Recovered | None = None
            #: What the journal alone would have started attempts at.
            self.journal_floor = 0
            self.stats: dict[str, int] = dict.fromkeys(
                (
                    "taken",
                    "continued",
                    "sealed",
                    "progress",
                    "failed",
                    "released",
                    "stale",
                    "foreign",
                    "reused",
                    "landed",
                    "trained",
                    "evicted",
                    "recovered_sealed",
                    "recovered_prefixes",
                ),
                0,
            )
            if state is None:
                if self._journal is not None:
                    self._start()
                self._checkpointed = self._journal is None
            else:
                self._restore(state, load_replay_buffer, reuse or Reuse.everything())
            #: This incarnation's first attempt: every lease below it is foreign.
            floor = 0 if self._journal is None else self._journal.attempt_floor or 0
            self.floor = max(self._collector.ledger.next_attempt, floor)
        except BaseException:
            self.close()
            raise

    # -- rollout side ---------------------------------------------------------

    def take(self, n: int, *, max_ahead: int | None = None) -> Assignment:
        """Up to ``n`` sibling tasks, restarted ones first, dispatching
        groups as needed. With ``max_ahead``, no new group is dispatched while
        that many groups are open (dispatched, not complete) or buffered.
        Raises ``ValueError`` (taking nothing) unless ``n`` is an int >= 0
        and ``max_ahead`` None or an int >= 1 (0 would never dispatch)."""
        if type(n) is not int or n < 0:
            raise ValueError(f"take: n must be an int >= 0, got {shown(n)}")
        if max_ahead is not None and (type(max_ahead) is not int or max_ahead < 1):
            raise ValueError(f"take: max_ahead must be None or an int >= 1, got {shown(max_ahead)}")
        if not self._checkpointed:
            raise RuntimeError(
                "take before the first checkpoint: write checkpoint(step=0) durably first, so "
                "that a journal with samples always has a checkpoint to resume from"
            )
        tasks: list[SampleTask] = []
        throttled = False
        while len(tasks) < n and not self._draining:
            if self._queue:
                task = self._queue.popleft()
                if self._collector.current(task.lease):
                    tasks.append(task)
                continue
            if (
                max_ahead is not None
                and len(self._open) + len(self._buffer) >= max_ahead
                and not self._collector.exhausted
            ):
                throttled = True
                break
            taken = self._collector.take_samples(1)
            if not taken:
                break
            self._start_group(taken[0])
        self.stats["taken"] += len(tasks)
        self.stats["continued"] += sum(t.prefix is not None for t in tasks)
        self._poll()
        return Assignment(
            tuple(tasks),
            version=self._step,
            progress_every=self._journal.progress_every if self._journal else PROGRESS_EVERY,
            throttled=throttled and not tasks,
            incarnation=self._incarnation,
        )

    def report(
        self,
        sealed: Iterable[tuple[Any, Payload]] = (),
        failed: Iterable[Any] = (),
        progress: Iterable[tuple[Any, Payload]] = (),
        *,
        incarnation: str | None = None,
    ) -> Reported:
        """Apply a worker's results: progress snapshots, finished samples and
        failed attempts, for current leases only; the rest are stale.
        ``incarnation`` is the ``Assignment``'s: a report of another
        incarnation is foreign whole. Required without a journal, whose
        reservation is what otherwise fences a lost incarnation's answers.
        Raises ``TypeError``/``ValueError`` for a malformed report (nothing
        of it is applied then)."""
        progress_items = [(_lease(x), _payload(p)) for x, p in progress]
        sealed_items = [(_lease(x), _payload(p)) for x, p in sealed]
        failed_items = [_lease(x) for x in failed]
        every = [x for x, _ in progress_items + sealed_items] + failed_items
        foreign = self._foreign(incarnation, "report", every)
        if foreign is not None:
            return foreign
        stale: list[Lease] = []
        journaled = 0
        for lease, payload in progress_items:
            if self._current(lease):
                if self._journal is not None:
                    self._journal.progress(lease, payload)
                self._prefix[(lease.ordinal, lease.sibling)] = payload
                journaled += 1
            else:
                stale.append(lease)
        accepted: dict[Lease, Payload] = {}
        for lease, payload in sealed_items:
            if lease not in accepted and self._current(lease):
                accepted[lease] = payload
            else:
                stale.append(lease)
        landed: tuple[int, ...] = ()
        if accepted:
            effect = self._collector.sealed(list(accepted))
            stale += effect.fenced
            for lease in effect.sealed:
                if self._journal is not None:
                    self._journal.sealed(lease, accepted[lease])
                key = (lease.ordinal, lease.sibling)
                self._held[key] = (lease, accepted[lease])
                self._prefix.pop(key, None)
            for o in effect.landed:
                self._land(o)
            landed = effect.landed
            self.stats["sealed"] += len(effect.sealed)
            self.stats["landed"] += len(effect.landed)
        self.stats["progress"] += journaled
        # A dict keeps the order and dedups in O(1) per lease (a list's
        # membership test made a large report quadratic).
        failures: dict[Lease, None] = {}
        for lease in failed_items:
            if lease not in accepted and lease not in failures and self._current(lease):
                failures[lease] = None
            else:
                stale.append(lease)
        result = self._fail(list(failures))
        self.stats["failed"] += result.failed
        stale += result.stale
        self._poll()
        return attrs.evolve(
            result,
            sealed=len(accepted),
            progress=journaled,
            stale=tuple(stale),
            foreign=self._count_stale(stale),
            landed=landed,
        )

    def release(self, leases: Iterable[Any], *, incarnation: str | None = None) -> Reported:
        """Fail the attempts among ``leases`` that are still current (their
        worker died, or its call ended without reporting them); the others
        are stale (already sealed or failed) and ignored. ``incarnation`` is
        as in ``report``: the ``Assignment``'s, required without a journal
        (a rebuilt service deals the lost one's attempt numbers again, so
        its leases would fail the new current attempts); leases of another
        incarnation are foreign whole. Raises ``TypeError``/``ValueError``
        for malformed leases (nothing is released then)."""
        items = [_lease(x) for x in leases]
        foreign = self._foreign(incarnation, "release", items)
        if foreign is not None:
            return foreign
        current: dict[Lease, None] = {}  # ordered, O(1) dedup (a list's was quadratic)
        stale: list[Lease] = []
        for lease in items:
            if lease not in current and self._current(lease):
                current[lease] = None
            else:
                stale.append(lease)
        result = self._fail(list(current))
        self.stats["released"] += result.failed
        self._poll()
        return attrs.evolve(result, stale=tuple(stale) + result.stale)

    def flush(self) -> int:
        """Commit the journal now; returns its durable position (tests, or a
        driver that wants durability before it acts); 0 without a journal."""
        return 0 if self._journal is None else self._journal.writer.sync()

    # -- trainer side -----------------------------------------------------------

    def batch(self, k: int) -> list[SampleGroup]:
        """The ``k`` oldest complete groups, or fewer once no more can come;
        ``[]`` otherwise. They stay buffered until ``trained``."""
        self._poll()
        if len(self._buffer) >= k or (self._buffer and self.idle):
            return list(itertools.islice(self._buffer.values(), k))
        return []

    def trained(self, ordinals: Iterable[int], *, step: int, save_buffer: bool = True) -> Snapshot:
        """One training step consumed these groups; the trainer is at
        ``step`` now. Returns the checkpoint after it (``checkpoint``)."""
        ordinals = list(ordinals)
        self._collector.trained(ordinals)
        for o in ordinals:
            del self._buffer[o]
        self.stats["trained"] += len(ordinals)
        return self.checkpoint(step=step, save_buffer=save_buffer)

    def evict(self, ordinals: Iterable[int]) -> Reported:
        """The trainer discarded these buffered groups as stale: requeued
        ones are dispatched again first (every sibling anew), unstamped ones
        when the stream reaches them, dropped ones are logged."""
        ordinals = list(ordinals)
        effect = self._collector.evicted(ordinals)
        for o in ordinals:
            del self._buffer[o]
        self._dropped += effect.dropped
        self.stats["evicted"] += len(ordinals)
        return Reported(
            requeued=effect.requeued, unstamped=effect.unstamped, dropped=effect.dropped
        )

    def checkpoint(self, *, step: int, save_buffer: bool = True) -> Snapshot:
        """Mark and sync the journal and take the checkpoint state, in one
        call. With ``save_buffer=False`` the buffer is not saved: a resume
        rebuilds its groups from the journal (if the reuse policy keeps
        their samples) or generates them again."""
        if type(step) is not int or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        checkpoint_id = self._next_id
        self._next_id += 1
        mark = None
        if self._journal is not None:
            mark = {"position": self._journal.mark(checkpoint_id), "id": checkpoint_id}
        collector = self._collector.checkpoint_state(save_buffer=save_buffer, save_sealed=False)
        buffer = (
            [
                [
                    o,
                    [
                        [x.sibling, x.attempt, payload_to_json(p)]
                        for x, p in zip(g.leases, g.samples, strict=True)
                    ],
                ]
                for o, g in self._buffer.items()
            ]
            if save_buffer
            else []
        )
        self._step = step
        self._checkpointed = True
        cut = self._collector.ledger.cut
        self._awaiting.add(checkpoint_id, cut)
        dropped, self._dropped = tuple(self._dropped), []
        return Snapshot(
            state={
                KEY_FORMAT: FORMAT,
                KEY_VERSION: VERSION,
                KEY_COLLECTOR: collector,
                KEY_BUFFER: buffer,
                KEY_JOURNAL: mark,
                KEY_STEP: step,
            },
            dropped=dropped,
            drained=self._collector.drained,
            cut=cut,
            buffered=len(self._buffer),
            checkpoint_id=checkpoint_id,
            stats=dict(self.stats),
        )

    def drain(self, *, step: int, seconds: float = 30.0) -> tuple[Drained, Snapshot | None]:
        """A termination notice (SIGTERM, a spot instance's warning) with
        ``seconds`` left: in order, so that what matters most is durable
        first. Dispatch stops (``take`` deals nothing from now on: the
        fleet's workers finish or are lost, and their reports still
        count); the journal is synced and, when shipped, flushed off the
        node (every seal and every progress report accepted so far
        survives the node: a resume continues each running sample from its
        worker's last progress report); then, if the time left allows it,
        the state of a checkpoint at ``step`` (its journal mark durable and
        shipped too), for you to write as after ``checkpoint`` (then exit;
        ``compact`` is not needed). The rule is ``Run.drain``'s: at least
        twice the last checkpoint's duration left, timed here from
        ``checkpoint`` to its ``compact`` (your write included), and one
        second before any was. Returns what was done (``Drained``;
        ``progress_records`` is 0: progress is journaled as workers report
        it) and the state, or ``None`` when the journal could not be made
        durable in time (the last checkpoint and the journal still resume
        the run, costing what they do not hold)."""
        if type(step) is not int or step < 0:
            raise ValueError(f"drain: step must be an int >= 0, got {shown(step)}")
        if not isinstance(seconds, int | float) or not seconds > 0:
            raise ValueError(f"drain: seconds must be a number > 0, got {shown(seconds)}")
        began = time.monotonic()
        deadline = began + seconds
        self._draining = True
        running = sum(1 for _ in self._collector.ledger.running())
        shipped = self._journal is None or drain_journal(self._journal, deadline)
        synced = time.monotonic()
        snapshot = None
        if shipped and checkpoint_fits(deadline, self._checkpoint_seconds):
            try:
                snapshot = self.checkpoint(step=step)
            except JournalShipError:
                shipped = False
        ended = time.monotonic()
        return (
            Drained(
                running=running,
                progress_records=0,
                synced_seconds=synced - began,
                shipped=shipped,
                checkpointed=snapshot is not None,
                seconds=ended - began,
                in_time=ended <= deadline,
            ),
            snapshot,
        )

    @property
    def draining(self) -> bool:
        """A termination notice came (``drain``): nothing more is dealt."""
        return self._draining

    def compact(self, checkpoint_id: int) -> int:
        """The checkpoint ``checkpoint_id`` is durable: rewrite the journal
        with only what its window (ordinals at or above its cut) needs.
        Returns the journal's durable position (0 without a journal).
        Raises ``CheckpointMismatchError`` (a ``ValueError``), changing
        nothing, for an id this service did not hand out since its last
        compaction: unknown, of another incarnation, or compacted already
        (itself or by a later id)."""
        cut, self._checkpoint_seconds = self._awaiting.publish(
            checkpoint_id, f"compact: {shown(checkpoint_id)}"
        )
        if self._journal is None:
            return 0
        return self._journal.compact(range(cut, _END))

    # -- queries ------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No group is open, none queued, nothing left to take."""
        return not self._open and not self._queue and self._collector.exhausted

    def status(self) -> dict[str, Any]:
        """Counters and sizes, for progress and tests."""
        ledger = self._collector.ledger
        return {
            **self.stats,
            "incarnation": self._incarnation,
            "floor": self.floor,
            "journal_floor": self.journal_floor,
            "next_attempt": ledger.next_attempt,
            "reserved": None if self._journal is None else self._journal.reserved,
            "cut": ledger.cut,
            "next_ordinal": ledger.next_ordinal,
            "open": len(self._open),
            "queued": len(self._queue),
            "running": sum(1 for _ in ledger.running()),
            "held": len(self._held),
            "buffered": len(self._buffer),
            "pending": self._collector.pending,
            "journal_durable": None if self._journal is None else self._journal.writer.durable,
            "drained": self._collector.drained,
            "idle": self.idle,
        }

    def ping(self) -> bool:
        return True

    def pid(self) -> int:
        """This process's id (the kill tests SIGKILL it)."""
        return os.getpid()

    def close(self) -> None:
        """Commit and close the journal (a clean end of a run)."""
        if self._journal is not None:
            self._journal.close()

    def _poll(self) -> None:
        if self._journal is not None:
            self._journal.poll()

    # -- internals ----------------------------------------------------------------

    def _foreign(self, incarnation: str | None, call: str, leases: list[Lease]) -> Reported | None:
        """The refusal of a ``call`` (report or release) of a lost
        ``incarnation``, whose ``leases`` are all foreign; None for this
        incarnation's. ``ValueError`` if it names none without a journal,
        whose reservation otherwise fences a lost incarnation's leases."""
        if incarnation is None and self._journal is None:
            raise ValueError(
                f"a service without a journal needs the {call}'s incarnation= (the "
                "Assignment's): nothing else fences a lost incarnation's leases"
            )
        if incarnation is None or incarnation == self._incarnation:
            return None
        self.stats["stale"] += len(leases)
        self.stats["foreign"] += len(leases)
        return Reported(stale=tuple(leases), foreign=len(leases))

    def _current(self, lease: Lease) -> bool:
        return lease.sibling < self._n and self._collector.current(lease)

    def _count_stale(self, stale: Iterable[Lease]) -> int:
        stale = list(stale)
        foreign = sum(1 for x in stale if x.attempt < self.floor)
        self.stats["stale"] += len(stale)
        self.stats["foreign"] += foreign
        return foreign

    def _start_group(self, taken: Taken) -> None:
        o = taken.ordinal
        for lease in taken.reused:
            assert self.recovered is not None, "a fresh run reuses nothing"
            self._held[(o, lease.sibling)] = (lease, self.recovered.sample(lease))
        self.stats["reused"] += len(taken.reused)
        if taken.complete:
            self._open[o] = taken.row
            self._land(o)
            self._collector.land_complete([o])
            self.stats["landed"] += 1
            return
        self._open[o] = taken.row
        for lease in taken.leases:
            self._queue.append(self._task(lease))

    def _task(self, lease: Lease) -> SampleTask:
        prefix = self._prefix.get((lease.ordinal, lease.sibling))
        return SampleTask(lease, self._open[lease.ordinal], prefix)

    def _land(self, o: int) -> None:
        parts = [self._held.pop((o, s)) for s in range(self._n)]
        self._buffer[o] = SampleGroup(
            o, tuple(lease for lease, _ in parts), tuple(p for _, p in parts)
        )
        self._forget(o, keep_buffer=True)

    def _forget(self, o: int, *, keep_buffer: bool = False) -> None:
        self._open.pop(o, None)
        for s in range(self._n):
            self._held.pop((o, s), None)
            self._prefix.pop((o, s), None)
        if not keep_buffer:
            self._buffer.pop(o, None)

    def _fail(self, leases: list[Lease]) -> Reported:
        if not leases:
            return Reported()
        effect = self._collector.failed_samples(leases)
        whole = {*effect.requeued, *effect.unstamped, *effect.dropped}
        for o in whole:
            self._forget(o)  # the group failed whole: its queued tasks are stale now
        self._dropped += effect.dropped
        # Two failed siblings of one group in one event are two rounds: a
        # sibling the first round sent back is listed in ``restart`` even
        # when the second failed its group whole; only the others restart.
        again = [(o, s) for o, s in effect.restart if o not in whole]
        restarted: tuple[Lease, ...] = ()
        if again:
            restarted = self._collector.restart(again)
            self._queue.extendleft(reversed([self._task(lease) for lease in restarted]))
        return Reported(
            failed=len(leases) - len(effect.fenced),
            stale=effect.fenced,
            restarted=restarted,
            requeued=effect.requeued,
            unstamped=effect.unstamped,
            dropped=effect.dropped,
        )

    # -- start and resume -----------------------------------------------------------

    def _start(self) -> None:
        assert self._journal is not None
        self.recovered, _ = recover(
            self._collector,
            self._journal,
            None,
            position=None,
            checkpoint_id=0,
            step=0,
            reuse=Reuse.nothing(),
            reserve=self._block,
        )

    def _restore(self, state: Mapping[str, Any], load_replay_buffer: bool, reuse: Reuse) -> None:
        state = check_state(state, what="ledger state", fmt=FORMAT, version=VERSION, keys=_KEYS)
        mark, step, buffer = state[KEY_JOURNAL], state[KEY_STEP], state[KEY_BUFFER]
        if mark is None and self._journal is not None:
            raise CheckpointMismatchError(
                "the state was saved by a service without a journal: its journal marks "
                "nothing this one could resume from"
            )
        if mark is not None and not (
            isinstance(mark, Mapping)
            and set(mark) == {"position", "id"}
            and all(type(v) is int and v >= 0 for v in mark.values())
        ):
            raise CheckpointCorruptError(
                f"'journal' must be {{position, id}} or null, got {shown(mark)}"
            )
        if type(step) is not int or step < 0:
            raise CheckpointCorruptError(f"'step' must be an int >= 0, got {shown(step, 40)}")
        groups = self._read_buffer(buffer)
        collector = state[KEY_COLLECTOR]
        checkpoint = collector_record(collector, self.config.fingerprint)
        if self._journal is None or mark is None:
            # Without a journal (or with one the state does not mark)
            # nothing comes back but the state: every sibling outside the
            # buffer is generated again.
            resumed = self._collector.resume(
                collector, load_replay_buffer=load_replay_buffer, sealed=()
            )
            self._restored(resumed, groups, load_replay_buffer)
            self._checkpointed = True
            self._step = step
            self._next_id = (0 if mark is None else mark["id"]) + 1
            return
        recovered, from_journal = recover(
            self._collector,
            self._journal,
            collector,
            position=mark["position"],
            checkpoint_id=mark["id"],
            step=step,
            reuse=reuse,
            reserve=self._block,
            load_replay_buffer=load_replay_buffer,
        )
        assert from_journal is not None
        self._restored(from_journal, groups, load_replay_buffer)
        self.recovered = recovered
        # What the journal's samples alone would have started attempts at.
        self.journal_floor = max(
            [checkpoint.next_attempt] + [st.attempt + 1 for _, _, st in recovered.state.siblings()]
        )
        for lease in recovered.state.progress():
            st = recovered.prefix(lease.ordinal, lease.sibling)
            if st is not None:
                self._prefix[(lease.ordinal, lease.sibling)] = st.payload
        self.stats["recovered_sealed"] = len(from_journal.reused)
        self.stats["recovered_prefixes"] = len(self._prefix)
        self._next_id = mark["id"] + 1
        self._step = step
        self._checkpointed = True

    def _restored(
        self, resumed: Resumed, groups: dict[int, SampleGroup], load_replay_buffer: bool
    ) -> None:
        if load_replay_buffer:
            retained = set(resumed.ledger.ordinals(Status.BUFFERED))
            if set(groups) != retained:
                raise CheckpointCorruptError(
                    f"the saved buffer holds {len(groups)} groups, the ledger retained "
                    f"{len(retained)} other ordinals"
                )
            self._buffer = groups

    def _read_buffer(self, buffer: Any) -> dict[int, SampleGroup]:
        if not isinstance(buffer, list):
            raise CheckpointCorruptError("'buffer' must be [[ordinal, samples], ...]")
        groups: dict[int, SampleGroup] = {}
        for entry in buffer:
            if not (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int):
                raise CheckpointCorruptError(f"a buffered group is {shown(entry)}")
            o, samples = entry
            if not isinstance(samples, list) or len(samples) != self._n:
                raise CheckpointCorruptError(f"buffered group {o} does not hold {self._n} samples")
            leases, payloads = [], []
            for s, item in enumerate(samples):
                if not (
                    isinstance(item, list)
                    and len(item) == 3
                    and item[0] == s
                    and type(item[1]) is int
                    and item[1] >= 0
                ):
                    raise CheckpointCorruptError(f"buffered group {o}: sample {s} is damaged")
                leases.append(Lease(o, s, item[1]))
                payloads.append(payload_from_json(item[2]))
            groups[o] = SampleGroup(o, tuple(leases), tuple(payloads))
        return groups
