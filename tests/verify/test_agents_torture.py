"""The agent torture at CI size: real lives SIGKILLed (their whole process
group) mid-episode, with a call pending, between a tool's answer and its
record, mid-turn and right after a resume, and the tool server SIGKILLed and
restarted during a life; the audit (``verify.agent_job.audit``) checks,
from the episode log and the tool server's own record, that every prompt
is trained once with its n episodes, every call executed at most once per
key, and every trained answer the tool's recorded answer for its key. The
tool server's own contract is tested first, against its record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from frontier_adapters.verify.agent_job import torture
from frontier_adapters.verify.tool_server import ToolServer, ToolServerError, call


def test_the_tool_server_executes_a_key_once_and_replays_it_across_a_kill(
    tmp_path: Path,
) -> None:
    server = ToolServer(tmp_path / "record").start()
    try:
        assert call(server.url, "k1", "add", {"k": "a", "v": 2}) == 2
        assert call(server.url, "k1", "add", {"k": "a", "v": 2}) == 2  # replayed
        assert call(server.url, "k2", "add", {"k": "a", "v": 3}) == 5
        server.kill()
        server.start()  # its state is its record
        assert call(server.url, "k2", "add", {"k": "a", "v": 3}) == 5
        assert call(server.url, "k3", "get", {"k": "a"}) == 5
        with pytest.raises(ToolServerError, match="refused"):
            call(server.url, "k4", "rm -rf", {"k": "a"})
        # A known key with other args: two calls under one key, refused.
        with pytest.raises(ToolServerError, match="refused"):
            call(server.url, "k1", "add", {"k": "a", "v": 9})
        assert call(server.url, "k3", "get", {"k": "a"}) == 5  # nothing executed
    finally:
        server.kill()
    keys = [e["key"] for e in server.executions()]
    assert keys == ["k1", "k2", "k3"]
    # Every request is on record: executed, replayed or refused.
    seen = [(e["key"], e["executed"], e.get("refused", False)) for e in server.requests()]
    assert seen == [
        ("k1", True, False),
        ("k1", False, False),
        ("k2", True, False),
        ("k2", False, False),
        ("k3", True, False),
        ("k1", False, True),
        ("k3", False, False),
    ]


def test_a_torn_record_line_is_an_execution_that_did_not_happen(tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.write_text(
        json.dumps(
            {"key": "k1", "name": "add", "args": {"k": "a", "v": 1}, "answer": 1, "executed": True}
        )
        + '\n{"key": "k2", "na'
    )
    server = ToolServer(record).start()
    try:
        assert call(server.url, "k2", "add", {"k": "a", "v": 1}) == 2  # executed now
    finally:
        server.kill()
    assert [e["key"] for e in server.executions()] == ["k1", "k2"]


def test_sigkilled_lives_and_a_restarted_tool_lose_nothing_and_repeat_no_effect(
    tmp_path: Path,
) -> None:
    report = torture(
        tmp_path,
        prompts=4,
        samples=2,
        max_turns=3,
        kills=("turn:2", "answered:2", "episode:3", "resumed:1", "generating:4", "answered:3"),
        server_kills=1,
    )
    # The audit raised if anything was lost, trained twice, executed twice,
    # executed under a key in no trained episode (an orphan: its intent was
    # not durable before the call), sent twice with other args, or trained
    # with an answer the tool never gave; what it reports:
    assert report["lives"] >= 5 and report["tool_server_restarts"] == 1
    assert report["calls_pending_at_resume"] >= 2  # the turn and answered kills
    # Retried under their keys (counted in the episodes that finished).
    assert 1 <= report["calls_retried"] <= report["calls_pending_at_resume"]
    # Only the turn being generated at a kill is generated again (the
    # generating kill's); coverage only would redo every durable turn too.
    assert report["turns_generated_again"] == 1
    assert report["turns_generated_again_coverage_only"] > 1
    print(json.dumps(report))
