"""The bindings' collectors as the rollout loop types them, checked by
``mypy --strict`` over ``src`` (``scripts/test.sh``) and run by
``tests/adapters/rollout/test_loop_schedules.py``: a rank's
``RankCollector`` drives ``RolloutLoop``'s group schedule as
docs/elastic.md shows (it is a ``rollout.Collector``, with no sibling
methods), and a ``StreamCollector`` is a ``SiblingCollector``. A change
that breaks either fails the type check, not a user's."""

from __future__ import annotations

from typing import Any

from .._collector import StreamCollector
from ..rollout import AsyncEngine, GroupSink, RolloutLoop, SiblingCollector
from ..torch import RankCollector


def rank_rollout(
    collector: RankCollector, engine: AsyncEngine, sink: GroupSink, **kw: Any
) -> RolloutLoop:
    """A rollout loop over a rank's collector (the group schedule)."""
    return RolloutLoop(collector, engine, sink, schedule="group", **kw)


def sibling_collector(collector: StreamCollector) -> SiblingCollector:
    """A ``StreamCollector``, as ``Schedule.SIBLING`` needs it."""
    return collector
