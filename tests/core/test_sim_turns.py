"""Multi-turn episodes in ``frontier simulate --waste`` (``--turns``,
``--tool-latency``): the episode clock (tokens, then a tool wait at every
turn boundary), the turns and tool calls a kill makes a run do again, and
the turn journal as an eighth mode, exact like the others."""

from __future__ import annotations

import itertools
import json
import math

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core._cli import main
from frontier_core.sim import WASTE_MODES, Workload, random_workload, run_waste
from frontier_core.sim._waste import random_journal

lengths = st.floats(1.0, 8000.0)
turn_counts = st.integers(1, 12)
latencies = st.sampled_from([0.0, 0.01, 0.3, 2.0])


def workload(turns: int, latency: float, rate: float = 100.0) -> Workload:
    return Workload(turns=turns, tool_latency=latency, tokens_per_time=rate)


@given(lengths, turn_counts, latencies, st.floats(0.0, 1.0), st.integers(0, 11), st.booleans())
@settings(max_examples=400, deadline=None)
def test_the_clock_runs_an_episode_to_its_end_in_its_duration(
    length: float, turns: int, latency: float, share: float, boundary: int, at_boundary: bool
) -> None:
    w = workload(turns, latency)
    size = length / turns
    prefix = min(boundary, turns - 1) * size if at_boundary else share * length
    total = w.duration(length, prefix)
    # Its tokens at the rate, and a tool wait at every boundary it crosses
    # or starts at (a continuation at a boundary asks its call again).
    crossed = sum(1 for j in range(1, turns) if prefix - 1e-9 * length <= j * size)
    assert total == pytest.approx((length - prefix) / 100.0 + crossed * latency)
    assert w.made(length, prefix, total) == pytest.approx(length)
    assert w.made(length, prefix, 0.0) == prefix
    # Monotone in time, never past the length.
    times = sorted(share * total * k / 7 for k in range(8))
    made = [w.made(length, prefix, t) for t in times]
    assert all(a <= b + 1e-9 * length for a, b in itertools.pairwise(made))
    assert all(prefix - 1e-9 * length <= m <= length for m in made)


@given(lengths, st.floats(0.0, 1.0), st.floats(0.0, 50.0))
@settings(max_examples=200, deadline=None)
def test_one_turn_or_instant_tools_is_the_single_turn_clock(
    length: float, share: float, elapsed: float
) -> None:
    prefix = share * length
    for w in (workload(1, 0.5), workload(6, 0.0)):
        assert w.duration(length, prefix) == (length - prefix) / 100.0
        assert w.made(length, prefix, elapsed) == min(length, prefix + 100.0 * elapsed)


def test_a_tool_wait_holds_the_tokens() -> None:
    """400 tokens in 4 turns at 100 tokens per step, tools answering in half
    a step: turn 0 ends at 1.0, its call answers at 1.5."""
    w = workload(4, 0.5)
    assert w.made(400.0, 0.0, 1.0) == pytest.approx(100.0)
    assert w.made(400.0, 0.0, 1.3) == pytest.approx(100.0)
    assert w.made(400.0, 0.0, 1.6) == pytest.approx(110.0)
    assert w.duration(400.0, 0.0) == pytest.approx(4.0 + 3 * 0.5)


def test_turns_and_calls_between_two_token_counts() -> None:
    """Turns of 100 tokens: a turn is redone when any of its tokens is;
    a call is made at the end of each turn but the last."""
    w = workload(4, 0.5)
    assert w.turns_between(400.0, 0.0, 250.0) == 3  # turns 0, 1, 2
    assert w.turns_between(400.0, 200.0, 250.0) == 1  # the turn in progress
    assert w.turns_between(400.0, 200.0, 200.0) == 0  # killed while the tool worked
    assert w.turns_between(400.0, 0.0, 400.0) == 4
    assert w.turns_between(400.0, 150.0, 300.0) == 2  # turns 1 (from 150) and 2
    assert [w.calls(400.0, t) for t in (0.0, 99.0, 100.0, 250.0, 400.0)] == [0, 0, 1, 2, 3]
    assert workload(1, 0.5).calls(400.0, 400.0) == 0


def small(seed: int, turns: int) -> Workload:
    w = random_journal(random_workload(seed, Workload()))
    return attrs.evolve(
        w,
        dataset_len=min(w.dataset_len, 48),
        num_generations=min(w.num_generations, 4),
        turns=turns,
        tool_latency=[0.0, 0.05, 0.3][seed % 3],
    )


@pytest.mark.parametrize("seed", range(6))
def test_every_mode_stays_exact_with_episodes_and_the_turn_journal_joins(seed: int) -> None:
    w = small(seed, turns=2 + seed % 4)
    result = run_waste(w)
    names = [m.name for m in result.modes]
    assert names == [m.name for m in WASTE_MODES] + ["turns"]
    assert result.clean, result.violations()
    turns = result.results["turns"].stats
    # Write-ahead: a call the turn journal made is never made again.
    assert turns.calls_repeated == 0
    # Up to the first kill every mode ran the same run: there the turn
    # journal redoes no more turns than token progress, which redoes no
    # more than coverage-only.
    first = {m: result.results[m].stats.kill_log[0] for m in ("turns", "progress", "coverage")}
    assert first["turns"].turns <= first["progress"].turns <= first["coverage"].turns
    assert first["turns"].samples <= first["coverage"].samples
    assert first["coverage"].turns >= first["coverage"].samples


def test_single_turn_samples_keep_the_seven_modes() -> None:
    result = run_waste(small(0, turns=1))
    assert [m.name for m in result.modes] == [m.name for m in WASTE_MODES]
    assert result.turn_goal_met is None
    assert "turn_goal" not in result.summary()


def test_coverage_only_calls_tools_again_and_the_goal_is_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Episodes of 8 turns, tools answering in a fifth of a step: the seed's
    scenario. Coverage-only redoes whole episodes, calling their tools
    again; the turn journal redoes the turns in progress, within the goal."""
    assert main(["simulate", "--waste", "--turns", "8", "--tool-latency", "0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    modes = out["modes"]
    assert modes["coverage"]["calls_repeated"] > 0
    assert modes["turns"]["calls_repeated"] == 0
    share = 100.0 * modes["turns"]["turns_redone"] / modes["coverage"]["turns_redone"]
    assert math.isclose(out["turn_goal"]["turns_vs_coverage_pct"], share, abs_tol=1e-3)
    assert out["turn_goal"]["met"] is (share <= out["turn_goal"]["max_pct"])
    assert out["episodes"] == {"turns": 8, "tool_latency": 0.2}
    assert out["violations"] == []


@pytest.mark.parametrize("bad", [["--turns", "0"], ["--tool-latency", "-1"], ["--turns", "x"]])
def test_bad_episode_options_are_refused(
    bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--waste", *bad])
    assert exit_.value.code == 2
    assert bad[0] in capsys.readouterr().err
