"""The replay buffer between the rollout loop and the trainer.

``ReplayBuffer`` holds landed groups keyed by ordinal, hands the trainer the
oldest first (lowest ordinal: the cut follows training closely), and evicts
the groups whose policy version is more than ``max_trajectory_age_steps``
behind the step about to train; the caller reports those to the collector
(``evicted``), whose ledger requeues or drops them. Its ``state_dict`` is
JSON and is saved in the same checkpoint as the collector's state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._loop import Group


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

    def state_dict(self) -> list[dict[str, Any]]:
        return [
            {
                "ordinal": g.ordinal,
                "row": g.row,
                "completions": [list(c) for c in g.completions],
                "finish_reasons": list(g.finish_reasons),
                "version": g.version,
                "attempt": g.attempt,
                "request_id": g.request_id,
            }
            for g in (self._groups[o] for o in sorted(self._groups))
        ]

    def load_state_dict(self, state: Sequence[Mapping[str, Any]]) -> None:
        self._groups = {}
        for d in state:
            self.add(
                Group(
                    ordinal=int(d["ordinal"]),
                    row=d["row"],
                    completions=tuple(tuple(int(t) for t in c) for c in d["completions"]),
                    finish_reasons=tuple(str(r) for r in d["finish_reasons"]),
                    version=int(d["version"]),
                    attempt=int(d["attempt"]),
                    request_id=str(d["request_id"]),
                )
            )
