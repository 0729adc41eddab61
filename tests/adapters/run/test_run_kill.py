"""``Run`` under real SIGKILLs: a job written from ``Run``'s docs alone
(a stand-in engine that makes one fixed sample per sibling, progress every
few tokens, a training log), killed at random moments of its lives and
resumed until it finishes. Audited from its own training log: every prompt
trained exactly once on the surviving lineage, with exactly its siblings,
each exactly the engine's token sequence (none lost or doubled across a
continuation)."""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest
from frontier_adapters import Run, SequenceSource

from frontier_core import LedgerConfig
from frontier_core.journal import TokenPayload

PROMPTS, SAMPLES, FP = 24, 3, "run-kill-v1"
#: A life that neither finishes nor is killed within this is a hang.
LIFE_DEADLINE = 120.0
#: The termination notice a SIGTERM gives a life (a spot instance's is
#: 30 to 120 s; a drain here needs well under a second).
NOTICE = 10.0


def full(o: int, s: int) -> list[int]:
    return [(o * 1000 + s * 100 + i) % 65536 for i in range(4 + (o * 5 + s * 7) % 23)]


def life(root: Path, remote: str | None = None) -> None:
    """One life of the job (the child process): the node's own state in
    ``root/run``; with ``remote``, the checkpoints and the shipped journal
    there (a node loss deletes ``root/run``)."""
    log = root / "trained.jsonl"
    cfg = LedgerConfig(stream_len=PROMPTS, samples=SAMPLES, fingerprint=FP)
    rows = SequenceSource(list(range(PROMPTS)))
    with (
        Run.open(
            root / "run", rows, cfg, progress_every=3, remote=remote, segment_seconds=0.05
        ) as run,
        log.open("a") as out,
    ):

        def line(entry: object) -> None:
            out.write(json.dumps(entry) + "\n")
            out.flush()
            os.fsync(out.fileno())

        def beat(tokens: int) -> None:
            # One byte per token generated: the parent counts them (the
            # tokens a kill costs) and kills after a random number of
            # them, so every kill lands inside a life's work.
            sys.stdout.write("." * tokens)
            sys.stdout.flush()

        run.watch(signal.SIGTERM, seconds=NOTICE)
        line({"resume": run.step})
        step = run.step
        buffer: dict[int, dict[int, list[int]]] = {}
        while not run.drained:
            if run.preempted:  # the notice came between two samples
                line({"drain": attrs.asdict(run.drain())})
                return
            taken = run.take(2)
            for t in taken:
                got = buffer.setdefault(t.ordinal, {})
                for lease in t.reused:
                    got[lease.sibling] = list(run.sample(lease).tokens())
                for lease in t.leases:
                    want = full(lease.ordinal, lease.sibling)
                    prefix = run.prefix(lease)
                    if prefix is not None:
                        line({"continue": [lease.ordinal, lease.sibling, len(prefix)]})
                    sample = prefix or TokenPayload.of([], [], step)
                    while len(sample) < len(want):
                        k = len(sample)
                        chunk = want[k : k + 2]
                        more = TokenPayload.of(chunk, [-1.0] * len(chunk), step)
                        sample = sample.followed_by(more)
                        run.progress(lease, sample)
                        beat(len(chunk))
                        time.sleep(0.002)  # a decode step
                        if run.preempted:  # a SIGTERM: drain in the notice, then exit
                            line({"drained": [lease.ordinal, lease.sibling, len(sample)]})
                            drained = run.drain()
                            line({"drain": attrs.asdict(drained)})
                            return
                    effect = run.seal(lease, sample)
                    assert lease in effect.sealed
                    got[lease.sibling] = list(sample.tokens())
            ready = sorted(o for o, g in buffer.items() if len(g) == SAMPLES)
            if taken:  # like a replay buffer, keep the newest group for later
                ready = ready[:-1]
            step += 1
            line(
                {"step": step, "groups": {o: [buffer[o][s] for s in range(SAMPLES)] for o in ready}}
            )
            for o in ready:
                del buffer[o]
            run.trained(ready)
            run.checkpoint(step)


def audit(log: Path) -> dict[int, list[list[int]]]:
    """The groups trained on the surviving lineage: a life resumed from
    step k discards what the dead branch logged after k."""
    steps: list[tuple[int, dict[str, list[list[int]]]]] = []
    drained: dict[tuple[int, int], int] = {}
    for raw in log.read_text().splitlines():
        entry = json.loads(raw)
        if "drained" in entry:
            o, s, n = entry["drained"]
            drained[(o, s)] = n
        elif "continue" in entry:
            o, s, n = entry["continue"]
            if (o, s) in drained:  # a drained sample continues from all it had
                assert n == drained.pop((o, s)), f"sample {(o, s)} lost tokens at a drain"
        elif "drain" in entry:
            assert entry["drain"]["in_time"] and entry["drain"]["checkpointed"], entry
        elif "resume" in entry:
            steps = [(k, g) for k, g in steps if k <= entry["resume"]]
        elif "step" in entry:
            steps.append((entry["step"], entry["groups"]))
    trained: dict[int, list[list[int]]] = {}
    for _, groups in steps:
        for o, group in groups.items():
            assert int(o) not in trained, f"prompt {o} trained twice"
            trained[int(o)] = group
    return trained


def run_life(
    cmd: list[str], env: dict[str, str], beats: int | None, *, term: bool = False
) -> tuple[bool, int]:
    """One life: killed (SIGKILL, its whole process group) after ``beats``
    units of work, or given a termination notice then (``term``: SIGTERM,
    and it must drain and exit 0 within the notice), or run to its end
    (``beats=None``). Returns whether it was stopped and the tokens it
    generated (the bytes it wrote, as far as they were read); fails the test if it
    neither finishes nor reaches its kill within ``LIFE_DEADLINE``."""
    child = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None
    deadline = time.monotonic() + LIFE_DEADLINE
    seen = 0
    try:
        while beats is None or seen < beats:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"a life did not finish within {LIFE_DEADLINE} s")
            ready, _, _ = select.select([child.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(child.stdout.fileno(), 4096)
            if not chunk:  # the life ended by itself
                break
            seen += len(chunk)
        if beats is not None and seen >= beats:
            if not term:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(timeout=30)
                return True, seen
            child.send_signal(signal.SIGTERM)
            out, err = child.communicate(timeout=NOTICE)
            assert child.returncode == 0, err.decode()[-3000:]
            return True, seen + len(out)
        out, err = child.communicate(timeout=max(deadline - time.monotonic(), 1))
        assert child.returncode == 0, err.decode()[-3000:]
        return False, seen + len(out)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)


def torture(tmp_path: Path, remote: str | None, *, node_loss: bool) -> int:
    """Kill lives at random (every third one a SIGTERM it must drain
    instead); with ``node_loss``, each SIGKILL takes the node's disk with
    it. Audits the training log; returns the tokens generated again."""
    kills = int(os.environ.get("FRONTIER_RUN_KILLS", "8"))
    rng = random.Random(int(os.environ.get("FRONTIER_RUN_KILL_SEED", "0")))
    code = (
        f"import pathlib; from {__name__} import life; "
        f"life(pathlib.Path({str(tmp_path)!r}), {remote!r})"
    )
    cmd = [sys.executable, "-c", code]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    killed = generated = 0
    for i in range(kills):
        term = i % 3 == 2
        stopped, tokens = run_life(cmd, env, rng.randint(term, 80), term=term)
        killed, generated = killed + stopped, generated + tokens
        if node_loss and not term:
            shutil.rmtree(tmp_path / "run", ignore_errors=True)  # the node is gone
    # The last life runs to the end (a life killed after its work was all
    # done would have finished: the audit below counts what it trained).
    generated += run_life(cmd, env, None)[1]
    assert killed >= kills * 3 // 4, f"only {killed} of {kills} lives were killed mid-work"
    trained = audit(tmp_path / "trained.jsonl")
    assert trained == {o: [full(o, s) for s in range(SAMPLES)] for o in range(PROMPTS)}
    needed = sum(len(full(o, s)) for o in range(PROMPTS) for s in range(SAMPLES))
    # Reported, not asserted (the kills are wall-clock): ``pytest -s``.
    print(
        f"\n{tmp_path.name}: {kills} kills, {generated - needed} of {needed} tokens generated again"
    )
    return generated - needed


def test_a_run_killed_at_random_trains_every_sample_exactly_once(tmp_path: Path) -> None:
    torture(tmp_path, None, node_loss=False)


def test_a_run_whose_node_is_lost_resumes_from_what_it_shipped(tmp_path: Path) -> None:
    """Every SIGKILL also deletes the node's directory (the journal file
    with it); the checkpoints and the shipped journal are on a shared
    directory. Never a refusal to resume; nothing lost or doubled."""
    remote = tmp_path / "shared"
    torture(tmp_path, str(remote), node_loss=True)


def test_a_run_whose_node_is_lost_resumes_from_a_bucket(tmp_path: Path, s3_url: str) -> None:
    """The same on a real S3 server (SeaweedFS on loopback): checkpoints as
    immutable objects under a conditionally moved LATEST, the journal as
    shipped segments."""
    torture(tmp_path, s3_url, node_loss=True)
