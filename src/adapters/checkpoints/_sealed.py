"""Sealed JSON documents (a manifest, a lineage file): the SHA-256 that
seals one, the checks of its format, version and keys, bounded parsing."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from .._errors import CheckpointFileError, CheckpointFileVersionError, DatasetChangedError

HEX64: Final = re.compile(r"^[0-9a-f]{64}$")


def is_int(value: object) -> bool:
    return type(value) is int


def digest(obj: Mapping[str, Any]) -> str:
    """The SHA-256 of ``obj`` without its ``sha256`` key, canonically encoded."""
    body = {k: v for k, v in obj.items() if k != "sha256"}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def sealed_bytes(doc: Mapping[str, Any]) -> bytes:
    """``doc`` sealed with its SHA-256, as a lineage file holds it."""
    sealed = {**doc, "sha256": digest(doc)}
    return (json.dumps(sealed, sort_keys=True, indent=1) + "\n").encode()


def parse_json(data: bytes, shown: Path | str, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CheckpointFileError(shown, f"{what}: not UTF-8 text") from None
    except RecursionError:
        raise CheckpointFileError(shown, f"{what}: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and ints past the digit limit
        raise CheckpointFileError(shown, f"{what}: {exc}") from None


def check_sealed(
    shown: Path | str,
    doc: dict[str, Any],
    fmt: str,
    version: int,
    keys: frozenset[str],
    also: tuple[int, ...] = (),
) -> None:
    """Check a sealed document's format and version (``version``, or one of
    ``also``), then its keys (another version may have others), then its
    SHA-256 (``digest``)."""
    found = doc.get("version")
    if doc.get("format") != fmt or not is_int(found) or found not in (version, *also):
        older = f" (and versions {list(also)})" if also else ""
        raise CheckpointFileVersionError(
            shown,
            f"format {str(doc.get('format'))[:80]!r} version {str(found)[:20]!r}; "
            f"this library reads {fmt!r} version {version}{older}",
        )
    if set(doc) != keys:
        raise CheckpointFileError(shown, f"has keys {sorted(doc)[:20]}, expected {sorted(keys)}")
    if doc["sha256"] != digest(doc):
        raise CheckpointFileError(shown, "corrupted: its SHA-256 does not match its content")


def check_fingerprint(shown: Path | str, expected: str | None, saved: str) -> None:
    """Raise ``DatasetChangedError`` naming ``shown`` unless the checkpoint
    was saved for the ``expected`` dataset (``None``: not checked)."""
    if expected is not None and saved != expected:
        raise DatasetChangedError(shown, expected=expected, found=saved)
