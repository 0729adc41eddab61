"""The measuring conventions every benchmark shares: per-round values,
their median and spread, round-by-round ratios to a baseline measured in the
same run, the table, and a description of the machine.

Every figure is measured in the same run as its baseline, over several
rounds (variants interleaved within a round, so drift on a shared machine
hits both sides), and reported as the median with its spread (min..max over
the rounds) next to the median ratio to the baseline. CPU-bound
microbenchmarks use process CPU time (``time.process_time``), which another
process on the machine does not inflate; loader and resume figures use wall
time, since worker processes and IPC are part of what they measure.
"""

from __future__ import annotations

import importlib
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

Row = dict[str, Any]


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median and spread (min, max) of per-round values."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def row(
    section: str,
    name: str,
    values: Sequence[float],
    unit: str,
    *,
    ratios: Sequence[float] | None = None,
    baseline: str | None = None,
    target: str | None = None,
    met: bool | None = None,
    **extra: Any,
) -> Row:
    """One measured figure: its per-round values and, when it has a
    baseline, its per-round ratios to it."""
    out: Row = {
        "section": section,
        "name": name,
        "unit": unit,
        "rounds": list(values),
        **summarize(values),
    }
    if ratios is not None:
        out["baseline"] = baseline
        out["ratios"] = list(ratios)
        out["ratio"] = summarize(ratios)
    if target is not None:
        out["target"] = target
        out["met"] = met
    out.update(extra)
    return out


def ratios_of(values: Sequence[float], base: Sequence[float]) -> list[float]:
    """Round-by-round ratios (each value against the baseline of its round)."""
    return [v / b for v, b in zip(values, base, strict=True)]


def timed(fn: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    fn()
    return clock() - start


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1e5:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 1:
        return f"{x:.3g}" if ax < 10 else f"{x:.1f}"
    return f"{x:.3g}"


def format_table(rows: Sequence[Row]) -> str:
    head = ("section", "measure", "median", "spread", "unit", "ratio (spread)", "target")
    lines = [head]
    for r in rows:
        spread = f"{_fmt(r['min'])}..{_fmt(r['max'])}"
        ratio = ""
        if "ratio" in r:
            q = r["ratio"]
            ratio = f"{q['median']:.3f} ({q['min']:.3f}..{q['max']:.3f})"
        target = ""
        if "target" in r:
            mark = "met" if r["met"] else "MISSED"
            target = f"{r['target']}: {mark}"
        lines.append((r["section"], r["name"], _fmt(r["median"]), spread, r["unit"], ratio, target))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for i, line in enumerate(lines):
        cells = [
            c.rjust(w) if 2 <= j <= 3 else c.ljust(w)
            for j, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    for mod in ("torch", "torchdata"):
        try:
            info[mod] = importlib.import_module(mod).__version__
        except ImportError:
            info[mod] = None
    return info
