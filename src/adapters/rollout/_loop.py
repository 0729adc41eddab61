"""The rollout adapter: an asyncio loop that binds a prompt collector to an
engine with vLLM's ``AsyncLLM`` contract.

Theory of operation
-------------------
A feeder task keeps up to ``max_in_flight`` prompts generating. It takes
``(ordinal, row)`` items from the collector, whose ``take`` reports them
dispatched, and only then starts one worker task per prompt. A worker submits
one request of ``n = num_generations`` samples, under a request id that
names the ordinal and the attempt (``o17-a0``), and consumes the engine's
outputs. The attempt is the ledger's count of the ordinal's failed attempts
(``collector.attempts``), not a counter of the loop's: it is checkpointed,
so after a resume ``o17`` that failed once before the crash is submitted as
``o17-a1``. When the request's final output arrives with every sample usable
(``finish_reason`` ``stop`` or ``length``), the worker builds the ``Group``,
adds it to the replay buffer and reports it landed in one synchronous
stretch: no await, so no checkpoint, falls between the two. It then lets the
engine's generator run to its end (the worker's exit), which touches no
coverage state: a checkpoint taken between the landing and the exit sees the
group buffered, never outstanding, and an error raised after the landing is
ignored rather than reported as a failure of a group that is already
buffered.

Rules of the house
------------------
* Ordinals come from the loop's own record of what it submitted (the worker
  holds its ordinal), never from the outputs: a request id or an output that
  an environment rewrote cannot move coverage. An output whose request id is
  not the one submitted fails the request.
* Every coverage decision is the ledger's. The loop reports ``failed`` for
  an exception, a timeout, an engine-side abort or an incomplete final
  output, and follows the effect: requeued ordinals come back through
  ``take`` (the collector offers them first), dropped ones are passed to
  ``on_dropped`` for the training log.
* Every exit path releases the worker's ordinal exactly once: landed, or
  failed, or left outstanding on purpose when the loop stops. ``aclose``
  cancels the workers, which aborts their requests (cancelling a vLLM
  ``generate`` aborts it; the loop also calls ``engine.abort``), and reports
  nothing: a shutdown is not a failed attempt. The outstanding ordinals stay
  unresolved in the ledger and hold the cut, so the next checkpoint records
  them and a resume regenerates them; ``aclose`` returns them.
* Some errors are not a failed generation and *stop* the loop instead: the
  engine died (``fatal_errors``, vLLM's ``EngineDeadError``), the sink
  refused a group (``GroupSink.add`` raised), the progress observer raised,
  or the ledger refused a move (a ``FrontierError``: a wiring bug). The
  worker's ordinal is then neither landed nor failed: it stays
  outstanding, burns no attempt, and is among the ordinals ``aclose``
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
``CUMULATIVE`` output kinds (read from ``sampling_params.output_kind``) it
yields one output per engine step holding only the samples that advanced,
the final one possibly only some of them. The worker keeps each sample's
tokens by ``index`` (appending deltas, or taking the cumulative tokens), so
the group is complete whichever kind is used, and ``partial(ordinal)`` shows
them while the request runs. ``on_progress`` observes every advance of a
sample as a ``SampleProgress`` (ordinal, attempt, sample index, the tokens
it already had, the new tokens, the finish reason once it is known),
synchronously and in order, before the group lands: the hook a durable
rollout journal records. With ``FINAL_ONLY`` each sample advances once, at
the end.

This module imports asyncio, sys, attrs and frontier_core only (no torch).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Protocol

import attrs

from frontier_core import Effect, FrontierError

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
    failure; never raised out of the loop)."""


class RolloutStalledError(TimeoutError):
    """``RolloutLoop.until`` waited its ``timeout`` and the predicate never
    held: nothing the loop did in that time (no landing, failure, timeout
    or exit) made it true. The loop itself is left running."""


class Collector(Protocol):
    """What the loop needs of the stamping collector (``StreamCollector``)."""

    def take(self, n: int) -> list[tuple[int, Any]]: ...

    def attempts(self, ordinal: int) -> int:
        """Failed attempts the ledger counts for an unresolved ``ordinal``."""

    def landed(self, ordinals: Iterable[int]) -> None: ...

    def failed(self, ordinals: Iterable[int]) -> Effect: ...

    @property
    def exhausted(self) -> bool: ...


@attrs.frozen
class Group:
    """The ``num_generations`` samples of one prompt, in ``index`` order.

    ``version`` is the policy version when the prompt was dispatched (for
    the buffer's age limit); ``attempt`` is the ledger's count of the
    ordinal's failed attempts (failures and stale evictions, across
    restarts) when it was dispatched, as in the request id."""

    ordinal: int
    row: Any
    completions: tuple[tuple[int, ...], ...]
    finish_reasons: tuple[str, ...]
    version: int
    attempt: int
    request_id: str
    #: Each sample's ``TokenPayload`` (ids, log-probs, versions), in sibling
    #: order, when the sample-level loop built the group; empty otherwise.
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
    ``dispatch submit land fail requeue drop abort exit``; ``detail`` says
    why for ``fail`` (``timeout``, ``abort``, the exception) and ``exit``."""

    kind: str
    ordinal: int
    request_id: str = ""
    detail: str = ""


@attrs.frozen
class SampleProgress:
    """One advance of one sample of a request in flight (``on_progress``).

    ``index`` is the sample's ``CompletionOutput.index``; the sample had
    ``start`` tokens before and ``token_ids`` are the new ones (empty when
    only the finish reason arrived, as on an abort); ``finish_reason`` is
    ``None`` until the sample ended. The ordinal and attempt come from the
    loop's own record of the request, never from the output."""

    ordinal: int
    attempt: int
    request_id: str
    index: int
    start: int
    token_ids: tuple[int, ...]
    finish_reason: str | None


def default_request_id(ordinal: int, attempt: int) -> str:
    return f"o{ordinal}-a{attempt}"


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
        "key",
        "landed",
        "logprobs",
        "ordinal",
        "reasons",
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
        request_id: str,
        version: int,
        key: Hashable | None = None,
    ) -> None:
        #: What the loop files the request under: the ordinal (one request
        #: per prompt), or the sample's lease (one request per sample).
        self.key: Hashable = ordinal if key is None else key
        self.ordinal = ordinal
        self.row = row
        self.attempt = attempt
        self.request_id = request_id
        self.version = version
        #: The group landed in the sink.
        self.landed = False
        #: The ordinal left the outstanding state (landed, or failed).
        self.released = False
        #: The sink refused the group, or the progress observer raised:
        #: stop the loop, leave the ordinal outstanding.
        self.refused = False
        #: Each sample's tokens so far and its finish reason, by index.
        self.tokens: dict[int, list[int]] = {}
        self.reasons: dict[int, str | None] = {}
        #: Each sample's log-probs so far, when the engine reports them.
        self.logprobs: dict[int, list[float]] = {}


class RolloutLoop:
    """Keeps prompts from ``collector`` generating on ``engine`` and lands
    their groups in ``sink``.

    ``prompt_of(row)`` is the engine prompt of a dataset row (for vLLM a
    string, a token list or a ``TokensPrompt``). ``sampling_params`` is
    passed as is, or, when callable, called with ``(ordinal, attempt)`` per
    request (a vLLM ``SamplingParams`` is not callable). ``num_generations``
    defaults to ``sampling_params.n``. At most ``max_in_flight`` prompts
    generate at once and, with ``max_ahead``, at most that many are
    generating or waiting in the sink (back pressure from the trainer).
    ``timeout`` bounds each request in seconds. ``version()`` is the current
    policy version, stamped on each group at dispatch. ``fatal_errors``
    (default: the engine's ``fatal_errors`` attribute; for a bare vLLM
    ``AsyncLLM``, ``EngineDeadError``; ``EngineLoopError`` always) are
    exception types that mean the engine died: they stop the loop (``until``
    and the ``async with`` raise them) and burn no attempt, since a dead
    engine is not a failed prompt. A sink that raises on ``add`` stops the
    loop the same way. After a stop, ``aclose()`` (or ``outstanding``, also
    once the ``async with`` has exited) gives the ordinals left outstanding.
    ``on_progress`` observes each sample's tokens as they stream
    (``SampleProgress``; see the module doc; an observer that raises stops
    the loop too), and ``partial(ordinal)`` gives them for a request in
    flight.

    Use it as ``async with RolloutLoop(...) as rollout:``; the trainer waits
    with ``await rollout.until(predicate)`` (``timeout=`` bounds the wait:
    ``RolloutStalledError``) and calls ``rollout.wake()`` after it frees
    room (a training step) or requeues work (an eviction). Once every
    request has ended and nothing is left to take, the loop is ``idle``,
    whatever failed at once (a worker cancelled before it ran is retired
    too).
    """

    def __init__(
        self,
        collector: Collector,
        engine: AsyncEngine,
        sink: GroupSink,
        *,
        prompt_of: Callable[[Any], Any],
        sampling_params: Any,
        num_generations: int | None = None,
        max_in_flight: int = 8,
        max_ahead: int | None = None,
        timeout: float | None = None,
        version: Callable[[], int] = lambda: 0,
        on_dropped: Callable[[Sequence[int]], None] | None = None,
        on_event: Callable[[RolloutEvent], None] | None = None,
        on_progress: Callable[[SampleProgress], None] | None = None,
        request_id: Callable[[int, int], str] = default_request_id,
        fatal_errors: tuple[type[BaseException], ...] | None = None,
    ) -> None:
        if num_generations is None:
            num_generations = int(getattr(sampling_params, "n", 0))
        if num_generations < 1:
            raise ValueError("num_generations must be >= 1 (or given by sampling_params.n)")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.collector = collector
        self.engine = engine
        self.sink = sink
        self.prompt_of = prompt_of
        self.sampling_params = sampling_params
        self.num_generations = num_generations
        self.max_in_flight = max_in_flight
        self.max_ahead = max_ahead
        self.timeout = timeout
        self.version = version
        self.on_dropped = on_dropped
        self.on_event = on_event
        self.on_progress = on_progress
        self.request_id = request_id
        if fatal_errors is None:
            fatal_errors = _default_fatal_errors(engine)
        self.fatal_errors = fatal_errors
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}
        self._requests: dict[Hashable, _Request] = {}
        #: Ordinals whose worker exited without landing or failing them (the
        #: loop stopped): outstanding in the ledger, generating nowhere.
        self._stranded: set[int] = set()
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
        return tuple(sorted(live | self._stranded))

    def partial(self, ordinal: int) -> dict[int, tuple[int, ...]]:
        """The tokens each sample of ``ordinal``'s request in flight has
        produced so far, by sample index (empty when it is not in flight)."""
        req = self._requests.get(ordinal)
        if req is None:
            return {}
        return {i: tuple(t) for i, t in sorted(req.tokens.items())}

    @property
    def idle(self) -> bool:
        """Nothing generating and nothing left to take."""
        return not self._tasks and self.collector.exhausted

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

    def wake(self) -> None:
        """Re-run the feeder: room was freed or ordinals were requeued."""
        self._notify()

    async def until(self, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        """Wait until ``predicate()`` holds, re-checking after every event
        of the loop. Raises the feeder's exception if it died (a misaligned
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
        """How many more prompts the feeder may take now."""
        n = self.max_in_flight - len(self._tasks)
        if self.max_ahead is not None:
            n = min(n, self.max_ahead - len(self._tasks) - len(self.sink))
        return max(0, n)

    def fill(self) -> int:
        """Take as many prompts as there is room for and start their
        workers; returns how many. The collector reports them dispatched
        inside ``take``, before any request is submitted. Takes nothing
        once the loop is closing or stopped."""
        if self._closing or self._error is not None:
            return 0
        n = self.room()
        if n <= 0:
            return 0
        items = self.collector.take(n)
        version = self.version()
        for ordinal, row in items:
            attempt = self.collector.attempts(ordinal)
            self._stranded.discard(ordinal)  # taken again (the collector resumed)
            req = _Request(ordinal, row, attempt, self.request_id(ordinal, attempt), version)
            self._emit("dispatch", ordinal, req.request_id)
            self._spawn(req)
        return len(items)

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
        params = (
            self.sampling_params(req.ordinal, req.attempt)
            if callable(self.sampling_params)
            else self.sampling_params
        )
        return self.prompt_of(req.row), params

    async def _consume(self, gen: Any, req: _Request, delta: bool) -> None:
        tokens, reasons = req.tokens, req.reasons
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
                if self.on_progress is not None:
                    self._progress(req, i, start, new, reason)
            if out.finished:
                self._land(req)
        if not req.landed:
            raise RolloutError("the engine ended the request without a finished output")

    def _progress(
        self, req: _Request, index: int, start: int, new: list[int], reason: str | None
    ) -> None:
        assert self.on_progress is not None
        event = SampleProgress(
            req.ordinal, req.attempt, req.request_id, index, start, tuple(new), reason
        )
        try:
            self.on_progress(event)
        except Exception:
            req.refused = True  # the observer's failure, not the prompt's: stop
            raise

    def _land(self, req: _Request) -> None:
        n = self.num_generations
        tokens = req.tokens
        if sorted(tokens) != list(range(n)):
            raise RolloutError(f"final output holds samples {sorted(tokens)}, expected 0..{n - 1}")
        reasons = tuple(req.reasons.get(i) or "" for i in range(n))
        if any(r not in USABLE for r in reasons):
            bad = sorted({r for r in reasons if r not in USABLE})
            raise RolloutError(f"{ABORT if ABORT in bad else 'unusable'}: finish reasons {bad}")
        group = Group(
            ordinal=req.ordinal,
            row=req.row,
            completions=tuple(tuple(int(t) for t in tokens[i]) for i in range(n)),
            finish_reasons=reasons,
            version=req.version,
            attempt=req.attempt,
            request_id=req.request_id,
        )
        # One synchronous stretch: the ledger and the buffer agree at every
        # await point, so no checkpoint can see one without the other. The
        # sink first: a sink that refuses the group (raises) is never
        # reported landed, and it stops the loop with the ordinal left
        # outstanding (a refusal is the trainer's, not a failed generation,
        # so it burns no attempt and drops nothing). A ledger that refuses
        # the landing is a wiring bug and stops the loop too.
        try:
            self.sink.add(group)
        except Exception:
            req.refused = True
            raise
        self.collector.landed([req.ordinal])
        req.landed = req.released = True
        self._emit("land", req.ordinal, req.request_id)
        self._notify()

    def _failed(self, req: _Request, detail: str) -> None:
        if req.released:
            return  # the group is buffered; what the engine does next is moot
        # Released only once the ledger took the failure: if it refuses (a
        # wiring bug, which stops the loop) the ordinal is still outstanding.
        effect = self.collector.failed([req.ordinal])
        req.released = True
        self._emit("fail", req.ordinal, req.request_id, detail)
        for o in effect.requeued:
            self._emit("requeue", o, req.request_id)
        for o in effect.dropped:
            self._emit("drop", o, req.request_id)
        if effect.dropped and self.on_dropped is not None:
            self.on_dropped(effect.dropped)
