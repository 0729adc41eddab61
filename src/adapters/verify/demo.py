"""``frontier demo``: async GRPO on a CPU engine, SIGKILLed and resumed, A/B.

Runs the training loop of ``grpo_worker`` in a subprocess, once with the
legacy live-cursor checkpoint and once with ``frontier_core``, kills each at
the same seeded moments (``d`` committed steps after a restart, then a
random delay, so kills land mid-generation, mid-step or mid-write), restarts
it until its stream is done, and audits each training-data log with
``frontier audit``'s own function. Prints the two audits side by side and the
reward curve of each surviving lineage. Exit status: 0 when frontier_core
trained every prompt exactly once or dropped it on record, 1 otherwise, 2
when a worker crashed by itself.

With ``engine="vllm"`` (``frontier demo --engine vllm``) the workers
generate with real vLLM on the tiny Llama of ``tiny_llm``, trained by torch
through transformers, and push their weights into the engine after every
step (see ``grpo_worker``); the CPU engine is the default.

``run_demo(journal=True)`` (``frontier demo --journal``) is the sample-level
A/B instead: the worker's ``--journal`` life, resumed with coverage only
(``coverage``: nothing of the rollout journal reused) and with the journal
(``journal``), under the same kills of ``journal_kill_schedule``: at random
moments, with a journal record queued and not committed, in the middle of a
group commit, in a compaction before and just after it is in place, and
right after a resume. Each lineage is audited by ``frontier audit``'s
function and sample by sample (``audit_samples``: every trained group has
its n samples, each from one attempt, no attempt twice, each exactly what
the engine generated for it), and the tokens generated again are counted.

Each life runs in a process group of its own, and a kill is a SIGKILL of
the whole group: the worker and every process it started (vLLM's engine
core and worker processes; Python's resource tracker is left to clean up
after them and exit, see ``kill_group``). After each life,
killed or not, nothing of the group may be left running (``WorkerCrashed``
otherwise); the shared-memory segments the killed processes had mapped and
the life's private temporary directory (its ``TMPDIR``, where vLLM puts its
unix sockets) are removed. Each life has a deadline (``_lives.Life``:
``$FRONTIER_LIFE_DEADLINE`` seconds, 600 by default, and never more than is
left of the mode's 900): a life that passes it is killed with its group and
the demo exits 2 naming it, rather than waiting for it for ever.

``run_demo`` is the command's body; ``frontier demo`` (``frontier_adapters._cli``)
parses its options. This module imports no torch: the workers do.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from frontier_core._audit import AuditReport, audit_log, format_report

from ._files import read_lines
from ._lives import PIPE, Life
from ._lives import LifeDeadlineError as LifeDeadlineError
from ._lives import WorkerCrashed as WorkerCrashed
from ._lives import await_group_gone as await_group_gone
from ._lives import group_members as group_members
from ._lives import kill_group as kill_group
from ._lives import life_deadline as _life_deadline
from ._lives import shared_memory_of as shared_memory_of

#: One life of a mode: ``python -m frontier_adapters.verify grpo-worker ...``.
WORKER = ("-m", "frontier_adapters.verify", "grpo-worker")
MODES = ("legacy", "frontier")
#: Worker options of the sample-level modes: the injected failure and
#: stall rates are per request, and a request is one sample there, so that
#: a group of eight fails about as often as the prompt-level request does.
#: A request may take 4 s, not 1.5: a group's eight samples run at once, and
#: on a loaded 2-core machine whole groups timed out together and were
#: dropped, ending the stream before the planned kills.
JOURNAL_ARGS = ("--fail-rate", "0.0025", "--stall-rate", "0.00125", "--timeout", "4")
#: ``frontier demo --journal``: the sample-level stack with the rollout
#: journal, resumed with coverage only (nothing of the journal reused:
#: every unresolved sample is generated again) and with the journal's
#: samples and prefixes reused (tokens at most ``--max-age`` updates old).
JOURNAL_MODES = ("coverage", "journal")
#: The worker options of each mode.
MODE_ARGS: dict[str, tuple[str, ...]] = {
    "legacy": ("--mode", "legacy"),
    "frontier": ("--mode", "frontier"),
    "coverage": ("--mode", "frontier", "--journal", "--reuse", "nothing", *JOURNAL_ARGS),
    "journal": ("--mode", "frontier", "--journal", "--reuse", "age", *JOURNAL_ARGS),
}
LOG_NAME = "train_log.jsonl"
SUMMARY_NAME = "summary.json"
#: The sample-level worker's logs (``grpo_worker.SampleLog``, ``TokenLog``).
SAMPLES_LOG = "samples.jsonl"
GENERATED_GLOB = "generated-*.jsonl"
SPARK = "▁▂▃▄▅▆▇█"
ENGINES = ("cpu", "vllm")
#: Worker options per engine: vLLM requests get a longer timeout (its
#: first requests after a start are slow on a busy machine) and no
#: injected stalls (each would hold a slot for the whole timeout).
ENGINE_ARGS: dict[str, tuple[str, ...]] = {
    "cpu": (),
    "vllm": ("--engine", "vllm", "--timeout", "20", "--stall-rate", "0"),
}


@attrs.frozen
class Kill:
    """Kill a life ``steps`` committed steps after it reported ready, plus
    ``delay`` seconds (``at="random"``); right after it reported ready, plus
    ``delay`` (``"resume"``); or at a kill point of the sample-level worker
    (``_killpoints.KillPoint``: ``append``, ``commit``, ``compact``,
    ``compacted``), the ``count``-th time it passes it once ``steps`` steps
    are committed."""

    steps: int
    delay: float
    at: str = "random"
    count: int = 0


#: Where ``frontier demo --journal`` kills: a seeded order of these, each
#: kind once before any twice.
KILL_KINDS = ("random", "append", "commit", "compact", "compacted", "resume")
#: The kill points the worker stops at itself (``--kill-at``).
WORKER_POINTS = frozenset({"append", "commit", "compact", "compacted"})
#: The passage of a kill point to die at is drawn from ``1..COUNTS[kind]``:
#: appends come by the hundred per step, group commits by the dozen, a
#: compaction once per step.
COUNTS = {"append": 96, "commit": 16, "compact": 2, "compacted": 2}


def kill_schedule(seed: int, kills: int, total_steps: int) -> tuple[Kill, ...]:
    """``kills`` kill points spread over a run of ``total_steps`` steps."""
    rng = random.Random(f"demo-kills:{seed}")
    span = max(1, total_steps // (kills + 1))
    return tuple(Kill(rng.randint(1, span), round(rng.uniform(0.0, 0.12), 3)) for _ in range(kills))


def journal_kill_schedule(seed: int, kills: int, total_steps: int) -> tuple[Kill, ...]:
    """``kills`` kills of the kinds in ``KILL_KINDS`` (each kind once, in a
    seeded order, before any kind twice; the first life, a fresh start, is
    never killed "after a resume"), spread over ``total_steps`` steps."""
    rng = random.Random(f"demo-journal-kills:{seed}")
    span = max(1, total_steps // (kills + 1))
    kinds: list[str] = []
    while len(kinds) < kills:
        block = list(KILL_KINDS)
        rng.shuffle(block)
        kinds += block
    kinds = kinds[:kills]
    if len(kinds) > 1 and kinds[0] == "resume":
        kinds[0], kinds[1] = kinds[1], kinds[0]
    out = []
    for kind in kinds:
        if kind == "resume":
            # After the ready line, before the life's first step: its first
            # requests (continued prefixes among them) are generating.
            out.append(Kill(0, round(rng.uniform(0.02, 0.2), 3), "resume"))
        elif kind == "random":
            out.append(Kill(rng.randint(1, span), round(rng.uniform(0.0, 0.12), 3)))
        else:
            out.append(Kill(rng.randint(1, span), 0.0, kind, rng.randint(1, COUNTS[kind])))
    return tuple(out)


@attrs.frozen
class SampleAudit:
    """The per-sample audit of a sample-level lineage (``audit_samples``).

    ``groups`` and ``samples`` were trained in the surviving lineage;
    ``wrong_size`` lists the groups trained without exactly ``n`` samples,
    ``attempts_twice`` the attempts that sealed more than one trained
    sample, ``unexplained`` the samples ``(ordinal, sibling, attempt)``
    whose tokens are not what the engine generated for that attempt after
    a prefix an earlier attempt of the same sibling generated (a token
    lost, repeated or changed across a continuation), ``log_mismatch`` the
    steps where the per-sample log and the training log disagree on the
    ordinals. ``tokens_needed`` are the trained samples' tokens,
    ``tokens_generated`` every token the engine yielded in every life
    (``by_life``); the difference was generated again."""

    groups: int
    samples: int
    wrong_size: tuple[int, ...]
    attempts_twice: tuple[int, ...]
    unexplained: tuple[tuple[int, int, int], ...]
    log_mismatch: tuple[int, ...]
    tokens_needed: int
    tokens_generated: int
    by_life: tuple[int, ...]

    @property
    def clean(self) -> bool:
        return not (self.wrong_size or self.attempts_twice or self.unexplained or self.log_mismatch)

    @property
    def tokens_redone(self) -> int:
        return self.tokens_generated - self.tokens_needed

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "samples": self.samples,
            "wrong_size": list(self.wrong_size),
            "attempts_twice": list(self.attempts_twice),
            "unexplained": [list(x) for x in self.unexplained],
            "log_mismatch": list(self.log_mismatch),
            "tokens_needed": self.tokens_needed,
            "tokens_generated": self.tokens_generated,
            "tokens_redone": self.tokens_redone,
            "tokens_by_life": list(self.by_life),
            "clean": self.clean,
        }


def _lease_of(request_id: str) -> tuple[int, int, int]:
    o, s, a = request_id.split("-")  # o{ordinal}-s{sibling}-a{attempt}
    return int(o[1:]), int(s[1:]), int(a[1:])


#: The finish reasons of a usable sample (the engine's ``stop`` and ``length``).
FINISHED = frozenset({"stop", "length"})


def audit_samples(workdir: Path, n: int) -> SampleAudit:
    """Audit a sample-level run in ``workdir`` sample by sample.

    The per-sample log (``samples.jsonl``) is folded to its surviving
    lineage (a resume marker ``k`` drops the steps ``>= k`` before it) and
    compared step by step with the training log's lineage. Every trained
    group must hold ``n`` samples, every attempt must seal at most one of
    them, and every sample must be explained by the generation logs: its
    attempt generated exactly its tokens from some position ``p`` to its
    end and finished there (``stop`` or ``length``), and its first ``p``
    tokens are a prefix that an earlier attempt of the same sibling
    generated (recursively, down to position 0)."""
    from frontier_core._trainlog import fold_lineage, read_train_log

    steps: dict[int, dict[str, list[list[Any]]]] = {}
    for entry in read_lines(workdir / SAMPLES_LOG):
        if "resume" in entry:
            steps = {k: v for k, v in steps.items() if k < entry["resume"]}
        else:
            steps[entry["step"]] = entry["groups"]
    lineage = fold_lineage(read_train_log(workdir / LOG_NAME))
    mismatch = sorted(
        k
        for k in set(steps) | set(lineage.steps)
        if sorted(int(o) for o in steps.get(k, {})) != sorted(lineage.steps.get(k, ()))
    )
    # (ordinal, sibling) -> [(attempt, first position, tokens, finish reason)]
    # over every life.
    runs: dict[tuple[int, int], list[tuple[int, int, list[int], str]]] = {}
    by_life: list[int] = []
    paths = sorted(workdir.glob(GENERATED_GLOB), key=lambda p: int(p.stem.split("-")[1]))
    for path in paths:
        count = 0
        # request id / sample index -> its runs of consecutive positions
        # (one, unless a line is missing).
        life: dict[str, list[list[Any]]] = {}
        for entry in read_lines(path):
            count += len(entry["t"])
            chain = life.setdefault(f"{entry['r']}/{entry.get('i', 0)}", [])
            if not chain or chain[-1][2] or entry["at"] != chain[-1][0] + len(chain[-1][1]):
                chain.append([entry["at"], [], ""])
            chain[-1][1].extend(entry["t"])
            chain[-1][2] = entry.get("f", "")
        by_life.append(count)
        for key, chain in life.items():
            o, s, a = _lease_of(key.split("/")[0])
            for first, tokens, reason in chain:
                runs.setdefault((o, s), []).append((a, first, tokens, reason))

    def prefix_ok(o: int, s: int, tokens: list[int], upto: int, below: int) -> bool:
        if upto == 0:
            return True
        return any(
            a < below
            and first < upto <= first + len(got)
            and tokens[first:upto] == got[: upto - first]
            and prefix_ok(o, s, tokens, first, a)
            for a, first, got, _ in runs.get((o, s), ())
        )

    def explained(o: int, s: int, attempt: int, tokens: list[int]) -> bool:
        return any(
            a == attempt
            and reason in FINISHED
            and first + len(got) == len(tokens)
            and tokens[first:] == got
            and prefix_ok(o, s, tokens, first, a)
            for a, first, got, reason in runs.get((o, s), ())
        )

    wrong_size: list[int] = []
    attempts: dict[int, int] = {}
    unexplained: list[tuple[int, int, int]] = []
    needed = samples = groups = 0
    for k in sorted(steps):
        for key, siblings in steps[k].items():
            o = int(key)
            groups += 1
            if len(siblings) != n:
                wrong_size.append(o)
            for s, (attempt, tokens) in enumerate(siblings):
                samples += 1
                needed += len(tokens)
                attempts[attempt] = attempts.get(attempt, 0) + 1
                if not explained(o, s, attempt, tokens):
                    unexplained.append((o, s, attempt))
    return SampleAudit(
        groups=groups,
        samples=samples,
        wrong_size=tuple(sorted(wrong_size)),
        attempts_twice=tuple(sorted(a for a, c in attempts.items() if c > 1)),
        unexplained=tuple(unexplained),
        log_mismatch=tuple(mismatch),
        tokens_needed=needed,
        tokens_generated=sum(by_life),
        by_life=tuple(by_life),
    )


@attrs.frozen
class ModeResult:
    mode: str
    kills: int
    lives: int
    seconds: float
    report: AuditReport
    rewards: tuple[float, ...]
    counters: dict[str, int]
    #: Requests the worker had in flight at its last step line before each kill.
    in_flight_at_kills: tuple[int, ...] = ()
    #: Where each kill landed (``Kill.at``; a kill point as the worker named it).
    kills_at: tuple[str, ...] = ()
    #: The sample-level worker's ready lines, summed over its lives: the
    #: torn journal tails its opens cut off (``torn_tails``, ``torn`` their
    #: bytes) and the compaction leftovers they removed (``leftovers``), the
    #: siblings its resumes reused from the journal (``reused``) and the
    #: prefixes they offered to continue (``prefixes``).
    resumes: dict[str, int] = attrs.field(factory=dict)
    #: The per-sample audit of a sample-level mode.
    samples: SampleAudit | None = None


def run_mode(
    mode: str,
    workdir: Path,
    schedule: Sequence[Kill],
    worker_args: Sequence[str],
    stream_len: int,
    *,
    on_step: Callable[[int], None] | None = None,
    on_kill: Callable[[int], None] | None = None,
    timeout: float = 900.0,
    life_deadline: float | None = None,
) -> ModeResult:
    """Run ``mode`` to the end of its stream, killing it per ``schedule``.

    Each life has ``life_deadline`` seconds (``_lives.life_deadline``:
    ``$FRONTIER_LIFE_DEADLINE`` or 600 by default), and no more than is
    left of the mode's ``timeout``: past it the life is SIGKILLed with its
    process group and ``LifeDeadlineError`` names it (a worker that hangs
    fails the demo instead of hanging it). Raises ``WorkerCrashed`` for a
    worker that exited by itself with an error or left processes behind,
    ``TimeoutError`` once the mode took ``timeout`` seconds."""
    per_life = _life_deadline(life_deadline)
    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, *WORKER, "--workdir", str(workdir), *MODE_ARGS[mode], *worker_args]
    kills = lives = 0
    in_flight_at_kills: list[int] = []
    kills_at: list[str] = []
    resumes: dict[str, int] = {}
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    while True:
        left = timeout - (time.monotonic() - t0)
        if left <= 0:
            raise TimeoutError(f"{mode}: not done after {timeout} s ({kills} kills)")
        lives += 1
        plan = schedule[kills] if kills < len(schedule) else None
        life_cmd = list(cmd)
        if plan is not None and plan.at in WORKER_POINTS:
            life_cmd += ["--kill-at", f"{plan.at}:{plan.steps}:{plan.count}"]
        scratch = tempfile.mkdtemp(prefix="frontier-life-")
        env = {**base_env, "TMPDIR": scratch}
        try:
            with (
                open(workdir / "stderr.log", "ab") as errf,
                Life(
                    life_cmd,
                    name=f"{mode} worker, life {lives}",
                    deadline=min(per_life, left),
                    stdout=PIPE,
                    stderr=errf,
                    env=env,
                ) as life,
            ):
                seen = in_flight = 0
                done = hit = False
                where = ""
                for line in life.lines("the worker's next line (ready, step, done)"):
                    if line.startswith("step "):
                        seen += 1
                        in_flight = _field(line, "in_flight")
                        if on_step is not None:
                            on_step(int(line.split()[1]))
                    elif line.startswith("ready"):
                        for key in ("torn", "leftovers", "reused", "prefixes"):
                            resumes[key] = resumes.get(key, 0) + _field(line, key)
                        resumes["torn_tails"] = resumes.get("torn_tails", 0) + (
                            _field(line, "torn") > 0
                        )
                    elif line.startswith("done"):
                        done = True
                    elif line.startswith("kill-point "):
                        # The worker stopped at its kill point: kill it there.
                        where = line.split()[1]
                        hit = True
                        break
                    if plan is None or done or plan.at in WORKER_POINTS:
                        continue
                    if (plan.at == "resume" and line.startswith("ready")) or (
                        plan.at == "random" and seen >= plan.steps and seen
                    ):
                        time.sleep(min(plan.delay, life.remaining()))
                        where = plan.at
                        hit = True
                        break
                if hit and life.poll() is None:
                    life.kill()
                    kills += 1
                    in_flight_at_kills.append(in_flight)
                    kills_at.append(where)
                    if on_kill is not None:
                        on_kill(kills)
                    continue
                rest = life.read()
                returncode = life.wait()
                await_group_gone(life.pid)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        done = done or "done" in rest
        if returncode != 0 or not done:
            tail = (workdir / "stderr.log").read_text()[-3000:]
            raise WorkerCrashed(f"{mode} worker exited with {returncode}:\n{tail}")
        break
    summary = json.loads((workdir / SUMMARY_NAME).read_text())
    report = audit_log(workdir / LOG_NAME, stream_len)
    sample_level = "--journal" in MODE_ARGS[mode]
    return ModeResult(
        mode=mode,
        kills=kills,
        lives=lives,
        seconds=round(time.monotonic() - t0, 1),
        report=report,
        rewards=tuple(float(r) for r in summary["rewards"]),
        counters={str(k): int(v) for k, v in summary["counters"].items()},
        in_flight_at_kills=tuple(in_flight_at_kills),
        kills_at=tuple(kills_at),
        resumes=resumes,
        samples=audit_samples(workdir, _samples_per_group(worker_args)) if sample_level else None,
    )


def _samples_per_group(worker_args: Sequence[str]) -> int:
    args = list(worker_args)
    if "--num-generations" in args:
        return int(args[args.index("--num-generations") + 1])
    return 8


def _field(line: str, name: str) -> int:
    """``name=VALUE`` from a worker's step line (0 when absent)."""
    for word in line.split():
        key, _, value = word.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return 0


def buckets(values: Sequence[float], n: int) -> list[float]:
    """``values`` averaged over ``n`` consecutive buckets (fewer if short)."""
    if not values:
        return []
    n = min(n, len(values))
    out = []
    for i in range(n):
        lo, hi = i * len(values) // n, (i + 1) * len(values) // n
        chunk = values[lo:hi]
        out.append(sum(chunk) / len(chunk))
    return out


def sparkline(values: Sequence[float], top: float = 1.0) -> str:
    """One block character per value, ``top`` the full block."""
    top = top if top > 0 else 1.0
    return "".join(SPARK[min(len(SPARK) - 1, max(0, int(v / top * len(SPARK))))] for v in values)


#: The reward of each engine's task, for the legend.
TASKS = {
    "cpu": "the completion starts with the prompt's first token",
    "vllm": "the completion starts with the prompt's last letter",
}


def format_results(
    results: dict[str, ModeResult], stream_len: int, task: str = TASKS["cpu"]
) -> str:
    a, b = results["legacy"], results["frontier"]
    ra, rb = a.report, b.report
    lines = [
        f"Audit of the training-data logs (stream of {stream_len} prompts):",
        *_table(
            [
                ("", "legacy cursor", "frontier_core"),
                ("SIGKILLs", a.kills, b.kills),
                *_coverage_rows(a, b, lost="skipped (silently lost)", discarded=True),
                *_run_rows(a, b),
            ],
            widths=(30, 16),
        ),
        "",
    ]
    if ra.skipped:
        shown = ", ".join(str(o) for o in ra.skipped[:12])
        more = f", ... (+{len(ra.skipped) - 12})" if len(ra.skipped) > 12 else ""
        lines.append(f"  legacy lost ordinals: {shown}{more}")
    verdict = "OK: nothing lost, nothing duplicated" if rb.clean else "FAILED"
    lines.append(f"  frontier_core: {verdict}")
    lines.append("")
    lines.append("Mean reward per training step (surviving lineage; reward 1 when")
    lines.append(f"{task}, 1/16 by chance;")
    lines.append("the full block is the highest bucket, then the means of eight consecutive")
    lines.append("eighths of the run):")
    lines += _reward_curves(a, b)
    return "\n".join(lines)


#: The rows of the kills by where they landed (``Kill.at``).
KILL_ROWS = {
    "random": "  at a random moment",
    "append": "  append queued, not committed",
    "commit": "  mid group commit (torn)",
    "compact": "  compaction not yet in place",
    "compacted": "  compaction just in place",
    "resume": "  right after a resume",
}


def format_journal_results(results: dict[str, ModeResult], stream_len: int) -> str:
    """The side-by-side audit of ``frontier demo --journal``."""
    a, b = results["coverage"], results["journal"]
    assert a.samples is not None and b.samples is not None
    sa, sb = a.samples, b.samples
    lines = [
        f"Audit of the training-data logs, sample by sample (stream of {stream_len} prompts):",
        *_table(
            [
                ("", "coverage only", "journal"),
                ("SIGKILLs", a.kills, b.kills),
                *[
                    (label, a.kills_at.count(k), b.kills_at.count(k))
                    for k, label in KILL_ROWS.items()
                ],
                *_coverage_rows(a, b, lost="lost (skipped)", discarded=False),
                ("samples trained", sa.samples, sb.samples),
                ("groups without all samples", len(sa.wrong_size), len(sb.wrong_size)),
                ("attempts trained twice", len(sa.attempts_twice), len(sb.attempts_twice)),
                ("samples not as generated", len(sa.unexplained), len(sb.unexplained)),
                _count_row("torn journal tails repaired", a.resumes, b.resumes, "torn_tails"),
                _count_row("compaction leftovers removed", a.resumes, b.resumes, "leftovers"),
                _count_row("siblings reused at resumes", a.resumes, b.resumes, "reused"),
                _count_row("samples continued from a prefix", a.counters, b.counters, "continued"),
                ("tokens trained", sa.tokens_needed, sb.tokens_needed),
                ("tokens generated", sa.tokens_generated, sb.tokens_generated),
                ("tokens generated again", sa.tokens_redone, sb.tokens_redone),
                *_run_rows(a, b),
            ],
            widths=(34, 14),
        ),
        "",
    ]
    for r in (a, b):
        assert r.samples is not None
        verdict = (
            "OK: nothing lost, nothing duplicated, every sample as generated"
            if r.report.clean and r.samples.clean
            else "FAILED"
        )
        lines.append(f"  {r.mode}: {verdict}")
    lines.append("")
    lines.append("Mean reward per training step (surviving lineage), as in the A/B:")
    lines += _reward_curves(a, b)
    return "\n".join(lines)


#: A row of a side-by-side audit: its label and the two modes' values.
_Row = tuple[str, object, object]


def _table(rows: Sequence[_Row], *, widths: tuple[int, int]) -> list[str]:
    """The lines of a side-by-side audit: each label left-aligned in
    ``widths[0]`` characters, each value right-aligned in ``widths[1]``."""
    label_width, width = widths
    return [f"  {label:<{label_width}}{x!s:>{width}}{y!s:>{width}}" for label, x, y in rows]


def _count_row(label: str, a: dict[str, int], b: dict[str, int], key: str) -> _Row:
    """The row of a count two modes report under ``key`` (0 when absent)."""
    return (label, a.get(key, 0), b.get(key, 0))


def _coverage_rows(a: ModeResult, b: ModeResult, *, lost: str, discarded: bool) -> list[_Row]:
    """The rows of what both audits count of coverage: the lives and steps,
    then what was trained once, ``lost`` (the skipped), duplicated and
    dropped; ``discarded`` adds the executions lost to kills."""
    ra, rb = a.report, b.report
    return [
        ("process lives", a.lives, b.lives),
        ("training steps kept", ra.steps, rb.steps),
        *(
            [("executions lost to kills", ra.discarded_steps, rb.discarded_steps)]
            if discarded
            else []
        ),
        ("prompts trained exactly once", ra.trained_once, rb.trained_once),
        (lost, len(ra.skipped), len(rb.skipped)),
        ("duplicated", len(ra.duplicated), len(rb.duplicated)),
        ("dropped on record", len(ra.dropped), len(rb.dropped)),
    ]


def _run_rows(a: ModeResult, b: ModeResult) -> list[_Row]:
    """The last rows of both audits: the failures, the evictions, the
    resumes without the buffer and the wall time."""
    return [
        ("failures (timeouts)", _fails(a), _fails(b)),
        _count_row("stale evictions", a.counters, b.counters, "evicted"),
        _count_row("resumes without the buffer", a.counters, b.counters, "buffer_skipped"),
        ("wall time (s)", a.seconds, b.seconds),
    ]


def _reward_curves(a: ModeResult, b: ModeResult) -> list[str]:
    """One line per mode: its rewards in 32 buckets as a sparkline (on one
    scale for both), then the means of eight buckets and the step count."""
    curves = {r.mode: buckets(r.rewards, 32) for r in (a, b)}
    top = max((v for c in curves.values() for v in c), default=1.0)
    return [
        f"  {r.mode:<9}{sparkline(curves[r.mode], top):<32}  "
        + " ".join(f"{v:.2f}" for v in buckets(r.rewards, 8))
        + f"  ({len(r.rewards)} steps)"
        for r in (a, b)
    ]


def _fails(r: ModeResult) -> str:
    return f"{r.counters.get('failed', 0)} ({r.counters.get('timeouts', 0)})"


def plot(results: dict[str, ModeResult], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for r in results.values():
        window = max(1, len(r.rewards) // 16)
        smooth = [
            sum(r.rewards[max(0, i - window + 1) : i + 1])
            / len(r.rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(r.rewards))
        ]
        ax.plot(range(1, len(smooth) + 1), smooth, label=f"{r.mode} ({r.kills} kills)")
    ax.set_xlabel("training step (surviving lineage)")
    ax.set_ylabel("mean reward (moving average)")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("async GRPO on a CPU engine, SIGKILLed and resumed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_demo(
    *,
    kills: int,
    prompts: int,
    seed: int = 0,
    workdir: str | os.PathLike[str] | None = None,
    as_json: bool = False,
    plot_path: str | None = None,
    modes: Sequence[str] | None = None,
    engine: str = "cpu",
    journal: bool = False,
    life_deadline: float | None = None,
) -> int:
    """Run the A/B (or the given ``modes``), print the audits (one JSON
    object with ``as_json``) and return the exit status: 0 when
    frontier_core lost and duplicated nothing, 1 when it did, 2 when a worker
    crashed by itself or a life passed its deadline (``life_deadline``
    seconds, default ``$FRONTIER_LIFE_DEADLINE`` or 600: the life is killed
    with its process group and the message names it), or
    ``$FRONTIER_LIFE_DEADLINE`` is not a positive number. ``journal`` runs
    the sample-level A/B instead (``JOURNAL_MODES``, the kills of
    ``journal_kill_schedule``, the per-sample audit, which must be clean
    too). Raises ``ValueError`` for ``kills < 0``, ``prompts < 1``, an
    unknown engine or mode, the journal on vLLM, or a ``life_deadline``
    that is not a positive finite number."""
    try:
        per_life = _life_deadline(life_deadline)
    except ValueError as exc:
        if life_deadline is not None:
            raise
        print(f"frontier demo: {exc}", file=sys.stderr)
        return 2
    if kills < 0 or prompts < 1:
        raise ValueError(f"kills must be >= 0 and prompts >= 1, got {kills} and {prompts}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if journal and engine != "cpu":
        raise ValueError("the sample-level demo (journal) runs on the CPU engine only")
    if modes is None:
        modes = JOURNAL_MODES if journal else MODES
    allowed = JOURNAL_MODES if journal else MODES
    if not modes or any(m not in allowed for m in modes):
        raise ValueError(f"modes must be among {allowed}, got {tuple(modes)}")
    groups_per_step = 8
    total_steps = math.ceil(prompts / groups_per_step)
    schedule = (journal_kill_schedule if journal else kill_schedule)(seed, kills, total_steps)
    worker_args = ["--prompts", str(prompts), "--seed", str(seed), *ENGINE_ARGS[engine]]
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="frontier-demo-"))
    if workdir:
        for mode in modes:
            shutil.rmtree(root / mode, ignore_errors=True)
    from tqdm import tqdm  # type: ignore[import-untyped]

    results: dict[str, ModeResult] = {}
    try:
        for mode in modes:
            bar = tqdm(
                total=total_steps,
                desc=f"{mode:<8}",
                unit="step",
                file=sys.stderr,
                disable=as_json and not sys.stderr.isatty(),
                dynamic_ncols=True,
            )
            bar.set_postfix(kills=0)

            def on_step(step: int, bar: Any = bar) -> None:
                bar.n = min(step, total_steps)
                bar.refresh()

            def on_kill(n: int, bar: Any = bar) -> None:
                bar.set_postfix(kills=n)

            try:
                results[mode] = run_mode(
                    mode,
                    root / mode,
                    schedule,
                    worker_args,
                    prompts,
                    on_step=on_step,
                    on_kill=on_kill,
                    life_deadline=per_life,
                )
            finally:
                bar.close()
    except (WorkerCrashed, TimeoutError) as exc:
        # A crash, a life past its deadline (LifeDeadlineError) or a mode
        # past its timeout: no verdict on coverage, so not exit 1.
        print(f"frontier demo: {exc}", file=sys.stderr)
        return 2
    finally:
        if not workdir:
            shutil.rmtree(root, ignore_errors=True)
    if as_json:
        print(
            json.dumps(
                {
                    "stream_len": prompts,
                    "seed": seed,
                    "engine": engine,
                    "schedule": [attrs.asdict(k) for k in schedule],
                    **{
                        m: {
                            "kills": r.kills,
                            "lives": r.lives,
                            "seconds": r.seconds,
                            "audit": r.report.to_json(),
                            "rewards": list(r.rewards),
                            "counters": r.counters,
                            "in_flight_at_kills": list(r.in_flight_at_kills),
                            **(
                                {
                                    "kills_at": list(r.kills_at),
                                    "resumes": r.resumes,
                                    "samples": r.samples.to_json(),
                                }
                                if r.samples is not None
                                else {}
                            ),
                        }
                        for m, r in results.items()
                    },
                }
            )
        )
    elif len(results) == 2:
        if journal:
            print(format_journal_results(results, prompts))
        else:
            print(format_results(results, prompts, TASKS[engine]))
    else:
        for r in results.values():
            print(format_report(r.report, r.mode))
            if r.samples is not None:
                print(format_samples(r))
    if plot_path:
        plot(results, plot_path)
        if not as_json:
            print(f"reward curves drawn to {plot_path}")
    checked = [r for m, r in results.items() if m != "legacy"]
    clean = all(r.report.clean and (r.samples is None or r.samples.clean) for r in checked)
    return 0 if clean else 1


def format_samples(r: ModeResult) -> str:
    """The per-sample audit of one sample-level mode, in a few lines."""
    a = r.samples
    assert a is not None
    kinds = ", ".join(f"{k} {r.kills_at.count(k)}" for k in KILL_ROWS if k in r.kills_at)
    return "\n".join(
        [
            f"  kills: {r.kills} ({kinds or 'none'})",
            f"  samples trained: {a.samples} in {a.groups} groups; without all samples: "
            f"{len(a.wrong_size)}; attempts twice: {len(a.attempts_twice)}; not as generated: "
            f"{len(a.unexplained)}; log mismatches: {len(a.log_mismatch)}",
            f"  tokens: {a.tokens_needed} trained, {a.tokens_generated} generated, "
            f"{a.tokens_redone} generated again",
            f"  per-sample audit: {'OK' if a.clean else 'FAILED'}",
        ]
    )
