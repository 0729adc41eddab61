"""Epochs: a life claims a checkpoint root before it resumes, and a writer
of an older life is fenced, on a directory and on a real S3 server
(SeaweedFS): refused by type naming both epochs whether it wrote before or
after the claim, its checkpoint never published nor its dead branch
kept, the newer life's writes never held back; epochs count up across
claims; a root that the claim cannot read is refused, not reset."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters.checkpoints import (
    CheckpointConflictError,
    CheckpointFencedError,
    CheckpointFileError,
    claim_epoch,
    epoch_reader,
    published_checkpoints,
    read_checkpoint,
    write_checkpoint,
)

from .forge import FP


@pytest.fixture(params=["directory", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "directory":
        return str(tmp_path / "root")
    return str(request.getfixturevalue("s3_url"))


def save(root: str, step: int, **kwargs: Any) -> Path:
    return write_checkpoint(root, step, fingerprint=FP, json_parts={"state": {"s": step}}, **kwargs)


def names(root: str) -> list[str]:
    return [p.name for p in published_checkpoints(root)]


def test_a_writer_of_an_older_epoch_publishes_nothing(root: str) -> None:
    read = epoch_reader(root)
    assert read() == 0  # nothing claimed yet
    first = claim_epoch(root)
    assert first == 1 and read() == 1
    save(root, 1, epoch=first)
    second = claim_epoch(root)  # a newer life, elsewhere
    assert second == 2 and read() == 2 and len(names(root)) == 1  # the lineage is kept
    with pytest.raises(CheckpointFencedError) as refused:
        save(root, 2, epoch=first)
    assert (refused.value.epoch, refused.value.current) == (first, second)
    assert isinstance(refused.value, CheckpointConflictError)
    assert len(names(root)) == 1
    loaded = read_checkpoint(root, fingerprint=FP)
    assert loaded is not None and loaded.step == 1
    save(root, 2, epoch=second)  # the newer life is not held back
    assert [n.split("-")[1] for n in names(root)] == ["000002", "000001"]
    assert claim_epoch(root) == 3 and read() == 3


def test_a_write_under_way_when_a_newer_life_claims_is_refused(root: str) -> None:
    """The claim lands between the older writer's parts and its publish:
    its compare-and-swap loses to the claim, and it is told it is fenced
    (not a plain conflict)."""
    old = claim_epoch(root)
    save(root, 1, epoch=old)
    claimed: list[int] = []

    def claim_now(name: str) -> None:
        if name == "LATEST":
            claimed.append(claim_epoch(root))

    with pytest.raises(CheckpointFencedError) as refused:
        save(root, 2, epoch=old, between_parts=claim_now)
    assert (refused.value.epoch, refused.value.current) == (old, claimed[0])
    assert [n.split("-")[1] for n in names(root)] == ["000001"]
    newer = save(root, 2, epoch=claimed[0])
    assert names(root)[0] == newer.name
    if "://" not in root:  # the fenced writer's directory went with the next publish
        assert sorted(p.name for p in Path(root).iterdir() if p.name.startswith("ckpt")) == [
            "ckpt-000001",
            newer.name,
        ]


def test_a_writer_outside_the_fencing_keeps_the_epoch(root: str) -> None:
    epoch = claim_epoch(root)
    save(root, 1)  # no epoch: publishes, and LATEST keeps the claim
    assert epoch_reader(root)() == epoch
    save(root, 2, epoch=epoch)
    assert len(names(root)) == 2


def test_a_claim_never_resets_a_damaged_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    save(str(root), 1)
    (root / "LATEST").unlink()  # checkpoints beside a missing LATEST
    with pytest.raises(CheckpointFileError, match="missing"):
        claim_epoch(root)
    assert not (root / "LATEST").exists()
    (root / "LATEST").write_text("{garbled")
    with pytest.raises(CheckpointFileError):
        claim_epoch(root)
    assert (root / "LATEST").read_text() == "{garbled"


def test_a_forged_epoch_is_refused(tmp_path: Path) -> None:
    from .forge import digest

    root = tmp_path / "root"
    save(str(root), 1, epoch=None)
    doc = json.loads((root / "LATEST").read_bytes())
    for bad in (-1, "1", 1.5, None, True, 1 << 63):
        forged = {k: v for k, v in doc.items() if k != "sha256"} | {"epoch": bad}
        forged["sha256"] = digest(forged)  # sealed as a forger would
        (root / "LATEST").write_text(json.dumps(forged))
        with pytest.raises(CheckpointFileError, match="epoch"):
            read_checkpoint(root, fingerprint=FP)
    with pytest.raises(ValueError, match="epoch"):
        save(str(root), 2, epoch=0)


def test_the_last_epoch_is_read_and_never_claimed_past(tmp_path: Path) -> None:
    """A LATEST naming the last epoch (2**63 - 1, forged) is read, and a
    claim after it is refused by type, LATEST unchanged."""
    from .forge import digest

    root = tmp_path / "root"
    save(str(root), 1, epoch=None)
    doc = json.loads((root / "LATEST").read_bytes())
    forged = {k: v for k, v in doc.items() if k != "sha256"} | {"epoch": (1 << 63) - 1}
    forged["sha256"] = digest(forged)
    (root / "LATEST").write_text(json.dumps(forged))
    before = (root / "LATEST").read_bytes()
    assert epoch_reader(root)() == (1 << 63) - 1
    with pytest.raises(CheckpointFileError, match="epoch"):
        claim_epoch(root)
    assert (root / "LATEST").read_bytes() == before


def test_lives_claiming_at_once_never_share_an_epoch(root: str) -> None:
    """Claims race (threads here; processes on a directory take the same
    lock): each that returns holds an epoch no other holds, the root ends
    at the highest, and a claim that lost every try says so by type."""
    from concurrent.futures import ThreadPoolExecutor

    save(root, 1)

    def claim(_: int) -> int | None:
        try:
            return claim_epoch(root)
        except CheckpointConflictError:
            return None

    with ThreadPoolExecutor(6) as pool:
        got = [e for e in pool.map(claim, range(6)) if e is not None]
    assert got and len(set(got)) == len(got)
    assert epoch_reader(root)() == max(got)
    assert len(names(root)) == 1  # the lineage went through every claim unchanged


def test_an_older_life_paused_after_its_publish_removes_nothing_newer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The older writer's publish succeeds, then it pauses (a GC pause, a
    frozen VM) while a newer life claims and publishes; when it resumes,
    its pruning takes none of the newer life's checkpoints."""
    from frontier_adapters.checkpoints import _lineage

    root = str(tmp_path / "root")
    old = claim_epoch(root)
    save(root, 0, epoch=old)
    noted = _lineage.note_resumed
    newer: list[Path] = []
    paused: list[bool] = []

    def pause_after_publish(*args: Any) -> None:
        noted(*args)
        if not paused:
            paused.append(True)
            life = claim_epoch(root)
            newer.extend([save(root, 5, epoch=life), save(root, 6, epoch=life)])

    monkeypatch.setattr(_lineage, "note_resumed", pause_after_publish)
    save(root, 1, epoch=old)  # published before the claim: no error
    monkeypatch.undo()
    assert names(root) == [newer[1].name, newer[0].name]
    assert all(p.is_dir() for p in newer)
    loaded = read_checkpoint(root, fingerprint=FP)
    assert loaded is not None and loaded.step == 6
    assert not [p for p in Path(root).iterdir() if p.name.startswith(".tmp-")]


def test_an_older_life_paused_before_its_dead_sweep_is_fenced_and_removes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The older writer passed its epoch check and read LATEST, then
    pauses before removing the dead directories; a newer life claims and
    publishes meanwhile. The older writer is fenced and removes none of
    the newer life's checkpoints."""
    from frontier_adapters.checkpoints import _dirs

    root = str(tmp_path / "root")
    old = claim_epoch(root)
    save(root, 0, epoch=old)
    sweep = _dirs.remove_dead
    newer: list[Path] = []
    paused: list[bool] = []

    def pause_before_sweep(*args: Any) -> None:
        if not paused:
            paused.append(True)
            life = claim_epoch(root)
            newer.append(save(root, 5, epoch=life))
        sweep(*args)

    monkeypatch.setattr(_dirs, "remove_dead", pause_before_sweep)
    with pytest.raises(CheckpointFencedError):
        save(root, 1, epoch=old)
    monkeypatch.undo()
    assert names(root)[0] == newer[0].name and newer[0].is_dir()
    loaded = read_checkpoint(root, fingerprint=FP)
    assert loaded is not None and loaded.step == 5
    assert sorted(p.name for p in Path(root).iterdir() if p.name.startswith("ckpt")) == sorted(
        names(root)
    )


def test_a_claim_whose_swap_temporary_is_removed_claims_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A removal outside the store's lock takes the claim's temporary file
    before its rename: the claim is tried again, not a bare OSError."""
    from frontier_adapters.store import PosixStore

    root = str(tmp_path / "root")
    save(root, 1)
    write_tmp = PosixStore._write_tmp
    removed: list[str] = []

    def remove_once(self: PosixStore, fd: int, data: bytes) -> tuple[str, str]:
        tmp, version = write_tmp(self, fd, data)
        if not removed:
            removed.append(tmp)
            os.unlink(tmp, dir_fd=fd)
        return tmp, version

    monkeypatch.setattr(PosixStore, "_write_tmp", remove_once)
    assert claim_epoch(root) == 1 and removed
    monkeypatch.undo()
    assert epoch_reader(root)() == 1 and len(names(root)) == 1
