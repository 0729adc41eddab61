"""What the checkpoint protocol's tests share: a torch-free codec, and the
checksums a forger recomputes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from frontier_adapters.checkpoints import PartCodec
from frontier_adapters.store import Store

FP = "len=3;sha256=abc"


def _decode(data: bytes) -> Any:
    doc = json.loads(data.decode())
    if not isinstance(doc, dict) or set(doc) != {"blob"}:
        raise ValueError("not a blob")
    return doc["blob"]


#: A codec no framework needs: ``name.bin`` holds ``{"blob": value}``.
BLOBS = PartCodec(suffix="bin", encode=lambda v: json.dumps({"blob": v}).encode(), decode=_decode)


def digest(obj: dict[str, Any]) -> str:
    body = {k: v for k, v in obj.items() if k != "sha256"}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


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


def garble(store: Store, key: str) -> None:
    """Replace the object ``key`` (a lineage file) by bytes that are not JSON."""
    version = store.head(key)
    assert version is not None
    store.swap(key, b'{"garbled', expected=version)
