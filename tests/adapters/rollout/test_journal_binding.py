"""The rollout journal binding (``RolloutJournal``): what a resume gets back
from a real journal file, under each reuse policy, and what it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from frontier_adapters import JournalWithoutCheckpointError
from frontier_adapters.journal import RolloutJournal, resumed_sample
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frontier_core import (
    CheckpointMismatchError,
    IllegalTransitionError,
    Lease,
    Ledger,
    LedgerConfig,
    Status,
)
from frontier_core.journal import (
    JournalBehindError,
    JournalError,
    JournalMismatchError,
    Reuse,
    TokenPayload,
)

CONFIG = LedgerConfig(stream_len=8, samples=2, fingerprint="fp")


def sample(tokens: list[int], version: int = 0, reward: float | None = None) -> TokenPayload:
    return TokenPayload.of(tokens, [-0.5] * len(tokens), version, reward=reward)


def open_journal(path: Path, lineage: str = "run-a") -> RolloutJournal:
    return RolloutJournal(path / "journal", fingerprint="fp", lineage=lineage, progress_every=2)


def test_a_resume_reuses_sealed_siblings_and_continues_prefixes(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    ledger = Ledger.start(CONFIG)
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
    resumed = Ledger.resume(
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
    ledger = Ledger.start(CONFIG).stamp(1).ledger
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


def test_a_journal_of_another_branch_is_refused(tmp_path: Path) -> None:
    """Another record where the checkpoint saved its mark: not the journal
    the checkpoint was taken with (a journal that ends before the mark lost
    its tail instead: tests/adapters/journal/test_lost_tail.py)."""
    journal = open_journal(tmp_path)
    ledger = Ledger.start(CONFIG)
    position = journal.mark(7)
    journal.reserve(5)
    checkpoint = ledger.checkpoint()
    for at, number in ((position, 8), (position + 1, 7)):
        with pytest.raises(JournalBehindError, match="another branch"):
            journal.recover(
                checkpoint,
                position=at,
                checkpoint_id=number,
                reuse=Reuse.everything(),
                fork=0,
                step=0,
            )
    journal.close()
    with pytest.raises(JournalMismatchError):
        open_journal(tmp_path, lineage="another-run")


def test_a_missing_checkpoint_with_a_journal_is_not_a_fresh_start(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    step = Ledger.start(CONFIG).stamp(1).ledger.dispatch([0])
    journal.sealed(step.effect.leases[0], sample([1]))
    journal.writer.sync()
    with pytest.raises(ValueError, match="not a fresh start"):
        journal.recover(
            None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
        )
    journal.close()


def test_compaction_keeps_the_window_and_the_checkpoint_mark_valid(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    ledger = Ledger.start(CONFIG).stamp(3).ledger
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
    journal.compact(range(checkpoint.cut, 1 << 62))
    assert journal.writer.path.stat().st_size < size_before
    got = journal.recover(
        checkpoint, position=position, checkpoint_id=1, reuse=Reuse.everything(), fork=0, step=0
    )
    assert got.sealed == (leases[2],)  # group 0 is trained: not needed any more
    journal.close()


# -- a resume from an older checkpoint; the attempt reservation --------------------------


def fresh(journal: RolloutJournal, config: LedgerConfig = CONFIG) -> Ledger:
    """A fresh start as the README's example makes it: the journal
    recovered with no checkpoint, the ledger started at its floor and
    limit."""
    got = journal.recover(
        None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
    )
    return Ledger.start(config, attempt_floor=got.attempt_floor, attempt_limit=got.attempt_limit)


def payload_of(lease: Lease) -> TokenPayload:
    """A sample that names its own attempt: whoever gives it back gives the
    sample of exactly that lease."""
    return sample(list(lease), reward=float(lease.attempt))


def test_a_resume_from_an_older_checkpoint_after_compactions_gives_back_what_it_holds(
    tmp_path: Path,
) -> None:
    """The issue's scenario: checkpoints recorded with their sealed siblings
    (``checkpoint()``'s default), each followed by its compaction; a resume
    from the one before the last (``previous=1``) with ``Reuse.everything``.
    The older checkpoint lists sibling (0, 0) sealed, but the last
    compaction removed group 0 (trained by then) from the journal: the
    resume does not hold it, gives back every sibling it does hold, and the
    lineage trains every prompt exactly once."""
    journal = open_journal(tmp_path)
    ledger = fresh(journal)
    checkpoints: list[tuple[Any, int, int, set[int]]] = []
    trained: set[int] = set()

    def checkpoint(n: int) -> None:
        position = journal.mark(n)
        record = ledger.checkpoint()  # save_sealed=True: the README's default
        checkpoints.append((record, position, n, set(trained)))
        journal.compact(range(record.cut, 1 << 62))

    def seal(lease: Lease) -> None:
        nonlocal ledger
        applied = ledger.seal([lease])
        assert applied.effect.sealed == (lease,)
        ledger = applied.ledger
        journal.sealed(lease, payload_of(lease))

    checkpoint(0)
    step = ledger.stamp(2).ledger.dispatch([0, 1])
    ledger = step.ledger
    a00, a01, a10, _a11 = step.effect.leases
    seal(a00)
    checkpoint(1)  # records (0, 0) sealed; the journal holds it
    seal(a01)  # group 0 lands
    ledger = ledger.train([0]).ledger
    trained.add(0)
    seal(a10)
    checkpoint(2)  # cut 1: the compaction drops group 0's seals
    journal.close()  # the crash

    record, position, n, trained_before = checkpoints[-2]  # previous=1
    assert a00 in record.sealed
    journal = open_journal(tmp_path)
    got = journal.recover(
        record, position=position, checkpoint_id=n, reuse=Reuse.everything(), fork=0, step=0
    )
    assert got.sealed == (a10,)  # (0, 0) is not in the journal any more: generated again
    resumed = Ledger.resume(
        CONFIG,
        record,
        load_replay_buffer=True,
        sealed=got.sealed,
        attempt_floor=got.attempt_floor,
        attempt_limit=got.attempt_limit,
    ).ledger
    applied = resumed.stamp(2).ledger.dispatch([0, 1])
    for lease in applied.effect.reused:
        assert got.sample(lease) == payload_of(lease)  # no KeyError, and its own sample
    assert applied.effect.reused == (a10,)
    assert [(x.ordinal, x.sibling) for x in applied.effect.leases] == [(0, 0), (0, 1), (1, 1)]
    ledger = applied.ledger.seal(applied.effect.leases).ledger
    assert ledger.status(0) is Status.BUFFERED and ledger.status(1) is Status.BUFFERED
    ledger = ledger.train([0, 1]).ledger
    lineage = sorted([*trained_before, 0, 1])
    assert lineage == [0, 1]  # trained_before is empty: checkpoint 1 trained nothing
    journal.close()


def test_the_samples_saved_with_a_checkpoint_are_given_back_when_the_journal_lost_them(
    tmp_path: Path,
) -> None:
    """Level 1 with a journal: the caller saved the samples of the
    checkpoint's sealed siblings (``saved=``); a resume from that checkpoint
    after a later compaction holds them again, from the caller's copy, and
    refuses a saved sample of a sibling the checkpoint does not list."""
    journal = open_journal(tmp_path)
    ledger = fresh(journal)
    step = ledger.stamp(2).ledger.dispatch([0, 1])
    ledger = step.ledger
    a00, a01, _a10, _a11 = step.effect.leases
    ledger = ledger.seal([a00]).ledger
    journal.sealed(a00, payload_of(a00))
    position = journal.mark(1)
    record = ledger.checkpoint(save_sealed=True)
    saved = {a00: payload_of(a00)}  # written beside the checkpoint
    ledger = ledger.seal([a01]).ledger.train([0]).ledger
    journal.sealed(a01, payload_of(a01))
    journal.mark(2)
    journal.compact(range(ledger.checkpoint().cut, 1 << 62))
    journal.close()

    journal = open_journal(tmp_path)
    with pytest.raises(CheckpointMismatchError, match="does not record as sealed"):
        journal.recover(
            record,
            position=position,
            checkpoint_id=1,
            reuse=Reuse.everything(),
            fork=0,
            step=0,
            saved={a01: payload_of(a01)},
        )
    got = journal.recover(
        record,
        position=position,
        checkpoint_id=1,
        reuse=Reuse.everything(),
        fork=0,
        step=0,
        saved=saved,
    )
    assert got.sealed == (a00,) and got.sample(a00) == payload_of(a00)
    # Without the caller's copy it is generated again.
    again = journal.recover(
        record, position=position, checkpoint_id=1, reuse=Reuse.everything(), fork=0, step=0
    )
    assert again.sealed == ()
    journal.close()


def test_the_next_life_never_deals_an_attempt_of_a_killed_one(tmp_path: Path) -> None:
    """The issue's scenario, following the README's example: a life deals
    attempts, none of them journaled, and is killed. The next life deals
    other numbers, and the killed life's answers are fenced."""
    journal = open_journal(tmp_path)
    ledger = fresh(journal)
    position = journal.mark(0)
    record = ledger.checkpoint(save_sealed=False)
    step = ledger.stamp(2).ledger.dispatch([0, 1])
    old = step.effect.leases  # handed to workers; nothing journaled
    journal.close()  # SIGKILL

    journal = open_journal(tmp_path)
    got = journal.recover(
        record, position=position, checkpoint_id=0, reuse=Reuse.everything(), fork=0, step=0
    )
    ledger = Ledger.resume(
        CONFIG,
        record,
        load_replay_buffer=True,
        sealed=got.sealed,
        attempt_floor=got.attempt_floor,
        attempt_limit=got.attempt_limit,
    ).ledger
    applied = ledger.stamp(2).ledger.dispatch([0, 1])
    new = applied.effect.leases
    assert [x[:2] for x in new] == [x[:2] for x in old]
    assert not {x.attempt for x in new} & {x.attempt for x in old}
    late = applied.ledger.seal(old)  # the killed life's workers answer
    assert late.effect.fenced == old and late.effect.sealed == ()
    assert late.ledger == applied.ledger
    journal.close()


def test_a_ledger_refuses_to_deal_past_its_reservation_and_cover_extends_it(
    tmp_path: Path,
) -> None:
    """The low-level path: a ledger started with the journal's limit deals
    exactly the reserved attempts and refuses the next one with a typed
    error naming the fix; ``cover`` reserves another block durably (a later
    life starts above it) and raises the limit."""
    journal = open_journal(tmp_path)
    got = journal.recover(
        None,
        position=None,
        checkpoint_id=None,
        reuse=Reuse.everything(),
        fork=0,
        step=0,
        reserve=3,
    )
    assert (got.attempt_floor, got.attempt_limit) == (0, 3)
    ledger = Ledger.start(CONFIG, attempt_floor=0, attempt_limit=got.attempt_limit)
    ledger = ledger.stamp(3).ledger
    step = ledger.dispatch([0])  # attempts 0, 1
    with pytest.raises(IllegalTransitionError, match=r"RolloutJournal\.cover"):
        step.ledger.dispatch([1])  # 2, 3: 3 is not reserved
    ledger = journal.cover(step.ledger, 2, reserve=3)
    assert ledger.attempt_limit == 7 and journal.reserved == 7  # 4 + 3
    assert [x.attempt for x in ledger.dispatch([1]).effect.leases] == [2, 3]
    journal.close()
    journal = open_journal(tmp_path)
    again = journal.recover(
        None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
    )
    assert again.attempt_floor == 7  # above every attempt the first start could deal
    journal.close()


def test_cover_before_recover_is_refused(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    with pytest.raises(RuntimeError, match="recover"):
        journal.cover(Ledger.start(CONFIG), 2)
    journal.close()


def test_a_journal_with_samples_and_no_checkpoint_is_a_typed_error(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    ledger = fresh(journal)
    step = ledger.stamp(1).ledger.dispatch([0])
    journal.sealed(step.effect.leases[0], sample([1]))
    journal.writer.sync()
    with pytest.raises(JournalWithoutCheckpointError, match="not a fresh start") as info:
        journal.recover(
            None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
        )
    assert isinstance(info.value, ValueError) and isinstance(info.value, JournalError)
    journal.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_resume_gives_back_every_sibling_it_holds_and_deals_no_attempt_twice(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Random lives: groups dispatched, siblings sealed (journaled, or not
    before the kill), groups trained, checkpoints (with or without their
    sealed siblings, their samples saved or not) each followed by its
    compaction; then a kill and a resume from any of the checkpoints, the
    older ones included, under any reuse policy. Every sibling the resume
    holds is given back with its own sample, no attempt of the killed life
    is dealt again and each of its answers is fenced, and the lineage trains
    every prompt exactly once with a sample of every sibling."""
    tmp = tmp_path_factory.mktemp("j")
    n = 6
    config = LedgerConfig(stream_len=n, samples=2, fingerprint="fp")
    journal = open_journal(tmp)
    ledger = fresh(journal, config)
    reserve = data.draw(st.sampled_from([1, 2, 1024]), label="reserve")
    samples: dict[Lease, TokenPayload] = {}
    dealt: set[Lease] = set()
    trained: list[int] = []
    saves: list[tuple[Any, int, int, list[int], dict[Lease, TokenPayload]]] = []

    def checkpoint() -> None:
        ident = len(saves)
        position = journal.mark(ident)
        record = ledger.checkpoint(save_sealed=data.draw(st.booleans(), label="save_sealed"))
        keep = {x: samples[x] for x in record.sealed}
        saves.append((record, position, ident, list(trained), keep))
        journal.compact(range(record.cut, 1 << 62))

    checkpoint()
    for _ in range(data.draw(st.integers(0, 14), label="steps")):
        move = data.draw(st.sampled_from(["dispatch", "seal", "train", "checkpoint"]))
        running = sorted(ledger.running())
        if move == "dispatch" and not ledger.exhausted:
            step = ledger.stamp(data.draw(st.integers(1, 2)))
            ledger = journal.cover(step.ledger, 2 * len(step.effect.kept), reserve=reserve)
            applied = ledger.dispatch(step.effect.kept)
            ledger = applied.ledger
            dealt.update(applied.effect.leases)
        elif move == "seal" and running:
            lease = data.draw(st.sampled_from(running))
            applied = ledger.seal([lease])
            ledger = applied.ledger
            samples[lease] = payload_of(lease)
            if data.draw(st.booleans(), label="journaled"):
                journal.sealed(lease, samples[lease])
        elif move == "train":
            landed = sorted(ledger.ordinals(Status.BUFFERED))
            if landed:
                ledger = ledger.train(landed).ledger
                trained += landed
        elif move == "checkpoint":
            checkpoint()
    journal.close()  # the kill: what was not marked may or may not be durable

    record, position, ident, trained_before, keep = data.draw(st.sampled_from(saves))
    reuse = data.draw(st.sampled_from([Reuse.everything(), Reuse.nothing()]), label="reuse")
    journal = open_journal(tmp)
    got = journal.recover(
        record,
        position=position,
        checkpoint_id=ident,
        reuse=reuse,
        fork=0,
        step=0,
        saved=keep if data.draw(st.booleans(), label="hand in saved") else None,
    )
    for lease in got.sealed:
        assert got.sample(lease) == samples[lease]
    ledger = Ledger.resume(
        config,
        record,
        load_replay_buffer=False,
        sealed=got.sealed,
        attempt_floor=got.attempt_floor,
        attempt_limit=got.attempt_limit,
    ).ledger
    lineage = list(trained_before)
    while not ledger.drained:
        step = ledger.stamp(n)
        ledger = journal.cover(step.ledger, 2 * len(step.effect.kept), reserve=reserve)
        applied = ledger.dispatch(step.effect.kept)
        for lease in applied.effect.reused:
            assert got.sample(lease) == samples[lease]
        assert not {x.attempt for x in applied.effect.leases} & {x.attempt for x in dealt}
        late = applied.ledger.seal(sorted(dealt))
        assert late.effect.sealed == () and late.ledger == applied.ledger
        ledger = applied.ledger.seal(applied.effect.leases).ledger
        landed = sorted(ledger.ordinals(Status.BUFFERED))
        ledger = ledger.train(landed).ledger
        lineage += landed
    assert sorted(lineage) == list(range(n))
    journal.close()


def test_the_file_adapter_the_readme_names_is_exported(tmp_path: Path) -> None:
    """README: the file adapter is ``frontier_adapters.journal.JournalWriter``,
    beside the run's writer, in one package (and only there)."""
    import frontier_adapters
    import frontier_adapters.journal
    import frontier_adapters.rollout

    journal = open_journal(tmp_path)
    assert isinstance(journal.writer, frontier_adapters.journal.JournalWriter)
    assert issubclass(frontier_adapters.journal.JournalFileError, JournalError)
    for name in ("JournalWriter", "JournalFileError"):
        assert not hasattr(frontier_adapters, name)
    for name in ("RolloutJournal", "Recovered", "resumed_sample"):
        assert not hasattr(frontier_adapters.rollout, name)
    journal.close()
