"""The rollout journal binding: a sample-level ledger and its journal file.

``RolloutJournal`` is the single writer of a run's rollout journal
(``frontier_adapters.JournalWriter``) and the glue between it and a
``SampleLedger``: a rollout loop reports each sealed sample and each
running sample's progress here as they happen; a checkpoint appends a mark
and syncs, so the checkpoint knows its journal position; a compaction after
the checkpoint keeps only what the window still needs; and a resume reads
the journal back, checks it is the one the checkpoint was taken with,
applies the reuse policy, and says which siblings come back sealed, which
continue from a prefix, and where attempt numbers must start.

The core decides everything (``frontier_core.journal``: format, replay,
fencing, compaction, reuse, continuation; ``SampleLedger``: which results
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
"""

from __future__ import annotations

import os
from collections.abc import Container

import attrs

from frontier_core import Lease, SampleCheckpoint
from frontier_core.journal import (
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
    compact,
    continue_sample,
    replay,
    reusable,
)

from .._journal_files import JournalWriter


@attrs.frozen
class Recovered:
    """What a resume takes from the journal: ``state``, the replayed journal
    after the reuse policy (look up a reused sibling's sample or a prefix to
    continue with ``sample`` and ``prefix``); ``sealed`` and
    ``attempt_floor``, the arguments of ``SampleLedger.resume``; ``torn``,
    the bytes of a torn tail the open discarded (0 if none); ``fork``, the
    checkpoint's step the resume forked at, by which a journaled token's
    age is counted along the lineage (``lineage_version``)."""

    state: JournalState
    sealed: tuple[Lease, ...]
    attempt_floor: int
    torn: int
    fork: int

    def sample(self, lease: Lease) -> Payload:
        """The journaled sample of a sibling the ledger reused."""
        st = self.state.get(lease.ordinal, lease.sibling)
        if st is None or not st.sealed or st.attempt != lease.attempt:
            raise KeyError(f"the journal holds no seal of {lease}")
        return st.payload

    def prefix(self, ordinal: int, sibling: int) -> SiblingState | None:
        """The durable progress a new attempt of this sibling continues from
        (``None``: it starts from nothing)."""
        st = self.state.get(ordinal, sibling)
        return None if st is None or st.sealed else st


class RolloutJournal:
    """The single writer of one run's rollout journal at ``path``.

    ``fingerprint`` is the run's stream fingerprint, ``lineage`` the run's
    lineage id (chosen when the run starts and kept across resumes): a
    journal of another run is refused at open. ``policy`` is the group
    commit policy. ``progress_every`` is the number of new tokens after
    which ``progress`` records a running sample (``due`` answers it).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fingerprint: str,
        lineage: str,
        policy: CommitPolicy | None = None,
        progress_every: int = 256,
    ) -> None:
        if type(progress_every) is not int or progress_every < 1:
            raise ValueError(f"progress_every must be an int >= 1, got {progress_every!r}")
        self.progress_every = progress_every
        self.writer = JournalWriter(path, JournalHeader(fingerprint, lineage), policy)

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

    def reserve(self, below: int) -> int:
        """Journal, durably, that attempts below ``below`` may be in use
        (``frontier_core.journal.Reserve``): call it before handing out an
        attempt not reserved yet, in blocks. A resumed writer's
        ``attempt_floor`` is at or above it, so a result of an attempt of a
        previous incarnation, even one never journaled, is fenced. Returns
        its position."""
        position = self.writer.append(Reserve(below))
        self.writer.sync()
        return position

    def poll(self) -> float | None:
        """Commit a due group; the seconds until the next is due."""
        return self.writer.poll()

    # -- checkpoints ------------------------------------------------------------

    def mark(self, checkpoint: int) -> int:
        """Append the mark of checkpoint number ``checkpoint`` and sync:
        returns the journal position the checkpoint records. Call it just
        before writing the checkpoint."""
        position = self.writer.append(Mark(checkpoint))
        self.writer.sync()
        return position

    def compact(self, window: Container[int]) -> int:
        """Rewrite the journal with only the state of the ordinals in
        ``window`` (normally: at or above the durable checkpoint's cut).
        Returns the durable position."""
        records = compact(self.writer.read().records, window)
        return self.writer.compact_to(self.writer.path, records)

    # -- resume -------------------------------------------------------------------

    def recover(
        self,
        checkpoint: SampleCheckpoint | None,
        *,
        position: int | None,
        checkpoint_id: int | None,
        reuse: Reuse,
        fork: int,
        step: int,
    ) -> Recovered:
        """What the journal offers a resume from ``checkpoint`` (``None``:
        the run starts afresh on an existing journal, which then must be
        empty of samples, or everything in it is refused as another
        start's).

        ``position`` and ``checkpoint_id`` are what the checkpoint recorded
        of its mark: the journal must hold that mark there
        (``JournalBehindError`` if it ends before, ``JournalMismatchError``
        if another record stands there). ``reuse``, ``fork`` (the
        checkpoint's trainer step) and ``step`` (the step trained next) are
        ``frontier_core.journal.reusable``'s.
        """
        decoded = self.writer.read()
        if checkpoint is not None:
            if position is None or checkpoint_id is None:
                raise ValueError("a resume from a checkpoint needs its journal position and id")
            decoded.check_mark(position, checkpoint_id)
        state = replay(decoded.records)
        floor = state.next_attempt
        if checkpoint is None and (state.groups or state.reserved):
            raise ValueError(
                f"{self.writer.path} holds samples or reserved attempts but there is no "
                "checkpoint: a missing checkpoint is not a fresh start (remove the journal "
                "to start afresh)"
            )
        kept = reusable(state, reuse, fork=fork, step=step)
        held = {(x.ordinal, x.sibling): x for x in kept.sealed()}
        if checkpoint is not None and reuse != Reuse.nothing():
            # The checkpoint's own sealed siblings (siblings-at-checkpoint
            # mode), whose samples the caller saved with it and filters by
            # age itself: the journal holds the same or newer; it wins.
            for x in checkpoint.sealed:
                held.setdefault((x.ordinal, x.sibling), x)
        torn = 0 if self.writer.torn is None else self.writer.torn.length
        return Recovered(
            state=kept,
            sealed=tuple(sorted(held.values())),
            attempt_floor=floor,
            torn=torn,
            fork=fork,
        )

    def close(self) -> None:
        self.writer.close()


def resumed_sample(prefix: SiblingState | None, rest: TokenPayload) -> TokenPayload:
    """The sample a continued sibling seals: ``prefix``'s tokens (if any)
    then ``rest`` (``frontier_core.journal.continue_sample``)."""
    if prefix is None:
        return rest
    if not isinstance(prefix.payload, TokenPayload):
        raise TypeError("only a token prefix is continued by the rollout loop")
    return continue_sample(prefix.payload, rest)
