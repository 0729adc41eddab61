"""A ``StreamCollector`` (groups of 3) bound to a rollout journal: no attempt leaves it
that is not reserved durably in the journal first, so a later life starts
above every attempt an earlier one dealt, even when the caller forgets the
journal's floor and limit at the resume."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from frontier_adapters import SequenceSource, StreamCollector
from frontier_adapters.journal import RolloutJournal, read_journal

from frontier_core import FailurePolicy, IllegalTransitionError, Lease, LedgerConfig
from frontier_core.journal import Reserve, Reuse

CONFIG = LedgerConfig(
    stream_len=12, samples=3, fingerprint="fp", on_failure=FailurePolicy.RETRY, max_failures=9
)


def open_journal(tmp: Path) -> RolloutJournal:
    return RolloutJournal(tmp / "journal", fingerprint="fp", lineage="L")


def durable_reservation(tmp: Path) -> int:
    records = read_journal(tmp / "journal", fingerprint="fp", lineage="L").records
    return max([x.below for x in records if isinstance(x, Reserve)], default=0)


def collector(journal: RolloutJournal | None, reserve: int = 4) -> StreamCollector:
    source = SequenceSource(list(range(100, 112)), batch_size=4)
    return StreamCollector(source, CONFIG, journal=journal, reserve=reserve)


def test_every_attempt_dealt_is_reserved_in_the_journal_first(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.recover(
        None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0, reserve=4
    )
    c = collector(journal)
    dealt: list[Lease] = []
    for _ in range(3):
        for taken in c.take_samples(1):
            dealt += taken.leases
            # Durable before the caller sees it: read from the file, not the writer.
            assert all(x.attempt < durable_reservation(tmp_path) for x in dealt)
    effect = c.failed_samples([dealt[0]])
    assert effect.restart == ((0, 0),)
    (again,) = c.restart(effect.restart)
    assert again.attempt == 9 and again.attempt < durable_reservation(tmp_path)
    journal.close()


def test_a_resume_that_forgets_the_floor_and_limit_still_deals_no_attempt_twice(
    tmp_path: Path,
) -> None:
    """The killed life dealt attempts nobody journaled; the next life's
    caller passes neither ``attempt_floor`` nor ``attempt_limit`` to the
    resume. The collector, bound to the recovered journal, starts above the
    reservation anyway, and the killed life's answers are fenced."""
    journal = open_journal(tmp_path)
    journal.recover(
        None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
    )
    c = collector(journal)
    position = journal.mark(0)
    state = c.checkpoint_state()
    old = [x for t in c.take_samples(2) for x in t.leases]
    journal.close()  # SIGKILL: nothing journaled

    journal = open_journal(tmp_path)
    from frontier_core import Checkpoint

    record = Checkpoint.from_state_dict(state["ledger"])
    got = journal.recover(
        record, position=position, checkpoint_id=0, reuse=Reuse.everything(), fork=0, step=0
    )
    c = collector(journal)
    c.resume(state, load_replay_buffer=True, sealed=got.sealed)  # floor and limit forgotten
    new = [x for t in c.take_samples(2) for x in t.leases]
    assert [x[:2] for x in new] == [x[:2] for x in old]
    assert min(x.attempt for x in new) > max(x.attempt for x in old)
    effect = c.sealed(old)
    assert effect.sealed == () and effect.fenced == tuple(old)
    journal.close()


def test_a_bound_collector_on_a_journal_never_recovered_refuses_to_deal(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    c = collector(journal)
    with pytest.raises(RuntimeError, match="recover"):
        c.take_samples(1)
    journal.close()


def test_an_unbound_collector_refuses_to_deal_past_the_limit_it_resumed_with(
    tmp_path: Path,
) -> None:
    c = collector(None)
    state = c.checkpoint_state()
    c.resume(state, load_replay_buffer=True, sealed=(), attempt_floor=2, attempt_limit=5)
    (taken,) = c.take_samples(1)
    assert [x.attempt for x in taken.leases] == [2, 3, 4]
    pending = c.pending
    with pytest.raises(IllegalTransitionError, match="attempt_limit"):
        c.take_samples(1)
    # Refused with nothing changed: group 1 is still the next to go, once
    # the collector is bound to a (recovered) journal that reserves for it.
    assert c.pending == pending and c.ledger.next_attempt == 5
    journal = open_journal(tmp_path)
    journal.recover(
        None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0
    )
    c.journal = journal
    (taken,) = c.take_samples(1)
    assert taken.ordinal == 1 and [x.attempt for x in taken.leases] == [5, 6, 7]
    journal.close()


def test_reserve_must_be_a_positive_int() -> None:
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="reserve"):
            collector(None, reserve=bad)  # type: ignore[arg-type]


def test_take_refuses_a_count_that_is_not_an_int_at_least_zero() -> None:
    """A float, a negative, None or a bool is refused naming it, before
    anything is pulled or dispatched (2.5 used to take 3, -1 nothing)."""
    c = collector(None)
    for bad in (2.5, -1, None, True, "2"):
        for take in (c.take, c.take_samples):
            with pytest.raises(ValueError, match=f"n must be an int >= 0, got {bad!r}"):
                take(bad)  # type: ignore[arg-type]
    assert (c.pending, c.ledger.next_ordinal) == (0, 0)
    assert c.take(0) == [] and [o for o, _ in c.take(2)] == [0, 1]


def test_a_whole_group_take_reserves_its_attempts_first_too(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.recover(
        None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0, reserve=4
    )
    c = collector(journal)
    assert [o for o, _ in c.take(2)] == [0, 1]
    running = list(c.ledger.running())
    assert len(running) == 6 and all(x.attempt < durable_reservation(tmp_path) for x in running)
    c.landed([0, 1])  # reported whole: the siblings' attempts are fenced
    assert list(c.ledger.running()) == [] and c.sealed(running).fenced == tuple(running)
    journal.close()


def test_take_refuses_a_group_whose_kept_siblings_only_take_samples_gives_back() -> None:
    c = collector(None)
    state = c.checkpoint_state()
    c.resume(state, load_replay_buffer=True, sealed=[(0, 1, 0)])
    with pytest.raises(IllegalTransitionError, match="take_samples"):
        c.take(2)
    assert list(c.ledger.running()) == [] and c.pending == 4  # pulled, nothing dispatched
    first, second = c.take_samples(2)
    assert (first.ordinal, first.reused, [x.sibling for x in first.leases]) == (
        0,
        (Lease(0, 1, 0),),
        [0, 2],
    )
    assert second.ordinal == 1 and len(second.leases) == 3


@pytest.mark.parametrize("samples", [1, 3])
def test_a_resume_of_groups_or_of_a_bound_collector_must_say_what_it_kept(
    tmp_path: Path, samples: int
) -> None:
    config = attrs.evolve(CONFIG, samples=samples)
    source = SequenceSource(list(range(100, 112)), batch_size=4)
    c = StreamCollector(source, config)
    state = c.checkpoint_state()
    if samples == 1:
        c.resume(state, load_replay_buffer=True)  # a prompt-level resume keeps nothing
    else:
        with pytest.raises(TypeError, match="sealed="):
            c.resume(state, load_replay_buffer=True)
    c.journal = open_journal(tmp_path)
    with pytest.raises(TypeError, match="sealed="):
        c.resume(state, load_replay_buffer=True)
    c.journal.close()
    c.resume(state, load_replay_buffer=True, sealed=())
