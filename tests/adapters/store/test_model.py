"""Both stores against a dict: random programs of creates, swaps (with the
current version, a stale one, or none), deletes, reads and listings give
what the dict says. Many examples on POSIX, a few on the S3 server."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import Any

import pytest
from frontier_adapters.store import Store, StoreConflictError, open_store
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

KEYS = ["a", "b/c", "b/d", "e/f/g"]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["create", "swap", "delete", "get"]),
        st.sampled_from(KEYS),
        st.binary(max_size=8),
        st.sampled_from(["current", "stale", "none"]),
    ),
    max_size=25,
)


def run_program(store: Store, program: list[tuple[str, str, bytes, str]]) -> None:
    model: dict[str, tuple[bytes, str]] = {}
    seen: dict[str, list[str]] = {k: [] for k in KEYS}
    for op, key, data, which in program:
        note(f"{op}({key!r}, {data!r}, {which})")
        current = model.get(key)
        if op == "create" or (op == "swap" and which == "none"):
            if current is None:
                version = (
                    store.create(key, data)
                    if op == "create"
                    else store.swap(key, data, expected=None)
                )
                model[key] = (data, version)
                seen[key].append(version)
            else:
                with pytest.raises(StoreConflictError):
                    if op == "create":
                        store.create(key, data)
                    else:
                        store.swap(key, data, expected=None)
        elif op == "swap":
            stale = [v for v in seen[key] if current is None or v != current[1]]
            expected: Any = current[1] if which == "current" and current else None
            if which == "stale" or current is None:
                if not stale:
                    continue
                expected = stale[-1]
            if current is not None and expected == current[1]:
                version = store.swap(key, data, expected=expected)
                model[key] = (data, version)
                seen[key].append(version)
            else:
                with pytest.raises(StoreConflictError):
                    store.swap(key, data, expected=expected)
        elif op == "delete":
            store.delete(key)
            model.pop(key, None)
        got = store.get_versioned(key, max_bytes=8)
        want = model.get(key)
        assert (got.data, got.version) == want if got is not None else want is None
        assert store.list() == sorted(model)
        assert store.list("b") == sorted(k for k in model if k.startswith("b/"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=OPS)
def test_posix_store_is_a_dict(program: list[tuple[str, str, bytes, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_program(open_store(Path(tmp) / "store"), program)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(program=OPS)
def test_object_store_is_a_dict(s3_url: str, program: list[tuple[str, str, bytes, str]]) -> None:
    run_program(open_store(f"{s3_url}/{secrets.token_hex(4)}"), program)
