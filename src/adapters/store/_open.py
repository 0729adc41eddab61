"""``open_store``: a store from a URL or a path."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from ._api import Store
from ._errors import StoreLocationError
from ._object import connect
from ._posix import PosixStore

#: Each request's bound (a part of a checkpoint is one PUT), and the connect's.
REQUEST_TIMEOUT_S: Final = 120.0
CONNECT_TIMEOUT_S: Final = 5.0
#: Transient failures are retried up to this many times and this long
#: after the first attempt.
MAX_RETRIES: Final = 6
RETRY_DEADLINE_S: Final = 60.0
_OBJECT_SCHEMES: Final = ("gs", "az", "azure", "abfs", "abfss", "adl")
_TRUE: Final = ("1", "true", "yes", "on")


def is_url(location: object) -> bool:
    """Whether ``location`` is a URL (``scheme://...``) rather than a path."""
    return isinstance(location, str) and "://" in location


def local_path(location: str | os.PathLike[str]) -> Path | None:
    """The directory a path or a ``file://`` URL names, ``None`` for
    another URL. Raises ``StoreLocationError`` (a ``ValueError``) for an
    empty location and a ``file://`` URL with a host or without a path
    (neither may fall back to the working directory), a NUL byte, and a URL
    with a query or a fragment."""
    if not is_url(location):
        if not isinstance(location, (str, os.PathLike)):
            raise TypeError(f"a store location is a path or a URL, got {type(location).__name__}")
        text = os.fspath(location)
        if text == "":
            raise StoreLocationError("''", None, "an empty location names no store")
        if "\0" in str(text):
            raise StoreLocationError(repr(text)[:200], None, "a NUL byte names no path")
        return Path(location)
    assert isinstance(location, str)
    parts = urlsplit(location)
    if "\0" in location:
        raise StoreLocationError(repr(location)[:200], None, "a NUL byte names no store")
    if parts.query or parts.fragment or location.rstrip("/").endswith(("?", "#")):
        # Nothing reads them, and the prefix they cut off would put the
        # checkpoints and the journal where other runs' go.
        raise StoreLocationError(
            location[:200], None, "a store URL takes no query ('?') or fragment ('#')"
        )
    if parts.scheme.lower() != "file":
        return None
    if parts.netloc not in ("", "localhost"):
        raise StoreLocationError(
            location[:200], None, f"a file:// URL names a local path, not host {parts.netloc!r}"
        )
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise StoreLocationError(location[:200], None, "a file:// URL needs an absolute path")
    return Path(path)


def open_store(
    location: str | os.PathLike[str],
    *,
    endpoint: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    region: str | None = None,
    allow_http: bool | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    max_retries: int = MAX_RETRIES,
    retry_deadline_s: float = RETRY_DEADLINE_S,
) -> Store:
    """The store at ``location``.

    - A path, or ``file:///path``: a ``PosixStore`` over that directory.
    - ``s3://bucket/prefix``: an ``ObjectStore`` over that bucket, every
      key under ``prefix/``. The endpoint, credentials, region and whether
      plain HTTP is allowed come from the keyword arguments, else from the
      standard environment variables ``AWS_ENDPOINT_URL`` (or
      ``AWS_ENDPOINT_URL_S3``), ``AWS_ACCESS_KEY_ID``,
      ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or
      ``AWS_DEFAULT_REGION``) and ``AWS_ALLOW_HTTP`` (``true``/``1``); with
      an endpoint, path-style requests are used (what S3-compatible servers
      such as SeaweedFS and MinIO expect).
    - ``gs://bucket/prefix``, ``az://container/prefix`` (and ``abfs://``,
      ``azure://``): delegated to ``obstore.store.from_url``, which reads
      those clouds' own environment variables. Not tested here (only S3,
      against a real SeaweedFS server, is).

    Every request is bounded by ``timeout_s`` (``connect_timeout_s`` to
    connect) and transient failures are retried at most ``max_retries``
    times within ``retry_deadline_s``. Raises ``StoreLocationError`` (a
    ``ValueError``) for a location that names no store (see ``local_path``;
    another scheme, an S3 URL without a bucket or with a ``..`` prefix),
    and ``ImportError`` naming the ``s3`` extra when ``obstore`` is not
    installed."""
    local = local_path(location)
    if local is not None:
        return PosixStore(local)
    assert isinstance(location, str)
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    if scheme not in ("s3", "s3a", *_OBJECT_SCHEMES):
        raise StoreLocationError(
            location[:200], None, "not a path, file://, s3://, gs:// or az:// URL"
        )
    client: Any = {
        "timeout": timedelta(seconds=timeout_s),
        "connect_timeout": timedelta(seconds=connect_timeout_s),
    }
    retry: Any = {"max_retries": max_retries, "retry_deadline_s": retry_deadline_s}
    if scheme in _OBJECT_SCHEMES:
        if not parts.netloc:
            raise StoreLocationError(location[:200], None, "the URL names no bucket or container")
        return connect(location, client=client, **retry)
    bucket = parts.netloc
    if not bucket:
        raise StoreLocationError(location[:200], None, "an s3:// URL names a bucket")
    prefix = parts.path.strip("/")
    if prefix and any(c in ("", ".", "..") for c in prefix.split("/")):
        raise StoreLocationError(
            location[:200], None, "an empty, '.' or '..' component in the prefix"
        )
    env = os.environ.get
    endpoint = endpoint or env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL")
    if allow_http is None:
        allow_http = env("AWS_ALLOW_HTTP", "").lower() in _TRUE
    client["allow_http"] = allow_http
    config: dict[str, Any] = {}
    for name, value in (
        ("endpoint", endpoint),
        ("access_key_id", access_key_id or env("AWS_ACCESS_KEY_ID")),
        ("secret_access_key", secret_access_key or env("AWS_SECRET_ACCESS_KEY")),
        ("token", session_token or env("AWS_SESSION_TOKEN")),
        ("region", region or env("AWS_REGION") or env("AWS_DEFAULT_REGION")),
    ):
        if value:
            config[name] = value
    if endpoint:
        config["virtual_hosted_style_request"] = False
    return connect(
        location.rstrip("/"), client=client, s3=(bucket, prefix or None, config), **retry
    )

