"""A journal that lost its tail with its node: the checkpoint (on shared
storage) saved a mark the journal no longer reaches. The resume proceeds
with what survived, says what was lost (``Recovered.lost``), fences every
attempt the lost life could have dealt, and the next resume from the same
checkpoint is proven against the rewritten journal. Driven through the
documented low-level API (``RolloutJournal`` + ``Ledger``), as the
durable-rollouts page writes it."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from frontier_adapters.journal import (
    LOST_ATTEMPTS,
    RESERVE,
    JournalLoss,
    Recovered,
    RolloutJournal,
)

from frontier_core import Checkpoint, IllegalTransitionError, Ledger, LedgerConfig
from frontier_core.journal import JournalBehindError, Reuse, TokenPayload

CONFIG = LedgerConfig(stream_len=4, samples=2, fingerprint="fp")


def sample(tokens: list[int]) -> TokenPayload:
    return TokenPayload.of(tokens, [-0.5] * len(tokens), 0)


def open_journal(path: Path) -> RolloutJournal:
    return RolloutJournal(path, fingerprint="fp", lineage="run-a", progress_every=2)


def fresh(path: Path) -> tuple[RolloutJournal, Ledger]:
    journal = open_journal(path)
    got = journal.recover(None, position=None, checkpoint_id=None, reuse=Reuse.everything(),
                          fork=0, step=0)  # fmt: skip
    ledger = Ledger.start(CONFIG, attempt_floor=got.attempt_floor, attempt_limit=got.attempt_limit)
    return journal, ledger


def resume(journal: RolloutJournal, checkpoint_id: int, position: int, checkpoint: Checkpoint,
           reuse: Reuse) -> tuple[Ledger, Recovered]:  # fmt: skip
    got = journal.recover(checkpoint, position=position, checkpoint_id=checkpoint_id,
                          reuse=reuse, fork=0, step=0)  # fmt: skip
    ledger = Ledger.resume(
        CONFIG, checkpoint, load_replay_buffer=True, sealed=got.sealed,
        attempt_floor=got.attempt_floor, attempt_limit=got.attempt_limit,
    ).ledger  # fmt: skip
    return ledger, got


@pytest.mark.parametrize("reuse", [Reuse.everything(), Reuse.nothing()], ids=["all", "nothing"])
def test_a_journal_lost_with_its_node_is_a_report_not_a_refusal(
    tmp_path: Path, reuse: Reuse, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "node" / "journal"
    path.parent.mkdir()
    journal, ledger = fresh(path)
    dispatched = ledger.stamp(2).ledger.dispatch([0, 1])
    ledger, dealt = dispatched.ledger, dispatched.effect.leases
    position = journal.mark(1)  # the checkpoint, on shared storage
    checkpoint = ledger.checkpoint()
    # After it, the life seals and streams, then the node is lost with its disk.
    for lease in dealt[:3]:
        ledger = ledger.seal([lease]).ledger
        journal.sealed(lease, sample([lease.ordinal, lease.sibling]))
    journal.progress(dealt[3], sample([9, 9]))
    reserved_by_lost_life = journal.reserved
    journal.close()
    shutil.rmtree(path.parent)
    path.parent.mkdir()

    journal = open_journal(path)
    with caplog.at_level(logging.WARNING, logger="frontier_adapters.journal"):
        ledger, got = resume(journal, 1, position, checkpoint, reuse)
    lost = got.lost
    assert isinstance(lost, JournalLoss)
    assert (lost.checkpoint, lost.position, lost.last, lost.source) == (1, position, 0, "new")
    assert lost.records == position and "lost with the node" in lost.reason
    assert lost.reason in caplog.text
    # Nothing survived to reuse; every attempt the lost life could deal is fenced.
    assert got.sealed == () and got.state.get(1, 1) is None
    assert got.attempt_floor == lost.attempt_floor >= reserved_by_lost_life
    assert lost.attempt_floor == checkpoint.next_attempt + LOST_ATTEMPTS
    for lease in dealt:
        assert ledger.seal([lease]).effect.fenced == (lease,)
    redo = ledger.stamp(2).ledger.dispatch([0, 1])
    assert sorted((x.ordinal, x.sibling) for x in redo.effect.leases) == [
        (0, 0), (0, 1), (1, 0), (1, 1)
    ]  # fmt: skip
    assert min(x.attempt for x in redo.effect.leases) >= lost.attempt_floor
    journal.close()


def test_a_journal_that_ends_before_the_mark_but_holds_records_is_refused(tmp_path: Path) -> None:
    """Only a journal lost whole is a loss. One that holds records and ends
    before the mark is a stale copy (a node back with an old file), or
    another branch's or another run's with the same names: its records
    cannot be told from this journal's remains, so it is refused and
    nothing of it is reused or changed."""
    path = tmp_path / "journal"
    journal, ledger = fresh(path)
    dispatched = ledger.stamp(2).ledger.dispatch([0, 1])
    ledger = dispatched.ledger
    a00, a01, a10, _a11 = dispatched.effect.leases
    journal.mark(1)
    ledger = ledger.seal([a00]).ledger
    journal.sealed(a00, sample([1, 2, 3]))
    journal.progress(a01, sample([4, 5]))
    journal.writer.sync()
    stale = path.read_bytes()  # the copy a node that comes back still holds
    ledger = ledger.seal([a10]).ledger
    journal.sealed(a10, sample([6]))
    position = journal.mark(2)
    checkpoint = ledger.checkpoint()
    journal.close()
    path.write_bytes(stale)

    journal = open_journal(path)
    with pytest.raises(JournalBehindError, match="missing"):
        resume(journal, 2, position, checkpoint, Reuse.everything())
    journal.close()
    assert path.read_bytes() == stale


def test_a_crash_right_after_the_loss_is_recorded_stays_fenced(tmp_path: Path) -> None:
    """The rewrite that remembers the mark holds this life's first
    reservation in the same file: a life killed right after it (before
    dealing anything) leaves the next one above the lost life's attempts."""
    path = tmp_path / "journal"
    journal, ledger = fresh(path)
    position = journal.mark(1)
    checkpoint = ledger.checkpoint()
    dealt = ledger.stamp(1).ledger.dispatch([0]).effect.leases
    journal.close()
    path.unlink()
    journal = open_journal(path)
    _, got = resume(journal, 1, position, checkpoint, Reuse.everything())
    assert got.lost is not None
    journal.writer.close()  # killed: nothing appended after recover returned
    journal = open_journal(path)
    ledger, again = resume(journal, 1, position, checkpoint, Reuse.everything())
    assert again.lost is None and again.attempt_floor > got.attempt_floor
    for lease in dealt:
        assert ledger.seal([lease]).effect.fenced == (lease,)
    journal.close()


def test_attempts_past_the_budget_need_a_checkpoint_first(tmp_path: Path) -> None:
    """A life reserves at most LOST_ATTEMPTS past its checkpoint's attempts
    before the next mark: what a loss of the journal fences. Past that,
    ``cover`` refuses by name; a mark makes room."""
    path = tmp_path / "journal"
    journal, ledger = fresh(path)
    journal.mark(0)
    ledger = journal.cover(ledger, LOST_ATTEMPTS // 2)
    with pytest.raises(IllegalTransitionError, match="write a checkpoint first"):
        journal.cover(ledger.with_attempt_limit(None, floor=LOST_ATTEMPTS), 1)
    journal.mark(1)
    journal.close()


def test_the_next_resume_from_the_same_checkpoint_is_proven(tmp_path: Path) -> None:
    """A second crash before the next checkpoint: the rewritten journal
    holds the checkpoint's mark, so the resume is exact (no second loss),
    and its attempts start above the crashed life's reservation."""
    path = tmp_path / "journal"
    journal, ledger = fresh(path)
    ledger = ledger.stamp(1).ledger.dispatch([0]).ledger
    position = journal.mark(1)
    checkpoint = ledger.checkpoint()
    journal.reserve(RESERVE * 3)
    journal.close()
    path.unlink()

    journal = open_journal(path)
    ledger, got = resume(journal, 1, position, checkpoint, Reuse.everything())
    assert got.lost is not None
    (lease,) = ledger.stamp(1).ledger.dispatch([0]).effect.leases[:1]
    journal.sealed(lease, sample([7, 7]))
    journal.writer.sync()
    second_life_reserved = journal.reserved
    journal.close()  # killed before its next checkpoint

    journal = open_journal(path)
    ledger, again = resume(journal, 1, position, checkpoint, Reuse.everything())
    assert again.lost is None
    assert again.sealed == (lease,)
    assert again.attempt_floor >= second_life_reserved
    # And a later checkpoint's mark is where it says.
    later = journal.mark(2)
    assert later > position
    journal.close()
    journal = open_journal(path)
    _, third = resume(journal, 2, later, ledger.checkpoint(), Reuse.everything())
    assert third.lost is None
    journal.close()


def test_another_branch_is_still_refused_after_a_loss(tmp_path: Path) -> None:
    """The loss rewrites the journal to remember the checkpoint's mark, not
    any mark: a checkpoint whose mark the rewritten journal does not hold
    at its position is another branch's."""
    path = tmp_path / "journal"
    journal, ledger = fresh(path)
    position = journal.mark(1)
    checkpoint = ledger.checkpoint()
    journal.close()
    path.unlink()
    journal = open_journal(path)
    resume(journal, 1, position, checkpoint, Reuse.everything())
    journal.close()
    journal = open_journal(path)
    with pytest.raises(JournalBehindError, match="another branch"):
        resume(journal, 3, position, checkpoint, Reuse.everything())
    journal.close()


def test_a_loss_after_more_lives_than_the_attempts_hold_is_not_a_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each life since the checkpoint moves a loss's floor by
    LOST_ATTEMPTS (a second loss stays fenced); more lives than the run's
    2**32 attempts hold (a crash loop without a checkpoint) are counted as
    many as fit, with a warning, never a refusal."""
    path = tmp_path / "journal"
    journal, ledger = fresh(path)
    position = journal.mark(1)
    checkpoint = ledger.checkpoint()
    journal.close()
    floors = {}
    for lives in (1, 2, 10**6):
        path.unlink(missing_ok=True)
        journal = open_journal(path)
        with caplog.at_level(logging.WARNING, logger="frontier_adapters.journal"):
            got = journal.recover(
                checkpoint, position=position, checkpoint_id=1, reuse=Reuse.everything(),
                fork=0, step=0, lives=lives,
            )  # fmt: skip
        journal.close()
        assert got.lost is not None
        floors[lives] = got.attempt_floor
    assert floors[1] == checkpoint.next_attempt + LOST_ATTEMPTS
    assert floors[2] == checkpoint.next_attempt + 2 * LOST_ATTEMPTS
    assert floors[10**6] + RESERVE <= 1 << 32 and floors[10**6] > floors[2]
    assert "fences the attempts of" in caplog.text
