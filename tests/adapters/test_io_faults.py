"""A filesystem that fails under the run: every failure is a typed error,
the previous state is intact, and the next life resumes.

Each test fails the k-th filesystem call of one operation with ``EIO``
(for every k until the operation makes no k-th call), as a disk, a full
volume or a read-only remount would, and checks the promise of
docs/bad-input.md: the error is one of the project's (a
``StoreUnavailableError`` for the directory's own failure, an ``OSError``
too), and what was durable before is still readable and continued.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from frontier_adapters import Run, SequenceSource
from frontier_adapters.checkpoints import claim_epoch, read_checkpoint, write_checkpoint
from frontier_adapters.store import StoreLocationError, StoreUnavailableError
from frontier_adapters.torch import DistributedCheckpointer, read_distributed_checkpoint

from frontier_core import FrontierError, LedgerConfig
from frontier_core.journal import TokenPayload

#: The calls a checkpoint, a journal and a store make of the filesystem.
CALLS = (
    "open",
    "read",
    "write",
    "pwrite",
    "fsync",
    "ftruncate",
    "fstat",
    "lseek",
    "rename",
    "replace",
    "link",
    "mkdir",
    "listdir",
    "scandir",
    "unlink",
    "rmdir",
)
FP = "io-faults-v1"


class _Failing:
    """Fails the ``k``-th call (counted across ``CALLS``) with ``EIO``."""

    def __init__(self, k: int) -> None:
        self.k, self.calls, self.fired = k, 0, False

    def wrap(self, call: Callable[..., object]) -> Callable[..., object]:
        def failing(*args: object, **kwargs: object) -> object:
            self.calls += 1
            if self.calls == self.k:
                self.fired = True
                raise OSError(errno.EIO, "Input/output error (injected)")
            return call(*args, **kwargs)

        return failing


@contextmanager
def _fail_call(monkeypatch: pytest.MonkeyPatch, k: int) -> Iterator[_Failing]:
    failing = _Failing(k)
    with monkeypatch.context() as m:
        for name in CALLS:
            if hasattr(os, name):
                m.setattr(os, name, failing.wrap(getattr(os, name)))
        yield failing


def _each_failure(
    monkeypatch: pytest.MonkeyPatch, operation: Callable[[], object], after: Callable[[], None]
) -> int:
    """Run ``operation`` with its k-th call failed, for k = 1, 2, ... until
    it makes no k-th call; ``after`` checks the state each time. Returns
    how many failures were injected."""
    injected = 0
    for k in range(1, 10_000):
        with _fail_call(monkeypatch, k) as failing:
            try:
                operation()
            except FrontierError as exc:
                # The directory's own failure is named as the store's; any
                # other typed error is a refusal the failure caused (a
                # failed writer refusing its next call).
                if isinstance(exc, OSError):
                    assert isinstance(exc, StoreUnavailableError), repr(exc)
                    assert "injected" in str(exc) and exc.errno == errno.EIO
        if not failing.fired:
            break
        injected += 1
        after()
    return injected


def test_a_failing_checkpoint_write_read_or_claim_is_typed_and_keeps_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "checkpoints"
    write_checkpoint(root, 1, fingerprint=FP, json_parts={"trainer": {"step": 1}})
    steps = iter(range(2, 10_000))

    def still_readable() -> None:
        got = read_checkpoint(root, fingerprint=FP)
        assert got is not None and got.json_parts["trainer"]["step"] == got.step
        # ... and continued by the next write.
        step = next(steps)
        write_checkpoint(root, step, fingerprint=FP, json_parts={"trainer": {"step": step}})
        again = read_checkpoint(root, fingerprint=FP)
        assert again is not None and again.step == step

    def write() -> None:
        step = next(steps)
        write_checkpoint(root, step, fingerprint=FP, json_parts={"trainer": {"step": step}})

    injected = _each_failure(monkeypatch, write, still_readable)
    injected += _each_failure(
        monkeypatch, lambda: read_checkpoint(root, fingerprint=FP), still_readable
    )
    injected += _each_failure(monkeypatch, lambda: claim_epoch(root), still_readable)
    assert injected > 30  # every call of the three was failed once


def test_a_failing_multi_rank_commit_or_read_is_typed_and_keeps_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "multi"
    steps = iter(range(1, 10_000))

    def commit() -> None:
        step = next(steps)
        ck = DistributedCheckpointer(root, rank=0, world=2, fingerprint=FP, comm=None)
        ck.commit(step, [ck.write_part(step, {"step": step}, rank=r) for r in (0, 1)])

    def still_readable() -> None:
        assert read_distributed_checkpoint(root, fingerprint=FP) is not None
        commit()
        got = read_distributed_checkpoint(root, fingerprint=FP)
        assert got is not None and got.step == next(steps) - 1

    commit()
    injected = _each_failure(monkeypatch, commit, still_readable)
    injected += _each_failure(
        monkeypatch, lambda: read_distributed_checkpoint(root, fingerprint=FP), still_readable
    )
    assert injected > 30
    # What the failed writes left (an empty step directory among them) went
    # with the next commit: only the kept lineage remains.
    assert len([n for n in os.listdir(root) if n.startswith("step-")]) == 2


def test_a_run_whose_disk_fails_raises_typed_errors_and_the_next_life_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, prompts = tmp_path / "run", list(range(40))
    config = LedgerConfig(stream_len=len(prompts), samples=2, fingerprint=FP)
    trained: list[int] = []

    def life(steps: int) -> None:
        with Run.open(root, SequenceSource(prompts), config) as run:
            for _ in range(steps):
                if run.drained:
                    return
                batch = []
                for group in run.take(1):
                    for lease in group.leases:
                        run.progress(lease, TokenPayload.of([1], [-0.1], run.step))
                        run.seal(lease, TokenPayload.of([1, 2], [-0.1, -0.2], run.step))
                    batch.append(group.ordinal)
                run.trained(batch)
                run.checkpoint(run.step + 1)
                trained.extend(batch)

    life(1)
    # A life that fails anywhere (open, a progress record, a seal, a
    # checkpoint, the close) raised a typed error; the next one resumes.
    injected = _each_failure(monkeypatch, lambda: life(2), lambda: life(1))
    assert injected > 30
    with Run.open(root, SequenceSource(prompts), config) as run:
        assert run.step > 0


def test_a_run_root_that_is_a_file_is_refused_by_name(tmp_path: Path) -> None:
    config = LedgerConfig(stream_len=2, fingerprint=FP)
    (tmp_path / "file").write_bytes(b"not a directory")
    for root in (tmp_path / "file", tmp_path / "file" / "below"):
        with pytest.raises(StoreLocationError, match="not a directory"):
            Run.open(root, SequenceSource([0, 1]), config)
    assert (tmp_path / "file").read_bytes() == b"not a directory"
