"""What the prompt-level and the sample-level Ray sides share: how their
actors are declared, the ledger actor's death as ``LedgerLostError``, and
the driver's fleet of rollout workers.

``Fleet`` is the Ray plumbing of a fleet: worker slots and their respawn,
the calls in flight (``ray.wait``), a live worker's call that raised told
apart from a dead worker (``RayTaskError`` against ``RayActorError``), the
calls queued on a dead worker, the calls of a lost ledger incarnation
reaped as they end, and one ``release`` through the ledger per ``poll``.
``RolloutFleet`` (prompt leases) and ``SampleFleet`` (sibling tasks) say
only what a call carries (``_carried``) and which of the ended calls'
holdings go back to the ledger (``_released``): that is where they differ.

This module imports ray, never torch.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

_H = TypeVar("_H")


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


class Ended(enum.Enum):
    """How a call of the fleet ended."""

    RETURNED = "returned"  # its value counts
    RAISED = "raised"  # the worker lives; the call raised
    DIED = "died"  # its worker is gone (it ended so, or was queued behind such a call)


class Fleet(Generic[_H]):
    """The driver's view of rollout worker actors, each call holding a tuple
    of ``_H`` (what ``release`` takes back: lease ids, sibling leases).

    ``spawn(slot)`` starts the worker actor of a slot (again after a death).
    ``fill()`` keeps ``calls_per_worker`` calls of ``per_call`` items in
    flight per worker (``max_ahead`` is the ledger's back pressure);
    ``poll(timeout)`` collects finished calls, releases what ``_released``
    picks, replaces dead workers, and returns the sum of the calls' values.
    Raises ``LedgerLostError`` when the ledger actor is gone.
    """

    def __init__(
        self,
        ledger: Any,
        spawn: Callable[[int], Any],
        size: int,
        *,
        per_call: int = 4,
        calls_per_worker: int = 1,
        max_ahead: int | None = None,
    ) -> None:
        self.ledger = ledger
        self.max_ahead = max_ahead
        self.per_call = per_call
        self.calls_per_worker = calls_per_worker
        self._spawn = spawn
        self.workers: dict[int, Any] = {slot: spawn(slot) for slot in range(size)}
        #: call ref -> (slot, what it holds)
        self._calls: dict[Any, tuple[int, tuple[_H, ...]]] = {}
        self._orphans: list[Any] = []
        #: Workers found dead, items failed through ``release``, and the
        #: first line of each error a live worker's call raised.
        self.deaths = 0
        self.released = 0
        self.errors: list[str] = []
        self.exhausted = False

    def _carried(self, got: Any) -> tuple[int, tuple[_H, ...]]:
        """What the ledger's ``take`` answer ``got`` gives a call: how many
        items (0: nothing to take) and what the call holds."""
        raise NotImplementedError

    def _released(self, ended: Sequence[tuple[Ended, tuple[_H, ...]]]) -> list[_H]:
        """What to release through the ledger, in order, of the calls that
        ended (in the order they ended, those queued on dead workers last)."""
        raise NotImplementedError

    @property
    def in_flight(self) -> int:
        """Calls in flight."""
        return len(self._calls)

    def set_ledger(self, ledger: Any) -> None:
        """A rebuilt ledger actor: the calls in flight belong to the lost
        one (what they hold is void there) and are forgotten."""
        self.ledger = ledger
        self._orphans += list(self._calls)
        self._calls.clear()
        self.exhausted = False

    def _reap(self) -> None:
        # Collect the voided calls as they end, so that their errors are
        # consumed here rather than reported by Ray as unhandled.
        if not self._orphans:
            return
        ready, self._orphans = ray.wait(self._orphans, num_returns=len(self._orphans), timeout=0)
        for ref in ready:
            try:
                ray.get(ref)
            except Exception:
                pass

    def fill(self) -> int:
        """Submit calls to workers with room; returns the items submitted."""
        busy: dict[int, int] = dict.fromkeys(self.workers, 0)
        for slot, _ in self._calls.values():
            busy[slot] += 1
        submitted = 0
        self.exhausted = False
        for slot, worker in self.workers.items():
            for _ in range(self.calls_per_worker - busy[slot]):
                got = ledger_call(self.ledger.take.remote(self.per_call, max_ahead=self.max_ahead))
                items, held = self._carried(got)
                if not items:
                    self.exhausted = not got.throttled
                    return submitted
                ref = worker.generate.remote(self.ledger, got)
                self._calls[ref] = (slot, held)
                submitted += items
        return submitted

    def poll(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for calls to finish; returns the sum of
        their values. Dead workers are replaced."""
        self._reap()
        if not self._calls:
            return 0
        ready, _ = ray.wait(list(self._calls), num_returns=1, timeout=timeout)
        if not ready:
            return 0
        ready, _ = ray.wait(list(self._calls), num_returns=len(self._calls), timeout=0)
        total = 0
        dead: set[int] = set()
        ended: list[tuple[Ended, tuple[_H, ...]]] = []
        for ref in ready:
            slot, held = self._calls.pop(ref)
            try:
                total += int(ray.get(ref))
                ended.append((Ended.RETURNED, held))
            except RayTaskError as exc:
                # The worker lives; its call raised. A dead ledger actor shows
                # up here as the cause of the worker's failed report: the ping
                # raises LedgerLostError then.
                ledger_call(self.ledger.ping.remote())
                self.errors.append(f"{type(exc.cause).__name__}: {exc.cause}")
                ended.append((Ended.RAISED, held))
            except RayActorError:
                dead.add(slot)
                ended.append((Ended.DIED, held))
        # Every other call queued on a dead worker fails too.
        for ref, (slot, held) in list(self._calls.items()):
            if slot in dead:
                ended.append((Ended.DIED, held))
                del self._calls[ref]
        if released := self._released(ended):
            self.released += ledger_call(self.ledger.release.remote(released)).failed
        for slot in dead:
            self._respawn(slot)
        return total

    def _respawn(self, slot: int) -> None:
        self.deaths += 1
        ray.kill(self.workers[slot], no_restart=True)
        self.workers[slot] = self._spawn(slot)
