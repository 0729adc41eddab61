"""The ``frontier`` command line.

Each subcommand lives in its own module with two functions,
``configure(parser)`` and ``run(args) -> int``. Only the module of the
subcommand being run is imported, so ``frontier replay`` never pays for (or
needs) torch, and a missing optional extra fails with its own message.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "replay": (
        "frontier_core._replay",
        "replay a run's event trace (JSON Lines) through the ledger",
    ),
    "simulate": (
        "frontier_core.sim._cli",
        "simulate async GRPO under kills: the legacy/frontier coverage A/B",
    ),
    "audit": (
        "frontier_core._audit",
        "check a training-data log for skipped and duplicated prompts",
    ),
    "demo": (
        "frontier_adapters.examples.demo",
        "async GRPO on a CPU engine under real SIGKILLs: the legacy/frontier audit A/B",
    ),
    "bench": (
        "frontier_adapters.bench.suite",
        "benchmarks: bookkeeping cost against the bare data loader, as ratios (table + JSON)",
    ),
}


def build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="frontier",
        description="Exactly-once prompt coverage across crashes for async RL training.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            module.configure(p)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(args_list)
    code: int = args._run(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
