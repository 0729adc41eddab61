"""Checkpoint directories: atomic replacement, and every bad input refused
with an error naming its file."""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from frontier_adapters.torch import (  # noqa: E402
    CheckpointFileError,
    CheckpointFileVersionError,
    DatasetChangedError,
    LoadedCheckpoint,
    dataset_fingerprint,
    decode_snapshot,
    encode_snapshot,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)

from frontier_core import (  # noqa: E402
    CheckpointCorruptError,
    CheckpointError,
    FingerprintMismatchError,
)

FP = "len=3;sha256=abc"


def reseal(root: Path) -> None:
    """Recompute every checksum a forger would: the latest manifest's own,
    and LATEST's record of it."""
    latest = json.loads((root / "LATEST").read_text())
    entry = latest["lineage"][0]
    path = root / entry["name"] / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["sha256"] = digest(manifest)
    path.write_text(json.dumps(manifest))
    entry["manifest_sha256"] = manifest["sha256"]
    latest["sha256"] = digest(latest)
    (root / "LATEST").write_text(json.dumps(latest))


def digest(obj: dict[str, Any]) -> str:
    body = {k: v for k, v in obj.items() if k != "sha256"}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def save(root: Path, step: int, **kwargs: Any) -> Path:
    model = torch.nn.Linear(2, 1)
    return write_checkpoint(
        root,
        step,
        fingerprint=FP,
        json_parts={"state": {"step": step, "cut": [1, 2]}},
        tensor_parts={"model": model.state_dict()},
        **kwargs,
    )


def test_write_then_read_roundtrip(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path, fingerprint=FP) is None
    save(tmp_path, 1)
    path = save(tmp_path, 2)
    loaded = read_checkpoint(tmp_path, fingerprint=FP)
    assert loaded is not None and loaded.path == path and loaded.step == 2
    assert loaded.json_parts["state"] == {"step": 2, "cut": [1, 2]}
    assert set(loaded.tensor_parts["model"]) == {"weight", "bias"}
    save(tmp_path, 3)
    save(tmp_path, 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".store-lock",  # the lock of LATEST's compare-and-swap
        "LATEST",
        "ckpt-000003",
        "ckpt-000004",
    ]


def test_a_crash_mid_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    save(tmp_path, 1)

    class Crash(Exception):
        pass

    for stop_at in ("state.json", "model.pt", "LATEST"):

        def boom(name: str, stop_at: str = stop_at) -> None:
            if name == stop_at:
                raise Crash

        with pytest.raises(Crash):
            save(tmp_path, 2, between_parts=boom)
        loaded = read_checkpoint(tmp_path, fingerprint=FP)
        assert loaded is not None and loaded.step == 1
    # The next write succeeds over the leftovers and cleans them up.
    save(tmp_path, 2)
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt-000002"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [".store-lock"]


def expect(tmp_path: Path, error: type[CheckpointError], file: str, match: str) -> None:
    with pytest.raises(error, match=match) as info:
        read_checkpoint(tmp_path, fingerprint=FP)
    assert str(tmp_path / "ckpt-000001" / file) in str(info.value)
    assert info.value.path == str(tmp_path / "ckpt-000001" / file)  # type: ignore[attr-defined]


def test_truncated_part(tmp_path: Path) -> None:
    path = save(tmp_path, 1)
    data = (path / "model.pt").read_bytes()
    (path / "model.pt").write_bytes(data[:-10])
    expect(tmp_path, CheckpointFileError, "model.pt", "truncated")


def test_corrupted_part(tmp_path: Path) -> None:
    path = save(tmp_path, 1)
    text = (path / "state.json").read_text().replace("1", "7")
    (path / "state.json").write_text(text)
    expect(tmp_path, CheckpointCorruptError, "state.json", "corrupted")


def test_missing_part_and_manifest(tmp_path: Path) -> None:
    path = save(tmp_path, 1)
    (path / "model.pt").unlink()
    expect(tmp_path, CheckpointFileError, "model.pt", "missing")
    (path / "manifest.json").unlink()
    expect(tmp_path, CheckpointFileError, "manifest.json", "missing")


def test_truncated_manifest(tmp_path: Path) -> None:
    path = save(tmp_path, 1)
    text = (path / "manifest.json").read_text()
    (path / "manifest.json").write_text(text[: len(text) // 2])
    expect(tmp_path, CheckpointFileError, "manifest.json", "truncated or corrupted")


def test_other_schema_version(tmp_path: Path) -> None:
    path = save(tmp_path, 1)
    manifest = json.loads((path / "manifest.json").read_text())
    for version in (1, 3, True, "2"):
        (path / "manifest.json").write_text(json.dumps({**manifest, "version": version}))
        expect(tmp_path, CheckpointFileVersionError, "manifest.json", f"version '{version}'")


def test_changed_dataset(tmp_path: Path) -> None:
    save(tmp_path, 1)
    rows = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), torch.tensor([5.0, 6.0])]
    changed = [*rows[:2], torch.tensor([5.0, 6.5])]

    def fp(ds: Any, **kw: Any) -> str:
        return dataset_fingerprint(ds, seed=0, shuffle=True, **kw)

    assert fp(rows) != fp(changed)
    assert fp(rows) != fp(rows[:2])
    assert fp(rows) == fp(list(rows))
    assert fp(rows, user_id="v3") == "id:v3;seed=0;shuffle=1"
    with pytest.raises(DatasetChangedError, match="fingerprint") as info:
        read_checkpoint(tmp_path, fingerprint=fp(changed))
    assert isinstance(info.value, FingerprintMismatchError)
    assert "manifest.json" in str(info.value)


def test_pickles_are_refused(tmp_path: Path) -> None:
    path = save(tmp_path, 1)

    # Rewrite model.pt with an arbitrary object, fixing size and checksum.
    torch.save({"x": datetime.date(2020, 1, 1)}, path / "model.pt")
    data = (path / "model.pt").read_bytes()
    manifest = json.loads((path / "manifest.json").read_text())
    for part in manifest["parts"]:
        if part["name"] == "model.pt":
            part.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (path / "manifest.json").write_text(json.dumps(manifest))
    # The checksums are not the boundary: re-sealed, the forged part still
    # meets torch.load(weights_only=True).
    reseal(tmp_path)
    expect(tmp_path, CheckpointFileError, "model.pt", "cannot be loaded")


def test_snapshot_encoding_is_json_and_checked() -> None:
    snap = {"a": 1, "g": torch.tensor([1, 2], dtype=torch.uint8), "t": (1, None), "b": b"x"}
    enc = json.loads(json.dumps(encode_snapshot(snap)))
    back = decode_snapshot(enc)
    assert back["a"] == 1 and back["t"] == (1, None) and back["b"] == b"x"
    assert torch.equal(back["g"], snap["g"])
    with pytest.raises(CheckpointCorruptError, match="checksum"):
        decode_snapshot({**enc, "sha256": "0" * 64})
    with pytest.raises(CheckpointCorruptError, match="base64"):
        decode_snapshot({**enc, "snapshot": "!!"})


# -- the framework-free protocol with the torch codec -------------------------------


def test_the_binding_is_the_protocol_with_the_tensor_codec(tmp_path: Path) -> None:
    from frontier_adapters import checkpoints
    from frontier_adapters.torch._checkpoints import TENSOR_PARTS

    assert LoadedCheckpoint is checkpoints.LoadedCheckpoint
    path = save(tmp_path / "torch", 1)
    loaded = read_checkpoint(tmp_path / "torch", fingerprint=FP)
    again = checkpoints.read_checkpoint_dir(path, fingerprint=FP, codec=TENSOR_PARTS)
    assert loaded is not None and again.json_parts == loaded.json_parts
    assert torch.equal(again.tensor_parts["model"]["bias"], loaded.tensor_parts["model"]["bias"])
    # Without the codec the protocol refuses the .pt part, naming the manifest.
    with pytest.raises(CheckpointFileError, match=r"no codec given reads \.pt parts") as info:
        checkpoints.read_checkpoint(tmp_path / "torch", fingerprint=FP)
    assert info.value.path == str(path / "manifest.json")
    # A root of JSON parts only, written without torch, reads the same here.
    json_only = checkpoints.write_checkpoint(
        tmp_path / "json", 3, fingerprint=FP, json_parts={"state": [1]}
    )
    assert read_checkpoint(tmp_path / "json", fingerprint=FP) == LoadedCheckpoint(
        path=json_only, step=3, json_parts={"state": [1]}, tensor_parts={}
    )


# -- the dataset's identity -------------------------------------------------------


def test_the_fingerprint_sees_every_row_and_the_order() -> None:
    rows = [[i, i * i] for i in range(1000)]

    def fp(ds: Any, **kw: Any) -> str:
        return dataset_fingerprint(ds, **{"seed": 0, "shuffle": True, **kw})

    middle = [*rows[:500], [500, -1], *rows[501:]]
    swapped = [*rows[:10], rows[11], rows[10], *rows[12:]]
    assert len({fp(rows), fp(middle), fp(swapped)}) == 3
    assert fp(rows) != fp(rows, seed=1) and fp(rows) != fp(rows, shuffle=False)
    assert fp(rows) == fp([list(r) for r in rows])
    # The sampled mode is explicit, and weaker: it misses the middle row.
    assert fp(rows, sample=32) == fp(middle, sample=32) != fp(rows)
    assert fp([torch.ones(2)]) != fp([torch.ones(2, dtype=torch.float64)])
    with pytest.raises(TypeError, match="user_id"):
        fp([object()])
