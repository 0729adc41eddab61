"""A real verifiers 0.4.0 rollout (its harness program and MCP tool server
as subprocesses) over ``serve_policy``, SIGKILLed with its whole process
tree mid-episode, inside a tool call whose turn is journaled and whose
execution the tool server recorded; then resumed: the tool server's own
record shows every key executed once, and the resumed life generated only
the turns after the last durable one (the pending turn answered from the
journal, its call re-issued under its key and answered from the tool's
record). The lives run the example of docs/agents.md as written
(``_kill``, shared with the same test on real vLLM). Runs in .venv-agents
(scripts/setup-agents.sh)."""

from __future__ import annotations

from pathlib import Path

from ._need_verifiers import need_verifiers

need_verifiers()

from ._kill import killed_in_a_tool_call_and_resumed  # noqa: E402

#: Seconds a life may take (a rollout is ~25 s on 2 shared cores).
LIFE_TIMEOUT = 240.0


def test_a_killed_verifiers_episode_resumes_at_its_last_durable_turn(tmp_path: Path) -> None:
    out = killed_in_a_tool_call_and_resumed(tmp_path, "cpu", life_timeout=LIFE_TIMEOUT)
    assert out.audit["turns_generated_again"] == 0  # the pending turn was replayed
    print(f"\nverifiers on the CPU engine: {out.audit}, lives {out.seconds}")


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
