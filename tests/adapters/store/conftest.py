"""The store conformance suite runs each test against both stores: a
``PosixStore`` in a temporary directory and an ``ObjectStore`` over a
fresh bucket of a real SeaweedFS server (``tests/_seaweed.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from frontier_adapters.store import Store, open_store

from ..._seaweed import s3_url as s3_url
from ..._seaweed import seaweed as seaweed
from ..._seaweed import seaweed_bucket as seaweed_bucket


@pytest.fixture(params=["posix", "s3"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def location(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the test's store lives: a directory, or ``s3://bucket/prefix``."""
    if kind == "posix":
        return str(tmp_path / "store")
    return str(request.getfixturevalue("s3_url"))


@pytest.fixture
def store(location: str) -> Store:
    return open_store(location)
