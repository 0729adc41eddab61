"""Multi-rank checkpoints on both stores: a directory (a plain path and a
``file://`` URL, through the ``PosixStore``) and a real S3 server
(SeaweedFS, ``tests/_seaweed.py``). The commit is one compare-and-swap of
``COMMIT``: of two publishers at once exactly one wins, a writer built
before another one committed is fenced, and the loser's objects are
removed by the next commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from frontier_adapters.checkpoints import CheckpointConflictError  # noqa: E402
from frontier_adapters.store import open_store  # noqa: E402
from frontier_adapters.torch import (  # noqa: E402
    CheckpointFileError,
    DatasetChangedError,
    DistributedCheckpointer,
    committed_checkpoints,
    read_distributed_checkpoint,
)

from ..._seaweed import s3_url as s3_url  # noqa: E402
from ..._seaweed import seaweed as seaweed  # noqa: E402
from ..._seaweed import seaweed_bucket as seaweed_bucket  # noqa: E402
from ..._threads import RankComm, on_threads  # noqa: E402
from ..checkpoints.forge import garble  # noqa: E402
from .test_elastic import write_parts  # noqa: E402

FP = "rows-v1"


@pytest.fixture(params=["path", "file", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A checkpoint root: a plain path, a ``file://`` URL, an S3 URL."""
    if request.param == "path":
        return str(tmp_path / "ckpts")
    if request.param == "file":
        return f"file://{tmp_path}/ckpts"
    return str(request.getfixturevalue("s3_url"))


def _checkpointer(root: str, world: int = 2, **kw: Any) -> DistributedCheckpointer:
    return DistributedCheckpointer(root, rank=0, world=world, fingerprint=FP, comm=None, **kw)


def _commit(ck: DistributedCheckpointer, step: int) -> Path:
    return ck.commit(step, write_parts(ck, step))


def _dirs(root: str) -> set[str]:
    return {k.split("/")[0] for k in open_store(root).list() if "/" in k}


def test_a_commit_reads_back_on_every_store(root: str) -> None:
    assert read_distributed_checkpoint(root, fingerprint=FP) is None
    assert committed_checkpoints(root) == []
    ck = _checkpointer(root, keep=2)
    one = _commit(ck, 1)
    two = _commit(ck, 2)
    assert committed_checkpoints(root) == [two, one]
    if root.startswith("s3://"):
        assert not two.is_absolute() and two.parent == Path(".")  # a name in the root
    else:
        assert two == Path(root.removeprefix("file://")) / two.name
    loaded = read_distributed_checkpoint(root, fingerprint=FP)
    assert loaded is not None and (loaded.path, loaded.step, loaded.world) == (two, 2, 2)
    assert [p.json_part for p in loaded.parts] == [{"rank": r, "step": 2} for r in range(2)]
    assert torch.equal(loaded.parts[0].tensor_part["w"], torch.full((2,), 2.0))
    with pytest.raises(DatasetChangedError):
        read_distributed_checkpoint(root, fingerprint="other")
    three = _commit(ck, 3)  # keep=2: the first is removed, whole
    assert committed_checkpoints(root) == [three, two]
    assert _dirs(root) == {three.name, two.name}
    # Resumed from step 2 by name (what an object store's root returns).
    ck2 = _checkpointer(root, keep=3, resumed_from=two.name)
    four = _commit(ck2, 4)
    assert committed_checkpoints(root) == [four, two]
    doc = json.loads(open_store(root).get("COMMIT", max_bytes=1 << 20) or b"")
    assert [e["parent"] for e in doc["lineage"]] == [two.name, one.name]


def test_damage_on_every_store_is_a_typed_error_naming_the_object(root: str) -> None:
    ck = _checkpointer(root)
    one = _commit(ck, 1)
    two = _commit(ck, 2)
    store = open_store(root)
    key = f"{two.name}/rank-00001-of-00002.json"
    data = store.get(key, max_bytes=1 << 20)
    assert data is not None
    store.delete(key)
    store.create(key, data.replace(b"2", b"7"))
    with pytest.raises(CheckpointFileError, match=r"rank-00001-of-00002\.json.*SHA-256") as info:
        read_distributed_checkpoint(root, fingerprint=FP)
    assert str(info.value.path).endswith(key)
    store.delete(key)
    store.create(key, data + b" ")
    with pytest.raises(CheckpointFileError, match="too long"):
        read_distributed_checkpoint(root, fingerprint=FP)
    store.delete(key)
    with pytest.raises(CheckpointFileError, match="missing part"):
        read_distributed_checkpoint(root, fingerprint=FP)
    back = read_distributed_checkpoint(root, fingerprint=FP, previous=1)
    assert back is not None and back.path == one
    garble(store, "COMMIT")
    with pytest.raises(CheckpointFileError, match="garbled"):
        read_distributed_checkpoint(root, fingerprint=FP)
    with pytest.raises(CheckpointFileError, match="rank 0 could not prepare"):
        _checkpointer(root)
    store.delete("COMMIT")
    with pytest.raises(CheckpointFileError, match="refusing to treat it as a fresh start"):
        read_distributed_checkpoint(root, fingerprint=FP)


def test_two_publishers_of_the_same_step_exactly_one_wins(root: str) -> None:
    first = _commit(_checkpointer(root), 1)
    # Building claims the root: of two writers built in turn, the later one
    # owns it, whichever commits first.
    writers = [_checkpointer(root), _checkpointer(root)]
    parts = [write_parts(ck, 2) for ck in writers]

    def publisher(i: int, comm: RankComm) -> Path:
        comm.wait()  # both built, both wrote every part, neither published
        return writers[i].commit(2, parts[i])

    out = on_threads(2, publisher)
    won = [r for r in out if isinstance(r, Path)]
    lost = [r for r in out if isinstance(r, CheckpointConflictError)]
    assert len(won) == 1 and len(lost) == 1, out
    assert out[1] == won[0]
    assert committed_checkpoints(root) == [won[0], first]
    loaded = read_distributed_checkpoint(root, fingerprint=FP)
    assert loaded is not None and loaded.path == won[0]
    # The loser's step directory is garbage: gone after the next commit at
    # the latest (the winner removes it if it listed it before its swap).
    three = _commit(_checkpointer(root), 3)
    assert _dirs(root) == {three.name, won[0].name}


def test_a_writer_built_before_another_commit_is_fenced(root: str) -> None:
    one = _commit(_checkpointer(root), 1)
    stale = _checkpointer(root)  # a life from before the resume below
    parts = [stale.write_part(5, {"rank": r}, rank=r) for r in range(2)]
    loaded = read_distributed_checkpoint(root, fingerprint=FP)
    assert loaded is not None
    newer = _commit(_checkpointer(root, resumed_from=loaded), 2)
    before = open_store(root).get("COMMIT", max_bytes=1 << 20)
    with pytest.raises(CheckpointConflictError, match="another writer committed"):
        stale.commit(5, parts)
    assert open_store(root).get("COMMIT", max_bytes=1 << 20) == before
    assert committed_checkpoints(root) == [newer, one]
    # It stays fenced: its every later commit is refused too.
    with pytest.raises(CheckpointConflictError):
        _commit(stale, 6)
    assert committed_checkpoints(root) == [newer, one]


def test_a_collective_save_that_lost_raises_the_conflict_on_every_rank(root: str) -> None:
    built = on_threads(
        2,
        lambda rank, comm: DistributedCheckpointer(
            root, rank=rank, world=2, fingerprint=FP, comm=comm
        ),
    )
    assert all(isinstance(ck, DistributedCheckpointer) for ck in built), built
    _commit(_checkpointer(root), 1)  # another writer commits meanwhile
    out = on_threads(2, lambda rank, comm: built[rank].save(2, {"rank": rank}))
    assert all(isinstance(e, CheckpointConflictError) for e in out), out
    loaded = read_distributed_checkpoint(root, fingerprint=FP)
    assert loaded is not None and loaded.step == 1


def test_a_life_from_before_a_resume_is_fenced_once_the_resume_is_built(root: str) -> None:
    one = _commit(_checkpointer(root), 1)
    old = _checkpointer(root)  # the life that committed on, presumed dead
    loaded = read_distributed_checkpoint(root, fingerprint=FP)
    assert loaded is not None
    new = _checkpointer(root, resumed_from=loaded)  # built, nothing committed yet
    before = open_store(root).get("COMMIT", max_bytes=1 << 20)
    with pytest.raises(CheckpointConflictError, match="another writer committed"):
        _commit(old, 2)  # the old life goes on after the new one was built
    assert open_store(root).get("COMMIT", max_bytes=1 << 20) == before
    assert committed_checkpoints(root) == [one]
    two = _commit(new, 2)
    assert committed_checkpoints(root) == [two, one]
    with pytest.raises(CheckpointConflictError):
        _commit(old, 3)


def test_a_lost_race_to_claim_a_fresh_root_is_a_conflict_on_every_rank(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = type(open_store(root))
    swap = kind.swap

    def racing(self: Any, key: str, data: bytes, *, expected: str | None) -> str:
        if key == "COMMIT" and expected is None:  # another job creates it meanwhile
            swap(self, key, data, expected=None)
        return swap(self, key, data, expected=expected)

    monkeypatch.setattr(kind, "swap", racing)
    out = on_threads(
        2,
        lambda rank, comm: DistributedCheckpointer(
            root, rank=rank, world=2, fingerprint=FP, comm=comm
        ),
    )
    assert all(type(e) is CheckpointConflictError for e in out), out
    assert all("another writer created or moved it" in str(e) for e in out), out


def test_a_save_that_failed_at_its_commit_can_be_retried(root: str) -> None:
    fail = [True]

    def hook(phase: str) -> None:
        if phase == "commit" and fail:
            fail.clear()
            raise OSError("the store hiccupped")

    built = on_threads(
        2,
        lambda rank, comm: DistributedCheckpointer(
            root, rank=rank, world=2, fingerprint=FP, comm=comm, hook=hook
        ),
    )
    out = on_threads(2, lambda rank, comm: built[rank].save(5, {"rank": rank}))
    assert all(isinstance(e, CheckpointFileError) for e in out), out
    assert all("hiccupped" in str(e) for e in out), out
    assert committed_checkpoints(root) == []
    # Other bytes at the same step are still refused, on every rank.
    out = on_threads(2, lambda rank, comm: built[rank].save(5, {"rank": rank, "x": 1}))
    assert all("other bytes" in str(e) for e in out), out
    out = on_threads(2, lambda rank, comm: built[rank].save(5, {"rank": rank}))
    assert all(isinstance(p, Path) for p in out), out
    loaded = read_distributed_checkpoint(root, fingerprint=FP)
    assert loaded is not None and loaded.step == 5
    assert [p.json_part for p in loaded.parts] == [{"rank": 0}, {"rank": 1}]
