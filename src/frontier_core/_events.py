"""Events: the small frozen values that drive the ledger.

Each event names what the framework saw happen to some prompts of the stream.
An event that could never be legal (a negative ordinal, an ordinal listed
twice, a negative count, a number at or past 2**64, which no ledger holds)
cannot be constructed; whether a well-formed event
is legal *now* is the ledger's decision, not the event's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import ClassVar, NamedTuple

import attrs

from ._errors import IllegalTransitionError, shown
from ._ranges import LIMIT


class Status(enum.IntEnum):
    """Where an ordinal stands in its lifecycle.

    ``PENDING -> OUTSTANDING -> BUFFERED -> TRAINED``, with ``DROPPED`` as the
    terminal alternative. ``UNSTAMPED`` is an ordinal the source has not
    stamped in this life of the run, so nobody holds its row: one the source
    has not reached yet, or one the ledger already knows of (it carries failed
    attempts from before a resume, or a retry sent it back before its
    re-stamp). It becomes ``PENDING`` when the source stamps it.
    """

    UNSTAMPED = 0
    PENDING = 1
    OUTSTANDING = 2
    BUFFERED = 3
    TRAINED = 4
    DROPPED = 5


class FailurePolicy(enum.Enum):
    """What a tolerated generation failure or a stale eviction does.

    ``DROP`` resolves the ordinal as dropped at once (recorded, never silent).
    ``RETRY`` sends it back to be generated again until its attempts reach
    ``max_failures``; only then is it dropped.
    """

    DROP = "drop"
    RETRY = "retry"


class Granularity(enum.Enum):
    """What a failed sample fails (``Ledger.fail_sample``).

    ``SIBLING``: only that sample; it is generated again (under ``retry``)
    while its group's other samples go on and keep what they sealed.
    ``GROUP``: the whole group, as a prompt-level failure does; every one of
    its samples is generated again.
    """

    SIBLING = "sibling"
    GROUP = "group"


class Sibling(enum.IntEnum):
    """Where one sample of an outstanding group stands (``Ledger.sibling``).

    ``UNSTARTED -> RUNNING -> SEALED``: a sibling runs under one attempt at
    a time and is sealed by exactly one attempt; a sibling failure under
    ``sibling`` granularity sends it back to ``UNSTARTED``.
    """

    UNSTARTED = 0
    RUNNING = 1
    SEALED = 2


class Lease(NamedTuple):
    """One attempt at one sample: sibling ``sibling`` of prompt ``ordinal``,
    generated under ``attempt``. The ledger numbers attempts from one counter
    for the whole run, upwards across resumes, so an attempt names one try of
    one sibling for good; a result is accepted only from the sibling's
    current attempt (fencing)."""

    ordinal: int
    sibling: int
    attempt: int


def _ordinal_tuple(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value)


@attrs.frozen
class Stamp:
    """The source yielded its next ``count`` prompts and the ledger stamps them
    with their ordinals (fewer at the stream's end)."""

    name: ClassVar[str] = "stamp"
    count: int = attrs.field(validator=attrs.validators.instance_of(int))

    def __attrs_post_init__(self) -> None:
        if isinstance(self.count, bool) or self.count < 0:
            raise IllegalTransitionError(
                self.name, (), f"count must be an int >= 0, got {shown(self.count)}"
            )
        if self.count > LIMIT:
            raise IllegalTransitionError(
                self.name, (), f"count must be at most 2**64, got {shown(self.count)}"
            )


@attrs.frozen
class _OrdinalEvent:
    """Base of the events that move listed ordinals from one status to another."""

    name: ClassVar[str] = "?"
    ordinals: tuple[int, ...] = attrs.field(converter=_ordinal_tuple)

    def __attrs_post_init__(self) -> None:
        seen: set[int] = set()
        repeated: list[int] = []
        for o in self.ordinals:
            if type(o) is not int or o < 0:
                raise IllegalTransitionError(
                    self.name, (), f"ordinals must be ints >= 0, got {shown(o)}"
                )
            if o >= LIMIT:
                raise IllegalTransitionError(
                    self.name, (), f"ordinals must be below 2**64, got {shown(o)}"
                )
            if o in seen:
                repeated.append(o)
            seen.add(o)
        if repeated:
            raise IllegalTransitionError(self.name, repeated, "listed more than once")


@attrs.frozen
class Dispatch(_OrdinalEvent):
    """Pending ordinals were handed to rollout workers (any subset, any order)."""

    name: ClassVar[str] = "dispatch"


@attrs.frozen
class Buffer(_OrdinalEvent):
    """These ordinals' groups finished and landed in the replay buffer."""

    name: ClassVar[str] = "buffer"


@attrs.frozen
class Fail(_OrdinalEvent):
    """Generation failed (an exception, a timeout, a dead worker) for these
    outstanding ordinals; the failure policy decides their fate."""

    name: ClassVar[str] = "fail"


@attrs.frozen
class Setback(_OrdinalEvent):
    """One sample of each of these outstanding groups failed, and only that
    sample is generated again (``sibling`` granularity): the failure counts
    as one failure of the group, which stays outstanding, or the failure
    policy drops the group. ``Ledger.fail_sample`` applies it with the
    sibling's own move (and reports the sibling to restart); ``setback``
    alone moves the group only."""

    name: ClassVar[str] = "setback"


@attrs.frozen
class Evict(_OrdinalEvent):
    """The replay buffer discarded these groups (too stale to train on); the
    failure policy decides their fate."""

    name: ClassVar[str] = "evict"


@attrs.frozen
class Train(_OrdinalEvent):
    """One training step consumed these buffered groups."""

    name: ClassVar[str] = "train"


def _distinct(name: str, value: Iterable[Iterable[int]], width: int) -> list[tuple[int, ...]]:
    """``value`` as tuples of ``width`` ints in ``[0, 2**64)``, each
    (ordinal, sibling) at most once: the checks a sample-level event makes
    of itself. Anything else (a non-iterable, an item that is not a
    sequence) is an ``IllegalTransitionError`` too."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise IllegalTransitionError(name, (), f"expected a list, got {type(value).__name__}")
    out = []
    seen: set[tuple[int, int]] = set()
    repeated: list[int] = []
    for raw in value:
        # A lease passes as itself (the hot case: a rollout loop's results).
        item = raw if type(raw) is Lease else tuple(raw) if isinstance(raw, tuple | list) else ()
        bad = len(item) != width
        big = False
        for x in item:
            if type(x) is not int or x < 0:
                bad = True
                break
            big = big or x >= LIMIT
        if bad:
            raise IllegalTransitionError(name, (), f"expected {width} ints >= 0, got {shown(raw)}")
        if big:
            raise IllegalTransitionError(
                name, (), f"expected {width} ints below 2**64, got {shown(raw)}"
            )
        key = (item[0], item[1])
        if key in seen:
            repeated.append(item[0])
        seen.add(key)
        out.append(item)
    if repeated:
        raise IllegalTransitionError(name, repeated, "a sibling is listed more than once")
    return out


def _pairs(value: Iterable[Iterable[int]]) -> tuple[tuple[int, int], ...]:
    return tuple((o, s) for o, s in _distinct("restart", value, 2))


def _seal_leases(value: Iterable[Iterable[int]]) -> tuple[Lease, ...]:
    if type(value) is list and len(value) == 1 and type(value[0]) is Lease:
        # The hot case, a rollout loop's one result: the checks of
        # ``_distinct``, inline.
        x = value[0]
        o, s, a = x
        if (
            type(o) is int
            and type(s) is int
            and type(a) is int
            and 0 <= o < LIMIT
            and 0 <= s < LIMIT
            and 0 <= a < LIMIT
        ):
            return (x,)
    return tuple([x if type(x) is Lease else Lease(*x) for x in _distinct("seal", value, 3)])


def _failed_leases(value: Iterable[Iterable[int]]) -> tuple[Lease, ...]:
    return tuple([x if type(x) is Lease else Lease(*x) for x in _distinct("fail_sample", value, 3)])


@attrs.frozen
class Restart:
    """Restart these unstarted siblings ``(ordinal, sibling)`` of outstanding
    groups under new attempts (after a sibling failure under ``sibling``
    granularity; ``dispatch`` starts a whole group's siblings itself)."""

    name: ClassVar[str] = "restart"
    siblings: tuple[tuple[int, int], ...] = attrs.field(converter=_pairs)


@attrs.frozen
class Seal:
    """These attempts finished their samples. Each is accepted if it is its
    sibling's current attempt, and fenced (ignored, reported) if not; a
    group lands in the buffer when its last sibling seals."""

    name: ClassVar[str] = "seal"
    leases: tuple[Lease, ...] = attrs.field(converter=_seal_leases)


@attrs.frozen
class FailSample:
    """These attempts failed their samples; the granularity and the failure
    policy decide what is generated again. Fenced like ``Seal``."""

    name: ClassVar[str] = "fail_sample"
    leases: tuple[Lease, ...] = attrs.field(converter=_failed_leases)


Event = Stamp | Dispatch | Buffer | Fail | Setback | Evict | Train
SampleEvent = Restart | Seal | FailSample


@attrs.frozen
class Effect:
    """What an applied event did, beyond the new state.

    ``stamped``: the ordinals the source produced (``Stamp`` only).
    ``kept``: those of them that passed the resume filter and became pending.
    ``buffered``: those of them filtered because the restored replay buffer
    holds them; unlike the rest of the filtered ones they are still live (an
    eviction may send them back), so a caller that keeps rows keeps theirs.
    ``requeued``: ordinals the ``retry`` policy sent back to pending; the
    caller generates them again.
    ``unstamped``: ordinals the ``retry`` policy sent back to ``UNSTAMPED``:
    they were restored from a checkpoint and the source has not re-stamped
    them yet, so the caller holds no row; they become pending when the
    source stamps them again.
    ``dropped``: ordinals the failure policy resolved as dropped.

    The ledger's sibling events say more: ``leases``, the
    attempts it started (each one sibling to generate); ``reused``, siblings
    a dispatch found sealed already (by a journaled or checkpointed attempt:
    their samples come from there, not from generation); ``sealed`` and
    ``fenced``, the results it accepted and those it ignored because their
    attempt was no longer current; ``landed``, groups whose last sibling
    sealed, now buffered; ``restart``, siblings ``(ordinal, sibling)`` a
    sibling failure sent back to unstarted (``restart`` them).
    """

    event: str
    stamped: range = range(0)
    kept: tuple[int, ...] = ()
    buffered: tuple[int, ...] = ()
    requeued: tuple[int, ...] = ()
    unstamped: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    leases: tuple[Lease, ...] = ()
    reused: tuple[Lease, ...] = ()
    sealed: tuple[Lease, ...] = ()
    fenced: tuple[Lease, ...] = ()
    landed: tuple[int, ...] = ()
    restart: tuple[tuple[int, int], ...] = ()
