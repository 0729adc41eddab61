"""The rollout journal binding: a sample-level ledger and its journal file.

``RolloutJournal`` is the single writer of a run's rollout journal
(``JournalWriter``) and the glue between it and a
``Ledger``: a rollout loop reports each sealed sample and each
running sample's progress here as they happen; a checkpoint appends a mark
and syncs, so the checkpoint knows its journal position; a compaction after
the checkpoint keeps only what the window still needs; and a resume reads
the journal back, checks it is the one the checkpoint was taken with,
applies the reuse policy, and says which siblings come back sealed, which
continue from a prefix, and which attempt numbers this life may deal.

The core decides everything (``frontier_core.journal``: format, replay,
fencing, compaction, reuse, continuation; ``Ledger``: which results
count); this module sequences the calls and owns the file. It imports
frontier_core and the journal file adapter only.

Ordering, which the invariants rely on (``proofs/SAMPLES.md``):

* A result is reported to the ledger first and journaled only if the
  ledger accepted it, so the journal never holds a seal the ledger fenced.
* ``mark`` syncs the journal before the caller writes its checkpoint, so a
  checkpoint never refers to records that are not durable.
* ``compact`` runs only after the checkpoint that names the mark is durable,
  with that checkpoint's window (the ordinals at or above its cut): a crash
  at any moment leaves either the old journal or the compacted one, and
  either replays to the same state on the window.
* An attempt is reserved (a ``Reserve`` record, synced) before it is dealt:
  ``recover`` reserves the life's first block itself and ``cover`` the next
  ones, so a later life starts above every attempt this one could have
  handed out, journaled or not, and a result of one of them is fenced.
* A resume holds only the sealed siblings whose samples it can give back
  (``Recovered.sample``): those the journal holds and those the caller
  saved with the checkpoint (``saved``). A sealed sibling the checkpoint
  records but neither holds (a later checkpoint's compaction removed it,
  and a resume from an older checkpoint wants it) is generated again.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Container, Mapping
from pathlib import Path
from typing import Final

import attrs

from frontier_core import (
    MAX_ATTEMPT,
    Checkpoint,
    CheckpointMismatchError,
    IllegalTransitionError,
    Lease,
    Ledger,
)
from frontier_core.journal import (
    NO_TOKENS,
    Answer,
    CommitPolicy,
    Extend,
    JournalHeader,
    JournalState,
    Mark,
    Payload,
    Progress,
    Reserve,
    Reuse,
    Sealed,
    SiblingState,
    TokenPayload,
    ToolCall,
    Turn,
    compact,
    continue_sample,
    replay,
    reusable,
)

from .._errors import JournalWithoutCheckpointError
from ._files import JournalWriter
from ._ship import Restored, Shipper, restore_local

#: Attempts reserved at a time (``recover``, ``cover``): one synced record
#: per block; a life that ends skips what is left of its block.
RESERVE: Final = 1024

_log = logging.getLogger("frontier_adapters.journal")

#: How far a resume moves the attempt floor past the checkpoint's when the
#: journal was lost with its node: the lost life's reservations after the
#: checkpoint went with it, and a late answer of any attempt it dealt must
#: still be fenced. A life may therefore reserve at most this many
#: attempts past its checkpoint's before the next mark (``cover`` refuses
#: more: write a checkpoint); 2**24 (16,384 blocks) is far beyond a real
#: step's, and leaves room for 255 losses in the 2**32 attempts of a run.
LOST_ATTEMPTS: Final = 1 << 24


@attrs.frozen
class JournalLoss:
    """What a resume lost with a node: the checkpoint (number
    ``checkpoint``) saved its journal mark at ``position``, but the journal
    this life found (``source``: the node's own file, the shipped copy, or
    none, ``"new"``) ends at ``last``, so the records after ``last`` that the
    checkpoint counted as durable are gone: the samples and progress they
    held are generated again (coverage is the checkpoint's, and stays
    exact). The attempts this life deals start at ``attempt_floor``,
    ``LOST_ATTEMPTS`` past everything known, so an answer to an attempt
    the lost life dealt is fenced. ``reason`` says it in words."""

    checkpoint: int
    position: int
    last: int
    source: str
    attempt_floor: int

    @property
    def records(self) -> int:
        """How many records were lost (what the checkpoint counted past
        the journal's end)."""
        return self.position - self.last

    @property
    def reason(self) -> str:
        return (
            f"the checkpoint {self.checkpoint} saved journal position {self.position}, but the "
            f"journal this life found ({self.source}) ends at {self.last}: "
            f"{self.records} records were lost with the node that wrote them (a node-local "
            "journal the node took with it, or one restored from a store it had not reached); "
            "what they held is generated again"
        )


@attrs.frozen
class Recovered:
    """What a resume takes from the journal: ``state``, the replayed journal
    (with the samples saved with the checkpoint) after the reuse policy
    (look up a reused sibling's sample or a prefix to continue with
    ``sample`` and ``prefix``); ``sealed``, ``attempt_floor`` and
    ``attempt_limit``, the arguments of ``Ledger.resume`` (and of
    ``Ledger.start`` on a fresh start): every sibling in ``sealed`` has
    its sample here, and the attempts from ``attempt_floor`` (the journal's
    floor: one above every attempt it names, and at or above every earlier
    reservation) to below ``attempt_limit`` are reserved durably for this
    life; ``torn``, the bytes of a torn tail the open discarded (0 if none);
    ``fork``, the checkpoint's step the resume forked at, by which a
    journaled token's age is counted along the lineage
    (``lineage_version``); ``lost``, what the journal lost with a node
    (``JournalLoss``), or ``None`` when it held everything the checkpoint
    counted."""

    state: JournalState
    sealed: tuple[Lease, ...]
    attempt_floor: int
    torn: int
    fork: int
    attempt_limit: int
    lost: JournalLoss | None = None

    def sample(self, lease: Lease) -> Payload:
        """The sample of a sibling the ledger reused (one of ``sealed``);
        ``KeyError`` for any other lease."""
        st = self.state.get(lease.ordinal, lease.sibling)
        if st is None or not st.sealed or st.attempt != lease.attempt:
            raise KeyError(f"the journal holds no seal of {lease}")
        return st.payload

    def episode(self, lease: Lease) -> SiblingState | None:
        """The sealed episode of a sibling the ledger reused (one of
        ``sealed``): its transcript (``turns``) with its sample
        (``payload``); ``None`` for a reused sample that is no episode.
        ``KeyError`` for any other lease."""
        self.sample(lease)
        st = self.state.get(lease.ordinal, lease.sibling)
        return st if st is not None and st.turns else None

    def prefix(self, ordinal: int, sibling: int) -> SiblingState | None:
        """The durable progress a new attempt of this sibling continues from
        (``None``: it starts from nothing, as after a failure voided what
        it held: an empty progress, no turns)."""
        st = self.state.get(ordinal, sibling)
        if st is None or st.sealed or (not st.turns and st.payload == NO_TOKENS):
            return None
        return st


class RolloutJournal:
    """The single writer of one run's rollout journal at ``path``.

    ``fingerprint`` is the run's stream fingerprint, ``lineage`` the run's
    lineage id (chosen when the run starts and kept across resumes): a
    journal of another run is refused at open. ``policy`` is the group
    commit policy. ``progress_every`` is the number of new tokens after
    which ``progress`` records a running sample (``due`` answers it).

    Call ``recover`` once when the run starts, with ``None`` on a fresh
    start: it reads what the journal holds and reserves this life's first
    attempts; deal attempts only within the reservation (``cover``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fingerprint: str,
        lineage: str,
        policy: CommitPolicy | None = None,
        progress_every: int = 256,
        ship_to: Shipper | None = None,
        ship_timeout: float = 60.0,
    ) -> None:
        if type(progress_every) is not int or progress_every < 1:
            raise ValueError(f"progress_every must be an int >= 1, got {progress_every!r}")
        if not isinstance(ship_timeout, int | float) or not 0 < ship_timeout < math.inf:
            raise ValueError(f"ship_timeout must be a number of seconds > 0, got {ship_timeout!r}")
        self.progress_every = progress_every
        #: Where the journal is shipped off the node (``None``: it stays in
        #: the local file), and how long a mark or a reservation waits for it.
        self.shipper = ship_to
        self.ship_timeout = float(ship_timeout)
        #: Which copy this life's journal came from (``Restored``), when shipped.
        self.restored: Restored | None = None
        written = None
        if ship_to is not None:
            self.restored, written = restore_local(Path(path), ship_to, fingerprint, lineage)
        self.writer = JournalWriter(
            path, JournalHeader(fingerprint, lineage), policy, ship=ship_to, _decoded=written
        )
        #: The attempts this life deals start here (``recover`` sets it);
        #: ``None`` until the journal is recovered.
        self.attempt_floor: int | None = None
        #: Attempts below this are reserved durably (``reserve``).
        self.reserved = 0
        #: No reservation may reach past this before the next mark: what a
        #: resume that lost the journal fences (``LOST_ATTEMPTS``).
        self._budget = MAX_ATTEMPT + 1

    # -- during generation --------------------------------------------------

    def sealed(self, lease: Lease, payload: Payload) -> int:
        """Journal a sample the ledger accepted (``effect.sealed``); returns
        its position. Durable after the next group commit or ``mark``."""
        return self.writer.append(Sealed(lease.ordinal, lease.sibling, lease.attempt, payload))

    def due(self, recorded: int, generated: int) -> bool:
        """Whether a sample with ``generated`` tokens, ``recorded`` of them
        in its last progress record, is due for another."""
        return generated - recorded >= self.progress_every

    def progress(self, lease: Lease, payload: Payload) -> int:
        """Journal a running sample's state so far (every token since the
        sample began, prefix included: a whole snapshot). An attempt's first
        progress record is one; ``extend`` records the tokens after it."""
        return self.writer.append(Progress(lease.ordinal, lease.sibling, lease.attempt, payload))

    def extend(self, lease: Lease, start: int, payload: TokenPayload) -> int:
        """Journal a running sample's tokens from ``start`` on (it holds
        ``start`` tokens in the journal already): each token is written once,
        however long the sample grows."""
        return self.writer.append(
            Extend(lease.ordinal, lease.sibling, lease.attempt, start, payload)
        )

    def turn(self, lease: Lease, turn: int, tokens: TokenPayload, call: ToolCall | None) -> int:
        """Journal turn ``turn`` of ``lease``'s episode (``Turn``); returns
        its position. Write-ahead: a turn with a call is durable (synced,
        and shipped when the journal is) before this returns, so the tool is
        called only once its intent survives a crash (and the node); the
        caller checks the turn against the episode first (``advance``)."""
        position = self.writer.append(
            Turn(lease.ordinal, lease.sibling, lease.attempt, turn, tokens, call)
        )
        if call is not None:
            self.durable()
        return position

    def answer(
        self, lease: Lease, turn: int, key: str, answer: Payload, state: Payload | None
    ) -> int:
        """Journal the answer to turn ``turn``'s call (``Answer``); durable
        at the next group commit (a crash before leaves the call pending:
        it is retried under its key, and the tool replays its answer)."""
        return self.writer.append(
            Answer(lease.ordinal, lease.sibling, lease.attempt, turn, key, answer, state)
        )

    def reserve(self, below: int) -> int:
        """Journal, durably, that attempts below ``below`` may be in use
        (``frontier_core.journal.Reserve``): call it before handing out an
        attempt not reserved yet, in blocks. A resumed writer's
        ``attempt_floor`` is at or above it, so a result of an attempt of a
        previous incarnation, even one never journaled, is fenced. Returns
        its position. ``cover`` reserves in blocks for a ledger."""
        position = self.writer.append(Reserve(below))
        self.durable()
        self.reserved = max(self.reserved, below)
        return position

    def cover(self, ledger: Ledger, count: int, *, reserve: int = RESERVE) -> Ledger:
        """``ledger``, ready to deal its next ``count`` attempts: they are
        reserved durably (a block of ``reserve`` more, if they were not) and
        are within its ``attempt_limit``, and its counter is at or above
        this life's floor (``recover``'s). Call it before a ``dispatch`` or
        ``restart`` that deals ``count`` attempts (``StreamCollector`` bound
        to this journal does). Raises ``RuntimeError`` if the journal was
        not recovered first (the previous lives' reservations are unknown
        until then) and ``IllegalTransitionError`` past 2**32 attempts."""
        if self.attempt_floor is None:
            raise RuntimeError(
                "the journal was not recovered: call recover(checkpoint or None, ...) before "
                "dealing attempts, so that they start above every earlier life's"
            )
        if type(count) is not int or count < 0:
            raise ValueError(f"count must be an int >= 0, got {count!r:.40}")
        _check_block(reserve)
        floor = max(ledger.next_attempt, self.attempt_floor)
        top = floor + count
        if top > self.reserved:
            if top > self._budget:
                raise IllegalTransitionError(
                    "reserve",
                    (),
                    f"attempts up to {top - 1} would pass {self._budget - 1}, {LOST_ATTEMPTS} "
                    "past the last checkpoint's: write a checkpoint first (a resume that lost "
                    "the journal with its node fences only that many)"
                )
            self.reserve(min(top + reserve, self._budget, MAX_ATTEMPT + 1))
        limit = ledger.attempt_limit
        if limit is not None and top <= limit and floor == ledger.next_attempt:
            return ledger
        return ledger.with_attempt_limit(self.reserved, floor=floor)

    def poll(self) -> float | None:
        """Commit a due group; the seconds until the next is due."""
        return self.writer.poll()

    # -- checkpoints ------------------------------------------------------------

    def mark(self, checkpoint: int) -> int:
        """Append the mark of checkpoint number ``checkpoint`` and sync:
        returns the journal position the checkpoint records. Call it just
        before writing the checkpoint."""
        position = self.writer.append(Mark(checkpoint))
        self.durable()
        # The checkpoint about to be written deals from at most here: a
        # resume that loses the journal fences LOST_ATTEMPTS past it.
        self._budget = min(self.reserved + LOST_ATTEMPTS - _MAX_BLOCK, MAX_ATTEMPT + 1)
        return position

    def durable(self) -> None:
        """Sync, and when the journal is shipped, wait until it is up: a
        checkpoint's mark and an attempt reservation must survive the node
        (``JournalShipError`` after ``ship_timeout``)."""
        self.writer.sync()
        if self.shipper is not None:
            self.shipper.flush(self.ship_timeout)

    def compact(self, window: Container[int]) -> int:
        """Rewrite the journal with only the state of the ordinals in
        ``window`` (normally: at or above the durable checkpoint's cut).
        Returns the durable position."""
        records = compact(self.writer.read().records, window)
        return self.writer.compact_to(self.writer.path, records, ship_timeout=self.ship_timeout)

    # -- resume -------------------------------------------------------------------

    def recover(
        self,
        checkpoint: Checkpoint | None,
        *,
        position: int | None,
        checkpoint_id: int | None,
        reuse: Reuse,
        fork: int,
        step: int,
        saved: Mapping[Lease, Payload] | None = None,
        reserve: int = RESERVE,
        lives: int | None = None,
    ) -> Recovered:
        """What the journal offers a resume from ``checkpoint`` (``None``: a
        fresh start, on a new journal or on one that holds no samples, e.g.
        a start that died before its first checkpoint), and this life's
        first ``reserve`` attempts, reserved durably before it returns
        (``Recovered.attempt_floor`` to ``attempt_limit``).

        ``position`` and ``checkpoint_id`` are what the checkpoint recorded
        of its mark: the journal must hold that mark there
        (``JournalBehindError`` if another record stands there: a journal
        of another branch). A journal that ends before the mark lost its tail
        with its node (a node-local file gone with a preempted node, a
        stale copy): the resume proceeds with what survived, reports it in
        ``Recovered.lost`` (and at WARNING on the
        ``frontier_adapters.journal`` logger), moves the attempts past
        anything the lost life could have dealt (``LOST_ATTEMPTS``), and
        rewrites the journal so that it remembers the checkpoint's mark:
        the next resume from the same checkpoint is proven against it.
        ``reuse``, ``fork`` (the checkpoint's trainer step) and ``step``
        (the step trained next) are ``frontier_core.journal.reusable``'s.
        ``saved`` are the samples the caller saved with the checkpoint
        (``checkpoint(save_sealed=True)``), by lease, each of a sibling
        ``checkpoint.sealed`` lists: they count as seals before everything
        the journal holds (a newer attempt in the journal wins), and the
        reuse policy applies to them as to the journal's. A sealed sibling
        of the checkpoint whose sample neither holds is not in ``sealed``:
        it is generated again.

        ``lives``: how many lives of the run opened since the one that
        wrote ``checkpoint`` (``Run``: its epoch minus the checkpoint's),
        or ``None`` when unknown (one is assumed). Each of them may have
        dealt up to ``LOST_ATTEMPTS`` past the checkpoint's attempts beyond
        the one before it, so a loss moves the floor ``lives`` times that
        (a second loss before the next checkpoint stays fenced; as many as
        the run's attempts hold, about 255, then a warning), and a
        life that found the journal whole may deal up to ``lives + 1``
        times that before its next mark (after a loss, a life is not held
        to the lost life's budget).

        Raises ``JournalWithoutCheckpointError`` (a ``ValueError``) when
        there is no checkpoint but the journal holds samples or was
        compacted (a checkpoint existed: a missing checkpoint is not a fresh
        start), ``CheckpointMismatchError`` for a saved sample the
        checkpoint does not record as sealed.
        """
        _check_block(reserve)
        if lives is not None and (type(lives) is not int or lives < 1):
            raise ValueError(f"lives must be an int >= 1 or None, got {lives!r:.40}")
        # The writer's own decoding at its open, when nothing was appended
        # or compacted since (a resume's open, then this): not read again.
        decoded = self.writer.as_opened() or self.writer.read()
        lost: JournalLoss | None = None
        if checkpoint is None:
            if saved:
                raise CheckpointMismatchError("samples saved with a checkpoint, but no checkpoint")
            state = replay(decoded.records)
            if state.groups or decoded.header.base > 0:
                raise JournalWithoutCheckpointError(
                    self.writer.path,
                    "the journal holds samples or was compacted after a checkpoint, but there "
                    "is no checkpoint: a missing checkpoint is not a fresh start (remove the "
                    "journal to start afresh)",
                )
            start = state.next_attempt
        else:
            if position is None or checkpoint_id is None:
                raise ValueError("a resume from a checkpoint needs its journal position and id")
            for name, value in (("position", position), ("checkpoint_id", checkpoint_id)):
                if type(value) is not int or not 0 <= value < 1 << 64:
                    raise ValueError(f"{name} must be an int in [0, 2**64), got {value!r:.40}")
            # Lost whole with its node: nothing at all where the checkpoint
            # saw a journal (a new, empty file). A journal that holds records
            # and ends before the mark is not taken for this one's remains:
            # a stale copy, another branch's or another run's would pass for
            # them (``check_mark`` refuses it).
            lost_whole = decoded.last_seq == 0 and not decoded.records and position > 0
            if not lost_whole:
                decoded.check_mark(position, checkpoint_id)
            saved_seals = _saved_seals(checkpoint, saved or {})
            state = replay((*saved_seals, *decoded.records))
            start = max(state.next_attempt, checkpoint.next_attempt)
            if lost_whole:
                # Past every lost life's budget; lives beyond what the run's
                # attempts hold (about 255 since the checkpoint) are counted
                # as many as fit, never a refusal: each dealt far less than
                # its budget unless it ran that long without a checkpoint.
                fit = (MAX_ATTEMPT + 1 - reserve - checkpoint.next_attempt) // LOST_ATTEMPTS
                counted = max(min(lives or 1, fit), 1)
                if counted < (lives or 1):
                    _log.warning(
                        "%d lives opened since checkpoint %d; its loss fences the attempts "
                        "of %d of them (the run's 2**32 attempts hold no more)",
                        lives, checkpoint_id, counted,
                    )  # fmt: skip
                start = checkpoint.next_attempt + counted * LOST_ATTEMPTS
                if start + reserve > MAX_ATTEMPT + 1:
                    raise IllegalTransitionError(
                        "resume",
                        (),
                        f"the journal was lost with its node, and fencing its attempts needs "
                        f"{start + reserve - 1}, past the run's 2**32 attempts"
                    )
                lost = JournalLoss(
                    checkpoint=checkpoint_id,
                    position=position,
                    last=decoded.last_seq,
                    source="new" if self.restored is None else self.restored.source,
                    attempt_floor=start,
                )
                _log.warning("%s", lost.reason)
                # One atomic rewrite: the header remembers the checkpoint's
                # mark and the journal holds this life's first reservation,
                # so a crash right after it resumes proven and fenced.
                self.writer.compact_to(
                    self.writer.path,
                    [Reserve(start + reserve)],
                    lost=(position, checkpoint_id),
                    ship_timeout=self.ship_timeout,
                )
                self.durable()
                self.reserved = start + reserve
        kept = reusable(state, reuse, fork=fork, step=step)
        # Reserved before anything is dealt: this life's attempts are then
        # above every attempt a previous life could have handed out.
        if lost is None:
            self.reserve(min(start + reserve, MAX_ATTEMPT + 1))
        self.attempt_floor = start
        # Until the next mark, reservations stay below what a resume that
        # loses the journal fences: LOST_ATTEMPTS past this life's first
        # after a loss (or on a fresh start); with the journal whole,
        # LOST_ATTEMPTS past the checkpoint's for every life since it and
        # this one (the next loss counts this life too, ``lives``).
        if checkpoint is None or lost is not None:
            budget = start + LOST_ATTEMPTS
        else:
            budget = checkpoint.next_attempt + ((lives or 0) + 1) * LOST_ATTEMPTS
        self._budget = min(budget, MAX_ATTEMPT + 1)
        torn = 0 if self.writer.torn is None else self.writer.torn.length
        return Recovered(
            state=kept,
            sealed=kept.sealed(),
            attempt_floor=state.next_attempt if lost is None else start,
            torn=torn,
            fork=fork,
            attempt_limit=self.reserved,
            lost=lost,
        )

    def close(self, *, ship_timeout: float | None = None) -> None:
        """Close the file, then ship what is left, waiting up to
        ``ship_timeout`` (default: the journal's); what could not be shipped
        stays in the local file, and ``JournalShipError`` says so."""
        try:
            self.writer.close()
        finally:
            if self.shipper is not None:
                wait = self.ship_timeout if ship_timeout is None else ship_timeout
                self.shipper.close(max(wait, 0.001))


#: The largest block of attempts reserved at a time.
_MAX_BLOCK: Final = 1 << 20


def _check_block(reserve: object) -> None:
    if type(reserve) is not int or not 1 <= reserve <= _MAX_BLOCK:
        raise ValueError(f"reserve must be an int in [1, 2**20], got {reserve!r:.40}")


def _saved_seals(checkpoint: Checkpoint, saved: Mapping[Lease, Payload]) -> list[Sealed]:
    """The samples saved with ``checkpoint`` as the seals they were."""
    recorded = set(checkpoint.sealed)
    seals = []
    for lease, payload in saved.items():
        if not isinstance(lease, tuple) or lease not in recorded:
            raise CheckpointMismatchError(
                f"a saved sample of {lease!r:.80}, which the checkpoint does not record as "
                "sealed (checkpoint(save_sealed=True) records the siblings to save)"
            )
        o, s, a = lease
        seals.append(Sealed(o, s, a, payload))
    return sorted(seals, key=lambda x: (x.ordinal, x.sibling))


def resumed_sample(prefix: SiblingState | None, rest: TokenPayload) -> TokenPayload:
    """The sample a continued sibling seals: ``prefix``'s tokens (if any)
    then ``rest`` (``frontier_core.journal.continue_sample``)."""
    if prefix is None:
        return rest
    if not isinstance(prefix.payload, TokenPayload):
        raise TypeError("only a token prefix is continued by the rollout loop")
    return continue_sample(prefix.payload, rest)
