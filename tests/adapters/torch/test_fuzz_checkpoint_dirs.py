"""Seeded fuzzing of checkpoint directories: random damage to a published
root (bytes flipped, files truncated, extended, deleted or replaced by a
directory or a symlink, JSON values rewritten and re-sealed by a forger).

Whatever the damage, ``read_checkpoint`` returns exactly what was saved,
or raises a ``CheckpointError`` naming a file of the root: never another
exception, never a silent fresh start, never different content unless a
forger re-sealed it (then it must still be well-formed). The long run is

    FRONTIER_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest \
        tests/adapters/torch/test_fuzz_checkpoint_dirs.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from frontier_adapters.torch import read_checkpoint, write_checkpoint  # noqa: E402

from frontier_core import CheckpointError  # noqa: E402

from .test_checkpoint_dirs import FP, reseal  # noqa: E402

FUZZ = settings(
    max_examples=int(os.environ.get("FRONTIER_FUZZ_EXAMPLES", "120")),
    deadline=None,
    derandomize="FRONTIER_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

STATE = {"collector": {"cut": 7, "ranges": [[1, 2], [4, 9]]}, "records": 12}


def publish(root: Path) -> None:
    for step in (1, 2):
        write_checkpoint(
            root,
            step,
            fingerprint=FP,
            json_parts={"state": {**STATE, "step": step}},
            tensor_parts={"model": {"w": torch.arange(4.0) + step}},
        )


damage = st.sampled_from(
    ["flip", "truncate", "extend", "delete", "dir", "symlink", "empty", "rewrite", "reseal"]
)


def apply(root: Path, draw: Any) -> bool:
    """Apply one random damage; return whether a forger re-sealed it."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    if not files:
        return False
    target = draw(st.sampled_from(files))
    kind = draw(damage)
    data = target.read_bytes()
    if kind == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        target.write_bytes(
            data[:i] + bytes([data[i] ^ (1 << draw(st.integers(0, 7)))]) + data[i + 1 :]
        )
    elif kind == "truncate":
        target.write_bytes(data[: draw(st.integers(0, max(0, len(data) - 1)))])
    elif kind == "extend":
        target.write_bytes(data + draw(st.binary(min_size=1, max_size=16)))
    elif kind == "delete":
        target.unlink()
    elif kind == "dir":
        target.unlink()
        target.mkdir()
    elif kind == "symlink":
        copy = root.parent / f"copy-{len(list(root.parent.iterdir()))}-{target.name}"
        shutil.copy(target, copy)
        target.unlink()
        target.symlink_to(copy)
    elif kind == "empty":
        target.write_bytes(b"")
    elif kind in ("rewrite", "reseal") and target.suffix == ".json":
        try:
            doc = json.loads(data)
        except ValueError:
            return False
        if isinstance(doc, dict) and doc:
            key = draw(st.sampled_from(sorted(doc)))
            doc[key] = draw(
                st.one_of(
                    st.integers(-5, 10**12),
                    st.booleans(),
                    st.text(max_size=5),
                    st.just([]),
                    st.just(None),
                    st.just(str(doc[key])),
                )
            )
            target.write_text(json.dumps(doc))
        if kind == "reseal" and target.name == "manifest.json":
            try:
                reseal(root)
            except (ValueError, KeyError, TypeError, IndexError, OSError):
                return False  # LATEST itself is damaged: nothing to re-seal against
            return True
    return False


@FUZZ
@given(st.data())
def test_a_damaged_root_reads_back_exactly_or_raises_naming_a_file(
    tmp_path_factory: Any, data: st.DataObject
) -> None:
    base = Path(tmp_path_factory.mktemp("fuzz"))
    root = base / "root"
    publish(root)
    forged = False
    for _ in range(data.draw(st.integers(1, 2))):
        forged |= apply(root, data.draw)
    try:
        loaded = read_checkpoint(root, fingerprint=FP, require=["state", "model"])
    except CheckpointError as exc:
        assert str(root) in str(exc)
        return
    assert loaded is not None, "a damaged root must never read as 'no checkpoint'"
    if not forged:
        assert loaded.step == 2
        assert loaded.json_parts == {"state": {**STATE, "step": 2}}
        assert torch.equal(loaded.tensor_parts["model"]["w"], torch.arange(4.0) + 2)
