"""A checkpoint's parts: their names, how they are encoded (JSON, or a
``PartCodec`` a binding gives) and how a saved part is read back verified."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, Final

import attrs

from .._errors import CheckpointFileError
from ..store import Store, StoreLimitError, StoreObjectError
from . import _fs
from ._sealed import parse_json

JSON_SUFFIX: Final = "json"
#: A part's name without its suffix: what ``json_parts`` and the codec's
#: parts are keyed by.
_STEM: Final = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_SUFFIX: Final = re.compile(r"^[a-z0-9]{1,16}$")
#: Any part name of the format's shape, whatever its suffix.
_ANY_PART: Final = re.compile(rf"^{_STEM}\.([a-z0-9]{{1,16}})$")


def _check_suffix(_: object, __: object, suffix: str) -> None:
    if not isinstance(suffix, str) or not _SUFFIX.match(suffix) or suffix == JSON_SUFFIX:
        raise ValueError(
            f"a codec's suffix is 1 to 16 lowercase letters or digits, not 'json': {suffix!r}"
        )


@attrs.frozen
class PartCodec:
    """How the parts that are not JSON are stored: as files ``name.suffix``
    whose bytes ``encode(value)`` makes and ``decode(data)`` reads back.

    ``decode`` is given bytes whose size and SHA-256 were verified against
    the manifest, but it must still treat them as untrusted (a forger can
    reseal a manifest): it loads data, never code. Whatever it raises
    becomes a ``CheckpointFileError`` naming the part ("cannot be
    loaded"). The torch binding's codec stores ``.pt`` parts with
    ``torch.save`` and reads them with ``torch.load(weights_only=True)``."""

    suffix: str = attrs.field(validator=_check_suffix)
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


def part_pattern(codec: PartCodec | None) -> re.Pattern[str]:
    """The part names a checkpoint read or written with ``codec`` may hold."""
    suffixes = JSON_SUFFIX if codec is None else f"{JSON_SUFFIX}|{re.escape(codec.suffix)}"
    return re.compile(rf"^{_STEM}\.({suffixes})$")


def bad_part_name(name: str, codec: PartCodec | None) -> str:
    """What is wrong with a part name ``part_pattern(codec)`` refuses."""
    m = _ANY_PART.match(name)
    if m is None or m.group(1) == JSON_SUFFIX:
        return f"bad part name {name[:130]!r}"
    return f"bad part name {name[:130]!r}: no codec given reads .{m.group(1)} parts"


def encode_json(value: Any) -> bytes:
    """A JSON part's bytes."""
    return json.dumps(value, sort_keys=True, allow_nan=False).encode()


def read_part(name: str, *, dir_fd: int, shown: Path, size: int, sha256: str) -> bytes:
    """The bytes of part ``name`` of a checkpoint directory, at the ``size``
    and with the ``sha256`` saved for it."""
    try:
        data = _fs.read_file(name, dir_fd=dir_fd, shown=shown, size=size)
    except FileNotFoundError:
        raise CheckpointFileError(shown, "missing part of the checkpoint") from None
    return check_part(data, shown, size=size, sha256=sha256)


def fetch_part(store: Store, key: str, shown: str, *, size: int, sha256: str) -> bytes:
    """The bytes of part ``key`` of a store, at the ``size`` and with the
    ``sha256`` saved for it; ``CheckpointFileError`` naming ``shown`` for
    one missing, longer (refused before its body is read), shorter or
    other, or something that is not an object at its key."""
    try:
        data = store.get(key, max_bytes=size)
    except StoreLimitError:
        raise CheckpointFileError(shown, f"too long: more than {size} bytes saved") from None
    except StoreObjectError as exc:
        raise CheckpointFileError(shown, exc.reason) from None
    if data is None:
        raise CheckpointFileError(shown, "missing part of the checkpoint")
    return check_part(data, shown, size=size, sha256=sha256)


def check_part(data: bytes, shown: Path | str, *, size: int, sha256: str) -> bytes:
    """``data`` if it has the ``size`` and ``sha256`` saved for a part."""
    if len(data) != size:
        state = "truncated" if len(data) < size else "too long"
        raise CheckpointFileError(shown, f"{state}: {len(data)} bytes, {size} bytes saved")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise CheckpointFileError(shown, "corrupted: SHA-256 differs from the saved one")
    return data


def decode_part(data: bytes, shown: Path | str, codec: PartCodec | None) -> Any:
    """A part's content by its name's suffix: a ``.json`` part parsed, a
    part of the codec's suffix decoded by it."""
    suffix = PurePosixPath(str(shown)).suffix
    if suffix == f".{JSON_SUFFIX}":
        return parse_json(data, shown, "not JSON")
    if codec is None or suffix != f".{codec.suffix}":
        raise CheckpointFileError(shown, f"no codec given reads {suffix} parts")
    try:
        return codec.decode(data)
    except Exception as exc:
        raise CheckpointFileError(shown, f"cannot be loaded: {exc}") from None
