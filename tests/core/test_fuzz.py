"""Seeded fuzzing of every input the core reads: checkpoint records (forged
ones with a recomputed checksum included: the checksum is not the security
boundary, structural validation is), replay traces, audit logs and the
training log.

Each reader must answer any input with its typed error or its documented
exit status, never another exception (exit 1 of a CLI is a coverage verdict
and nothing else), and a forged record that is accepted must still drain
exactly once. CI runs a small budget; the long run is

    FRONTIER_FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest tests/core/test_fuzz.py
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frontier_core import (
    Checkpoint,
    CheckpointError,
    FrontierError,
    Ledger,
    LedgerConfig,
    Status,
    TrainLogError,
    fold_lineage,
    read_train_log,
)
from frontier_core._cli import main

from ._strategies import ledgers

FUZZ = settings(
    max_examples=int(os.environ.get("FRONTIER_FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize="FRONTIER_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Hostile JSON values: huge and negative ints, bools where ints belong,
# floats, strings, deep and wide structures.
scalars = st.one_of(
    st.integers(-(10**6), 10**6),
    st.sampled_from([10**12, 10**100, -1, 0, 1, 2**63]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _sign(body: dict[str, Any]) -> dict[str, Any]:
    """The checksum a forger computes (an independent writer of the form
    documented in ``_checkpoint``)."""
    body = {k: v for k, v in body.items() if k != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {**body, "checksum": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()}


@st.composite
def mutated_records(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    ledger = draw(ledgers(max_ops=25))
    record = ledger.checkpoint(save_buffer=draw(st.booleans())).state_dict()
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from([*sorted(record), "extra"]))
        action = draw(st.sampled_from(["replace", "delete", "tweak"]))
        if action == "delete":
            record.pop(key, None)
        elif action == "tweak" and isinstance(record.get(key), list) and record[key]:
            items = record[key]
            i = draw(st.integers(0, len(items) - 1))
            item = items[i]
            if isinstance(item, list) and item:
                j = draw(st.integers(0, len(item) - 1))
                item[j] = draw(scalars)
            else:
                items[i] = draw(values)
        else:
            record[key] = draw(values)
    forged = draw(st.booleans())
    return (_sign(record) if forged else record), forged


def _drains_exactly_once(checkpoint: Checkpoint, *, load_buffer: bool) -> None:
    """Resume from an accepted record and drain: every ordinal of the stream
    ends resolved exactly once across the record and the new life."""
    n = checkpoint.stream_len
    if n is None:
        n = max(checkpoint.cut, checkpoint.highest_ordinal() + 1) + 3
    if n > 5_000:
        return  # a large but valid record: resolving it is the ledger's own tests' job
    config = LedgerConfig(stream_len=n, fingerprint=checkpoint.fingerprint)
    resumed = Ledger.resume(config, checkpoint, load_replay_buffer=load_buffer)
    ledger = resumed.ledger
    restored = list(ledger.ordinals(Status.BUFFERED))
    applied = ledger.stamp(n)
    kept = applied.effect.kept
    ledger = applied.ledger.dispatch(kept).ledger.buffer(kept).ledger
    ledger = ledger.train([*kept, *restored]).ledger
    # Independently: what the record resolved, what the buffer held, what
    # the new life trained partition the stream.
    before = set(range(checkpoint.cut))
    before |= set(checkpoint.trained()) | set(checkpoint.dropped())
    counted = sorted([*before, *restored, *kept])
    assert counted == list(range(n)), (checkpoint, restored, kept)
    assert ledger.drained


@FUZZ
@given(mutated_records(), st.booleans())
def test_a_mutated_record_is_refused_or_drains_exactly_once(
    case: tuple[dict[str, Any], bool], load_buffer: bool
) -> None:
    record, _forged = case
    try:
        checkpoint = Checkpoint.from_state_dict(json.loads(json.dumps(record)))
    except CheckpointError:
        return
    _drains_exactly_once(checkpoint, load_buffer=load_buffer)


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_arbitrary_bytes_as_a_record_are_refused_by_type(raw: bytes) -> None:
    try:
        record = json.loads(raw)
    except ValueError:
        return
    try:
        Checkpoint.from_state_dict(record)
    except CheckpointError:
        pass


# -- the command lines: exit 0, 1 (a coverage verdict only), or 2 -------------------

OPS = ("config", "stamp", "dispatch", "buffer", "fail", "evict", "train", "checkpoint", "kill")
#: The sample-level ops and keys of a trace (``frontier replay`` with ``samples``).
SAMPLE_OPS = ("seal", "fail_sample", "restart")
SAMPLE_KEYS = (
    "samples",
    "granularity",
    "leases",
    "siblings",
    "save_sealed",
    "load_sealed",
    "sealed",
    "attempt_floor",
)
ops = st.sampled_from([*OPS, *SAMPLE_OPS, "resume", "finish", "bogus"])


@st.composite
def trace_lines(draw: st.DrawFn) -> bytes:
    lines: list[bytes] = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["op", "op", "op", "raw", "json"]))
        if kind == "raw":
            lines.append(draw(st.binary(max_size=40)).replace(b"\n", b" "))
        elif kind == "json":
            lines.append(json.dumps(draw(values)).encode())
        else:
            op: dict[str, Any] = {"op": draw(ops)}
            for key in draw(
                st.lists(
                    st.sampled_from(
                        [
                            "count",
                            "ordinals",
                            "stream_len",
                            "on_failure",
                            "max_failures",
                            "save_buffer",
                            "load_replay_buffer",
                            "evicted_on_restore",
                            *SAMPLE_KEYS,
                        ]
                    ),
                    max_size=3,
                )
            ):
                op[key] = draw(
                    st.one_of(
                        values,
                        st.lists(st.integers(0, 20), max_size=6),
                        st.integers(0, 30),
                        # leases and siblings: [o, s, a] and [o, s]
                        st.lists(st.lists(st.integers(0, 4), max_size=4), max_size=4),
                    )
                )
            lines.append(json.dumps(op).encode())
    prefix = draw(st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe"]))
    return prefix + b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@FUZZ
@given(trace_lines())
def test_replay_answers_any_trace_with_0_or_2(tmp_path_factory: Any, data: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("replay")) / "trace.jsonl"
    path.write_bytes(data)
    code, _out, err = _run_cli(["replay", str(path)])
    assert code in (0, 2), (code, err)
    if code == 2:
        assert err.strip() and "Traceback" not in err


@st.composite
def log_bytes(draw: st.DrawFn) -> bytes:
    lines: list[bytes] = []
    for step in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["step", "step", "drop", "resume", "raw", "json"]))
        if kind == "step":
            ords = draw(st.lists(st.integers(-1, 12), max_size=4))
            lines.append(
                json.dumps({"step": draw(st.integers(-1, step)), "ordinals": ords}).encode()
            )
        elif kind == "drop":
            lines.append(
                json.dumps({"dropped": draw(st.lists(st.integers(0, 12), max_size=3))}).encode()
            )
        elif kind == "resume":
            lines.append(json.dumps({"resume": draw(st.integers(-1, 6))}).encode())
        elif kind == "raw":
            lines.append(draw(st.binary(max_size=30)).replace(b"\n", b" "))
        else:
            lines.append(json.dumps(draw(values)).encode())
    prefix = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
    return prefix + b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))


@FUZZ
@given(log_bytes(), st.sampled_from([[], ["--stream-len", "13"], ["--window", "3"]]))
def test_audit_answers_any_log_with_0_1_or_2(
    tmp_path_factory: Any, data: bytes, extra: list[str]
) -> None:
    path = Path(tmp_path_factory.mktemp("audit")) / "log.jsonl"
    path.write_bytes(data)
    code, out, err = _run_cli(["audit", str(path), *extra])
    assert code in (0, 1, 2), (code, err)
    if code == 2:
        assert err.strip() and "Traceback" not in err
    if code == 1:
        # A verdict, from a log the reader accepted.
        records = list(read_train_log(path))
        fold_lineage(records)
        assert out.strip()


@FUZZ
@given(log_bytes())
def test_the_training_log_reader_raises_only_its_error(tmp_path_factory: Any, data: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("log")) / "log.jsonl"
    path.write_bytes(data)
    try:
        fold_lineage(read_train_log(path))
    except TrainLogError as exc:
        assert isinstance(exc, FrontierError) and exc.line >= 1
