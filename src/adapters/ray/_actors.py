"""The Ray actors: the ledger actor (``LedgerService`` as an actor), how a
rollout worker actor is declared, the ledger actor's death as
``LedgerLostError`` and its silence as ``LedgerTimeoutError``, and a SIGKILL
of an actor process of a one-node local cluster.

This module imports ray, never torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from .._service import LedgerService


class LedgerLostError(RuntimeError):
    """The ledger actor died (or its node did): rebuild it from the last
    checkpoint."""


class LedgerTimeoutError(TimeoutError):
    """A ledger actor call did not answer within its timeout. The actor may
    still be alive (and own the journal), so this is not ``LedgerLostError``:
    a driver that rebuilt it from the checkpoint could run two writers. Stop
    and look instead."""


#: Seconds a ledger actor call may take (``ledger_call``, the fleet's
#: calls, a worker's pid): its calls do no waiting of their own, so past
#: this the actor, its node or the cluster is stuck.
LEDGER_TIMEOUT = 300.0


def unreserved_actor(cls: type) -> Any:
    """``cls`` as a Ray actor class with no CPU reservation and no restart.
    A ledger actor sleeps between calls, and a small cluster must schedule
    as many rollout workers as asked: a CPU each would starve them. Ray
    never restarts one: the driver rebuilds a ledger from its checkpoint
    and the fleet replaces a worker, each knowing what the lost one held."""
    return ray.remote(num_cpus=0, max_restarts=0)(cls)


def ledger_call(ref: Any, timeout: float | None = LEDGER_TIMEOUT) -> Any:
    """``ray.get`` a ledger actor call; its death becomes ``LedgerLostError``,
    no answer within ``timeout`` seconds (default ``LEDGER_TIMEOUT``; ``None``
    waits for ever) ``LedgerTimeoutError``. An exception raised inside the
    call (a bug, an illegal transition) is re-raised as Ray's
    ``RayTaskError``."""
    try:
        return ray.get(ref, timeout=timeout)
    except RayTaskError:
        raise
    except RayActorError as exc:
        raise LedgerLostError(str(exc).splitlines()[0]) from exc
    except GetTimeoutError:
        raise LedgerTimeoutError(
            f"the ledger actor call did not answer within {timeout} s: the actor, its node "
            "or the cluster is stuck"
        ) from None


#: ``LedgerService`` as a Ray actor (no CPU reservation, no restart): the
#: single writer of the ledger, the replay buffer and, if it is given one,
#: the rollout journal and its attempt reservation (the journal's directory
#: must be on the actor's node: a local disk of a node the actor is pinned
#: to, or a shared file system).
LedgerActor: Any = unreserved_actor(LedgerService)


def rollout_actor(cls: type, *, max_concurrency: int = 4, **kwargs: Any) -> Any:
    """A rollout worker actor of class ``cls``: no CPU reservation (so a
    small cluster schedules as many as asked), no restart, and
    ``max_concurrency`` threads, so that ``set_ledger`` reaches a worker in
    the middle of a ``generate``."""
    actor: Any = unreserved_actor(cls)
    return actor.options(max_concurrency=max_concurrency).remote(**kwargs)


def sigkill_local(pid: int) -> None:
    """SIGKILL the actor process ``pid`` of this machine's one-node cluster;
    refused (``RuntimeError``) on a cluster of several nodes, where the pid
    of a remote actor could name a local process. An actor already dead
    (its process gone before the fleet noticed) is not an error: the kill
    wanted it dead."""
    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    alive = [node for node in nodes if node.get("Alive")]
    if len(alive) != 1:
        raise RuntimeError(f"SIGKILL by pid needs a one-node local cluster, not {len(alive)} nodes")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
