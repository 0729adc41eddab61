"""The transition table: every move an ordinal can make, in one place.

As in h11's state module, the table says which event may move an ordinal in
which status, and to where; the few rules that need more than the status
(the failure policy and the failure count, whether the source stamped the
ordinal in this life of the run, what a checkpoint says of it) are the pure
functions beside it. The ledger's group table (``_groups.GroupTable``)
applies them: its hot loops precompute integer tables from these and hold no
rule of their own.

The moves, with the rule that decides each::

    UNSTAMPED   --stamp---->  PENDING                      stamp_outcome
    TRAINED, DROPPED, BUFFERED --stamp--> unchanged        stamp_outcome (filtered: covered)
    below the cut --stamp-->  unchanged                    stamp_outcome (filtered: resolved)
    PENDING     --dispatch->  OUTSTANDING                  TRANSITIONS
    OUTSTANDING --buffer--->  BUFFERED                     TRANSITIONS
    BUFFERED    --train---->  TRAINED                      TRANSITIONS
    OUTSTANDING --fail----->  PENDING | UNSTAMPED | DROPPED    failure_outcome
    OUTSTANDING --setback-->  OUTSTANDING | DROPPED        setback_outcome
    BUFFERED    --evict---->  PENDING | UNSTAMPED | DROPPED    failure_outcome
    checkpoint  --resume--->  TRAINED | DROPPED | BUFFERED | UNSTAMPED | no entry
                                                           resume_outcome

What the table deliberately leaves out:

* ``stamp``: it does not move a listed ordinal, it reaches the next ones of
  the stream, so its rule (``stamp_outcome``) is keyed by status alone.
  Stamping a pending or outstanding ordinal is impossible, not illegal: the
  source yields each ordinal once per life of the run.
* ``resume``: it builds a ledger from a record rather than moving entries
  (``resume_outcome``). Pending and outstanding ordinals of the crashed life
  are in no record: their generation died with the process, and the source
  re-yields them. Evictions on restore are not failures and count no failure.
* The cut's advance: the resolved prefix is forgotten (its entries deleted),
  which changes no status an event can observe: below the cut every ordinal
  is resolved.
* ``checkpoint``: it reads the state and moves nothing (``recorded`` says
  what it keeps).
* Moves out of ``TRAINED`` and ``DROPPED``: none; they are terminal. No event
  names an ``UNSTAMPED`` ordinal either: only the source reaches it.
* Batches: an event over many ordinals is legal only if every one of its
  moves is (the ledger validates all before it builds anything), and an
  ordinal listed twice is a malformed event (``_events``), not a move.
* Time: no move happens by itself. A generation that never lands pins the
  cut until the framework fails it; the ledger has no clock.
"""

from __future__ import annotations

import enum
from typing import Final

from ._events import (
    Buffer,
    Dispatch,
    Evict,
    Fail,
    FailSample,
    FailurePolicy,
    Granularity,
    Restart,
    Seal,
    Setback,
    Sibling,
    Status,
    Train,
)


class _Outcome(enum.Enum):
    """A move whose target the failure policy picks: ``failure_outcome``'s
    for a failure of the whole group, ``setback_outcome``'s for a failure of
    one of its samples."""

    FAILURE = "failure"
    SETBACK = "setback"


FAILURE: Final = _Outcome.FAILURE
SETBACK: Final = _Outcome.SETBACK

#: The events that move the ordinals they list.
Move = Dispatch | Buffer | Fail | Setback | Evict | Train

#: (event type, current status) -> next status. A pair that is absent is an
#: illegal transition. ``Stamp`` is not here (see the module docstring).
TRANSITIONS: Final[dict[tuple[type[Move], Status], Status | _Outcome]] = {
    (Dispatch, Status.PENDING): Status.OUTSTANDING,
    (Buffer, Status.OUTSTANDING): Status.BUFFERED,
    (Fail, Status.OUTSTANDING): FAILURE,
    (Setback, Status.OUTSTANDING): SETBACK,
    (Evict, Status.BUFFERED): FAILURE,
    (Train, Status.BUFFERED): Status.TRAINED,
}

#: Resolved: terminal, and the cut passes them; they keep no failure count.
RESOLVED: Final = frozenset({Status.TRAINED, Status.DROPPED})
#: Live: in flight in this life of the run; the caller holds their rows.
LIVE: Final = frozenset({Status.PENDING, Status.OUTSTANDING, Status.BUFFERED})
#: Covered: a checkpoint says they need no generation (resolved, or retained
#: in the buffer), so a stamp filters them out.
COVERED: Final = RESOLVED | {Status.BUFFERED}


def failure_outcome(
    policy: FailurePolicy, max_failures: int, failures: int, *, stamped: bool
) -> tuple[Status, int]:
    """Where a failed generation (``fail``) or a stale eviction (``evict``)
    sends an ordinal that had failed ``failures`` times, and its failure
    count after: ``(status, failures)``.

    Each failure counts one. Under ``drop``, or under ``retry`` once the
    failures reach ``max_failures``, the ordinal is ``DROPPED``: resolved,
    so it keeps no count. Otherwise ``retry`` sends it back to
    be generated again: to ``PENDING`` if the source ``stamped`` it in this
    life of the run (the caller holds its row), or to ``UNSTAMPED`` if not
    (restored from a checkpoint as buffered and not re-stamped yet, so only
    the source has its row; the stamp makes it pending).
    """
    failures += 1
    if policy is FailurePolicy.RETRY and failures < max_failures:
        return (Status.PENDING if stamped else Status.UNSTAMPED), failures
    return Status.DROPPED, 0


def setback_outcome(policy: FailurePolicy, max_failures: int, failures: int) -> tuple[Status, int]:
    """Where a failed sample (``setback``) sends an outstanding group that
    had failed ``failures`` times, and its failure count after.

    The same count and limit as ``failure_outcome``: a failed sample is one
    failure of its group. Under ``retry`` below ``max_failures`` the
    group stays ``OUTSTANDING`` (its other samples go on; only the failed one
    is generated again); otherwise it is ``DROPPED``, since it can no longer
    land with all its samples.
    """
    failures += 1
    if policy is FailurePolicy.RETRY and failures < max_failures:
        return Status.OUTSTANDING, failures
    return Status.DROPPED, 0


#: The statuses an ordinal can have when the source yields it: not stamped in
#: this life yet, or covered by the checkpoint the life resumed from.
STAMPABLE: Final = COVERED | {Status.UNSTAMPED}


def stamp_outcome(status: Status | None) -> Status | None:
    """What a stamp does to an ordinal the source yields, by its status
    (``None``: below the cut, resolved and forgotten).

    An ``UNSTAMPED`` ordinal (new, or carrying failures from before a resume
    or from a retry) becomes ``PENDING`` with its failures: it is kept. A
    covered one (trained, dropped, or retained in the restored buffer) and
    one below the cut are filtered: ``None``, and nothing changes. Raises
    ``ValueError`` for a pending or outstanding ordinal, which the source
    cannot yield twice in one life.
    """
    if status is not None and status not in STAMPABLE:
        raise ValueError(f"a {status.name.lower()} ordinal was stamped in this life already")
    return Status.PENDING if status is Status.UNSTAMPED else None


def resume_outcome(saved: Status | None, *, restored: bool, failures: int) -> Status | None:
    """The status a resume gives an ordinal at or above the checkpoint's cut
    (``None``: no entry, the source stamps it as new).

    ``saved`` is what the checkpoint says of it: ``TRAINED``, ``DROPPED``,
    ``BUFFERED`` (retained: its group was saved with the buffer) or ``None``
    (nothing but its ``failures``, which may be 0). ``restored`` says
    whether the restored buffer holds it: the buffer was loaded and did not
    evict it on restore. Trained and dropped ordinals stay so. A retained
    ordinal the buffer restored is ``BUFFERED``, with its failures. Anything
    else (retained but not restored, or in flight when the checkpoint was
    taken) is generated again: it waits for the source as ``UNSTAMPED`` if
    it carries failures, and has no entry if not. Raises ``ValueError`` for a
    status that no checkpoint records.
    """
    if saved in RESOLVED:
        return saved
    if saved is Status.BUFFERED:
        if restored:
            return Status.BUFFERED
    elif saved is not None:
        raise ValueError(f"a checkpoint records no {saved.name.lower()} ordinals")
    return Status.UNSTAMPED if failures else None


def recorded(status: Status, failures: int) -> bool:
    """Whether a checkpoint that saves the buffer records an ordinal: what a
    stamp after the resume would filter (covered), and one with failures."""
    return status in COVERED or failures > 0


#: The events after which a checkpoint records the ordinals they name: those
#: with a move to a status a checkpoint records from one it does not (whatever
#: the failure count). A failure always counts: ``failure_outcome`` and
#: ``setback_outcome`` drop the ordinal or count a failure, and a checkpoint
#: records both. (A comprehension
#: rather than a function: module-level code runs once, at import.)
NOTING: Final = frozenset(
    kind
    for (kind, source), target in TRANSITIONS.items()
    if not recorded(source, 0) and (isinstance(target, _Outcome) or recorded(target, 0))
)


# -- samples -----------------------------------------------------------------------
#
# The ledger (``Ledger``) keeps, for each outstanding group, the status of
# each of its n siblings and the attempt it runs or was sealed by. Its moves,
# one sibling at a time::
#
#     (group dispatched) ---------> RUNNING, a new attempt (SEALED if reused)
#     UNSTARTED --restart-------->  RUNNING, a new attempt    SAMPLE_TRANSITIONS
#     RUNNING   --seal----------->  SEALED                    SAMPLE_TRANSITIONS
#     RUNNING   --fail_sample---->  UNSTARTED + setback of the group, or
#                                   fail of the group         sample_failure
#     all n SEALED --------------->  the group is buffered (buffer)
#
# A seal or a failure counts only from the sibling's current attempt
# (``current_attempt``); any other is fenced. The group's own moves (and its
# failure count) stay the group table's.

#: (sample event, sibling status) -> next sibling status, for a result of the
#: sibling's current attempt. A pair that is absent is fenced (seal,
#: fail_sample) or illegal (start).
SAMPLE_TRANSITIONS: Final[
    dict[tuple[type[Restart | Seal | FailSample], Sibling], Sibling | _Outcome]
] = {
    (Restart, Sibling.UNSTARTED): Sibling.RUNNING,
    (Seal, Sibling.RUNNING): Sibling.SEALED,
    (FailSample, Sibling.RUNNING): FAILURE,
}


def sample_failure(granularity: Granularity) -> type[Fail | Setback]:
    """The group-level move a failed sample makes: under ``sibling``
    granularity a ``Setback`` (the group stays outstanding and the sibling is
    generated again, or the group is dropped), under ``group`` a ``Fail`` of
    the whole group (every sibling generated again, or the group dropped)."""
    return Setback if granularity is Granularity.SIBLING else Fail


def current_attempt(status: Sibling | None, attempt: int | None, result: int) -> bool:
    """Whether a result of attempt ``result`` is from the current attempt of
    a sibling in ``status`` under ``attempt`` (``None``: the ledger holds no
    detail of it). Only a running sibling has one: a sealed sibling was
    sealed by its first result, an unstarted one runs nothing, and a sibling
    without detail belongs to a group that is not outstanding. The fencing
    rule, in one place."""
    return status is Sibling.RUNNING and attempt == result
