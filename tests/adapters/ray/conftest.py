"""The Ray tests' cluster: one small local cluster (2 CPUs, bound to
127.0.0.1 only) per test module that asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """One small local cluster on loopback for the module; its GCS address."""
    ray = pytest.importorskip("ray")
    from frontier_adapters.verify.local_ray import init_ray

    try:
        address = init_ray(num_cpus=2)
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"Ray cannot start a local cluster here: {exc}")
    try:
        yield address
    finally:
        ray.shutdown()
