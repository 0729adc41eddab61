"""The checkpoint protocol without a framework: JSON-only roots written and
read with no torch imported, the files' exact format, the part codec seam,
and what a write continues."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters.checkpoints import (
    CheckpointFileError,
    LoadedCheckpoint,
    PartCodec,
    checkpoint_name,
    claim_epoch,
    latest_checkpoint,
    published_checkpoints,
    read_checkpoint,
    read_checkpoint_dir,
    write_checkpoint,
)

from .forge import BLOBS, FP, digest, reseal


def test_a_json_only_root_is_written_and_read_without_torch(tmp_path: Path) -> None:
    """In a fresh interpreter: the protocol package, a write, a read of the
    root and of one directory, and the lineage leave torch unimported."""
    code = f"""
import sys
from frontier_adapters.checkpoints import (
    published_checkpoints, read_checkpoint, read_checkpoint_dir, write_checkpoint)
root = {str(tmp_path)!r}
for step in (1, 2):
    path = write_checkpoint(root, step, fingerprint="fp", json_parts={{"state": {{"s": step}}}})
loaded = read_checkpoint(root, fingerprint="fp", require=["state"])
assert loaded.step == 2 and loaded.json_parts == {{"state": {{"s": 2}}}}, loaded
assert loaded.tensor_parts == {{}}
assert read_checkpoint_dir(path, fingerprint="fp").step == 2
assert [p.name for p in published_checkpoints(root)] == ["ckpt-000002", "ckpt-000001"]
assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_the_files_hold_exactly_the_format(tmp_path: Path) -> None:
    """Byte for byte what the torch binding wrote before the protocol moved
    here: the same names, JSON and seals."""
    first = write_checkpoint(tmp_path, 1, fingerprint=FP, json_parts={"b": [1, 2], "a": {"y": 1}})
    second = write_checkpoint(tmp_path, 12, fingerprint=FP, json_parts={"a": None})
    assert first.name == "ckpt-000001" and second.name == "ckpt-000012"
    assert (second / "a.json").read_bytes() == b"null"
    assert (first / "a.json").read_bytes() == b'{"y": 1}'
    raw = (second / "manifest.json").read_bytes()
    manifest = json.loads(raw)
    assert raw == json.dumps(manifest, sort_keys=True, indent=1).encode()
    assert manifest == {
        "format": "frontier_adapters.checkpoint_dir",
        "version": 2,
        "step": 12,
        "fingerprint": FP,
        "parts": [{"name": "a.json", "size": 4, "sha256": manifest["parts"][0]["sha256"]}],
        "sha256": digest(manifest),
    }
    first_sha = json.loads((first / "manifest.json").read_bytes())["sha256"]
    raw = (tmp_path / "LATEST").read_bytes()
    latest = json.loads(raw)
    assert raw == (json.dumps(latest, sort_keys=True, indent=1) + "\n").encode()
    assert latest == {
        "format": "frontier_adapters.checkpoint_root",
        "version": 3,
        "epoch": 0,
        "lineage": [
            {
                "name": "ckpt-000012",
                "step": 12,
                "manifest_sha256": manifest["sha256"],
                "parent": "ckpt-000001",
            },
            {"name": "ckpt-000001", "step": 1, "manifest_sha256": first_sha, "parent": None},
        ],
        "sha256": digest(latest),
    }
    assert checkpoint_name(12) == "ckpt-000012" and checkpoint_name(3, 2) == "ckpt-000003-2"
    # A LATEST of version 2 (before epochs) is read as the same lineage of
    # epoch 0, and the next write (or claim) replaces it with version 3.
    old = {k: v for k, v in latest.items() if k not in ("epoch", "sha256")} | {"version": 2}
    old["sha256"] = digest(old)
    (tmp_path / "LATEST").write_text(json.dumps(old, sort_keys=True, indent=1) + "\n")
    assert [p.name for p in published_checkpoints(tmp_path)] == ["ckpt-000012", "ckpt-000001"]
    assert claim_epoch(tmp_path) == 1
    assert [p.name for p in published_checkpoints(tmp_path)] == ["ckpt-000012", "ckpt-000001"]
    assert json.loads((tmp_path / "LATEST").read_bytes())["epoch"] == 1


def test_a_codec_stores_and_reads_its_parts(tmp_path: Path) -> None:
    path = write_checkpoint(
        tmp_path,
        1,
        fingerprint=FP,
        json_parts={"state": {"s": 1}},
        tensor_parts={"state": [1, 2], "model": {"w": 3}},
        codec=BLOBS,
    )
    assert sorted(p.name for p in path.iterdir()) == [
        "manifest.json",
        "model.bin",
        "state.bin",
        "state.json",
    ]
    loaded = read_checkpoint(tmp_path, fingerprint=FP, codec=BLOBS)
    assert loaded == LoadedCheckpoint(
        path=path,
        step=1,
        json_parts={"state": {"s": 1}},
        tensor_parts={"state": [1, 2], "model": {"w": 3}},
    )
    assert read_checkpoint_dir(path, fingerprint=FP, codec=BLOBS) == loaded


def test_a_part_no_codec_given_reads_is_refused_naming_the_manifest(tmp_path: Path) -> None:
    path = write_checkpoint(
        tmp_path, 1, fingerprint=FP, json_parts={"s": 1}, tensor_parts={"m": 1}, codec=BLOBS
    )
    for read in (
        lambda: read_checkpoint(tmp_path, fingerprint=FP),
        lambda: read_checkpoint_dir(path, fingerprint=FP),
        lambda: read_checkpoint(tmp_path, fingerprint=FP, codec=PartCodec("pt", bytes, bytes)),
    ):
        with pytest.raises(CheckpointFileError, match=r"no codec given reads \.bin parts") as info:
            read()
        assert info.value.path == str(path / "manifest.json")


def test_what_a_codec_cannot_decode_is_a_file_error(tmp_path: Path) -> None:
    path = write_checkpoint(
        tmp_path, 1, fingerprint=FP, json_parts={}, tensor_parts={"m": 1}, codec=BLOBS
    )
    data = b'{"not": "a blob"}'
    (path / "m.bin").write_bytes(data)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["parts"][0].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (path / "manifest.json").write_text(json.dumps(manifest))
    reseal(tmp_path)
    with pytest.raises(CheckpointFileError, match="cannot be loaded: not a blob") as info:
        read_checkpoint(tmp_path, fingerprint=FP, codec=BLOBS)
    assert info.value.path == str(path / "m.bin")


def test_codec_parts_need_a_codec_and_a_codec_a_plain_suffix(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="codec"):
        write_checkpoint(tmp_path, 1, fingerprint=FP, json_parts={}, tensor_parts={"m": 1})
    assert not tmp_path.joinpath("LATEST").exists()
    # Nothing to encode needs no codec.
    write_checkpoint(tmp_path, 1, fingerprint=FP, json_parts={}, tensor_parts={})
    for suffix in ("json", "", "PT", "a.b", "x" * 17, 3):
        with pytest.raises(ValueError, match="suffix"):
            PartCodec(suffix=suffix, encode=bytes, decode=bytes)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad part name"):
        write_checkpoint(
            tmp_path, 2, fingerprint=FP, json_parts={}, tensor_parts={"../m": 1}, codec=BLOBS
        )


def test_a_parent_names_what_the_write_continues(tmp_path: Path) -> None:
    def save(step: int, **kwargs: Any) -> Path:
        return write_checkpoint(tmp_path, step, fingerprint=FP, json_parts={}, keep=3, **kwargs)

    one = save(1)
    save(2)
    three = save(3, parent=one)
    assert published_checkpoints(tmp_path) == [three, one]
    loaded = read_checkpoint(tmp_path, fingerprint=FP)
    assert loaded is not None
    four = save(4, parent=loaded)
    assert published_checkpoints(tmp_path) == [four, three, one]
    assert latest_checkpoint(tmp_path) == four
    with pytest.raises(ValueError, match="not a checkpoint of"):
        save(5, parent=tmp_path / "elsewhere" / "ckpt-000001")
    with pytest.raises(TypeError, match="loaded checkpoint or a path"):
        save(5, parent=4)  # type: ignore[arg-type]
    with pytest.raises(CheckpointFileError, match="not on the published lineage"):
        save(5, parent="ckpt-000002")
    assert published_checkpoints(tmp_path) == [four, three, one]


def test_a_removal_killed_midway_is_cleaned_by_the_next_write_even_unpublished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer killed between moving a pruned directory aside
    (``.tmp-dead-*``) and removing it leaves it behind; the next write
    removes it before it writes its own, under the store's lock, so it is
    gone even when that write fails before it publishes."""
    from frontier_adapters.checkpoints import _fs

    root = tmp_path / "ckpts"
    write_checkpoint(root, 0, fingerprint=FP, json_parts={"s": {"x": 0}}, keep=1)
    with monkeypatch.context() as killed:
        killed.setattr(_fs, "remove", lambda root, name: None)  # the kill, after the rename
        write_checkpoint(root, 1, fingerprint=FP, json_parts={"s": {"x": 1}}, keep=1)
    dead = [n for n in os.listdir(root) if n.startswith(".tmp-dead-")]
    assert len(dead) == 1

    def full_disk(root: Path, prefix: str) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_fs, "make_tmp_dir", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_checkpoint(root, 2, fingerprint=FP, json_parts={"s": {"x": 2}}, keep=1)
    monkeypatch.undo()
    assert sorted(os.listdir(root)) == [".store-lock", "LATEST", "ckpt-000001"]
    assert read_checkpoint(root, fingerprint=FP) is not None
