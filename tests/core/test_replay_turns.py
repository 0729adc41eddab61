"""``frontier replay`` of agentic episodes: the ``turn`` and ``answer`` ops,
the continuation a resumed life gets, the episode report, hostile input,
and the report catching a broken journal or ledger."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import frontier_core._replay as replay_module
from frontier_core import Ledger, Sibling, Status
from frontier_core._replay import Replayer, TraceError
from frontier_core.journal import NO_TOKENS, Progress, Turn, advance, call_key

from .._docs import section
from .test_replay import replay as cli

Op = dict[str, Any]

VIOLATIONS = (
    "lost",
    "duplicated",
    "incomplete",
    "fenced",
    "duplicated_attempts",
    "fenced_answers",
    "at_most_once",
    "inexact",
)


def key(o: int, s: int, a: int, t: int, namespace: str = "trace") -> str:
    return call_key(namespace, o, s, a, t)


def turn(lease: list[int], t: int, call: bool = True, tokens: int = 4) -> Op:
    o, s, a = lease
    return {
        "op": "turn",
        "lease": lease,
        "turn": t,
        "tokens": tokens,
        "call": key(o, s, a, t) if call else None,
    }


def answer(lease: list[int], k: str) -> Op:
    return {"op": "answer", "lease": lease, "key": k}


def run(ops: list[Op]) -> list[Op]:
    replayer = Replayer()
    out: list[Op] = []
    for line, op in enumerate(ops, start=1):
        out += replayer.feed(op, line)
    return out


def last(out: list[Op], event: str) -> Op:
    return [x for x in out if x["event"] == event][-1]


def clean(report: Op) -> bool:
    return not any(report[k] for k in VIOLATIONS)


def one_group(n: int = 1, **config: Any) -> list[Op]:
    """A one-group stream, checkpointed, stamped and dispatched: sibling s
    runs under attempt s."""
    return [
        {"op": "config", "stream_len": 1, "samples": n, **config},
        {"op": "checkpoint"},
        {"op": "stamp", "count": 1},
        {"op": "dispatch", "ordinals": [0]},
    ]


def relife(floor: int, **resume: Any) -> list[Op]:
    return [
        {"op": "kill"},
        {"op": "resume", "attempt_floor": floor, **resume},
        {"op": "stamp", "count": 1},
        {"op": "dispatch", "ordinals": [0]},
    ]


def finish_trained(lease: list[int]) -> list[Op]:
    return [{"op": "seal", "leases": [lease]}, {"op": "train", "ordinals": [0]}, {"op": "finish"}]


# -- the continuation ------------------------------------------------------------------


def test_answered_turns_are_kept_and_nothing_is_asked_again() -> None:
    out = run(
        [
            *one_group(),
            turn([0, 0, 0], 0),
            answer([0, 0, 0], key(0, 0, 0, 0)),
            turn([0, 0, 0], 1),
            answer([0, 0, 0], key(0, 0, 0, 1)),
            *relife(1),
            turn([0, 0, 1], 2, call=False),
            *finish_trained([0, 0, 1]),
        ]
    )
    dispatch, report = last(out, "dispatch"), out[-1]
    assert dispatch["continued"] == [[0, 0, 1, 2]] and dispatch["repeated"] == []
    assert report["calls_repeated"] == [] and report["turns_redone"] == 0
    assert clean(report) and report["samples"] == 1


def test_a_call_pending_at_the_kill_is_sent_again_under_its_key_and_answered_once() -> None:
    pending = key(0, 1, 1, 1)
    out = run(
        [
            *one_group(2),
            turn([0, 0, 0], 0, call=False),
            {"op": "seal", "leases": [[0, 0, 0]]},
            turn([0, 1, 1], 0),
            answer([0, 1, 1], key(0, 1, 1, 0)),
            turn([0, 1, 1], 1),  # its call is made; the answer never becomes durable
            *relife(2, sealed=[[0, 0, 0]]),
            answer([0, 1, 1], pending),  # the dead life's worker answers late
            answer([0, 1, 2], pending),  # the continuing lease's retry
            turn([0, 1, 2], 2, call=False),
            *finish_trained([0, 1, 2]),
        ]
    )
    dispatch = last(out, "dispatch")
    assert dispatch["reused"] == [[0, 0, 0]]
    assert dispatch["continued"] == [[0, 1, 2, 2]] and dispatch["repeated"] == [pending]
    late, retried = [x for x in out if x["event"] == "answer"][-2:]
    assert late == {"event": "answer", "lease": [0, 1, 1], "turn": 1, "fenced": True}
    assert retried == {"event": "answer", "lease": [0, 1, 2], "turn": 1, "fenced": False}
    report = out[-1]
    assert report["calls_repeated"] == [pending] and clean(report)
    assert report["turns_redone"] == 0 and report["samples"] == 2


def test_a_pending_call_is_sent_again_by_every_life_until_its_answer_is_durable() -> None:
    pending = key(0, 0, 0, 0)
    out = run([*one_group(), turn([0, 0, 0], 0), *relife(1), *relife(2), *relife(3)])
    assert [x["repeated"] for x in out if x["event"] == "dispatch"] == [[], *[[pending]] * 3]
    out = run(
        [
            *one_group(),
            turn([0, 0, 0], 0),
            *relife(1),
            *relife(2),
            answer([0, 0, 2], pending),
            turn([0, 0, 2], 1, call=False),
            *finish_trained([0, 0, 2]),
        ]
    )
    # Sent again by two lives: still one key, at most once for the tool.
    assert out[-1]["calls_repeated"] == [pending] and clean(out[-1])


def test_an_episode_whose_last_turn_made_no_call_is_sealed_as_it_stands() -> None:
    replayer = Replayer()
    ops = [*one_group(), turn([0, 0, 0], 0, call=False), *relife(1)]
    for line, op in enumerate(ops, start=1):
        out = replayer.feed(op, line)
    assert out[-1]["continued"] == [[0, 0, 1, 1]] and out[-1]["repeated"] == []
    with pytest.raises(TraceError, match="made no call"):
        replayer.feed(turn([0, 0, 1], 1), 20)
    report = [replayer.feed(op, 21 + i) for i, op in enumerate(finish_trained([0, 0, 1]))][-1][0]
    assert clean(report) and report["turns_redone"] == 0


def test_a_group_dealt_again_starts_afresh_and_its_turns_count_as_redone() -> None:
    out = run(
        [
            *one_group(on_failure="retry"),
            turn([0, 0, 0], 0, tokens=5),
            answer([0, 0, 0], key(0, 0, 0, 0)),
            turn([0, 0, 0], 1, tokens=7),
            {"op": "fail", "ordinals": [0]},
            {"op": "dispatch", "ordinals": [0]},
            turn([0, 0, 1], 0, tokens=3),
            answer([0, 0, 1], key(0, 0, 1, 0)),
            turn([0, 0, 1], 1, tokens=2, call=False),
            *finish_trained([0, 0, 1]),
        ]
    )
    assert last(out, "dispatch")["continued"] == []
    report = out[-1]
    assert report["turns_redone"] == 2 and report["tokens_redone"] == 5
    assert report["calls_repeated"] == [] and clean(report)


def test_a_restarted_sibling_starts_afresh() -> None:
    out = run(
        [
            *one_group(2, on_failure="retry"),
            turn([0, 1, 1], 0),
            {"op": "fail_sample", "leases": [[0, 1, 1]]},
            {"op": "restart", "siblings": [[0, 1]]},
            answer([0, 1, 1], key(0, 1, 1, 0)),  # the failed attempt's answer: fenced
            turn([0, 1, 2], 0, call=False),
            {"op": "seal", "leases": [[0, 0, 0], [0, 1, 2]]},
            {"op": "train", "ordinals": [0]},
            {"op": "finish"},
        ]
    )
    assert last(out, "answer")["fenced"] is True
    assert out[-1]["turns_redone"] == 1 and clean(out[-1])


@pytest.mark.parametrize(
    "failure",
    [
        [{"op": "fail", "ordinals": [0]}],
        [{"op": "fail_sample", "leases": [[0, 0, 0]]}],  # killed before its restart
        [{"op": "fail_sample", "leases": [[0, 0, 0]]}, {"op": "restart", "siblings": [[0, 0]]}],
    ],
)
def test_a_kill_right_after_a_failure_does_not_continue_the_failed_episode(
    failure: list[Op],
) -> None:
    """As without the kill, the attempt the failure gave up on is not
    continued: its answered turns are abandoned, its pending call is not
    sent again."""
    life_1 = [
        *one_group(on_failure="retry"),
        turn([0, 0, 0], 0),
        answer([0, 0, 0], key(0, 0, 0, 0)),
        turn([0, 0, 0], 1),  # its call pending
        *failure,
    ]
    floor = 1 + len(failure) // 2  # above every attempt handed out
    out = run([*life_1, *relife(floor)])
    assert last(out, "dispatch")["continued"] == []
    assert last(out, "dispatch")["repeated"] == []
    report = run(
        [
            *life_1,
            *relife(floor),
            turn([0, 0, floor], 0, call=False),
            *finish_trained([0, 0, floor]),
        ]
    )[-1]
    assert clean(report) and report["calls_repeated"] == []


def test_a_journal_that_keeps_a_failed_episode_shows_in_the_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unvoided(current: Any, record: Any) -> Any:
        if isinstance(record, Progress) and record.payload == NO_TOKENS:
            return current  # the failure's record, lost
        return advance(current, record)

    monkeypatch.setattr(replay_module, "advance", unvoided)
    out = run(
        [
            *one_group(on_failure="retry"),
            turn([0, 0, 0], 0),
            answer([0, 0, 0], key(0, 0, 0, 0)),
            {"op": "fail", "ordinals": [0]},
            *relife(1),
            turn([0, 0, 1], 1, call=False),
            *finish_trained([0, 0, 1]),
        ]
    )
    # The next life continued the failed attempt's turn and trained it.
    assert last(out, "dispatch")["continued"] == [[0, 0, 1, 1]]
    assert out[-1]["inexact"] == [[0, 0, 1]] and not clean(out[-1])


def test_a_sealed_episode_held_by_the_resume_is_trained_with_its_transcript() -> None:
    base = [
        *one_group(),
        turn([0, 0, 0], 0),
        answer([0, 0, 0], key(0, 0, 0, 0)),
        turn([0, 0, 0], 1, call=False),
        {"op": "seal", "leases": [[0, 0, 0]]},
    ]
    held = run([*base, *relife(1, sealed=[[0, 0, 0]]), {"op": "train", "ordinals": [0]}])
    assert last(held, "dispatch")["landed"] == [0]
    assert last(held, "dispatch")["continued"] == []
    report = run(
        [*base, *relife(1, sealed=[[0, 0, 0]]), {"op": "train", "ordinals": [0]}, {"op": "finish"}]
    )[-1]
    assert clean(report) and report["turns_redone"] == 0
    # Not held (the journal lost the seal, or the policy reuses nothing): the
    # sealed episode is not continued; it is generated again.
    out = run([*base, *relife(1), turn([0, 0, 1], 0, call=False), *finish_trained([0, 0, 1])])
    assert last(out, "dispatch")["continued"] == []
    assert out[-1]["turns_redone"] == 1 and clean(out[-1])


def test_the_namespace_of_the_config_makes_the_keys() -> None:
    ns = "run-7.0123abcd"
    out = run(
        [
            *one_group(namespace=ns),
            {**turn([0, 0, 0], 0), "call": key(0, 0, 0, 0, ns)},
            *relife(1),
        ]
    )
    assert last(out, "dispatch")["repeated"] == [f"{ns}/0.0.0.0"]
    with pytest.raises(TraceError, match="its key is"):
        run([*one_group(namespace=ns), turn([0, 0, 0], 0)])


# -- hostile and illegal input ---------------------------------------------------------


ILLEGAL: list[tuple[list[Op], str]] = [
    ([turn([0, 0, 7], 0)], "not running"),  # never started
    ([turn([0, 5, 0], 0)], "not below samples=2"),
    ([turn([0, 1, 0], 0)], "not running"),  # another sibling's attempt
    ([turn([0, 0, 0], 1)], "skips a turn"),
    ([turn([0, 0, 0], 0), turn([0, 0, 0], 1)], "is pending: answer it first"),
    (
        [turn([0, 0, 0], 0), answer([0, 0, 0], key(0, 0, 0, 0)), turn([0, 0, 0], 0)],
        "repeats a turn",
    ),
    ([turn([0, 0, 0], 0, call=False), turn([0, 0, 0], 1)], "made no call"),
    ([{**turn([0, 0, 0], 0), "call": key(0, 0, 9, 0)}], "its key is"),
    ([{**turn([0, 0, 0], 0), "call": 7}], "'call' must be a key or null"),
    ([{**turn([0, 0, 0], 0), "call": ["k"]}], "'call' must be a key or null"),
    ([{**turn([0, 0, 0], 0), "tokens": 2**32}], "above 2**32 - 1"),
    ([{**turn([0, 0, 0], 0), "tokens": -1}], "must be an int >= 0"),
    ([{**turn([0, 0, 0], 0), "turn": True}], "'turn' must be an int"),
    ([{**turn([0, 0, 0], 0), "turn": 10**30}], "at most 2**64"),
    ([{**turn([0, 0, 0], 0), "lease": [0, 0]}], "[ordinal, sibling, attempt]"),
    ([{**turn([0, 0, 0], 0), "lease": "0,0,0"}], "[ordinal, sibling, attempt]"),
    ([{**turn([0, 0, 0], 0), "extra": 1}], "unknown keys ['extra']"),
    ([{"op": "turn", "lease": [0, 0, 0], "turn": 0, "tokens": 1}], "missing ['call']"),
    ([answer([0, 0, 0], "trace/0.0.0.0")], "unknown key"),
    ([answer([0, 0, 0], {"k": 1})], "unknown key"),
    ([turn([0, 0, 0], 0), answer([0, 1, 1], key(0, 0, 0, 0))], "is a call of sibling [0, 0]"),
    ([turn([0, 0, 0], 0), answer([0, 0, 99], key(0, 0, 0, 0))], "never started"),
    (
        [
            turn([0, 0, 0], 0),
            answer([0, 0, 0], key(0, 0, 0, 0)),
            answer([0, 0, 0], key(0, 0, 0, 0)),
        ],
        "no call pending",
    ),
    (
        [
            turn([0, 0, 0], 0),
            answer([0, 0, 0], key(0, 0, 0, 0)),
            turn([0, 0, 0], 1),
            answer([0, 0, 0], key(0, 0, 0, 0)),
        ],
        "no call pending",
    ),
    ([{"op": "seal", "leases": [[0, 0, 0]]}, turn([0, 0, 0], 0)], "not running"),
    ([{"op": "kill"}, turn([0, 0, 0], 0)], "the process is dead"),
]


@pytest.mark.parametrize(("ops", "words"), ILLEGAL)
def test_an_illegal_episode_op_is_refused_naming_its_line_and_changes_nothing(
    ops: list[Op], words: str
) -> None:
    replayer = Replayer()
    for line, op in enumerate(one_group(2), start=1):
        replayer.feed(op, line)
    *prefix, bad = ops
    for line, op in enumerate(prefix, start=5):
        replayer.feed(op, line)
    before = replayer.feed({"op": "finish"}, 90)
    journal = dict(replayer._episodes.journal)
    line = 5 + len(prefix)
    with pytest.raises(TraceError) as info:
        replayer.feed(bad, line)
    assert info.value.line == line and words in info.value.reason, info.value.reason
    assert replayer._episodes.journal == journal
    assert replayer.feed({"op": "finish"}, 91) == before


@pytest.mark.parametrize(
    "op",
    [turn([0, 0, 0], 0), answer([0, 0, 0], "trace/0.0.0.0")],
)
def test_an_episode_op_without_a_sample_config_is_refused(op: Op) -> None:
    for prefix in ([], [{"op": "config", "stream_len": 1}]):
        replayer = Replayer()
        for line, good in enumerate(prefix, start=1):
            replayer.feed(good, line)
        with pytest.raises(TraceError, match="sample-level op") as info:
            replayer.feed(op, len(prefix) + 1)
        assert info.value.line == len(prefix) + 1


@pytest.mark.parametrize(
    ("namespace", "words"),
    [("", "namespace must be"), ("a/b", "without '/'"), ("x" * 193, "namespace"), (7, "a str")],
)
def test_a_namespace_call_key_refuses_is_refused_at_line_1(namespace: object, words: str) -> None:
    with pytest.raises(TraceError) as info:
        Replayer().feed({"op": "config", "samples": 1, "namespace": namespace}, 1)
    assert info.value.line == 1 and words in info.value.reason


def test_a_long_episode_is_bounded_by_the_work_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each turn costs its episode's length (the journal's fold copies the
    turns): a trace of one endless episode is refused where its work passes
    the budget, not run for minutes."""
    monkeypatch.setattr(replay_module, "MAX_STAMP", 2_000)
    monkeypatch.setattr(replay_module, "WORK_PER_BYTE", 0)
    replayer = Replayer()
    for line, op in enumerate(one_group(), start=1):
        replayer.feed(op, line)
    with pytest.raises(TraceError, match="units of work") as info:
        for t in range(200):
            replayer.feed(turn([0, 0, 0], t), 5 + 2 * t)
            replayer.feed(answer([0, 0, 0], key(0, 0, 0, t)), 6 + 2 * t)
    # 2,000 units, spent 1 + 2 + ... : refused at the 45th turn's answer.
    assert 80 <= info.value.line <= 100


def test_reading_back_a_long_episode_costs_its_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every life that continues an episode reads its turns back: a trace
    of kills and dispatches of one long episode pays for each, and the
    dispatch that would pass the budget is refused with the run as it was."""
    monkeypatch.setattr(replay_module, "MAX_STAMP", 1_000)
    monkeypatch.setattr(replay_module, "WORK_PER_BYTE", 0)
    replayer = Replayer()
    ops = one_group()
    for t in range(10):
        ops += [turn([0, 0, 0], t), answer([0, 0, 0], key(0, 0, 0, t))]
    for line, op in enumerate(ops, start=1):
        replayer.feed(op, line)
    line = len(ops)
    # Without the turns read back, 199 lives (3 units each) would fit in
    # what is left (about 880 units); with them (13 each), about 68 do.
    with pytest.raises(TraceError, match="units of work") as info:
        for floor in range(1, 200):
            for op in relife(floor):
                line += 1
                before = replayer.ledger
                replayer.feed(op, line)
    assert info.value.line == line and replayer.ledger is before
    assert line < len(ops) + 4 * 80


def test_the_cli_exits_2_naming_the_line_of_a_bad_turn(tmp_path: Path) -> None:
    code, out, err = cli(tmp_path, [*one_group(), turn([0, 0, 0], 0), turn([0, 0, 0], 2)])
    assert code == 2 and "trace.jsonl:6: " in err and "Traceback" not in err
    assert [x["event"] for x in out] == ["checkpoint", "stamp", "dispatch"]


# -- the report checks the journal and the ledger, not echoes them ----------------------


def test_a_journal_that_loses_a_durable_turn_shows_in_the_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def forgetful(current: Any, record: Any) -> Any:
        state = advance(current, record)
        if (
            isinstance(record, Turn)
            and current is not None
            and record.attempt > current.attempt
            and record.turn > 0
        ):
            # A continuation that keeps one turn too few.
            return attrs.evolve(state, turns=state.turns[1:])
        return state

    monkeypatch.setattr(replay_module, "advance", forgetful)
    life_1 = [*one_group(), turn([0, 0, 0], 0), answer([0, 0, 0], key(0, 0, 0, 0))]
    out = run([*life_1, *relife(1), turn([0, 0, 1], 1, call=False), *relife(2)])
    # The journal gives back one turn where two were durable: the next life
    # seals an episode that lacks its first turn.
    assert last(out, "dispatch")["continued"] == [[0, 0, 2, 1]]
    out = run(
        [
            *life_1,
            *relife(1),
            turn([0, 0, 1], 1, call=False),
            *relife(2),
            *finish_trained([0, 0, 2]),
        ]
    )
    assert out[-1]["inexact"] == [[0, 0, 2]] and not clean(out[-1])
    # With a call at the lost turn's successor, the journal contradicts the
    # next record itself: the replay stops there, naming the line.
    with pytest.raises(TraceError, match="the journal refused it") as info:
        run([*life_1, *relife(1), turn([0, 0, 1], 1), answer([0, 0, 1], key(0, 0, 1, 1))])
    assert info.value.line == 12


def test_a_journal_that_forgets_an_answer_makes_the_next_life_ask_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from frontier_core.journal import Answer

    def deaf(current: Any, record: Any) -> Any:
        state = advance(current, record)
        if isinstance(record, Answer) and record.attempt > current.attempt:
            return current  # the retried call's answer is lost
        return state

    monkeypatch.setattr(replay_module, "advance", deaf)
    first = key(0, 0, 0, 0)
    out = run(
        [
            *one_group(),
            turn([0, 0, 0], 0),
            *relife(1),
            answer([0, 0, 1], first),
            *relife(2),
        ]
    )
    # Life 3 sends a call again whose answer life 2 made durable.
    assert last(out, "dispatch")["repeated"] == [first]
    report = run(
        [
            *one_group(),
            turn([0, 0, 0], 0),
            *relife(1),
            answer([0, 0, 1], first),
            *relife(2),
            {"op": "finish"},
        ]
    )[-1]
    assert report["at_most_once"] == [first]


def test_a_ledger_that_takes_a_stale_answer_shows_as_a_fenced_answer_trained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        replay_module, "current_attempt", lambda status, attempt, result: status is Sibling.RUNNING
    )
    pending = key(0, 0, 0, 0)
    out = run(
        [
            *one_group(),
            turn([0, 0, 0], 0),
            *relife(1),
            answer([0, 0, 0], pending),  # the dead life's answer, taken as current
            turn([0, 0, 1], 1, call=False),
            *finish_trained([0, 0, 1]),
        ]
    )
    assert last(out, "answer")["fenced"] is False
    assert out[-1]["fenced_answers"] == [[0, 0, 0, 0]] and not clean(out[-1])


def test_a_ledger_that_reissues_attempts_is_caught_by_the_journal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resume = Ledger.resume

    def forgetful(*args: Any, **kwargs: Any) -> Any:
        resumed = resume(*args, **kwargs)
        ledger = resumed.ledger
        broken = Ledger(
            groups=ledger._groups, next_attempt=args[1].next_attempt, siblings=ledger._siblings
        )
        return attrs.evolve(resumed, ledger=broken)

    monkeypatch.setattr(Ledger, "resume", classmethod(lambda cls, *a, **k: forgetful(*a, **k)))
    ops = [
        *one_group(),
        turn([0, 0, 0], 0),
        answer([0, 0, 0], key(0, 0, 0, 0)),
        turn([0, 0, 0], 1, call=False),
        {"op": "seal", "leases": [[0, 0, 0]]},
        *relife(1),  # the seal not held: generated afresh, by attempt 0 again
    ]
    assert last(run(ops), "dispatch")["leases"] == [[0, 0, 0]]
    # Its first turn would call under a key already called: the journal,
    # which holds attempt 0 sealed, fences it, and the replay stops there.
    with pytest.raises(TraceError, match="the journal fenced") as info:
        run([*ops, turn([0, 0, 0], 0)])
    assert info.value.line == len(ops) + 1


def test_a_key_derivation_that_ignores_the_attempt_shows_as_a_key_called_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def shared(namespace: str, o: int, s: int, a: int, t: int) -> str:
        return f"{namespace}/{o}.{s}.{t}"

    monkeypatch.setattr(replay_module, "call_key", shared)
    out = run(
        [
            *one_group(on_failure="retry"),
            {**turn([0, 0, 0], 0), "call": "trace/0.0.0"},
            {"op": "fail", "ordinals": [0]},
            {"op": "dispatch", "ordinals": [0]},
            {**turn([0, 0, 1], 0), "call": "trace/0.0.0"},  # a second call, the same key
            answer([0, 0, 1], "trace/0.0.0"),
            turn([0, 0, 1], 1, call=False),
            *finish_trained([0, 0, 1]),
        ]
    )
    assert out[-1]["at_most_once"] == ["trace/0.0.0"] and not clean(out[-1])


# -- random programs -------------------------------------------------------------------


@attrs.define
class Ep:
    attempt: int
    next: int
    pending: str | None = None
    ended: bool = False


class Driver:
    """Plays an agent framework against the replayer: every op it sends is
    legal, stale answers (of fenced and pre-crash attempts) come at random,
    and a resume holds what a journal would."""

    def __init__(self, data: st.DataObject, n: int, *, failures: bool, hold_all: bool) -> None:
        self.data = data
        self.replayer = Replayer()
        self.line = 0
        self.failures = failures
        self.hold_all = hold_all
        self.live: dict[tuple[int, int], Ep] = {}
        self.last_call: dict[tuple[int, int], str | None] = {}
        self.handed: list[list[int]] = []
        self.issued: list[str] = []
        self.unanswered: set[str] = set()
        self.pending_at_kill: set[str] = set()
        self.accepted: dict[tuple[int, int], list[int]] = {}
        self.saved_sealed: list[list[int]] = []
        self.floor = 0
        self.continued = 0
        self.send(
            {
                "op": "config",
                "stream_len": 4,
                "samples": n,
                "on_failure": "retry",
                "max_failures": 3,
                "granularity": data.draw(st.sampled_from(["sibling", "group"])),
            }
        )

    @property
    def ledger(self) -> Ledger:
        ledger = self.replayer.ledger
        assert ledger is not None
        return ledger

    def send(self, op: Op) -> list[Op]:
        self.line += 1
        note(json.dumps(op))
        out = self.replayer.feed(op, self.line)
        for obj in out:
            self.handed += obj.get("leases", [])
            if obj["event"] == "dispatch":
                continued = {(o, s): t for o, s, _, t in obj["continued"]}
                self.continued += len(continued)
                repeated = {}
                for k in obj["repeated"]:
                    o, s, _, _ = map(int, k.rsplit("/", 1)[1].split("."))
                    repeated[(o, s)] = k
                for o, s, a in obj["leases"]:
                    if (o, s) in continued:
                        ended = (o, s) not in repeated and self.last_call.get((o, s), "") is None
                        self.live[(o, s)] = Ep(a, continued[(o, s)], repeated.get((o, s)), ended)
                    else:
                        self.live[(o, s)] = Ep(a, 0)
            if obj["event"] == "restart":
                for o, s, a in obj["leases"]:
                    self.live[(o, s)] = Ep(a, 0)
            if obj["event"] == "seal":
                for o, s, a in obj["sealed"]:
                    self.accepted[(o, s)] = [o, s, a]
            if obj["event"] == "checkpoint":
                self.saved_sealed = obj["sealed"]
        # A failure voids in the journal every sibling of the groups it
        # sends back (``Run._void``): a resume no longer holds their seals.
        voided: set[int] = set()
        if op["op"] in ("fail", "evict"):
            voided |= set(op["ordinals"])
        for obj in out:
            if obj["event"] in ("fail", "evict", "fail_sample"):
                voided |= {*obj.get("requeued", ()), *obj.get("unstamped", ()), *obj["dropped"]}
        for key in [k for k in self.accepted if k[0] in voided]:
            del self.accepted[key]
        return out

    def some(self, items: list[Any]) -> list[Any]:
        if not items:
            return []
        return self.data.draw(st.lists(st.sampled_from(items), unique_by=repr, min_size=1))

    def episode(self, lease: list[int]) -> Ep | None:
        ep = self.live.get((lease[0], lease[1]))
        return ep if ep is not None and ep.attempt == lease[2] else None

    def act(self, lease: list[int], *, end: bool = False) -> bool:
        """One move of ``lease``'s episode: answer its pending call, or make
        a turn (a last one with ``end``); ``False`` once it has ended."""
        ep = self.episode(lease)
        assert ep is not None
        o, s, a = lease
        if ep.pending is not None:
            out = self.send({"op": "answer", "lease": lease, "key": ep.pending})
            assert out[0]["fenced"] is False
            self.unanswered.discard(ep.pending)
            ep.pending = None
            return True
        if ep.ended:
            return False
        calls = not end and self.data.draw(st.booleans())
        k = call_key("trace", o, s, a, ep.next) if calls else None
        tokens = self.data.draw(st.integers(0, 9))
        self.send({"op": "turn", "lease": lease, "turn": ep.next, "tokens": tokens, "call": k})
        ep.next += 1
        self.last_call[(o, s)] = k
        if k is None:
            ep.ended = True
        else:
            ep.pending = k
            self.issued.append(k)
            self.unanswered.add(k)
        return True

    def step(self) -> None:
        if self.replayer.ledger is None:
            self.resume()
            return
        kinds = ["stamp", "stamp", "dispatch", "dispatch", *["act"] * 5, "stale", "seal"]
        kinds += ["train", "checkpoint", "kill", "kill"]
        if self.failures:
            kinds += ["fail_sample", "restart", "fail", "evict"]
        kind = self.data.draw(st.sampled_from(kinds))
        ledger = self.ledger
        running = [list(x) for x in ledger.running()]
        if kind == "stamp":
            self.send({"op": "stamp", "count": self.data.draw(st.integers(1, 2))})
        elif kind in ("dispatch", "fail", "evict", "train"):
            status = {"dispatch": Status.PENDING, "fail": Status.OUTSTANDING}.get(
                kind, Status.BUFFERED
            )
            chosen = self.some(list(ledger.ordinals(status)))
            if chosen:
                self.send({"op": kind, "ordinals": chosen})
        elif kind == "act" and running:
            self.act(self.data.draw(st.sampled_from(running)))
        elif kind == "stale" and self.issued:
            # An answer received by an attempt that is not current: fenced.
            k = self.data.draw(st.sampled_from(self.issued))
            o, s, _, _ = map(int, k.rsplit("/", 1)[1].split("."))
            stale = [x for x in self.handed if x[:2] == [o, s] and x not in running]
            if stale:
                lease = self.data.draw(st.sampled_from(stale))
                out = self.send({"op": "answer", "lease": lease, "key": k})
                assert out[0]["fenced"] is True
        elif kind in ("seal", "fail_sample") and running:
            self.send({"op": kind, "leases": self.some(running)})
        elif kind == "restart":
            n = ledger.config.samples
            unstarted = [
                [o, s]
                for o in ledger.ordinals(Status.OUTSTANDING)
                for s in range(n)
                if (ledger.sibling(o, s) or (None,))[0] is Sibling.UNSTARTED
            ]
            if unstarted:
                self.send({"op": "restart", "siblings": self.some(unstarted)})
        elif kind == "checkpoint":
            self.send(
                {
                    "op": "checkpoint",
                    "save_buffer": self.data.draw(st.booleans()),
                    "save_sealed": self.data.draw(st.booleans()),
                }
            )
        elif kind == "kill":
            self.kill()

    def kill(self) -> None:
        self.floor = self.ledger.next_attempt
        self.pending_at_kill |= self.unanswered
        self.send({"op": "kill"})

    def resume(self) -> None:
        journal = list(self.accepted.values())
        load_sealed = True
        if not self.hold_all:
            journal = self.some(journal) if self.data.draw(st.booleans()) else []
            load_sealed = self.data.draw(st.booleans())
        saved = {(o, s) for o, s, _ in self.saved_sealed} if load_sealed else set()
        self.send(
            {
                "op": "resume",
                "load_replay_buffer": self.hold_all or self.data.draw(st.booleans()),
                "load_sealed": load_sealed,
                "sealed": [x for x in journal if (x[0], x[1]) not in saved],
                "attempt_floor": self.floor,
            }
        )

    def drain(self) -> Op:
        if self.replayer.ledger is None:
            self.resume()
        n = self.ledger.config.samples
        crash = self.data.draw(st.booleans())
        for _ in range(100):
            if self.ledger.drained:
                break
            self.send({"op": "stamp", "count": 4})
            pending = list(self.ledger.ordinals(Status.PENDING))
            if pending:
                self.send({"op": "dispatch", "ordinals": pending})
            unstarted = [
                [o, s]
                for o in self.ledger.ordinals(Status.OUTSTANDING)
                for s in range(n)
                if (self.ledger.sibling(o, s) or (None,))[0] is Sibling.UNSTARTED
            ]
            if unstarted:
                self.send({"op": "restart", "siblings": unstarted})
            running = [list(x) for x in self.ledger.running()]
            if crash and running:
                # A kill mid-episode: each running episode a move further.
                crash = False
                for lease in running:
                    self.act(lease)
                self.kill()
                self.resume()
                continue
            for lease in running:
                while self.act(lease, end=True):
                    pass
            if running:
                self.send({"op": "seal", "leases": running})
            buffered = list(self.ledger.ordinals(Status.BUFFERED))
            if buffered:
                self.send({"op": "train", "ordinals": buffered})
        assert self.ledger.drained
        return self.send({"op": "finish"})[0]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(1, 2), steps=st.integers(0, 60))
def test_a_random_agent_program_drains_clean_and_repeats_only_pending_calls(
    data: st.DataObject, n: int, steps: int
) -> None:
    driver = Driver(data, n, failures=True, hold_all=False)
    for _ in range(steps):
        driver.step()
    report = driver.drain()
    event(f"episodes continued: {min(driver.continued, 3)}")
    event(f"calls repeated: {min(len(report['calls_repeated']), 2)}")
    assert clean(report), report
    assert report["samples"] == n * report["trained"]
    # Only a call pending at some kill is sent again, never a new one.
    assert set(report["calls_repeated"]) <= driver.pending_at_kill


@settings(max_examples=50, deadline=None)
@given(data=st.data(), n=st.integers(1, 2), steps=st.integers(0, 60))
def test_across_kills_alone_no_durable_turn_is_generated_again(
    data: st.DataObject, n: int, steps: int
) -> None:
    """No group is dealt again and every resume holds every accepted sample:
    each episode continues at its last durable turn, whatever the kills."""
    driver = Driver(data, n, failures=False, hold_all=True)
    for _ in range(steps):
        driver.step()
    report = driver.drain()
    event(f"episodes continued: {min(driver.continued, 3)}")
    event(f"calls repeated: {min(len(report['calls_repeated']), 2)}")
    assert clean(report), report
    assert report["turns_redone"] == 0 and report["tokens_redone"] == 0
    assert set(report["calls_repeated"]) <= driver.pending_at_kill


# -- docs/cli.md documents the format exactly ------------------------------------------


def episodes_section() -> str:
    return section("cli.md", "Episodes: turns and tool answers")


def test_the_docs_name_every_episode_op_key_and_printed_key() -> None:
    text = episodes_section()
    for name in ("turn", "answer"):
        required, optional = replay_module._SAMPLE_SCHEMA[name]
        assert f'"op":"{name}"' in text
        for k in required | optional:
            assert f'"{k}":' in text, (name, k)
    assert '"namespace":' in text
    out = run(
        [
            *one_group(),
            turn([0, 0, 0], 0),
            *relife(1),
            answer([0, 0, 1], key(0, 0, 0, 0)),
            *finish_trained([0, 0, 1]),
        ]
    )
    whole = section("cli.md", "`frontier replay`")
    for line in out:
        assert f'"event":"{line["event"]}"' in whole
        for k in line:
            assert f'"{k}":' in whole, (line["event"], k)
    assert '"event":"answer"' in text


def test_the_docs_example_prints_what_the_docs_show(tmp_path: Path) -> None:
    trace, shown = re.findall(r"```text\n(.*?)```", episodes_section(), re.S)
    code, out, err = cli(tmp_path, trace.splitlines())
    assert code == 0, err
    assert out == [json.loads(x) for x in shown.splitlines()]
    assert clean(out[-1])
