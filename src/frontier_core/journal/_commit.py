"""Group commit: when the appends waiting in memory must reach the disk.

An ``fsync`` costs the same for one record as for a thousand, so the writer
gathers appends into a group and makes it durable with one ``write`` and one
``fsync``. The policy bounds what a crash can cost: a record waits at most
``max_delay`` seconds for its group (the oldest pending append sets the
clock), and a group holds at most ``max_bytes`` bytes (and, optionally,
``max_records`` records) before it is committed. It is a pure function of
what is pending: the adapter measures, the policy decides.
"""

from __future__ import annotations

import math

import attrs


def _delay(_inst: object, _attribute: attrs.Attribute[float], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, float | int):
        raise TypeError(f"max_delay must be a number of seconds, got {type(value).__name__}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"max_delay must be finite and >= 0, got {value!r}")


# Plain validators, not closures made by a factory: a factory runs once, at
# import, so its mutants could never be switched on (proofs/MUTANTS_JOURNAL.md).
def _count(name: str, value: object, least: int) -> None:
    if type(value) is not int or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")


def _bytes(_inst: object, attribute: attrs.Attribute[int], value: object) -> None:
    _count(attribute.name, value, 0)


def _records(_inst: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is not None:
        _count(attribute.name, value, 1)


@attrs.frozen
class CommitPolicy:
    """Commit a group once its oldest append has waited ``max_delay``
    seconds, or once it holds ``max_bytes`` bytes, or ``max_records``
    records (``None``: no bound on the count). ``max_delay=0`` or
    ``max_bytes=0`` commits every append on its own."""

    max_delay: float = attrs.field(default=0.005, validator=_delay)
    max_bytes: int = attrs.field(default=1 << 20, validator=_bytes)
    max_records: int | None = attrs.field(default=None, validator=_records)

    def due_in(self, *, pending_bytes: int, pending_records: int, elapsed: float) -> float | None:
        """Seconds until the pending group must be committed: ``0.0`` means
        now, ``None`` that nothing is pending. ``elapsed`` is the time since
        the oldest pending append. A caller without a timer commits when
        this is ``0.0`` and checks again at its next append (or ``poll``)."""
        if pending_records <= 0:
            return None
        if pending_bytes >= self.max_bytes or (
            self.max_records is not None and pending_records >= self.max_records
        ):
            return 0.0
        return max(0.0, self.max_delay - elapsed)
