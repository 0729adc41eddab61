"""The ``frontier`` command line: the core's commands, and those contributed.

The core's own commands (``replay``, ``simulate``, ``audit``) are parsed
here; the modules behind them (``_replay``, ``sim``, ``_audit``) expose
plain functions and know nothing of argparse.

Other distributions contribute commands through the entry-point group
``frontier.commands`` (the adapters register ``demo`` and ``bench`` in
pyproject.toml). The core names none of them: they are discovered at run
time with ``importlib.metadata``, and only when the command asked for is not
one of the core's, so ``frontier audit`` never scans or imports a plugin.
An entry point names an object with

* ``help``: a one-line description for ``frontier --help``;
* ``configure(parser)``: adds its options to an ``argparse`` parser;
* ``run(args) -> int``: runs it and returns the exit status;

and the module that holds it must be cheap to import (``frontier --help``
loads every contributed command for its help line): it imports its
framework inside ``run``. The entry point may name the extras it needs,
``demo = "frontier_adapters._cli:demo [torch]"``; when one of their
requirements is not installed the command is refused with one line on
stderr naming the extra to install, and exit status 2, before it runs. A
command whose entry point cannot be loaded is refused the same way.

Exit statuses: 0 ok, 1 a coverage verdict only (``simulate``, ``audit`` and
``demo`` when coverage is violated), 2 usage or input errors, 3 an internal
error (with its traceback), 141 when stdout was closed under the command
(``frontier audit ... | head``: 128 + SIGPIPE, as a shell reports it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from typing import Any, Protocol, TypeVar

import attrs

#: The entry-point group of contributed subcommands.
GROUP = "frontier.commands"


class Command(Protocol):
    """What a subcommand is, built in or contributed."""

    @property
    def help(self) -> str: ...

    def configure(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


@attrs.frozen
class Subcommand:
    """A ``Command`` as a value: its help line, its options, its body. The
    built-in commands are these, and the adapters build theirs with it."""

    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# -- argument types -------------------------------------------------------------------


def int_at_least(lo: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {value}")
        return value

    return parse


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


# -- frontier replay ------------------------------------------------------------------


def _configure_replay(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE.jsonl", help="the trace; '-' reads stdin")


def _trace_lines(path: str) -> Iterator[bytes]:
    # Bytes, decoded line by line by ``replay``: a bad byte is an error
    # naming its line, after every good line before it was replayed. A
    # device is refused before a byte is read (``open_input``).
    from ._trainlog import open_input

    if path == "-":
        yield from sys.stdin.buffer
        return
    with open_input(path) as f:
        yield from f


_T = TypeVar("_T")


class _OutputError(Exception):
    """Writing the command's output failed (not its input)."""


class _Output:
    """``sys.stdout`` whose write errors are told apart from the input's."""

    def write(self, text: str, /) -> int:
        return _writing(lambda: sys.stdout.write(text))

    def flush(self) -> None:
        _writing(sys.stdout.flush)


def _writing(call: Callable[[], _T]) -> _T:
    try:
        return call()
    except BrokenPipeError:
        raise  # the reader went away: ``main`` exits 141, as audit does
    except OSError as exc:
        raise _OutputError(exc.strerror or str(exc)) from exc


def _run_replay(args: argparse.Namespace) -> int:
    from ._errors import TraceError
    from ._replay import replay

    try:
        replay(_trace_lines(args.trace), _Output())
    except TraceError as exc:
        print(f"frontier replay: {args.trace}:{exc.line}: {exc.reason}", file=sys.stderr)
        return 2
    except _OutputError as exc:
        print(f"frontier replay: standard output: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise
    except OSError as exc:
        print(f"frontier replay: {args.trace}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


# -- frontier audit -------------------------------------------------------------------


def _configure_audit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", metavar="LOG.jsonl", help="the training-data log")
    parser.add_argument(
        "--stream-len",
        type=int_at_least(0),
        required=True,
        metavar="N",
        help="the expected stream: ordinals 0..N-1 (epochs times dataset length)",
    )
    parser.add_argument(
        "--window",
        type=int_at_least(1),
        metavar="P",
        help="also check that step s trained exactly ordinals [s*P, (s+1)*P)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _run_audit(args: argparse.Namespace) -> int:
    from ._audit import audit_log, format_report
    from ._trainlog import TrainLogError

    try:
        report = audit_log(args.log, args.stream_len, window=args.window)
    except TrainLogError as exc:
        print(f"frontier audit: {exc.path}:{exc.line}: {exc.reason}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"frontier audit: {args.log}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(format_report(report, args.log))
    return 0 if report.clean else 1


# -- frontier simulate ----------------------------------------------------------------


def _configure_simulate(parser: argparse.ArgumentParser) -> None:
    from ._events import FailurePolicy
    from .sim import Workload

    d = Workload()
    pos, nonneg = int_at_least(1), int_at_least(0)
    parser.add_argument("--seed", type=nonneg, default=d.seed, help="default %(default)s")
    parser.add_argument(
        "--prompts", type=pos, default=d.dataset_len, help="dataset length (%(default)s)"
    )
    parser.add_argument("--epochs", type=pos, default=d.epochs, help="default %(default)s")
    parser.add_argument("--shuffle", action="store_true", help="a new order every epoch")
    parser.add_argument(
        "--step-prompts", type=pos, default=d.prompts_per_step, help="prompts per training step"
    )
    parser.add_argument(
        "--batch-size", type=pos, default=d.batch_size, help="dataloader batch (%(default)s)"
    )
    parser.add_argument(
        "--generations", type=pos, default=d.num_generations, help="rollouts per prompt group"
    )
    parser.add_argument("--workers", type=pos, default=d.workers, help="concurrent groups")
    parser.add_argument(
        "--max-age",
        type=pos,
        default=d.max_age,
        help="max_trajectory_age_steps: targets in flight and the staleness bound",
    )
    parser.add_argument(
        "--targets",
        type=pos,
        default=None,
        help="targets generated ahead of the trainer (default: --max-age); more than "
        "max-age + 1 makes the far ones stale, which exercises eviction",
    )
    parser.add_argument(
        "--checkpoint-every", type=pos, default=d.checkpoint_every, help="steps per checkpoint"
    )
    parser.add_argument(
        "--failure-rate", type=_rate, default=d.failure_rate, help="per group generation"
    )
    parser.add_argument(
        "--on-failure",
        choices=[p.value for p in FailurePolicy],
        default=d.on_failure.value,
        help="what a tolerated failure or a stale eviction does",
    )
    parser.add_argument("--max-failures", type=pos, default=d.max_failures)
    parser.add_argument(
        "--no-buffer-restore",
        action="store_true",
        help="resume without the saved replay buffer (load_replay_buffer=false)",
    )
    parser.add_argument("--kills", type=nonneg, default=d.kills, help="kills mid-generation")
    parser.add_argument(
        "--torn-kills", type=nonneg, default=d.torn_kills, help="kills between checkpoint parts"
    )
    parser.add_argument(
        "--after-resume-kills",
        type=nonneg,
        default=d.after_resume_kills,
        help="kills followed by another right after the resume",
    )
    parser.add_argument(
        "--double-kills",
        type=nonneg,
        default=d.double_kills,
        help="kills followed by another before the next checkpoint",
    )
    parser.add_argument(
        "--length-sigma",
        type=_sigma,
        default=d.length_sigma,
        help="spread of the lognormal rollout lengths (heavier tail when larger)",
    )
    parser.add_argument(
        "--runs",
        type=pos,
        default=1,
        help="sweep N seeds from --seed with randomized configurations; report the worst "
        "(--waste: every run's exactness and the tokens redone in all, with the journal's "
        "knobs drawn too)",
    )
    parser.add_argument(
        "--waste",
        action="store_true",
        help="measure the tokens the kills make the run generate again, in seven modes: "
        "legacy, coverage, siblings, journal, progress under process kills; node-local, "
        "node-shipped under node losses (the journal on the node, or shipped off it)",
    )
    parser.add_argument(
        "--commit-delay",
        type=_delay,
        default=d.commit_delay,
        metavar="STEPS",
        help="--waste: the journal's group-commit delay, in training steps (%(default)s)",
    )
    parser.add_argument(
        "--progress-every",
        type=pos,
        default=d.progress_every,
        metavar="TOKENS",
        help="--waste: journal a running sample's progress every TOKENS tokens (%(default)s)",
    )
    parser.add_argument(
        "--ship-lag",
        type=_delay,
        default=d.ship_lag,
        metavar="STEPS",
        help="--waste: how far behind the journal is shipped off the node, in training steps "
        "(node-shipped; %(default)s)",
    )
    parser.add_argument(
        "--turns",
        type=pos,
        default=d.turns,
        metavar="N",
        help="--waste: every sample is an agent episode of N turns, a tool called between two "
        "turns; above 1 adds the turn journal as an eighth mode and reports turns redone and "
        "tool calls executed again (%(default)s)",
    )
    parser.add_argument(
        "--tool-latency",
        type=_delay,
        default=d.tool_latency,
        metavar="STEPS",
        help="--waste with --turns: how long a tool takes to answer, in training steps "
        "(%(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--log",
        metavar="PATH",
        help="write the training logs to PATH.legacy and PATH.frontier (--waste: PATH.MODE "
        "and PATH.MODE.samples)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw coverage per ordinal (--waste: tokens redone per kill and mode; needs "
        "matplotlib)",
    )


#: The widest spread ``--length-sigma`` takes: a lognormal length of sigma
#: 10 already spans e**±60 tokens; past some hundreds, ``exp`` overflows.
MAX_SIGMA = 10.0


def _sigma(text: str) -> float:
    # NaN made every count NaN and the run a verdict (exit 1); 1e308 made
    # ``exp`` raise ``OverflowError`` (exit 3): both are bad input.
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= MAX_SIGMA:
        raise argparse.ArgumentTypeError(f"must be in [0, {MAX_SIGMA}], got {value}")
    return value


def _delay(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value >= 0.0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be finite and >= 0, got {value}")
    return value


def _progress(total: int, quiet: bool) -> Any:
    from tqdm import tqdm  # type: ignore[import-untyped]  # lazily: only the CLI draws bars

    return tqdm(
        total=total,
        desc="simulate",
        unit="run",
        delay=1.5,
        file=sys.stderr,
        disable=quiet or not sys.stderr.isatty(),
        leave=False,
    )


def _unwritable(path: str | None) -> str | None:
    """Why files cannot be written at ``path`` (``None`` if they can, or
    if no path is given): its directory is missing or not writable."""
    if not path:
        return None
    import os

    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"no such directory {parent}"
    if not os.access(parent, os.W_OK):
        return f"directory {parent} is not writable"
    return None


def _run_simulate(args: argparse.Namespace) -> int:
    from ._errors import FrontierError
    from ._events import FailurePolicy
    from ._ranges import LIMIT
    from .sim import SimulationError, Workload, run_ab
    from .sim._report import format_ab
    from .sim._sweep import format_sweep, plot_coverage, sweep

    for option, path in (("--log", args.log), ("--plot", args.plot)):
        unwritable = _unwritable(path)
        if unwritable:
            # Checked first: the simulation would run to its end and then fail.
            print(f"frontier simulate: {option} {path}: {unwritable}", file=sys.stderr)
            return 2
    if args.prompts * args.epochs > LIMIT:
        # No ledger holds a stream past 2**64 ordinals (LedgerConfig would
        # refuse it mid-run, exit 3).
        print("frontier simulate: --prompts times --epochs must be at most 2**64", file=sys.stderr)
        return 2
    try:
        base = attrs.evolve(
            Workload(),
            seed=args.seed,
            dataset_len=args.prompts,
            epochs=args.epochs,
            shuffle=args.shuffle,
            prompts_per_step=args.step_prompts,
            batch_size=args.batch_size,
            num_generations=args.generations,
            workers=args.workers,
            max_age=args.max_age,
            targets=args.targets,
            checkpoint_every=args.checkpoint_every,
            failure_rate=args.failure_rate,
            on_failure=FailurePolicy(args.on_failure),
            max_failures=args.max_failures,
            load_replay_buffer=not args.no_buffer_restore,
            kills=args.kills,
            torn_kills=args.torn_kills,
            after_resume_kills=args.after_resume_kills,
            double_kills=args.double_kills,
            length_sigma=args.length_sigma,
            commit_delay=args.commit_delay,
            progress_every=args.progress_every,
            ship_lag=args.ship_lag,
            turns=args.turns,
            tool_latency=args.tool_latency,
        )
    except ValueError as exc:
        print(f"frontier simulate: {exc}", file=sys.stderr)
        return 2
    if args.waste:
        return _run_waste(args, base)
    if args.runs > 1:
        with _progress(args.runs, args.json) as bar:
            swept = sweep(base, args.runs, on_run=lambda: bar.update(1))
        for line in swept.errors[:20]:
            print(f"frontier simulate: {line}", file=sys.stderr)
        if swept.worst_frontier is None:
            print(f"frontier simulate: all {args.runs} runs raised", file=sys.stderr)
            return 1
        print(json.dumps(swept.to_json()) if args.json else format_sweep(swept))
        return 0 if swept.clean else 1
    try:
        with _progress(1, args.json) as bar:
            result = run_ab(base, args.log)
            bar.update(1)
    except (SimulationError, FrontierError) as exc:
        # The simulator drives the real ledger: an error here is a failure
        # of the frontier mode (or of the simulator), never a clean run.
        print(f"frontier simulate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.plot:
        try:
            plot_coverage(result, args.plot)
        except ImportError:
            print(
                "frontier simulate --plot needs the plot extra: pip install 'frontier-core[plot]'",
                file=sys.stderr,
            )
            return 2
    if args.json:
        print(json.dumps(result.summary()))
    else:
        print(format_ab(result))
        if args.log:
            print(f"\ntraining logs: {args.log}.legacy, {args.log}.frontier")
    return 0 if result.frontier.lossless else 1


def _run_waste(args: argparse.Namespace, base: Any) -> int:
    """``frontier simulate --waste``: exit 1 only when a mode that claims
    exactness lost or duplicated a prompt or a sample, or a run raised; the
    5% goal is reported, not a verdict."""
    from ._errors import FrontierError
    from .sim import SimulationError
    from .sim._waste import format_waste, format_waste_sweep, plot_waste, run_waste, sweep_waste

    if args.runs > 1:
        with _progress(args.runs, args.json) as bar:
            swept = sweep_waste(base, args.runs, on_run=lambda: bar.update(1))
        for line in swept.errors[:20]:
            print(f"frontier simulate: {line}", file=sys.stderr)
        print(json.dumps(swept.to_json()) if args.json else format_waste_sweep(swept))
        return 0 if swept.clean else 1
    try:
        with _progress(1, args.json) as bar:
            result = run_waste(base, args.log)
            bar.update(1)
    except (SimulationError, FrontierError) as exc:
        print(f"frontier simulate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.plot:
        try:
            plot_waste(result, args.plot)
        except ImportError:
            print(
                "frontier simulate --plot needs the plot extra: pip install 'frontier-core[plot]'",
                file=sys.stderr,
            )
            return 2
    if args.json:
        print(json.dumps(result.summary()))
    else:
        print(format_waste(result))
        if args.log:
            print(f"\ntraining logs: {args.log}.MODE and {args.log}.MODE.samples")
    return 0 if result.clean else 1


#: The core's own commands: name -> command.
BUILTIN: dict[str, Subcommand] = {
    "replay": Subcommand(
        "replay a run's event trace (JSON Lines) through the ledger",
        _configure_replay,
        _run_replay,
    ),
    "simulate": Subcommand(
        "simulate async GRPO under kills: the legacy/frontier coverage A/B, or the "
        "tokens each recovery mode redoes (--waste)",
        _configure_simulate,
        _run_simulate,
    ),
    "audit": Subcommand(
        "check a training-data log for skipped and duplicated prompts",
        _configure_audit,
        _run_audit,
    ),
}


# -- contributed commands -------------------------------------------------------------


class Refused(Exception):
    """A contributed command that cannot run here; the message is one line."""


def contributed() -> dict[str, EntryPoint]:
    """The entry points of group ``frontier.commands``, by name: the first
    one of each name, none that shadows a built-in command. Nothing is
    imported."""
    found: dict[str, EntryPoint] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        if ep.name not in BUILTIN and ep.name not in found:
            found[ep.name] = ep
    return found


_EXTRA_MARKER = re.compile(r"""^\s*extra\s*==\s*["']([^"']+)["']\s*$""")
_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _dist_name(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = dist.metadata["Name"] if dist is not None else None
    return str(name) if name else "frontier-core"


def missing_extras(ep: EntryPoint) -> tuple[str, ...]:
    """The extras named by ``ep`` (``module:attr [torch]``) that are not
    installed: one of the requirements their distribution declares for the
    extra (with no other marker) is not present."""
    dist = getattr(ep, "dist", None)
    if not ep.extras or dist is None:
        return ()
    needs: dict[str, list[str]] = {}
    for req in dist.requires or ():
        spec, _, marker = req.partition(";")
        for_extra = _EXTRA_MARKER.match(marker)
        requirement = _REQUIREMENT_NAME.match(spec)
        if for_extra and requirement:
            needs.setdefault(for_extra.group(1), []).append(requirement.group(1))
    missing: list[str] = []
    for extra in ep.extras:
        for name in needs.get(extra, []):
            try:
                distribution(name)
            except PackageNotFoundError:
                missing.append(extra)
                break
    return tuple(missing)


def _needs_line(command: str, ep: EntryPoint, extras: Sequence[str]) -> str:
    word = "extra" if len(extras) == 1 else "extras"
    names = ",".join(extras)
    return f"frontier {command} needs the {names} {word}: pip install '{_dist_name(ep)}[{names}]'"


def load(name: str, ep: EntryPoint) -> Command:
    """Import the command behind ``ep``; ``Refused`` if it cannot be."""
    try:
        command = ep.load()
    except Exception as exc:
        missing = missing_extras(ep)
        if missing:
            raise Refused(_needs_line(name, ep, missing)) from exc
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise Refused(f"frontier {name}: cannot load {ep.value} ({reason})") from exc
    if not all(hasattr(command, a) for a in ("help", "configure", "run")):
        raise Refused(f"frontier {name}: {ep.value} is not a command (help, configure, run)")
    c: Command = command
    return c


def _refusing(message: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        print(message, file=sys.stderr)
        return 2

    return run


# -- the parser -----------------------------------------------------------------------


def build_parser(
    selected: str | None, plugins: dict[str, EntryPoint] | None = None
) -> argparse.ArgumentParser:
    """The ``frontier`` parser over the built-in commands and ``plugins``.
    Only the ``selected`` command's options are configured; the contributed
    commands are loaded for their help lines (their modules are light)."""
    parser = argparse.ArgumentParser(
        prog="frontier",
        description="Exactly-once prompt coverage across crashes for async RL training.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, builtin in BUILTIN.items():
        p = sub.add_parser(name, help=builtin.help, description=builtin.help)
        if name == selected:
            builtin.configure(p)
            p.set_defaults(_run=builtin.run)
    for name, ep in (plugins or {}).items():
        try:
            command = load(name, ep)
        except Refused as exc:
            # Listed; ``main`` refuses it before parsing if it is asked for.
            sub.add_parser(name, help=f"(unavailable: {exc})")
            continue
        missing = missing_extras(ep)
        note = f" (needs the {','.join(missing)} extra)" if missing else ""
        p = sub.add_parser(name, help=command.help + note, description=command.help + note)
        if name == selected:
            command.configure(p)
            run = _refusing(_needs_line(name, ep, missing)) if missing else command.run
            p.set_defaults(_run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in args_list if not a.startswith("-")), None)
    # The core's commands never scan the installed distributions.
    plugins = None if selected in BUILTIN else contributed()
    if plugins and selected in plugins:
        try:
            load(selected, plugins[selected])
        except Refused as exc:
            print(exc, file=sys.stderr)
            return 2
    parser = build_parser(selected, plugins)
    args = parser.parse_args(args_list)
    try:
        code: int = args._run(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away: not a bug, and not a verdict. Point stdout
        # at devnull so that the interpreter's last flush cannot fail again.
        import os

        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # a stdout without a descriptor
            pass
        return 141
    except Exception:
        # Exit 1 is a coverage verdict and nothing else; an uncaught error
        # would exit 1 too. A bug gets its own status, with its traceback.
        traceback.print_exc()
        print(
            f"frontier {args.command}: internal error (exit 3); please report the traceback above",
            file=sys.stderr,
        )
        return 3
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
