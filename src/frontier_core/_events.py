"""Events: the small frozen values that drive the ledger.

Each event names what the framework saw happen to some prompts of the stream.
An event that could never be legal (a negative ordinal, an ordinal listed
twice, a negative count) cannot be constructed; whether a well-formed event
is legal *now* is the ledger's decision, not the event's.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import ClassVar

import attrs

from ._errors import IllegalTransitionError


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
    ``max_attempts``; only then is it dropped.
    """

    DROP = "drop"
    RETRY = "retry"


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
                self.name, (), f"count must be an int >= 0, got {self.count!r}"
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
                    self.name, (), f"ordinals must be ints >= 0, got {o!r}"
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
class Evict(_OrdinalEvent):
    """The replay buffer discarded these groups (too stale to train on); the
    failure policy decides their fate."""

    name: ClassVar[str] = "evict"


@attrs.frozen
class Train(_OrdinalEvent):
    """One training step consumed these buffered groups."""

    name: ClassVar[str] = "train"


Event = Stamp | Dispatch | Buffer | Fail | Evict | Train


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
    """

    event: str
    stamped: range = range(0)
    kept: tuple[int, ...] = ()
    buffered: tuple[int, ...] = ()
    requeued: tuple[int, ...] = ()
    unstamped: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
