"""A small real training run with crash-safe data coverage, and its torture test.

``run`` trains a tiny torch model on a generated dataset (no downloads): the
seekable loader feeds a ``StreamCollector``; a simulated asynchronous
generation pool keeps prompts in flight across steps with random latency and
occasional failures (retried, then dropped); each training step is one real
optimizer step on the oldest buffered groups, is written to the training-data
log, and is followed by an atomic checkpoint (collector state, replay buffer,
model, optimizer, log record count). A restarted run resumes from the latest
checkpoint, sometimes without its replay buffer or with part of it evicted.

``torture`` runs ``run`` in subprocesses and SIGKILLs them at random
moments, some timed to land inside a checkpoint write, restarting each time
until the stream is done; then it audits the log with the ``frontier audit``
command: every ordinal of the stream must be trained exactly once or dropped
exactly once. The result says that the audit ran, its report and its exit
status.

    python -m frontier_adapters.examples torch-torture --workdir /tmp/t --kills 100
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import attrs
import torch

from frontier_core import FailurePolicy, LedgerConfig, TrainLogWriter

from .._collector import StreamCollector
from ..torch import make_seekable_loader
from ..torch._files import (
    dataset_fingerprint,
    read_checkpoint,
    write_checkpoint,
)
from ..torch._sources import SeekableSource

FEATURES = 4
LOG_NAME = "train_log.jsonl"
CKPT_DIR = "checkpoints"


def make_dataset(rows: int) -> list[torch.Tensor]:
    """``rows`` rows of 4 features and a linear target, generated."""
    out = []
    for i in range(rows):
        x = torch.tensor([((i * 7 + k * 3) % 11) / 11.0 for k in range(FEATURES)])
        y = (x * torch.tensor([0.5, -1.0, 2.0, 0.25])).sum() + 0.1
        out.append(torch.cat([x, y.reshape(1)]))
    return out


@attrs.frozen
class RunArgs:
    """The arguments of one life of the run (``python -m
    frontier_adapters.examples torch-run``)."""

    workdir: str
    rows: int = 40
    epochs: int = 2
    seed: int = 0
    batch_size: int = 5
    group: int = 4  # groups per training step
    capacity: int = 7  # prompts in flight at most
    fail_rate: float = 0.15
    write_pause: float = 0.0  # seconds between the parts of a checkpoint write
    announce: bool = False  # print ready / ckpt-part lines for the torture


def run(args: RunArgs) -> int:
    """Resume from ``args.workdir`` (or start) and train to the end of the stream."""
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    dataset = make_dataset(args.rows)
    fingerprint = dataset_fingerprint(dataset, seed=args.seed, shuffle=True)
    loader = make_seekable_loader(
        dataset, batch_size=args.batch_size, seed=args.seed, shuffle=True, epochs=args.epochs
    )
    stream_len = args.rows * args.epochs
    collector = StreamCollector(
        SeekableSource(loader),
        LedgerConfig(
            stream_len=stream_len,
            on_failure=FailurePolicy.RETRY,
            max_attempts=2,
            fingerprint=fingerprint,
        ),
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    log_path = workdir / LOG_NAME
    ckpt_root = workdir / CKPT_DIR

    buffer: dict[int, list[float]] = {}
    loaded = read_checkpoint(
        ckpt_root, fingerprint=fingerprint, require=["state", "model", "optim"]
    )
    if loaded is None:
        step, resumes = 0, 0
        # A run killed before its first checkpoint left a dead branch.
        fresh = not log_path.exists() or log_path.stat().st_size == 0
        log = TrainLogWriter(log_path, resume_records=None if fresh else 0)
    else:
        state = loaded.json_parts["state"]
        step, resumes = loaded.step, state["resumes"] + 1
        saved = {int(o): row for o, row in state["buffer"].items()}
        rng = random.Random(f"{args.seed}:resume:{step}:{resumes}")
        load_buffer = rng.random() >= 0.25
        evicted = [o for o in sorted(saved) if load_buffer and rng.random() < 0.2]
        collector.resume(
            state["collector"], load_replay_buffer=load_buffer, evicted_on_restore=evicted
        )
        if load_buffer:
            buffer = {o: row for o, row in saved.items() if o not in evicted}
        model.load_state_dict(loaded.tensor_parts["model"])
        optim.load_state_dict(loaded.tensor_parts["optim"])
        log = TrainLogWriter(log_path, resume_records=state["records"])

    def between_parts(name: str) -> None:
        if args.announce:
            print(f"ckpt-part {name}", flush=True)
        if args.write_pause:
            time.sleep(args.write_pause)

    rng = random.Random(f"{args.seed}:run:{step}:{resumes}")
    in_flight: dict[int, list[Any]] = {}  # ordinal -> [row, ticks left]
    if args.announce:
        print(f"ready step={step} resumes={resumes}", flush=True)
    while not collector.drained:
        for o, row in collector.take(args.capacity - len(in_flight)):
            in_flight[o] = [row, rng.randint(1, 4)]
        for o in sorted(in_flight):
            in_flight[o][1] -= 1
            if in_flight[o][1] > 0:
                continue
            row = in_flight.pop(o)[0]
            if rng.random() < args.fail_rate:
                log.dropped(collector.failed([o]).dropped)
            else:
                collector.landed([o])
                buffer[o] = [float(v) for v in row.tolist()]
        enough = len(buffer) >= args.group
        tail = collector.exhausted and not in_flight and buffer
        if not (enough or tail):
            if collector.exhausted and not in_flight and not collector.drained:
                raise RuntimeError("stream stalled: nothing in flight, pending or buffered")
            continue
        chosen = sorted(buffer)[: args.group]
        batch = torch.tensor([buffer.pop(o) for o in chosen])
        loss = torch.nn.functional.mse_loss(model(batch[:, :FEATURES]).squeeze(1), batch[:, -1])
        optim.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optim.step()
        collector.trained(chosen)
        log.step(step, chosen)
        step += 1
        log.sync()
        write_checkpoint(
            ckpt_root,
            step,
            fingerprint=fingerprint,
            json_parts={
                "state": {
                    "collector": collector.state_dict(),
                    "buffer": {str(o): row for o, row in buffer.items()},
                    "records": log.records,
                    "resumes": resumes,
                }
            },
            tensor_parts={"model": model.state_dict(), "optim": optim.state_dict()},
            between_parts=between_parts,
        )
    log.close()
    print(f"done steps={step}", flush=True)
    return 0


@attrs.frozen
class TortureResult:
    """What the torture did and what ``frontier audit`` said of the log.

    ``audit`` is the command's JSON report (``audit["clean"]`` its verdict)
    and ``audit_exit`` its exit status: 0 clean, 1 coverage violated. The
    counts below are read from that report."""

    kills: int
    in_write_kills: int
    lives: int
    stream_len: int
    trained_once: int
    dropped: int
    skipped: tuple[int, ...]
    duplicated: tuple[int, ...]
    audit: dict[str, Any]
    audit_exit: int
    seconds: float

    @property
    def clean(self) -> bool:
        return self.audit_exit == 0 and bool(self.audit["clean"])


def torture(
    workdir: str | os.PathLike[str],
    *,
    kills: int,
    seed: int = 0,
    rows: int | None = None,
    epochs: int = 2,
    write_pause: float = 0.01,
    timeout: float = 600.0,
    verbose: bool = False,
) -> TortureResult:
    """SIGKILL ``run`` ``kills`` times, then let it finish; audit the log
    with ``frontier audit`` (raises ``RuntimeError`` if the audit cannot
    read it)."""
    t0 = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rows = rows if rows is not None else max(20, 2 * kills)
    rng = random.Random(seed)
    cmd = [
        sys.executable,
        "-m",
        "frontier_adapters.examples",
        "torch-run",
        "--workdir",
        str(workdir),
        "--rows",
        str(rows),
        "--epochs",
        str(epochs),
        "--seed",
        str(seed),
        "--write-pause",
        str(write_pause),
        "--announce",
    ]
    killed = in_write = lives = 0
    while True:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"torture did not finish in {timeout} s ({killed} kills)")
        lives += 1
        errf = open(workdir / "stderr.log", "ab")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True)
        assert proc.stdout is not None
        mode = "finish" if killed >= kills else rng.choice(["write", "write", "time", "boot"])
        hit_write = False
        if mode == "boot":
            time.sleep(rng.uniform(0.0, 1.5))  # often still importing torch
        elif mode == "time":
            line = proc.stdout.readline()  # "ready ..."
            time.sleep(rng.uniform(0.0, 0.25))
            del line
        elif mode == "write":
            target = rng.randint(1, 8)
            seen = 0
            for line in proc.stdout:
                if line.startswith("ckpt-part"):
                    seen += 1
                    if seen >= target:
                        hit_write = True
                        break
        if mode != "finish" and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            errf.close()
            killed += 1
            in_write += hit_write
            if verbose:
                print(f"kill {killed} ({mode}{', in a write' if hit_write else ''})", flush=True)
            continue
        out, _ = proc.communicate()
        errf.close()
        if proc.returncode != 0:
            tail = (workdir / "stderr.log").read_text()[-3000:]
            raise RuntimeError(f"run exited with {proc.returncode}:\n{tail}")
        if "done" in out:
            break
    stream_len = rows * epochs
    audit_exit, report = run_audit(workdir / LOG_NAME, stream_len)
    return TortureResult(
        kills=killed,
        in_write_kills=in_write,
        lives=lives,
        stream_len=stream_len,
        trained_once=int(report["trained_once"]),
        dropped=int(report["dropped"]),
        skipped=tuple(report["skipped_ordinals"]),
        duplicated=tuple(
            sorted({*report["duplicated_ordinals"], *report["out_of_range_ordinals"]})
        ),
        audit=report,
        audit_exit=audit_exit,
        seconds=round(time.monotonic() - t0, 1),
    )


#: The audit as a user runs it: ``frontier audit LOG --stream-len N --json``.
AUDIT = (sys.executable, "-m", "frontier_core._cli", "audit")


def run_audit(log: str | os.PathLike[str], stream_len: int) -> tuple[int, dict[str, Any]]:
    """Run ``frontier audit --json`` on ``log``: its exit status and report.

    Raises ``RuntimeError`` when it printed no report (exit 2: the log is
    unreadable or truncated)."""
    proc = subprocess.run(
        [*AUDIT, str(log), "--stream-len", str(stream_len), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"frontier audit exited with {proc.returncode}: {proc.stderr.strip()}")
    report: dict[str, Any] = json.loads(proc.stdout)
    return proc.returncode, report
