"""The replay buffer between the rollout loop and the trainer.

``ReplayBuffer`` holds landed groups keyed by ordinal, hands the trainer the
oldest first (lowest ordinal: the cut follows training closely), and evicts
the groups whose policy version is more than ``max_trajectory_age_steps``
behind the step about to train; the caller reports those to the collector
(``evicted``), whose ledger requeues or drops them.

Its state follows torchdata's ``Stateful``: ``state_dict()`` returns a dict
of JSON types (given JSON rows), tagged with a format and a version like the
collector's, saved in the same checkpoint as the collector's state;
``load_state_dict`` reads it strictly (every key named below, no other) and
raises the core's ``CheckpointVersionError`` for another format or version
and ``CheckpointCorruptError`` for a missing, unknown or ill-typed key,
leaving the buffer unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from frontier_core import CheckpointCorruptError
from frontier_core._errors import shown, shown_keys

from .._state import KEY_FORMAT, KEY_VERSION, check_state
from ._loop import Group

FORMAT: Final = "frontier_adapters.replay_buffer"
VERSION: Final = 1
#: The groups, ascending by ordinal, each a dict with the ``GROUP_KEYS``.
KEY_GROUPS: Final = "groups"
_KEYS: Final = frozenset({KEY_FORMAT, KEY_VERSION, KEY_GROUPS})

#: The keys of one saved group (``Group``'s fields).
KEY_ORDINAL: Final = "ordinal"
KEY_ROW: Final = "row"
KEY_COMPLETIONS: Final = "completions"
KEY_FINISH_REASONS: Final = "finish_reasons"
KEY_POLICY_VERSION: Final = "policy_version"
KEY_ATTEMPT: Final = "attempt"
KEY_REQUEST_ID: Final = "request_id"
GROUP_KEYS: Final = frozenset(
    {
        KEY_ORDINAL,
        KEY_ROW,
        KEY_COMPLETIONS,
        KEY_FINISH_REASONS,
        KEY_POLICY_VERSION,
        KEY_ATTEMPT,
        KEY_REQUEST_ID,
    }
)


def _int(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise CheckpointCorruptError(
            f"replay buffer state: {what} must be an int >= 0, got {shown(value)}"
        )
    return value


def _list(value: object, what: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise CheckpointCorruptError(
            f"replay buffer state: {what} must be a list, got {type(value).__name__}"
        )
    return value


def _group(d: object, index: int) -> Group:
    where = f"groups[{index}]"
    if not isinstance(d, Mapping):
        raise CheckpointCorruptError(
            f"replay buffer state: {where} must be a dict, got {type(d).__name__}"
        )
    if set(d) != GROUP_KEYS:
        missing = sorted(GROUP_KEYS - set(d))
        raise CheckpointCorruptError(
            f"replay buffer state: {where} has missing keys {missing} and unknown keys "
            f"{shown_keys(set(d) - GROUP_KEYS)}; expected {sorted(GROUP_KEYS)}"
        )
    ordinal = _int(d[KEY_ORDINAL], f"{where}.{KEY_ORDINAL}")
    where = f"{where} (ordinal {ordinal})"
    completions = tuple(
        tuple(_int(t, f"{where}.{KEY_COMPLETIONS} token") for t in _list(c, f"{where} completion"))
        for c in _list(d[KEY_COMPLETIONS], f"{where}.{KEY_COMPLETIONS}")
    )
    reasons = _list(d[KEY_FINISH_REASONS], f"{where}.{KEY_FINISH_REASONS}")
    if not all(isinstance(r, str) for r in reasons) or len(reasons) != len(completions):
        raise CheckpointCorruptError(
            f"replay buffer state: {where}.{KEY_FINISH_REASONS} must hold one string per "
            f"completion ({len(completions)}), got {shown(reasons)}"
        )
    version = d[KEY_POLICY_VERSION]
    if type(version) is not int:
        raise CheckpointCorruptError(
            f"replay buffer state: {where}.{KEY_POLICY_VERSION} must be an int, "
            f"got {shown(version)}"
        )
    request_id = d[KEY_REQUEST_ID]
    if not isinstance(request_id, str):
        raise CheckpointCorruptError(
            f"replay buffer state: {where}.{KEY_REQUEST_ID} must be a string, "
            f"got {shown(request_id)}"
        )
    return Group(
        ordinal=ordinal,
        row=d[KEY_ROW],
        completions=completions,
        finish_reasons=tuple(reasons),
        version=version,
        attempt=_int(d[KEY_ATTEMPT], f"{where}.{KEY_ATTEMPT}"),
        request_id=request_id,
    )


class ReplayBuffer:
    """Landed groups by ordinal, with an age limit in training steps."""

    def __init__(self, max_trajectory_age_steps: int) -> None:
        if max_trajectory_age_steps < 0:
            raise ValueError(
                f"max_trajectory_age_steps must be >= 0, got {max_trajectory_age_steps}"
            )
        self.max_age = max_trajectory_age_steps
        self._groups: dict[int, Group] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def __contains__(self, ordinal: object) -> bool:
        return ordinal in self._groups

    @property
    def ordinals(self) -> list[int]:
        return sorted(self._groups)

    def add(self, group: Group) -> None:
        if group.ordinal in self._groups:
            raise ValueError(f"ordinal {group.ordinal} is already buffered")
        self._groups[group.ordinal] = group

    def stale(self, step: int) -> list[int]:
        """Ordinals too old to train at ``step``."""
        return sorted(o for o, g in self._groups.items() if step - g.version > self.max_age)

    def evict(self, ordinals: Iterable[int]) -> None:
        for o in ordinals:
            del self._groups[o]

    def take(self, k: int) -> list[Group]:
        """The ``k`` oldest groups (fewer if the buffer holds fewer), removed."""
        chosen = sorted(self._groups)[:k]
        return [self._groups.pop(o) for o in chosen]

    def state_dict(self) -> dict[str, Any]:
        """The buffered groups, ascending by ordinal, as JSON types (rows
        are saved as they are: JSON rows keep the state JSON)."""
        return {
            KEY_FORMAT: FORMAT,
            KEY_VERSION: VERSION,
            KEY_GROUPS: [
                {
                    KEY_ORDINAL: g.ordinal,
                    KEY_ROW: g.row,
                    KEY_COMPLETIONS: [list(c) for c in g.completions],
                    KEY_FINISH_REASONS: list(g.finish_reasons),
                    KEY_POLICY_VERSION: g.version,
                    KEY_ATTEMPT: g.attempt,
                    KEY_REQUEST_ID: g.request_id,
                }
                for g in (self._groups[o] for o in sorted(self._groups))
            ],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Replace the buffered groups with those of ``state_dict`` (from
        ``state_dict()``, possibly through JSON). Raises
        ``CheckpointVersionError`` for another format or version and
        ``CheckpointCorruptError`` for a missing, unknown or ill-typed key or
        an ordinal saved twice; the buffer is unchanged then."""
        state_dict = check_state(
            state_dict, what="replay buffer state", fmt=FORMAT, version=VERSION, keys=_KEYS
        )
        groups: dict[int, Group] = {}
        for index, d in enumerate(_list(state_dict[KEY_GROUPS], KEY_GROUPS)):
            group = _group(d, index)
            if group.ordinal in groups:
                raise CheckpointCorruptError(
                    f"replay buffer state: ordinal {group.ordinal} is saved twice"
                )
            groups[group.ordinal] = group
        self._groups = groups
