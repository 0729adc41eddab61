"""What the sample-level loop's tests share, on any engine: a sink that
keeps the groups it takes (and can refuse some), the exception a test
"kill" raises, and the engine prompt of a row continued from a prefix."""

from __future__ import annotations

from typing import Any

from frontier_adapters.rollout import Group, continued_prompt


class Sink:
    """Keeps every group it takes, once each; refuses (raises on) the
    ordinals in ``refuse``, as a trainer that rejects a group does."""

    def __init__(self, refuse: set[int] | None = None) -> None:
        self.groups: dict[int, Group] = {}
        self.refuse = refuse or set()

    def add(self, group: Group) -> None:
        if group.ordinal in self.refuse:
            raise RuntimeError("the trainer refused the group")
        assert group.ordinal not in self.groups
        self.groups[group.ordinal] = group

    def __len__(self) -> int:
        return len(self.groups)


class Crash(Exception):
    """Raised from an observer to stop a loop at a chosen moment: the kill."""


def prompt_of(row: list[int], prefix: tuple[int, ...]) -> dict[str, Any]:
    """A row of token ids continued from ``prefix``: vLLM's ``TokensPrompt``."""
    return continued_prompt(row, prefix)
