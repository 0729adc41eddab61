"""``frontier bench --only journal``: the rollout journal against the disk.

Four questions (issue 13, item 8), each answered against a baseline of the
same run:

* **Small records.** Sealed siblings with a tiny token payload (8 tokens,
  a 130-byte frame) appended one at a time (``JournalWriter.append``) with
  group commit, a commit every 256 records (what the default 5 ms
  ``max_delay`` gathers at 50k records/s; a count makes the cadence exact),
  against the baseline: the same records' bytes, encoded beforehand,
  written with one ``write`` and one ``fsync`` per group of the same
  records, to a file in the same directory. The ratio is the baseline's
  time over the journal's (1.0: the journal adds nothing to the disk's
  cost). Again with a commit per record (``max_delay=0``), where the
  ``fsync`` dominates. And the cost of encoding alone (``append_frames``
  over the same records, process CPU time), next to the baseline's cost
  per record, ``r = w + f`` (its ``write`` and its ``fsync``, timed apart):
  with ``e`` the encoding's, a writer that encodes, writes and fsyncs in
  one thread cannot beat ``r / (r + e)`` (``ceiling`` in the JSON), and
  one that encodes and writes in the caller's thread while another fsyncs
  (``JournalWriter``) cannot beat ``r / max(e + w, f)``
  (``overlap_ceiling``; above 1 when the overlap hides more than the
  encoding costs).
* **Large token payloads.** 8,192-token samples (a 65,602-byte frame), a
  commit every 16 (1 MiB groups), against the same bytes written the same
  way; and their encoding alone.
* **Size after compaction.** A rollout of N samples: prompts of 8
  siblings, each started (a ``Progress`` with an empty payload, as the
  ledger's attempt starts) and sealed (16 tokens) half a window later, a
  ``Mark`` every 32 prompts, a fixed window of prompts in flight (256, 32
  in quick mode). Then ``compact`` of the journal to that window, written
  with ``JournalWriter.compact_to``. The compacted journal keeps one record
  per sibling of the window, so at N = 10^4, 10^5 and 10^6 (10^3 and 10^4
  in quick mode) it must be the same size to the byte; the journal before
  compaction grows with N.
* **Resume.** What a resume does with the journal (``read_journal``,
  ``check_mark`` against the last checkpoint, ``replay``, ``restrict`` to
  the window), wall time, on each journal uncompacted and compacted, as N
  grows: uncompacted it follows the journal's bytes, compacted the window.

Every file is written under one temporary directory (``TMPDIR`` chooses
the disk). Wall time for everything that touches the disk; the variants
of a round alternate their order from round to round. Both files start
alike: created, fsynced, their directory fsynced, before the clock starts;
and each variant's files are removed, and the removal committed (an fsync
of the directory), before the next variant starts, so that no variant's
fsyncs pay for another's deletion.

    frontier bench --only journal [--quick] [--rounds 5]
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from frontier_core.bench import Row, ratios_of, row
from frontier_core.journal import (
    DEFAULT_MAX_FRAME,
    MAX_MARKS,
    CommitPolicy,
    JournalHeader,
    JournalState,
    Mark,
    Progress,
    Record,
    Sealed,
    TokenPayload,
    compact,
    encode_records,
    replay,
)
from frontier_core.journal._format import append_frames

from ..journal import JournalWriter, read_journal

SECTION = "journal"
HEADER = JournalHeader("bench:journal", "bench")
SMALL_TOKENS = 8
SMALL_GROUP = 256
LARGE_TOKENS = 8192
LARGE_GROUP = 16
#: Siblings per prompt, prompts per checkpoint, tokens of a sealed sample
#: in the compaction and resume rollouts.
SIBLINGS = 8
STEP = 32
ROLLOUT_TOKENS = 16
#: Group commit while a rollout is built (its speed is not measured).
BUILD = CommitPolicy(max_delay=3600.0, max_bytes=8 << 20)


def samples(n: int, tokens: int, seed: int) -> list[TokenPayload]:
    """``n`` distinct scored samples of ``tokens`` tokens of one policy
    version: random ids, log-probs rotated from one random draw (distinct
    objects, so that the encoder reads each payload's bytes afresh, as in a
    run)."""
    rng = random.Random(seed)
    logprobs = array("f", [-5.0 * rng.random() for _ in range(tokens)]).tobytes()
    runs = ((0, 3),) if tokens else ()
    out = []
    for i in range(n):
        k = 4 * (i % tokens) if tokens else 0
        out.append(TokenPayload(rng.randbytes(4 * tokens), logprobs[k:] + logprobs[:k], runs, 1.0))
    return out


def sealed(payloads: Sequence[TokenPayload]) -> list[Record]:
    """A sealed sibling per payload, 8 to a prompt."""
    return [Sealed(i // SIBLINGS, i % SIBLINGS, 0, p) for i, p in enumerate(payloads)]


# -- append throughput ------------------------------------------------------------


def _fresh(root: Path) -> Path:
    """An empty directory under ``root`` for one measurement, its creation
    durable."""
    directory = Path(tempfile.mkdtemp(dir=root))
    _fsync_dir(root)
    return directory


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(directory: Path) -> None:
    """Remove a measurement's directory and commit the removal, outside any
    timing."""
    shutil.rmtree(directory)
    _fsync_dir(directory.parent)


def raw_seconds(directory: Path, groups: Sequence[bytes]) -> tuple[float, float]:
    """The baseline: ``groups`` written to a fresh file, one ``write`` and
    one ``fsync`` each, as the journal writer commits a group. Returns the
    total time and the part of it in ``write`` (the rest is the fsyncs and
    the loop)."""
    fd = os.open(directory / "raw", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    try:
        # Created durably, as a journal is at its open.
        os.fsync(fd)
        _fsync_dir(directory)
        writing = 0.0
        clock = time.perf_counter
        start = clock()
        for data in groups:
            began = clock()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            writing += clock() - began
            os.fsync(fd)
        return clock() - start, writing
    finally:
        os.close(fd)


def journal_seconds(directory: Path, records: Sequence[Record], policy: CommitPolicy) -> float:
    """``records`` appended one at a time to a fresh journal under
    ``policy``, up to the ``sync`` that makes the last one durable."""
    with JournalWriter(directory / "journal", HEADER, policy) as writer:
        start = time.perf_counter()
        for record in records:
            writer.append(record)
        writer.sync()
        return time.perf_counter() - start


def encode_seconds(records: Sequence[Record]) -> float:
    """Process CPU time to encode ``records`` as the writer does."""
    parts: list[bytes] = []
    start = time.process_time()
    append_frames(parts, records, 1, DEFAULT_MAX_FRAME, HEADER.key)
    return time.process_time() - start


def append_rows(
    label: str,
    records: Sequence[Record],
    group: int,
    root: Path,
    rounds: int,
    *,
    target: tuple[str, Callable[[float, float], bool]] | None = None,
    encode: bool = True,
) -> list[Row]:
    """The baseline, the journal and (if ``encode``) the encoding alone, for
    ``records`` committed ``group`` at a time. ``target`` is a description
    and a test of (median records/s, median ratio)."""
    n = len(records)
    groups = [
        encode_records(records[i : i + group], first_seq=1 + i, header=HEADER)
        for i in range(0, n, group)
    ]
    size = sum(map(len, groups))
    policy = (
        CommitPolicy(max_delay=0.0)
        if group == 1
        else CommitPolicy(max_delay=3600.0, max_bytes=1 << 40, max_records=group)
    )
    writing: list[float] = []

    def baseline(d: Path) -> float:
        total, write = raw_seconds(d, groups)
        writing.append(write)
        return total

    variants: dict[str, Callable[[Path], float]] = {
        "raw": baseline,
        "journal": lambda d: journal_seconds(d, records, policy),
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    encoding: list[float] = []
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            directory = _fresh(root)
            try:
                seconds[name].append(variants[name](directory))
            finally:
                _remove(directory)
        if encode:
            encoding.append(encode_seconds(records))
    raw = [n / s for s in seconds["raw"]]
    journal = [n / s for s in seconds["journal"]]
    ratios = ratios_of(journal, raw)
    cadence = "a commit per record" if group == 1 else f"{group} a commit"
    base = f"{label}: raw write + fsync, {cadence}"
    detail: dict[str, Any] = {"records": n, "group": group, "frame_bytes": size // n}
    extra: dict[str, Any] = {}
    if target is not None:
        text, test = target
        extra = {
            "target": text,
            "met": test(statistics.median(journal), statistics.median(ratios)),
        }
    rows = [
        row(
            SECTION,
            f"{base} (baseline)",
            raw,
            "records/s",
            mb_per_s=[size / t / 1e6 for t in seconds["raw"]],
            **detail,
        ),
        row(
            SECTION,
            f"{label}: append, {cadence}",
            journal,
            "records/s",
            ratios=ratios,
            baseline=base,
            mb_per_s=[size / t / 1e6 for t in seconds["journal"]],
            **detail,
            **extra,
        ),
    ]
    if encode:
        per_record = [s / n * 1e6 for s in encoding]
        raw_per_record = [s / n * 1e6 for s in seconds["raw"]]
        write_per_record = [s / n * 1e6 for s in writing]
        rounds_of = list(zip(per_record, raw_per_record, write_per_record, strict=True))
        rows.append(
            row(
                SECTION,
                f"{label}: encoding alone",
                per_record,
                "us/record cpu",
                ratios=ratios_of(per_record, raw_per_record),
                baseline=f"{base}, per record",
                ceiling=[r / (r + e) for e, r, _ in rounds_of],
                overlap_ceiling=[r / max(e + w, r - w) for e, r, w in rounds_of],
                raw_write_us=write_per_record,
                records=n,
            )
        )
    return rows


# -- compaction and resume ------------------------------------------------------------


def rollout(writer: JournalWriter, siblings: int, window: int) -> tuple[range, int, int]:
    """Append a rollout of ``siblings`` samples to ``writer`` (see the
    module's docstring): prompt ``o`` starts its siblings at step ``o`` and
    seals them ``window // 2`` steps later. Returns the window (the last
    ``window`` prompts: half sealed, half running), the last mark's
    position and its checkpoint."""
    prompts = siblings // SIBLINGS
    if prompts < window:
        raise ValueError(f"{siblings} samples do not fill a window of {window} prompts")
    started = TokenPayload(b"", b"", ())
    (done,) = samples(1, ROLLOUT_TOKENS, 1)
    half = window // 2
    position = checkpoint = 0
    for o in range(prompts):
        batch: list[Record] = [Progress(o, s, 0, started) for s in range(SIBLINGS)]
        if o >= half:
            batch += [Sealed(o - half, s, 0, done) for s in range(SIBLINGS)]
        writer.extend(batch)
        if (o + 1) % STEP == 0:
            checkpoint += 1
            position = writer.append(Mark(checkpoint))
    writer.sync()
    return range(prompts - window, prompts), position, checkpoint


def resume(path: Path, window: range, position: int, checkpoint: int) -> JournalState:
    """What a resume does with the journal: decode it, check the
    checkpoint's mark, replay, keep the window."""
    decoded = read_journal(path, fingerprint=HEADER.fingerprint, lineage=HEADER.lineage)
    decoded.check_mark(position, checkpoint)
    return replay(decoded.records).restrict(window)


def compaction_rows(sizes: Sequence[int], window: int, root: Path, rounds: int) -> list[Row]:
    """Journal sizes before and after compaction, and resume times, for a
    rollout of each of ``sizes`` samples with the same window."""
    built: dict[int, dict[str, Any]] = {}
    for n in sizes:
        directory = root / f"rollout-{n}"
        directory.mkdir()
        journal, compacted = directory / "journal", directory / "compacted"
        with JournalWriter(journal, HEADER, BUILD) as writer:
            start = time.perf_counter()
            window_range, position, checkpoint = rollout(writer, n, window)
            build = time.perf_counter() - start
            start = time.perf_counter()
            kept = compact(writer.read().records, window_range)
            writer.compact_to(compacted, kept)
            compaction = time.perf_counter() - start
        marks = len(read_journal(compacted).header.marks)
        built[n] = {
            "marks": marks,
            "paths": {"uncompacted": journal, "compacted": compacted},
            "args": (window_range, position, checkpoint),
            "bytes": {"uncompacted": journal.stat().st_size, "compacted": compacted.stat().st_size},
            "kept": len(kept),
            "build_seconds": round(build, 3),
            "compact_seconds": round(compaction, 3),
        }
    first, last = sizes[0], sizes[-1]
    rows: list[Row] = []
    for n in sizes:
        info = built[n]
        for kind in ("uncompacted", "compacted"):
            size = info["bytes"][kind]
            extra: dict[str, Any] = {}
            if n != first:
                extra = {
                    "ratios": [size / built[first]["bytes"][kind]],
                    "baseline": f"{kind} after {first:,} samples",
                }
            if kind == "compacted":
                # The header remembers the checkpoints' marks (16 bytes each,
                # at most MAX_MARKS): the one part that grows with the run,
                # and it stops growing there.
                marks = info["marks"]
                extra.update(
                    records=info["kept"], compact_seconds=info["compact_seconds"], marks=marks
                )
                if n == last and n != first:
                    net = size - 16 * marks
                    extra.update(
                        target=f"the same size as after {first:,}, but 16 bytes a remembered "
                        f"mark (at most {MAX_MARKS})",
                        met=net == built[first]["bytes"][kind] - 16 * built[first]["marks"],
                    )
            rows.append(
                row(
                    SECTION,
                    f"journal after {n:,} samples, {kind}",
                    [size],
                    "bytes",
                    window_prompts=window,
                    build_seconds=info["build_seconds"],
                    **extra,
                )
            )
    times: dict[tuple[int, str], list[float]] = {
        (n, kind): [] for n in sizes for kind in ("uncompacted", "compacted")
    }
    for r in range(rounds):
        order = list(times) if r % 2 == 0 else list(reversed(times))
        states: dict[tuple[int, str], JournalState] = {}
        for key in order:
            n, kind = key
            start = time.perf_counter()
            states[key] = resume(built[n]["paths"][kind], *built[n]["args"])
            times[key].append(time.perf_counter() - start)
        for n in sizes:  # a compacted journal resumes to the same state
            if states[n, "compacted"] != states[n, "uncompacted"]:
                raise AssertionError(f"the compaction of {n:,} samples resumes differently")
    for n in sizes:
        for kind in ("uncompacted", "compacted"):
            size = built[n]["bytes"][kind]
            extra = {}
            if n != first:
                extra = {
                    "ratios": ratios_of(times[n, kind], times[first, kind]),
                    "baseline": f"resume after {first:,} samples, {kind}",
                    "bytes_ratio": size / built[first]["bytes"][kind],
                }
            if kind == "compacted" and n == last and n != first:
                q = statistics.median(extra["ratios"])
                extra.update(target=f"<= 1.5x of after {first:,} (the window)", met=q <= 1.5)
            rows.append(
                row(
                    SECTION,
                    f"resume after {n:,} samples, {kind}",
                    times[n, kind],
                    "s wall",
                    journal_bytes=size,
                    us_per_kib=[t * 1e6 / (size / 1024) for t in times[n, kind]],
                    **extra,
                )
            )
    return rows


# -- the section --------------------------------------------------------------------------


def bench_journal(*, quick: bool, rounds: int) -> list[Row]:
    small_n = 5_000 if quick else 100_000
    every_n = 200 if quick else 2_000
    large_n = 32 if quick else 1_024
    sizes = (10**3, 10**4) if quick else (10**4, 10**5, 10**6)
    window = 32 if quick else 256
    small = sealed(samples(small_n, SMALL_TOKENS, 0))
    large = sealed(samples(large_n, LARGE_TOKENS, 1))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="frontier-bench-journal-") as tmp:
        root = Path(tmp)
        rows += append_rows(
            "small records",
            small,
            SMALL_GROUP,
            root,
            rounds,
            target=(">= 50k/s and >= 0.9x raw", lambda rate, q: rate >= 50_000 and q >= 0.9),
        )
        rows += append_rows("small records", small[:every_n], 1, root, rounds, encode=False)
        rows += append_rows(
            f"{LARGE_TOKENS:,}-token samples",
            large,
            LARGE_GROUP,
            root,
            rounds,
            target=("within 10% of raw", lambda _rate, q: q >= 0.9),
        )
        rows += compaction_rows(sizes, window, root, rounds)
    return rows
