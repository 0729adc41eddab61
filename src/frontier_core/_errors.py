"""The error hierarchy.

Two kinds, as in h11: the caller misused the ledger (an event that is not
legal in the current state), or the caller handed it bad input (a record that
is corrupted, of another version, or of another stream). Both subclass
``ValueError`` so generic handlers catch them; ``FrontierError`` itself is
never raised. Whatever raises, the value it was raised from is unchanged:
every transition builds a new value and only returns it on success.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from typing import Any

#: Ints wider than this are quoted by their size, not their digits: their
#: decimal form costs time quadratic in the digits, and past 4300 digits
#: ``str`` refuses them with a ``ValueError``.
_QUOTED_BITS = 128


class _Bounded(reprlib.Repr):
    """``reprlib`` with every int quoted safely: a message built from
    hostile input costs a bounded amount and never raises."""

    def repr_int(self, x: int, level: int) -> str:
        return shown_int(x)

    def repr_bool(self, x: bool, level: int) -> str:
        return repr(x)


_REPR = _Bounded()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = 200


def shown_int(value: int) -> str:
    """``value`` in decimal, or its size when it is too wide to print."""
    if value.bit_length() > _QUOTED_BITS:
        sign = "-" if value < 0 else ""
        return f"{sign}an int of {value.bit_length()} bits"
    return str(int(value))


def shown(value: object, limit: int = 80) -> str:
    """A repr of ``value`` for an error message: at most ``limit``
    characters, in time bounded by them, whatever ``value`` is (an int of
    10**6 digits, a list nested 10**5 deep, an object whose ``repr``
    raises)."""
    try:
        text: str = _REPR.repr(value)
    except Exception:  # a hostile __repr__: name the type instead
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown_keys(keys: Iterable[Any], limit: int = 20) -> str:
    """Keys of any types (a JSON object read by a lenient parser, a dict
    built by hand) as a sorted, bounded list: ``sorted`` of mixed types
    raises ``TypeError``, so they are sorted by their quoted form."""
    quoted = sorted(shown(k, 40) for k in keys)
    more = f" (+{len(quoted) - limit} more)" if len(quoted) > limit else ""
    return f"[{', '.join(quoted[:limit])}]{more}"


class FrontierError(Exception):
    """Base of every error this library raises on purpose. Not raised itself."""

    def __init__(self, *args: object) -> None:
        if type(self) is FrontierError:
            raise TypeError("FrontierError is abstract; raise a subclass")
        super().__init__(*args)


class IllegalTransitionError(FrontierError, ValueError):
    """An event is not legal in the ledger's current state.

    ``event`` names the event (``"dispatch"``, ``"train"``, ...) and
    ``ordinals`` lists the ordinals that made it illegal, ascending.
    """

    def __init__(self, event: str, ordinals: Iterable[int], reason: str) -> None:
        self.event = event
        self.ordinals: tuple[int, ...] = tuple(sorted(set(ordinals)))
        self.reason = reason
        head = ", ".join(shown_int(o) for o in self.ordinals[:20])
        more = f" (+{len(self.ordinals) - 20} more)" if len(self.ordinals) > 20 else ""
        super().__init__(f"illegal {event} of ordinals [{head}]{more}: {reason}")


class CheckpointError(FrontierError, ValueError):
    """A checkpoint record cannot be used: resuming from it could lose or
    duplicate prompts. The subclasses say why."""


class CheckpointCorruptError(CheckpointError):
    """The record is malformed, truncated or fails its checksum."""


class CheckpointVersionError(CheckpointError):
    """The record was written by an unknown schema version."""


class CheckpointMismatchError(CheckpointError):
    """The record is sound but belongs to another stream than this one."""


class FingerprintMismatchError(CheckpointMismatchError):
    """The record's stream fingerprint differs: a changed dataset or order."""

    def __init__(self, expected: str, found: str) -> None:
        self.expected = expected
        self.found = found
        super().__init__(
            f"checkpoint was written for stream fingerprint {shown(found, 200)}, "
            f"but this stream's fingerprint is {shown(expected, 200)}: the dataset or its "
            "order changed, so the saved cut would point at the wrong prompts"
        )


class TraceError(FrontierError, ValueError):
    """A trace line is malformed or names an illegal op."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")
