"""The store's errors: one base, and what went wrong, each a subclass of
the builtin whose meaning it shares."""

from __future__ import annotations

from frontier_core import FrontierError


class StoreError(FrontierError, OSError):
    """A store operation failed. Not raised itself: the subclasses say why.
    ``key`` names the object (``None`` for the store as a whole) and
    ``where`` the store (a path or a URL)."""

    def __init__(self, where: str, key: str | None, reason: str) -> None:
        if type(self) is StoreError:
            raise TypeError("StoreError is abstract; raise a subclass")
        self.where = where
        self.key = key
        #: What went wrong, without the place (for errors that name it their own way).
        self.reason = reason
        shown = where if key is None else f"{where.rstrip('/')}/{key}"
        super().__init__(f"{shown}: {reason}")

    def __str__(self) -> str:
        return str(self.args[0])


class StoreKeyError(StoreError, ValueError):
    """A key (or a list prefix) the store refuses: empty, absolute, with an
    empty, ``.`` or ``..`` component, a component starting with ``.`` (the
    store's own names), a NUL or control character, or too long."""


class StoreLocationError(StoreError, ValueError):
    """A location that names no store: empty, a ``file://`` URL with a host
    or without a path, an unknown scheme, an ``s3://`` URL without a bucket
    or with an empty, ``.`` or ``..`` component in its prefix. Raised by
    ``open_store`` before anything is read or written."""


class StoreConflictError(StoreError):
    """A conditional write lost: ``create`` of a key that exists, or
    ``swap`` whose expected version is no longer the object's (another
    writer moved it, or deleted it). Nothing was written."""


class StoreLimitError(StoreError):
    """More than a bound allows: an object larger than ``max_bytes``
    (refused before its body is read), or a listing of more keys than
    ``limit``."""


class StoreObjectError(StoreError):
    """Something that is not an object stands at the key: a symlink, a
    FIFO, a device or a directory in a POSIX store (never followed, never
    opened in a way that blocks), or an object that changed while it was
    read."""


class StoreUnavailableError(StoreError):
    """The store could not be reached or did not answer in time (after the
    bounded retries), or refused the request for another reason (a
    permission, a missing bucket). Whether a write that failed this way
    took effect is unknown: read the key back."""
