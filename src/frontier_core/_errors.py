"""The error hierarchy.

Two kinds, as in h11: the caller misused the ledger (an event that is not
legal in the current state), or the caller handed it bad input (a record that
is corrupted, of another version, or of another stream). Both subclass
``ValueError`` so generic handlers catch them; ``FrontierError`` itself is
never raised. Whatever raises, the value it was raised from is unchanged:
every transition builds a new value and only returns it on success.
"""

from __future__ import annotations

from collections.abc import Iterable


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
        shown = list(self.ordinals[:20])
        more = f" (+{len(self.ordinals) - 20} more)" if len(self.ordinals) > 20 else ""
        super().__init__(f"illegal {event} of ordinals {shown}{more}: {reason}")


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
            f"checkpoint was written for stream fingerprint {found!r}, "
            f"but this stream's fingerprint is {expected!r}: the dataset or its "
            "order changed, so the saved cut would point at the wrong prompts"
        )
