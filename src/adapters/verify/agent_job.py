"""The agent torture: lives of a run of multi-turn episodes with a keyed
tool, SIGKILLed (the whole process group) at chosen points, and the tool
server killed and restarted; audited from the episode log and the tool
server's own record.

One life: ``python -m frontier_adapters.verify.agent_job --root R --tool
FILE:PORTFILE --prompts P --samples N --max-turns T [--kill-at POINT:COUNT]``
opens the run (``Run.open``: recovered), drives every lease's episode over
the CPU engine (``agents.drive``), trains every landed group and
checkpoints. Kill points (the ``COUNT``-th time the life passes it):
``generating`` (a turn generated, not journaled: mid-turn), ``turn`` (a
call's intent journaled, the tool not called: mid-episode with a call
pending), ``answered`` (the tool executed and answered, its answer
not journaled: between a tool's answer and its record), ``episode`` (an
answer journaled: mid-episode), ``resumed`` (right after a resume).

``torture`` runs lives until the run is drained, with a kill per entry of
``kills``, and with the tool server SIGKILLed and restarted during a life
(``server_kills``), then audits: every prompt trained once with its n
episodes, as the run gave them back (``drive``'s sealed episode, or
``Run.episode`` of a sibling reused from the journal); every request the
tool server received (its own record: executed, replayed or refused)
made with one name and args per key and executed at most once per key;
every answer of a trained episode the server's recorded answer for its key
(no answer of a fenced attempt, none made up); under ``retry``, the keys
executed exactly the keys of the trained episodes, each in one (no
execution orphaned by an intent that was not durable); and it
reports the turns and tokens generated against those trained, with the
turns a coverage-only recovery would have generated again. The long
version is ``python -m frontier_adapters.verify.agent_job --torture DIR
--prompts 64 --samples 4 --max-turns 6 --kills 40``.

Not API: the verification rig.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from frontier_core import LedgerConfig
from frontier_core.journal import JsonPayload, SiblingState

from .._sources import SequenceSource
from ..agents import Pending, drive
from ..run import Run
from .tool_server import KvEnvironment, ToolServer

KILL_POINTS = ("generating", "turn", "answered", "episode", "resumed")
#: The most seconds one life may take before the torture gives up on it.
LIFE_TIMEOUT = 300.0
FINGERPRINT = "agents-torture-v1"


def append_event(path: Path, entry: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class _Killer:
    def __init__(self, spec: str | None) -> None:
        self.point, self.count = (None, 0)
        if spec:
            point, count = spec.split(":")
            if point not in KILL_POINTS:
                raise ValueError(f"kill point {point!r} is not one of {KILL_POINTS}")
            self.point, self.count = point, int(count)

    def passed(self, point: str) -> None:
        if point == self.point:
            self.count -= 1
            if self.count <= 0:
                print(f"kill-point {point}", flush=True)
                os.killpg(0, signal.SIGKILL)  # the whole process group, for real


class _KilledEnvironment(KvEnvironment):
    def __init__(self, url: str, killer: _Killer) -> None:
        super().__init__(url)
        self.killer = killer

    async def call(self, name: str, args: Any, key: str) -> tuple[Any, Any]:
        self.killer.passed("turn")
        got = await super().call(name, args, key)
        self.killer.passed("answered")
        return got

    def observe(self, answer: Any) -> Sequence[int]:
        self.killer.passed("episode")
        return super().observe(answer)


def log_life(run: Run, log: Path) -> None:
    """The ``life`` event ``audit`` reads: this life's pid, and the answered
    turns and pending calls its run recovered from the journal."""
    durable = [st for _o, _s, st in run.recovered.state.siblings() if st.turns]
    append_event(
        log,
        {
            "event": "life",
            "pid": os.getpid(),
            "turns_durable": sum(st.answered for st in durable),
            "calls_pending": sum(st.pending is not None for st in durable),
        },
    )


class CountingEngine:
    """The engine, with every turn it generates logged (durably: the
    ``generated`` event ``audit`` reads) as it ends, so the turns a killed
    life generated are counted too; ``killer`` (the torture's) may die
    right after."""

    def __init__(self, engine: Any, log: Path, killer: _Killer | None = None) -> None:
        self.engine, self.log, self.killer = engine, log, killer

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    async def generate(self, prompt: Any, params: Any, request_id: str) -> Any:
        final = None
        async for output in self.engine.generate(prompt, params, request_id):
            final = output
            yield output
        if final is not None:
            tokens = len(final.outputs[0].token_ids) if final.outputs else 0
            append_event(self.log, {"event": "generated", "tokens": tokens})
            if self.killer is not None:
                self.killer.passed("generating")  # a turn generated, not journaled


def _transcript(episode: SiblingState) -> list[list[Any]]:
    out: list[list[Any]] = []
    for t in episode.turns:
        answer = t.answer.value() if isinstance(t.answer, JsonPayload) else None
        out.append([None if t.call is None else t.call.key, answer])
    return out


async def _life(args: argparse.Namespace) -> None:
    from ..examples.cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM

    root = Path(args.root)
    killer = _Killer(args.kill_at)
    prompts = [[2 + (i % 7), 3 + (i % 5)] for i in range(args.prompts)]
    config = LedgerConfig(stream_len=len(prompts), samples=args.samples, fingerprint=FINGERPRINT)
    engine = CpuEngine(TinyCausalLM(vocab=16, max_len=64, seed=1), seed=args.seed)
    params = CpuSamplingParams(n=1, max_tokens=4, seed=None)
    env = _KilledEnvironment(args.tool, killer)
    log = root / "episodes.jsonl"
    with Run.open(root, SequenceSource(prompts), config, progress_every=1 << 20) as run:
        if run.resumed is not None:
            killer.passed("resumed")
        log_life(run, log)
        counted = CountingEngine(engine, log, killer)
        step = run.step
        while not run.drained:
            groups = run.take(2)
            landed: set[int] = set()
            attempts: dict[int, dict[int, list[Any]]] = {}
            for group in groups:
                sib = attempts.setdefault(group.ordinal, {})
                for lease in group.reused:
                    # A seal of an earlier life: its episode as the run gives it back.
                    reused = run.episode(lease)
                    assert reused is not None and run.sample(lease) == reused.payload
                    sib[lease.sibling] = [lease.attempt, _transcript(reused)]
                if group.complete:
                    landed.add(group.ordinal)
                for lease in group.leases:
                    out = await drive(
                        run,
                        counted,
                        lease,
                        prompts[lease.ordinal],
                        env,
                        params=params,
                        max_turns=args.max_turns,
                        version=step,
                        pending=Pending(args.pending),
                    )
                    entry = {
                        "event": "episode",
                        "lease": list(lease),
                        "generated": out.generated,
                        "tokens": out.tokens,
                        "reused": out.reused,
                        "retried": out.retried,
                        "sealed": out.effect is not None and lease in out.effect.sealed,
                    }
                    append_event(log, entry)
                    if out.effect is not None:
                        if lease in out.effect.sealed:
                            assert out.episode is not None
                            sib[lease.sibling] = [lease.attempt, _transcript(out.episode)]
                        landed.update(out.effect.landed)
            if not landed and not groups:
                break
            step += 1
            run.trained(sorted(landed))
            run.checkpoint(step)
            for ordinal in sorted(landed):
                # The episodes trained: each sibling's [attempt, transcript].
                append_event(
                    log,
                    {"event": "trained", "ordinal": ordinal, "episodes": attempts.get(ordinal, {})},
                )
    append_event(log, {"event": "done"})


def audit(
    root: Path, server: ToolServer, *, prompts: int, samples: int, pending: str = "retry"
) -> dict[str, Any]:
    """The audit (the module doc); raises ``AssertionError`` naming a breach."""
    entries = [json.loads(x) for x in (root / "episodes.jsonl").read_text().splitlines()]
    requests = server.requests()
    refused = [e["key"] for e in requests if e.get("refused")]
    assert not refused, f"keys sent with another name or args: {refused[:5]}"
    executed: dict[str, Any] = {}
    for e in requests:
        if e["executed"]:
            assert e["key"] not in executed, f"key {e['key']} executed twice by the tool"
            executed[e["key"]] = e["answer"]
    trained = [e for e in entries if e["event"] == "trained"]
    ordinals = sorted(e["ordinal"] for e in trained)
    assert ordinals == list(range(prompts)), f"trained ordinals {ordinals}"
    turns_trained = 0
    in_trained: dict[str, int] = {}
    for e in trained:
        assert len(e["episodes"]) == samples, f"ordinal {e['ordinal']} trained {e['episodes']}"
        for sibling, (_attempt, transcript) in e["episodes"].items():
            for key, answer in transcript:
                if key is not None:
                    in_trained[key] = in_trained.get(key, 0) + 1
                    assert executed.get(key) == answer, (
                        f"episode {e['ordinal']}.{sibling} trained answer {answer!r} for key "
                        f"{key}, the tool's record says {executed.get(key)!r}"
                    )
            turns_trained += len(transcript)
    twice = sorted(k for k, n in in_trained.items() if n > 1)
    assert not twice, f"keys in more than one trained episode: {twice[:5]}"
    if pending == Pending.RETRY.value:
        # Every pending call is retried under its key, so every execution
        # is a call of a trained episode: one that is not was made under an
        # intent that a crash lost (not durable before the call).
        orphans = sorted(set(executed) - set(in_trained))
        assert not orphans, f"executions under keys in no trained episode: {orphans[:5]}"
    episodes = [e for e in entries if e["event"] == "episode"]
    lives = [e for e in entries if e["event"] == "life"]
    turns = [e for e in entries if e["event"] == "generated"]
    again = len(turns) - turns_trained
    return {
        "prompts": prompts,
        "lives": len(lives),
        "tool_executions": len(executed),
        "tool_requests": len(requests),
        "turns_trained": turns_trained,
        "turns_generated": len(turns),
        "tokens_generated": sum(e["tokens"] for e in turns),
        "turns_generated_again": again,
        "turns_durable_at_resume": sum(e["turns_durable"] for e in lives),
        "calls_pending_at_resume": sum(e["calls_pending"] for e in lives),
        # Of the episodes that finished (a life killed later logs none).
        "calls_retried": sum(e["retried"] for e in episodes),
        # Coverage only, at least: every turn a life found durable is
        # generated again too (and its call made again, under a new key).
        "turns_generated_again_coverage_only": again + sum(e["turns_durable"] for e in lives),
    }


def _one_life(
    root: Path,
    port_file: Path,
    kill_at: str | None,
    *,
    prompts: int,
    samples: int,
    max_turns: int,
    pending: str,
    seed: int,
) -> int:
    cmd = [
        sys.executable,
        "-m",
        "frontier_adapters.verify.agent_job",
        "--root",
        str(root),
        "--tool",
        f"file:{port_file}",
        "--prompts",
        str(prompts),
        "--samples",
        str(samples),
        "--max-turns",
        str(max_turns),
        "--pending",
        pending,
        "--seed",
        str(seed),
    ]
    if kill_at:
        cmd += ["--kill-at", kill_at]
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        return proc.wait(LIFE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise RuntimeError(f"a life did not end within {LIFE_TIMEOUT} s") from None


def torture(
    root: Path,
    *,
    prompts: int = 6,
    samples: int = 2,
    max_turns: int = 3,
    kills: Sequence[str] = ("turn:2", "answered:2", "episode:3", "resumed:1", "answered:5"),
    server_kills: int = 1,
    pending: str = "retry",
    seed: int = 0,
) -> dict[str, Any]:
    """Lives until drained (the module doc); returns the audit's report."""
    root.mkdir(parents=True, exist_ok=True)
    server = ToolServer(root / "tool.record").start()
    port_file = server.record.with_suffix(".port")
    rng = random.Random(seed)
    restarts = 0
    try:
        for i, kill in enumerate([*kills, None, None]):
            stop = threading.Event()
            bouncer = None
            # Until ``server_kills`` restarts happened: a life that ends
            # before its bounce is due leaves it to the next one.
            if restarts < server_kills:

                def bounce(stop: threading.Event = stop) -> None:
                    nonlocal restarts
                    if not stop.wait(rng.uniform(1.0, 3.0)):
                        server.kill()
                        time.sleep(0.3)
                        server.start()
                        restarts += 1

                bouncer = threading.Thread(target=bounce, daemon=True)
                bouncer.start()
            code = _one_life(
                root / "run",
                port_file,
                kill,
                prompts=prompts,
                samples=samples,
                max_turns=max_turns,
                pending=pending,
                seed=seed + i,
            )
            stop.set()
            if bouncer is not None:
                bouncer.join(START_JOIN)
            if kill is None and code != 0:
                raise RuntimeError(f"a life without a kill exited with {code}")
            if code not in (0, -signal.SIGKILL):
                # A kill life ends killed, or drained before its kill point.
                raise RuntimeError(f"a life with kill {kill} exited with {code}")
            log = (root / "run" / "episodes.jsonl").read_text()
            if kill is None and log.rstrip().endswith('"done"}'):
                break
        report = audit(root / "run", server, prompts=prompts, samples=samples, pending=pending)
        report["tool_server_restarts"] = restarts
        return report
    finally:
        server.kill()


START_JOIN = 60.0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="agent torture life")
    parser.add_argument("--root", type=Path)
    parser.add_argument("--tool")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--pending", default="retry")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kill-at")
    parser.add_argument("--torture", type=Path, help="run the whole torture in this directory")
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args(argv)
    if args.torture is not None:
        rng = random.Random(args.seed)
        kills = [f"{rng.choice(KILL_POINTS)}:{rng.randint(1, 6)}" for _ in range(args.kills)]
        report = torture(
            args.torture,
            prompts=args.prompts,
            samples=args.samples,
            max_turns=args.max_turns,
            kills=kills,
            server_kills=args.kills // 4 + 1,
            pending=args.pending,
            seed=args.seed,
        )
        print(json.dumps(report, indent=1))
        return
    asyncio.run(_life(args))


if __name__ == "__main__":
    main()
