"""The store interface: keys, versions, and the operations both stores
implement with the same meaning."""

from __future__ import annotations

from typing import Final, Protocol, runtime_checkable

import attrs

from ._errors import StoreKeyError

#: The longest key, in UTF-8 bytes (S3's limit is 1024 with the prefix).
MAX_KEY_BYTES: Final = 512
#: The most keys ``list`` returns unless told otherwise.
DEFAULT_LIST_LIMIT: Final = 10_000


@attrs.frozen
class Versioned:
    """An object's bytes and the version they are (what ``swap`` expects)."""

    data: bytes
    version: str


@runtime_checkable
class Store(Protocol):
    """A flat namespace of immutable-once-written objects under a root
    (a directory, or a bucket and prefix), with conditional writes.

    Keys are ``/``-separated relative names (``check_key``). A *version*
    is an opaque string that changes whenever an object is written with
    other bytes (it may or may not change when the same bytes are written
    again: on S3 the ETag of a plain put is the bytes' MD5). Every call is
    bounded in time; every failure is a ``StoreError`` subclass."""

    #: Where the store is (a path or a URL), for messages.
    @property
    def where(self) -> str: ...

    def get(self, key: str, *, max_bytes: int) -> bytes | None:
        """The object's bytes, ``None`` if it is absent. Raises
        ``StoreLimitError`` for one larger than ``max_bytes`` before its
        body is read."""
        ...

    def get_versioned(self, key: str, *, max_bytes: int) -> Versioned | None:
        """The object's bytes and their version, read together."""
        ...

    def head(self, key: str) -> str | None:
        """The object's version, ``None`` if it is absent."""
        ...

    def create(self, key: str, data: bytes) -> str:
        """Create the object if it is absent, atomically (a reader sees all
        of it or nothing) and durably on return; its version. Raises
        ``StoreConflictError`` if it exists. (On an object store, a
        request retried after an attempt that got no answer and finds its
        own bytes in place counts as success: that attempt landed.)"""
        ...

    def swap(self, key: str, data: bytes, *, expected: str | None) -> str:
        """Replace the object if its version is still ``expected``
        (``None``: create it if absent), atomically and durably; the new
        version. Raises ``StoreConflictError`` when it moved."""
        ...

    def list(self, prefix: str = "", *, limit: int = DEFAULT_LIST_LIMIT) -> list[str]:
        """The keys under ``prefix`` (a key's leading components, ``""``
        for all), sorted. Raises ``StoreLimitError`` past ``limit``."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; nothing happens if it is absent."""
        ...

    def delete_prefix(self, prefix: str, *, limit: int = DEFAULT_LIST_LIMIT) -> None:
        """Remove every object under ``prefix`` (a key's leading
        components, not ``""``): a checkpoint directory. Not atomic: a
        reader may see some of them gone. Raises ``StoreLimitError``
        before removing anything when more than ``limit`` objects are
        under it."""
        ...


def check_key(where: str, key: object, *, prefix: bool = False) -> str:
    """``key`` if the stores accept it, else ``StoreKeyError``: a non-empty
    ``str`` of at most ``MAX_KEY_BYTES`` UTF-8 bytes, not absolute, whose
    ``/``-separated components are non-empty, neither ``.`` nor ``..``, do
    not start with ``.`` (names the store keeps for itself, such as a
    POSIX store's temporary files) and hold no NUL, control character or
    backslash. With ``prefix=True`` the empty string is accepted too."""
    if not isinstance(key, str):
        raise StoreKeyError(where, None, f"a key is a str, not {type(key).__name__}")
    shown = repr(key[:80])
    if key == "":
        if prefix:
            return key
        raise StoreKeyError(where, None, "empty key")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise StoreKeyError(where, None, f"key {shown} is not valid UTF-8") from None
    if size > MAX_KEY_BYTES:
        raise StoreKeyError(where, None, f"key {shown} is longer than {MAX_KEY_BYTES} bytes")
    if any(ord(c) < 0x20 or c in "\x7f\\" for c in key):
        raise StoreKeyError(where, None, f"key {shown} holds a NUL, control character or '\\'")
    if key.startswith("/"):
        raise StoreKeyError(where, None, f"key {shown} is absolute")
    for part in key.split("/"):
        if part == "":
            raise StoreKeyError(where, None, f"key {shown} has an empty component")
        if part.startswith("."):
            raise StoreKeyError(
                where, None, f"key {shown}: a component starting with '.' ('..' included)"
            )
    return key


def check_limit(limit: object, name: str) -> int:
    if type(limit) is not int or limit < 0:
        raise ValueError(f"{name} must be an int >= 0, got {limit!r}")
    return limit
