"""Checkpoint directories under hostile or damaged input: no silent fresh
start, no silent wrong checkpoint, nothing followed or written outside the
root, no read proportional to a number inside a file, and the published
lineage pruned as published. Torch-free: the parts that are not JSON go
through a test codec (``forge.BLOBS``, ``name.bin``); the torch binding
passes its ``.pt`` codec to this same code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters.checkpoints import (
    CheckpointFileError,
    latest_checkpoint,
    published_checkpoints,
    read_checkpoint,
    write_checkpoint,
)

from frontier_core import CheckpointError

from .forge import BLOBS, FP, digest, reseal


def save(root: Path, step: int, **kwargs: Any) -> Path:
    return write_checkpoint(
        root,
        step,
        fingerprint=FP,
        json_parts={"state": {"step": step}},
        tensor_parts={"model": {"w": [float(step)] * 2}},
        codec=BLOBS,
        **kwargs,
    )


def read(root: Path, **kwargs: Any) -> Any:
    return read_checkpoint(root, fingerprint=FP, codec=BLOBS, **kwargs)


def refused(root: Path, file: Path, match: str, **kwargs: Any) -> CheckpointFileError:
    with pytest.raises(CheckpointFileError, match=match) as info:
        read(root, **kwargs)
    assert info.value.path == str(file)
    return info.value


class Crash(Exception):
    pass


def crash_at(point: str) -> Any:
    def hook(name: str) -> None:
        if name == point:
            raise Crash

    return hook


# -- no silent fresh start -------------------------------------------------------


def test_no_checkpoint_means_a_root_with_none_at_all(tmp_path: Path) -> None:
    assert read(tmp_path / "absent") is None
    assert read(tmp_path) is None
    assert published_checkpoints(tmp_path) == [] and latest_checkpoint(tmp_path) is None
    # A first write killed before it published leaves no checkpoint either.
    with pytest.raises(Crash):
        save(tmp_path, 0, between_parts=crash_at("LATEST"))
    assert read(tmp_path) is None
    save(tmp_path, 0)
    loaded = read(tmp_path)
    assert loaded is not None and loaded.step == 0


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "missing, but the root holds checkpoint directories"),
        (b"", "empty"),
        (b"\n  \n", "empty"),
        (b"ckpt-000002\n", "garbled"),
        (b"{not json", "garbled"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 60_000, "nested too deeply"),
        (b"[" * 100_000, "more than the 65536 allowed"),
        (b'{"lineage": [' + b"9" * 5000 + b"]}", "garbled"),
    ],
)
def test_a_damaged_latest_next_to_checkpoints_is_an_error(
    tmp_path: Path, content: bytes | None, match: str
) -> None:
    save(tmp_path, 1)
    save(tmp_path, 2)
    latest = tmp_path / "LATEST"
    if content is None:
        latest.unlink()
    else:
        latest.write_bytes(content)
    refused(tmp_path, latest, match)
    with pytest.raises(CheckpointFileError):
        published_checkpoints(tmp_path)
    # Nor does a write silently start a new lineage over it.
    with pytest.raises(CheckpointFileError):
        save(tmp_path, 3)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-000001", "ckpt-000002"]


def test_a_forged_latest_is_refused(tmp_path: Path) -> None:
    save(tmp_path, 1)
    save(tmp_path, 2)
    doc = json.loads((tmp_path / "LATEST").read_text())
    doc["lineage"][0]["step"] = 2  # unchanged, but the checksum is now stale after this:
    doc["lineage"].reverse()
    (tmp_path / "LATEST").write_text(json.dumps(doc))
    refused(tmp_path, tmp_path / "LATEST", "SHA-256 does not match")
    for bad in ({"version": True}, {"version": 3}, {"extra": 1}):
        doc = json.loads(json.dumps({**doc, **bad}))
        (tmp_path / "LATEST").write_text(json.dumps(doc))
        with pytest.raises(CheckpointError, match="LATEST"):
            read(tmp_path)


# -- no silent wrong checkpoint -----------------------------------------------------


def test_a_flipped_step_in_the_manifest_is_caught_even_when_resealed(tmp_path: Path) -> None:
    save(tmp_path, 6)
    path = tmp_path / "ckpt-000006" / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "step": 7}))
    refused(tmp_path, path, "SHA-256 does not match")
    reseal(tmp_path)  # a forger recomputes both checksums: the directory name still disagrees
    refused(tmp_path, path, "saved step 7 does not match the directory ckpt-000006")


def test_a_manifest_other_than_the_published_one_is_caught(tmp_path: Path) -> None:
    save(tmp_path, 1)
    path = tmp_path / "ckpt-000001" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["fingerprint"] = FP  # the same content, re-sealed with a new part list order
    manifest["parts"].reverse()
    manifest["sha256"] = digest(manifest)
    path.write_text(json.dumps(manifest))
    refused(tmp_path, path, "is not the manifest LATEST published")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"size": "637"}, "size must be an int"),
        ({"size": True}, "size must be an int"),
        ({"size": -1}, "size must be an int"),
        ({"sha256": "x" * 64}, "64 hex digits"),
        ({"name": "../escape.json"}, "bad part name"),
        ({"name": "/etc/passwd.json"}, "bad part name"),
        ({"extra": 1}, "bad part entry"),
    ],
)
def test_malformed_part_entries_say_what_is_wrong(
    tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    save(tmp_path, 1)
    path = tmp_path / "ckpt-000001" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["parts"][0].update(change)
    path.write_text(json.dumps(manifest))
    reseal(tmp_path)
    refused(tmp_path, path, match)


def test_a_required_part_that_was_not_saved_is_named(tmp_path: Path) -> None:
    save(tmp_path, 1)
    manifest = tmp_path / "ckpt-000001" / "manifest.json"
    error = refused(
        tmp_path, manifest, r"saved no part\(s\) \['optim'\]", require=["state", "optim"]
    )
    assert "optim" in str(error)
    loaded = read(tmp_path, require=["state", "model"])
    assert loaded is not None and set(loaded.json_parts) == {"state"}


def test_json_parts_that_would_blow_the_parser_are_file_errors(tmp_path: Path) -> None:
    for i, payload in enumerate(["[" * 100_000 + "]" * 100_000, "1" * 10_000]):
        write_checkpoint(tmp_path, i, fingerprint=FP, json_parts={"ok": 1})
        part = tmp_path / f"ckpt-{i:06d}" / "ok.json"
        part.write_text(payload)
        manifest_path = part.parent / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        import hashlib

        manifest["parts"][0].update(
            size=len(payload), sha256=hashlib.sha256(payload.encode()).hexdigest()
        )
        manifest_path.write_text(json.dumps(manifest))
        reseal(tmp_path)
        refused(tmp_path, part, "not JSON")


# -- fallback along the published lineage ------------------------------------------


def test_previous_reads_back_along_the_published_lineage(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        save(tmp_path, step, keep=3)
    assert [p.name for p in published_checkpoints(tmp_path)] == [
        "ckpt-000003",
        "ckpt-000002",
        "ckpt-000001",
    ]
    (tmp_path / "ckpt-000003" / "model.bin").write_bytes(b"damaged")
    refused(tmp_path, tmp_path / "ckpt-000003" / "model.bin", "on disk")
    older = read(tmp_path, previous=1)
    assert older is not None and older.step == 2
    refused(tmp_path, tmp_path / "LATEST", "no checkpoint 3 back", previous=3)
    # Resuming from step 2 and writing step 3 again abandons the damaged one.
    save(tmp_path, 3, keep=3)
    loaded = read(tmp_path)
    assert loaded is not None and loaded.step == 3
    assert loaded.tensor_parts["model"] == {"w": [3.0, 3.0]}
    assert [p.name for p in published_checkpoints(tmp_path)][1:] == ["ckpt-000002", "ckpt-000001"]


# -- pruning follows the published lineage ----------------------------------------


def test_a_dead_branch_never_costs_the_live_lineage_a_checkpoint(tmp_path: Path) -> None:
    """Killed between the rename and LATEST at step 5 (a dead branch above
    the live lineage), the run resumes from 2 and writes 3: the lineage is
    [3, 2] and the dead directory is gone."""
    save(tmp_path, 1)
    save(tmp_path, 2)
    with pytest.raises(Crash):
        save(tmp_path, 5, between_parts=crash_at("LATEST"))
    assert (tmp_path / "ckpt-000005").is_dir()
    loaded = read(tmp_path)
    assert loaded is not None and loaded.step == 2
    save(tmp_path, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".store-lock",
        "LATEST",
        "ckpt-000002",
        "ckpt-000003",
    ]
    assert [p.name for p in published_checkpoints(tmp_path)] == ["ckpt-000003", "ckpt-000002"]


def test_rewriting_a_published_step_keeps_it_until_the_new_one_is_durable(tmp_path: Path) -> None:
    save(tmp_path, 1)
    save(tmp_path, 2)
    with pytest.raises(Crash):
        save(tmp_path, 2, between_parts=crash_at("LATEST"))
    loaded = read(tmp_path)
    assert loaded is not None and loaded.path.name == "ckpt-000002"
    path = save(tmp_path, 2)
    assert path.name == "ckpt-000002-1"
    assert [p.name for p in published_checkpoints(tmp_path)] == ["ckpt-000002-1", "ckpt-000001"]


# -- inside the root ---------------------------------------------------------------


def test_symlinks_out_of_the_root_are_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    save(root, 1)
    save(outside, 1)
    part = root / "ckpt-000001" / "model.bin"
    part.unlink()
    part.symlink_to(outside / "ckpt-000001" / "model.bin")  # identical bytes: passes every checksum
    refused(root, part, "symlink")
    manifest = root / "ckpt-000001" / "manifest.json"
    manifest.unlink()
    manifest.symlink_to(outside / "ckpt-000001" / "manifest.json")
    refused(root, manifest, "symlink")
    directory = root / "ckpt-000001"
    import shutil

    shutil.rmtree(directory)
    directory.symlink_to(outside / "ckpt-000001")
    refused(root, directory, "not a directory")
    (root / "LATEST").unlink()
    (root / "LATEST").symlink_to(outside / "LATEST")
    refused(root, root / "LATEST", "symlink")


def test_planted_symlinks_at_temporary_names_redirect_nothing(tmp_path: Path) -> None:
    root, victim = tmp_path / "root", tmp_path / "victim.txt"
    victim.write_text("precious")
    save(root, 1)
    # The names earlier versions used, and plausible ones.
    for name in (
        f".LATEST.tmp-{os.getpid()}",
        f".tmp-ckpt-000002-{os.getpid()}",
        ".tmp-LATEST",
        "ckpt-000002",
    ):
        (root / name).symlink_to(victim)
    save(root, 2)
    assert victim.read_text() == "precious"
    loaded = read(root)
    assert loaded is not None and loaded.step == 2 and not (root / "ckpt-000002").is_symlink()
    assert sorted(p.name for p in root.iterdir()) == [
        ".store-lock",
        "LATEST",
        "ckpt-000001",
        "ckpt-000002",
    ]


def test_a_fifo_in_place_of_a_file_is_refused_without_blocking(tmp_path: Path) -> None:
    """In a subprocess with a deadline: opening a FIFO for reading blocks
    forever unless the reader refuses it first."""
    save(tmp_path, 1)
    for target in ("ckpt-000001/model.bin", "ckpt-000001/manifest.json", "LATEST"):
        path = tmp_path / target
        path.unlink()
        os.mkfifo(path)
        code = (
            "import sys\n"
            "from frontier_adapters.checkpoints import (\n"
            "    CheckpointFileError, PartCodec, read_checkpoint)\n"
            "codec = PartCodec(suffix='bin', encode=bytes, decode=bytes)\n"
            "try:\n"
            f"    read_checkpoint({str(tmp_path)!r}, fingerprint=None, codec=codec)\n"
            "except CheckpointFileError as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 3, proc.stderr
        assert "not a regular file" in proc.stdout and str(path) in proc.stdout
        path.unlink()
        save(tmp_path / "fresh", 1)  # keep the other files intact for the next target
        import shutil

        shutil.rmtree(tmp_path / "ckpt-000001")
        (tmp_path / "LATEST").unlink(missing_ok=True)
        shutil.copytree(tmp_path / "fresh" / "ckpt-000001", tmp_path / "ckpt-000001")
        shutil.copy(tmp_path / "fresh" / "LATEST", tmp_path / "LATEST")
        shutil.rmtree(tmp_path / "fresh")


def test_sizes_are_checked_before_a_byte_is_read(tmp_path: Path) -> None:
    """Sparse files of 64 GiB stand in for a hostile size: refused from
    fstat at once (reading them would take minutes and the memory)."""
    save(tmp_path, 1)
    huge = 64 << 30
    for target, match in (
        ("ckpt-000001/model.bin", "too long"),
        ("ckpt-000001/manifest.json", "more than the"),
        ("LATEST", "more than the"),
    ):
        path = tmp_path / target
        original = path.read_bytes()
        with open(path, "r+b") as f:
            f.truncate(huge)
        refused(tmp_path, path, match)
        path.write_bytes(original)
    assert read(tmp_path) is not None
