"""The envelope of an adapter's saved state (torchdata ``Stateful`` style).

A collector's, a service's and a replay buffer's ``state_dict`` is a dict of
JSON types tagged with its format and version and holding exactly its keys.
``check_state`` is the one reader of that envelope: a typed error for
anything else, naming what was being read, with every value it quotes
bounded, so that a hostile state costs a message of bounded size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from frontier_core import CheckpointCorruptError, CheckpointVersionError
from frontier_core._errors import shown, shown_keys

KEY_FORMAT = "format"
KEY_VERSION = "version"


def check_state(
    state: object, *, what: str, fmt: str, version: int, keys: frozenset[str]
) -> Mapping[str, Any]:
    """``state`` if it is a dict of format ``fmt``, version ``version`` and
    exactly ``keys``; else ``CheckpointCorruptError`` (not a dict, other
    keys) or ``CheckpointVersionError`` (another format or version), its
    message starting with ``what`` ("collector state", ...)."""
    if not isinstance(state, Mapping):
        raise CheckpointCorruptError(f"{what} must be a dict, got {type(state).__name__}")
    found = (state.get(KEY_FORMAT), state.get(KEY_VERSION))
    if found != (fmt, version):
        raise CheckpointVersionError(
            f"{what} has format {shown(found[0])} version {shown(found[1], 20)}; "
            f"this library reads {fmt!r} version {version}"
        )
    if set(state) != keys:
        raise CheckpointCorruptError(
            f"{what} has keys {shown_keys(state)}, expected {sorted(keys)}"
        )
    return state
