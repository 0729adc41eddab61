"""A local Ray cluster bound to the loopback interface only.

The rig's Ray jobs, the Ray benchmark and the tests start Ray through ``init_ray``.
Left alone, Ray on Linux takes the machine's outward-facing address as its
node IP and its servers (GCS, raylet, object manager, the workers' gRPC
servers, the agents) listen on it or on every interface. With the node IP
127.0.0.1 they listen on the loopback interface only.

Ray resolves an explicit ``ray.init(_node_ip_address="127.0.0.1")`` back to
the outward address on Linux (``ray._private.services
.resolve_ip_for_localhost``); it keeps the loopback address when its cluster
mode is off, which is its default on macOS and Windows and is set on Linux
by ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``. Ray reads that variable when it
is imported (``ray_constants.ENABLE_RAY_CLUSTER``), so ``init_ray`` sets it
in the environment (for every process Ray or the rig spawns) and on the
imported constant (for a process that imported Ray before), and then checks
the node IP Ray settled on: anything but loopback raises. A job that must
reach other machines connects to a real cluster with ``address=``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

#: The environment that keeps Ray on the loopback interface.
LOOPBACK_ENV: Mapping[str, str] = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def loopback_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``LOOPBACK_ENV``:
    for subprocesses that start or join Ray."""
    return {**(os.environ if base is None else base), **LOOPBACK_ENV}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address, IPv4-mapped IPv6 included) is a
    loopback address."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)


def keep_ray_on_loopback() -> None:
    """Make this process's Ray take 127.0.0.1 as its node IP (see the module
    docstring); the processes it spawns inherit the environment."""
    os.environ.update(LOOPBACK_ENV)
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def init_ray(address: str | None = None, *, num_cpus: int = 2) -> str:
    """Start a local cluster of ``num_cpus`` CPUs on 127.0.0.1 (no
    dashboard) and return its GCS address; raises ``RuntimeError`` (after
    shutting Ray down) if Ray's node IP or GCS address is not loopback.

    With ``address``, connect to that cluster instead: its nodes' addresses
    are its own (a cluster started here by ``init_ray`` is on loopback)."""
    import ray

    if address:
        ray.init(address=address, log_to_driver=False)
        joined: str = ray.get_runtime_context().gcs_address
        return joined
    keep_ray_on_loopback()
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    node_ip: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    gcs: str = ray.get_runtime_context().gcs_address
    if not (is_loopback(node_ip) and is_loopback(gcs.rpartition(":")[0])):
        ray.shutdown()
        raise RuntimeError(
            f"Ray did not start on the loopback interface: node IP {node_ip}, GCS {gcs}"
        )
    return gcs
