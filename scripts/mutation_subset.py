"""Run mutmut's mutants against a chosen subset of the tests, for a machine
too loaded for a full `mutmut run` (proofs/MUTANTS_JOURNAL.md, the episode
round). A pytest plugin: it collects the tests named on the command line
once, runs them clean (and stops if one fails), then for each mutant named
in MUTANTS_FILE forks, switches the mutant on (mutmut's trampoline) and runs
the tests fastest first, stopping at the first failure; a child past TIMEOUT
seconds is killed (a timeout counts as killed, as in mutmut). Results go to
OUT, one JSON line a mutant, and a rerun skips the mutants already there.

A mutant killed here is killed by `scripts/mutation.sh` too (the same
mutant, and a test that fails under it covers its function, so mutmut runs
it); a survivor here may still be killed by a marked test left out of the
subset, so survivors are run again against a wider subset, and what is left
is written up.

    MUTATION_DIR=/tmp/m bash scripts/mutation.sh 'frontier_core.journal._replay.x_advance__mutmut_1'
        # any one mutant: the copy and the mutants of every module are made
    cd /tmp/m/mutants
    MUTANTS_FILE=names.txt OUT=results.jsonl TIMEOUT=90 \\
        PYTHONPATH=src:$REPO/scripts nice -n 10 $REPO/.venv/bin/python -m pytest \\
        -p mutation_subset -p no:cacheprovider -q tests/core/journal/test_episodes.py

`names.txt` holds mutant names, one a line, e.g.
`frontier_core.journal._replay.x__episode__mutmut_19` (the functions named
`x..._mutmut_N` in mutants/src, with their module's dotted name).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
from _pytest.main import Session
from _pytest.nodes import Item
from _pytest.runner import runtestprotocol


def _first_failure(items: list[Item]) -> str | None:
    for i, item in enumerate(items):
        nxt = items[i + 1] if i + 1 < len(items) else None
        if any(r.failed for r in runtestprotocol(item, nextitem=nxt, log=False)):
            return item.nodeid
    return None


def _verdict(pid: int, timeout: float) -> str:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return "survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "timeout"


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: Session) -> bool:
    from mutmut.mutation.trampoline import set_mutant_under_test

    items = list(session.items)
    took: dict[str, float] = {}
    start = time.monotonic()
    for item in items:
        at = time.monotonic()
        if _first_failure([item]) is not None:
            sys.exit(f"mutation_subset: the clean run fails at {item.nodeid}")
        took[item.nodeid] = time.monotonic() - at
    clean = time.monotonic() - start
    print(f"clean run {clean:.1f}s over {len(items)} tests", file=sys.stderr, flush=True)
    items.sort(key=lambda it: took[it.nodeid])
    with open(os.environ["MUTANTS_FILE"]) as f:
        names = [line.strip() for line in f if line.strip()]
    out_path = os.environ["OUT"]
    done: set[str] = set()
    if os.path.exists(out_path):
        with open(out_path) as f:
            done = {json.loads(line)["mutant"] for line in f}
    timeout = float(os.environ.get("TIMEOUT", 4 * clean + 10))
    with open(out_path, "a") as out:
        for n, name in enumerate(names, 1):
            if name in done:
                continue
            at = time.monotonic()
            pid = os.fork()
            if pid == 0:
                try:
                    set_mutant_under_test(name)
                    sys.stdout = open(os.devnull, "w")
                    os._exit(1 if _first_failure(items) else 0)
                except BaseException:
                    os._exit(3)
            verdict = _verdict(pid, timeout)
            secs = round(time.monotonic() - at, 2)
            out.write(json.dumps({"mutant": name, "verdict": verdict, "secs": secs}) + "\n")
            out.flush()
            print(f"{n}/{len(names)} {verdict} {name} {secs}s", file=sys.stderr, flush=True)
    return True
