"""A node that comes back: two lives of one run, the older one still
running after the newer one opened from the store (a preempted or
partitioned node whose process was not killed). On a shared directory and
on a real S3 server (SeaweedFS): the older life's checkpoint is refused by
type, naming both epochs, and moves nothing; what it ships after the
newer life claimed the run is never restored by a third life; the newer
life is not held back; and the run, audited, trains every prompt once."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from frontier_adapters import Run, SequenceSource
from frontier_adapters.checkpoints import (
    CheckpointFencedError,
    DatasetChangedError,
    published_checkpoints,
)
from frontier_adapters.journal import JournalFencedError, JournalFileError

from frontier_core import CheckpointCorruptError, Lease, LedgerConfig
from frontier_core.journal import Sealed, TokenPayload

FP = "run-fence-v1"
PROMPTS, SAMPLES = 6, 2


def config() -> LedgerConfig:
    return LedgerConfig(stream_len=PROMPTS, samples=SAMPLES, fingerprint=FP)


def source() -> SequenceSource:
    return SequenceSource(list(range(PROMPTS)))


def full(o: int, s: int) -> list[int]:
    return [(o * 1000 + s * 100 + i) % 65536 for i in range(5 + (o * 3 + s) % 7)]


def sample(lease: Lease) -> TokenPayload:
    tokens = full(lease.ordinal, lease.sibling)
    return TokenPayload.of(tokens, [-0.5] * len(tokens), 0)


def step(run: Run, trained: dict[int, list[list[int]]], groups: int) -> None:
    """Generate ``groups`` groups whole, train them and checkpoint."""
    ready = []
    for t in run.take(groups):
        got = {lease.sibling: list(run.sample(lease).tokens()) for lease in t.reused}
        for lease in t.leases:
            assert lease in run.seal(lease, sample(lease)).sealed
            got[lease.sibling] = full(lease.ordinal, lease.sibling)
        assert t.ordinal not in trained, f"prompt {t.ordinal} trained twice"
        trained[t.ordinal] = [got[s] for s in range(SAMPLES)]
        ready.append(t.ordinal)
    run.trained(ready)
    run.checkpoint(run.step + 1)


@pytest.fixture(params=["directory", "s3"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "directory":
        return str(tmp_path / "shared")
    return str(request.getfixturevalue("s3_url"))


def open_life(node: Path, remote: str) -> Run:
    return Run.open(node, source(), config(), remote=remote, segment_seconds=0.05)


def checkpoints_of(remote: str) -> list[str]:
    where = remote.rstrip("/") + "/checkpoints" if "://" in remote else Path(remote) / "checkpoints"
    return [p.name for p in published_checkpoints(where)]


def test_an_older_life_is_fenced_and_the_newer_one_goes_on(tmp_path: Path, remote: str) -> None:
    trained: dict[int, list[list[int]]] = {}
    old = open_life(tmp_path / "a", remote)
    step(old, trained, 2)  # step 1: prompts 0 and 1, checkpointed
    (t,) = old.take(1)
    old.seal(t.leases[0], sample(t.leases[0]))  # work after the checkpoint
    old.journal.durable()
    published = checkpoints_of(remote)

    # The node is partitioned; a new life opens elsewhere from the store.
    new = open_life(tmp_path / "b", remote)
    assert new.epoch == old.epoch + 1 and new.step == 1
    assert new.journal.restored is not None and new.journal.restored.source == "shipped"

    # The older life keeps going: its shipper finds it fenced, and its
    # checkpoint is refused by type, naming both epochs, moving nothing.
    began = time.monotonic()
    with pytest.raises(CheckpointFencedError) as refused:
        for lease in t.leases[1:]:
            old.seal(lease, sample(lease))
        old.trained([t.ordinal])
        old.checkpoint(old.step + 1)
    assert time.monotonic() - began < 30  # stopped, not retried until a timeout
    assert (refused.value.epoch, refused.value.current) == (old.epoch, new.epoch)
    assert f"epoch {old.epoch}" in str(refused.value) and f"epoch {new.epoch}" in str(refused.value)
    assert checkpoints_of(remote) == published
    with pytest.raises(CheckpointFencedError):
        old.close()  # what it could not ship is said, as the fence

    # The newer life is not held back: it ships, publishes and finishes.
    while not new.drained:
        step(new, trained, 2)
    new.close()
    assert checkpoints_of(remote)[0].startswith(f"ckpt-{new.step:06d}")
    assert trained == {o: [full(o, s) for s in range(SAMPLES)] for o in range(PROMPTS)}


def test_what_an_older_life_ships_after_the_claim_is_never_restored(
    tmp_path: Path, remote: str
) -> None:
    """The race the fence check cannot close (an upload checked just before
    the claim lands after it), forced by taking the older life's fence
    away: its segment is in the store, and a third life that loses the
    newer life's node restores the newer life's journal, never that one."""
    trained: dict[int, list[list[int]]] = {}
    old = open_life(tmp_path / "a", remote)
    step(old, trained, 1)
    new = open_life(tmp_path / "b", remote)
    (mine,) = new.take(1)
    new.seal(mine.leases[0], sample(mine.leases[0]))
    new.journal.durable()

    assert old.journal.shipper is not None
    old.journal.shipper.fence = None  # the check that passed just before the claim
    (theirs,) = old.take(1)
    old.seal(theirs.leases[0], sample(theirs.leases[0]))
    old.journal.durable()  # up in the store, under the older epoch

    shutil.rmtree(tmp_path / "b")  # the newer life's node is lost
    third = open_life(tmp_path / "c", remote)
    assert third.epoch == new.epoch + 1
    assert third.journal.restored is not None and third.journal.restored.source == "shipped"
    seals = {
        (r.ordinal, r.sibling, r.attempt)
        for r in third.journal.writer.read().records
        if isinstance(r, Sealed)
    }
    assert tuple(mine.leases[0]) in seals  # the newer life's work is reused
    assert tuple(theirs.leases[0]) not in seals  # the older life's never
    while not third.drained:
        step(third, trained, 2)
    third.close()
    assert trained == {o: [full(o, s) for s in range(SAMPLES)] for o in range(PROMPTS)}
    old.journal.shipper.close(0.1)


LIFE = """
import json, sys, pathlib
from frontier_adapters import Run, SequenceSource
from frontier_core import LedgerConfig
from frontier_core.journal import TokenPayload
node, remote = pathlib.Path(sys.argv[1]), sys.argv[2]
cfg = LedgerConfig(stream_len=6, samples=2, fingerprint="run-fence-v1")
run = Run.open(node, SequenceSource(list(range(6))), cfg, remote=remote, segment_seconds=0.05)
(t,) = run.take(1)
print(json.dumps({"epoch": run.epoch}), flush=True)
sys.stdin.readline()  # partitioned: a newer life opens meanwhile
try:
    for lease in t.leases:
        run.seal(lease, TokenPayload.of([1, 2, 3], [-0.5] * 3, 0))
    run.trained([t.ordinal])
    run.checkpoint(1)
    print(json.dumps({"published": True}), flush=True)
except Exception as exc:
    said = {"refused": type(exc).__name__, "epochs": [exc.epoch, exc.current]}
    print(json.dumps(said), flush=True)
"""


def test_an_older_life_in_its_own_process_is_refused(tmp_path: Path) -> None:
    """The same with the older life a real process that keeps running
    while the newer one opens (the shared directory: the fence holds
    between the processes of a host through the store's lock)."""
    remote = str(tmp_path / "shared")
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    child = subprocess.Popen(
        [sys.executable, "-c", LIFE, str(tmp_path / "a"), remote],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        first = json.loads(child.stdout.readline() or "{}")
        assert "epoch" in first, child.stderr.read() if child.stderr else ""
        new = open_life(tmp_path / "b", remote)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    said = json.loads(out.splitlines()[-1])
    assert said["refused"] in ("CheckpointFencedError", "JournalFencedError"), err[-2000:]
    assert said["epochs"] == [first["epoch"], new.epoch]
    assert checkpoints_of(remote) == ["ckpt-000000"]
    trained: dict[int, list[list[int]]] = {}
    while not new.drained:
        step(new, trained, 3)
    new.close()
    assert trained == {o: [full(o, s) for s in range(SAMPLES)] for o in range(PROMPTS)}
    assert issubclass(JournalFencedError, CheckpointFencedError)


def test_an_open_that_is_refused_fences_nothing(tmp_path: Path) -> None:
    """Mistaken opens of a live run's root, refused (its journal held by the
    live run; another dataset's fingerprint, on another node sharing the
    remote), claim no epoch: the live run goes on, and the open that
    succeeds next fences it."""
    remote = str(tmp_path / "shared")
    trained: dict[int, list[list[int]]] = {}
    live = open_life(tmp_path / "a", remote)
    step(live, trained, 1)
    with pytest.raises(JournalFileError, match="another writer holds"):
        open_life(tmp_path / "a", remote)
    other = LedgerConfig(stream_len=PROMPTS, samples=SAMPLES, fingerprint="another-dataset")
    with pytest.raises(DatasetChangedError):
        Run.open(tmp_path / "b", source(), other, remote=remote)
    # The same fingerprint over a source of another length: refused by the
    # collector's resume, which once came after the claim (and fenced).
    longer = SequenceSource(list(range(PROMPTS + 1)))
    with pytest.raises(CheckpointCorruptError, match="rows, this source has"):
        wider = LedgerConfig(stream_len=PROMPTS + 1, samples=SAMPLES, fingerprint=FP)
        Run.open(tmp_path / "d", longer, wider, remote=remote)
    step(live, trained, 1)  # not fenced
    assert live.epoch == 1
    newer = open_life(tmp_path / "c", remote)
    assert newer.epoch == 2
    with pytest.raises(CheckpointFencedError):
        step(live, trained, 1)
    with pytest.raises(CheckpointFencedError):
        live.close()
    newer.close()


@pytest.mark.parametrize("resumed", [False, True], ids=["fresh", "resumed"])
def test_two_opens_racing_on_one_node_fence_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resumed: bool
) -> None:
    """A second open of the same node's root comes in after the first one
    claimed its epoch and before its writer locked the journal (with no
    journal file yet, or one), and claims as soon as it can: it is refused
    by type before any claim, and the first life, live, is not fenced."""
    import frontier_adapters.run._run as run_module

    remote, node = str(tmp_path / "shared"), tmp_path / "a"
    if resumed:
        open_life(node, remote).close()
    claim, listed = run_module.claim_epoch, run_module.published_checkpoints
    reached, opened = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def second() -> None:
        try:
            outcome["run"] = open_life(node, remote)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            reached.set()

    racer = threading.Thread(target=second, daemon=True)

    def claim_then_wait(root: object) -> int:
        epoch = claim(root)  # type: ignore[arg-type]
        if threading.current_thread() is racer:
            reached.set()  # claimed: keep going only once the first has its writer
            assert opened.wait(60)
        return epoch

    def race_after_the_claim(root: object) -> object:
        if threading.current_thread() is not racer and "started" not in outcome:
            outcome["started"] = True
            racer.start()
            assert reached.wait(60)
        return listed(root)  # type: ignore[arg-type]

    monkeypatch.setattr(run_module, "claim_epoch", claim_then_wait)
    monkeypatch.setattr(run_module, "published_checkpoints", race_after_the_claim)
    try:
        first = open_life(node, remote)
    finally:
        opened.set()
        racer.join(60)
        monkeypatch.undo()
    assert "started" in outcome and "run" not in outcome
    assert isinstance(outcome["error"], JournalFileError)
    assert "another writer holds" in str(outcome["error"])
    assert first.epoch == (2 if resumed else 1)
    first.check_epoch()  # the refused open claimed nothing
    trained: dict[int, list[list[int]]] = {}
    while not first.drained:
        step(first, trained, 3)
    first.close()
    assert trained == {o: [full(o, s) for s in range(SAMPLES)] for o in range(PROMPTS)}
    again = open_life(node, remote)  # the hold was let go at close
    assert again.epoch == first.epoch + 1
    again.close()


def test_a_publish_between_an_opens_read_and_its_claim_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older life publishes after the opening life read the checkpoint
    and before its claim: the open continues that newer checkpoint, not
    the one it read first."""
    import frontier_adapters.run._run as run_module

    remote = str(tmp_path / "shared")
    trained: dict[int, list[list[int]]] = {}
    old = open_life(tmp_path / "a", remote)
    step(old, trained, 1)
    claim = run_module.claim_epoch
    published: list[int] = []

    def publish_then_claim(root: object) -> int:
        if not published:
            step(old, trained, 1)  # the older life is not fenced yet
            published.append(old.step)
        return claim(root)  # type: ignore[arg-type]

    monkeypatch.setattr(run_module, "claim_epoch", publish_then_claim)
    newer = open_life(tmp_path / "b", remote)
    monkeypatch.undo()
    assert newer.step == published[0] == 2
    with contextlib.suppress(CheckpointFencedError):
        old.close()  # fenced by the newer life's claim, with what it had not shipped
    newer.close()


def test_a_checkpoint_pruned_mid_read_before_the_claim_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older life publishes twice while the opening life reads the
    newest checkpoint before its claim, and its pruning removes the very
    directory being read: the open reads the new newest one (``LATEST``
    moved) and continues it, instead of failing with
    ``CheckpointFileError``."""
    import frontier_adapters.checkpoints._dirs as dirs_module

    remote = str(tmp_path / "shared")
    trained: dict[int, list[list[int]]] = {}
    old = open_life(tmp_path / "a", remote)
    step(old, trained, 1)
    read_dir = dirs_module._read_dir
    pruned: list[str] = []

    def prune_mid_read(root: Path, root_fd: int, name: str, *args: object, **kw: object) -> object:
        if not pruned:
            pruned.append(name)
            step(old, trained, 1)  # the older life is not fenced yet
            step(old, trained, 1)  # keep=2: the directory being read is pruned
            assert name not in checkpoints_of(remote)
        return read_dir(root, root_fd, name, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(dirs_module, "_read_dir", prune_mid_read)
    newer = open_life(tmp_path / "b", remote)
    monkeypatch.undo()
    assert pruned == ["ckpt-000001"] and newer.step == old.step == 3
    with contextlib.suppress(CheckpointFencedError):
        old.close()
    while not newer.drained:
        step(newer, trained, 2)
    newer.close()
    assert trained == {o: [full(o, s) for s in range(SAMPLES)] for o in range(PROMPTS)}


def test_check_epoch_tells_a_fenced_life_before_it_writes(tmp_path: Path) -> None:
    from frontier_adapters.checkpoints import claim_epoch

    remote = str(tmp_path / "shared")
    live = open_life(tmp_path / "a", remote)
    live.check_epoch()  # not fenced: nothing raised
    claimed = claim_epoch(live.checkpoints)
    with pytest.raises(CheckpointFencedError) as refused:
        live.check_epoch()
    assert (refused.value.epoch, refused.value.current) == (live.epoch, claimed)
    with contextlib.suppress(CheckpointFencedError):
        live.close()


def test_a_fenced_lifes_drain_raises_the_fence(tmp_path: Path) -> None:
    """A drain whose shipper a newer life fenced reported ``shipped=False``,
    as for a slow store, and the old life went on as if it could retry."""
    remote = str(tmp_path / "shared")
    trained: dict[int, list[list[int]]] = {}
    live = open_life(tmp_path / "a", remote)
    step(live, trained, 1)
    (group,) = live.take(1)
    live.progress(group.leases[0], sample(group.leases[0]))
    live.notice(5)
    newer = open_life(tmp_path / "c", remote)
    # Raised by the drain's own upload, or by the run's shipper if its
    # background upload met the fence first: either way, not "not shipped".
    with pytest.raises(CheckpointFencedError):
        live.drain(step=live.step + 1)
    newer.close()
