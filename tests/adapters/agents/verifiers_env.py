"""A user's verifiers 0.4.0 environment, unchanged by the binding: a Task
whose Toolset adds to cells of the project's tool server (a keyed sandbox
that executes each idempotency key at most once and records it). The tool
declares ``call_key``: the endpoint fills it with the call's key. A tool's
answer is the JSON of the tool server's answer.

Importable as a module (verifiers starts each Toolset as ``python -m`` of
its module, hence the ``run()`` line at the end). ``FRONTIER_TOOL_URL`` is
the tool server; with ``FRONTIER_VF_STALL`` set to a path, the first call
executes, creates that file and stalls (the test kills the life there)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from frontier_adapters.verify.tool_server import call
from pydantic import Field

from frontier_core.journal import SiblingState

#: How long the stalled call waits for its kill (bounded; the test kills first).
STALL = 90.0


async def _stall(key: str) -> None:
    """The first call of a life run with ``FRONTIER_VF_STALL``: executed,
    not answered (the test SIGKILLs the life here)."""
    stall = os.environ.get("FRONTIER_VF_STALL")
    if stall and not Path(stall).exists():
        Path(stall).write_text(key)
        await asyncio.sleep(STALL)


class KvState(vf.State):
    keys: list[str] = Field(default_factory=list)  # the keys this episode's answered calls carried


class KvToolset(vf.Toolset[vf.ToolsetConfig, KvState]):
    TOOL_PREFIX = None

    @vf.tool
    async def add(self, k: str, v: int, call_key: str) -> str:
        """Add v to cell k; answers the cell's new value."""
        answer = await asyncio.to_thread(
            call, os.environ["FRONTIER_TOOL_URL"], call_key, "add", {"k": k, "v": v}
        )
        await _stall(call_key)
        self.state.keys.append(call_key)
        return json.dumps(answer)

    @vf.tool
    async def get(self, k: str, call_key: str) -> str:
        """Read cell k."""
        answer = await asyncio.to_thread(
            call, os.environ["FRONTIER_TOOL_URL"], call_key, "get", {"k": k}
        )
        await _stall(call_key)
        self.state.keys.append(call_key)
        return json.dumps(answer)


class KvTask(vf.Task[vf.TaskData, KvState]):
    @classmethod
    def toolsets(cls, config: Any) -> list[Any]:
        return [KvToolset(vf.ToolsetConfig())]

    @vf.reward
    async def answered(self, trace: Any) -> float:
        return float(len(trace.state.keys))


def restore(trace: Any, episode: SiblingState) -> None:
    """Put the durable answered calls' keys back into the rollout's state."""
    trace.state.keys = [t.call.key for t in episode.turns if t.call and t.answer is not None]


if __name__ == "__main__":
    KvToolset.run()
