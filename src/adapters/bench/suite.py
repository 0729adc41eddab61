"""``frontier bench``: the cost of the bookkeeping, as ratios against baselines.

The conventions (rounds, medians, ratios to a baseline of the same run)
are ``frontier_core.bench``'s.

Sections: ``loader``, ``ledger``, ``checkpoint``, ``resume``,
``fingerprint``, ``memory``, ``simulator``, ``shards``, ``journal``, ``run``,
``store``, ``ray``, ``trl``, ``vllm``. ``quick`` runs every section at a smoke size (CI
proves the suite runs; no timing is asserted anywhere). The table goes to
stdout, the full results to a JSON file. A section whose extra is not
installed (``loader`` and ``resume`` need ``torch``, ``ray`` needs ``ray``,
``vllm`` needs vLLM: the ``vllm`` extra on a GPU, ``scripts/setup-vllm.sh``
on a CPU)
is skipped, with a line on stderr, when every section runs, and refused
(exit status 2) when it is asked for by name (``store`` needs the ``s3``
extra: obstore, and SeaweedFS, which it starts on loopback). The options are parsed by
``frontier_adapters._cli``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import attrs

from frontier_core.bench import Row, format_table, machine


@attrs.frozen
class Section:
    """A section: its function, and the extra (with the modules it
    provides) it needs beyond the core."""

    module: str
    function: str
    extra: str | None = None
    needs: tuple[str, ...] = ()
    #: How to install the extra, when it is more than ``pip install`` of it.
    install: str | None = None


#: The core's sections live with the core (``frontier_core.bench``); torch
#: and ray are imported only by the sections that need them.
SECTIONS: dict[str, Section] = {
    "loader": Section(
        "frontier_adapters.bench.loader", "bench_loader", "torch", ("torch", "torchdata")
    ),
    "ledger": Section("frontier_core.bench", "bench_ledger"),
    "checkpoint": Section("frontier_core.bench", "bench_checkpoint"),
    "resume": Section(
        "frontier_adapters.bench.loader", "bench_resume", "torch", ("torch", "torchdata")
    ),
    "fingerprint": Section(
        "frontier_adapters.bench.loader", "bench_fingerprint", "torch", ("torch", "torchdata")
    ),
    "memory": Section("frontier_core.bench", "bench_memory"),
    "simulator": Section("frontier_core.bench", "bench_simulator"),
    "shards": Section("frontier_core.bench.shards", "bench_shards"),
    "samples": Section("frontier_core.bench.samples", "bench_samples"),
    # The journal's file writer is the adapters' (the core does no I/O).
    "journal": Section("frontier_adapters.bench.journal", "bench_journal"),
    # What a termination notice costs a Run (drain against a checkpoint).
    "run": Section("frontier_adapters.bench.run", "bench_run"),
    # What the turn journal adds to an agent's episode (the CPU engine).
    "agents": Section("frontier_adapters.bench.agents", "bench_agents", "torch", ("torch",)),
    # The journal shipped and checkpoints published to a real S3 server.
    "store": Section("frontier_adapters.bench.store", "bench_store", "s3", ("obstore",)),
    "ray": Section("frontier_adapters.bench.ray_ledger", "bench_ray", "ray", ("ray",)),
    "trl": Section(
        "frontier_adapters.bench.trl", "bench_trl", "trl", ("trl", "datasets", "accelerate")
    ),
    "vllm": Section(
        "frontier_adapters.bench.vllm",
        "bench_vllm",
        "vllm",
        ("vllm", "transformers", "tokenizers"),
        install="pip install 'frontier-core[vllm]' on a GPU, or bash scripts/setup-vllm.sh "
        "and .venv-vllm/bin/frontier bench --only vllm on a CPU",
    ),
}


def missing_extra(name: str) -> str | None:
    """The extra section ``name`` needs and that is not installed, if any."""
    section = SECTIONS[name]
    if any(importlib.util.find_spec(module) is None for module in section.needs):
        return section.extra
    return None


def _install(extra: str) -> str:
    hints = {s.install for s in SECTIONS.values() if s.extra == extra and s.install}
    if hints:
        return " / ".join(sorted(hints))
    return f"pip install 'frontier-core[{extra}]'"


def run_sections(
    sections: Sequence[str], *, quick: bool, rounds: int, progress: bool = True
) -> dict[str, Any]:
    """Run ``sections`` and return the JSON document (machine, rows, times)."""
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    for name in sections:
        section = SECTIONS[name]
        fn = getattr(importlib.import_module(section.module), section.function)
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


def bench(
    *,
    quick: bool = False,
    rounds: int | None = None,
    only: Sequence[str] | None = None,
    json_path: str | None = None,
) -> int:
    """Run the suite (or the sections ``only``), print the table and write
    the JSON document to ``json_path``; return the exit status: 0, or 2 for
    a bad ``rounds`` or a named section whose extra is not installed."""
    rounds = rounds if rounds is not None else (2 if quick else 5)
    if rounds < 1:
        print("frontier bench: --rounds must be >= 1", file=sys.stderr)
        return 2
    unknown = [name for name in only or () if name not in SECTIONS]
    if unknown:
        print(f"frontier bench: unknown section {unknown[0]!r}", file=sys.stderr)
        return 2
    if only:
        sections = list(dict.fromkeys(only))
        for name in sections:
            extra = missing_extra(name)
            if extra is not None:
                print(
                    f"frontier bench --only {name} needs the {extra} extra: {_install(extra)}",
                    file=sys.stderr,
                )
                return 2
        skipped: dict[str, str] = {}
    else:
        skipped = {name: extra for name in SECTIONS if (extra := missing_extra(name)) is not None}
        sections = [name for name in SECTIONS if name not in skipped]
        for extra in dict.fromkeys(skipped.values()):
            names = ", ".join(repr(n) for n, e in skipped.items() if e == extra)
            print(
                f"frontier bench: skipping {names} (needs the {extra} extra: {_install(extra)})",
                file=sys.stderr,
            )
    doc = run_sections(sections, quick=quick, rounds=rounds)
    doc["skipped"] = {name: f"needs the {extra} extra" for name, extra in skipped.items()}
    print(format_table(doc["rows"]))
    missed = [f"{r['section']}/{r['name']}" for r in doc["rows"] if r.get("met") is False]
    print(f"\ntargets missed: {', '.join(missed) if missed else 'none'}")
    print(f"seconds per section: {doc['section_seconds']}")
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"results: {json_path}")
    return 0
