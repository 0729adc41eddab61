"""The store's errors: one base, and what went wrong, each a subclass of
the builtin whose meaning it shares."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from frontier_core import FrontierError

_F = TypeVar("_F", bound=Callable[..., Any])


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


def unavailable(where: str, key: str | None, exc: OSError) -> StoreUnavailableError:
    """What a filesystem's own ``OSError`` (read-only, full, an I/O error, a
    permission, a file where a directory belongs) is to a caller: the
    store refused the request."""
    error = StoreUnavailableError(where, key, f"{exc.strerror or exc}")
    # What the system said stays readable as an OSError's (ENOSPC, EROFS).
    error.errno, error.strerror = exc.errno, exc.strerror
    return error


def typed_io(place: Callable[..., tuple[str, str | None]]) -> Callable[[_F], _F]:
    """A decorator: every ``OSError`` of the decorated call that is not
    already one of the project's errors is raised as a
    ``StoreUnavailableError`` naming ``place(*args)`` (the store or
    directory, and the key): a caller of anything that reads or writes a
    directory catches the project's errors only, and an ``except OSError``
    still catches it."""

    def decorate(func: _F) -> _F:
        @functools.wraps(func)
        def typed(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except FrontierError:
                raise
            except OSError as exc:
                raise unavailable(*place(*args), exc) from exc

        return typed  # type: ignore[return-value]

    return decorate


def at_path(*args: Any) -> tuple[str, str | None]:
    """``typed_io``'s place for a function whose first argument is the path
    or the URL it works under."""
    where = args[0] if args and isinstance(args[0], str | os.PathLike) else "?"
    return str(os.fspath(where))[:300], None
