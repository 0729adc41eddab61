"""What the verifiers kill tests share: a run of verifiers episodes
(``verifiers_life``, on the CPU engine or on real vLLM) SIGKILLed with its
whole process tree inside its first tool call (executed by the tool server,
its answer not journaled), resumed by a second life to the end, and audited
from the tool server's own record by ``agent_job.audit``: the prompt
trained once with its episodes, every key executed at most once, every
trained answer the tool's answer for its key (none of a fenced attempt),
every execution a call of a trained episode; and the turns generated
again, reported."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from frontier_adapters.verify.agent_job import audit
from frontier_adapters.verify.tool_server import ToolServer

REPO = Path(__file__).resolve().parents[3]


@dataclasses.dataclass(frozen=True)
class KilledAndResumed:
    key: str  # the key of the call the kill interrupted
    killed: list[str]  # the names of the processes killed (/proc/PID/comm)
    line: dict[str, Any]  # the resumed life's report of the sealed episode
    audit: dict[str, Any]  # agent_job.audit's report
    seconds: tuple[float, float]  # each life's wall time


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


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _kill_tree(proc: subprocess.Popen[bytes]) -> list[int]:
    """SIGKILL ``proc`` and every descendant (some start their own
    sessions); wait for ``proc`` (bounded). The pids killed."""
    pids = _tree(proc.pid)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)
    return pids


def _gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    """The ``pids`` still alive (not zombies) after up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in pids:
            try:
                state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(p)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _life(root: Path, report: Path, engine: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.adapters.agents.verifiers_life", str(root), str(report),
         engine],
        cwd=REPO,
        env=env,
        start_new_session=True,
    )  # fmt: skip


def killed_in_a_tool_call_and_resumed(
    tmp: Path, engine: str, *, life_timeout: float
) -> KilledAndResumed:
    """The scenario of the module doc with the ``engine`` policy (``cpu``
    or ``vllm``), each life bounded by ``life_timeout`` seconds; asserts
    what holds on every engine and returns what the caller checks more."""
    root, report, stall = tmp / "run", tmp / "report.jsonl", tmp / "stalled"
    rpc = tempfile.mkdtemp(prefix="frontier-vf-")  # short: unix socket paths
    tool = ToolServer(tmp / "tool.jsonl").start()
    try:
        bin_dir = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),  # uv, for the harness
            "PYTHONPATH": str(REPO),
            "FRONTIER_TOOL_URL": tool.url,
            "FRONTIER_VF_STALL": str(stall),
            "FRONTIER_VF_RPC": rpc,
        }
        started = time.monotonic()
        first = _life(root, report, engine, env)
        try:
            deadline = started + life_timeout
            while not stall.exists():
                assert first.poll() is None, f"the first life exited ({first.returncode})"
                assert time.monotonic() < deadline, "no tool call within the deadline"
                time.sleep(0.05)
            pids = _tree(first.pid)
            names = [_name(p) for p in pids]
            _kill_tree(first)
        finally:
            if first.poll() is None:
                _kill_tree(first)
        killed_at = time.monotonic()
        assert _gone(pids) == [], "a process of the killed life outlived its SIGKILL"
        assert len(pids) >= 3  # the life, the harness program, the MCP tool server
        key = stall.read_text()
        assert [e["key"] for e in tool.executions()] == [key]  # executed, never answered
        assert not report.exists()  # nothing sealed

        second = _life(root, report, engine, env)
        try:
            assert second.wait(life_timeout) == 0
        finally:
            if second.poll() is None:
                _kill_tree(second)
        ended = time.monotonic()
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
        audited = audit(root, tool, prompts=1, samples=1)
        assert audited["lives"] == 2 and audited["calls_pending_at_resume"] == 1
        return KilledAndResumed(key, names, line, audited, (killed_at - started, ended - killed_at))
    finally:
        tool.kill()
        shutil.rmtree(rpc, ignore_errors=True)
