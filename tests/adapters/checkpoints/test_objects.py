"""The checkpoint protocol on an object store (a real SeaweedFS server, and
a directory through the same store interface where it shows the same
rules): write and read, the fall-back to a previous checkpoint after the
newest is damaged, two publishers at once, a writer overtaken by a newer
resume, damage refused with a typed error, the lineage shared with
directories."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters.checkpoints import (
    CheckpointConflictError,
    CheckpointFileError,
    DatasetChangedError,
    latest_checkpoint,
    published_checkpoints,
    read_checkpoint,
    read_checkpoint_dir,
    write_checkpoint,
)
from frontier_adapters.store import open_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..._threads import RankComm, on_threads
from .forge import BLOBS, FP, garble


def save(root: str, step: int, **kwargs: Any) -> Path:
    return write_checkpoint(root, step, fingerprint=FP, json_parts={"state": {"s": step}}, **kwargs)


def test_write_and_read_on_the_object_store(s3_url: str) -> None:
    assert read_checkpoint(s3_url, fingerprint=FP) is None
    assert published_checkpoints(s3_url) == [] and latest_checkpoint(s3_url) is None
    one = save(s3_url, 1)
    two = write_checkpoint(
        s3_url,
        2,
        fingerprint=FP,
        json_parts={"state": {"s": 2}},
        tensor_parts={"model": [1, 2]},
        codec=BLOBS,
    )
    assert one.name.startswith("ckpt-000001-") and two.name.startswith("ckpt-000002-")
    assert published_checkpoints(s3_url) == [two, one] and latest_checkpoint(s3_url) == two
    loaded = read_checkpoint(s3_url, fingerprint=FP, require=["state"], codec=BLOBS)
    assert loaded is not None and loaded.step == 2 and loaded.path == two
    assert loaded.json_parts == {"state": {"s": 2}} and loaded.tensor_parts == {"model": [1, 2]}
    store = open_store(s3_url)
    keys = store.list()
    assert keys == sorted(
        [
            "LATEST",
            *(f"{one}/{n}" for n in ("manifest.json", "state.json")),
            *(f"{two}/{n}" for n in ("manifest.json", "model.bin", "state.json")),
        ]
    )
    latest = json.loads(store.get("LATEST", max_bytes=1 << 16) or b"")
    assert latest["format"] == "frontier_adapters.checkpoint_root" and latest["version"] == 3
    assert [e["parent"] for e in latest["lineage"]] == [one.name, None]
    with pytest.raises(DatasetChangedError):
        read_checkpoint(s3_url, fingerprint="other", codec=BLOBS)
    # keep=2: a third write removes the first checkpoint's objects.
    three = save(s3_url, 3)
    assert published_checkpoints(s3_url) == [three, two]
    assert not [k for k in store.list() if k.startswith(one.name)]


def test_a_damaged_newest_falls_back_to_previous(s3_url: str) -> None:
    save(s3_url, 1)
    two = save(s3_url, 2)
    store = open_store(s3_url)
    key = f"{two}/state.json"
    store.delete(key)
    store.create(key, b'{"s": 9}')  # same size, other bytes
    with pytest.raises(CheckpointFileError, match="SHA-256 differs") as info:
        read_checkpoint(s3_url, fingerprint=FP)
    assert info.value.path == f"{s3_url}/{key}"
    loaded = read_checkpoint(s3_url, fingerprint=FP, previous=1)
    assert loaded is not None and loaded.step == 1
    # The next write continues what was resumed: the damaged one is abandoned.
    three = save(s3_url, 3)
    assert published_checkpoints(s3_url) == [three, loaded.path]
    store.delete(f"{three}/manifest.json")
    with pytest.raises(CheckpointFileError, match="missing: the checkpoint is incomplete"):
        read_checkpoint(s3_url, fingerprint=FP)
    with pytest.raises(CheckpointFileError, match="no checkpoint 2 back"):
        read_checkpoint(s3_url, fingerprint=FP, previous=2)


def test_damage_is_a_typed_error(s3_url: str) -> None:
    one = save(s3_url, 1)
    store = open_store(s3_url)
    store.delete(f"{one}/state.json")
    store.create(f"{one}/state.json", b'{"s": 1, "longer": 1}')
    with pytest.raises(CheckpointFileError, match="too long"):
        read_checkpoint(s3_url, fingerprint=FP)
    garble(store, "LATEST")
    with pytest.raises(CheckpointFileError, match="garbled"):
        read_checkpoint(s3_url, fingerprint=FP)
    with pytest.raises(CheckpointFileError, match="garbled"):
        save(s3_url, 2)  # nothing written over a garbled lineage
    store.delete("LATEST")
    with pytest.raises(CheckpointFileError, match="missing, but the root holds"):
        read_checkpoint(s3_url, fingerprint=FP)


def test_two_publishers_at_once_one_wins(s3_url: str) -> None:
    save(s3_url, 1)

    def writer(i: int, comm: RankComm) -> Path:
        def hook(name: str) -> None:
            if name == "LATEST":
                comm.wait()  # both have read LATEST and written their parts

        return save(s3_url, 2, between_parts=hook)

    out = on_threads(2, writer)
    won = [r for r in out if isinstance(r, Path)]
    lost = [r for r in out if isinstance(r, CheckpointConflictError)]
    assert len(won) == 1 and len(lost) == 1, out
    assert published_checkpoints(s3_url)[0] == won[0]
    loaded = read_checkpoint(s3_url, fingerprint=FP)
    assert loaded is not None and loaded.path == won[0]
    # The loser's objects are garbage, removed by the next successful write.
    save(s3_url, 3)
    names = {k.split("/")[0] for k in open_store(s3_url).list() if "/" in k}
    assert names == {p.name for p in published_checkpoints(s3_url)}


def test_a_writer_overtaken_by_a_newer_resume_loses(s3_url: str) -> None:
    save(s3_url, 1)

    def resume_and_write(name: str) -> None:
        if name == "LATEST":  # meanwhile, a newer run resumes and publishes
            assert read_checkpoint(s3_url, fingerprint=FP) is not None
            save(s3_url, 5)

    with pytest.raises(CheckpointConflictError, match="another writer published"):
        save(s3_url, 2, between_parts=resume_and_write)
    assert [p.name[:11] for p in published_checkpoints(s3_url)] == ["ckpt-000005", "ckpt-000001"]


def test_a_killed_write_leaves_garbage_the_next_write_removes(s3_url: str) -> None:
    one = save(s3_url, 1)

    def killed(name: str) -> None:
        raise KeyboardInterrupt  # a kill after the first part

    with pytest.raises(KeyboardInterrupt):
        save(s3_url, 2, between_parts=killed)
    store = open_store(s3_url)
    assert len({k.split("/")[0] for k in store.list() if "/" in k}) == 2
    loaded = read_checkpoint(s3_url, fingerprint=FP)
    assert loaded is not None and loaded.path == one
    two = save(s3_url, 2)
    assert {k.split("/")[0] for k in store.list() if "/" in k} == {one.name, two.name}
    with pytest.raises(ValueError, match="read_checkpoint_dir reads a directory"):
        read_checkpoint_dir(f"{s3_url}/{two}", fingerprint=FP)


def test_a_url_parent_is_a_name(s3_url: str) -> None:
    one = save(s3_url, 1)
    save(s3_url, 2)
    three = save(s3_url, 3, parent=one, keep=3)
    assert published_checkpoints(s3_url) == [three, one]
    with pytest.raises(ValueError, match="relative"):
        save(s3_url, 4, parent=Path("/elsewhere") / one)
    with pytest.raises(CheckpointFileError, match="not on the published lineage"):
        save(s3_url, 4, parent="ckpt-000002-000000000000")


def test_a_file_url_is_a_directory(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/root"
    path = save(url, 1)
    assert path == tmp_path / "root" / "ckpt-000001"
    loaded = read_checkpoint(url, fingerprint=FP)
    assert loaded is not None and loaded.path == path


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    program=st.lists(
        st.one_of(
            st.tuples(st.just("write"), st.integers(0, 6), st.integers(1, 3)),
            st.tuples(st.just("resume"), st.integers(0, 2), st.just(0)),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_one_lineage_rule_on_both_stores(
    s3_url: str, tmp_path_factory: pytest.TempPathFactory, program: list[tuple[str, int, int]]
) -> None:
    """The same writes and resumes on a directory and on the object store
    publish the same lineage (steps and parents) and read the same."""
    url = f"{s3_url}/{secrets.token_hex(4)}"
    directory = tmp_path_factory.mktemp("both")

    def steps(root: str | Path) -> list[int]:
        return [int(p.name.split("-")[1]) for p in published_checkpoints(root)]

    for op, n, keep in program:
        outcomes = []
        for root in (directory, url):
            try:
                if op == "write":
                    save(str(root), n, keep=keep)
                    outcomes.append(("ok", steps(root)))
                else:
                    loaded = read_checkpoint(root, fingerprint=FP, previous=n)
                    outcomes.append(("ok", None if loaded is None else loaded.step))
            except CheckpointFileError as exc:
                outcomes.append(("refused", str(exc).split(": ", 1)[1][:40]))
        assert outcomes[0] == outcomes[1], (op, n, keep, outcomes)
