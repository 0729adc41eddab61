"""A seeded fuzz of every reader the project has, each case in a worker
process under a memory cap and a timeout.

Each reader (a parametrize id below) takes a valid input built here, mutated
one of many ways (byte flips, cuts, ints of 2**5000 and 2**64, negative
numbers, a wrong type in any position, keys of mixed types, nesting 10**5
deep, lists of 10**6 items, a forger's recomputed checksum), and must end in
success or in the project's typed error (a ``FrontierError``; for a command,
exit 0 or its verdict, or exit 2 with a message naming the problem and no
traceback): never another exception, never ``MemoryError`` under
``RLIMIT_AS`` = 1 GiB, never a case that outlives its timeout.

Cases run in a worker per reader, one after another, each reported on its
own line; a case that passes its deadline has its worker killed (and is a
failure), and the rest go on in a new worker. Everything is seeded: a
failure names its reader, seed and case, and reruns alone with

    .venv/bin/python tests/test_fuzz_readers.py --case READER SEED CASE

CI runs ``FRONTIER_FUZZ_READERS`` cases a reader (default 40), seed
``FRONTIER_FUZZ_SEED`` (default 0); the long run is

    FRONTIER_FUZZ_READERS=2000 .venv/bin/python -m pytest tests/test_fuzz_readers.py
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import random
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CASES = int(os.environ.get("FRONTIER_FUZZ_READERS", "40"))
SEED = int(os.environ.get("FRONTIER_FUZZ_SEED", "0"))
#: The memory cap of a worker, and each case's deadline.
MEMORY = 1 << 30
TIMEOUT = 15.0
#: A worker's start (imports) has its own deadline.
STARTUP = 60.0

# -- hostile values --------------------------------------------------------------------


def _deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def hostile(rng: random.Random) -> Any:
    """One value where something else belongs."""
    return rng.choice(
        [
            lambda: 2**5000,
            lambda: 2**64,
            lambda: 2**64 + 1,
            lambda: 2**63,
            lambda: -1,
            lambda: -(2**64),
            lambda: 2**20000,  # past the JSON digit limit: in-memory readers only
            lambda: True,
            lambda: False,
            lambda: None,
            lambda: 1.5,
            lambda: float("nan"),
            lambda: "x",
            lambda: "",
            lambda: [],
            lambda: {},
            lambda: [0] * 1_000_000,  # a huge length
            lambda: _deep(100_000),  # deep nesting
            lambda: {"a": 1, 5: 2, None: 3},  # keys of mixed types
            lambda: [[2**5000, -1]],
            lambda: [["a", 5]],
            lambda: b"bytes",
        ]
    )()


def _nodes(value: Any, path: tuple[Any, ...] = (), depth: int = 0) -> Iterator[tuple[Any, ...]]:
    yield path
    if depth > 6:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, (*path, k), depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value[:50]):
            yield from _nodes(v, (*path, i), depth + 1)


def mutate_value(value: Any, rng: random.Random) -> Any:
    """``value`` (JSON-like) with one to three hostile changes."""
    value = copy.deepcopy(value)
    for _ in range(rng.randint(1, 3)):
        paths = list(_nodes(value))
        path = rng.choice(paths)
        if not path:
            if rng.random() < 0.2:
                return hostile(rng)
            if isinstance(value, dict):
                _mutate_dict(value, rng)
            continue
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        target = parent[path[-1]]
        if isinstance(target, dict) and rng.random() < 0.5:
            _mutate_dict(target, rng)
        elif isinstance(target, list) and target and rng.random() < 0.3:
            change = rng.randrange(3)
            if change == 0:
                target.pop()
            elif change == 1:
                target.clear()
            else:
                target.append(hostile(rng))
        elif isinstance(target, int) and not isinstance(target, bool) and rng.random() < 0.4:
            parent[path[-1]] = target + rng.choice([1, -1, 2**64, -(2**64), 2**5000])
        else:
            parent[path[-1]] = hostile(rng)
    return value


def _mutate_dict(d: dict[Any, Any], rng: random.Random) -> None:
    choice = rng.randrange(4)
    if choice == 0 and d:
        del d[rng.choice(list(d))]
    elif choice == 1:
        d[rng.choice([5, None, (1, 2), 2.5, "extra"])] = hostile(rng)
    elif choice == 2:
        for i in range(rng.choice([2, 10_000])):
            d[f"k{i}" if i % 2 else i] = i
    else:
        if d:
            d[rng.choice(list(d))] = hostile(rng)


def resign(value: Any, depth: int = 0) -> Any:
    """A forger's checksums, recomputed bottom-up wherever a dict holds one
    (an independent writer of the documented canonical form), down to the
    depth where records nest; a body that is not JSON keeps its stale
    checksum."""
    if depth > 4:
        return value
    if isinstance(value, list):
        return [resign(v, depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: resign(v, depth + 1) for k, v in value.items()}
    if "checksum" in out:
        body = {k: v for k, v in out.items() if k != "checksum"}
        try:
            canonical = json.dumps(
                body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
            )
        except (TypeError, ValueError, RecursionError):
            return out
        out["checksum"] = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    return out


def mutate_record(record: Any, rng: random.Random) -> Any:
    mutated = mutate_value(record, rng)
    return resign(mutated) if rng.random() < 0.6 else mutated


_TOKENS = [
    b"18446744073709551616",
    b"9" * 1500,
    b"9" * 5000,
    b"-1",
    b"true",
    b"null",
    b"1.5",
    b'"x"',
    b"[]",
    b"{}",
    b'{"op": []}',
    b"[" * 100_000,
]


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one to three byte-level changes."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        choice = rng.randrange(7)
        at = rng.randrange(len(buf) + 1)
        if choice == 0 and buf:  # flip bits
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif choice == 1:  # cut
            del buf[at:]
        elif choice == 2:  # a hostile token over a number, or anywhere
            digits = [i for i, b in enumerate(buf) if 48 <= b <= 57]
            if digits and rng.random() < 0.7:
                at = rng.choice(digits)
                end = at
                while end < len(buf) and 48 <= buf[end] <= 57:
                    end += 1
                buf[at:end] = rng.choice(_TOKENS)
            else:
                buf[at:at] = rng.choice(_TOKENS)
        elif choice == 3:  # a line repeated or dropped
            lines = bytes(buf).split(b"\n")
            i = rng.randrange(len(lines))
            if rng.random() < 0.5:
                lines.insert(i, lines[i])
            else:
                del lines[i]
            buf = bytearray(b"\n".join(lines))
        elif choice == 4:  # a huge line
            buf[at:at] = b'{"x": [' + b"0," * 500_000 + b"0]}\n"
        elif choice == 5:  # the last newline dropped
            if buf.endswith(b"\n"):
                del buf[-1]
        else:  # random bytes
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(buf)


# -- valid inputs ----------------------------------------------------------------------


def _ledger(rng: random.Random, **config: Any) -> Any:
    from frontier_core import Ledger, LedgerConfig

    cfg = LedgerConfig(
        stream_len=rng.choice([None, 40]),
        on_failure=rng.choice(["drop", "retry"]),
        fingerprint="fp",
        **config,
    )
    ledger = Ledger.start(cfg).stamp(rng.randint(0, 30)).ledger
    stamped = list(range(ledger.next_ordinal))
    out = rng.sample(stamped, len(stamped) // 2)
    ledger = ledger.dispatch(out).ledger
    buffered = out[: len(out) // 2]
    ledger = ledger.buffer(buffered).ledger
    ledger = ledger.train(buffered[: len(buffered) // 2]).ledger
    return ledger.fail(out[len(out) // 2 :][:3]).ledger


def _sample_ledger(rng: random.Random) -> Any:
    from frontier_core import Ledger, LedgerConfig

    config = LedgerConfig(samples=3, on_failure="retry", fingerprint="fp")
    ledger = Ledger.start(config).stamp(rng.randint(1, 8)).ledger
    step = ledger.dispatch(range(ledger.next_ordinal))
    leases = list(step.effect.leases)
    ledger = step.ledger.seal(rng.sample(leases, len(leases) // 2)).ledger
    return ledger


def _trace(rng: random.Random) -> bytes:
    ops: list[dict[str, Any]] = [
        {"op": "config", "stream_len": 16, "on_failure": "retry"},
        {"op": "stamp", "count": 8},
        {"op": "dispatch", "ordinals": list(range(8))},
        {"op": "buffer", "ordinals": [0, 1, 2, 4]},
        {"op": "train", "ordinals": [0, 1]},
        {"op": "fail", "ordinals": [3]},
        {"op": "checkpoint"},
        {"op": "kill"},
        {"op": "resume", "load_replay_buffer": True, "evicted_on_restore": [2]},
        {"op": "stamp", "count": 16},
        {"op": "finish"},
    ]
    if rng.random() < 0.5:
        ops = [
            {"op": "config", "samples": 2, "granularity": "sibling", "on_failure": "retry"},
            {"op": "stamp", "count": 2},
            {"op": "dispatch", "ordinals": [0, 1]},
            {"op": "seal", "leases": [[0, 0, 0], [0, 1, 1]]},
            {"op": "fail_sample", "leases": [[1, 0, 2]]},
            {"op": "restart", "siblings": [[1, 0]]},
            {"op": "checkpoint"},
            {"op": "kill"},
            {"op": "resume", "sealed": [[0, 0, 0]], "attempt_floor": 7},
            {"op": "finish"},
        ]
        if rng.random() < 0.5:
            # An episode: a call pending at the kill, sent again and answered.
            ops[4:4] = [
                {"op": "turn", "lease": [1, 0, 2], "turn": 0, "tokens": 3, "call": "t/1.0.2.0"},
            ]
            ops[0]["namespace"] = "t"
            ops += [
                {"op": "stamp", "count": 2},
                {"op": "dispatch", "ordinals": [1]},
                {"op": "answer", "lease": [1, 0, 7], "key": "t/1.0.2.0"},
                {"op": "turn", "lease": [1, 0, 7], "turn": 1, "tokens": 2, "call": None},
                {"op": "finish"},
            ]
    if rng.random() < 0.5:
        i = rng.randrange(len(ops))
        ops[i] = mutate_value(ops[i], rng)
    return b"".join(_dumps(op) + b"\n" for op in ops)


def _dumps(value: Any) -> bytes:
    try:
        return json.dumps(value).encode()
    except (TypeError, ValueError, RecursionError):
        return b'{"op": "oops"}'


def _train_log(rng: random.Random, path: Path) -> bytes:
    from frontier_core import TrainLogWriter

    with TrainLogWriter(path) as w:
        w.step(0, [0, 1, 2])
        records = w.records
        w.step(1, [3, 4])
        w.dropped([5])
    with TrainLogWriter(path, resume_records=records) as w:
        w.step(1, [3, 4])
        w.dropped([5])
        w.step(2, [6, 7])
    return path.read_bytes()


# -- the readers -----------------------------------------------------------------------

#: A reader: (seeded rng, a scratch directory) -> the case to run. The case
#: returns None (success) or an exit status and stderr (a command).
Case = Callable[[], Any]


def _checkpoint(rng: random.Random, tmp: Path) -> Case:
    from frontier_core import Checkpoint

    record = mutate_record(_ledger(rng).checkpoint().state_dict(), rng)
    return lambda: Checkpoint.from_state_dict(record)


def _sample_checkpoint(rng: random.Random, tmp: Path) -> Case:
    from frontier_core import Checkpoint

    record = mutate_record(_sample_ledger(rng).checkpoint().state_dict(), rng)
    return lambda: Checkpoint.from_state_dict(record)


def _ledger_resume(rng: random.Random, tmp: Path) -> Case:
    from frontier_core import Ledger, LedgerConfig

    ledger = _ledger(rng)
    kwargs: dict[str, Any] = {
        "config": ledger.config,
        "checkpoint": ledger.checkpoint(),
        "load_replay_buffer": True,
        "evicted_on_restore": list(ledger.checkpoint().retained_ordinals())[:2],
        "rewind_to": None,
    }
    key = rng.choice([*kwargs, "evicted item"])
    if key == "evicted item":
        kwargs["evicted_on_restore"] = [*kwargs["evicted_on_restore"], hostile(rng)]
    elif key == "config" and rng.random() < 0.5:
        kwargs["config"] = LedgerConfig(fingerprint="fp", max_window=rng.choice([1, 2, 5]))
    else:
        kwargs[key] = hostile(rng)
    return lambda: Ledger.resume(**kwargs)


def _sample_resume(rng: random.Random, tmp: Path) -> Case:
    from frontier_core import Ledger

    ledger = _sample_ledger(rng)
    kwargs: dict[str, Any] = {
        "config": ledger.config,
        "checkpoint": ledger.checkpoint(),
        "load_replay_buffer": True,
        "sealed": [list(x) for x in ledger.held()][:2],
        "evicted_on_restore": (),
        "rewind_to": None,
        "attempt_floor": 0,
    }
    key = rng.choice([*kwargs, "sealed item"])
    if key == "sealed item":
        kwargs["sealed"] = [*kwargs["sealed"], hostile(rng)]
    else:
        kwargs[key] = hostile(rng)
    return lambda: Ledger.resume(**kwargs)


def _shards(rng: random.Random, tmp: Path) -> Case:
    from frontier_core import ShardCheckpoint, merge_shards, reshard, split_checkpoint

    checkpoint = _ledger(rng).checkpoint()
    world = rng.randint(1, 4)
    records = [s.state_dict() for s in split_checkpoint(checkpoint, world, step=3)]
    i = rng.randrange(world)
    records[i] = mutate_record(records[i], rng)
    new_world = rng.choice([1, 2, 5])  # an argument, not read: a ValueError is its contract

    def run() -> None:
        shards = [ShardCheckpoint.from_state_dict(r, fingerprint="fp") for r in records]
        merge_shards(shards)
        reshard(shards, new_world)

    return run


def _train_log_reader(rng: random.Random, tmp: Path) -> Case:
    from frontier_core import fold_lineage, read_train_log
    from frontier_core._audit import audit_lineage

    path = tmp / "train.jsonl"
    path.write_bytes(mutate_bytes(_train_log(rng, tmp / "valid.jsonl"), rng))
    return lambda: audit_lineage(fold_lineage(read_train_log(path)), 8, window=3)


def _command(argv: list[str]) -> tuple[int, str]:
    from frontier_core._cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, err.getvalue()


def _replay(rng: random.Random, tmp: Path) -> Case:
    path = tmp / "trace.jsonl"
    path.write_bytes(mutate_bytes(_trace(rng), rng) if rng.random() < 0.7 else _trace(rng))
    return lambda: ("replay", *_command(["replay", str(path)]))


def _audit(rng: random.Random, tmp: Path) -> Case:
    path = tmp / "log.jsonl"
    path.write_bytes(mutate_bytes(_train_log(rng, tmp / "valid.jsonl"), rng))
    n = rng.choice(["8", "0", "1000000000", "18446744073709551617", "-1", "x", "9" * 5000])
    argv = ["audit", str(path), "--stream-len", n]
    if rng.random() < 0.5:
        argv += ["--window", rng.choice(["1", "3", "1000000000000", "0", "-5"])]
    if rng.random() < 0.5:
        argv.append("--json")
    return lambda: ("audit", *_command(argv))


def _journal(rng: random.Random, tmp: Path) -> Case:
    from frontier_core.journal import JournalHeader, Sealed, TokenPayload, decode, encode

    header = JournalHeader("fp", "run")
    tokens = TokenPayload.of([5, 6], [-0.5, -1.0], [1, 1], reward=1.0)
    data = encode(header, [Sealed(0, 0, 0, tokens), Sealed(0, 1, 1, tokens)])
    data = mutate_bytes(data, rng)
    return lambda: decode(data, fingerprint="fp")


def _journal_turns(rng: random.Random, tmp: Path) -> Case:
    """An episode's frames (turns with calls, answers with state), mutated:
    decoded, then replayed (an episode that a mutation reorders is the
    replay's typed error, never a crash)."""
    from frontier_core.journal import (
        Answer,
        BytesPayload,
        JournalHeader,
        JsonPayload,
        TokenPayload,
        ToolCall,
        Turn,
        decode,
        encode,
        replay,
    )

    header = JournalHeader("fp", "run")
    tokens = TokenPayload.of([5, 6], [-0.5, -1.0], [1, 2])
    call = ToolCall("kv.add", JsonPayload.of({"k": "a", "v": [1, 2]}), "run.1/0.0.1.0")
    data = encode(
        header,
        [
            Turn(0, 0, 1, 0, tokens, call),
            Answer(0, 0, 1, 0, call.key, JsonPayload.of(3), BytesPayload(b"state")),
            Turn(0, 0, 1, 1, tokens),
        ],
    )
    data = mutate_bytes(data, rng)
    return lambda: replay(decode(data, fingerprint="fp").records)


def _journal_file(rng: random.Random, tmp: Path) -> Case:
    from frontier_adapters.journal import read_journal

    from frontier_core.journal import JournalHeader, Sealed, TokenPayload, encode

    header = JournalHeader("fp", "run")
    tokens = TokenPayload.of([5], [-0.5], [1])
    path = tmp / "journal.bin"
    path.write_bytes(mutate_bytes(encode(header, [Sealed(0, 0, 0, tokens)]), rng))
    return lambda: read_journal(path, fingerprint="fp")


def _collector(rng: random.Random, tmp: Path) -> Case:
    from frontier_adapters import StreamCollector
    from frontier_adapters._sources import SequenceSource

    collector = StreamCollector(SequenceSource(list(range(10)), batch_size=4))
    collector.pull()
    taken = [o for o, _ in collector.take(3)]
    collector.landed(taken[:2])
    collector.trained(taken[:1])
    state = mutate_record(collector.state_dict(), rng)
    fresh = StreamCollector(SequenceSource(list(range(10)), batch_size=4))
    return lambda: fresh.load_state_dict(state)


def _replay_buffer(rng: random.Random, tmp: Path) -> Case:
    from frontier_adapters.rollout import Group, ReplayBuffer

    buffer = ReplayBuffer(4)
    for o in range(3):
        buffer.add(Group(o, f"row{o}", ((1, 2),), ("stop",), 0, 0, f"req-{o}"))
    state = mutate_value(buffer.state_dict(), rng)
    return lambda: ReplayBuffer(4).load_state_dict(state)


READERS: dict[str, Callable[[random.Random, Path], Case]] = {
    "checkpoint": _checkpoint,
    "sample_checkpoint": _sample_checkpoint,
    "ledger_resume": _ledger_resume,
    "sample_resume": _sample_resume,
    "shards": _shards,
    "train_log": _train_log_reader,
    "frontier_replay": _replay,
    "frontier_audit": _audit,
    "journal_decode": _journal,
    "journal_turns": _journal_turns,
    "journal_file": _journal_file,
    "collector_state": _collector,
    "replay_buffer_state": _replay_buffer,
}

# -- the worker ------------------------------------------------------------------------


def verdict(reader: str, seed: int, index: int) -> dict[str, Any]:
    """Build and run one case; what it ended in, and whether that is allowed."""
    from frontier_core import FrontierError

    rng = random.Random(f"{reader}:{seed}:{index}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            case = READERS[reader](rng, Path(tmp))
        except Exception as exc:  # a valid input that could not be built: the test's bug
            return {"ok": False, "what": f"building the case raised {type(exc).__name__}: {exc}"}
        try:
            result = case()
        except FrontierError as exc:
            return {"ok": True, "what": f"typed {type(exc).__name__}"}
        except BaseException as exc:  # every other ending is the finding
            message = _head(exc)
            return {"ok": False, "what": f"{type(exc).__name__}: {message}"}
    if isinstance(result, tuple) and result and result[0] in ("replay", "audit"):
        command, code, err = result
        allowed = {0, 2} if command == "replay" else {0, 1, 2}
        if code not in allowed or "Traceback" in err or (code == 2 and not err.strip()):
            return {"ok": False, "what": f"exit {code}: {err[-300:]}"}
        return {"ok": True, "what": f"exit {code}"}
    return {"ok": True, "what": "accepted"}


def _head(exc: BaseException) -> str:
    try:
        return str(exc)[:200]
    except Exception:  # a message that cannot be printed (an int of 10**5 digits)
        return "<unprintable>"


def worker(reader: str, seed: int, start: int, stop: int) -> None:
    """Run cases ``start..stop-1`` under the memory cap, one JSON line each."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    import frontier_core  # noqa: F401 - imported before the first deadline starts

    print(json.dumps({"ready": True}), flush=True)
    for index in range(start, stop):
        print(json.dumps({"case": index, **verdict(reader, seed, index)}), flush=True)


# -- the test --------------------------------------------------------------------------


class _Lines:
    """A worker's output, line by line, each with a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self._fd = proc.stdout.fileno()
        self._buf = b""

    def next(self, deadline: float) -> bytes | None:
        """The next line, or None when ``deadline`` passes first (or the
        worker dies)."""
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line


def run_reader(reader: str, seed: int, cases: int) -> list[str]:
    """Every failing case of ``reader``: its index and what it ended in."""
    failures: list[str] = []
    index = 0
    while index < cases:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", reader, str(seed), str(index), str(cases)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        lines = _Lines(proc)
        try:
            ready = lines.next(time.monotonic() + STARTUP)
            if ready is None:
                raise AssertionError(f"the {reader} worker did not start within {STARTUP} s")
            while index < cases:
                # One line a case; a case past its deadline (or a worker
                # killed by the cap) is a failure, and a new worker goes on.
                line = lines.next(time.monotonic() + TIMEOUT)
                if line is None:
                    died = proc.poll()
                    what = f"worker died (status {died})" if died is not None else "timeout"
                    failures.append(f"case {index}: {what} (> {TIMEOUT} s or the memory cap)")
                    index += 1
                    break
                result = json.loads(line)
                assert result["case"] == index, result
                if not result["ok"]:
                    failures.append(f"case {index}: {result['what']}")
                index += 1
        finally:
            proc.kill()
            proc.wait(timeout=30)
    return failures


if "pytest" in sys.modules:
    import pytest

    @pytest.mark.parametrize("reader", list(READERS))
    def test_every_reader_ends_in_success_or_its_typed_error(reader: str) -> None:
        failures = run_reader(reader, SEED, CASES)
        rerun = f"rerun one: .venv/bin/python tests/test_fuzz_readers.py --case {reader} {SEED} N"
        assert not failures, f"{reader}, seed {SEED}: {len(failures)} of {CASES} cases failed " + (
            f"({rerun}):\n" + "\n".join(failures[:20])
        )


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "--case":
        print(json.dumps(verdict(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        sys.exit(f"usage: {sys.argv[0]} --case READER SEED CASE")
