"""``frontier replay``: the trace format, exactly, through the real console script."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core._replay import Replayer, TraceError

from ._pipes import closed_reader


def replay(
    tmp_path: Path, ops: list[dict[str, Any] | str]
) -> tuple[int, list[dict[str, Any]], str]:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join((op if isinstance(op, str) else json.dumps(op)) + "\n" for op in ops))
    proc = subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", "replay", str(trace)],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


SEED_16 = [
    {"op": "config", "stream_len": 16},
    {"op": "stamp", "count": 4},
    {"op": "stamp", "count": 4},
    {"op": "stamp", "count": 4},
    {"op": "dispatch", "ordinals": list(range(12))},
    {"op": "buffer", "ordinals": [0, 1, 2, 3, 4, 6, 7, 10]},
    {"op": "train", "ordinals": [0, 1, 2, 3, 4]},
    {"op": "checkpoint"},
    {"op": "kill"},
    {"op": "resume"},
    {"op": "stamp", "count": 16},
    {"op": "dispatch", "ordinals": [5, 8, 9, 11, 12, 13, 14, 15]},
    {"op": "buffer", "ordinals": [5, 8, 9, 11, 12, 13, 14, 15]},
    {"op": "train", "ordinals": list(range(5, 16))},
    {"op": "finish"},
]


def test_seed_scenario_through_the_console_script(tmp_path: Path) -> None:
    code, out, err = replay(tmp_path, SEED_16)
    assert code == 0, err
    assert out == [
        {"event": "stamp", "ordinals": [0, 1, 2, 3], "kept": [0, 1, 2, 3]},
        {"event": "stamp", "ordinals": [4, 5, 6, 7], "kept": [4, 5, 6, 7]},
        {"event": "stamp", "ordinals": [8, 9, 10, 11], "kept": [8, 9, 10, 11]},
        {
            "event": "checkpoint",
            "cut": 5,
            "trained_above_cut": [],
            "dropped_above_cut": [],
            "retained": [6, 7, 10],
        },
        {"event": "resume", "rewind_to": 5, "cut": 5, "covered": [6, 7, 10]},
        {
            "event": "stamp",
            "ordinals": list(range(5, 16)),
            "kept": [5, 8, 9, 11, 12, 13, 14, 15],
        },
        {"event": "coverage", "trained": 16, "dropped": [], "lost": [], "duplicated": []},
    ]


def test_kill_loses_training_steps_after_the_checkpoint(tmp_path: Path) -> None:
    ops = [
        {"op": "config", "stream_len": 4, "on_failure": "retry", "max_failures": 2},
        {"op": "stamp", "count": 4},
        {"op": "dispatch", "ordinals": [0, 1, 2, 3]},
        {"op": "buffer", "ordinals": [0, 1]},
        {"op": "train", "ordinals": [0]},
        {"op": "checkpoint", "save_buffer": False},
        {"op": "train", "ordinals": [1]},
        {"op": "fail", "ordinals": [2]},
        {"op": "kill"},
        {"op": "finish"},
        {"op": "resume", "load_replay_buffer": False},
        {"op": "kill"},
        {"op": "resume"},
        {"op": "stamp", "count": 9},
        {"op": "finish"},
    ]
    code, out, err = replay(tmp_path, ops)
    assert code == 0, err
    _, checkpoint, dead, r1, r2, y, live = out
    assert checkpoint == {
        "event": "checkpoint",
        "cut": 1,
        "trained_above_cut": [],
        "dropped_above_cut": [],
        "retained": [],
    }
    # Dead: only step [0] survives; 1..3 will be re-yielded, so none is lost.
    assert dead == {"event": "coverage", "trained": 1, "dropped": [], "lost": [], "duplicated": []}
    assert r1 == r2 == {"event": "resume", "rewind_to": 1, "cut": 1, "covered": []}
    assert y == {"event": "stamp", "ordinals": [1, 2, 3], "kept": [1, 2, 3]}
    assert live == dead


def test_drops_and_evictions_under_both_policies(tmp_path: Path) -> None:
    ops = [
        {"op": "config", "stream_len": 3, "on_failure": "retry", "max_failures": 2},
        {"op": "stamp", "count": 3},
        {"op": "dispatch", "ordinals": [2, 0, 1]},
        {"op": "fail", "ordinals": [0]},
        {"op": "dispatch", "ordinals": [0]},
        {"op": "fail", "ordinals": [0]},
        {"op": "buffer", "ordinals": [1, 2]},
        {"op": "evict", "ordinals": [2]},
        {"op": "checkpoint"},
        {"op": "dispatch", "ordinals": [2]},
        {"op": "buffer", "ordinals": [2]},
        {"op": "train", "ordinals": [1, 2]},
        {"op": "finish"},
    ]
    code, out, err = replay(tmp_path, ops)
    assert code == 0, err
    assert out[1] == {
        "event": "checkpoint",
        "cut": 1,
        "trained_above_cut": [],
        "dropped_above_cut": [],
        "retained": [1],
    }
    assert out[2] == {
        "event": "coverage",
        "trained": 2,
        "dropped": [0],
        "lost": [],
        "duplicated": [],
    }


def test_unbounded_stream_reports_live_prompts_as_not_lost(tmp_path: Path) -> None:
    ops = [{"op": "stamp", "count": 3}, {"op": "dispatch", "ordinals": [1]}, {"op": "finish"}]
    code, out, _ = replay(tmp_path, ops)
    assert code == 0
    assert out[-1] == {
        "event": "coverage",
        "trained": 0,
        "dropped": [],
        "lost": [],
        "duplicated": [],
    }


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("{not json", "not JSON"),
        ('["op"]', "must be a JSON object"),
        ({"op": "teleport"}, "unknown op 'teleport'"),
        ({"op": "stamp"}, "missing ['count']"),
        ({"op": "stamp", "count": -1}, "'count' must be an int >= 0"),
        ({"op": "stamp", "count": 1, "extra": 2}, "unknown keys ['extra']"),
        ({"op": "dispatch", "ordinals": [0, 0]}, "listed more than once"),
        ({"op": "dispatch", "ordinals": [1.5]}, "'ordinals' must be an int"),
        ({"op": "train", "ordinals": [0]}, "illegal train of ordinals [0]"),
        ({"op": "config"}, "config must be the first op"),
        ({"op": "resume"}, "resume without a kill"),
        ({"op": "checkpoint", "save_buffer": 1}, "'save_buffer' must be true or false"),
        # The sibling ops and keys need a sample-level config.
        ({"op": "seal", "leases": [[0, 0, 0]]}, "seal is a sample-level op"),
        ({"op": "restart", "siblings": []}, "restart is a sample-level op"),
        ({"op": "checkpoint", "save_sealed": True}, "unknown keys ['save_sealed']"),
        ({"op": "resume", "attempt_floor": 0}, "unknown keys ['attempt_floor']"),
    ],
)
def test_bad_line_exits_2_naming_the_line_and_prints_nothing_after(
    tmp_path: Path, bad: dict[str, Any] | str, words: str
) -> None:
    ops: list[dict[str, Any] | str] = [
        {"op": "stamp", "count": 2},
        bad,
        {"op": "stamp", "count": 2},
        {"op": "finish"},
    ]
    code, out, err = replay(tmp_path, ops)
    assert code == 2
    assert out == [{"event": "stamp", "ordinals": [0, 1], "kept": [0, 1]}]
    assert "trace.jsonl:2: " in err and words in err, err


def test_ops_after_kill_need_a_resume(tmp_path: Path) -> None:
    code, out, err = replay(tmp_path, [{"op": "kill"}, {"op": "stamp", "count": 1}])
    assert code == 2 and out == [] and ":2: stamp after kill" in err


def test_missing_file_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", "replay", str(tmp_path / "nope.jsonl")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "nope.jsonl" in proc.stderr


ops_strategy = st.lists(
    st.one_of(
        st.builds(lambda n: {"op": "stamp", "count": n}, st.integers(0, 5)),
        st.builds(
            lambda name, xs: {"op": name, "ordinals": xs},
            st.sampled_from(["dispatch", "buffer", "fail", "evict", "train"]),
            st.lists(st.integers(0, 12), max_size=4, unique=True),
        ),
        st.builds(lambda b: {"op": "checkpoint", "save_buffer": b}, st.booleans()),
        st.just({"op": "kill"}),
        st.builds(lambda b: {"op": "resume", "load_replay_buffer": b}, st.booleans()),
        st.just({"op": "finish"}),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops_strategy, retry=st.booleans())
def test_random_traces_never_lose_or_duplicate(ops: list[dict[str, Any]], retry: bool) -> None:
    """Whatever a trace does, as long as each op is legal, finish never
    reports a lost or duplicated ordinal; illegal ops are refused."""
    replayer = Replayer()
    config = {"op": "config", "stream_len": 10, "on_failure": "retry" if retry else "drop"}
    replayer.feed(config, 1)
    for line, op in enumerate(ops, start=2):
        try:
            out = replayer.feed(op, line)
        except TraceError:
            continue  # refused, and the state is unchanged: go on
        for obj in out:
            if obj["event"] == "coverage":
                assert obj["lost"] == [] and obj["duplicated"] == []


# -- hostile traces: exit 2 naming the line, bounded work ---------------------------


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b'{"op": "stamp", "count": 1000000000000}', "more than 1000000 a stamp"),
        (b'{"op": "stamp", "count": ' + b"9" * 5000 + b"}", "not JSON"),
        (b"[" * 50_000, "nested too deeply"),
        (b'{"op": "stamp", "count": true}', "'count' must be an int"),
        (b'{"op": "dispatch", "ordinals": [\xff]}', "not UTF-8"),
        (b'{"op": "dispatch", "ordinals": [1.5]}', "must be an int"),
        # Any JSON value where the op's name belongs: a list once exited 3
        # with a traceback (unhashable in the schema lookup).
        (b'{"op": []}', "unknown op []"),
        (b'{"op": {"a": 1}}', "unknown op {'a': 1}"),
        (b'{"op": 5}', "unknown op 5"),
        (b'{"op": null}', "unknown op None"),
        (b'{"op": ["stamp"], "count": 1}', "unknown op ['stamp']"),
        (b'{"op": "dispatch", "ordinals": [18446744073709551616]}', "below 2**64"),
        (b'{"op": "stamp", "count": 18446744073709551617}', "at most 2**64"),
    ],
)
def test_a_hostile_line_is_exit_2_naming_it_after_the_good_lines(
    tmp_path: Path, bad: bytes, reason: str
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b'{"op": "stamp", "count": 2}\n{"op": "stamp", "count": 1}\n' + bad + b"\n")
    proc = subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", "replay", str(trace)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.decode()
    assert f"{trace}:3:" in err and reason in err and "Traceback" not in err
    assert [json.loads(line)["ordinals"] for line in proc.stdout.splitlines()] == [[0, 1], [2]]


@pytest.mark.parametrize(
    "config",
    [
        {"stream_len": 2**64 + 1},
        {"stream_len": 10**300},
        {"max_failures": 10**300},
        {"on_failure": ["drop"] * 10**4},
        {"granularity": {"sibling": 1}},
    ],
    ids=["stream-2^64", "stream-huge", "attempts-huge", "policy-list", "granularity-dict"],
)
def test_a_config_of_foreign_values_is_exit_2(tmp_path: Path, config: dict[str, Any]) -> None:
    """A stream_len past 2**64 passed the trace's check and was refused by
    ``LedgerConfig`` with a bare ``ValueError``: exit 3."""
    code, out, err = replay(tmp_path, [{"op": "config", **config}, {"op": "stamp", "count": 1}])
    assert code == 2 and out == [], err
    assert ":1:" in err and "Traceback" not in err and len(err) < 400


def test_the_work_of_a_replay_follows_the_trace_across_ops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bound per op is not one per trace: ``finish`` (or ``checkpoint``)
    repeated, each walking the whole run again, is refused once the trace's
    budget (the base plus ``WORK_PER_BYTE`` a byte) is spent. The base is
    lowered here so that the run is small."""
    import io

    import frontier_core._replay as replay_module

    monkeypatch.setattr(replay_module, "MAX_STAMP", 5_000)
    head = [
        {"op": "stamp", "count": 4_000},
        {"op": "dispatch", "ordinals": list(range(1, 4_000))},
        {"op": "buffer", "ordinals": list(range(1, 4_000))},
        {"op": "train", "ordinals": list(range(1, 4_000))},
    ]
    for repeated in ({"op": "finish"}, {"op": "checkpoint"}):
        lines = [json.dumps(op) for op in head] + [json.dumps(repeated)] * 1_000
        budget = 5_000 + replay_module.WORK_PER_BYTE * sum(len(x) + 1 for x in lines)
        out = io.StringIO()
        with pytest.raises(TraceError, match="units of work") as info:
            replay_module.replay([x + "\n" for x in lines], out)
        # Each costs some 4,000 units: refused before the last.
        assert len(head) < info.value.line < len(lines)
        listed = sum(len(v) for x in out.getvalue().splitlines() for v in json.loads(x).values()
                     if isinstance(v, list))  # fmt: skip
        assert listed <= budget


def test_a_key_twice_in_an_op_is_refused_at_its_line() -> None:
    """``json.loads`` keeps a repeated key's last value; the replayer does
    not guess which one the trace meant."""
    import frontier_core._replay as replay_module

    lines = ['{"op": "config", "stream_len": 4}\n', '{"op": "stamp", "count": 1, "count": 3}\n']
    out = io.StringIO()
    with pytest.raises(TraceError, match="'count' stands twice") as info:
        replay_module.replay(lines, out)
    assert info.value.line == 2


@pytest.mark.parametrize("encoded", ["bom", "utf-16"])
def test_a_byte_order_mark_or_utf16_is_refused_at_line_1(tmp_path: Path, encoded: str) -> None:
    text = '{"op": "stamp", "count": 2}\n'
    data = b"\xef\xbb\xbf" + text.encode() if encoded == "bom" else text.encode("utf-16")
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", "replay", str(trace)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and f"{trace}:1:" in proc.stderr, proc.stderr


def test_an_internal_error_is_exit_3_never_the_verdict_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Exit 1 means "coverage violated"; a bug must not look like one."""
    import frontier_core._replay as replay_module
    from frontier_core._cli import main

    def broken(lines: object, out: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(replay_module, "replay", broken)
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    assert main(["replay", str(trace)]) == 3
    err = capsys.readouterr().err
    assert "ZeroDivisionError" in err and "internal error" in err


def test_an_output_that_fails_is_not_blamed_on_the_trace(tmp_path: Path) -> None:
    # A full disk on stdout said "TRACE: No space left on device", and a
    # closed reader "TRACE: Broken pipe" (exit 2, naming a good trace).
    trace = tmp_path / "good.jsonl"
    trace.write_text('{"op":"config"}\n' + '{"op":"stamp","count":1}\n' * 2000)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "frontier_core._cli", "replay", str(trace)],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert done.returncode == 2 and str(trace) not in done.stderr.decode()
    assert b"standard output" in done.stderr and b"Traceback" not in done.stderr
    assert closed_reader(["replay", str(trace)]) == (141, b"")
