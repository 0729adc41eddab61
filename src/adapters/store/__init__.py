"""One storage seam: a small store interface with a POSIX directory and an
object store (S3, GCS, Azure through ``obstore``) behind it.

A *store* is a namespace of objects under a root: a directory, or a
bucket and prefix. Keys are ``/``-separated relative names (``a/b/c``);
an empty, absolute, NUL- or control-character-bearing key, one with an
empty, ``.`` or ``..`` component or a component starting with ``.``
(names the store keeps for itself) is refused with ``StoreKeyError``.

The operations, the same on every store (``Store``)::

    get(key, *, max_bytes) -> bytes | None             bounded: StoreLimitError before reading
    get_versioned(key, *, max_bytes) -> Versioned | None   bytes and version together
    head(key) -> str | None                            the version
    create(key, data) -> str                           create-if-absent: StoreConflictError
    swap(key, data, *, expected) -> str                compare-and-swap on the version
    list(prefix="", *, limit=10_000) -> list[str]      sorted; StoreLimitError past limit
    delete(key) -> None                                idempotent

Writes are atomic (a reader sees an object whole or not at all) and
durable on return. A *version* is opaque: it changes whenever an object
is written with other bytes. Conditional writes are all a commit protocol
needs where nothing can be renamed or appended: publish by creating new
immutable objects, and move a pointer (a checkpoint root's ``LATEST``)
only by ``swap`` against the version read before, so two writers cannot
both move it and a writer from before a resume is fenced. Every failure
is a ``StoreError`` subclass: ``StoreKeyError`` (a ``ValueError``),
``StoreConflictError``, ``StoreLimitError``, ``StoreObjectError`` (a
symlink, FIFO or directory where an object should be),
``StoreUnavailableError`` (unreachable, timed out after bounded retries,
refused).

``open_store(url_or_path)`` picks the implementation: a path or
``file://`` gives a ``PosixStore``, ``s3://bucket/prefix`` an
``ObjectStore`` (endpoint and credentials from keyword arguments or the
standard ``AWS_*`` environment variables), ``gs://`` and ``az://`` are
delegated to ``obstore``'s ``from_url`` (untested here).

What the protocols built on a store assume of it:

- read-after-write for new objects and for overwrites (a ``get`` after a
  ``create`` or ``swap`` returned sees it), and list-after-write (a
  ``list`` after a ``create`` returned shows it);
- conditional writes: create-if-absent and compare-and-swap are atomic,
  at most one of two racing writers wins;
- a write acknowledged is durable (survives a crash of the server).

Which stores give it: AWS S3 (strong read-after-write and list
consistency since December 2020; conditional writes, ``If-None-Match``
since August 2024 and ``If-Match`` since November 2024); Google Cloud
Storage (strongly consistent; preconditions on the generation); Azure
Blob Storage (strongly consistent; ETag conditions); SeaweedFS 4.48's S3
gateway (measured here: both conditions honoured, acknowledged puts
survive a SIGKILL of the server); a local POSIX filesystem (ext4, xfs,
APFS: ``link`` and ``rename`` are atomic, fsync makes them durable,
``flock`` serialises compare-and-swap between processes of the host).
NFS and other network filesystems: ``rename`` is atomic on the server,
but attribute caching can hide a new or replaced file from another
client for a while (close-to-open consistency only), and ``flock`` holds
across clients only where the server supports locks (NFSv4): there a
``PosixStore`` is safe for one writer host at a time; prefer an object
store for writers on several hosts.

``obstore`` is imported only when an object store is opened (the ``s3``
extra installs it); a ``PosixStore`` needs nothing beyond the standard
library.
"""

from __future__ import annotations

from ._api import DEFAULT_LIST_LIMIT as DEFAULT_LIST_LIMIT
from ._api import MAX_KEY_BYTES as MAX_KEY_BYTES
from ._api import Store as Store
from ._api import Versioned as Versioned
from ._api import check_key as check_key
from ._errors import StoreConflictError as StoreConflictError
from ._errors import StoreError as StoreError
from ._errors import StoreKeyError as StoreKeyError
from ._errors import StoreLimitError as StoreLimitError
from ._errors import StoreLocationError as StoreLocationError
from ._errors import StoreObjectError as StoreObjectError
from ._errors import StoreUnavailableError as StoreUnavailableError
from ._object import ObjectStore as ObjectStore
from ._open import is_url as is_url
from ._open import local_path as local_path
from ._open import open_store as open_store
from ._posix import PosixStore as PosixStore

__all__ = [
    "DEFAULT_LIST_LIMIT",
    "MAX_KEY_BYTES",
    "ObjectStore",
    "PosixStore",
    "Store",
    "StoreConflictError",
    "StoreError",
    "StoreKeyError",
    "StoreLimitError",
    "StoreLocationError",
    "StoreObjectError",
    "StoreUnavailableError",
    "Versioned",
    "check_key",
    "is_url",
    "local_path",
    "open_store",
]
