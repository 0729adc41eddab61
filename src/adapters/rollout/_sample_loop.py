"""The rollout loop, sample by sample, with a rollout journal.

``SampleRolloutLoop`` is ``RolloutLoop`` (same lifecycle, same rules of the
house: every decision is the ledger's, a dead engine or a refusing sink
stops the loop and burns no attempt, ``aclose`` returns what is left
outstanding) over a ``SampleCollector``: each lease the ledger hands out is
its own request of one sample, under the request id
``o{ordinal}-s{sibling}-a{attempt}``, so a failed or late sample costs only
itself. With a ``RolloutJournal``:

* every sample the ledger accepts is journaled as it seals (a
  ``TokenPayload``: token ids, the engine's per-token log-probs, the policy
  version of each token);
* a running sample is journaled every ``journal.progress_every`` tokens;
* after a resume (``recovered``, from ``RolloutJournal.recover``), siblings
  the ledger reused come back from the journal without a request, and a new
  attempt of a sibling with a durable prefix continues from it: the engine
  gets ``prompt_of(row, prefix_tokens)`` and ``sampling_params(lease,
  len(prefix))`` (reduce ``max_tokens`` by it), and the sample it seals is
  the prefix then the new tokens, each token keeping the version that
  generated it.

A group lands in the sink, then in the ledger, in one synchronous stretch
when its last sibling seals (or at its dispatch when every sibling is
reused): the sink first, so that a sink that refuses a group leaves it
unresolved. ``Group.completions`` are the siblings' token ids in sibling
order and ``Group.samples`` their payloads; ``Group.attempt`` is the
highest attempt among them.

Checkpoints: call ``journal.mark(n)`` and take the collector's
``checkpoint_state`` in the same synchronous stretch (no await between), then
write both; compact after the checkpoint is durable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from frontier_core import Lease
from frontier_core.journal import Reuse, SiblingState, TokenPayload, lineage_version

from .._collector import StreamCollector as SampleCollector  # merged: issue 22
from .._collector import Taken
from ..journal import Recovered, RolloutJournal, resumed_sample
from ._engine import USABLE, AsyncEngine
from ._loop import (
    Group,
    GroupSink,
    RolloutError,
    RolloutEvent,
    RolloutLoop,
    SampleProgress,
    _Request,
)


def _ignore(_progress: SampleProgress) -> None:
    pass


def sample_request_id(lease: Lease) -> str:
    return f"o{lease.ordinal}-s{lease.sibling}-a{lease.attempt}"


class _SampleRequest(_Request):
    __slots__ = ("journaled", "lease", "prefix", "recorded")

    def __init__(self, lease: Lease, row: Any, version: int, prefix: TokenPayload | None) -> None:
        super().__init__(
            lease.ordinal, row, lease.attempt, sample_request_id(lease), version, key=lease
        )
        self.lease = lease
        #: The durable prefix this attempt continues, if any.
        self.prefix = prefix
        #: How many new tokens (after the prefix) the journal holds.
        self.recorded = 0
        #: Whether this attempt has its first progress record (a snapshot).
        self.journaled = False


class SampleRolloutLoop(RolloutLoop):
    """Keeps samples of ``collector``'s groups generating on ``engine`` and
    lands complete groups in ``sink`` (see the module doc).

    ``prompt_of(row, prefix)`` is the engine prompt of a row continued by
    ``prefix`` (a tuple of token ids, empty for a fresh sample: for vLLM a
    ``TokensPrompt`` of the prompt's ids then the prefix's).
    ``sampling_params(lease, prefix_len)`` are the parameters of one sample
    (``n=1``; ``max_tokens`` reduced by ``prefix_len``). ``max_in_flight``
    counts samples. ``journal`` and ``recovered`` as in the module doc; a
    journal given without ``recovered`` and not recovered yet is recovered
    here as a fresh start (``recover(None, ...)``: refused for a journal
    with samples), and the collector is bound to it, so every attempt the
    loop deals is reserved first (``RolloutJournal.cover``); without a
    journal nothing is journaled and nothing continued. The other
    arguments are ``RolloutLoop``'s. ``on_progress`` sees every advance,
    with ``index`` the sibling and ``start`` counting the prefix's tokens.
    """

    def __init__(
        self,
        collector: SampleCollector,
        engine: AsyncEngine,
        sink: GroupSink,
        *,
        prompt_of: Callable[[Any, tuple[int, ...]], Any],
        sampling_params: Callable[[Lease, int], Any],
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
        if not isinstance(collector, SampleCollector):
            raise TypeError("SampleRolloutLoop needs a SampleCollector")
        super().__init__(
            collector,
            engine,
            sink,
            prompt_of=lambda row: prompt_of(row, ()),
            sampling_params=sampling_params,
            num_generations=collector.config.samples,
            max_in_flight=max_in_flight,
            max_ahead=max_ahead,
            timeout=timeout,
            version=version,
            on_dropped=on_dropped,
            on_event=on_event,
            on_progress=on_progress,
            fatal_errors=fatal_errors,
        )
        self._groups = collector
        self._sample_prompt = prompt_of
        self._sample_params = sampling_params
        self.journal = journal
        if journal is not None and journal.attempt_floor is None and recovered is None:
            # A journal nobody recovered: this is a fresh start (recover
            # refuses a journal with samples and no checkpoint, so a resume
            # that forgot ``recovered=`` is not taken for one), and its
            # attempts must start above every earlier life's reservation.
            recovered = journal.recover(
                None, position=None, checkpoint_id=None, reuse=Reuse.nothing(), fork=0, step=0
            )
        if journal is not None and collector.journal is None:
            # Safe by construction: the collector reserves every attempt in
            # the journal before it deals it (``RolloutJournal.cover``).
            collector.journal = journal
        self.recovered = recovered
        self._user_progress = on_progress
        # The parent reports progress only to an observer; this loop always
        # observes (``_progress`` journals), and calls the user's in it.
        self.on_progress = on_progress or _ignore
        #: Sealed samples of groups not landed yet, by (ordinal, sibling):
        #: the lease, the sample, its finish reason ("" if reused) and how
        #: many of its first tokens came from the journal (all of a reused
        #: sample, the prefix of a continued one).
        self._sealed: dict[tuple[int, int], tuple[Lease, TokenPayload, str, int]] = {}
        self._rows: dict[int, Any] = {}
        self._versions: dict[int, int] = {}
        #: The recovered prefixes the current dispatch of a group may
        #: continue, by (ordinal, sibling); a recovered prefix is offered to
        #: one dispatch of its group only (not again once the group failed
        #: or was evicted whole: it is generated anew then).
        self._prefixes: dict[tuple[int, int], TokenPayload] = {}
        self._offered: set[int] = set()

    def partial(self, ordinal: int) -> dict[int, tuple[int, ...]]:
        """The tokens each running sibling of ``ordinal`` has so far (its
        prefix included), by sibling."""
        out = {}
        for req in self._requests.values():
            if isinstance(req, _SampleRequest) and req.ordinal == ordinal:
                prefix = tuple(req.prefix.tokens()) if req.prefix is not None else ()
                out[req.lease.sibling] = prefix + tuple(req.tokens.get(0, ()))
        return dict(sorted(out.items()))

    def room(self) -> int:
        """How many more samples may start now: ``max_in_flight`` counts
        samples; with ``max_ahead``, no group starts while that many groups
        are generating or waiting in the sink."""
        n = self.max_in_flight - len(self._tasks)
        if self.max_ahead is not None:
            generating = len({req.ordinal for req in self._requests.values()})
            if generating + len(self.sink) >= self.max_ahead:
                return 0
        return max(0, n)

    # -- the feeder -------------------------------------------------------------

    def fill(self) -> int:
        """Take groups while there is room for their samples; start a request
        per lease and land complete groups. Returns the samples started."""
        if self._closing or self._error is not None:
            return 0
        started = 0
        while self.room() > 0 and self._error is None:
            taken = self._groups.take_samples(1)
            if not taken:
                break
            started += self._start_group(taken[0])
        return started

    def _start_group(self, taken: Taken) -> int:
        o = taken.ordinal
        self._stranded.discard(o)
        self._rows[o] = taken.row
        self._versions[o] = self.version()
        if self.recovered is not None and o not in self._offered:
            self._offered.add(o)
            for s in range(self.num_generations):
                state = self.recovered.prefix(o, s)
                if state is not None and isinstance(state.payload, TokenPayload):
                    self._prefixes[(o, s)] = state.payload
        for lease in taken.reused:
            payload = self._journaled(lease)
            self._sealed[(o, lease.sibling)] = (lease, payload, "", len(payload))
        if taken.complete:
            self._land_group(o, complete=True)
            return 0
        for lease in taken.leases:
            self._start(lease)
        return len(taken.leases)

    def _journaled(self, lease: Lease) -> TokenPayload:
        if self.recovered is None:
            raise RolloutError(f"{lease} was reused but the loop has no recovered journal")
        payload = self.recovered.sample(lease)
        if not isinstance(payload, TokenPayload):
            raise RolloutError(f"the journal's sample of {lease} is not a token sample")
        return payload

    def _start(self, lease: Lease) -> None:
        prefix = self._prefixes.get((lease.ordinal, lease.sibling))
        req = _SampleRequest(lease, self._rows[lease.ordinal], self.version(), prefix)
        self._emit("dispatch", lease.ordinal, req.request_id)
        self._spawn(req)

    def _request_args(self, req: _Request) -> tuple[Any, Any]:
        assert isinstance(req, _SampleRequest)
        prefix = tuple(req.prefix.tokens()) if req.prefix is not None else ()
        return self._sample_prompt(req.row, prefix), self._sample_params(req.lease, len(prefix))

    # -- a sample -----------------------------------------------------------------

    def _payload(self, req: _SampleRequest) -> TokenPayload:
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

    def _progress(
        self, req: _Request, index: int, start: int, new: list[int], reason: str | None
    ) -> None:
        assert isinstance(req, _SampleRequest)
        try:
            if self.journal is not None and reason is None:
                have = len(req.tokens.get(0, ()))
                if self.journal.due(req.recorded, have):
                    if not req.journaled:
                        # The attempt's first record: a whole snapshot (the
                        # prefix it continues and its tokens so far).
                        self.journal.progress(req.lease, self._payload(req))
                        req.journaled = True
                    else:
                        offset = len(req.prefix) if req.prefix is not None else 0
                        new_tokens = req.tokens[0][req.recorded : have]
                        new_lps = req.logprobs[0][req.recorded : have]
                        self.journal.extend(
                            req.lease,
                            offset + req.recorded,
                            TokenPayload.of(new_tokens, new_lps, req.version),
                        )
                    req.recorded = have
            if self._user_progress is not None:
                offset = len(req.prefix) if req.prefix is not None else 0
                self._user_progress(
                    SampleProgress(
                        req.ordinal,
                        req.attempt,
                        req.request_id,
                        req.lease.sibling,
                        start + offset,
                        tuple(new),
                        reason,
                    )
                )
        except Exception:
            req.refused = True  # the journal's or the observer's failure: stop
            raise

    def _land(self, req: _Request) -> None:
        assert isinstance(req, _SampleRequest)
        reason = req.reasons.get(0)
        if sorted(req.tokens) != [0]:
            raise RolloutError(
                f"final output of {req.request_id} holds samples {sorted(req.tokens)}"
            )
        if reason not in USABLE:
            raise RolloutError(f"unusable: finish reason {reason!r}")
        payload = self._payload(req)
        lease = req.lease
        key = (lease.ordinal, lease.sibling)
        journaled = len(req.prefix) if req.prefix is not None else 0
        if self._groups.completes(lease):
            # The group's last sibling: the sink takes the group first, then
            # the ledger seals and lands it, in this one synchronous stretch.
            self._sealed[key] = (lease, payload, reason, journaled)
            try:
                self._land_group(lease.ordinal, complete=False, last=lease)
            except BaseException:
                # The sink refused the group (or the journal failed): not
                # this sample's failure. Stop the loop; the sibling stays
                # running in the ledger and a resume generates it again.
                del self._sealed[key]
                req.refused = True
                raise
        else:
            effect = self._groups.sealed([lease])
            if lease in effect.sealed:
                self._sealed[key] = (lease, payload, reason, journaled)
                if self.journal is not None:
                    self._journal_seal(req, lease, payload)
            else:
                self._emit("fenced", lease.ordinal, req.request_id)
        req.landed = req.released = True
        self._notify()

    def _journal_seal(self, req: _Request, lease: Lease, payload: TokenPayload) -> None:
        assert self.journal is not None
        try:
            self.journal.sealed(lease, payload)
        except Exception:
            req.refused = True
            raise

    def _oldest(self, ordinal: int, parts: list[tuple[Lease, TokenPayload, str, int]]) -> int:
        """The group's policy version for the buffer's age limit: that of its
        oldest token along the lineage. A group is stamped with the version
        at its dispatch, but a reused sample or a continued prefix is older;
        a journaled token of the dead branch (after the resume's fork) counts
        its age through the fork (``lineage_version``), so the buffer's age
        limit holds for what a resume took from the journal too."""
        fork = self.recovered.fork if self.recovered is not None else None
        oldest = self._versions.get(ordinal, 0)
        for _, payload, _, journaled in parts:
            for first, version in payload.version_runs:
                if first < journaled and fork is not None:
                    version = lineage_version(version, fork=fork)
                oldest = min(oldest, version)
        return oldest

    def _land_group(self, ordinal: int, *, complete: bool, last: Lease | None = None) -> None:
        n = self.num_generations
        parts = [self._sealed[(ordinal, s)] for s in range(n)]
        payloads = tuple(p for _, p, _, _ in parts)
        group = Group(
            ordinal=ordinal,
            row=self._rows[ordinal],
            completions=tuple(tuple(p.tokens()) for p in payloads),
            finish_reasons=tuple(r for _, _, r, _ in parts),
            version=self._oldest(ordinal, parts),
            attempt=max(lease.attempt for lease, _, _, _ in parts),
            request_id=f"o{ordinal}",
            samples=payloads,
        )
        self.sink.add(group)  # raises: the loop stops, nothing is reported
        if complete:
            self._groups.land_complete([ordinal])
        else:
            assert last is not None
            effect = self._groups.sealed([last])
            assert effect.landed == (ordinal,), effect
            if self.journal is not None:
                self.journal.sealed(last, self._sealed[(ordinal, last.sibling)][1])
        for s in range(n):
            del self._sealed[(ordinal, s)]
            self._prefixes.pop((ordinal, s), None)
        self._rows.pop(ordinal, None)
        self._versions.pop(ordinal, None)
        self._emit("land", ordinal, group.request_id)

    def _failed(self, req: _Request, detail: str) -> None:
        assert isinstance(req, _SampleRequest)
        if req.released:
            return
        effect = self._groups.failed_samples([req.lease])
        req.released = True
        self._emit("fail", req.ordinal, req.request_id, detail)
        if effect.fenced:
            return
        for o in (*effect.requeued, *effect.unstamped, *effect.dropped):
            # The group failed whole: its sealed siblings go with it, and its
            # running siblings are cancelled (their results would be fenced).
            for s in range(self.num_generations):
                self._sealed.pop((o, s), None)
                self._prefixes.pop((o, s), None)
            for other in list(self._requests.values()):
                if other.ordinal == o and other is not req:
                    other.released = True
                    task = self._tasks.get(other.key)
                    if task is not None:
                        task.cancel()
            self._emit("requeue" if o in effect.requeued else "drop", o, req.request_id)
        if effect.dropped and self.on_dropped is not None:
            self.on_dropped(effect.dropped)
        if effect.restart:
            for lease in self._groups.restart(effect.restart):
                self._start(lease)
        self._notify()
