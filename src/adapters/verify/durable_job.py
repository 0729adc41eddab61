"""A sample-level rollout job with a rollout journal, killed and resumed.

One life (``run_life``) generates GRPO groups of ``samples`` siblings with a
deterministic stand-in engine (sibling ``s`` of prompt ``o`` is a fixed
token sequence of a heavy-tailed length, one token per sibling per tick, so
a kill lands mid-generation), through a ``Ledger`` and a
``RolloutJournal``: every sealed sample is journaled, every running one every
``progress_every`` tokens; every ``checkpoint_every`` steps the journal is
marked and synced, the checkpoint (ledger, step, buffer, journal position)
is written atomically, and the journal is compacted to the checkpoint's
window. A resume replays the journal under the reuse policy: sealed siblings
come back without generation, running ones continue from their last durable
prefix, and only the rest is generated.

``torture`` SIGKILLs lives at random moments (whole process groups) and then
``audit``s the training log *per sample*: every prompt trained exactly once
in the surviving lineage, with exactly its n siblings, each from one attempt
(no attempt used twice), each exactly the engine's full sequence (so no
token was lost or duplicated across a continuation), and it counts the
tokens generated again. The training log is ours (JSON lines, fsynced per
step, with a resume marker per life that discards the dead branch's steps).
The audit itself (``audit_log``, over the log's records) is shared with the
torch job's journal torture (``torch_job.run_journal``) and the Ray job
(``ray_job.audit``), which write the same per-sample log.

Not API: a test fixture, like the other jobs here.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from frontier_core import Checkpoint, Lease, Ledger, LedgerConfig
from frontier_core.journal import CommitPolicy, Reuse, TokenPayload

from ..journal import RolloutJournal, resumed_sample
from ._files import (
    append_line,
    checkpoint_journal,
    drop_torn_line,
    lineage,
    read_lines,
    write_atomic,
)
from ._lives import PIPE, Life
from ._lives import life_deadline as _life_deadline
from ._lives import run as run_bounded

FINGERPRINT = "durable-demo"


@attrs.frozen
class DurableArgs:
    """One life's settings (the torture passes the same to every life)."""

    workdir: str
    prompts: int = 24
    samples: int = 4
    groups_per_step: int = 2
    checkpoint_every: int = 2
    in_flight: int = 6
    progress_every: int = 8  # 0: no progress records (sealed siblings only)
    reuse: str = "everything"  # or "nothing": coverage only
    tick: float = 0.0005
    seed: int = 0


def length(o: int, s: int, seed: int) -> int:
    """Heavy-tailed sample lengths, a pure function of the sibling."""
    h = int.from_bytes(hashlib.blake2b(f"{seed}:{o}:{s}".encode(), digest_size=8).digest())
    u = (h % 10_000) / 10_000
    return 4 + int(8 / max(1e-3, 1 - u) ** 0.7)  # Pareto-like, 12 at the median


def token(o: int, s: int, i: int) -> int:
    return (o * 7919 + s * 104_729 + i * 31) % 50_000


def full_sample(o: int, s: int, seed: int) -> list[int]:
    return [token(o, s, i) for i in range(min(length(o, s, seed), 400))]


def digest(tokens: Sequence[int]) -> str:
    return hashlib.sha256(json.dumps(list(tokens)).encode()).hexdigest()[:16]


def _payload(tokens: Sequence[int], start: int, version: int) -> TokenPayload:
    return TokenPayload.of(
        tokens, [-0.05 - ((start + i) % 7) / 10 for i in range(len(tokens))], version
    )


def run_life(args: DurableArgs) -> int:
    """One life: resume (or start), generate, train, checkpoint, until every
    prompt is trained. Returns 0."""
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    trained_log = work / "trained.jsonl"
    generated_log = work / "generated.log"
    drop_torn_line(trained_log)
    drop_torn_line(generated_log)
    config = LedgerConfig(stream_len=args.prompts, samples=args.samples, fingerprint=FINGERPRINT)
    journal = RolloutJournal(
        work / "journal",
        fingerprint=FINGERPRINT,
        lineage=lineage(work),
        policy=CommitPolicy(max_delay=0.002),
        progress_every=max(1, args.progress_every),
    )
    reuse = Reuse.everything() if args.reuse == "everything" else Reuse.nothing()
    ck_path = work / "checkpoint.json"
    buffer: dict[int, list[list[Any]]] = {}  # ordinal -> [[sibling, attempt, tokens], ...]
    step = 0
    if ck_path.exists():
        saved = json.loads(ck_path.read_text())
        checkpoint = Checkpoint.from_state_dict(saved["ledger"], fingerprint=FINGERPRINT)
        step = saved["step"]
        buffer = {int(o): g for o, g in saved["buffer"].items()}
        recovered = journal.recover(
            checkpoint,
            position=saved["position"],
            checkpoint_id=saved["id"],
            reuse=reuse,
            fork=step,
            step=step,
        )
        ledger = Ledger.resume(
            config,
            checkpoint,
            load_replay_buffer=True,
            sealed=recovered.sealed,
            attempt_floor=recovered.attempt_floor,
            attempt_limit=recovered.attempt_limit,
        ).ledger
        append_line(trained_log, {"resume": step}, sync=True)
    else:
        recovered = journal.recover(
            None, position=None, checkpoint_id=None, reuse=reuse, fork=0, step=0
        )
        ledger = Ledger.start(
            config, attempt_floor=recovered.attempt_floor, attempt_limit=recovered.attempt_limit
        )
        append_line(trained_log, {"resume": 0}, sync=True)

    def save_checkpoint() -> None:
        def write(position: int) -> None:
            record = {
                "ledger": ledger.checkpoint(save_sealed=False).state_dict(),
                "step": step,
                "position": position,
                "id": step,
                "buffer": {str(o): g for o, g in buffer.items()},
            }
            write_atomic(ck_path, json.dumps(record).encode())

        checkpoint_journal(journal, checkpoint_id=step, cut=ledger.cut, write=write)

    if not ck_path.exists():
        # A first checkpoint before anything is generated: from now on a
        # journal with samples always has a checkpoint to resume from, and
        # one without is a lost checkpoint, which ``recover`` refuses.
        save_checkpoint()
    samples: dict[tuple[int, int], tuple[int, list[int]]] = {}
    # lease -> [prefix state or None, tokens generated in this attempt, recorded]
    running: dict[Lease, list[Any]] = {}

    def land(ordinals: Sequence[int]) -> None:
        for o in ordinals:
            buffer[o] = [[s, *samples.pop((o, s))] for s in range(args.samples)]

    def dispatch() -> None:
        nonlocal ledger
        room = args.in_flight - ledger.in_flight()
        if room <= 0 or ledger.exhausted:
            return
        step_ = ledger.stamp(room)
        # Reserve the attempts this dispatch may deal (one per sibling)
        # before it deals them: a later life starts above them.
        ledger = journal.cover(step_.ledger, len(step_.effect.kept) * args.samples)
        applied = ledger.dispatch(step_.effect.kept)
        ledger = applied.ledger
        for lease in applied.effect.reused:
            payload = recovered.sample(lease)
            assert isinstance(payload, TokenPayload)
            samples[(lease.ordinal, lease.sibling)] = (lease.attempt, list(payload.tokens()))
        for lease in applied.effect.leases:
            prefix = recovered.prefix(lease.ordinal, lease.sibling) if args.progress_every else None
            running[lease] = [prefix, [], 0]
        land(applied.effect.landed)

    while not ledger.drained:
        dispatch()
        # One engine tick: every running sibling makes one token.
        made = 0
        for lease in list(running):
            prefix, new, recorded = running[lease]
            have = len(prefix.payload) if prefix is not None else 0
            full = full_sample(lease.ordinal, lease.sibling, args.seed)
            if have + len(new) < len(full):
                new.append(full[have + len(new)])
                made += 1
            if have + len(new) == len(full):
                rest = _payload(new, have, step)
                payload = resumed_sample(prefix, rest)
                applied = ledger.seal([lease])
                ledger = applied.ledger
                del running[lease]
                if lease in applied.effect.sealed:
                    journal.sealed(lease, payload)
                    samples[(lease.ordinal, lease.sibling)] = (
                        lease.attempt,
                        list(payload.tokens()),
                    )
                    land(applied.effect.landed)
            elif args.progress_every and journal.due(recorded, len(new)):
                if recorded == 0:
                    # The attempt's first record: a snapshot, prefix included.
                    journal.progress(lease, resumed_sample(prefix, _payload(new, have, step)))
                else:
                    # Then only the tokens since: each is journaled once.
                    journal.extend(
                        lease, have + recorded, _payload(new[recorded:], have + recorded, step)
                    )
                running[lease][2] = len(new)
        journal.poll()
        if made:
            # Not fsynced: a SIGKILL loses no written bytes (the page cache
            # survives the process); the count is what was generated.
            append_line(generated_log, {"tokens": made}, sync=False)
            time.sleep(args.tick)
        # Train when a step's worth landed (or the stream's last groups).
        ready = sorted(buffer)
        tail = ledger.exhausted and not running
        if len(ready) >= args.groups_per_step or (tail and ready):
            chosen = ready[: args.groups_per_step]
            ledger = ledger.train(chosen).ledger
            step += 1
            append_line(
                trained_log,
                {
                    "step": step,
                    "groups": {
                        str(o): [[s, a, len(t), digest(t)] for s, a, t in buffer.pop(o)]
                        for o in chosen
                    },
                },
                sync=True,
            )
            if step % args.checkpoint_every == 0 or ledger.drained:
                save_checkpoint()
    journal.close()
    return 0


@attrs.frozen
class Audit:
    """The per-sample verdict of a run's surviving lineage (``audit_log``).

    ``lost``: prompts neither trained nor dropped; ``duplicated``: trained
    more than once; ``bad_groups``: trained with wrong siblings, a reused
    attempt or wrong tokens. ``samples`` counts the trained samples and
    ``attempts`` the attempts that sealed them (equal when no attempt was
    used twice). ``tokens_needed`` is what the trained samples
    hold, ``tokens_generated`` what the engine made in every life,
    ``tokens_failed`` what it made for attempts the job failed on purpose
    (a failure, not a kill, threw them away)."""

    prompts: int
    trained: int
    lost: tuple[int, ...]
    duplicated: tuple[int, ...]
    bad_groups: tuple[int, ...]  # wrong siblings, a reused attempt, wrong tokens
    tokens_needed: int
    tokens_generated: int
    lives: int
    samples: int
    attempts: int
    dropped: tuple[int, ...] = ()
    tokens_failed: int = 0

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.bad_groups)

    @property
    def tokens_redone(self) -> int:
        """Tokens generated again because a kill lost them."""
        return self.tokens_generated - self.tokens_needed - self.tokens_failed


def audit_log(
    trained: Iterable[Mapping[str, Any]],
    generated: Iterable[Mapping[str, Any]],
    *,
    prompts: int,
    samples: int,
    seed: int,
) -> Audit:
    """Fold a per-sample training log and check every sample of the lineage
    against the stand-in engine (``full_sample(ordinal, sibling, seed)``).

    ``trained`` holds ``{"resume": k}`` when a life starts from the
    checkpoint of step ``k`` (it discards the dead branch's lines after
    it), ``{"step": k, "groups": {ordinal: [[sibling, attempt, length,
    digest], ...]}}`` per training step (steps count from 1, a checkpoint
    after step ``k`` resumes at ``k``), and ``{"dropped": [ordinals],
    "at": k}`` for groups the failure policy dropped after ``k`` steps (a
    resume at ``k`` keeps the drops at ``j < k``: a checkpoint of step
    ``k`` counts every drop logged before it, a drop at ``k`` came after).
    ``generated`` holds ``{"tokens": n}`` lines (``"failed": m`` of them
    for attempts the job failed)."""
    steps: list[tuple[int, dict[str, Any]]] = []
    drops: list[tuple[int, list[int]]] = []
    lives = 0
    for entry in trained:
        if "resume" in entry:
            lives += 1
            steps = [(k, g) for k, g in steps if k <= entry["resume"]]
            drops = [(k, d) for k, d in drops if k < entry["resume"]]
        elif "dropped" in entry:
            drops.append((entry["at"], list(entry["dropped"])))
        else:
            steps.append((entry["step"], entry["groups"]))
    seen: dict[int, int] = {}
    bad: set[int] = set()
    attempts: set[int] = set()
    trained_samples = 0
    for _, groups in steps:
        for key, group in groups.items():
            o = int(key)
            seen[o] = seen.get(o, 0) + 1
            if sorted(s for s, _, _, _ in group) != list(range(samples)):
                bad.add(o)
            for s, a, n, d in group:
                trained_samples += 1
                want = full_sample(o, s, seed)
                if a in attempts or n != len(want) or d != digest(want):
                    bad.add(o)
                attempts.add(a)
    dropped: dict[int, int] = {}
    for _, ordinals in drops:
        for o in ordinals:
            dropped[o] = dropped.get(o, 0) + 1
    made = failed = 0
    for line in generated:
        made += line["tokens"]
        failed += line.get("failed", 0)
    needed = sum(
        len(full_sample(o, s, seed)) for o in range(prompts) if o in seen for s in range(samples)
    )
    resolved = {o: seen.get(o, 0) + dropped.get(o, 0) for o in {*seen, *dropped}}
    return Audit(
        prompts=prompts,
        trained=len(seen),
        lost=tuple(o for o in range(prompts) if o not in resolved),
        duplicated=tuple(sorted(o for o, k in resolved.items() if k > 1 or not 0 <= o < prompts)),
        bad_groups=tuple(sorted(bad)),
        tokens_needed=needed,
        tokens_generated=made,
        lives=lives,
        samples=trained_samples,
        attempts=len(attempts),
        dropped=tuple(sorted(dropped)),
        tokens_failed=failed,
    )


def audit(args: DurableArgs) -> Audit:
    """The per-sample audit (``audit_log``) of ``args.workdir``'s logs."""
    work = Path(args.workdir)
    return audit_log(
        read_lines(work / "trained.jsonl"),
        read_lines(work / "generated.log"),
        prompts=args.prompts,
        samples=args.samples,
        seed=args.seed,
    )


def _life_command(args: DurableArgs) -> list[str]:
    cmd = [sys.executable, "-m", "frontier_adapters.verify", "durable-run"]
    for f in attrs.fields(DurableArgs):
        cmd += [f"--{f.name.replace('_', '-')}", str(getattr(args, f.name))]
    return cmd


def torture(
    args: DurableArgs,
    *,
    kills: int,
    seed: int = 0,
    max_delay: float = 1.5,
    life_deadline: float | None = None,
) -> Audit:
    """SIGKILL ``kills`` lives of ``durable-run`` at random moments (each
    life in its own process group, killed whole), run a last life to the
    end, and audit. A life that ends by itself before its kill is fine.
    Each life has ``life_deadline`` seconds (``_lives.life_deadline``):
    past it the life is killed with its group and ``LifeDeadlineError``
    names it; a life that fails raises ``RuntimeError``."""
    per_life = _life_deadline(life_deadline)
    rng = random.Random(seed)
    cmd = _life_command(args)
    for k in range(kills):
        with Life(
            cmd, name=f"durable-run life {k + 1}", deadline=per_life, stdout=None, stderr=PIPE
        ) as life:
            try:
                life.proc.wait(timeout=min(rng.uniform(0.05, max_delay), life.remaining()))
            except subprocess.TimeoutExpired:
                life.kill()  # its moment: SIGKILL the whole group
                continue
            if life.returncode != 0:
                assert life.proc.stderr is not None
                err = life.proc.stderr.read().decode(errors="replace")
                raise RuntimeError(f"durable-run failed ({life.returncode}): {err[-2000:]}")
    done = run_bounded(cmd, name=f"durable-run life {kills + 1} (the last)", deadline=per_life)
    if done.returncode != 0:
        raise RuntimeError(f"durable-run failed ({done.returncode}): {done.stderr[-2000:]}")
    return audit(args)
