"""``Run``: the ledger, the rollout journal, the checkpoints and the attempt
reservations of one training run, behind one object.

Theory of operation. Every correctness step of a durable integration is
taken here, in the order the invariants need (``proofs/SAMPLES.md``,
``proofs/JOURNAL.md``), so that a caller cannot forget one:

* ``open`` recovers on every start. It reads the newest published
  checkpoint of ``root/checkpoints`` (the lineage that follows ancestry,
  ``frontier_adapters.checkpoints``) and opens ``root/journal``. With a
  checkpoint, it recovers the journal against it (its mark at the saved
  position, the reuse policy, the samples it can give back) and resumes the
  collector from it. Without one, the start is fresh only if the journal
  holds no samples (``recover(None, ...)`` refuses one that does:
  ``JournalWithoutCheckpointError``, a lost checkpoint is never a fresh
  start); it then writes checkpoint 0 before it returns, so from then on a
  journal with samples always has a checkpoint to resume from.
* Attempts are reserved before they are dealt: the collector is bound to
  the journal, which reserves blocks durably (``RolloutJournal.cover``).
* A result is journaled only if its lease is current (``seal``,
  ``progress``), checked under the run's lock, and a seal reaches the
  ledger only once journaled: the journal never holds a fenced answer,
  and a result the journal refuses changes nothing.
* A failure is journaled before what replaces it is dealt (``fail``,
  ``failed``, ``evicted``): every sibling it sends back to generation gets
  an empty ``Progress`` of an attempt no older than its next one, which
  voids what the journal held of it (its prefix, its episode, its seal),
  so a resume starts it afresh as the run without the crash would have.
* ``checkpoint`` marks and syncs the journal, writes the checkpoint (the
  collector's state, the mark's position and the caller's parts) and only
  when it is published compacts the journal to the checkpoint's window.
  The sealed siblings it records are exactly those the journal gives back
  (``save_sealed=False``: the journal keeps every sample of the window).
* A resume does not restore the caller's replay buffer: buffered groups
  come back from the journal as ``complete`` groups at ``take`` (under the
  reuse policy: a sample too old for it is generated again), so the buffer
  needs no checkpoint of its own.

What the run cannot do: see that the caller actually trains what it says it
trained, or keeps a group it was handed; report it (``trained``,
``evicted``). One ``Run`` per root and per process, used from one thread.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Concatenate, Final, Literal, ParamSpec, TypeVar

import attrs

from frontier_core import (
    MAX_ATTEMPT,
    Checkpoint,
    CheckpointCorruptError,
    CheckpointMismatchError,
    Effect,
    Lease,
    Ledger,
    LedgerConfig,
    Resumed,
    Status,
)
from frontier_core._errors import shown
from frontier_core.journal import (
    NO_TOKENS,
    Answer,
    CommitPolicy,
    JournalEpisodeError,
    Payload,
    Reuse,
    SiblingState,
    TokenPayload,
    ToolCall,
    Turn,
    TurnState,
    advance,
    call_key,
    check_payload,
)

from .._collector import StreamCollector, StreamSource, Taken, check_inputs
from .._errors import MAX_EPOCH
from .._state import KEY_FORMAT, KEY_VERSION, check_state
from ..checkpoints import (
    CheckpointFencedError,
    CheckpointFileError,
    LoadedCheckpoint,
    PartCodec,
    checkpoint_name,
    claim_epoch,
    epoch_reader,
    published_checkpoints,
    read_checkpoint,
    write_checkpoint,
)
from ..journal import (
    RESERVE,
    SEGMENT_SECONDS,
    JournalFencedError,
    JournalHold,
    JournalShipError,
    JournalWriter,
    JournalWriterError,
    Recovered,
    RolloutJournal,
    Shipper,
)
from ..store import StoreLocationError, is_url, local_path, open_store
from ..store._errors import unavailable

#: The checkpoint part the run keeps its own state in (``frontier.json``).
PART: Final = "frontier"
FORMAT: Final = "frontier_adapters.run"
#: Version 2 records the writer's epoch (``epoch``); version 1 is still read.
VERSION: Final = 2
_KEY_COLLECTOR: Final = "collector"
_KEY_POSITION: Final = "journal_position"
_KEY_LINEAGE: Final = "lineage"
_KEY_EPOCH: Final = "epoch"
_KEYS_V1: Final = frozenset({KEY_FORMAT, KEY_VERSION, _KEY_COLLECTOR, _KEY_POSITION, _KEY_LINEAGE})
_KEYS: Final = _KEYS_V1 | {_KEY_EPOCH}
#: The window a compaction keeps: every ordinal at or above the cut.
_END: Final = 1 << 62
#: How often, and for how long (seconds), an open reads the checkpoint
#: again before its claim when an older life's publish moved ``LATEST``
#: and its pruning removed what the read had reached.
_READS: Final = 16
_READ_SECONDS: Final = 60.0
#: The lineage a run's journal is written under when the caller names none.
DEFAULT_LINEAGE: Final = "run"
#: Numbers the prepared checkpoints of every run of the process, so that one
#: run's ``Prepared`` never passes as another's.
_SERIALS: Final = itertools.count(1)

log = logging.getLogger("frontier_adapters.run")

_T = TypeVar("_T")
_P = ParamSpec("_P")


def _locked(method: Callable[Concatenate[Run, _P], _T]) -> Callable[Concatenate[Run, _P], _T]:
    """Run ``method`` holding the run's lock (its commit thread polls the
    journal under it), then wake that thread: an append may have opened a
    group that must reach the disk within the commit policy's delay."""

    def locked(self: Run, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with self._lock:
            try:
                return method(self, *args, **kwargs)
            finally:
                self._wake.set()

    functools.update_wrapper(locked, method)
    return locked


@attrs.frozen
class Drained:
    """What ``Run.drain`` did before the deadline: the samples that were
    running (``running``; each continues from its journaled progress after
    a resume), the progress records it journaled for them, how long until
    the journal was synced (and shipped), whether all of it is ``shipped``
    off the node (``True`` without a ``remote``: nothing to ship), whether a
    checkpoint was written, the whole
    drain's ``seconds`` and whether it ended ``in_time``."""

    running: int
    progress_records: int
    synced_seconds: float
    shipped: bool
    checkpointed: bool
    seconds: float
    in_time: bool


@attrs.frozen
class Prepared:
    """A checkpoint ``Run.prepare`` made ready at training ``step``:
    ``part``, the run's state (JSON values, the journal's mark durable), to
    store with your own checkpoint; then ``Run.published(prepared)``."""

    step: int
    part: Mapping[str, Any] = attrs.field(eq=False)
    serial: int = attrs.field(repr=False)


class Awaiting:
    """Checkpoints prepared (their journal mark taken) and not yet known
    durable, by id, each with the cut its state holds and when it began:
    one rule for ``Run.published`` and ``LedgerService.compact``."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[int, float]] = {}

    def add(self, key: int, cut: int) -> None:
        self._by_id[key] = (cut, time.monotonic())

    def publish(self, key: object, what: str) -> tuple[int, float]:
        """Checkpoint ``key`` is durable: its cut (compact the journal to
        it) and its duration since ``add``. Every older id is retired with
        it (the journal is compacted past its window). Raises
        ``CheckpointMismatchError`` (``what`` names the call and the key),
        changing nothing, for an id not awaiting: never added, or retired."""
        if type(key) is not int or key not in self._by_id:
            raise CheckpointMismatchError(
                f"{what} is not a checkpoint awaiting publication here (never prepared "
                "here, or published already, itself or by a later one)"
            )
        cut, began = self._by_id[key]
        for older in [k for k in self._by_id if k <= key]:
            del self._by_id[older]
        return cut, time.monotonic() - began


@attrs.define
class _Counters:
    tokens_reused: int = 0
    samples_reused: int = 0
    prefixes_continued: int = 0
    fenced: int = 0
    sealed: int = 0
    checkpoints: int = 0
    checkpoint_seconds: float = math.nan
    journal_sync_seconds: float = math.nan
    turns_reused: int = 0
    turns: int = 0
    calls: int = 0
    calls_pending: int = 0


class Run:
    """One training run's coverage and durability state (see the module
    doc). Build it with ``Run.open``; then report what happens and
    checkpoint:

    * ``take(n)``: up to ``n`` groups to generate, each a ``Taken`` with the
      ``leases`` to generate and the siblings ``reused`` from the journal
      (their samples: ``sample(lease)``); a ``complete`` group (every
      sibling reused) has landed already: add it to your buffer. A lease
      with a durable prefix continues it: ``prefix(lease)``.
    * ``seal(lease, sample)``, ``progress(lease, sample)``,
      ``fail(lease)``: a sibling's whole sample (a continued one with its
      prefix), a running one's sample so far, a failed attempt. A fenced
      lease (stale, late, of an earlier life) is ignored and counted.
    * ``landed``, ``trained``, ``evicted``, ``failed``: whole groups, by ordinal.
    * ``checkpoint(step, json_parts=..., tensor_parts=...)``: durable.
    """

    def __init__(
        self,
        *,
        root: Path,
        checkpoints: str | Path,
        collector: StreamCollector,
        journal: RolloutJournal,
        recovered: Recovered,
        resumed: LoadedCheckpoint | None,
        step: int,
        lineage: str,
        codec: PartCodec | None,
        keep: int,
        logger: Callable[[dict[str, float]], object] | None,
        epoch: int,
        epoch_of: Callable[[], int],
    ) -> None:
        """Use ``Run.open``: a ``Run`` built any other way skipped the
        recovery its invariants rely on."""
        self.root = root
        #: This life's epoch (``claim_epoch``): its checkpoints publish, and
        #: its journal ships, only while no newer life claimed the run.
        self.epoch = epoch
        # Reads the epoch LATEST names now, through the one store the
        # journal's shipper checks it with too.
        self._epoch_of = epoch_of
        #: Where the checkpoints are: ``root/checkpoints``, or under ``remote``.
        self.checkpoints = checkpoints
        self.collector = collector
        self.journal = journal
        self.recovered = recovered
        #: The checkpoint this life resumed from (your parts are in its
        #: ``json_parts`` and ``tensor_parts``); ``None`` on a fresh start.
        self.resumed = resumed
        #: The step of the newest checkpoint this run wrote or resumed.
        self.step = step
        self.lineage = lineage
        self._codec = codec
        self._keep = keep
        self._logger = logger
        self._counters = _Counters()
        #: A fresh start whose first state the caller stores (``open``'s
        #: ``state=None``): ``take`` waits for its first ``published``.
        self._unpublished = False
        #: Opened with ``state=``: the caller stores the run's state where
        #: it resumes from, so ``published`` does not look for it in
        #: ``checkpoints``.
        self._stores_state = False
        #: Checkpoints prepared and not published yet, by serial.
        self._awaiting = Awaiting()
        #: Recovered prefixes offered to this life's first lease of a
        #: sibling, by (ordinal, sibling), and how many tokens of each
        #: running lease the journal holds.
        self._prefixes: dict[tuple[int, int], TokenPayload] = {}
        self._offered: set[int] = set()
        self._recorded: dict[Lease, int] = {}
        #: Running leases whose first (snapshot) progress record is journaled.
        self._extending: set[Lease] = set()
        #: The latest sample ``progress`` was given, per running lease.
        self._latest: dict[Lease, Payload] = {}
        #: Recovered episodes offered to this life's first lease of a
        #: sibling, and each running lease's episode as journaled.
        # One state per sibling in flight: the journal's replay state of its
        # episode (recovered at ``take``, then advanced by every turn and
        # answer appended), so what ``episode`` hands out is what a reopen
        # replays. Dropped when the sibling settles or its group is dealt
        # again (failed, evicted, requeued): a re-dealt group starts afresh.
        self._episodes: dict[tuple[int, int], SiblingState] = {}
        #: When the termination notice ends (``time.monotonic``), once one
        #: came (``notice``, or a signal ``watch`` installed).
        self._deadline: float | None = None
        self._handlers: dict[int, Any] = {}
        self._closed = False
        #: The node's hold on its journal (``JournalWriter.hold``): taken
        #: by ``open`` before its claim, let go at ``close`` after the writer.
        self._hold: JournalHold | None = None
        #: What stopped the commit thread (its poll raised), if anything:
        #: raised by every call from then on (``_open_check``).
        self._commit_failure: BaseException | None = None
        self._commit_said = False
        # The journal commits a group when an append finds it due; a group
        # that no later append comes to (the last seal before a long
        # training step) is committed by this thread instead, within the
        # commit policy's delay, so what a call journaled is durable soon
        # whether or not the caller polls.
        self._lock = threading.RLock()
        self._wake = threading.Event()
        # The thread holds the run weakly: an unclosed run is still collected.
        threading.Thread(
            target=_commits, args=(weakref.ref(self),), name="frontier-run-commits", daemon=True
        ).start()

    # -- open ------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        source: StreamSource,
        config: LedgerConfig,
        *,
        lineage: str | None = None,
        reuse: Reuse | None = None,
        progress_every: int = 256,
        policy: CommitPolicy | None = None,
        reserve: int = RESERVE,
        previous: int = 0,
        keep: int = 2,
        codec: PartCodec | None = None,
        logger: Callable[[dict[str, float]], object] | None = None,
        remote: str | os.PathLike[str] | None = None,
        segment_seconds: float = SEGMENT_SECONDS,
        state: Mapping[str, Any] | Literal["checkpoints"] | None = "checkpoints",
        step: int | None = None,
    ) -> Run:
        """Start the run at ``root``, or resume it: always recovered, never
        a silent fresh start (see the module doc).

        ``source`` yields the prompts (a ``StreamSource``: seekable, so a
        resume rewinds it to the cut); ``config`` is the ledger's
        (``samples`` per group, the failure policy, the dataset's
        ``fingerprint``, which the checkpoints and the journal are bound
        to). ``lineage`` names the run in its journal (default ``"run"``; a
        resume reads it from the checkpoint and refuses another). ``reuse``
        is what a resume takes from the journal (default
        ``Reuse.everything()``); ``progress_every`` the tokens between two
        progress records of a running sample; ``policy`` the journal's group
        commit; ``reserve`` the attempts reserved at a time; ``previous=k``
        resumes the newest checkpoint's ``k``-th ancestor (when the newest
        is damaged); ``keep`` the checkpoints kept on the lineage;
        ``codec`` encodes and decodes your non-JSON parts (the torch
        binding's ``TENSOR_PARTS`` for tensors); ``logger`` is called with
        ``metrics()`` after every checkpoint (TRL's ``trainer.log``, a
        ``wandb.log``), which also go to the ``frontier_adapters.run``
        logger at INFO.

        ``remote`` (a URL, ``s3://bucket/prefix``, ``gs://...``,
        ``file://...``, or a path on a shared filesystem) is where the run
        survives the loss of its node: the checkpoints are written there
        (``remote/checkpoints``), and the journal, kept locally at
        ``root/journal`` with its group commit, is shipped there
        (``remote/journal``) in segments rolled every ``segment_seconds``,
        and before every checkpoint and every attempt reservation completes.
        A life on a new node (no local journal) restores the journal from
        the shipped segments (``run.journal.restored`` says which copy was
        used): only what the lost node had not shipped is generated again.

        An open that succeeds fences every older life of the run: it
        claims the run's next epoch (``run.epoch``;
        ``frontier_adapters.checkpoints.claim_epoch``) before it uses the
        checkpoint and the journal it continues, and from then on an older
        life still running (a node that comes back after a preemption or a
        partition) publishes no checkpoint, and what it ships after its
        shipper's next check of the epoch is never restored; its calls
        raise ``CheckpointFencedError`` (its journal's
        ``JournalFencedError`` is one too), and it should exit. An open
        refused for the node's journal held by a live writer
        (``JournalFileError``) or for the checkpoint's refusals (another
        dataset's fingerprint, another lineage, damage) fences nothing:
        those are checked first, under the node's hold on its journal
        (``JournalWriter.hold``: taken before the claim, let go at
        ``close``), so a second open racing on this node is refused
        (``JournalFileError``) before it claims; the checkpoint is read
        again after the claim only when an older life published in
        between. A refusal after the claim can still fence the live life.
        A read before the claim that fails (``CheckpointFileError``) while
        ``LATEST`` moved (an older life's publish, its pruning removing
        what the read had reached) is repeated, a bounded number of times.

        Raises the checkpoint reader's ``CheckpointError``s (a damaged,
        foreign or mismatched checkpoint: nothing is written), the journal's
        ``JournalError``s (another run's journal, one that holds records
        but ends before its checkpoint's mark, a corrupt frame; a journal
        lost whole is not refused: ``recovered.lost``) and
        ``JournalWithoutCheckpointError`` (samples but no checkpoint).

        ``state`` is where the run's state comes from: ``"checkpoints"``
        (the default) reads it from the checkpoints as above. A caller that
        stores the run's state itself (``prepare``, then ``published`` once
        its write is durable; a Ray actor's driver) gives it here instead:
        ``state=part`` (a ``Prepared.part`` it stored, with ``step=`` its
        ``Prepared.step``) resumes from that part, checked as a
        checkpoint's part is (``CheckpointError``s), and ``state=None`` is
        a fresh start that writes no checkpoint 0: ``take`` refuses
        (``RuntimeError``) until the caller's first ``published``, so that a
        journal with samples always has a stored state to resume from.
        Either way the open claims the run's epoch as above (under
        ``root/checkpoints`` or ``remote``), which fences an older life's
        shipping; the caller's own store is the caller's to fence."""
        check_inputs(source, config)
        if is_url(root) or (isinstance(root, str) and root == ""):
            # A URL as a path is a directory named "s3:" in the working
            # directory: the run would live on the node, not in the bucket.
            raise StoreLocationError(
                str(root)[:200],
                None,
                "root is the node's own directory, a path (a bucket or a shared "
                "filesystem goes in remote=)",
            )
        root = Path(root)
        stored = state != "checkpoints"
        if stored and state is not None and (type(step) is not int or step < 0):
            raise ValueError(
                f"state= needs step= (its Prepared.step, an int >= 0), got {step!r:.40}"
            )
        if step is not None and not (stored and state is not None):
            raise ValueError("step= goes only with state=part (the step that part was prepared at)")
        if lineage is not None and (type(lineage) is not str or not lineage):
            raise ValueError(f"lineage must be a non-empty str, got {lineage!r:.60}")
        if type(keep) is not int or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep!r:.40}")
        reuse = Reuse.everything() if reuse is None else reuse
        fingerprint = config.fingerprint
        if not fingerprint:
            raise ValueError(
                "a run binds its checkpoints and journal to the dataset: give "
                "LedgerConfig(fingerprint=...)"
            )
        store = None if remote is None else open_store(remote)
        _apart(root, remote)
        _make_root(root)
        checkpoints = root / "checkpoints" if remote is None else _under(remote, "checkpoints")
        if isinstance(checkpoints, Path) and checkpoints.is_symlink():
            # The run's own names are never followed (its journal's never
            # is): a planted link would read, and then write, another
            # run's checkpoints.
            raise CheckpointFileError(
                checkpoints,
                "a symlink: a run's checkpoints are a directory of its own, never followed",
            )

        def resume_from() -> tuple[LoadedCheckpoint | None, Mapping[str, Any] | None, str | None]:
            loaded = None
            if stored:
                saved = None if state is None else _read_part(state)
            else:
                loaded = read_checkpoint(
                    checkpoints,
                    fingerprint=fingerprint,
                    require=(PART,),
                    previous=previous,
                    codec=codec,
                )
                saved = None if loaded is None else _read_part(loaded.json_parts[PART])
            if saved is None:
                return loaded, saved, lineage
            if lineage is not None and lineage != saved[_KEY_LINEAGE]:
                raise CheckpointCorruptError(
                    f"the checkpoint is of lineage {shown(saved[_KEY_LINEAGE])}, "
                    f"not {lineage!r:.60}: another run's checkpoint"
                )
            # What the collector's resume would refuse (another source's
            # stream, a shorter one) is refused here, before the claim.
            collector.resumable(saved[_KEY_COLLECTOR])
            return loaded, saved, saved[_KEY_LINEAGE]

        # What refuses an open is checked before the claim, so that a
        # refused open (the journal held by the live run of this node,
        # another dataset's checkpoint, a damaged one) fences nothing. The
        # hold is kept from here until this life's writer is closed: a
        # second open on this node is refused by it before its claim, never
        # between this claim and the writer's own lock, journal file or not.
        collector = StreamCollector(source, config, reserve=reserve)
        hold = JournalWriter.hold(root / "journal")
        try:
            deadline = time.monotonic() + _READ_SECONDS
            for tries in range(1, _READS + 1):
                before = published_checkpoints(checkpoints)
                try:
                    loaded, saved, resumed = resume_from()
                    break
                except CheckpointFileError:
                    # An older life (not fenced before this claim) may have
                    # pruned what the read had reached, after its publish
                    # moved LATEST: read the new newest one. The same
                    # LATEST means the damage is real (or no retry left).
                    if (
                        tries == _READS
                        or time.monotonic() > deadline
                        or published_checkpoints(checkpoints) == before
                    ):
                        raise
            # From here on every older life of the run (a node that comes
            # back) is fenced.
            epoch = claim_epoch(checkpoints)
            # An older life may have published between the read and the
            # claim (never after it): then what this life continues is
            # read again.
            published = [p.name for p in published_checkpoints(checkpoints)]
            now = published[previous] if previous < len(published) else None
            if not stored and now != (None if loaded is None else loaded.path.name):
                loaded, saved, resumed = resume_from()
            lineage = resumed
            lineage = DEFAULT_LINEAGE if lineage is None else lineage
            epoch_of = epoch_reader(checkpoints)
            journal = RolloutJournal(
                root / "journal",
                fingerprint=fingerprint,
                lineage=lineage,
                policy=policy,
                progress_every=progress_every,
                ship_to=None
                if store is None
                else Shipper(
                    store,
                    segment_seconds=segment_seconds,
                    epoch=epoch,
                    fence=epoch_of,
                ),
            )
        except BaseException:
            hold.close()
            raise
        try:
            position = None if saved is None else saved[_KEY_POSITION]
            written = None if saved is None else saved.get(_KEY_EPOCH)
            if saved is None:
                step = 0
            elif loaded is not None:
                step = loaded.step
            else:
                assert step is not None  # checked above, with state=
            recovered, _ = recover(
                collector,
                journal,
                None if saved is None else saved[_KEY_COLLECTOR],
                position=position,
                checkpoint_id=step,
                step=step,
                reuse=reuse,
                reserve=reserve,
                # The lives since the checkpoint's writer (this one
                # included): what a loss of the journal must fence. A
                # version 1 checkpoint did not record its epoch: one.
                lives=None if written is None else max(epoch - written, 1),
            )
            collector.journal = journal
            run = cls(
                root=root,
                checkpoints=checkpoints,
                collector=collector,
                journal=journal,
                recovered=recovered,
                resumed=loaded,
                step=step,
                lineage=lineage,
                codec=codec,
                keep=keep,
                logger=logger,
                epoch=epoch,
                epoch_of=epoch_of,
            )
            run._hold = hold
            run._stores_state = stored
            if saved is None and stored:
                # The caller stores the first state: nothing is dealt before.
                run._unpublished = True
            elif saved is None:
                # A first checkpoint before anything is generated.
                run.checkpoint(0)
        except BaseException:
            try:
                journal.close()
            finally:
                hold.close()
            raise
        return run

    # -- the groups --------------------------------------------------------------

    @property
    def ledger(self) -> Ledger:
        """The current ledger (an immutable value)."""
        return self.collector.ledger

    @property
    def drained(self) -> bool:
        """Every prompt of the stream is trained or dropped on record."""
        return self.collector.drained

    @_locked
    def take(self, n: int) -> list[Taken]:
        """Up to ``n`` groups to generate, retried ones first (see the class
        doc). A ``complete`` group has landed in the ledger: add it to your
        buffer before the next ``checkpoint``. After a termination notice
        (``preempted``) it hands out nothing."""
        self._open_check()
        if self._unpublished and self._counters.checkpoints == 0:
            raise RuntimeError(
                "take before the first checkpoint: store prepare(0)'s part durably and call "
                "published first, so that a journal with samples always has a state to "
                "resume from"
            )
        if self._deadline is not None:
            return []  # preempted: dispatch nothing more
        taken = self.collector.take_samples(n)
        complete = [t.ordinal for t in taken if t.complete]
        if complete:
            self.collector.land_complete(complete)
        for t in taken:
            for lease in t.reused:
                self._counters.samples_reused += 1
                self._counters.tokens_reused += _tokens(self.recovered.sample(lease))
            if t.ordinal in self._offered:
                continue
            self._offered.add(t.ordinal)
            for lease in t.leases:
                state = self.recovered.prefix(lease.ordinal, lease.sibling)
                if state is not None and state.turns:
                    self._episodes[(lease.ordinal, lease.sibling)] = state
                    self._counters.turns_reused += state.answered
                    self._counters.calls_pending += state.pending is not None
                elif state is not None and isinstance(state.payload, TokenPayload):
                    self._prefixes[(lease.ordinal, lease.sibling)] = state.payload
                    self._recorded[lease] = len(state.payload)
                    self._counters.prefixes_continued += 1
                    self._counters.tokens_reused += len(state.payload)
        return taken

    @_locked
    def sample(self, lease: Lease) -> Payload:
        """The sample of a sibling ``take`` reused (``Taken.reused``)."""
        return self.recovered.sample(lease)

    @_locked
    def prefix(self, lease: Lease) -> TokenPayload | None:
        """The durable tokens ``lease`` continues (generate only what comes
        after them, and report samples that start with them), or ``None``."""
        if not self.collector.current(lease):
            return None
        return self._prefixes.get((lease.ordinal, lease.sibling))

    # -- episodes (agentic rollouts) --------------------------------------------------

    @property
    def namespace(self) -> str:
        """The run's namespace of idempotency keys: its lineage and its
        journal's id, which every life of the run shares (a compaction and
        a restore from the shipped copy keep it) and no other run has."""
        # At most 64 bytes of the lineage (a key holds at most MAX_NAMESPACE).
        lineage = self.lineage.replace("/", "_").encode()[:64].decode(errors="ignore")
        return f"{lineage}.{self.journal.writer.header.journal_id.hex()}"

    def call_key(self, lease: Lease, turn: int) -> str:
        """The idempotency key of the call ``lease`` makes at turn ``turn``
        (``frontier_core.journal.call_key`` in this run's ``namespace``). A
        continued episode re-issues a pending call under the key stored
        with it (``episode(lease).pending.key``), not under a new one."""
        return call_key(self.namespace, lease.ordinal, lease.sibling, lease.attempt, turn)

    @_locked
    def episode(self, lease: Lease) -> SiblingState | None:
        """``lease``'s episode so far: its durable turns (each with its
        call, answer and environment state) and the call left ``pending``
        by a crash, if any; ``None`` for an episode not begun. A lease that
        continues an earlier life's episode gets that episode here until
        it journals its first turn or answer. A sibling ``take`` reused
        (``Taken.reused``) gets its sealed episode: the transcript (each
        turn's tokens, call, answer and state) of the sample ``sample``
        gives (``None`` if that sample is no episode)."""
        if self.collector.current(lease):
            return self._episodes.get((lease.ordinal, lease.sibling))
        try:
            return self.recovered.episode(lease)
        except KeyError:
            return None

    @_locked
    def turn(
        self, lease: Lease, turn: int, tokens: TokenPayload, call: ToolCall | None = None
    ) -> bool:
        """Journal turn ``turn`` of ``lease``'s episode: the policy's
        ``tokens`` and the ``call`` they make (``None``: the last turn).
        A turn with a call is durable when this returns (write-ahead): call
        the tool after, with ``call.key``. Returns whether ``lease`` is
        current (``False``: fenced, nothing journaled). Raises
        ``JournalEpisodeError`` for a turn out of order or a call whose
        key is not ``call_key(lease, turn)`` (nothing journaled): the
        journal's own replay rule (``advance``) decides the order.
        If making it durable failed (``JournalError``: a sync or a ship),
        the turn is journaled but not known durable: call this again with
        the same turn and call, which journals nothing more and waits for
        durability again (do not call the tool before it returns)."""
        self._open_check()
        if not self.collector.current(lease):
            self._counters.fenced += 1
            return False
        if call is not None and call.key != self.call_key(lease, turn):
            # Keys are the run's: two calls sharing one would be answered
            # from each other's record by a tool that honours the contract.
            raise JournalEpisodeError(
                lease.ordinal,
                lease.sibling,
                f"turn {turn}'s call has key {shown(call.key)}, not the run's "
                f"call_key(lease, {turn}) (distinct calls never share a key)",
            )
        key = (lease.ordinal, lease.sibling)
        current = self._episodes.get(key)
        if (
            current is not None
            and current.attempt == lease.attempt
            and len(current.turns) == turn + 1
            and current.turns[turn] == TurnState(tokens, call)
        ):
            # The same turn again (a retry after a failed sync or ship): it
            # is journaled already; only its durability is owed.
            if call is not None:
                self.journal.durable()
            return True
        record = Turn(lease.ordinal, lease.sibling, lease.attempt, turn, tokens, call)
        state = advance(current, record)
        assert state is not None  # a current lease's records are never fenced
        before = self.journal.writer.position
        try:
            self.journal.turn(lease, turn, tokens, call)
        finally:
            # Appended (even if its durability then failed): the state is
            # the journal's, so a retry is recognised, not journaled twice.
            if self.journal.writer.position != before:
                self._episodes[key] = state
                self._counters.turns += 1
                self._counters.calls += call is not None
        return True

    @_locked
    def answer(
        self, lease: Lease, turn: int, key: str, answer: Payload, state: Payload | None = None
    ) -> bool:
        """Journal the tool's ``answer`` to turn ``turn``'s call (key
        ``key``) and the environment's ``state`` after it. Returns whether
        ``lease`` is current: an answer of a fenced attempt is ignored and
        counted, never journaled, so it is never trained. Raises
        ``JournalEpisodeError`` for an answer for an unknown key or turn.
        The same answer again (after an error) journals nothing more."""
        self._open_check()
        if not self.collector.current(lease):
            self._counters.fenced += 1
            return False
        at = (lease.ordinal, lease.sibling)
        current = self._episodes.get(at)
        if (
            current is not None
            and current.attempt == lease.attempt
            and 0 <= turn < len(current.turns)
        ):
            done = current.turns[turn]
            if done.call is not None and (done.call.key, done.answer, done.state) == (
                key,
                answer,
                state,
            ):
                return True
        record = Answer(lease.ordinal, lease.sibling, lease.attempt, turn, key, answer, state)
        after = advance(current, record)
        assert after is not None
        before = self.journal.writer.position
        try:
            self.journal.answer(lease, turn, key, answer, state)
        finally:
            if self.journal.writer.position != before:
                self._episodes[at] = after
        return True

    # -- what happened -----------------------------------------------------------

    @_locked
    def seal(self, lease: Lease, sample: Payload) -> Effect:
        """``lease`` finished ``sample`` (whole: a continued sample starts
        with its prefix). Accepted (``lease in effect.sealed``), it is
        journaled; ``effect.landed`` are the groups now complete: add them
        to your buffer. Fenced (``effect.fenced``), it is ignored."""
        self._open_check()
        _check_result(lease, sample, "seal")
        if self.collector.current(lease):
            # Journaled before the ledger moves: a record the journal
            # refuses (an oversized frame, a failed writer) leaves the
            # sibling running, so the caller may seal it again. Current
            # under the run's lock, the ledger then accepts it.
            self.journal.sealed(lease, sample)
            self._counters.sealed += 1
        effect = self.collector.sealed([lease])
        self._settled(lease, effect)
        return effect

    @_locked
    def progress(self, lease: Lease, sample: Payload) -> bool:
        """``lease``'s sample so far (whole, as for ``seal``). Journaled when
        due: a token sample every ``progress_every`` new tokens (a snapshot,
        then only the tokens after it), any other payload every call. The
        latest one is kept in memory until the lease settles, for ``drain``.
        Returns whether ``lease`` is current (``False``: fenced, ignored)."""
        self._open_check()
        _check_result(lease, sample, "progress")
        if not self.collector.current(lease):
            self._counters.fenced += 1
            return False
        self._latest[lease] = sample
        self._journal_progress(lease, sample, force=False)
        return True

    def _journal_progress(self, lease: Lease, sample: Payload, *, force: bool) -> bool:
        """Journal ``sample`` as ``lease``'s progress if it is due (or, with
        ``force``, if it holds anything not journaled yet). Returns whether
        a record was appended."""
        if not isinstance(sample, TokenPayload):
            if force:
                return False  # journaled at its ``progress`` call already
            self.journal.progress(lease, sample)
            return True
        start = self._recorded.get(lease, 0)
        due = len(sample) > start if force else self.journal.due(start, len(sample))
        if not due:
            return False
        if lease not in self._extending:
            # The attempt's first record: a whole snapshot.
            self.journal.progress(lease, sample)
            self._extending.add(lease)
        else:
            self.journal.extend(lease, start, _tail(sample, start))
        self._recorded[lease] = len(sample)
        return True

    @_locked
    def fail(self, lease: Lease, *, lost: bool = False) -> Effect:
        """``lease``'s attempt failed. Its sibling is started again at once
        under a new attempt (``effect.leases``: generate them), or the
        group fails whole (``effect.requeued``, ``dropped``) by the
        ledger's policy. Fenced, it is ignored.

        A failure starts the sibling afresh (what the journal held of it is
        voided). With ``lost=True`` the attempt was lost, not failed: its
        worker died (a fleet's worker process, a node) while its tokens
        were fine, so the new attempt continues the tokens the journal holds
        of it (``prefix``), as a resume after a crash of the whole run
        would; it still costs the sibling an attempt. Only a token sample
        is carried over; an episode, or a sibling of a group that fails
        whole, starts afresh."""
        self._open_check()
        key = (lease.ordinal, lease.sibling)
        carried = self._journaled(lease) if lost and key not in self._episodes else None
        effect = self.collector.failed_samples([lease])
        self._settled(lease, effect)
        self._forget((*effect.requeued, *effect.dropped))
        if carried is None or key not in effect.restart:
            carried = None
            self._void(effect.restart, self._groups(effect))
        else:
            # Not voided: a crash from here on continues the lost attempt's
            # record too, as this life's new attempt does.
            self._void([x for x in effect.restart if x != key], self._groups(effect))
        leases: tuple[Lease, ...] = ()
        if effect.restart:
            leases = self.collector.restart(effect.restart)
        if carried is not None:
            for new in leases:
                if (new.ordinal, new.sibling) == key:
                    self._prefixes[key] = carried
                    self._recorded[new] = len(carried)
                    self._counters.prefixes_continued += 1
                    self._counters.tokens_reused += len(carried)
        return attrs.evolve(effect, leases=leases)

    def _journaled(self, lease: Lease) -> TokenPayload | None:
        """The tokens the journal holds of running ``lease`` (its progress
        records, or the prefix it continues), or ``None``."""
        held = self._recorded.get(lease, 0)
        if held == 0 or not self.collector.current(lease):
            return None
        latest = self._latest.get(lease)
        if isinstance(latest, TokenPayload) and len(latest) >= held:
            return TokenPayload.of(
                latest.tokens()[:held], latest.logprobs()[:held], latest.versions()[:held]
            )
        prefix = self._prefixes.get((lease.ordinal, lease.sibling))
        return prefix if prefix is not None and len(prefix) == held else None

    @_locked
    def landed(self, ordinals: Iterable[int]) -> None:
        """These whole groups landed in your buffer, generated by your own
        code with nothing journaled (a trainer that generates inside its
        step, TRL's ``GRPOTrainer``): a crash before they are trained and
        checkpointed generates them again."""
        self._open_check()
        self.collector.landed(ordinals)

    @_locked
    def trained(self, ordinals: Iterable[int]) -> None:
        """These groups were trained on (whole groups, by ordinal)."""
        self._open_check()
        self.collector.trained(ordinals)

    @_locked
    def evicted(self, ordinals: Iterable[int]) -> Effect:
        """Your buffer dropped these groups unused (too stale): they are
        generated again."""
        self._open_check()
        ordinals = list(ordinals)
        effect = self.collector.evicted(ordinals)
        self._forget((*ordinals, *effect.requeued, *effect.dropped))
        self._void((), {*ordinals, *self._groups(effect)})
        return effect

    @_locked
    def failed(self, ordinals: Iterable[int]) -> Effect:
        """These whole groups failed (the ledger's policy retries or drops
        them)."""
        self._open_check()
        ordinals = list(ordinals)
        effect = self.collector.failed(ordinals)
        self._forget((*ordinals, *effect.requeued, *effect.dropped))
        self._void((), {*ordinals, *self._groups(effect)})
        return effect

    @staticmethod
    def _groups(effect: Effect) -> set[int]:
        """The groups a failure sent back whole (to generation, or dropped)."""
        return {*effect.requeued, *effect.unstamped, *effect.dropped}

    def _void(self, siblings: Iterable[tuple[int, int]], groups: Iterable[int]) -> None:
        """Journal that these siblings, and every sibling of these groups,
        start afresh: an empty ``Progress`` (no tokens, no turns) of an
        attempt at or below any the ledger deals from now on and above any
        it dealt, so replay supersedes whatever the journal held of them (a
        prefix, an episode, a seal), and a later record of the attempt that
        generates them again continues it as it would continue nothing. Run
        before that attempt is dealt: a crash after the failure then never
        continues (or trains) an attempt the run gave up on. Not synced:
        whatever the next attempt makes durable comes after it in the
        journal, and a crash before it is durable is a crash before the
        failure. Cost: one record per sibling sent back."""
        n = self.collector.config.samples
        voided = [*siblings, *((o, s) for o in sorted(set(groups)) for s in range(n))]
        if not voided:
            return
        floor = self.journal.attempt_floor or 0
        # 2**32 attempts dealt: nothing is dealt again, and the last one
        # stands for "afresh" (the record must fit the journal's u32).
        attempt = min(max(self.ledger.next_attempt, floor), MAX_ATTEMPT)
        for o, s in voided:
            self.journal.progress(Lease(o, s, attempt), NO_TOKENS)

    def _forget(self, ordinals: Iterable[int]) -> None:
        """Drop the episodes of these groups' siblings: a group dealt again
        (or dropped) starts its episodes afresh under its new attempts (a
        turn 0 of a newer attempt restarts an episode in the journal too)."""
        gone = set(ordinals)
        if gone and self._episodes:
            for key in [k for k in self._episodes if k[0] in gone]:
                del self._episodes[key]

    def _settled(self, lease: Lease, effect: Effect) -> None:
        self._counters.fenced += len(effect.fenced)
        if lease not in effect.fenced:
            self._latest.pop(lease, None)
            self._recorded.pop(lease, None)
            self._extending.discard(lease)
            self._prefixes.pop((lease.ordinal, lease.sibling), None)
            self._episodes.pop((lease.ordinal, lease.sibling), None)

    # -- checkpoints -------------------------------------------------------------

    def check_epoch(self) -> None:
        """Raise ``CheckpointFencedError`` naming both epochs when a newer
        life claimed the run (its pointer, ``LATEST``, names a newer epoch
        than ``epoch``): what a caller checks before it writes state of its
        own outside the run's checkpoint (a trainer's ``output_dir``), so
        that a fenced life stops before, not after, that write. A check,
        not a lock: a claim right after it is caught by the next
        ``checkpoint``. Raises the store's errors and
        ``CheckpointFileError`` for a garbled ``LATEST``."""
        current = self._epoch_of()
        if current != self.epoch:
            raise CheckpointFencedError(
                f"{str(self.checkpoints).rstrip('/')}/LATEST", self.epoch, current
            )

    @_locked
    def checkpoint(
        self,
        step: int,
        *,
        json_parts: Mapping[str, Any] | None = None,
        tensor_parts: Mapping[str, Any] | None = None,
    ) -> Path:
        """Make the run durable at training step ``step``, with your parts
        (``json_parts``: JSON values; ``tensor_parts``: what the run's
        ``codec`` encodes). In order: the journal's mark, synced
        (``prepare``); the checkpoint, published atomically
        (``frontier_adapters.checkpoints``); the journal compacted to the
        checkpoint's window (``published``). A crash anywhere leaves a run
        that resumes. Returns the checkpoint's directory."""
        self._open_check()
        json_parts = dict(json_parts or {})
        if PART in json_parts:
            raise ValueError(f"the part name {PART!r} is the run's own")
        prepared = self.prepare(step)
        json_parts[PART] = prepared.part
        path = write_checkpoint(
            self.checkpoints,
            step,
            fingerprint=self.collector.config.fingerprint,
            json_parts=json_parts,
            tensor_parts=tensor_parts,
            codec=self._codec,
            keep=self._keep,
            epoch=self.epoch,
        )
        self._publish(prepared)
        return path

    @_locked
    def prepare(self, step: int) -> Prepared:
        """The first half of ``checkpoint``, for a caller that stores the
        run's state itself: the journal's mark at ``step``, synced (and
        shipped), and the run's state from that moment (``Prepared.part``,
        JSON values). Store the part durably (call ``check_epoch`` first,
        as for any write of your own), then call ``published``; until
        then the journal keeps everything the part refers to. ``open``
        resumes only from ``checkpoints`` (a checkpoint there holding the
        part as ``PART``, written with ``epoch=run.epoch``): a part stored
        anywhere else is not what the next life resumes from, and after
        ``published`` compacts, that life would generate and train again
        what the part covers."""
        self._open_check()
        if type(step) is not int or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r:.40}")
        began = time.perf_counter()
        serial = next(_SERIALS)
        self._awaiting.add(serial, self.collector.ledger.cut)
        position = self.journal.mark(step)
        self._counters.journal_sync_seconds = time.perf_counter() - began
        state = self.collector.checkpoint_state(save_buffer=True, save_sealed=False)
        part = {
            KEY_FORMAT: FORMAT,
            KEY_VERSION: VERSION,
            _KEY_COLLECTOR: state,
            _KEY_POSITION: position,
            _KEY_LINEAGE: self.lineage,
            _KEY_EPOCH: self.epoch,
        }
        return Prepared(step=step, part=part, serial=serial)

    @_locked
    def published(self, prepared: Prepared) -> None:
        """The checkpoint holding ``prepared.part`` is durable: compact the
        journal to its window (the ordinals at or above the cut it was
        prepared at) and count it. Raises ``CheckpointMismatchError``,
        changing nothing, for a ``Prepared`` this run did not hand out
        since its last ``published`` (another run's or life's, or one
        published already, itself or by a later one), and for one whose
        step no checkpoint on ``checkpoints``' published lineage has: a
        part stored anywhere else is not what the next ``open`` resumes
        from, and once the journal is compacted to it, that life would
        generate and train again what the part covers. The check reads the
        lineage (``LATEST``: one small read), not the part; a run opened
        with ``state=`` is not checked (its caller stores the part where
        its next ``open(state=)`` reads it)."""
        self._open_check()
        if isinstance(prepared, Prepared) and not self._stores_state:
            name = checkpoint_name(prepared.step)
            listed = [p.name for p in published_checkpoints(self.checkpoints)]
            if not any(n == name or n.startswith(name + "-") for n in listed):
                raise CheckpointMismatchError(
                    f"published: no checkpoint of step {prepared.step} is on the published "
                    f"lineage of {str(self.checkpoints)[:200]} ({', '.join(listed[:4]) or 'none'})"
                    ": the next Run.open resumes only from there; write the part there first "
                    "(write_checkpoint(run.checkpoints, step, json_parts={'frontier': "
                    "prepared.part}, epoch=run.epoch))"
                )
        self._publish(prepared)

    def _publish(self, prepared: Prepared) -> None:
        serial = prepared.serial if isinstance(prepared, Prepared) else None
        cut, seconds = self._awaiting.publish(serial, f"published: {shown(prepared)}")
        self.journal.compact(range(cut, _END))
        self.step = prepared.step
        c = self._counters
        c.checkpoints += 1
        c.checkpoint_seconds = seconds
        metrics = self.metrics()
        log.info("checkpoint %d: %s", prepared.step, metrics)
        if self._logger is not None:
            self._logger({f"frontier/{k}": v for k, v in metrics.items()})

    @_locked
    def poll(self) -> float | None:
        """Commit the journal's due group; the seconds until the next is
        due (call it from your loop's timer when nothing else reports)."""
        self._open_check()
        return self.journal.poll()

    @_locked
    def sync(self) -> int:
        """Commit what the journal holds open and wait until it is durable;
        the journal's durable position. Use this, not ``run.journal``'s
        writer: the run's commit thread writes the journal under the run's
        lock, and a writer used from two threads at once can write one
        group twice (a journal later read as corrupt)."""
        self._open_check()
        return self.journal.writer.sync()

    # -- preemption -------------------------------------------------------------

    def notice(self, seconds: float) -> None:
        """A termination notice: the process will be stopped in ``seconds``
        (a spot instance's reclaim notice, a scheduler's grace period).
        From now on ``take`` hands out nothing; call ``drain`` from your
        loop. A later notice can only bring the deadline closer."""
        _check_seconds(seconds)
        deadline = time.monotonic() + float(seconds)
        if self._deadline is None or deadline < self._deadline:
            self._deadline = deadline

    def watch(self, *signals: int, seconds: float = 30.0) -> None:
        """Take ``signals`` (default ``SIGTERM``) as a termination notice of
        ``seconds``: the handler only records it (``notice``), so nothing is
        interrupted half-way; your loop sees ``preempted`` and calls
        ``drain``. The previous handlers come back at ``close``. From the
        main thread only (Python's rule for signal handlers)."""
        _check_seconds(seconds)
        for sig in signals or (signal.SIGTERM,):
            try:
                previous = signal.signal(sig, lambda _s, _f: self.notice(seconds))
            except (OSError, ValueError, TypeError) as exc:
                # SIGKILL and SIGSTOP cannot be caught; a number that is
                # no signal names none.
                raise ValueError(f"watch: cannot take {sig!r:.40} as a notice: {exc}") from None
            self._handlers.setdefault(sig, previous)

    @property
    def preempted(self) -> bool:
        """Whether a termination notice came (``notice``, ``watch``)."""
        return self._deadline is not None

    @_locked
    def drain(
        self,
        *,
        step: int | None = None,
        json_parts: Mapping[str, Any] | None = None,
        tensor_parts: Mapping[str, Any] | None = None,
    ) -> Drained:
        """Use what is left of the notice (no notice: take the time it
        needs), then close the run. In order, so that what matters most is
        durable first: dispatch stops (``take`` hands out nothing); every
        running sample's latest progress that the journal lacks is
        journaled and the journal synced (a resume continues each from
        there); then, if the time left allows it (at least twice the last
        checkpoint's duration), a checkpoint at ``step`` (default: the
        run's) with your parts. Returns what was done in time
        (``Drained``)."""
        self._open_check()
        began = time.monotonic()
        if self._deadline is None:
            self._deadline = math.inf
        records = running = 0
        for lease, sample in list(self._latest.items()):
            if self.collector.current(lease):
                running += 1
                records += self._journal_progress(lease, sample, force=True)
        shipped = drain_journal(self.journal, self._deadline)
        synced = time.monotonic()
        checkpointed = False
        if shipped and checkpoint_fits(self._deadline, self._counters.checkpoint_seconds):
            at = self.step if step is None else step
            self.checkpoint(at, json_parts=json_parts, tensor_parts=tensor_parts)
            checkpointed = True
        try:
            # Unshipped, the store had its time: the close only stops the
            # uploads (what is left stays in the local file).
            left = min(self._deadline - time.monotonic(), self.journal.ship_timeout)
            self._close(ship_timeout=left if shipped else 0.0)
        except JournalShipError:
            shipped = False
        ended = time.monotonic()
        return Drained(
            running=running,
            progress_records=records,
            synced_seconds=synced - began,
            shipped=shipped,
            checkpointed=checkpointed,
            seconds=ended - began,
            in_time=ended <= self._deadline,
        )

    # -- observing ---------------------------------------------------------------

    @_locked
    def metrics(self) -> dict[str, float]:
        """Live counters, as numbers: ``tokens_reused`` (tokens this life
        took from the journal instead of generating: reused samples and
        continued prefixes), ``samples_reused``, ``prefixes_continued``,
        ``fenced`` (answers ignored: stale, late, of an earlier life),
        ``sealed``, ``checkpoints``, ``checkpoint_seconds`` and
        ``journal_sync_seconds`` (the last checkpoint's, and of it the
        journal's fsync), ``journal_unsynced`` (records appended but not yet
        durable), ``journal_unshipped`` (records not yet off the node, with
        a ``remote``; 0 without), ``cut`` (every ordinal below it is trained or dropped),
        ``window`` (the live ordinals: pending, generating or buffered),
        ``in_flight`` (groups generating), ``attempts_reserved``, ``step``;
        for episodes, ``turns`` and ``calls`` journaled by this life,
        ``turns_reused`` (answered turns taken from the journal instead of
        generated again) and ``calls_pending`` (calls a crash left without
        a durable answer, found at this life's start); ``journal_lost_records``
        (records the checkpoint counted that the journal had lost with its
        node at this life's start: ``recovered.lost``; 0 when none);
        ``commit_failed`` (1 once the run's commit thread stopped on an
        error, which every call of the run then raises; 0 before)."""
        c = self._counters
        ledger = self.collector.ledger
        writer, shipper = self.journal.writer, self.journal.shipper
        return {
            "tokens_reused": float(c.tokens_reused),
            "samples_reused": float(c.samples_reused),
            "prefixes_continued": float(c.prefixes_continued),
            "fenced": float(c.fenced),
            "sealed": float(c.sealed),
            "checkpoints": float(c.checkpoints),
            "checkpoint_seconds": c.checkpoint_seconds,
            "journal_sync_seconds": c.journal_sync_seconds,
            "journal_unsynced": float(writer.position - writer.durable),
            "journal_unshipped": float(
                0 if shipper is None else max(writer.position - shipper.shipped, 0)
            ),
            "cut": float(ledger.cut),
            "window": float(ledger.in_flight()),
            "in_flight": float(ledger.count(Status.OUTSTANDING)),
            "attempts_reserved": float(self.journal.reserved),
            "step": float(self.step),
            "turns": float(c.turns),
            "calls": float(c.calls),
            "turns_reused": float(c.turns_reused),
            "calls_pending": float(c.calls_pending),
            "journal_lost_records": float(
                0 if self.recovered.lost is None else self.recovered.lost.records
            ),
            "commit_failed": float(self._commit_failure is not None),
        }

    # -- life ------------------------------------------------------------------

    @_locked
    def close(self) -> None:
        """Sync and close the journal (what was not checkpointed is kept in
        it for the next life) and give back the signal handlers ``watch``
        replaced. Raises what stopped the commit thread if no call did."""
        closing = not self._closed
        self._close(ship_timeout=None)
        if closing and not self._commit_said:
            self._commit_check()

    def _close(self, *, ship_timeout: float | None) -> None:
        if not self._closed:
            self._closed = True
            self._wake.set()
            for sig, previous in self._handlers.items():
                signal.signal(sig, previous)
            self._handlers.clear()
            try:
                self.journal.close(ship_timeout=ship_timeout)
            finally:
                # After the writer: the node's next open waits for neither.
                if self._hold is not None:
                    self._hold.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_check(self) -> None:
        if self._closed:
            raise RuntimeError("this run is closed: Run.open it again")
        self._commit_check()

    def _commit_check(self) -> None:
        """Raise what stopped the commit thread, if anything (typed)."""
        failure = self._commit_failure
        if failure is not None:
            self._commit_said = True
            if isinstance(failure, CheckpointFencedError):
                raise failure  # a newer life claimed the run: said as itself
            raise JournalWriterError(
                f"{self.journal.writer.path}: the run's commit thread stopped on "
                f"{failure!r:.200}, so the journal's groups are no longer committed: "
                "close the run and open it again"
            ) from failure


def _commits(ref: weakref.ref[Run]) -> None:
    """A run's commit thread: polls the journal whenever a group is open
    (woken by every call), until the run closes or is collected."""
    while True:
        run = ref()
        if run is None:
            return
        with run._lock:
            if run._closed:
                return
            run._wake.clear()
            try:
                due = run.journal.poll()
            except BaseException as exc:
                # Never silent: every call of the run raises it from now on
                # (a call that does not touch the writer would not), and
                # ``metrics()["commit_failed"]`` shows it.
                run._commit_failure = exc
                log.error("the run's commit thread stopped: %r", exc)
                return
        wake = run._wake
        del run  # hold the run only while polling
        if due is None:
            wake.wait(1.0)  # bounded: a close or a collection is seen within a second
        else:
            time.sleep(max(due, 0.0005))


def _check_seconds(seconds: object) -> None:
    """A notice's length: a number of seconds >= 0 (not a bool, not a
    string)."""
    if type(seconds) is bool or not isinstance(seconds, (int, float)):
        raise TypeError(f"seconds must be a number, got {type(seconds).__name__:.40}")
    if not seconds >= 0:
        raise ValueError(f"seconds must be >= 0, got {seconds!r:.40}")


def _check_result(lease: object, sample: object, call: str) -> None:
    """Refuse what is no lease or no payload before anything moves (a
    ``seal`` the ledger accepted and the journal then refused would land a
    group with a sample nothing holds)."""
    if not isinstance(lease, Lease):
        raise TypeError(f"{call}: lease must be a frontier_core.Lease, got {shown(lease)}")
    check_payload(sample, f"{call}: the sample")


def _make_root(root: Path) -> None:
    """Create the run's root (and its parents): a file in the way or a
    filesystem that refuses is the store's typed error, nothing written."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise StoreLocationError(
            str(root)[:300], None, "not a directory: a run's root must be one (or absent)"
        ) from None
    except OSError as exc:
        raise unavailable(str(root)[:300], None, exc) from exc


def _apart(root: Path, remote: str | os.PathLike[str] | None) -> None:
    """Refuse a directory ``remote`` that is ``root``, or holds it, or lies
    in it: the node's files and the shipped copy would be one set of names
    (a journal file where the shipped segments go), which fails only at the
    first upload, a minute later, and a node loss would take the copy."""
    local = None if remote is None else local_path(remote)
    if local is None:
        return
    here, there = root.resolve(), local.resolve()
    if here == there or here.is_relative_to(there) or there.is_relative_to(here):
        raise StoreLocationError(
            str(remote)[:200],
            None,
            f"remote= must be a place apart from the run's root {str(root)[:200]!r} "
            "(neither the same directory, nor inside it, nor holding it)",
        )


def recover(
    collector: StreamCollector,
    journal: RolloutJournal,
    state: Mapping[str, Any] | None,
    *,
    position: int | None,
    checkpoint_id: int,
    step: int,
    reuse: Reuse,
    reserve: int,
    load_replay_buffer: bool = False,
    lives: int | None = None,
) -> tuple[Recovered, Resumed | None]:
    """Recovery on a start, one rule for ``Run.open`` and ``LedgerService``:
    the journal recovered against the checkpoint's collector ``state``
    (marked at ``position`` as checkpoint ``checkpoint_id`` of training
    ``step``), then the collector resumed from that state with the
    journal's sealed siblings, its attempts above every attempt the journal
    names or reserved. ``state=None`` is a fresh start: refused for a
    journal that holds samples (``JournalWithoutCheckpointError``), and
    nothing is resumed."""
    if state is None:
        fresh = journal.recover(
            None, position=None, checkpoint_id=None, reuse=reuse, fork=0, step=0, reserve=reserve
        )
        return fresh, None
    recovered = journal.recover(
        collector_record(state, collector.config.fingerprint),
        position=position,
        checkpoint_id=checkpoint_id,
        reuse=reuse,
        fork=step,
        step=step,
        reserve=reserve,
        lives=lives,
    )
    resumed = collector.resume(
        state,
        load_replay_buffer=load_replay_buffer,
        sealed=recovered.sealed,
        attempt_floor=recovered.attempt_floor,  # the journal's reservations included
        attempt_limit=recovered.attempt_limit,
    )
    return recovered, resumed


#: What a drain keeps of its notice for what follows the wait for the
#: store (closing the journal: its last fsync, the ship thread's stop): this
#: share of the time left, at most ``_CLOSE_RESERVE_MAX`` seconds. Without
#: it a store that never answers held the wait to the deadline itself, and
#: the close after it made the drain late (a 5 s notice took 5.002 s).
_CLOSE_RESERVE: Final = 0.25
_CLOSE_RESERVE_MAX: Final = 1.0


def drain_journal(journal: RolloutJournal, deadline: float) -> bool:
    """The first step of a drain (``Run.drain``, ``LedgerService.drain``:
    one rule): sync the journal, then ship its tail within what is left
    until ``deadline`` (``time.monotonic``; at most the journal's
    ``ship_timeout``), less what the drain keeps for closing (a quarter,
    at most a second). Returns whether all of it is off the node (``True``
    without a shipper: nothing to ship)."""
    journal.writer.sync()
    shipper = journal.shipper
    if shipper is None:
        return True
    left = deadline - time.monotonic()
    left -= min(max(left, 0.0) * _CLOSE_RESERVE, _CLOSE_RESERVE_MAX)
    left = min(left, journal.ship_timeout)
    try:
        shipper.flush(max(left, 0.001))
    except JournalFencedError:
        raise  # a newer life owns the run: not a store that was slow
    except JournalShipError:
        return False
    return True


def checkpoint_fits(deadline: float, last: float) -> bool:
    """The second step's rule: a drain checkpoints only with at least twice
    the last checkpoint's duration (``last`` seconds; NaN before one was
    timed: then one second) left until ``deadline``, since a checkpoint
    the stop cuts off half-way is time lost for nothing."""
    need = 2 * last if not math.isnan(last) else 1.0
    return deadline - time.monotonic() >= need


def _under(remote: str | os.PathLike[str], name: str) -> str | Path:
    """``name`` under ``remote``: a directory's (a ``file://`` URL's path:
    the one place ``open_store`` opens), or an object store URL's."""
    local = local_path(remote)
    if local is not None:
        return local / name
    assert isinstance(remote, str)
    return remote.rstrip("/") + "/" + name


def _read_part(part: object) -> Mapping[str, Any]:
    """The run's own part of a checkpoint (or a stored ``Prepared.part``),
    checked by shape."""
    old = isinstance(part, Mapping) and part.get(KEY_VERSION) == 1
    state = check_state(
        part,
        what="the run's checkpoint part",
        fmt=FORMAT,
        version=1 if old else VERSION,
        keys=_KEYS_V1 if old else _KEYS,
    )
    epoch = state.get(_KEY_EPOCH)
    if not old and (type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH):
        raise CheckpointCorruptError(
            f"the run's epoch must be an int in [0, {MAX_EPOCH}], got {shown(epoch)}"
        )
    position = state[_KEY_POSITION]
    if type(position) is not int or position < 0:
        raise CheckpointCorruptError(
            f"the run's journal position must be an int >= 0, got {shown(position)}"
        )
    lineage = state[_KEY_LINEAGE]
    if type(lineage) is not str or not lineage:
        raise CheckpointCorruptError(
            f"the run's lineage must be a non-empty str, got {shown(lineage)}"
        )
    return state


def collector_record(state: object, fingerprint: str) -> Checkpoint:
    """The ledger record inside a collector's state."""
    if not isinstance(state, Mapping) or "ledger" not in state:
        raise CheckpointCorruptError("the run's collector state holds no ledger record")
    return Checkpoint.from_state_dict(state["ledger"], fingerprint=fingerprint)


def _tokens(payload: Payload) -> int:
    return len(payload) if isinstance(payload, TokenPayload) else 0


def _tail(sample: TokenPayload, start: int) -> TokenPayload:
    """The tokens of ``sample`` from ``start`` on, with their log-probs and
    versions."""
    return TokenPayload.of(
        sample.tokens()[start:], sample.logprobs()[start:], sample.versions()[start:]
    )
