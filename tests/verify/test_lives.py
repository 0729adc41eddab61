"""Every life of a demo or torture has a deadline (``verify._lives``): a
life that hangs is SIGKILLed with its whole process tree and the parent's
wait raises ``LifeDeadlineError`` naming it, within the deadline; and
``frontier demo`` exits 2 naming a worker life that hung, rather than
waiting for it for ever (the journal demo's life that hung in the field).
No torch: the lives here are small Python children."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from frontier_adapters.verify import demo
from frontier_adapters.verify._lives import (
    DEADLINE_ENV,
    DEFAULT_DEADLINE,
    PIPE,
    Life,
    LifeDeadlineError,
    group_members,
    life_deadline,
)
from hypothesis import given
from hypothesis import strategies as st

#: The deadline of the hanging lives here, and the slack a busy machine
#: gets on top of it (start-up, the kill, the reaping).
DEADLINE = 2.0
SLACK = 15.0


def hanging_child(pids: Path, *, close_stdout: bool = False) -> list[str]:
    """A child that starts a grandchild (in its process group), writes both
    pids to ``pids``, prints ``ready`` and then sleeps for ever (with
    ``close_stdout``, it closes its output first: its end of output comes,
    its exit never)."""
    code = (
        "import os, subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'],\n"
        "                     stdout=subprocess.DEVNULL)\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}')\n"
        "print('ready', flush=True)\n"
        + ("os.close(1); sys.stdout = open(os.devnull, 'w')\n" if close_stdout else "")
        + "time.sleep(3600)\n"
    )
    return [sys.executable, "-c", code]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def wait_for(path: Path, within: float = 30.0) -> str:
    deadline = time.monotonic() + within
    while not (path.exists() and path.read_text()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} was not written within {within} s")
        time.sleep(0.01)
    return path.read_text()


WAITS: dict[str, Callable[[Life], object]] = {
    "readline": lambda life: life.readline(),
    "lines": lambda life: list(life.lines()),
    "read": lambda life: life.read(),
    "wait": lambda life: life.wait(),
    "wait_until": lambda life: life.wait_until(lambda: False, "a file that never comes"),
}


@pytest.mark.parametrize("how", sorted(WAITS))
def test_a_life_that_hangs_is_killed_whole_with_a_typed_error_within_its_deadline(
    tmp_path: Path, how: str
) -> None:
    pids = tmp_path / "pids"
    close = how == "wait"  # its output ends; only the exit never comes
    with Life(
        hanging_child(pids, close_stdout=close), name="the test life", deadline=DEADLINE
    ) as life:
        assert life.readline() == "ready\n"
        child, grandchild = map(int, wait_for(pids).split())
        if close:
            assert life.read() == ""
        t0 = time.monotonic()
        with pytest.raises(LifeDeadlineError, match="the test life: passed its deadline of 2 s"):
            WAITS[how](life)
        assert time.monotonic() - t0 < DEADLINE + SLACK
        # The whole tree is gone, the grandchild too, before the error.
        assert group_members(life.pid) == []
        assert not alive(child) and not alive(grandchild)
        assert life.returncode is not None


def test_a_life_that_ends_in_time_is_read_and_reaped_whole(tmp_path: Path) -> None:
    code = "print('ready'); print('step 1'); print('done', end='')"
    with Life([sys.executable, "-c", code], name="quick", deadline=60.0) as life:
        assert list(life.lines()) == ["ready\n", "step 1\n", "done"]
        assert life.read() == "" and life.wait() == 0
    assert group_members(life.pid) == []


def test_an_exception_in_the_parent_leaves_no_process_of_the_life(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    with pytest.raises(KeyError):
        with Life(hanging_child(pids), name="abandoned", deadline=600.0, stdout=PIPE) as life:
            assert life.readline() == "ready\n"
            raise KeyError("the parent failed")
    child, grandchild = map(int, wait_for(pids).split())
    assert not alive(child) and not alive(grandchild)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_life_deadline_is_a_positive_finite_number_of_seconds(value: float) -> None:
    if math.isfinite(value) and value > 0:
        assert life_deadline(value) == value
    else:
        with pytest.raises(ValueError, match="positive finite"):
            life_deadline(value)


def test_the_deadline_comes_from_the_environment_or_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    assert life_deadline() == DEFAULT_DEADLINE
    monkeypatch.setenv(DEADLINE_ENV, "12.5")
    assert life_deadline() == 12.5 and life_deadline(3.0) == 3.0
    for bad in ("0", "-1", "nan", "inf", "soon", ""):
        monkeypatch.setenv(DEADLINE_ENV, bad)
        with pytest.raises(ValueError, match=DEADLINE_ENV):
            life_deadline()


def test_frontier_demo_exits_2_naming_a_worker_life_that_hung(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker that reports ready and then never another line (as the
    journal demo's life whose trainer waited for a batch that never
    filled): the demo kills its tree at the deadline and exits 2 naming
    the life, instead of reading its output for ever."""
    pids = tmp_path / "pids"
    monkeypatch.setattr(demo, "WORKER", tuple(hanging_child(pids)[1:]))
    t0 = time.monotonic()
    code = demo.run_demo(
        kills=0,
        prompts=8,
        modes=("frontier",),
        workdir=tmp_path / "runs",
        as_json=True,
        life_deadline=DEADLINE,
    )
    assert time.monotonic() - t0 < DEADLINE + SLACK
    assert code == 2
    err = capsys.readouterr().err
    assert "frontier worker, life 1: passed its deadline of 2 s" in err
    child, grandchild = map(int, wait_for(pids).split())
    assert not alive(child) and not alive(grandchild)


def test_frontier_demo_refuses_a_bad_deadline_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DEADLINE_ENV, "never")
    assert demo.run_demo(kills=0, prompts=8, modes=("frontier",)) == 2
    assert DEADLINE_ENV in capsys.readouterr().err
    with pytest.raises(ValueError, match="positive finite"):
        demo.run_demo(kills=0, prompts=8, modes=("frontier",), life_deadline=-1.0)
