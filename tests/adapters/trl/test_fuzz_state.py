"""Seeded fuzzing of the TRL binding's state file: random damage to a sound
``frontier_state.json`` (bytes flipped, the file truncated, extended,
emptied or replaced by a directory, a FIFO or a symlink, any value of its
tree rewritten or deleted and the checksum re-sealed by a forger, the
ledger record swapped for another run's).

Whatever the damage, ``read_state`` returns exactly what was saved, or
raises a ``CheckpointError`` naming the state file; a state it accepts
after a forger re-sealed it either resumes a run or is refused by
``resume`` with a ``CheckpointError``: never another exception, never a
read without end. The long run is

    FRONTIER_FUZZ_EXAMPLES=5000 OMP_NUM_THREADS=1 .venv-trl/bin/python -m pytest \
        -p no:cacheprovider tests/adapters/trl/test_fuzz_state.py
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._need import need_trl

need_trl()

from frontier_adapters.trl import (  # noqa: E402
    FrontierRun,
    Layout,
    StreamOrder,
    read_state,
    write_state,
)

from frontier_core import CheckpointError  # noqa: E402

FUZZ = settings(
    max_examples=int(os.environ.get("FRONTIER_FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize="FRONTIER_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def make_run(fingerprint: str = "fp", n: int = 8) -> FrontierRun:
    return FrontierRun(
        StreamOrder(n, seed=3, shuffle=True),
        epochs=2,
        layout=Layout(prompts=2, num_generations=2, repeat=1, grad_accum=1),
        fingerprint=fingerprint,
        log_path=None,
    )


def state_after(steps: int, *, fingerprint: str = "fp", n: int = 8) -> dict[str, Any]:
    """A sound state after ``steps`` trained blocks (one prefetched)."""
    run = make_run(fingerprint, n)
    run.start()
    for step in range(steps):
        block = run.next_block()
        assert block is not None
        run.consume([o for o in block for _ in range(2)])
        run.step_end(step)
    run.next_block()  # prefetched by the loader, never trained
    return run.state_dict(steps)


def reseal(state: dict[str, Any]) -> dict[str, Any]:
    """The documented checksum, recomputed as a forger would."""
    body = {k: v for k, v in state.items() if k != "checksum"}
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return {**body, "checksum": hashlib.sha256(data).hexdigest()}


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a JSON tree (the root excluded)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            out.append((*prefix, key))
            out.extend(paths(child, (*prefix, key)))
    return out


def rewrite(tree: Any, path: tuple[Any, ...], new: Any, *, delete: bool) -> Any:
    tree = json.loads(json.dumps(tree))
    node = tree
    for key in path[:-1]:
        node = node[key]
    if delete and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = new
    return tree


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)

damage = st.sampled_from(
    [
        "flip",
        "truncate",
        "extend",
        "empty",
        "dir",
        "fifo",
        "symlink",
        "rewrite",
        "delete",
        "foreign-ledger",
    ]
)


@FUZZ
@given(data=st.data(), kind=damage, steps=st.integers(0, 6))
def test_a_damaged_state_file_is_read_exactly_or_refused_typed(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, kind: str, steps: int
) -> None:
    root = tmp_path_factory.mktemp("fuzz")
    folder = root / f"checkpoint-{steps}"
    folder.mkdir()
    original = state_after(steps)
    path = write_state(folder, original)
    raw = path.read_bytes()
    resealed = False
    if kind == "flip":
        at = data.draw(st.integers(0, len(raw) - 1))
        bit = data.draw(st.integers(0, 7))
        path.write_bytes(raw[:at] + bytes([raw[at] ^ (1 << bit)]) + raw[at + 1 :])
    elif kind == "truncate":
        path.write_bytes(raw[: data.draw(st.integers(0, len(raw) - 1))])
    elif kind == "extend":
        path.write_bytes(raw + data.draw(st.binary(min_size=1, max_size=64)))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "dir":
        path.unlink()
        path.mkdir()
    elif kind == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif kind == "symlink":
        elsewhere = root / "elsewhere.json"
        elsewhere.write_bytes(raw)
        path.unlink()
        path.symlink_to(elsewhere)
    elif kind in ("rewrite", "delete"):
        where = data.draw(st.sampled_from(paths(original)))
        new = data.draw(json_values)
        forged = rewrite(original, where, new, delete=kind == "delete")
        path.write_text(json.dumps(reseal(forged)))
        resealed = True
    else:  # another run's ledger record: sound, of another stream
        other = state_after(data.draw(st.integers(0, 6)), fingerprint="other", n=9)
        path.write_text(json.dumps(reseal({**original, "ledger": other["ledger"]})))
        resealed = True
    try:
        got = read_state(folder)
    except CheckpointError as exc:
        assert getattr(exc, "path", None) == str(path), exc
        return
    if not resealed:
        assert got == original
        return
    # A forger's state that reads as sound: resuming from it is exact or refused.
    try:
        make_run().resume(got)
    except CheckpointError:
        pass
