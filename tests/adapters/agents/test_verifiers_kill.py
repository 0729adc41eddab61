"""A real verifiers 0.4.0 rollout (its harness program and MCP tool server
as subprocesses) over ``serve_policy``, SIGKILLed with its whole process
tree mid-episode, inside a tool call whose turn is journaled and whose
execution the tool server recorded; then resumed: the tool server's own
record shows every key executed once, and the resumed life generated only
the turns after the last durable one (the pending turn answered from the
journal, its call re-issued under its key and answered from the tool's
record). The lives run the example of docs/agents.md as written. Runs in
.venv-agents (scripts/setup-agents.sh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ._need_verifiers import need_verifiers

need_verifiers()

from frontier_adapters.verify.tool_server import ToolServer  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
#: Seconds a life may take (a rollout is ~25 s on 2 shared cores).
LIFE_TIMEOUT = 240.0


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc), parents first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _kill_tree(proc: subprocess.Popen[bytes]) -> int:
    """SIGKILL ``proc`` and every descendant (some start their own
    sessions); wait for ``proc`` (bounded). The number of processes killed."""
    pids = _tree(proc.pid)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)
    return len(pids)


def _env(tool: ToolServer, stall: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),  # uv, for the harness
        "PYTHONPATH": str(REPO),
        "FRONTIER_TOOL_URL": tool.url,
        "FRONTIER_VF_STALL": str(stall),
    }


def _life(root: Path, report: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.adapters.agents.verifiers_life", str(root), str(report)],
        cwd=REPO,
        env=env,
        start_new_session=True,
    )


def test_a_killed_verifiers_episode_resumes_at_its_last_durable_turn(tmp_path: Path) -> None:
    root, report, stall = tmp_path / "run", tmp_path / "report.jsonl", tmp_path / "stalled"
    tool = ToolServer(tmp_path / "tool.jsonl").start()
    try:
        env = _env(tool, stall)
        first = _life(root, report, env)
        try:
            deadline = time.monotonic() + LIFE_TIMEOUT
            while not stall.exists():
                assert first.poll() is None, f"the first life exited ({first.returncode})"
                assert time.monotonic() < deadline, "no tool call within the deadline"
                time.sleep(0.05)
            killed = _kill_tree(first)
        finally:
            if first.poll() is None:
                _kill_tree(first)
        assert killed >= 3  # the life, the harness program, the MCP tool server
        key = stall.read_text()
        assert [e["key"] for e in tool.executions()] == [key]  # executed, never answered
        assert not report.exists()  # nothing sealed

        second = _life(root, report, env)
        try:
            assert second.wait(LIFE_TIMEOUT) == 0
        finally:
            if second.poll() is None:
                _kill_tree(second)
        (line,) = [json.loads(x) for x in report.read_text().splitlines()]
        # Turn 0 was durable with its call pending: re-issued, not reused.
        assert line["durable"] == 1 and line["retried"] == 1 and line["reused"] == 0
        assert line["sealed"]
        assert line["replayed"] == 1  # the pending turn came from the journal
        assert line["generated"] == line["turns"] - line["durable"] >= 1
        assert line["keys"][0] == key
        executed = [e["key"] for e in tool.executions()]
        assert len(executed) == len(set(executed))  # every key executed at most once
        assert set(executed) == set(line["keys"])  # and every call of the episode once
    finally:
        tool.kill()


def test_a_continued_task_starts_after_its_answered_turns_and_restores_its_state() -> None:
    import asyncio

    import verifiers.v1 as vf
    from frontier_adapters.agents import TinyDecoding, continue_task

    from frontier_core.journal import JsonPayload, SiblingState, TokenPayload, ToolCall, TurnState

    from .verifiers_env import KvState, KvTask, restore

    def turn(key: str, answer: str | None) -> TurnState:
        call = ToolCall("add", JsonPayload.of({"k": "cell1", "v": 2, "call_key": key}), key)
        payload = None if answer is None else JsonPayload.of(answer)
        return TurnState(TokenPayload.of([5, 6], [-0.5, -0.25], 0), call, payload)

    task = KvTask(vf.TaskData(id="kv-0", prompt="Add to cells."))
    answered, pending = turn("ns/0.0.0.0", "2"), turn("ns/0.0.0.1", None)
    episode = SiblingState(0, TokenPayload.of([], [], 0), False, (answered, pending))
    continued = continue_task(task, episode, TinyDecoding(), restore=restore)
    messages = [m.model_dump(exclude_none=True) for m in continued.data.prompt]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]  # not the pending turn
    (call,) = messages[1]["tool_calls"]
    assert call["id"] == "ns/0.0.0.0" and call["name"] == "add"
    assert messages[2]["tool_call_id"] == "ns/0.0.0.0" and messages[2]["content"] == "2"
    assert task.data.prompt == "Add to cells."  # the user's task is left as it was

    class Trace:
        state = KvState()

    trace = Trace()
    asyncio.run(continued.setup(trace=trace, runtime=None))
    assert trace.state.keys == ["ns/0.0.0.0"]  # the answered call, restored
    assert continue_task(task, None, TinyDecoding()) is task
