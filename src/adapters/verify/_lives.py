"""One life of a demo or torture: a child process in a process group of its
own, whose output is read and whose exit is awaited under a deadline.

Every demo and torture of the rig starts its lives as a ``Life``:
``frontier demo``'s workers, the torch, elastic, TRL and Ray
tortures' lives and drivers. A life that passes its deadline (a worker
whose trainer waits for a batch that never fills, a driver stuck on a dead
cluster) is SIGKILLed with its whole process group and the wait raises
``LifeDeadlineError`` naming the life, what was awaited and the deadline,
instead of hanging the parent (and the test that runs it) for ever.

The deadline of a life is the ``deadline`` its caller passes, by default
``life_deadline()``: ``$FRONTIER_LIFE_DEADLINE`` seconds if set, else
``DEFAULT_DEADLINE``. A torture's overall timeout caps each life's
deadline too (the caller passes the smaller).

The process-group helpers (``group_members``, ``kill_group``,
``await_group_gone``) are ``frontier demo``'s: a kill is a SIGKILL of the
whole group, and nothing of it may be left running after.

Not API: a test fixture of the verification jobs.
"""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import IO, Any, NoReturn

#: The deadline of one life, in seconds, unless its caller or
#: ``$FRONTIER_LIFE_DEADLINE`` says otherwise. A life of the demos and
#: tortures takes seconds to a few minutes on two busy cores.
DEFAULT_DEADLINE = 600.0
DEADLINE_ENV = "FRONTIER_LIFE_DEADLINE"
#: Seconds ``frontier audit`` may take on a torture's log (it reads it once).
AUDIT_DEADLINE = 300.0


class WorkerCrashed(RuntimeError):
    """A worker exited by itself with an error, or left processes behind."""


class LifeDeadlineError(TimeoutError):
    """A life passed its deadline. It was SIGKILLed with its whole process
    group before this was raised; ``name`` names the life, ``waiting``
    what the parent was waiting for, ``deadline`` the seconds it had."""

    def __init__(self, name: str, waiting: str, deadline: float) -> None:
        self.name = name
        self.waiting = waiting
        self.deadline = deadline
        super().__init__(
            f"{name}: passed its deadline of {deadline:g} s waiting for {waiting}; "
            "killed with its process group"
        )


def life_deadline(value: float | None = None) -> float:
    """The deadline of a life: ``value``, else ``$FRONTIER_LIFE_DEADLINE``,
    else ``DEFAULT_DEADLINE``. Raises ``ValueError`` for one that is not a
    positive finite number of seconds (naming where it came from)."""
    where = "the life deadline"
    if value is None:
        raw = os.environ.get(DEADLINE_ENV)
        if raw is None:
            return DEFAULT_DEADLINE
        where = f"${DEADLINE_ENV}"
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{where} must be a number of seconds, got {raw[:40]!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number of seconds, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{where} must be a positive finite number of seconds, got {value!r}")
    return float(value)


# -- process groups -----------------------------------------------------------------


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid`` (Linux
    ``/proc``; elsewhere, ``[pgid]`` while the group exists)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return sorted(members)


def shared_memory_of(pids: Sequence[int]) -> set[str]:
    """The ``/dev/shm`` files mapped by ``pids`` (vLLM's message queues,
    multiprocessing's semaphores): a SIGKILLed tree never unlinks them."""
    found: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                        found.add(parts[5].strip().removesuffix(" (deleted)"))
        except OSError:
            continue
    return found


def await_group_gone(pgid: int, timeout: float = 20.0) -> None:
    """Wait until process group ``pgid`` has no live process; raise
    ``WorkerCrashed`` naming what is left after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        raise WorkerCrashed(f"processes left behind by worker group {pgid}: {left}")


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing.resource_tracker" in f.read()
    except OSError:
        return False


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group ``pgid`` (the worker and everything it
    started), wait until none is left, and unlink the shared memory they
    had mapped. Raises ``WorkerCrashed`` if some survive 30 s of it.

    Python's multiprocessing resource tracker, if the group has one, is
    spared the signal: it is not the job but its janitor, and once the
    others are dead it unlinks the semaphores and shared memory they
    registered (nothing else would: their names are not mapped anywhere)
    and exits by itself. It is killed too if it has not after a while."""
    shm: set[str] = set()
    deadline = time.monotonic() + 10.0
    while True:
        members = group_members(pgid)
        targets = [p for p in members if not _is_resource_tracker(p)]
        if not targets or time.monotonic() > deadline:
            break
        shm |= shared_memory_of(targets)
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    try:
        await_group_gone(pgid, timeout=10.0)
    except WorkerCrashed:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await_group_gone(pgid)
    for path in shm:
        try:
            os.unlink(path)
        except OSError:
            pass


# -- a life -------------------------------------------------------------------------

#: ``stdout=PIPE``: the parent reads the life's output (``readline``,
#: ``lines``, ``read``).
PIPE = subprocess.PIPE
#: How long ``kill`` waits for the group leader's exit status once the
#: group is gone (it is a zombie by then: reaping is immediate).
_REAP = 10.0


class Life:
    """``cmd`` started in a process group of its own, with ``deadline``
    seconds to live from now (see the module doc).

    ``stdout`` is ``PIPE`` to read the life's output as text lines, or a
    file, a descriptor or ``subprocess.DEVNULL``; ``stderr`` and ``stdin``
    are ``Popen``'s (a ``stdin=PIPE`` is ``proc.stdin``).
    ``kill_tree(pgid)`` kills the whole group and returns once it is gone
    (default ``kill_group``). Every wait (``readline``, ``lines``,
    ``read``, ``wait``, ``wait_until``) returns within the deadline or
    kills the group and raises ``LifeDeadlineError``; on leaving a ``with``
    block the life is killed if it still runs (an exception in the
    parent leaves nothing behind) and its pipe closed."""

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        name: str,
        deadline: float,
        stdout: int | IO[Any] | None = PIPE,
        stderr: int | IO[Any] | None = None,
        stdin: int | IO[Any] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        kill_tree: Callable[[int], None] = kill_group,
    ) -> None:
        self.name = name
        self.deadline = life_deadline(deadline)
        self._kill_tree = kill_tree
        self._expires = time.monotonic() + self.deadline
        self.proc = subprocess.Popen(
            list(cmd),
            stdout=stdout,
            stderr=stderr,
            stdin=stdin,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,  # its own process group: killed whole
        )
        self._buffer = b""
        self._eof = self.proc.stdout is None

    @property
    def pid(self) -> int:
        """The life's pid, which is also its process group's id."""
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def remaining(self) -> float:
        """Seconds left before the deadline (0 once it passed)."""
        return max(0.0, self._expires - time.monotonic())

    def poll(self) -> int | None:
        return self.proc.poll()

    # -- output -----------------------------------------------------------

    def readline(self, waiting: str = "a line of output") -> str:
        """The next line of the life's output, with its newline (``""`` at
        the end of its output). Raises ``LifeDeadlineError`` (the life
        killed) if the deadline passes first."""
        while b"\n" not in self._buffer and not self._eof:
            self._fill(waiting)
        cut = self._buffer.find(b"\n") + 1 or len(self._buffer)
        line, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return line.decode("utf-8", errors="replace")

    def lines(self, waiting: str = "a line of output") -> Iterator[str]:
        """The life's output line by line to its end (``readline``)."""
        while line := self.readline(waiting):
            yield line

    def read(self, waiting: str = "the end of its output") -> str:
        """The rest of the life's output (``readline``'s deadline)."""
        while not self._eof:
            self._fill(waiting)
        rest, self._buffer = self._buffer, b""
        return rest.decode("utf-8", errors="replace")

    def _fill(self, waiting: str) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        ready, _, _ = select.select([fd], [], [], self.remaining())
        if not ready:
            self._expire(waiting)
        chunk = os.read(fd, 1 << 16)
        if chunk:
            self._buffer += chunk
        else:
            self._eof = True

    # -- exit -------------------------------------------------------------

    def wait(self, waiting: str = "its exit") -> int:
        """The life's exit status, once it exited. Raises
        ``LifeDeadlineError`` (the life killed) if the deadline passes
        first."""
        try:
            return self.proc.wait(timeout=self.remaining())
        except subprocess.TimeoutExpired:
            self._expire(waiting)

    def wait_until(
        self, ready: Callable[[], bool], waiting: str, *, interval: float = 0.02
    ) -> bool:
        """Poll ``ready()`` every ``interval`` s until it holds (``True``) or
        the life exited (``False``). Raises ``LifeDeadlineError`` (the life
        killed) if the deadline passes first."""
        while self.proc.poll() is None:
            if ready():
                return True
            if not self.remaining():
                self._expire(waiting)
            time.sleep(min(interval, self.remaining()))
        return False

    def kill(self) -> None:
        """SIGKILL the life's whole process group (``kill_tree``) and reap
        the life. Raises ``WorkerCrashed`` if the group survives it."""
        if self.proc.poll() is None or group_members(self.pid):
            self._kill_tree(self.pid)
        try:
            self.proc.wait(timeout=_REAP)
        except subprocess.TimeoutExpired:
            raise WorkerCrashed(f"{self.name}: pid {self.pid} survived its SIGKILL") from None

    def close(self) -> None:
        """Close the pipes of the life, if any."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

    def _expire(self, waiting: str) -> NoReturn:
        self.kill()
        raise LifeDeadlineError(self.name, waiting, self.deadline)

    def __enter__(self) -> Life:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            # Whatever ended the block (an exception in the parent, say),
            # nothing of the life is left running after it.
            if self.proc.poll() is None or group_members(self.pid):
                self.kill()
        finally:
            self.close()


def run(
    cmd: Sequence[str],
    *,
    name: str,
    deadline: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True)`` in a process
    group of its own, under ``deadline`` seconds: past it the whole group is
    SIGKILLed (``subprocess.run``'s own timeout kills the child only, and
    then waits for its pipes, which a grandchild may hold for ever) and
    ``LifeDeadlineError`` names ``name``."""
    deadline = life_deadline(deadline)
    proc = subprocess.Popen(
        list(cmd),
        stdout=PIPE,
        stderr=PIPE,
        text=True,
        env=None if env is None else dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        try:
            proc.communicate(timeout=_REAP)
        except subprocess.TimeoutExpired:
            pass  # a process that left the group holds the pipes: not ours to wait for
        raise LifeDeadlineError(name, "its exit", deadline) from None
    finally:
        if proc.poll() is None:  # an exception in the parent: nothing left behind
            kill_group(proc.pid)
            proc.wait(timeout=_REAP)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
