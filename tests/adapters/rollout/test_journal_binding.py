"""The rollout journal binding (``RolloutJournal``): what a resume gets back
from a real journal file, under each reuse policy, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from frontier_adapters.rollout import RolloutJournal, resumed_sample

from frontier_core import LedgerConfig, SampleLedger, Status
from frontier_core.journal import JournalBehindError, JournalMismatchError, Reuse, TokenPayload

CONFIG = LedgerConfig(stream_len=8, samples=2, fingerprint="fp")


def sample(tokens: list[int], version: int = 0, reward: float | None = None) -> TokenPayload:
    return TokenPayload.of(tokens, [-0.5] * len(tokens), version, reward=reward)


def open_journal(path: Path, lineage: str = "run-a") -> RolloutJournal:
    return RolloutJournal(path / "journal", fingerprint="fp", lineage=lineage, progress_every=2)


def test_a_resume_reuses_sealed_siblings_and_continues_prefixes(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    ledger = SampleLedger.start(CONFIG)
    ledger = ledger.stamp(2).ledger
    step = ledger.dispatch([0, 1])
    ledger = step.ledger
    a00, a01, a10, a11 = step.effect.leases
    # Checkpoint before anything sealed.
    position = journal.mark(1)
    checkpoint = ledger.checkpoint()
    # After it: sibling (0,0) seals, (0,1) streams a prefix, group 1 seals whole.
    for lease, tokens in ((a00, [1, 2, 3]), (a10, [7]), (a11, [8, 9])):
        applied = ledger.seal([lease])
        assert applied.effect.sealed == (lease,)
        ledger = applied.ledger
        journal.sealed(lease, sample(tokens, reward=1.0))
    assert ledger.status(1) is Status.BUFFERED
    journal.progress(a01, sample([4, 5]))
    journal.writer.sync()
    journal.close()  # the crash: the ledger's later state is lost

    journal = open_journal(tmp_path)
    got = journal.recover(
        checkpoint, position=position, checkpoint_id=1, reuse=Reuse.everything(), fork=0, step=0
    )
    assert got.sealed == (a00, a10, a11)
    assert got.attempt_floor == a11.attempt + 1
    resumed = SampleLedger.resume(
        CONFIG,
        checkpoint,
        load_replay_buffer=True,
        sealed=got.sealed,
        attempt_floor=got.attempt_floor,
    ).ledger
    applied = resumed.stamp(2).ledger.dispatch([0, 1])
    # Group 1 comes back whole, without generation; of group 0 only sibling 1 runs.
    assert applied.effect.landed == (1,)
    assert set(applied.effect.reused) == {a00, a10, a11}
    (lease,) = applied.effect.leases
    assert (lease.ordinal, lease.sibling) == (0, 1) and lease.attempt >= got.attempt_floor
    assert got.sample(a00) == sample([1, 2, 3], reward=1.0)
    prefix = got.prefix(0, 1)
    assert prefix is not None
    whole = resumed_sample(prefix, sample([6], version=1, reward=0.0))
    assert list(whole.tokens()) == [4, 5, 6] and list(whole.versions()) == [0, 0, 1]
    # The old attempt of (0, 1) is fenced in the new life.
    assert applied.ledger.seal([a01]).effect.fenced == (a01,)
    journal.close()


def test_reuse_nothing_is_coverage_only(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    ledger = SampleLedger.start(CONFIG).stamp(1).ledger
    step = ledger.dispatch([0])
    position = journal.mark(1)
    checkpoint = step.ledger.checkpoint()
    journal.sealed(step.effect.leases[0], sample([1]))
    journal.writer.sync()
    got = journal.recover(
        checkpoint, position=position, checkpoint_id=1, reuse=Reuse.nothing(), fork=0, step=0
    )
    assert got.sealed == () and got.prefix(0, 1) is None
    # Attempts still start above everything journaled: nothing old passes as new.
    assert got.attempt_floor == step.effect.leases[0].attempt + 1
    journal.close()


def test_a_journal_of_another_branch_or_behind_the_checkpoint_is_refused(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    ledger = SampleLedger.start(CONFIG)
    position = journal.mark(7)
    checkpoint = ledger.checkpoint()
    with pytest.raises(JournalBehindError):
        journal.recover(
            checkpoint,
            position=position,
            checkpoint_id=8,
            reuse=Reuse.everything(),
            fork=0,
            step=0,
        )
    with pytest.raises(JournalBehindError):
        journal.recover(
            checkpoint,
            position=position + 5,
            checkpoint_id=7,
            reuse=Reuse.everything(),
            fork=0,
            step=0,
        )
    journal.close()
    with pytest.raises(JournalMismatchError):
        open_journal(tmp_path, lineage="another-run")


def test_a_missing_checkpoint_with_a_journal_is_not_a_fresh_start(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    step = SampleLedger.start(CONFIG).stamp(1).ledger.dispatch([0])
    journal.sealed(step.effect.leases[0], sample([1]))
    journal.writer.sync()
    with pytest.raises(ValueError, match="not a fresh start"):
        journal.recover(
            None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
        )
    journal.close()


def test_compaction_keeps_the_window_and_the_checkpoint_mark_valid(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    ledger = SampleLedger.start(CONFIG).stamp(3).ledger
    step = ledger.dispatch([0, 1, 2])
    ledger = step.ledger
    leases = step.effect.leases
    for lease in leases[:2]:  # group 0 lands
        ledger = ledger.seal([lease]).ledger
        journal.sealed(lease, sample([lease.sibling]))
    ledger = ledger.train([0]).ledger
    journal.sealed(leases[2], sample([5]))  # group 1, sibling 0
    position = journal.mark(1)
    checkpoint = ledger.checkpoint(save_sealed=False)
    size_before = journal.writer.path.stat().st_size
    journal.compact(range(checkpoint.ledger.cut, 1 << 62))
    assert journal.writer.path.stat().st_size < size_before
    got = journal.recover(
        checkpoint, position=position, checkpoint_id=1, reuse=Reuse.everything(), fork=0, step=0
    )
    assert got.sealed == (leases[2],)  # group 0 is trained: not needed any more
    journal.close()
