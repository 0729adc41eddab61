"""Node loss is never a refusal (issue 23): the journal lost whole with its
node (node-local; with ``remote=``, the shipped copy lost too, on a shared
directory and on a real S3 server), once and then again before the next
checkpoint. A second loss stays fenced (no attempt of the lost lives is
dealt again), a life after a loss is not held to the lost life's budget,
and the run, audited, trains every prompt once. A resume from an older
checkpoint than the one a loss was recorded at is refused by type, naming
what to do (docs/storage.md says why)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from frontier_adapters import Run, SequenceSource
from frontier_adapters.store import open_store

from frontier_core import Lease, LedgerConfig
from frontier_core.journal import JournalBehindError, TokenPayload

FP = "run-losses-v1"
PROMPTS, SAMPLES = 12, 2


def config() -> LedgerConfig:
    return LedgerConfig(stream_len=PROMPTS, samples=SAMPLES, fingerprint=FP)


def full(o: int, s: int) -> list[int]:
    return [(o * 1000 + s * 100 + i) % 65536 for i in range(3 + (o + s) % 5)]


def sample(lease: Lease) -> TokenPayload:
    tokens = full(lease.ordinal, lease.sibling)
    return TokenPayload.of(tokens, [-0.5] * len(tokens), 0)


@pytest.fixture(params=["node", "directory", "s3"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if request.param == "node":
        return None  # the checkpoints outlive the node (root on shared storage), the journal not
    if request.param == "directory":
        return str(tmp_path / "shared")
    return str(request.getfixturevalue("s3_url"))


def open_life(node: Path, remote: str | None, **kw: object) -> Run:
    return Run.open(
        node, SequenceSource(list(range(PROMPTS))), config(), remote=remote, segment_seconds=0.05,
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def lose(node: Path, remote: str | None) -> None:
    """The node is gone with its journal, and so is every shipped copy."""
    if remote is None:
        (node / "journal").unlink()
        return
    shutil.rmtree(node)
    store = open_store(remote)
    for key in store.list("journal"):
        store.delete(key)


def step(run: Run, trained: dict[int, list[list[int]]], groups: int) -> None:
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


def finish(run: Run, trained: dict[int, list[list[int]]]) -> None:
    while not run.drained:
        step(run, trained, 3)
    run.close()
    assert trained == {o: [full(o, s) for s in range(SAMPLES)] for o in range(PROMPTS)}


def test_a_second_loss_before_the_next_checkpoint_stays_fenced(
    tmp_path: Path, remote: str | None
) -> None:
    node = tmp_path / "node"
    trained: dict[int, list[list[int]]] = {}
    first = open_life(node, remote)
    step(first, trained, 2)
    first.close()
    lose(node, remote)

    second = open_life(node, remote)
    assert second.recovered.lost is not None
    dealt = [lease for t in second.take(3) for lease in t.leases]
    second.close()  # no checkpoint: then its node is lost too
    lose(node, remote)

    third = open_life(node, remote)
    assert third.recovered.lost is not None
    assert third.recovered.attempt_floor > max(lease.attempt for lease in dealt)
    mine = [lease for t in third.take(3) for lease in t.leases]
    assert not set(mine) & set(dealt)
    for lease in dealt:  # a late answer of the lost life: fenced, never trained
        assert third.seal(lease, sample(lease)).fenced == (lease,)
    for lease in mine:
        assert lease in third.seal(lease, sample(lease)).sealed
    third.trained(sorted({lease.ordinal for lease in mine}))
    for o in sorted({lease.ordinal for lease in mine}):
        trained[o] = [full(o, s) for s in range(SAMPLES)]
    third.checkpoint(third.step + 1)
    finish(third, trained)


def test_a_life_after_a_loss_is_not_held_to_the_lost_lifes_budget(
    tmp_path: Path, remote: str | None
) -> None:
    """The life after the one that recorded the loss finds the journal
    whole and deals more than one block of attempts before its first
    checkpoint: no refusal ("write a checkpoint first")."""
    node = tmp_path / "node"
    trained: dict[int, list[list[int]]] = {}
    first = open_life(node, remote, reserve=4)
    step(first, trained, 2)
    first.close()
    lose(node, remote)
    second = open_life(node, remote, reserve=4)
    assert second.recovered.lost is not None
    second.take(1)
    second.close()  # killed before its checkpoint; its journal survives
    third = open_life(node, remote, reserve=4)
    assert third.recovered.lost is None
    taken = third.take(PROMPTS)  # every prompt left: many blocks of 4 attempts
    assert sum(len(t.leases) for t in taken) > 4
    ready = []
    for t in taken:
        for lease in t.leases:
            assert lease in third.seal(lease, sample(lease)).sealed
        trained[t.ordinal] = [full(t.ordinal, s) for s in range(SAMPLES)]
        ready.append(t.ordinal)
    third.trained(ready)
    third.checkpoint(third.step + 1)
    finish(third, trained)


def test_an_older_checkpoint_than_a_recorded_loss_is_refused_naming_what_to_do(
    tmp_path: Path, remote: str | None
) -> None:
    node = tmp_path / "node"
    trained: dict[int, list[list[int]]] = {}
    first = open_life(node, remote)
    step(first, trained, 2)
    step(first, trained, 2)
    first.close()
    lose(node, remote)
    second = open_life(node, remote)
    assert second.recovered.lost is not None and second.step == 2
    second.close()
    with pytest.raises(JournalBehindError, match="resume that later checkpoint"):
        open_life(node, remote, previous=1)
    third = open_life(node, remote)  # the checkpoint the loss was recorded at
    assert third.step == 2 and third.recovered.lost is None
    finish(third, trained)
