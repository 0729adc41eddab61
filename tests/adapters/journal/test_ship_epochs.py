"""Shipped journals of several lives: each life's objects carry its epoch,
a restore chains only the newest life's, a fenced shipper stops by type
instead of retrying, a base never prunes a newer life's objects, names of
before epochs are still restored, and what killed uploads left in a
directory store is swept at open (there only). On a directory and on a
real S3 server (SeaweedFS)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from frontier_adapters.checkpoints import CheckpointFencedError
from frontier_adapters.journal import (
    JournalFencedError,
    JournalShipError,
    RolloutJournal,
    Shipper,
    restore,
)
from frontier_adapters.store import PosixStore, Store, open_store

from frontier_core import Lease
from frontier_core.journal import JournalCorruptError, Sealed, TokenPayload, decode

from ..._seaweed import s3_url as s3_url
from ..._seaweed import seaweed as seaweed
from ..._seaweed import seaweed_bucket as seaweed_bucket

__all__ = ["s3_url", "seaweed", "seaweed_bucket"]

FP, LINEAGE = "ship-epochs-v1", "run-1"


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "directory":
        return open_store(tmp_path / "remote")
    return open_store(str(request.getfixturevalue("s3_url")))


def life(node: Path, store: Store, epoch: int, **kw: object) -> RolloutJournal:
    node.mkdir(exist_ok=True)
    shipper = Shipper(store, epoch=epoch, **kw)  # type: ignore[arg-type]
    return RolloutJournal(node / "journal", fingerprint=FP, lineage=LINEAGE, ship_to=shipper)


def seal(j: RolloutJournal, ordinals: range, attempt: int) -> None:
    for o in ordinals:
        j.sealed(Lease(o, 0, attempt), TokenPayload.of([o, o + 1], [-0.5, -0.5], 0))


def seals(data: bytes) -> set[tuple[int, int]]:
    return {
        (r.ordinal, r.attempt)
        for r in decode(data, fingerprint=FP, lineage=LINEAGE).records
        if isinstance(r, Sealed)
    }


def test_a_restore_never_chains_an_older_lifes_segments(tmp_path: Path, store: Store) -> None:
    one = life(tmp_path / "a", store, 1)
    seal(one, range(3), attempt=1)
    one.durable()
    two = life(tmp_path / "b", store, 2)  # restores life 1's objects, ships its own base
    assert two.restored is not None and two.restored.source == "shipped"
    seal(two, range(3, 5), attempt=2)
    two.durable()
    # Life 1 goes on past the claim (no fence: the race a check cannot
    # close) with records at the sequence numbers life 2 used too.
    seal(one, range(10, 14), attempt=1)
    one.durable()
    keys = store.list("journal")
    assert any(k.endswith(f"-e{1:020d}") and "/seg-" in k for k in keys)
    got = restore(store)
    assert got is not None
    assert seals(got.data) == {(o, 1) for o in range(3)} | {(o, 2) for o in range(3, 5)}
    one.close()
    two.close()


def test_a_fenced_shipper_stops_by_type_and_the_writer_with_it(
    tmp_path: Path, store: Store
) -> None:
    current = [1]
    one = life(tmp_path / "a", store, 1, fence=lambda: current[0], backlog_timeout=60.0)
    seal(one, range(2), attempt=1)
    one.durable()
    current[0] = 2  # a newer life claimed the run
    seal(one, range(2, 4), attempt=1)
    began = time.monotonic()
    with pytest.raises(JournalFencedError) as refused:
        one.durable()
    assert time.monotonic() - began < 10  # not retried until a timeout
    assert (refused.value.epoch, refused.value.current) == (1, 2)
    assert isinstance(refused.value, JournalShipError | CheckpointFencedError)
    with pytest.raises(JournalFencedError):
        seal(one, range(4, 6), attempt=1)  # the next group is refused too
        one.writer.sync()
    before = store.list("journal")
    with pytest.raises(JournalFencedError):
        one.close()
    assert store.list("journal") == before  # nothing shipped after the fence


def test_an_older_lifes_base_prunes_nothing_of_a_newer_one(tmp_path: Path, store: Store) -> None:
    one = life(tmp_path / "a", store, 1)
    seal(one, range(3), attempt=1)
    one.durable()
    two = life(tmp_path / "b", store, 2)
    seal(two, range(3, 4), attempt=2)
    two.durable()
    newer = {k for k in store.list("journal") if k.endswith(f"-e{2:020d}")}
    assert newer
    before = one.writer.read()
    with pytest.raises(JournalFencedError) as refused:
        # A base of life 1, shipped before it is put in place: its prune
        # finds life 2's objects, and the compaction changes nothing.
        one.compact(range(0, 1 << 62))
    assert (refused.value.epoch, refused.value.current) == (1, 2)
    assert one.writer.read() == before
    with pytest.raises(JournalFencedError):
        one.durable()
    assert newer <= set(store.list("journal"))
    got = restore(store)
    assert got is not None and (3, 2) in seals(got.data)
    two.close()
    with pytest.raises(JournalFencedError):
        one.close()


def test_names_of_before_epochs_are_restored_and_superseded(tmp_path: Path, store: Store) -> None:
    old = life(tmp_path / "a", store, 0)  # epoch 0: the names before epochs
    seal(old, range(3), attempt=1)
    old.close()
    assert not any(re.search(r"-e\d{20}$", k) for k in store.list("journal"))
    new = life(tmp_path / "b", store, 1)
    assert new.restored is not None and new.restored.source == "shipped"
    restored = {(r.ordinal, r.attempt) for r in new.writer.read().records if isinstance(r, Sealed)}
    assert restored == {(o, 1) for o in range(3)}
    seal(new, range(3, 4), attempt=2)
    new.durable()
    got = restore(store)
    assert got is not None and seals(got.data) == {(0, 1), (1, 1), (2, 1), (3, 2)}
    # life 1's first base holds all it restored: the older names are pruned
    assert all(k.endswith(f"-e{1:020d}") for k in store.list("journal"))
    new.close()


def test_a_killed_uploads_leftovers_are_swept_at_open_and_only_there(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    store = PosixStore(remote)
    one = life(tmp_path / "a", store, 1)
    seal(one, range(2), attempt=1)
    one.close()
    prefix = remote / "journal"
    (prefix / ".tmp-0123456789abcdef").write_bytes(b"half an upload")  # a SIGKILL mid-create
    outside = tmp_path / "outside"
    outside.write_bytes(b"precious")
    os.symlink(outside, prefix / ".tmp-fedcba9876543210")  # never followed
    (remote / ".tmp-elsewhere").write_bytes(b"not the journal's")  # another prefix's
    two = life(tmp_path / "b", store, 2)
    assert not (prefix / ".tmp-0123456789abcdef").exists()
    assert outside.read_bytes() == b"precious"
    assert (prefix / ".tmp-fedcba9876543210").is_symlink()
    assert (remote / ".tmp-elsewhere").exists()
    two.close()


def test_names_of_an_epoch_no_life_can_claim_are_refused(tmp_path: Path) -> None:
    """An object named with an epoch above the last one a life can claim
    (2**63 - 1: forged, no shipper makes it) is not a shipped object: a
    restore refuses it by type as any foreign name under the prefix, rather
    than restoring it as the newest life's base."""
    store = open_store(tmp_path / "remote")
    one = life(tmp_path / "a", store, 1)
    seal(one, range(3), attempt=1)
    one.close()
    (base,) = [k for k in store.list("journal") if "/base-" in k]
    data = store.get(base, max_bytes=1 << 20)
    assert data is not None
    forged = re.sub(r"-e\d{20}$", f"-e{1 << 63:020d}", base)
    store.create(forged, data)
    with pytest.raises(JournalCorruptError, match="neither a base nor a segment"):
        restore(store)
    store.delete(forged)
    got = restore(store)
    assert got is not None and seals(got.data) == {(o, 1) for o in range(3)}
