"""Measure the waste: seven recovery modes on one workload and one kill schedule.

``frontier simulate --waste`` runs the same workload under the same kills in
seven modes (five under process kills, two under node losses) and reports,
per kill and in total, the generated tokens each kill discarded (held
before it, gone after the resume: generated, and to be generated again),
with each mode's coverage audited per prompt and per sample:

* ``legacy``: the live-cursor checkpoint; loses prompts (their tokens are
  discarded and never generated again: it redoes less because it skips).
* ``coverage``: the ``Ledger`` told of whole groups (NeMo-RL #3599): exact
  coverage, everything in flight regenerated.
* ``siblings``: the ``Ledger`` with the sealed siblings of
  outstanding groups saved with the checkpoint (NeMo-RL #3923).
* ``journal``: the ``Ledger`` with every seal journaled (group
  commit, ``Workload.commit_delay``), reused from the durable journal.
* ``progress``: as ``journal``, plus each running sample's progress every
  ``Workload.progress_every`` tokens, continued after the resume.
* ``node-local``: as ``progress``, but every kill is a node loss and the
  journal lives on the node: it is lost whole, and the resume goes on from
  the checkpoint alone (what coverage-only recovery redoes).
* ``node-shipped``: as ``node-local``, with the journal shipped off the
  node ``Workload.ship_lag`` behind (``frontier_adapters.journal.Shipper``):
  only the unshipped tail is lost. At a lag of 0 it redoes what
  ``progress`` does under process kills.

The goal (issue 13): journal plus progress redoes at most ``GOAL_PCT`` of
what coverage-only redoes. It is checked on the whole run and on the kills
both modes lived through (a mode that wastes less finishes sooner and
meets fewer of the later kills, which flatters its total); the goal is met
when both are. The node goal (issue 23): the same bound for ``node-shipped`` at a
shipping lag of a few seconds (reported, with the lag, as ``node_goal``).
It is a measurement, not a coverage verdict: only a mode
that claims exactness and loses or duplicates a prompt or a sample fails
the run.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from .._errors import FrontierError
from ._frontier import FrontierBackend
from ._legacy import LegacyBackend
from ._pipeline import Backend, SimulationError
from ._report import ModeResult, format_workload, kill_schedule, random_workload, run_mode
from ._siblings import (
    journal_progress,
    journal_sealed,
    journal_turns,
    node_local,
    node_shipped,
    siblings_at_checkpoint,
)
from ._workload import Kill, Workload

#: Journal plus progress must redo at most this share of coverage-only's tokens.
GOAL_PCT = 5.0


@attrs.frozen
class WasteMode:
    """A mode of the comparison: its key (JSON, log names), its column
    header, whether it claims exactly-once coverage, its backend."""

    name: str
    label: str
    exact: bool
    factory: Callable[[Workload], Backend]
    description: str


WASTE_MODES: tuple[WasteMode, ...] = (
    WasteMode("legacy", "legacy", False, LegacyBackend, "live cursor (loses prompts)"),
    WasteMode("coverage", "coverage", True, FrontierBackend, "coverage only (NeMo-RL #3599)"),
    WasteMode(
        "siblings",
        "siblings@ckpt",
        True,
        siblings_at_checkpoint,
        "sealed siblings kept at the checkpoint (NeMo-RL #3923)",
    ),
    WasteMode("journal", "journal", True, journal_sealed, "journal of sealed siblings"),
    WasteMode("progress", "journal+prog", True, journal_progress, "journal plus token progress"),
    WasteMode(
        "node-local",
        "node:local",
        True,
        node_local,
        "node losses, journal plus progress on the node only",
    ),
    WasteMode(
        "node-shipped",
        "node:shipped",
        True,
        node_shipped,
        "node losses, journal plus progress shipped off the node (ship_lag behind)",
    ),
)
#: The eighth mode, run when the workload's samples are multi-turn
#: episodes (``Workload.turns > 1``): the turn journal.
TURN_MODE: Final = WasteMode(
    "turns", "journal:turns", True, journal_turns, "multi-turn episodes journaled turn by turn"
)
_BY_NAME = {m.name: m for m in (*WASTE_MODES, TURN_MODE)}


def waste_modes(workload: Workload) -> tuple[WasteMode, ...]:
    """The modes ``run_waste`` compares on ``workload``: the seven, and the
    turn journal when its samples are episodes of several turns."""
    return (*WASTE_MODES, TURN_MODE) if workload.turns > 1 else WASTE_MODES


def pct(part: float, whole: float) -> float:
    """``part`` as a percentage of ``whole``; 0 of 0 is 0%, more than 0 of 0
    is infinite."""
    if whole > 0:
        return 100.0 * part / whole
    return 0.0 if part <= 0 else math.inf


@attrs.frozen
class WasteResult:
    """The modes' runs of ``workload`` under ``kills``, by mode name."""

    workload: Workload
    kills: tuple[Kill, ...]
    results: Mapping[str, ModeResult]

    @property
    def modes(self) -> tuple[WasteMode, ...]:
        """The modes run, in the order of the comparison."""
        return tuple(m for m in (*WASTE_MODES, TURN_MODE) if m.name in self.results)

    def turns_redone(self, mode: str) -> int:
        """The turns the kills made ``mode``'s run generate again."""
        return self.results[mode].stats.turns_discarded

    @property
    def turn_goal_met(self) -> bool | None:
        """Multi-turn: the turn journal redoes at most ``GOAL_PCT`` of the
        turns coverage-only redoes (``None``: single-turn samples)."""
        if "turns" not in self.results:
            return None
        return pct(self.turns_redone("turns"), self.turns_redone("coverage")) <= GOAL_PCT

    def redone(self, mode: str) -> float:
        """Tokens the kills discarded in ``mode``'s run, in all."""
        return self.results[mode].stats.tokens_discarded

    def per_kill(self, mode: str) -> dict[tuple[int, bool], float]:
        """Tokens each kill discarded, by kill (``KillWaste.key``)."""
        return {k.key: k.discarded for k in self.results[mode].stats.kill_log}

    def shared_kills(self, mode: str, reference: str = "coverage") -> list[tuple[int, bool]]:
        """The kills both runs lived through."""
        theirs = self.per_kill(reference)
        return [key for key in self.per_kill(mode) if key in theirs]

    def vs(self, mode: str, reference: str = "coverage") -> tuple[float, float]:
        """``mode``'s tokens redone as a percentage of ``reference``'s: in
        all, and over the kills both lived through."""
        mine, theirs = self.per_kill(mode), self.per_kill(reference)
        shared = self.shared_kills(mode, reference)
        matched = pct(math.fsum(mine[k] for k in shared), math.fsum(theirs[k] for k in shared))
        return pct(self.redone(mode), self.redone(reference)), matched

    @property
    def goal_met(self) -> bool:
        return max(self.vs("progress")) <= GOAL_PCT

    @property
    def node_goal_met(self) -> bool:
        """The goal for node losses with the journal shipped (at this lag)."""
        return max(self.vs("node-shipped")) <= GOAL_PCT

    def violations(self) -> list[str]:
        """The modes that claim exactness and lost or duplicated a prompt or
        a sample."""
        return [m.name for m in self.modes if m.exact and not self.results[m.name].lossless]

    @property
    def clean(self) -> bool:
        return not self.violations()

    def mode_summary(self, mode: str) -> dict[str, Any]:
        r = self.results[mode]
        s, a = r.stats, r.audit
        samples = r.samples
        total, matched = self.vs(mode)
        backend = _BY_NAME[mode]
        summary: dict[str, Any] = {
            "description": backend.description,
            "exact": backend.exact,
            "tokens_redone": round(s.tokens_discarded),
            "redone_vs_coverage_pct": _json_pct(total),
            "redone_vs_coverage_shared_kills_pct": _json_pct(matched),
            "tokens_generated": round(s.tokens_generated),
            "tokens_trained": round(s.tokens_trained),
            "tokens_failed": round(s.tokens_failed),
            "tokens_recovered": round(s.tokens_recovered),
            "redone_pct_of_generated": round(pct(s.tokens_discarded, s.tokens_generated), 2),
            "turns_redone": s.turns_discarded,
            "calls_repeated": s.calls_repeated,
            "kills": [
                {
                    "kill": k.index,
                    "follow_up": k.follow_up,
                    "kind": k.kind,
                    "time": round(k.time, 3),
                    "in_flight": k.in_flight,
                    "tokens_redone": round(k.discarded),
                    "turns_redone": k.turns,
                    "calls_repeated": k.calls,
                }
                for k in s.kill_log
            ],
            "prompts_skipped": len(a.skipped),
            "prompts_duplicated": len(a.duplicated),
            "prompts_dropped": len(a.dropped),
            "samples_lost": len(samples.skipped) if samples else None,
            "samples_duplicated": len(samples.duplicated) if samples else None,
            "samples_reused": s.samples_reused,
            "samples_continued": s.samples_continued,
            "failures": s.failures,
            "evicted": s.evicted,
            "evicted_on_restore": s.evicted_on_restore,
            "steps_executed": s.steps_executed,
            "sim_time": round(s.sim_time, 3),
            "lossless": r.lossless,
        }
        return summary

    def summary(self) -> dict[str, Any]:
        """The object of ``frontier simulate --waste --json``."""
        total, matched = self.vs("progress")
        node_total, node_matched = self.vs("node-shipped")
        w = self.workload
        out: dict[str, Any] = {
            "journal": {
                "commit_delay": w.commit_delay,
                "progress_every": w.progress_every,
                "ship_lag": w.ship_lag,
            },
            "modes": {m.name: self.mode_summary(m.name) for m in self.modes},
            "goal": {
                "max_pct": GOAL_PCT,
                "progress_vs_coverage_pct": _json_pct(total),
                "progress_vs_coverage_shared_kills_pct": _json_pct(matched),
                "met": self.goal_met,
            },
            "node_goal": {
                "max_pct": GOAL_PCT,
                "ship_lag": w.ship_lag,
                "shipped_vs_coverage_pct": _json_pct(node_total),
                "shipped_vs_coverage_shared_kills_pct": _json_pct(node_matched),
                "met": self.node_goal_met,
            },
            "violations": self.violations(),
        }
        if self.turn_goal_met is not None:
            out["episodes"] = {"turns": w.turns, "tool_latency": w.tool_latency}
            out["turn_goal"] = {
                "max_pct": GOAL_PCT,
                "turns_vs_coverage_pct": _json_pct(
                    pct(self.turns_redone("turns"), self.turns_redone("coverage"))
                ),
                "met": self.turn_goal_met,
            }
        return out


def _json_pct(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 3)


def run_waste(
    workload: Workload,
    log_base: str | os.PathLike[str] | None = None,
    *,
    modes: tuple[WasteMode, ...] | None = None,
) -> WasteResult:
    """The seven modes (or ``modes``: a result that holds only those, for
    what compares them) on ``workload``, under one kill schedule (drawn as
    ``run_ab`` draws it). Logs go to ``log_base`` + ``.<mode>`` and
    ``.<mode>.samples`` (a temporary directory when ``None``). Raises
    ``SimulationError`` or a ``FrontierError`` if a run breaks."""
    with tempfile.TemporaryDirectory(prefix="frontier-waste-") as tmp:
        kills = kill_schedule(workload, Path(tmp) / "calm.jsonl")
        base = Path(tmp) / "train" if log_base is None else Path(log_base)
        results = {
            m.name: run_mode(
                workload,
                m.name,
                kills,
                f"{base}.{m.name}",
                factory=m.factory,
                sample_log_path=f"{base}.{m.name}.samples",
            )
            for m in (waste_modes(workload) if modes is None else modes)
        }
    return WasteResult(workload, kills, results)


def _tokens(value: float) -> str:
    return f"{round(value):,}"


def _show_pct(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.1f}%"


def format_waste(result: WasteResult) -> str:
    """The comparison table, one column per mode."""
    w = result.workload
    width = 14
    modes = result.modes
    kinds = ", ".join(f"{k.kind.value}@{k.time:.1f}" for k in result.kills) or "none"
    lines = [
        format_workload(w),
        f"journal: group commit within {w.commit_delay:g} step(s), progress every "
        f"{w.progress_every} tokens, shipped {w.ship_lag:g} step(s) behind (node:shipped)",
        "kills: process kills, except node losses in the node: modes",
        f"kills: {kinds}",
        "",
        f"{'tokens redone, by kill':32}" + "".join(f"{m.label:>{width}}" for m in modes),
    ]
    keys: dict[tuple[int, bool], str] = {}
    for m in modes:
        for k in result.results[m.name].stats.kill_log:
            keys.setdefault(k.key, f"kill {k.index + 1}{'+' if k.follow_up else ''} {k.kind}")
    per_kill = {m.name: result.per_kill(m.name) for m in modes}
    for key in sorted(keys):
        row = [_tokens(per_kill[m.name][key]) if key in per_kill[m.name] else "-" for m in modes]
        lines.append(f"  {keys[key]:30}" + "".join(f"{v:>{width}}" for v in row))
    lines.append(
        f"{'total':32}" + "".join(f"{_tokens(result.redone(m.name)):>{width}}" for m in modes)
    )
    lines.append(
        f"{'  of coverage-only':32}"
        + "".join(f"{_show_pct(result.vs(m.name)[0]):>{width}}" for m in modes)
    )
    lines.append(
        f"{'  same, on the kills both saw':32}"
        + "".join(f"{_show_pct(result.vs(m.name)[1]):>{width}}" for m in modes)
    )
    rows: list[tuple[str, Callable[[ModeResult], str]]] = [
        ("tokens generated", lambda r: _tokens(r.stats.tokens_generated)),
        ("tokens trained", lambda r: _tokens(r.stats.tokens_trained)),
        ("discarded by failures/evictions", lambda r: _tokens(r.stats.tokens_failed)),
        ("prompts skipped (lost)", lambda r: str(len(r.audit.skipped))),
        ("prompts duplicated", lambda r: str(len(r.audit.duplicated))),
        ("samples lost", lambda r: str(len(r.samples.skipped)) if r.samples else "-"),
        ("samples duplicated", lambda r: str(len(r.samples.duplicated)) if r.samples else "-"),
        ("siblings reused after a resume", lambda r: str(r.stats.samples_reused)),
        *(
            [
                ("turns redone", lambda r: _tokens(r.stats.turns_discarded)),
                ("tool calls executed again", lambda r: _tokens(r.stats.calls_repeated)),
            ]
            if w.turns > 1
            else []
        ),
        ("siblings continued from a prefix", lambda r: str(r.stats.samples_continued)),
        ("kills lived through", lambda r: str(len(r.stats.kill_log))),
        ("simulated time", lambda r: f"{r.stats.sim_time:.1f}"),
    ]
    for label, cell in rows:
        lines.append(
            f"{label:32}" + "".join(f"{cell(result.results[m.name]):>{width}}" for m in modes)
        )
    total, matched = result.vs("progress")
    lines.append("")
    lines.append(
        f"goal: journal+progress redoes {_show_pct(total)} of coverage-only's tokens, "
        f"{_show_pct(matched)} on the kills both saw (at most {GOAL_PCT:g}%): "
        + ("met" if result.goal_met else "MISSED")
    )
    node_total, node_matched = result.vs("node-shipped")
    lines.append(
        f"node goal: shipped {w.ship_lag:g} step(s) behind, a node loss redoes "
        f"{_show_pct(node_total)} of coverage-only's tokens, {_show_pct(node_matched)} on the "
        f"kills both saw (at most {GOAL_PCT:g}%): " + ("met" if result.node_goal_met else "MISSED")
    )
    if result.turn_goal_met is not None:
        share = pct(result.turns_redone("turns"), result.turns_redone("coverage"))
        lines.append(
            f"turn goal: episodes of {w.turns} turns, tools answering in {w.tool_latency:g} "
            f"step(s): the turn journal redoes {_show_pct(share)} of coverage-only's turns "
            f"(at most {GOAL_PCT:g}%): " + ("met" if result.turn_goal_met else "MISSED")
        )
    lines.append(
        "(a kill's tokens redone: held before it, gone after the resume; the legacy cursor's "
        "include the prompts it skips, never generated again)"
    )
    bad = result.violations()
    exact = ", ".join(m.name for m in modes if m.exact)
    lines.append(
        f"exact modes ({exact}): "
        + ("0 lost, 0 duplicated: OK" if not bad else f"FAILED: {', '.join(bad)}")
    )
    return "\n".join(lines)


def plot_waste(result: WasteResult, path: str | os.PathLike[str]) -> None:
    """Draw the tokens each kill discarded, per mode, and the totals, to
    ``path``. Raises ``ImportError`` without matplotlib (the ``plot``
    extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = result.modes
    keys = sorted({k for m in modes for k in result.per_kill(m.name)})
    fig, (per_kill, totals) = plt.subplots(
        1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 1]}
    )
    width = 0.8 / len(modes)
    for i, m in enumerate(modes):
        values = result.per_kill(m.name)
        xs = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(keys))]
        per_kill.bar(xs, [values.get(k, 0.0) for k in keys], width=width, label=m.label)
    per_kill.set_xticks(range(len(keys)))
    per_kill.set_xticklabels([f"{k[0] + 1}{'+' if k[1] else ''}" for k in keys])
    per_kill.set_xlabel("kill (+: the follow-up kill of a pair; no bar: that run had ended)")
    per_kill.set_ylabel("tokens redone")
    per_kill.set_title("tokens each kill discarded, to be generated again")
    per_kill.legend()
    names = [m.label for m in modes]
    redone = [result.redone(m.name) for m in modes]
    bars = totals.bar(range(len(modes)), redone, color=[f"C{i}" for i in range(len(modes))])
    totals.axhline(
        result.redone("coverage") * GOAL_PCT / 100, color="black", linestyle=":", linewidth=1
    )
    for bar, value in zip(bars, redone, strict=True):
        totals.annotate(
            f"{pct(value, result.redone('coverage')):.1f}%",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    totals.set_xticks(range(len(modes)))
    totals.set_xticklabels(names, rotation=30, ha="right")
    totals.set_title(f"total (dotted: {GOAL_PCT:g}% of coverage-only)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@attrs.frozen
class WasteSweep:
    """``runs`` randomized comparisons of every mode from seed ``first_seed``:
    the seeds whose exact modes lost or duplicated something, or whose run
    raised (``errors`` says how), the tokens each mode redid in all, and
    the runs where journal plus progress missed the goal."""

    runs: int
    first_seed: int
    failures: tuple[int, ...]
    errors: tuple[str, ...]
    redone: Mapping[str, float]
    goal_missed: tuple[int, ...]
    seconds: float

    @property
    def clean(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "seeds": [self.first_seed, self.first_seed + self.runs - 1],
            "failures": list(self.failures),
            "tokens_redone": {k: round(v) for k, v in self.redone.items()},
            "goal_missed": list(self.goal_missed),
            "seconds": round(self.seconds, 2),
        }


def sweep_waste(
    base: Workload, runs: int, *, on_run: Callable[[], None] | None = None
) -> WasteSweep:
    """``runs`` randomized comparisons (``random_workload`` of ``base``, with
    the journal's knobs drawn too) of every mode."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    failures: list[int] = []
    errors: list[str] = []
    missed: list[int] = []
    redone = {m.name: 0.0 for m in waste_modes(base)}
    started = time.monotonic()
    for i in range(runs):
        workload = random_journal(random_workload(base.seed + i, base))
        try:
            result = run_waste(workload)
        except (SimulationError, FrontierError) as exc:
            failures.append(workload.seed)
            errors.append(f"seed {workload.seed}: {type(exc).__name__}: {exc}")
        else:
            if not result.clean:
                failures.append(workload.seed)
                errors.append(f"seed {workload.seed}: {', '.join(result.violations())} not exact")
            if not result.goal_met:
                missed.append(workload.seed)
            for m in result.modes:
                redone[m.name] += result.redone(m.name)
        if on_run is not None:
            on_run()
    return WasteSweep(
        runs=runs,
        first_seed=base.seed,
        failures=tuple(failures),
        errors=tuple(errors),
        redone=redone,
        goal_missed=tuple(missed),
        seconds=time.monotonic() - started,
    )


def random_journal(workload: Workload) -> Workload:
    """``workload`` with the journal's knobs drawn from its seed: commit
    delays from none to half a step, progress from every token to rarely,
    shipping lags from none to two steps."""
    rng = random.Random(f"sweep-journal:{workload.seed}")
    return attrs.evolve(
        workload,
        commit_delay=rng.choice([0.0, 0.001, 0.05, 0.5]),
        progress_every=rng.choice([1, 16, 256, 4096]),
        ship_lag=rng.choice([0.0, 0.05, 0.4, 2.0]),
    )


def format_waste_sweep(result: WasteSweep) -> str:
    last = result.first_seed + result.runs - 1
    lines = [
        f"{result.runs} randomized {len(result.redone)}-mode runs "
        f"(seeds {result.first_seed}..{last}) in {result.seconds:.1f}s",
        f"runs where an exact mode lost or duplicated, or raised: {len(result.failures)} "
        f"{list(result.failures[:20])}",
        f"runs where journal+progress missed the {GOAL_PCT:g}% goal: {len(result.goal_missed)} "
        f"{list(result.goal_missed[:20])}",
        "",
        "tokens redone in all:",
    ]
    coverage = result.redone["coverage"]
    for m in (_BY_NAME[name] for name in result.redone):
        value = result.redone[m.name]
        lines.append(f"  {m.label:14}{_tokens(value):>14}{_show_pct(pct(value, coverage)):>10}")
    return "\n".join(lines)
