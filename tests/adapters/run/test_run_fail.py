"""A failure survives a crash: what ``Run.fail``, ``failed`` and ``evicted``
send back to generation starts afresh in the next life too (no prefix, no
episode, no seal of the attempt the run gave up on is continued or
trained), as it does without the crash. Real journal files; the crash is a
close without a checkpoint, then ``Run.open``."""

from __future__ import annotations

from pathlib import Path

import pytest
from frontier_adapters import Run, SequenceSource
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frontier_core import FailurePolicy, Granularity, Lease, LedgerConfig
from frontier_core.journal import JsonPayload, TokenPayload, ToolCall, replay

FP = "run-fail-v1"
KINDS = ("prefix", "episode", "seal")


def config(granularity: Granularity = Granularity.SIBLING) -> LedgerConfig:
    return LedgerConfig(
        stream_len=2,
        samples=2,
        fingerprint=FP,
        on_failure=FailurePolicy.RETRY,
        max_failures=8,
        granularity=granularity,
    )


def source() -> SequenceSource:
    return SequenceSource([{"prompt": i} for i in range(2)])


def tokens(lease: Lease, n: int = 4) -> TokenPayload:
    """Tokens that name the attempt that made them."""
    return TokenPayload.of([lease.attempt % 1000 + i for i in range(n)], [-0.5] * n, 0)


def work(run: Run, lease: Lease, kind: str) -> None:
    """Journal some durable work of ``lease``: a prefix, an episode (a turn
    with an answered call, then a pending one), or a seal."""
    if kind == "prefix":
        assert run.progress(lease, tokens(lease))
    elif kind == "episode":
        for t in (0, 1):
            call = ToolCall("add", JsonPayload.of({"t": t}), run.call_key(lease, t))
            assert run.turn(lease, t, tokens(lease, 1), call)
            if t == 0:
                assert run.answer(lease, 0, call.key, JsonPayload.of(7))
    else:
        assert lease in run.seal(lease, tokens(lease)).sealed


def nothing_of(run: Run, gone: set[Lease], ordinal: int) -> None:
    """The next life hands ``ordinal`` out with nothing of ``gone``."""
    (t,) = [t for t in run.take(2) if t.ordinal == ordinal]
    assert not t.complete and not (set(t.reused) & gone), t.reused
    siblings = {g.sibling for g in gone}
    for lease in t.leases:
        if lease.sibling not in siblings:
            continue  # a sibling that did not fail goes on
        assert run.prefix(lease) is None
        assert run.episode(lease) is None


@pytest.mark.parametrize(
    ("how", "kind"),
    [
        *((how, kind) for how in ("fail", "failed", "fail-group") for kind in KINDS),
        ("evicted", "seal"),  # a landed group: every sibling sealed
    ],
)
def test_a_crash_after_a_failure_does_not_continue_what_failed(
    tmp_path: Path, kind: str, how: str
) -> None:
    granularity = Granularity.GROUP if how == "fail-group" else Granularity.SIBLING
    run = Run.open(tmp_path, source(), config(granularity), progress_every=1)
    taken = run.take(1)
    (t,) = taken
    first, second = t.leases
    if how == "evicted":
        for lease in t.leases:
            work(run, lease, "seal")
        run.landed([])  # the group landed with its second seal
        gone = {first, second}
        run.evicted([t.ordinal])
    elif kind == "seal" and how == "fail":
        # A sealed sibling does not fail: its sibling's failure leaves it.
        work(run, first, "seal")
        work(run, second, "prefix")
        gone = {second}
        (restarted,) = run.fail(second).leases
        assert restarted.attempt > second.attempt
    else:
        work(run, first, kind)
        work(run, second, "prefix" if kind == "seal" else kind)
        gone = {first, second}
        if how == "fail":
            gone = {first}
            (restarted,) = run.fail(first).leases
        elif how == "fail-group":
            assert run.fail(second).requeued == (t.ordinal,)
        else:
            assert run.failed([t.ordinal]).requeued == (t.ordinal,)
    run.close()  # the process dies right after the failure, no checkpoint

    with Run.open(tmp_path, source(), config(granularity), progress_every=1) as run:
        nothing_of(run, gone, t.ordinal)
        state = replay(run.journal.writer.read().records)
        for lease in gone:
            st = state.get(lease.ordinal, lease.sibling)
            assert st is not None and st.attempt > lease.attempt and not st.turns


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kinds=st.lists(st.sampled_from(["prefix", "episode"]), min_size=1, max_size=3),
    checkpoint=st.booleans(),
)
def test_a_sibling_failed_again_and_again_is_continued_only_from_its_last_attempt(
    tmp_path_factory: pytest.TempPathFactory, kinds: list[str], checkpoint: bool
) -> None:
    """A sibling fails under several attempts, each with durable work; the
    last attempt's own work is continued after the crash, and nothing of an
    earlier attempt (compacted away by a checkpoint or not)."""
    root = tmp_path_factory.mktemp("again")
    run = Run.open(root, source(), config(), progress_every=1)
    (t,) = run.take(1)
    lease = t.leases[0]
    for kind in kinds:
        work(run, lease, kind)
        (lease,) = run.fail(lease).leases
    if checkpoint:
        run.checkpoint(1)
    last = kinds[-1]
    work(run, lease, last)
    run.close()

    with Run.open(root, source(), config(), progress_every=1) as run:
        (again,) = [x for x in run.take(2) if x.ordinal == t.ordinal]
        mine = again.leases[0]
        assert mine.attempt > lease.attempt
        if last == "prefix":
            prefix = run.prefix(mine)
            assert prefix is not None and prefix == tokens(lease)
        else:
            episode = run.episode(mine)
            assert episode is not None and episode.attempt == lease.attempt
            assert [x.tokens for x in episode.turns] == [tokens(lease, 1)] * 2


@pytest.mark.parametrize("crash", [False, True])
def test_a_lost_attempt_is_continued_and_a_failed_one_is_not(tmp_path: Path, crash: bool) -> None:
    """``fail(lease, lost=True)``: the worker died, its tokens were fine; the
    new attempt continues what the journal holds of it, in this life and
    after a crash (the lost attempt's record is not voided)."""
    run = Run.open(tmp_path, source(), config(), progress_every=1)
    (t,) = run.take(1)
    first, second = t.leases
    work(run, first, "prefix")
    work(run, second, "prefix")
    (failed,) = run.fail(first).leases
    (lost,) = run.fail(second, lost=True).leases
    assert run.prefix(failed) is None
    assert run.prefix(lost) == tokens(second)
    assert run.metrics()["prefixes_continued"] == 1
    if crash:
        run.close()
        run = Run.open(tmp_path, source(), config(), progress_every=1)
        (again,) = run.take(1)
        failed, lost = again.leases
        assert run.prefix(failed) is None
        assert run.prefix(lost) == tokens(second)
    # The continued attempt's own progress is journaled after the prefix.
    longer = tokens(second).followed_by(tokens(lost, 2))
    assert run.progress(lost, longer)
    run.close()
    with Run.open(tmp_path, source(), config(), progress_every=1) as run:
        (again,) = run.take(1)
        assert run.prefix(again.leases[1]) == longer


def test_a_lost_episode_or_group_starts_afresh(tmp_path: Path) -> None:
    with Run.open(tmp_path / "episode", source(), config(), progress_every=1) as run:
        (t,) = run.take(1)
        first, _ = t.leases
        work(run, first, "episode")
        (again,) = run.fail(first, lost=True).leases
        assert run.prefix(again) is None and run.episode(again) is None
    group = config(Granularity.GROUP)
    with Run.open(tmp_path / "group", source(), group, progress_every=1) as run:
        (t,) = run.take(1)
        first = t.leases[0]
        work(run, first, "prefix")
        assert run.fail(first, lost=True).requeued == (t.ordinal,)
        (again,) = run.take(1)
        assert again.ordinal == t.ordinal
        assert [run.prefix(x) for x in again.leases] == [None, None]
