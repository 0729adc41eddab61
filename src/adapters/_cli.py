"""The subcommands the adapters contribute to ``frontier``: ``demo`` and ``bench``.

The one command-line module of ``frontier_adapters`` (the verification
rig's own commands are in ``frontier_adapters.verify.__main__``).
pyproject.toml registers each command object in the entry-point group
``frontier.commands``, with the extras it needs::

    [project.entry-points."frontier.commands"]
    demo = "frontier_adapters._cli:demo [torch]"
    bench = "frontier_adapters._cli:bench"

and ``frontier`` (``frontier_core._cli``) discovers them at run time. This
module is imported to list them (``frontier --help``), so it imports the
standard library and attrs only; a command imports what it runs inside
``configure`` and ``run``. ``bench`` needs no extra as a whole: its core
sections run anywhere, and the suite itself skips or refuses the sections
whose extra is missing.
"""

from __future__ import annotations

import argparse
import sys

from frontier_core._cli import Subcommand, int_at_least

# -- frontier demo --------------------------------------------------------------------


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kills", type=int_at_least(0), default=None, help="SIGKILLs per mode (default 6)"
    )
    parser.add_argument("--seed", type=int, default=0, help="workload and kill schedule seed")
    parser.add_argument(
        "--prompts", type=int_at_least(1), default=None, help="stream length (default 1536)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small run: 192 prompts, 5 kills (~30 s)"
    )
    parser.add_argument("--plot", metavar="FILE.png", help="draw the reward curves (matplotlib)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--workdir", help="keep the runs here (default: a temporary directory)")
    parser.add_argument(
        "--engine",
        choices=["cpu", "vllm"],
        default="cpu",
        help="generate with the CPU engine (default) or real vLLM on the tiny Llama "
        "(needs vLLM: bash scripts/setup-vllm.sh, then .venv-vllm/bin/frontier demo "
        "--engine vllm; defaults 384 prompts, 2 kills; --quick 96 and 1)",
    )
    parser.add_argument(
        "--journal",
        action="store_true",
        help="the sample-level demo: StreamCollector, RolloutLoop per sibling and a rollout "
        "journal, resumed with coverage only and with the journal, killed also inside "
        "journal appends, group commits and compactions and right after resumes, and "
        "audited sample by sample (defaults 768 prompts, 12 kills; --quick 192 and 6)",
    )
    parser.add_argument(
        "--mode",
        choices=["legacy", "frontier", "coverage", "journal", "both"],
        default="both",
        help=argparse.SUPPRESS,
    )


def _run_demo(args: argparse.Namespace) -> int:
    from .verify.demo import JOURNAL_MODES, MODES, run_demo

    if args.plot and not _have("matplotlib"):
        print(
            "frontier demo --plot needs the plot extra: pip install 'frontier-core[plot]'",
            file=sys.stderr,
        )
        return 2
    vllm = args.engine == "vllm"
    if vllm and not _have("vllm"):
        print(
            "frontier demo --engine vllm needs vLLM in this interpreter: bash "
            "scripts/setup-vllm.sh (the CPU build), then .venv-vllm/bin/frontier demo "
            "--engine vllm",
            file=sys.stderr,
        )
        return 2
    journal = args.journal or args.mode in JOURNAL_MODES
    if journal and vllm:
        print(
            "frontier demo --journal runs on the CPU engine (the vLLM demo is prompt-level)",
            file=sys.stderr,
        )
        return 2
    if journal and args.mode in MODES:
        print(f"frontier demo --journal has no mode {args.mode!r}", file=sys.stderr)
        return 2
    if journal:
        default_kills, default_prompts = (6, 192) if args.quick else (12, 768)
    else:
        default_kills = (1 if args.quick else 2) if vllm else (5 if args.quick else 6)
        default_prompts = (96 if args.quick else 384) if vllm else (192 if args.quick else 1536)
    return run_demo(
        kills=args.kills if args.kills is not None else default_kills,
        prompts=args.prompts if args.prompts is not None else default_prompts,
        engine=args.engine,
        seed=args.seed,
        workdir=args.workdir,
        as_json=args.json,
        plot_path=args.plot,
        modes=None if args.mode == "both" else (args.mode,),
        journal=journal,
    )


demo = Subcommand(
    help="async GRPO on a CPU engine under real SIGKILLs: the legacy/frontier audit A/B",
    configure=_configure_demo,
    run=_run_demo,
)


# -- frontier bench -------------------------------------------------------------------


def _configure_bench(parser: argparse.ArgumentParser) -> None:
    from .bench.suite import SECTIONS

    parser.add_argument(
        "--quick", action="store_true", help="smoke sizes (what CI runs; seconds, not minutes)"
    )
    parser.add_argument(
        "--rounds",
        type=int_at_least(1),
        default=None,
        help="rounds per figure (default 5, 2 with --quick)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the full results here")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(SECTIONS),
        metavar="SECTION",
        help=f"run only this section (repeatable): {', '.join(SECTIONS)}",
    )


def _run_bench(args: argparse.Namespace) -> int:
    from .bench.suite import bench as run_bench

    return run_bench(quick=args.quick, rounds=args.rounds, only=args.only, json_path=args.json)


bench = Subcommand(
    help="benchmarks: bookkeeping cost against the bare data loader, as ratios (table + JSON)",
    configure=_configure_bench,
    run=_run_bench,
)


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
