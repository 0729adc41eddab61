"""An elastic data-parallel torchrun job, and its torture: SIGKILL a rank,
resume on another number of ranks, until the stream is done.

``run_rank`` is one rank of one life of the job, under ``torchrun`` (gloo,
CPU, loopback). Each rank reads its own share of one shuffled two-epoch
stream through its own seekable loader and ``RankCollector`` (global
ordinals), with a simulated generation pool (random latency, failures
retried then dropped) and a replay buffer. Every step is synchronous data
parallel: each rank takes up to its per-rank batch of buffered groups
(``ceil(global_batch / world)``, so it changes with the world size; a rank
with nothing to train contributes zero gradients), the gradients and the
sample count are all-reduced, every rank takes the same optimizer step.
Rank 0 gathers what every rank trained and dropped and appends it to the
one training log (global ordinals, ``TrainLogWriter``), syncs the log,
then all ranks write one all-or-nothing checkpoint
(``DistributedCheckpointer``): each rank its ledger record and buffer, rank
0 also the model, the optimizer and the log's record count.

A life starts from the newest committed checkpoint, whatever world size
wrote it: every rank reads every rank's part, computes the same
``frontier_core.reshard`` plan for the current world size, builds its loader
with the share of its record and resumes. The saved buffers are restored
(each rank takes the groups its new share owns, whoever generated them) or
not, by a draw every rank makes alike; some restored groups are evicted on
restore.

``torture`` launches lives with ``torchrun --nproc-per-node W`` (through
``torchrun_loopback``: torchrun itself, its rendezvous store bound to
127.0.0.1) for W cycling through ``worlds`` (3, 2, 4, 1 by default),
SIGKILLs one rank at a random moment of a step (training, writing its part,
rank 0 committing) or while the ranks boot; torchrun then tears the other
ranks down, as on a cluster. After each life it checks that no process of the life is left
(and kills any), and that every socket the job listened on was on the
loopback interface. When the kills are spent, the last life runs to the
end, and ``frontier audit`` checks the training log: every ordinal trained
exactly once or dropped exactly once.

    python -m frontier_adapters.verify elastic-torture --workdir /tmp/e --kills 12
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from frontier_core import FailurePolicy, LedgerConfig, Share, TrainLogWriter

from ..torch import SeekableSource, dataset_fingerprint, make_seekable_loader
from ..torch._distributed import (
    DistributedCheckpointer,
    RankCollector,
    TorchCollectives,
    owned_groups,
    read_distributed_checkpoint,
)
from ._lives import Life as LifeProcess
from .torch_job import FEATURES, PromptPool, coverage, make_dataset, make_model, run_audit

LOG_NAME = "train_log.jsonl"
CKPT_DIR = "checkpoints"
#: What a rank announces (with ``--announce``), one line each: the torture
#: times its kills on these.
_LINE = re.compile(r"^r(\d+) (\w+)(?: (.*))?$")


@attrs.frozen
class RankArgs:
    """One rank of one life (``python -m frontier_adapters.verify
    elastic-rank``, under torchrun)."""

    workdir: str
    rows: int = 40
    epochs: int = 2
    seed: int = 0
    global_batch: int = 8
    fail_rate: float = 0.1
    write_pause: float = 0.0  # seconds a rank pauses after its part, rank 0 before COMMIT
    step_pause: float = 0.0  # seconds inside each step, between backward and all-reduce
    announce: bool = False
    #: Where the checkpoints live: a directory or a URL (``s3://...``);
    #: ``""``: ``workdir/checkpoints``.
    checkpoints: str = ""


def per_rank_batch(global_batch: int, world: int) -> int:
    return max(1, math.ceil(global_batch / world))


def run_rank(args: RankArgs) -> int:
    """One rank: resume from the newest committed checkpoint (any world
    size) or start, train until every rank's share is drained."""
    import torch.distributed as dist

    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = TorchCollectives()

    def say(what: str) -> None:
        if args.announce:  # one write: lines of several ranks never interleave
            os.write(sys.stdout.fileno(), f"r{rank} {what}\n".encode())

    say(f"pid {os.getpid()}")
    workdir = Path(args.workdir)
    ckpt_root: str | Path = args.checkpoints or workdir / CKPT_DIR
    log_path = workdir / LOG_NAME
    dataset = make_dataset(args.rows)
    fingerprint = dataset_fingerprint(dataset, seed=args.seed, shuffle=True)
    config = LedgerConfig(
        stream_len=args.rows * args.epochs,
        on_failure=FailurePolicy.RETRY,
        max_failures=2,
        fingerprint=fingerprint,
    )

    loaded = read_distributed_checkpoint(ckpt_root, fingerprint=fingerprint)
    model, optim = make_model()
    buffer: dict[int, list[float]] = {}
    if loaded is None:
        share, step, life = Share(0, world, rank), 0, 0
        record = None
    else:
        record = loaded.reshard(world, "collector")[rank]
        share, step = record.share, loaded.step
        life = loaded.parts[0].json_part["life"] + 1
    batch = per_rank_batch(args.global_batch, world)
    loader = make_seekable_loader(
        dataset, batch_size=batch, seed=args.seed, shuffle=True, epochs=args.epochs, share=share
    )
    collector = RankCollector(SeekableSource(loader), config, share, step=step)
    log: TrainLogWriter | None = None
    if record is None:
        if rank == 0:
            fresh = not log_path.exists() or log_path.stat().st_size == 0
            log = TrainLogWriter(log_path, resume_records=None if fresh else 0)
    else:
        assert loaded is not None
        draw = random.Random(f"{args.seed}:resume:{step}:{life}")  # the same on every rank
        restore = draw.random() >= 0.3
        retained = share.global_ordinals(record.checkpoint.retained_ordinals())
        evicted: list[int] = []
        if restore:
            groups = owned_groups(loaded.parts, "buffer", record)
            mine = random.Random(f"{args.seed}:evict:{step}:{life}:{rank}")
            evicted = [o for o in retained if mine.random() < 0.2]
            buffer = {o: groups[o] for o in retained if o not in evicted}
        collector.resume(record, load_replay_buffer=restore, evicted_on_restore=evicted)
        tensors = loaded.parts[0].tensor_part
        assert tensors is not None, "rank 0's part holds the model"
        model.load_state_dict(tensors["model"])
        optim.load_state_dict(tensors["optim"])
        if rank == 0:
            log = TrainLogWriter(log_path, resume_records=loaded.parts[0].json_part["records"])

    def hook(phase: str) -> None:
        say(f"{phase} {step}")
        if args.write_pause:
            time.sleep(args.write_pause)

    checkpointer = DistributedCheckpointer(
        ckpt_root, rank=rank, world=world, fingerprint=fingerprint, comm=comm, hook=hook
    )
    say(f"ready step={step} life={life} world={world} batch={batch} share={share.base}")
    rng = random.Random(f"{args.seed}:gen:{step}:{life}:{rank}")
    pool = PromptPool(collector, rng, fail_rate=args.fail_rate, latency=3)
    drops: list[int] = []
    while True:
        pool.dispatch(batch + 2)
        landed, dropped = pool.tick()
        buffer.update(landed)
        drops.extend(dropped)
        tail = collector.exhausted and not pool.in_flight
        want = len(buffer) >= batch or bool(tail and buffer) or bool(drops)
        stalled = tail and not buffer and not collector.drained
        flags = comm.all_gather_object((want, collector.drained, stalled))
        if any(s for _, _, s in flags):
            raise RuntimeError(f"rank {rank}: stream stalled: {flags}")
        if not any(w for w, _, _ in flags):
            if all(d for _, d, _ in flags):
                break
            continue
        # One synchronous data-parallel step.
        say(f"step {step}")
        chosen = sorted(buffer)[:batch]
        for p in model.parameters():
            p.grad = None
        if chosen:
            rows = torch.tensor([buffer.pop(o) for o in chosen])
            pred = model(rows[:, :FEATURES]).squeeze(1)
            loss = torch.nn.functional.mse_loss(pred, rows[:, -1], reduction="sum")
            loss.backward()  # type: ignore[no-untyped-call]
        if args.step_pause:
            time.sleep(args.step_pause)
        count = torch.tensor([float(len(chosen))])
        dist.all_reduce(count)
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            if count.item() > 0:
                p.grad /= count.item()
        if count.item() > 0:
            optim.step()
        collector.trained(chosen)
        gathered = comm.all_gather_object((chosen, drops))
        drops = []
        if log is not None:
            trained = sorted(o for c, _ in gathered for o in c)
            if trained:
                log.step(step, trained)
            log.dropped(sorted(o for _, d in gathered for o in d))
            log.sync()
        step += 1
        collector.step = step
        checkpointer.save(
            step,
            {
                "collector": collector.state_dict(),
                "buffer": {str(o): row for o, row in buffer.items()},
                "records": None if log is None else log.records,
                "life": life,
            },
            {"model": model.state_dict(), "optim": optim.state_dict()} if rank == 0 else None,
        )
    if log is not None:
        log.close()
    say(f"done steps={step}")
    dist.destroy_process_group()
    return 0


# -- torchrun on the loopback interface -------------------------------------------------


def torchrun_loopback(argv: Sequence[str]) -> int:
    """``torchrun`` itself (``torch.distributed.run.main``, its elastic
    agent, its teardown of the other ranks when one fails), with one
    change: its rendezvous store listens on ``--master-addr`` only.

    torchrun's static rendezvous starts a ``TCPStore`` server on the master
    port, and the store binds every interface whatever ``--master-addr``
    says (``:::PORT``). Here the store is handed a socket already bound to
    the master address (``master_listen_fd``), which must be a loopback
    address; the ranks' gloo pairs stay on ``GLOO_SOCKET_IFNAME=lo``. The
    torture checks every listening socket of every life."""
    import torch.distributed as dist
    from torch.distributed import run
    from torch.distributed.elastic.rendezvous import static_tcp_rendezvous

    real: Any = dist.TCPStore  # type: ignore[attr-defined]

    def store(*args: Any, **kwargs: Any) -> Any:
        host, port = args[0], args[1]
        is_master = args[3] if len(args) > 3 else kwargs.get("is_master", False)
        if is_master and kwargs.get("master_listen_fd") is None:
            if not is_loopback(f"{host}:0"):
                raise ValueError(f"--master-addr must be a loopback address, got {host!r}")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            kwargs["master_listen_fd"] = sock.detach()
        return real(*args, **kwargs)

    setattr(static_tcp_rendezvous, "TCPStore", store)  # noqa: B010 - patching a module
    run.main(list(argv))
    return 0


# -- the torture ---------------------------------------------------------------------------


@attrs.frozen
class Life:
    """One life of the torture: its world size, how it ended, what was killed."""

    world: int
    killed_rank: int | None
    moment: str
    exit_code: int
    leftovers: int
    seconds: float
    #: Seconds from the SIGKILL to torchrun's exit (0 for the last life).
    teardown: float = 0.0


@attrs.frozen
class ElasticTortureResult:
    """What the torture did and what ``frontier audit`` said of the log.

    ``audit`` is the command's JSON report and ``audit_exit`` its exit
    status; ``leftovers`` counts processes of a finished life that were
    still alive after the grace period (killed then); ``listening`` is every
    address a process of the job listened on."""

    lives: tuple[Life, ...]
    kills: int
    worlds: tuple[int, ...]
    stream_len: int
    trained_once: int
    dropped: int
    skipped: tuple[int, ...]
    duplicated: tuple[int, ...]
    leftovers: int
    listening: tuple[str, ...]
    audit: dict[str, Any]
    audit_exit: int
    seconds: float

    @property
    def clean(self) -> bool:
        return self.audit_exit == 0 and bool(self.audit["clean"]) and self.leftovers == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stat(pid: int) -> tuple[int, str, int] | None:
    """``(parent, state, start time)`` of ``pid`` from /proc, or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19])


#: A process, told apart from a later one with its recycled pid.
Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def process_tree(pid: int) -> set[Process]:
    """``pid`` and its descendants, from /proc (Linux)."""
    children: dict[int, list[Process]] = {}
    found_root: Process | None = None
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            children.setdefault(st[0], []).append((int(entry), st[2]))
            if int(entry) == pid:
                found_root = (pid, st[2])
    if found_root is None:
        return set()
    found: set[Process] = set()
    todo = [found_root]
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(children.get(p[0], ()))
    return found


def _alive(process: Process) -> bool:
    """Whether this very process (not a later one with its pid) still runs."""
    st = _stat(process[0])
    return st is not None and st[2] == process[1] and st[1] != "Z"


def _signal(process: Process) -> None:
    if _alive(process):
        try:
            os.kill(process[0], signal.SIGKILL)
        except ProcessLookupError:
            pass


def listening_sockets(processes: set[Process]) -> set[str]:
    """``address:port`` of every TCP socket in LISTEN state held by ``processes``."""
    inodes: set[str] = set()
    for pid, _ in processes:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out: set[str] = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            addr, port = fields[1].split(":")
            out.add(f"{_address(addr, width)}:{int(port, 16)}")
    return out


def _address(hexaddr: str, width: int) -> str:
    raw = bytes.fromhex(hexaddr)
    # /proc/net prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if width == 8 else socket.AF_INET6
    return socket.inet_ntop(family, words)


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0]
    return (
        host.startswith("127.")
        or host in ("::1", "::ffff:127.0.0.1")
        or (host.startswith("::ffff:127."))
    )


def torture(
    workdir: str | os.PathLike[str],
    *,
    kills: int,
    worlds: Sequence[int] = (3, 2, 4, 1),
    seed: int = 0,
    rows: int = 40,
    epochs: int = 2,
    global_batch: int = 8,
    write_pause: float = 0.02,
    step_pause: float = 0.01,
    timeout: float = 600.0,
    life_timeout: float = 180.0,
    grace: float = 20.0,
    verbose: bool = False,
    checkpoints: str = "",
) -> ElasticTortureResult:
    """Run lives of the job under torchrun, world sizes cycling through
    ``worlds``, SIGKILLing one rank per life ``kills`` times, then one life
    to the end; audit the log with ``frontier audit``. Each life has
    ``life_timeout`` seconds (and no more than is left of ``timeout``):
    past it torchrun and every rank are killed and ``LifeDeadlineError``
    names the life; a torchrun that takes 120 s to tear down after its
    victim's death is killed whole and the torture goes on. ``checkpoints``
    is where every life's checkpoints live: ``workdir/checkpoints`` by
    default, or a URL (``s3://bucket/prefix``, the ``AWS_*`` variables of
    this process passed on to the ranks)."""
    t0 = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    lives: list[Life] = []
    listening: set[str] = set()
    killed = leftovers = 0
    launcher = [sys.executable, "-m", "frontier_adapters.verify", "torchrun-loopback", "--"]
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",  # gloo's pairs on the loopback interface only
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    while True:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"elastic torture did not finish in {timeout} s ({killed} kills)")
        world = worlds[len(lives) % len(worlds)]
        finishing = killed >= kills
        cmd = [
            *launcher,
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(world),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            "--local-addr",
            "127.0.0.1",
            "--max-restarts",
            "0",
            "--monitor-interval",
            "0.05",
            "-m",
            "frontier_adapters.verify",
            "elastic-rank",
            "--workdir",
            str(workdir),
            "--rows",
            str(rows),
            "--epochs",
            str(epochs),
            "--seed",
            str(seed),
            "--global-batch",
            str(global_batch),
            "--write-pause",
            str(write_pause),
            "--step-pause",
            str(step_pause),
            "--checkpoints",
            checkpoints,
            "--announce",
        ]
        start = time.monotonic()
        errf = open(workdir / "stderr.log", "ab")
        life_number = len(lives) + 1
        proc = LifeProcess(
            cmd,
            name=f"elastic life {life_number} (world {world})",
            # Never more than is left of the torture's timeout.
            deadline=min(life_timeout, max(0.001, timeout - (start - t0))),
            stderr=errf,
            env=env,
            kill_tree=_kill_and_reap,
        )
        victim = None if finishing else rng.randrange(world)
        moment = "finish" if finishing else rng.choice(["step", "step", "part", "commit", "boot"])
        # The line that triggers the kill: the victim's own, or rank 0's commit.
        trigger = {"boot": "pid", "step": "step", "part": "part", "commit": "commit"}.get(moment)
        watching = 0 if moment == "commit" else victim
        target = 1 if moment == "boot" else rng.randint(1, 3)
        tree: set[Process] = set()
        pids: dict[int, int] = {}
        ready: set[int] = set()
        hits = 0
        done = hit = False
        killed_at: float | None = None
        for line in proc.lines("the ranks' next line"):
            m = _LINE.match(line.strip())
            if m is None:
                continue
            who, what, rest = int(m.group(1)), m.group(2), m.group(3) or ""
            if what == "pid":
                pids[who] = int(rest)
            elif what == "ready":
                ready.add(who)
                if len(ready) == world:
                    tree |= process_tree(proc.pid)
                    listening |= listening_sockets(tree)
            elif what == "done":
                done = True
            if victim is None or what != trigger or who != watching:
                continue
            hits += 1
            if hits >= target and victim in pids:
                time.sleep(rng.uniform(0.0, 0.3 if moment == "boot" else write_pause))
                tree |= process_tree(proc.pid)
                # The announced pid, if it is still this life's worker.
                for process in tree:
                    if process[0] == pids[victim] and _alive(process):
                        os.kill(process[0], signal.SIGKILL)
                        hit = True
                        killed += 1
                        killed_at = time.monotonic()
                break
        try:
            # torchrun tears the life down after the victim's death; one that
            # takes 120 s is killed whole (its leftovers are counted below).
            proc.proc.wait(timeout=min(120.0, proc.remaining()))
        except subprocess.TimeoutExpired:
            proc.kill()
        teardown = 0.0 if killed_at is None else time.monotonic() - killed_at
        for line in proc.lines("the end of the ranks' output"):
            done = done or bool(re.match(r"^r\d+ done", line))
        returncode = proc.wait()
        proc.close()
        errf.close()
        left = _reap({p for p in tree if p[0] != proc.pid}, grace)
        leftovers += left
        life = Life(
            world=world,
            killed_rank=victim if hit else None,
            moment=moment if hit or finishing else f"{moment} (not reached)",
            exit_code=returncode,
            leftovers=left,
            seconds=round(time.monotonic() - start, 1),
            teardown=round(teardown, 1),
        )
        lives.append(life)
        if verbose:
            print(f"life {len(lives)}: {life}", flush=True)
        if done:
            if returncode != 0:
                tail = (workdir / "stderr.log").read_text()[-4000:]
                raise RuntimeError(f"the last life exited with {returncode}:\n{tail}")
            break
        if not hit:
            tail = (workdir / "stderr.log").read_text()[-4000:]
            raise RuntimeError(f"a life ended unkilled and unfinished ({life}):\n{tail}")
    stream_len = rows * epochs
    audit_exit, report = run_audit(workdir / LOG_NAME, stream_len)
    return ElasticTortureResult(
        lives=tuple(lives),
        kills=killed,
        worlds=tuple(life.world for life in lives),
        stream_len=stream_len,
        **coverage(report),
        leftovers=leftovers,
        listening=tuple(sorted(listening)),
        audit=report,
        audit_exit=audit_exit,
        seconds=round(time.monotonic() - t0, 1),
    )


def _kill_tree(pid: int) -> None:
    for process in sorted(process_tree(pid), reverse=True):
        _signal(process)


def _kill_and_reap(pid: int) -> None:
    """A life's ``kill_tree``: SIGKILL torchrun and every rank (the ranks
    may sit in process groups of their own, so the group alone is not the
    life) and wait up to 10 s for them to go."""
    tree = process_tree(pid)
    _kill_tree(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _reap({p for p in tree if p[0] != pid}, 10.0)


def _reap(processes: set[Process], grace: float) -> int:
    """Wait up to ``grace`` seconds for ``processes`` to exit; SIGKILL and
    count the ones still alive then (the very processes: a recycled pid is
    another process and is left alone)."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in processes):
            return 0
        time.sleep(0.05)
    alive = [p for p in processes if _alive(p)]
    for p in alive:
        _signal(p)
    return len(alive)
