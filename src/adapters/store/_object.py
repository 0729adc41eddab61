"""``ObjectStore``: the store interface over an object store (S3, GCS,
Azure) through ``obstore``, imported only here and only when one is opened."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ._api import DEFAULT_LIST_LIMIT, Versioned, check_key, check_limit
from ._errors import (
    StoreConflictError,
    StoreError,
    StoreLimitError,
    StoreLocationError,
    StoreObjectError,
    StoreUnavailableError,
)

_T = TypeVar("_T")


class ObjectStore:
    """The store interface over an ``obstore`` store (``open_store`` makes
    one from a URL). Objects are immutable: ``create`` is a put with
    ``mode="create"`` (``If-None-Match: *``), ``swap`` a put with
    ``mode={"e_tag": expected}`` (``If-Match``); nothing is renamed,
    copied or appended. The version is the object's ETag.

    Every request is bounded in time by the client options the store was
    built with (``open_store``: a per-request timeout and a connect
    timeout) and retried here (``obstore``'s own retries are off) for
    transient failures (a 5xx, a dropped or refused connection, a timeout)
    with jittered exponential backoff, at most ``max_retries`` times within
    ``retry_deadline_s``; what still fails is a ``StoreUnavailableError``.
    A conditional write that was retried after an attempt with no answer
    and then finds its own bytes in place counts as success (that attempt
    landed); a first attempt refused is always a conflict. So a write
    whose answer was lost is not reported as lost, and writers whose
    bytes might coincide should still write bytes unique to a writer (a
    checkpoint's ``LATEST`` names a fresh random directory)."""

    def __init__(
        self, store: Any, *, where: str, max_retries: int = 6, retry_deadline_s: float = 60.0
    ) -> None:
        self._store = store
        self._where = where
        self._max_retries = max_retries
        self._retry_deadline_s = retry_deadline_s

    def _call(self, key: str | None, fn: Callable[[], _T]) -> _T:
        """``fn()``, retried for transient failures (a 5xx, a dropped or
        refused connection, a timeout) with exponential backoff, at most
        ``max_retries`` times and within ``retry_deadline_s``. What a
        store answers on purpose (absent, exists, precondition failed) is
        raised as is; a refusal (permission, authentication, a bad
        configuration) and the last transient failure become
        ``StoreUnavailableError``."""
        from obstore.exceptions import (
            AlreadyExistsError,
            InvalidPathError,
            NotFoundError,
            NotSupportedError,
            PermissionDeniedError,
            PreconditionError,
            UnauthenticatedError,
            UnknownConfigurationKeyError,
        )

        deadline = time.monotonic() + self._retry_deadline_s
        delay = 0.2
        attempt = 0
        while True:
            try:
                return fn()
            except (AlreadyExistsError, PreconditionError, NotFoundError, FileNotFoundError):
                raise
            except (
                InvalidPathError,
                NotSupportedError,
                PermissionDeniedError,
                UnauthenticatedError,
                UnknownConfigurationKeyError,
            ) as exc:
                raise self._failed(key, exc) from None
            except StoreError:
                raise
            except Exception as exc:
                attempt += 1
                if attempt > self._max_retries or time.monotonic() + delay > deadline:
                    raise self._failed(key, exc) from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)

    @property
    def where(self) -> str:
        return self._where

    def __repr__(self) -> str:
        return f"ObjectStore({self._where!r})"

    def _failed(self, key: str | None, exc: Exception) -> StoreError:
        return StoreUnavailableError(self._where, key, f"{type(exc).__name__}: {exc}"[:500])

    def get(self, key: str, *, max_bytes: int) -> bytes | None:
        got = self.get_versioned(key, max_bytes=max_bytes)
        return None if got is None else got.data

    def get_versioned(self, key: str, *, max_bytes: int) -> Versioned | None:
        import obstore
        from obstore.exceptions import NotFoundError

        check_key(self._where, key)
        check_limit(max_bytes, "max_bytes")
        try:
            result = obstore.get(self._store, key)
            meta = result.meta
            size = meta["size"]
            if size > max_bytes:
                # The body is never read: dropping the result closes its stream.
                raise StoreLimitError(
                    self._where, key, f"{size} bytes, more than the {max_bytes} allowed"
                )
            data = bytes(result.bytes())
        except (NotFoundError, FileNotFoundError):
            return None
        except StoreError:
            raise
        except Exception as exc:
            raise self._failed(key, exc) from None
        if len(data) != size:
            raise StoreObjectError(self._where, key, "changed size while being read")
        return Versioned(data, self._etag(key, meta.get("e_tag")))

    def _etag(self, key: str, e_tag: object) -> str:
        if not isinstance(e_tag, str) or not e_tag:
            raise StoreUnavailableError(
                self._where, key, "the store gave no ETag: it cannot compare-and-swap"
            )
        return e_tag

    def head(self, key: str) -> str | None:
        import obstore
        from obstore.exceptions import NotFoundError

        check_key(self._where, key)
        try:
            meta = self._call(key, lambda: obstore.head(self._store, key))
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as exc:
            raise self._failed(key, exc) from None
        return self._etag(key, meta.get("e_tag"))

    def create(self, key: str, data: bytes) -> str:
        return self.swap(key, data, expected=None)

    def swap(self, key: str, data: bytes, *, expected: str | None) -> str:
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

        check_key(self._where, key)
        if expected is not None and (not isinstance(expected, str) or not expected):
            raise TypeError(f"expected must be a version (a str) or None, got {expected!r}")
        data = bytes(data)
        mode: Any = "create" if expected is None else {"e_tag": expected}
        attempts = 0

        def put() -> Any:
            nonlocal attempts
            attempts += 1
            return obstore.put(self._store, key, data, mode=mode, use_multipart=False)

        try:
            result = self._call(key, put)
        except (AlreadyExistsError, PreconditionError, NotFoundError, FileNotFoundError):
            if attempts > 1:
                # An earlier attempt failed without an answer and may have
                # landed: our own bytes in place are that attempt's.
                try:
                    got = self.get_versioned(key, max_bytes=len(data))
                except StoreLimitError:
                    got = None
                if got is not None and got.data == data:
                    return got.version
            what = (
                "exists already (create-if-absent lost)"
                if expected is None
                else "moved: its version is not the one expected (swap lost)"
            )
            raise StoreConflictError(self._where, key, what) from None
        except StoreError:
            raise
        return self._etag(key, result.get("e_tag"))

    def list(self, prefix: str = "", *, limit: int = DEFAULT_LIST_LIMIT) -> list[str]:
        import obstore

        check_key(self._where, prefix, prefix=True)
        check_limit(limit, "limit")

        def listing() -> list[str]:
            keys: list[str] = []
            for chunk in obstore.list(self._store, prefix or None, chunk_size=1000):
                keys.extend(meta["path"] for meta in chunk)
                if len(keys) > limit:
                    raise StoreLimitError(self._where, prefix or None, f"more than {limit} keys")
            return keys

        try:
            keys = self._call(prefix or None, listing)
        except StoreError:
            raise
        except Exception as exc:
            raise self._failed(prefix or None, exc) from None
        return sorted(keys)

    def delete(self, key: str) -> None:
        import obstore
        from obstore.exceptions import NotFoundError

        check_key(self._where, key)
        try:
            self._call(key, lambda: obstore.delete(self._store, key))
        except (NotFoundError, FileNotFoundError):
            return
        except Exception as exc:
            raise self._failed(key, exc) from None

    def delete_prefix(self, prefix: str, *, limit: int = DEFAULT_LIST_LIMIT) -> None:
        check_key(self._where, prefix)
        for key in self.list(prefix, limit=limit):
            self.delete(key)


def connect(
    location: str,
    *,
    client: Any,
    max_retries: int,
    retry_deadline_s: float,
    s3: tuple[str, str | None, dict[str, Any]] | None = None,
) -> ObjectStore:
    """An ``ObjectStore`` at ``location``: an ``S3Store`` of ``s3`` (bucket,
    prefix, its configuration) when given, else ``obstore``'s ``from_url``.
    Raises ``ImportError`` naming the ``s3`` extra without ``obstore``."""
    try:
        import obstore.exceptions
        import obstore.store
    except ImportError as exc:
        raise ImportError(
            f"{location[:200]} needs obstore: pip install 'frontier-core[s3]'"
        ) from exc
    # The retries are ObjectStore's own (it must know whether a conditional
    # write was retried); obstore's are off.
    retry: Any = {"max_retries": 0}
    try:
        if s3 is None:
            inner: Any = obstore.store.from_url(
                location, client_options=client, retry_config=retry
            )
        else:
            bucket, prefix, config = s3
            inner = obstore.store.S3Store(
                bucket, prefix=prefix, client_options=client, retry_config=retry, **config
            )
    except (ValueError, obstore.exceptions.BaseError) as exc:
        # Building the client parses and configures; it sends nothing.
        raise StoreLocationError(location[:200], None, f"not a store URL ({exc})") from None
    return ObjectStore(
        inner, where=location, max_retries=max_retries, retry_deadline_s=retry_deadline_s
    )
