"""``frontier bench``: the cost of the bookkeeping, as ratios against baselines.

The conventions (rounds, medians, ratios to a baseline of the same run)
are ``frontier_core.bench``'s.

Sections (``--only``): ``loader``, ``ledger``, ``checkpoint``, ``resume``,
``memory``, ``simulator``. ``--quick`` runs every section at a smoke size
(CI proves the suite runs; no timing is asserted anywhere). The table goes to
stdout, the full results to ``--json PATH``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from frontier_core.bench import Row, format_table, machine

#: section -> (module, function name). The core's sections live with the
#: core (``frontier_core.bench``); torch and ray are imported only by the
#: sections that need them.
SECTIONS: dict[str, tuple[str, str]] = {
    "loader": ("frontier_adapters.bench.loader", "bench_loader"),
    "ledger": ("frontier_core.bench", "bench_ledger"),
    "checkpoint": ("frontier_core.bench", "bench_checkpoint"),
    "resume": ("frontier_adapters.bench.loader", "bench_resume"),
    "memory": ("frontier_core.bench", "bench_memory"),
    "simulator": ("frontier_core.bench", "bench_simulator"),
    # Needs the `ray` extra; skipped by default where it is not installed.
    "ray": ("frontier_adapters.bench.ray_ledger", "bench_ray"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick", action="store_true", help="smoke sizes (what CI runs; seconds, not minutes)"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds per figure (default 5, 2 with --quick)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the full results here")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(SECTIONS),
        metavar="SECTION",
        help=f"run only this section (repeatable): {', '.join(SECTIONS)}",
    )


def run_sections(
    sections: Sequence[str], *, quick: bool, rounds: int, progress: bool = True
) -> dict[str, Any]:
    """Run ``sections`` and return the JSON document (machine, rows, times)."""
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    for name in sections:
        module_name, fn_name = SECTIONS[name]
        fn = getattr(importlib.import_module(module_name), fn_name)
        if progress:
            print(f"frontier bench: {name}...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        rows.extend(fn(quick=quick, rounds=rounds))
        seconds[name] = round(time.perf_counter() - start, 2)
    return {
        "command": "frontier bench" + (" --quick" if quick else ""),
        "quick": quick,
        "rounds": rounds,
        "machine": machine(),
        "section_seconds": seconds,
        "rows": rows,
    }


def run(args: argparse.Namespace) -> int:
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 5)
    if rounds < 1:
        print("frontier bench: --rounds must be >= 1", file=sys.stderr)
        return 2
    sections = args.only or list(SECTIONS)
    if not args.only and importlib.util.find_spec("ray") is None:
        print("frontier bench: skipping 'ray' (install the ray extra)", file=sys.stderr)
        sections.remove("ray")
    doc = run_sections(sections, quick=args.quick, rounds=rounds)
    print(format_table(doc["rows"]))
    missed = [f"{r['section']}/{r['name']}" for r in doc["rows"] if r.get("met") is False]
    print(f"\ntargets missed: {', '.join(missed) if missed else 'none'}")
    print(f"seconds per section: {doc['section_seconds']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"results: {args.json}")
    return 0
