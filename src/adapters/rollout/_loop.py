"""The rollout adapter: an asyncio loop that binds a run (or a bare
collector) to an engine with vLLM's ``AsyncLLM`` contract, one request per
group or one per sibling.

Theory of operation
-------------------
The loop reports to one of two things. A ``frontier_adapters.Run``
(``RolloutLoop(run, engine, sink)``, the durable way): the loop reports
what happens through the run's own calls (``take``, ``seal``, ``progress``,
``fail``), and the run journals what the ledger accepted, reserves every
attempt before it is dealt, fences stale answers, gives back the samples
and prefixes its recovery found (``sample``, ``prefix``) and checkpoints
(``run.checkpoint``, called by the trainer between two awaits). Or a
collector (a ``StreamCollector``, or a rank's ``RankCollector`` under
``Schedule.GROUP``), optionally with a ``RolloutJournal`` the loop writes
itself, for integrations that arrange recovery and checkpoints on their
own. Both take the same path through the loop; only the reporting calls
differ.

A feeder task keeps up to ``max_in_flight`` requests generating. It takes
groups (``Run.take``, or the collector's ``take_samples``, which report
them dispatched) and only then starts one worker task per request; siblings
dealt beyond the room left (and restarted ones) wait in the loop until the
feeder has room to start them. What a
request is, is the loop's ``schedule``:

* ``Schedule.GROUP`` (the default with a collector; not with a run, which
  journals sample by sample): one request of ``n = num_generations``
  samples per prompt, under a request id that names the ordinal and the
  ledger's count of the ordinal's failed attempts (``o17-a0``; checkpointed,
  so after a resume ``o17`` that failed once before the crash is submitted
  as ``o17-a1``). The group lands, or fails, whole (``landed``, ``failed``).
* ``Schedule.SIBLING``: each lease the ledger hands out is a request of one
  sample, under ``o{ordinal}-s{sibling}-a{attempt}`` (the run-wide attempt
  of the lease), so a failed or late sample costs only itself
  (``sealed``, ``failed_samples``, ``restart``); a result the ledger fences
  (an attempt no longer current) is dropped (event ``fenced``). With a
  run, or a ``RolloutJournal``, every sample the ledger accepts is
  journaled as it seals (a ``TokenPayload``: token ids, the engine's
  log-probs, the policy version of each token) and a running sample every
  ``progress_every`` tokens (the run's, or ``journal.progress_every``;
  after a run's termination notice, every advance is reported, so that
  ``Run.drain`` journals each running sample's latest tokens); after a
  resume (the run's recovery, or ``recovered`` from
  ``RolloutJournal.recover``) siblings the ledger reused come back from the
  journal without a request, and a new attempt of a sibling with a durable
  prefix continues from it: the engine gets ``prompt_of(row, prefix)`` and
  ``sampling_params(lease, len(prefix))``, and the sample it seals is the
  prefix then the new tokens, each token keeping the version that
  generated it. A group then lands when its last sibling seals (or at its
  dispatch when every sibling is reused); ``Group.samples`` holds the
  payloads and ``Group.attempt`` is the highest attempt among them.

A landing is one synchronous stretch: the group is added to the replay
buffer, then reported to the ledger, with no await between, so no
checkpoint falls between the two. The worker then lets the engine's
generator run to its end (its exit), which touches no coverage state: a
checkpoint taken between the landing and the exit sees the group buffered,
never outstanding, and an error raised after the landing is ignored rather
than reported as a failure of a group that is already buffered. With a
run, ``run.checkpoint`` is that one synchronous stretch (the journal's
mark, the ledger's state, the write, the compaction); the sink needs no
checkpoint: a group buffered at the checkpoint comes back at the next
life's ``take``, complete, from the journal, and the loop lands it in the
sink without a request. (``Run.take`` lands a complete group before the
loop adds it to the sink; a sink that refuses it stops the loop, and the
group comes back the same way in the next life.) With a bare journal, call
``journal.mark(n)`` and take the collector's ``checkpoint_state`` in one
synchronous stretch, then write both; compact after the checkpoint is
durable.

Rules of the house
------------------
* Ordinals and leases come from the loop's own record of what it submitted
  (the worker holds them), never from the outputs: a request id or an
  output that an environment rewrote cannot move coverage. An output whose
  request id is not the one submitted fails the request.
* Every coverage decision is the ledger's. The loop reports a failure for
  an exception, a timeout, an engine-side abort or an incomplete final
  output, and follows the effect: requeued ordinals come back through
  ``take_samples`` (the collector offers them first), siblings to generate
  again are restarted, dropped ordinals are passed to ``on_dropped`` for
  the training log.
* Every exit path releases the worker's ordinal exactly once: landed, or
  failed, or left outstanding on purpose when the loop stops. ``aclose``
  cancels the workers, which aborts their requests (cancelling a vLLM
  ``generate`` aborts it; the loop also calls ``engine.abort``), and reports
  nothing: a shutdown is not a failed attempt. The outstanding ordinals stay
  unresolved in the ledger and hold the cut, so the next checkpoint records
  them and a resume regenerates them; ``aclose`` returns them.
* Some errors are not a failed generation and *stop* the loop instead: the
  engine died (``fatal_errors``, vLLM's ``EngineDeadError``), the sink
  refused a group (``GroupSink.add`` raised), the progress observer or the
  journal raised, or the ledger refused a move (a ``FrontierError``: a
  wiring bug). The worker's ordinal is then neither landed nor failed: it
  stays outstanding, burns no attempt, and is among the ordinals ``aclose``
  returns. The feeder takes no more prompts, and ``until`` and the ``async
  with`` raise the first such error (the sink's or the engine's own
  exception). A group the sink refused is never reported landed: the sink
  is called first, the ledger only once it took the group.
* An engine bound to another event loop (vLLM's ``AsyncLLM`` serves only
  the first loop that used it; from another, every request fails as if the
  engine were dead, or hangs) is refused when the loop starts, with
  ``EngineLoopError`` naming the cause, before anything is taken from the
  collector.

Streaming
---------
With ``FINAL_ONLY`` outputs (the default of ``vllm_sampling_params``) a
request yields one output holding every sample. With vLLM's ``DELTA`` or
``CUMULATIVE`` output kinds (read from the request's
``sampling_params.output_kind``) it yields one output per engine step
holding only the samples that advanced, the final one possibly only some of
them. The worker keeps each sample's tokens by ``index`` (appending deltas,
or taking the cumulative tokens), so the group is complete whichever kind is
used, and ``partial(ordinal)`` shows them while the request runs.
``on_progress`` observes every advance of a sample as a ``SampleProgress``
(ordinal, attempt, sample, the tokens it already had, the new tokens, the
finish reason once it is known), synchronously and in order, before the
group lands. With ``FINAL_ONLY`` each sample advances once, at the end.

This module imports asyncio, sys, attrs and frontier_core only (no torch).
"""

from __future__ import annotations

import asyncio
import enum
import sys
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

import attrs

from frontier_core import Effect, FrontierError, Lease
from frontier_core.journal import Reuse, SiblingState, TokenPayload, lineage_version

from .. import Run, Taken
from ..journal import Recovered, RolloutJournal, resumed_sample
from ..run import Drained
from ._engine import (
    ABORT,
    USABLE,
    AsyncEngine,
    EngineLoopError,
    check_event_loop,
    token_logprobs,
)


class RolloutError(Exception):
    """A request ended without a usable group (reported to the ledger as a
    failure, and the loop goes on), or the loop cannot build a group it was
    handed (a reused sibling with no journaled sample: ``until`` and the
    ``async with`` raise it, and the loop stops)."""


class ScheduleError(FrontierError, TypeError):
    """The collector cannot drive the loop's schedule: under
    ``Schedule.SIBLING`` it lacks the ``SiblingCollector`` methods (raised
    by the constructor, naming them: a ``RankCollector``, say), or
    ``take_samples`` handed out a group with no leases that is not complete
    (a collector whose ledger holds no siblings, whatever methods it has:
    raised out of ``until`` and the ``async with``, with the group left
    outstanding and among those ``aclose`` returns)."""


class RolloutStalledError(TimeoutError):
    """``RolloutLoop.until`` waited its ``timeout`` and the predicate never
    held: nothing the loop did in that time (no landing, failure, timeout
    or exit) made it true. The loop itself is left running."""


class Schedule(enum.Enum):
    """What one request of the rollout loop generates: a prompt's whole
    group (``GROUP``: ``n`` samples in one request), or one sibling
    (``SIBLING``: a request per lease, journaled and continued)."""

    GROUP = "group"
    SIBLING = "sibling"


class Collector(Protocol):
    """What the loop needs of the stamping collector under
    ``Schedule.GROUP``: groups (``take_samples``; their leases are not
    used) and the group events (``attempts``, ``landed``, ``failed``).
    ``StreamCollector``'s per-rank form ``RankCollector`` is one;
    ``Schedule.SIBLING`` needs a ``SiblingCollector``."""

    @property
    def exhausted(self) -> bool: ...

    def take_samples(self, n: int) -> list[Taken]: ...

    def failures(self, ordinal: int) -> int:
        """Failed attempts the ledger counts for an unresolved ``ordinal``."""

    def landed(self, ordinals: Iterable[int]) -> None: ...

    def failed(self, ordinals: Iterable[int]) -> Effect: ...


class SiblingCollector(Collector, Protocol):
    """What ``Schedule.SIBLING`` needs on top of ``Collector`` (a
    ``StreamCollector`` is one): groups handed out with a lease per sibling
    to generate, the sibling events (``sealed``, ``failed_samples``,
    ``restart``, ``completes``, ``land_complete``), and ``journal``, the
    rollout journal the collector reserves attempts in (the loop binds its
    own to a collector that has none)."""

    journal: RolloutJournal | None

    def land_complete(self, ordinals: Iterable[int]) -> None: ...

    def sealed(self, leases: Iterable[Iterable[int]]) -> Effect: ...

    def failed_samples(self, leases: Iterable[Iterable[int]]) -> Effect: ...

    def restart(self, siblings: Iterable[Iterable[int]]) -> tuple[Lease, ...]: ...

    def completes(self, lease: Lease) -> bool:
        """Whether sealing ``lease`` now would land its group."""


#: The members a ``SiblingCollector`` adds, checked when the loop is built.
_SIBLING_MEMBERS = ("journal", "sealed", "failed_samples", "restart", "completes", "land_complete")


@attrs.frozen
class Group:
    """The samples of one prompt, in ``index`` (sibling) order.

    ``version`` is the policy version of the group for the buffer's age
    limit: when the prompt was dispatched, or, for a group holding journaled
    tokens, that of its oldest token along the lineage. ``attempt`` is, for
    ``Schedule.GROUP``, the ledger's count of the ordinal's failed attempts
    (failures and stale evictions, across restarts) when it was dispatched,
    as in the request id; for ``Schedule.SIBLING`` the highest attempt of
    its samples. ``request_id`` is ``request_id_of(ordinal, attempt)``: the
    request that generated the group, or, for ``Schedule.SIBLING``, where
    each sample had a request of its own, the same spelling of the
    group's ``attempt``."""

    ordinal: int
    row: Any
    completions: tuple[tuple[int, ...], ...]
    finish_reasons: tuple[str, ...]
    version: int
    attempt: int
    request_id: str
    #: Each sample's ``TokenPayload`` (ids, log-probs, versions), in sibling
    #: order, under ``Schedule.SIBLING``; empty otherwise.
    samples: tuple[Any, ...] = ()


class GroupSink(Protocol):
    """The replay buffer, as the loop sees it."""

    def add(self, group: Group) -> None:
        """Take ``group``, or raise and keep nothing of it: the loop then
        stops, with the ordinal left outstanding (see the module doc)."""

    def __len__(self) -> int: ...


@attrs.frozen
class RolloutEvent:
    """One step of the loop, for tests and progress: ``kind`` is one of
    ``dispatch submit land fail fenced requeue drop abort exit``;
    ``detail`` says why for ``fail`` (``timeout``, ``abort``, the
    exception) and ``exit``."""

    kind: str
    ordinal: int
    request_id: str = ""
    detail: str = ""


@attrs.frozen
class SampleProgress:
    """One advance of one sample of a request in flight (``on_progress``).

    ``index`` is the sample's ``CompletionOutput.index`` (its sibling under
    ``Schedule.SIBLING``); the sample had ``start`` tokens before (a
    continued prefix's included) and ``token_ids`` are the new ones (empty
    when only the finish reason arrived, as on an abort);
    ``finish_reason`` is ``None`` until the sample ended. The ordinal and
    attempt come from the loop's own record of the request, never from the
    output."""

    ordinal: int
    attempt: int
    request_id: str
    index: int
    start: int
    token_ids: tuple[int, ...]
    finish_reason: str | None


def request_id_of(ordinal: int, attempt: int, *, sibling: int | None = None) -> str:
    """The loop's request id: ``o{ordinal}-a{attempt}`` for a group's
    request, ``o{ordinal}-s{sibling}-a{attempt}`` for a sibling's."""
    if sibling is None:
        return f"o{ordinal}-a{attempt}"
    return f"o{ordinal}-s{sibling}-a{attempt}"


def is_delta(sampling_params: Any) -> bool:
    """Whether ``sampling_params`` asks for vLLM's ``DELTA`` outputs (each
    output holds only the new tokens); otherwise outputs are cumulative
    (``CUMULATIVE``, or ``FINAL_ONLY``'s one output)."""
    kind = getattr(sampling_params, "output_kind", None)
    name = getattr(kind, "name", kind)
    return isinstance(name, str) and name.upper() == "DELTA"


def _default_fatal_errors(engine: Any) -> tuple[type[BaseException], ...]:
    """The engine's ``fatal_errors``; for a bare vLLM ``AsyncLLM``, vLLM's
    ``EngineDeadError`` (looked up among the loaded modules, never
    imported); and ``EngineLoopError`` always."""
    own = getattr(engine, "fatal_errors", None)
    if own is not None:
        errors = tuple(own)
    else:
        errors = ()
        exceptions = sys.modules.get("vllm.v1.engine.exceptions")
        dead = getattr(exceptions, "EngineDeadError", None)
        if isinstance(dead, type) and issubclass(dead, BaseException):
            errors = (dead,)
    return errors if EngineLoopError in errors else (*errors, EngineLoopError)


class _Request:
    __slots__ = (
        "attempt",
        "journaled",
        "landed",
        "lease",
        "logprobs",
        "ordinal",
        "prefix",
        "reasons",
        "recorded",
        "refused",
        "released",
        "request_id",
        "row",
        "tokens",
        "version",
    )

    def __init__(
        self,
        ordinal: int,
        row: Any,
        attempt: int,
        version: int,
        lease: Lease | None = None,
        prefix: TokenPayload | None = None,
    ) -> None:
        self.ordinal = ordinal
        self.row = row
        self.attempt = attempt
        #: The sibling's lease (``Schedule.SIBLING``), or ``None`` for a
        #: group's request; the loop files the request under it.
        self.lease = lease
        sibling = None if lease is None else lease.sibling
        self.request_id = request_id_of(ordinal, attempt, sibling=sibling)
        self.version = version
        #: The durable prefix this attempt continues, if any.
        self.prefix = prefix
        #: How many new tokens (after the prefix) the journal holds.
        self.recorded = 0
        #: Whether this attempt has its first progress record (a snapshot).
        self.journaled = False
        #: The group landed in the sink (or the sample was sealed).
        self.landed = False
        #: The ordinal left the outstanding state (landed, or failed).
        self.released = False
        #: The sink refused the group, or the progress observer or the
        #: journal raised: stop the loop, leave the ordinal outstanding.
        self.refused = False
        #: Each sample's tokens so far and its finish reason, by index.
        self.tokens: dict[int, list[int]] = {}
        self.reasons: dict[int, str | None] = {}
        #: Each sample's log-probs so far, when the engine reports them.
        self.logprobs: dict[int, list[float]] = {}

    @property
    def key(self) -> Hashable:
        """What the loop files the request under."""
        return self.ordinal if self.lease is None else self.lease

    @property
    def offset(self) -> int:
        """Tokens of the continued prefix."""
        return 0 if self.prefix is None else len(self.prefix)


#: A sealed sample of a group not landed yet: its lease, the sample, its
#: finish reason ("" if reused) and how many of its first tokens came from
#: the journal (all of a reused sample, the prefix of a continued one).
_Sealed = tuple[Lease, TokenPayload, str, int]


class RolloutLoop:
    """Keeps requests from ``collector``'s groups generating on ``engine``
    and lands complete groups in ``sink`` (see the module doc).

    ``collector`` is a ``frontier_adapters.Run`` (the loop reports through
    it; the schedule is ``Schedule.SIBLING``, and ``journal`` and
    ``recovered`` are the run's: passing either is a ``ValueError``), or a
    collector (``Collector``; a ``SiblingCollector`` for
    ``Schedule.SIBLING``). A vLLM integration on a run is three calls::

        run = Run.open(root, source, config)
        async with RolloutLoop(run, engine, buffer, prompt_of=..., sampling_params=...) as r:
            ...  # await r.until(...); train; run.trained(ordinals); run.checkpoint(step)

    ``schedule`` (a ``Schedule`` or its value; default ``SIBLING`` with a
    run, ``GROUP`` with a collector) says what one request is.
    Under ``Schedule.GROUP``, ``prompt_of(row)`` is the engine prompt of a
    dataset row (for vLLM a string, a token list or a ``TokensPrompt``),
    ``sampling_params`` is passed as is, or, when callable, called with
    ``(ordinal, attempt)`` per request (a vLLM ``SamplingParams`` is not
    callable), and ``num_generations`` defaults to ``sampling_params.n``;
    siblings the ledger reused are generated again with the group. Under
    ``Schedule.SIBLING``, ``prompt_of(row, prefix)`` is the prompt of a row
    continued by ``prefix`` (a tuple of token ids, empty for a fresh sample:
    for vLLM a ``TokensPrompt`` of the prompt's ids then the prefix's),
    ``sampling_params(lease, prefix_len)`` are the parameters of one sample
    (``n=1``; ``max_tokens`` reduced by ``prefix_len``), and a group has the
    ledger's ``samples`` siblings. ``journal`` and ``recovered`` (sibling
    schedule on a collector only) as in the module doc; a journal given without
    ``recovered`` and not recovered yet is recovered here as a fresh start
    (``recover(None, ...)``: refused for a journal with samples), and bound
    to the collector, so every attempt the loop deals is reserved first
    (``RolloutJournal.cover``). Without a journal nothing is journaled and
    nothing continued.

    ``max_in_flight`` bounds the requests the engine has at once, under
    either schedule (under ``Schedule.SIBLING`` a group larger than the
    room left is dealt whole and its siblings wait in the loop, dispatched
    in the ledger, until requests end; a restarted sibling waits the same
    way). With ``max_ahead``, no group is taken while that many are
    generating, waiting for room or waiting in the sink (back pressure
    from the trainer; under ``Schedule.GROUP`` no more are taken than would
    reach it). ``timeout`` bounds each
    request in seconds. ``version()`` is the current policy version,
    stamped on each request at dispatch. ``fatal_errors`` (default: the
    engine's ``fatal_errors`` attribute; for a bare vLLM ``AsyncLLM``,
    ``EngineDeadError``; ``EngineLoopError`` always) are exception types
    that mean the engine died: they stop the loop (``until`` and the
    ``async with`` raise them) and burn no attempt, since a dead engine is
    not a failed prompt. A sink that raises on ``add`` stops the loop the
    same way. After a stop, ``aclose()`` (or ``outstanding``, also once the
    ``async with`` has exited) gives the ordinals left outstanding.
    ``on_progress`` observes each sample's tokens as they stream
    (``SampleProgress``; an observer that raises stops the loop too), and
    ``partial(ordinal)`` gives them for a request in flight.

    Use it as ``async with RolloutLoop(...) as rollout:``; the trainer waits
    with ``await rollout.until(predicate)`` (``timeout=`` bounds the wait:
    ``RolloutStalledError``) and calls ``rollout.wake()`` after it frees
    room (a training step) or requeues work (an eviction). Once every
    request has ended and nothing is left to take, the loop is ``idle``,
    whatever failed at once (a worker cancelled before it ran is retired
    too); a run that got a termination notice (``Run.notice``,
    ``Run.watch``) hands out nothing more, so its loop goes idle once its
    requests end (wait for ``run.preempted`` too, to drain sooner).
    """

    def __init__(
        self,
        collector: Collector | Run,
        engine: AsyncEngine,
        sink: GroupSink,
        *,
        prompt_of: Callable[..., Any],
        sampling_params: Any,
        schedule: Schedule | str | None = None,
        num_generations: int | None = None,
        journal: RolloutJournal | None = None,
        recovered: Recovered | None = None,
        max_in_flight: int = 8,
        max_ahead: int | None = None,
        timeout: float | None = None,
        version: Callable[[], int] = lambda: 0,
        on_dropped: Callable[[Sequence[int]], None] | None = None,
        on_event: Callable[[RolloutEvent], None] | None = None,
        on_progress: Callable[[SampleProgress], None] | None = None,
        fatal_errors: tuple[type[BaseException], ...] | None = None,
    ) -> None:
        run = collector if isinstance(collector, Run) else None
        if run is None:
            assert not isinstance(collector, Run)
            moves: Collector = collector
        else:
            if journal is not None or recovered is not None:
                raise ValueError(
                    "a Run owns its journal and recovered it when it opened: pass neither "
                    "journal= nor recovered= with a Run"
                )
            if schedule is not None and Schedule(schedule) is not Schedule.SIBLING:
                raise ValueError(
                    "a Run journals each sample as it seals, so its loop requests one sample "
                    "per sibling: use schedule='sibling' (the default with a Run)"
                )
            moves = run.collector
        if schedule is None:
            schedule = Schedule.GROUP if run is None else Schedule.SIBLING
        schedule = Schedule(schedule)
        if schedule is Schedule.GROUP:
            if journal is not None or recovered is not None:
                raise ValueError(
                    "a rollout journal records samples one by one: use schedule='sibling'"
                )
            if num_generations is None:
                num_generations = int(getattr(sampling_params, "n", 0))
            if num_generations < 1:
                raise ValueError("num_generations must be >= 1 (or given by sampling_params.n)")
        elif num_generations is not None:
            raise ValueError("under schedule='sibling' a group has the ledger's samples")
        elif not callable(sampling_params):
            raise TypeError("under schedule='sibling' sampling_params(lease, prefix_len) is called")
        else:
            missing = [m for m in _SIBLING_MEMBERS if not hasattr(moves, m)]
            if missing:
                raise ScheduleError(
                    f"schedule='sibling' needs a SiblingCollector (a StreamCollector): "
                    f"{type(moves).__name__} has no {', '.join(missing)}; it deals whole "
                    "groups, so use schedule='group'"
                )
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        #: The run the loop reports through, or ``None`` (a collector).
        self.run = run
        #: The collector whose ledger the loop moves (a run's own).
        self.collector = moves
        #: The collector as a ``SiblingCollector`` (``Schedule.SIBLING``
        #: only: checked above).
        self._siblings = cast(SiblingCollector, moves)
        self.engine = engine
        self.sink = sink
        self.schedule = schedule
        self.prompt_of = prompt_of
        self.sampling_params = sampling_params
        #: The samples of a group's request (``Schedule.GROUP``; 0 otherwise).
        self.num_generations = num_generations or 0
        self.max_in_flight = max_in_flight
        self.max_ahead = max_ahead
        self.timeout = timeout
        self.version = version
        self.on_dropped = on_dropped
        self.on_event = on_event
        self.on_progress = on_progress
        if fatal_errors is None:
            fatal_errors = _default_fatal_errors(engine)
        self.fatal_errors = fatal_errors
        if run is not None:
            # For the dating of journaled tokens (``_oldest``) only: the run
            # takes the samples and prefixes from it and journals itself.
            recovered = run.recovered
        elif journal is not None and journal.attempt_floor is None and recovered is None:
            # A journal nobody recovered: this is a fresh start (recover
            # refuses a journal with samples and no checkpoint, so a resume
            # that forgot ``recovered=`` is not taken for one), and its
            # attempts must start above every earlier life's reservation.
            recovered = journal.recover(
                None, position=None, checkpoint_id=None, reuse=Reuse.nothing(), fork=0, step=0
            )
        if journal is not None and self._siblings.journal is None:
            # Safe by construction: the collector reserves every attempt in
            # the journal before it deals it (``RolloutJournal.cover``).
            self._siblings.journal = journal
        self.journal = journal
        self.recovered = recovered
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}
        self._requests: dict[Hashable, _Request] = {}
        #: Ordinals whose worker exited without landing or failing them (the
        #: loop stopped): outstanding in the ledger, generating nowhere.
        self._stranded: set[int] = set()
        #: Per group not landed yet (``Schedule.SIBLING``): its row, its
        #: version at dispatch, its size, and its sealed samples by sibling.
        self._groups: dict[int, tuple[Any, int, int]] = {}
        self._sealed: dict[tuple[int, int], _Sealed] = {}
        #: The recovered prefixes the current dispatch of a group may
        #: continue, by (ordinal, sibling); a recovered prefix is offered to
        #: one dispatch of its group only (not again once the group failed
        #: or was evicted whole: it is generated anew then).
        self._prefixes: dict[tuple[int, int], TokenPayload] = {}
        self._offered: set[int] = set()
        #: Siblings dealt (dispatched in the ledger) and waiting for room
        #: under ``max_in_flight`` (``Schedule.SIBLING``), in order.
        self._waiting: deque[Lease] = deque()
        self._feeder: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._waiters: list[asyncio.Future[None]] = []
        self._closing = False
        self._error: BaseException | None = None

    # -- queries ------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Worker tasks that have not exited (landed ones included until then)."""
        return len(self._tasks)

    @property
    def outstanding(self) -> tuple[int, ...]:
        """Ordinals this loop dispatched and neither landed nor failed:
        those generating, and those left outstanding by a stop or a
        shutdown (the ledger holds them OUTSTANDING until a resume)."""
        live = {r.ordinal for r in self._requests.values() if not r.released}
        live.update(lease.ordinal for lease in self._waiting)
        return tuple(sorted(live | self._stranded))

    def partial(self, ordinal: int) -> dict[int, tuple[int, ...]]:
        """The tokens each sample of ``ordinal`` in flight has so far, by
        sample index (by sibling under ``Schedule.SIBLING``, a continued
        prefix included); empty when it is not in flight."""
        out: dict[int, tuple[int, ...]] = {}
        for req in self._requests.values():
            if req.ordinal != ordinal:
                continue
            if req.lease is None:
                out.update((i, tuple(t)) for i, t in req.tokens.items())
            else:
                prefix = tuple(req.prefix.tokens()) if req.prefix is not None else ()
                out[req.lease.sibling] = prefix + tuple(req.tokens.get(0, ()))
        return dict(sorted(out.items()))

    @property
    def idle(self) -> bool:
        """Nothing generating, nothing waiting for room and nothing left to
        take (a run that got a termination notice hands out nothing more)."""
        done = self.collector.exhausted or (self.run is not None and self.run.preempted)
        return not self._tasks and not self._waiting and done

    # -- lifecycle ------------------------------------------------------------

    async def __aenter__(self) -> RolloutLoop:
        self.start()
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        await self.aclose()
        if exc_type is None:
            self._check_feeder()

    def start(self) -> None:
        """Start the feeder (``async with`` calls it). Raises
        ``EngineLoopError`` first if the engine is bound to another event
        loop: nothing has been taken from the collector then."""
        if self._feeder is None:
            check = getattr(self.engine, "check_event_loop", None)
            if callable(check):
                check()
            else:
                check_event_loop(self.engine)
            self._feeder = asyncio.create_task(self._feed(), name="rollout-feeder")
            self._feeder.add_done_callback(lambda _t: self._notify())

    async def aclose(self) -> tuple[int, ...]:
        """Stop feeding, cancel every worker (aborting its request) and
        wait for them. Returns the ordinals left outstanding, whether the
        workers were cancelled now or had already exited because the loop
        stopped (a dead engine, a refused group): the ledger still holds
        them, and a resume from the next checkpoint regenerates them.
        Idempotent: a second call (say, after the ``async with`` exited)
        returns the same ordinals."""
        self._closing = True
        tasks = list(self._tasks.values())
        if self._feeder is not None:
            tasks.append(self._feeder)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._notify()
        return self.outstanding

    async def drain(
        self,
        *,
        step: int | None = None,
        json_parts: Mapping[str, Any] | None = None,
        tensor_parts: Mapping[str, Any] | None = None,
    ) -> Drained:
        """A termination notice, on a ``Run``: stop the loop (``aclose``:
        the requests are aborted, nothing is failed), hand the run every
        running sample's tokens so far (each, not only those a progress
        record was due for), then ``Run.drain`` them (journaled, synced,
        shipped, a checkpoint at ``step`` with your parts if the notice's
        time allows) and close the run. Returns ``Run.drain``'s report.
        Drain through the loop, not the run alone: the run's drain closes
        it, and a loop still generating would report to a closed run."""
        if self.run is None:
            raise RuntimeError("drain is a run's: build the loop with RolloutLoop(run, ...)")
        running = [
            req
            for req in self._requests.values()
            if req.lease is not None and not req.landed and not req.released
        ]
        await self.aclose()
        for req in running:
            lease = req.lease
            if lease is not None and req.tokens.get(0) and self.run.collector.current(lease):
                self.run.progress(lease, self._payload(req))
        return self.run.drain(step=step, json_parts=json_parts, tensor_parts=tensor_parts)

    def wake(self) -> None:
        """Re-run the feeder: room was freed or ordinals were requeued."""
        self._notify()

    async def until(self, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        """Wait until ``predicate()`` holds, re-checking after every event
        of the loop and every streamed output (a predicate on ``partial``
        sees tokens as they arrive). Raises the feeder's exception if it died (a misaligned
        loader, say), ``RuntimeError`` once the loop is closed, and
        ``RolloutStalledError`` if ``timeout`` seconds pass first (``None``:
        no bound; the loop's events are bounded by the per-request
        ``timeout`` anyway, so a trainer's wait that passes a generous bound
        means a stuck loop, not a slow one)."""
        if timeout is None:
            await self._until(predicate)
            return
        try:
            await asyncio.wait_for(self._until(predicate), timeout)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before 3.11
            raise RolloutStalledError(
                f"the rollout loop waited {timeout:g} s and the condition never held "
                f"({len(self._tasks)} requests in flight, outstanding {list(self.outstanding[:8])})"
            ) from None

    async def _until(self, predicate: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()
        self._check_feeder()
        while not predicate():
            self._check_feeder()
            if self._closing:
                raise RuntimeError("the rollout loop is closed")
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            await fut

    def _check_feeder(self) -> None:
        if self._error is not None:
            raise self._error
        f = self._feeder
        if f is not None and f.done() and not f.cancelled():
            exc = f.exception()
            if exc is not None:
                raise exc

    def _notify(self) -> None:
        self._wake.set()
        self._notify_waiters()

    def _notify_waiters(self) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    def _emit(self, kind: str, ordinal: int, request_id: str = "", detail: str = "") -> None:
        if self.on_event is not None:
            self.on_event(RolloutEvent(kind, ordinal, request_id, detail))

    # -- the feeder -------------------------------------------------------------

    def room(self) -> int:
        """How many more groups' requests may start now: requests the
        engine may still take under ``max_in_flight``, less the siblings
        waiting for room. With ``max_ahead``, 0 while that many groups are
        generating, waiting or in the sink (``Schedule.GROUP``: no more
        than would reach it)."""
        n = self.max_in_flight - len(self._tasks) - len(self._waiting)
        if self.max_ahead is not None:
            if self.schedule is Schedule.GROUP:
                generating = len({req.ordinal for req in self._requests.values()})
            else:
                generating = len(self._groups)  # dealt and not landed
            ahead = self.max_ahead - generating - len(self.sink)
            n = min(n, ahead) if self.schedule is Schedule.GROUP else n if ahead > 0 else 0
        return max(0, n)

    def fill(self) -> int:
        """Start the siblings waiting for room, then take groups while there
        is room for their requests, start their workers and land groups
        whose every sibling was reused; returns the requests started. The
        collector reports the groups dispatched inside ``take_samples``,
        before any request is submitted. Takes and starts nothing once the
        loop is closing or stopped."""
        started = self._start_waiting()
        while not self._closing and self._error is None and (n := self.room()) > 0:
            # A sibling schedule takes a group at a time: its size is known
            # only once it is taken.
            taken = self._take(n if self.schedule is Schedule.GROUP else 1)
            if not taken:
                break
            for i, t in enumerate(taken):
                try:
                    started += self._start_group(t)
                except BaseException:
                    # The feeder dies with it (``until`` raises it); this
                    # group and those dispatched with it stay outstanding
                    # in the ledger (a complete one was not dispatched),
                    # and ``aclose`` must return them.
                    self._stranded.update(u.ordinal for u in taken[i:] if not u.complete)
                    raise
            started += self._start_waiting()
        return started

    def _start_waiting(self) -> int:
        """Start siblings waiting for room, as many as ``max_in_flight``
        allows; returns how many."""
        started = 0
        while (
            self._waiting
            and not self._closing
            and self._error is None
            and len(self._tasks) < self.max_in_flight
        ):
            lease = self._waiting.popleft()
            try:
                self._start_sibling(lease)
            except BaseException:
                self._stranded.add(lease.ordinal)  # dealt, and now generating nowhere
                raise
            started += 1
        return started

    def _take(self, n: int) -> list[Taken]:
        """Groups to generate: the run's (``Run.take``, which lands a
        complete group at once: the run's resume gives it back from the
        journal if the sink then loses it), or the collector's (the loop
        lands a complete one after the sink took it)."""
        if self.run is not None:
            return self.run.take(n)
        return self.collector.take_samples(n)

    def _start_group(self, taken: Taken) -> int:
        """Start ``taken``'s request (``Schedule.GROUP``), or file the group
        and queue its leases for ``_start_waiting`` (``Schedule.SIBLING``);
        returns the requests started."""
        o = taken.ordinal
        self._stranded.discard(o)  # taken again (the collector resumed)
        if self.schedule is Schedule.GROUP and not taken.complete:
            attempt = self.collector.failures(o)
            self._start(_Request(o, taken.row, attempt, self.version()))
            return 1
        if not taken.leases and not taken.complete:
            raise ScheduleError(
                f"schedule='sibling' was handed group {o} with no leases: "
                f"{type(self.collector).__name__} deals whole groups; use schedule='group'"
            )
        size = len(taken.leases) + len(taken.reused)
        self._groups[o] = (taken.row, self.version(), size)
        if self.run is None and self.recovered is not None and o not in self._offered:
            # (A run offers the prefixes itself: ``Run.prefix``.)
            self._offered.add(o)
            for s in range(size):
                state = self.recovered.prefix(o, s)
                if state is not None and isinstance(state.payload, TokenPayload):
                    self._prefixes[(o, s)] = state.payload
        for lease in taken.reused:
            payload = self._journaled(lease)
            self._sealed[(o, lease.sibling)] = (lease, payload, "", len(payload))
        if taken.complete:
            self._land_group(o, None)
            return 0
        self._waiting.extend(taken.leases)
        return 0

    def _journaled(self, lease: Lease) -> TokenPayload:
        if self.run is not None:
            payload = self.run.sample(lease)
        elif self.recovered is None:
            raise RolloutError(
                f"{lease} was reused (the collector resumed with its sample sealed) but the "
                "loop has no recovered journal to take it from: pass recovered= (from "
                "RolloutJournal.recover) with schedule='sibling', or resume the collector "
                "with sealed=() so that every sibling is generated again (the only way "
                "under schedule='group')"
            )
        else:
            payload = self.recovered.sample(lease)
        if not isinstance(payload, TokenPayload):
            raise RolloutError(f"the journal's sample of {lease} is not a token sample")
        return payload

    def _start_sibling(self, lease: Lease) -> None:
        if self.run is not None:
            prefix = self.run.prefix(lease)
        else:
            prefix = self._prefixes.get((lease.ordinal, lease.sibling))
        row = self._groups[lease.ordinal][0]
        self._start(_Request(lease.ordinal, row, lease.attempt, self.version(), lease, prefix))

    def _start(self, req: _Request) -> None:
        self._emit("dispatch", req.ordinal, req.request_id)
        self._spawn(req)

    def _spawn(self, req: _Request) -> None:
        """File ``req`` and start its worker task.

        A task cancelled before its first step never runs its coroutine,
        not even ``_work``'s ``finally``: a sibling restarted and cancelled
        in the same turn of the event loop (its group failed whole under a
        burst of simultaneous timeouts) would stay filed for ever, so the
        loop would never be ``idle`` and a trainer waiting for that would
        wait for ever. The done callback retires such a task; for one that
        ran, ``_work`` has retired it already and the callback does
        nothing."""
        self._requests[req.key] = req
        task = asyncio.create_task(self._work(req), name=req.request_id)
        self._tasks[req.key] = task
        task.add_done_callback(lambda t: self._retire(req, t, "cancelled"))

    def _retire(self, req: _Request, task: asyncio.Task[None] | None, detail: str) -> None:
        """The worker of ``req`` (``task``) has exited: unfile it (unless a
        newer request of the same key replaced it), strand its ordinal if
        it was neither landed nor failed, and wake the feeder and the
        waiters. Idempotent."""
        if task is None or self._tasks.get(req.key) is not task:
            return
        del self._tasks[req.key]
        if self._requests.get(req.key) is req:
            del self._requests[req.key]
        if not req.released:
            # Cancelled, or the loop stopped: the ledger still holds the
            # ordinal outstanding, and ``aclose`` must return it.
            self._stranded.add(req.ordinal)
        self._emit("exit", req.ordinal, req.request_id, detail)
        self._notify()

    async def _feed(self) -> None:
        while not self._closing and self._error is None:
            self._wake.clear()
            self.fill()
            # Taking may have changed what waiters wait for (the source ran
            # out, say): let them look again.
            self._notify_waiters()
            await self._wake.wait()

    # -- a worker ---------------------------------------------------------------

    async def _work(self, req: _Request) -> None:
        o, rid = req.ordinal, req.request_id
        detail = "done"
        gen: Any = None
        try:
            prompt, params = self._request_args(req)
            delta = is_delta(params)
            gen = self.engine.generate(prompt, params, rid)
            self._emit("submit", o, rid)
            try:
                if self.timeout is None:
                    await self._consume(gen, req, delta)
                else:
                    await asyncio.wait_for(self._consume(gen, req, delta), self.timeout)
            except asyncio.CancelledError:
                detail = "cancelled"
                raise
            except asyncio.TimeoutError:
                detail = "timeout"
                self._failed(req, "timeout")
            except FrontierError:
                raise
            except Exception as exc:
                detail = f"{type(exc).__name__}: {exc}"
                if req.refused or isinstance(exc, self.fatal_errors):
                    # The sink refused the group (or the observer raised), or
                    # the engine itself is gone (vLLM's EngineDeadError): not
                    # this prompt's failure.
                    # Stop the loop; the ordinal stays outstanding and the
                    # restart regenerates it.
                    raise
                self._failed(req, detail)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Not a failed generation (a dead engine, a refused group, an
            # illegal transition: a bug in the wiring): stop the loop rather
            # than paper over it: ``until`` and the ``async with`` raise it.
            detail = f"{type(exc).__name__}: {exc}"
            if self._error is None:
                self._error = exc
        finally:
            try:
                if detail != "done" and (not req.landed or detail in ("timeout", "cancelled")):
                    # Belt and braces: cancelling vLLM's generate aborts the
                    # request already; a timed-out or failed one may still
                    # run. (A generator that raised after its final output
                    # has ended.)
                    self._emit("abort", o, rid, detail)
                    aclose = getattr(gen, "aclose", None)
                    try:
                        if aclose is not None:
                            await aclose()
                        await self.engine.abort(rid)
                    except Exception:  # the engine may be gone; nothing to release
                        pass
            finally:
                # Even if ``aclose`` cancels the abort above. Only this
                # request's own entry: while the abort above was awaited,
                # the feeder may have filed a new request under the same
                # key (the ordinal, requeued), which must stay filed.
                self._retire(req, asyncio.current_task(), detail)

    def _request_args(self, req: _Request) -> tuple[Any, Any]:
        """The engine prompt and sampling parameters of ``req``."""
        if req.lease is not None:
            prefix = tuple(req.prefix.tokens()) if req.prefix is not None else ()
            return self.prompt_of(req.row, prefix), self.sampling_params(req.lease, len(prefix))
        params = self.sampling_params
        if callable(params):
            params = params(req.ordinal, req.attempt)
        return self.prompt_of(req.row), params

    async def _consume(self, gen: Any, req: _Request, delta: bool) -> None:
        tokens, reasons = req.tokens, req.reasons
        observe = self.on_progress is not None or (
            req.lease is not None and (self.journal is not None or self.run is not None)
        )
        async for out in gen:
            if req.landed:
                continue  # drain to the generator's end: the worker's exit
            if out.request_id != req.request_id:
                raise RolloutError(
                    f"output for request {out.request_id!r} on request {req.request_id!r}"
                )
            for c in out.outputs:
                i = c.index
                have = tokens.get(i)
                if have is None:
                    have = tokens[i] = []
                start = len(have)
                if delta:
                    new = list(c.token_ids)
                else:
                    # Cumulative (or the one final output): the tokens so far,
                    # of which the first ``start`` were seen already.
                    ids = c.token_ids
                    if len(ids) < start:
                        raise RolloutError(
                            f"cumulative output of sample {i} has {len(ids)} tokens, "
                            f"fewer than the {start} it had"
                        )
                    new = list(ids[start:])
                reason = c.finish_reason
                if not new and i in reasons and reasons[i] == reason:
                    continue
                lps = token_logprobs(c, new)
                if lps is not None:
                    req.logprobs.setdefault(i, []).extend(lps)
                have.extend(new)
                reasons[i] = reason
                if observe:
                    self._progress(req, i, start, new, reason)
            if out.finished:
                self._land(req)
            elif self._waiters:
                # An ``until`` predicate may read tokens (``partial``): a
                # streamed output is a change it must see, not only events.
                self._notify_waiters()
        if not req.landed:
            raise RolloutError("the engine ended the request without a finished output")

    def _progress(
        self, req: _Request, index: int, start: int, new: list[int], reason: str | None
    ) -> None:
        try:
            if req.lease is not None and reason is None:
                if self.run is not None:
                    self._report_progress(req)
                elif self.journal is not None:
                    self._journal_progress(req)
            if self.on_progress is not None:
                event = SampleProgress(
                    req.ordinal,
                    req.attempt,
                    req.request_id,
                    index if req.lease is None else req.lease.sibling,
                    start + req.offset,
                    tuple(new),
                    reason,
                )
                self.on_progress(event)
        except Exception:
            req.refused = True  # the journal's or the observer's failure: stop
            raise

    def _report_progress(self, req: _Request) -> None:
        """Report a running sample to the run when its journal is due for a
        record (the run decides again, and journals), and at every advance
        once the run got a termination notice (so that ``Run.drain`` has
        each sample's latest tokens). Not at every advance otherwise: the
        report is the whole sample so far, and building it per token would
        cost time quadratic in the sample's length."""
        assert self.run is not None and req.lease is not None
        have = len(req.tokens.get(0, ()))
        due = self.run.journal.due(req.recorded, have)
        if due or self.run.preempted:
            self.run.progress(req.lease, self._payload(req))
        if due:
            req.recorded = have

    def _journal_progress(self, req: _Request) -> None:
        assert self.journal is not None and req.lease is not None
        have = len(req.tokens.get(0, ()))
        if not self.journal.due(req.recorded, have):
            return
        if not req.journaled:
            # The attempt's first record: a whole snapshot (the prefix it
            # continues and its tokens so far).
            self.journal.progress(req.lease, self._payload(req))
            req.journaled = True
        else:
            ids, lps = req.tokens[0][req.recorded : have], req.logprobs[0][req.recorded : have]
            new = TokenPayload.of(ids, lps, req.version)
            self.journal.extend(req.lease, req.offset + req.recorded, new)
        req.recorded = have

    def _payload(self, req: _Request) -> TokenPayload:
        """The sample of a sibling's request: the prefix it continued, then
        its tokens with their log-probs."""
        assert req.lease is not None
        tokens = req.tokens.get(0, [])
        lps = req.logprobs.get(0)
        if lps is None or len(lps) != len(tokens):
            raise RolloutError(
                f"the engine reported no log-probs for {req.request_id} (vLLM: "
                "SamplingParams(logprobs=0)); a journaled sample needs them"
            )
        rest = TokenPayload.of(tokens, lps, req.version)
        if req.prefix is None:
            return rest
        return resumed_sample(SiblingState(req.lease.attempt, req.prefix, False), rest)

    def _land(self, req: _Request) -> None:
        n = self.num_generations if req.lease is None else 1
        tokens = req.tokens
        if sorted(tokens) != list(range(n)):
            raise RolloutError(
                f"final output of {req.request_id} holds samples {sorted(tokens)}, "
                f"expected 0..{n - 1}"
            )
        reasons = tuple(req.reasons.get(i) or "" for i in range(n))
        if any(r not in USABLE for r in reasons):
            bad = sorted({r for r in reasons if r not in USABLE})
            raise RolloutError(f"{ABORT if ABORT in bad else 'unusable'}: finish reasons {bad}")
        if req.lease is None:
            group = Group(
                ordinal=req.ordinal,
                row=req.row,
                completions=tuple(tuple(int(t) for t in tokens[i]) for i in range(n)),
                finish_reasons=reasons,
                version=req.version,
                attempt=req.attempt,
                request_id=req.request_id,
            )
            # One synchronous stretch: the ledger and the buffer agree at
            # every await point, so no checkpoint can see one without the
            # other. The sink first: a sink that refuses the group (raises)
            # is never reported landed, and it stops the loop with the
            # ordinal left outstanding (a refusal is the trainer's, not a
            # failed generation, so it burns no attempt and drops nothing).
            # A ledger that refuses the landing is a wiring bug and stops
            # the loop too.
            try:
                self.sink.add(group)
            except Exception:
                req.refused = True
                raise
            self.collector.landed([req.ordinal])
            # Buffered now: an event observer that raises stops the loop (as
            # under ``Schedule.SIBLING``), with the ordinal not outstanding.
            req.landed = req.released = True
            try:
                self._emit("land", req.ordinal, req.request_id)
            except Exception:
                req.refused = True
                raise
        else:
            self._seal(req, reasons[0])
        req.landed = req.released = True
        self._notify()

    def _seal(self, req: _Request, reason: str) -> None:
        lease = req.lease
        assert lease is not None
        payload = self._payload(req)
        key = (lease.ordinal, lease.sibling)
        try:
            if self._siblings.completes(lease):
                # The group's last sibling: the sink takes the group first,
                # then the ledger seals and lands it, in this one
                # synchronous stretch.
                self._sealed[key] = (lease, payload, reason, req.offset)
                try:
                    self._land_group(lease.ordinal, req)
                except BaseException:
                    # The sink refused the group (or the journal failed): not
                    # this sample's failure. Stop the loop; unless the ledger
                    # landed the group (``req.released``), the sibling stays
                    # running in the ledger and a resume generates it again.
                    self._sealed.pop(key, None)
                    raise
            elif lease in self._report_seal(lease, payload).sealed:
                self._sealed[key] = (lease, payload, reason, req.offset)
            else:
                self._emit("fenced", lease.ordinal, req.request_id)
        except FrontierError:
            raise
        except Exception:
            req.refused = True
            raise

    def _report_seal(self, lease: Lease, payload: TokenPayload) -> Effect:
        """Seal ``lease`` in the ledger and, if it accepted the sample,
        journal it: the run does both (``Run.seal``), or the collector then
        the loop's journal."""
        if self.run is not None:
            return self.run.seal(lease, payload)
        effect = self._siblings.sealed([lease])
        if lease in effect.sealed and self.journal is not None:
            self.journal.sealed(lease, payload)
        return effect

    def _oldest(self, ordinal: int, parts: list[_Sealed]) -> int:
        """The group's policy version for the buffer's age limit: that of its
        oldest token along the lineage. A group is stamped with the version
        at its dispatch, but a reused sample or a continued prefix is older;
        a journaled token of the dead branch (after the resume's fork) counts
        its age through the fork (``lineage_version``), so the buffer's age
        limit holds for what a resume took from the journal too."""
        fork = self.recovered.fork if self.recovered is not None else None
        oldest = self._groups[ordinal][1]
        for _, payload, _, journaled in parts:
            for first, version in payload.version_runs:
                if first < journaled and fork is not None:
                    version = lineage_version(version, fork=fork)
                oldest = min(oldest, version)
        return oldest

    def _land_group(self, ordinal: int, last: _Request | None) -> None:
        """Land a sibling-scheduled group: in the sink, then in the ledger
        (sealing the lease of ``last``, the request of its last sibling,
        which is released then; or, with ``None``, a group whose every
        sibling was reused), then journal that sample."""
        row, _, size = self._groups[ordinal]
        parts = [self._sealed[(ordinal, s)] for s in range(size)]
        payloads = tuple(p for _, p, _, _ in parts)
        group = Group(
            ordinal=ordinal,
            row=row,
            completions=tuple(tuple(p.tokens()) for p in payloads),
            finish_reasons=tuple(r for _, _, r, _ in parts),
            version=self._oldest(ordinal, parts),
            attempt=(attempt := max(lease.attempt for lease, _, _, _ in parts)),
            request_id=request_id_of(ordinal, attempt),
            samples=payloads,
        )
        self.sink.add(group)  # raises: the loop stops, nothing is reported
        if last is None:
            if self.run is None:  # a run's ``take`` landed it already
                self._siblings.land_complete([ordinal])
            self._forget(ordinal)
        else:
            assert last.lease is not None
            payload = self._sealed[(ordinal, last.lease.sibling)][1]
            try:
                effect = self._report_seal(last.lease, payload)
            finally:
                # Buffered once the ledger landed it, even if journaling the
                # sample then raised (which stops the loop): the ordinal is
                # not outstanding.
                if not self._siblings.completes(last.lease):
                    last.landed = last.released = True
                    self._forget(ordinal)
            assert effect.landed == (ordinal,), effect
        self._emit("land", ordinal, group.request_id)

    def _forget(self, ordinal: int) -> None:
        """Drop what the loop holds of a sibling-scheduled group that left
        the outstanding state (landed, or failed whole)."""
        _, _, size = self._groups.pop(ordinal, (None, 0, 0))
        for s in range(size):
            self._sealed.pop((ordinal, s), None)
            self._prefixes.pop((ordinal, s), None)
        if any(lease.ordinal == ordinal for lease in self._waiting):
            self._waiting = deque(le for le in self._waiting if le.ordinal != ordinal)
        self._stranded.discard(ordinal)

    def _failed(self, req: _Request, detail: str) -> None:
        if req.released:
            return  # the group is buffered; what the engine does next is moot
        # Released only once the ledger took the failure: if it refuses (a
        # wiring bug, which stops the loop) the ordinal is still outstanding.
        if req.lease is None:
            effect = self.collector.failed([req.ordinal])
        elif self.run is not None:
            # The run restarts the sibling itself (``effect.leases``); if it
            # cannot (past ``attempt_limit``, a reservation that failed),
            # this raises with the request unreleased: the loop stops and
            # the group, outstanding in the ledger, is among those
            # ``aclose`` returns.
            effect = self.run.fail(req.lease)
        else:
            effect = self._siblings.failed_samples([req.lease])
        req.released = True
        self._emit("fail", req.ordinal, req.request_id, detail)
        if effect.fenced:
            return
        for o in (*effect.requeued, *effect.unstamped, *effect.dropped):
            if req.lease is not None:
                # The group failed whole: its sealed siblings go with it, and
                # its running siblings are cancelled (their results would be
                # fenced).
                self._forget(o)
                for other in list(self._requests.values()):
                    if other.ordinal == o and other is not req:
                        other.released = True
                        task = self._tasks.get(other.key)
                        if task is not None:
                            task.cancel()
            if o not in effect.unstamped:
                self._emit("requeue" if o in effect.requeued else "drop", o, req.request_id)
        if effect.restart and self.run is not None:
            self._waiting.extend(effect.leases)  # started by the feeder
        elif effect.restart:
            try:
                leases = self._siblings.restart(effect.restart)
            except BaseException:
                # The ledger refused the restart (past ``attempt_limit``, a
                # journal that failed to reserve): the loop stops, and the
                # group, outstanding in the ledger with no request left for
                # this sibling, is among the ordinals ``aclose`` returns.
                self._stranded.update(o for o, _ in effect.restart)
                raise
            # Started by the feeder, within ``max_in_flight``.
            self._waiting.extend(leases)
        if effect.dropped and self.on_dropped is not None:
            self.on_dropped(effect.dropped)
        self._notify()
