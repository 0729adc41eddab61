"""The stamping collector over both sources: gap-fill slices, requeues,
restored buffers, crashes at arbitrary moments, and JSON-only state."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.torch import (  # noqa: E402
    SeekableSource,
    SnapshotMissingError,
    SnapshotSource,
    StreamCollector,
    StreamMisalignedError,
    make_seekable_loader,
)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from frontier_core import (  # noqa: E402
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FailurePolicy,
    IllegalTransitionError,
    LedgerConfig,
    Status,
)

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

N = 7


def seekable(
    *, n: int = N, epochs: int = 2, bs: int = 3, nw: int = 0, shuffle: bool = True
) -> StreamCollector:
    loader = make_seekable_loader(
        [f"r{i}" for i in range(n)],
        batch_size=bs,
        seed=11,
        shuffle=shuffle,
        epochs=epochs,
        num_workers=nw,
    )
    return StreamCollector(
        SeekableSource(loader),
        LedgerConfig(stream_len=n * epochs, on_failure=FailurePolicy.RETRY, max_failures=2),
    )


class Counting(torch.utils.data.IterableDataset[int]):
    """An iterable stream that cannot be seeked: rows 100, 101, ..."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pos = 0

    def __iter__(self) -> Iterator[int]:
        while self.pos < self.n:
            self.pos += 1
            yield 100 + self.pos - 1

    def state_dict(self) -> dict[str, Any]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos = state["pos"]


def snapshotting(n: int = 14, bs: int = 3) -> StreamCollector:
    loader = StatefulDataLoader(Counting(n), batch_size=bs, collate_fn=list)
    return StreamCollector(
        SnapshotSource(loader, stream_len=n),
        LedgerConfig(stream_len=n, on_failure=FailurePolicy.RETRY, max_failures=2),
    )


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(state))
    return out


def test_take_slices_and_keeps_the_remainder() -> None:
    c = seekable(bs=4)
    first = c.take(3)
    assert [o for o, _ in first] == [0, 1, 2]
    assert c.pending == 1  # the rest of the batch is kept, not dropped
    second = c.take(3)
    assert [o for o, _ in second] == [3, 4, 5]
    assert c.ledger.count(Status.OUTSTANDING) == 6


def test_requeued_ordinals_are_taken_first_and_dropped_ones_forgotten() -> None:
    c = seekable()
    c.take(4)
    effect = c.failed([1, 2])
    assert effect.requeued == (1, 2)
    assert [o for o, _ in c.take(3)] == [1, 2, 4]
    effect = c.failed([2])
    assert effect.dropped == (2,)
    with pytest.raises(KeyError):
        c.row(2)
    assert [o for o, _ in c.take(1)] == [5]


def test_restored_buffer_is_filtered_and_evictions_come_back() -> None:
    c = seekable()
    got = c.take(5)
    c.landed([o for o, _ in got])
    c.trained([0, 1])
    state = roundtrip(c.state_dict())
    d = seekable(bs=2)
    resumed = d.resume(state, load_replay_buffer=True)
    assert resumed.covered == (2, 3, 4)
    assert [o for o, _ in d.take(2)] == [5, 6]  # 2, 3, 4 are in the restored buffer
    effect = d.evicted([3])
    assert effect.requeued == (3,)
    assert d.take(1) == [(3, got[3][1])]
    e = seekable(bs=5)
    e.resume(state, load_replay_buffer=False)
    assert [o for o, _ in e.take(3)] == [2, 3, 4]


def test_a_requeued_ordinal_without_its_row_is_refused_not_skipped() -> None:
    """The ledger requeues only ordinals the source stamped, whose rows the
    collector holds. Should one be missing all the same (a bug), the
    failure or eviction is refused and nothing changes: silently skipping
    it would leave it pending forever, never taken, holding the cut."""
    c = seekable()
    got = c.take(3)
    c.landed([2])
    c._rows.pop(1)  # the bug: the collector lost rows it should hold
    c._rows.pop(2)
    before, pending = c.ledger, c.pending
    with pytest.raises(IllegalTransitionError, match="holds no row") as failed:
        c.failed([0, 1])
    assert failed.value.event == "fail" and failed.value.ordinals == (1,)
    with pytest.raises(IllegalTransitionError, match=r"illegal evict of ordinals \[2\]"):
        c.evicted([2])
    assert c.ledger is before and c.pending == pending
    assert c.ledger.status(1) is Status.OUTSTANDING and c.ledger.failures(1) == 0
    assert c.failed([0]).requeued == (0,) and c.take(1) == [got[0]]


def test_an_evicted_group_not_yet_re_yielded_waits_for_the_source() -> None:
    c = seekable(bs=2)
    got = c.take(6)
    c.landed([0, 5])
    c.trained([0])
    d = seekable(bs=2)
    d.resume(roundtrip(c.state_dict()), load_replay_buffer=True)
    assert [o for o, _ in d.take(2)] == [1, 2]  # the source is at 3 now
    effect = d.evicted([5])  # restored, not re-yielded: no row here, and no error
    assert (effect.unstamped, effect.requeued, effect.dropped) == ((5,), (), ())
    assert d.failures(5) == 1 and d.ledger.status(5) is Status.UNSTAMPED
    assert d.take(3) == [got[3], got[4], got[5]]  # it comes back with the stream


def test_misaligned_loader_is_refused() -> None:
    c = seekable()
    c.take(2)
    state = roundtrip(c.state_dict())
    d = seekable()
    d.resume(state, load_replay_buffer=True)
    assert isinstance(d.source, SeekableSource)
    d.source.sampler.seek(3)  # someone moved the loader behind our back
    with pytest.raises(StreamMisalignedError, match="ledger expects 0"):
        d.take(1)


def test_a_resume_may_add_epochs_and_continues_the_same_stream() -> None:
    """docs/decisions.md's promise: a longer stream (more epochs) is accepted, and
    the resumed stream is the longer uninterrupted one's tail."""
    full = [o for o, _ in seekable(epochs=3).take(1000)]
    c = seekable(epochs=2)
    got = c.take(5)
    c.landed([o for o, _ in got])
    c.trained([o for o, _ in got[:3]])
    d = seekable(epochs=3)
    d.resume(roundtrip(c.state_dict()), load_replay_buffer=True)
    assert [o for o, _ in d.take(1000)] == [o for o in full if o >= 3 and o not in (3, 4)]


def test_bad_states_fail_with_their_message() -> None:
    c = seekable()
    c.take(2)
    state = roundtrip(c.state_dict())
    with pytest.raises(CheckpointVersionError, match="version"):
        seekable().resume({**state, "version": 99}, load_replay_buffer=True)
    with pytest.raises(CheckpointCorruptError, match="keys"):
        seekable().resume({**state, "extra": 1}, load_replay_buffer=True)
    with pytest.raises(CheckpointCorruptError, match="checksum"):
        seekable().resume(
            {**state, "ledger": {**state["ledger"], "next_attempt": 99}}, load_replay_buffer=True
        )
    with pytest.raises(CheckpointMismatchError, match="seed"):
        bad = {**state["stream"], "sampler": {**state["stream"]["sampler"], "seed": 1}}
        seekable().resume({**state, "stream": bad}, load_replay_buffer=True)
    with pytest.raises(CheckpointMismatchError, match="never shorten"):
        seekable(epochs=1).resume(state, load_replay_buffer=True)
    with pytest.raises(CheckpointCorruptError, match="kind"):
        snapshotting().resume(state, load_replay_buffer=True)
    # A refused resume leaves the collector usable.
    d = seekable()
    with pytest.raises(CheckpointVersionError):
        d.resume({**state, "version": 99}, load_replay_buffer=True)
    assert [o for o, _ in d.take(2)] == [0, 1]


def test_snapshot_ring_is_bounded_and_a_miss_raises() -> None:
    c = snapshotting(n=60, bs=2)
    assert isinstance(c.source, SnapshotSource)
    for _ in range(25):
        got = [o for o, _ in c.take(2)]
        c.landed(got)
        c.trained(got)
        assert c.source.ring_size <= 2
    c.source._ring.clear()  # simulate a lost ring
    with pytest.raises(SnapshotMissingError, match="no loader snapshot at or below the cut 50"):
        c.state_dict()


def drive(
    c: StreamCollector, ops: list[tuple[str, int]], log: Counter[int]
) -> dict[str, Any] | None:
    """Apply ``ops`` (a naive async pipeline), checkpointing after each train;
    return the last checkpoint. ``log`` counts trained and dropped ordinals of
    the surviving lineage (rolled back by the caller on a crash)."""
    outstanding: list[int] = []
    buffered = list(c.ledger.ordinals(Status.BUFFERED))  # the restored buffer
    last = None
    for op, k in ops:
        if op == "take":
            outstanding += [o for o, _ in c.take(k)]
        elif op == "land" and outstanding:
            got, outstanding = outstanding[:k], outstanding[k:]
            c.landed(got)
            buffered += got
        elif op == "fail" and outstanding:
            got, outstanding = outstanding[-k:], outstanding[:-k]
            log.update(c.failed(got).dropped)
        elif op == "train" and buffered:
            got, buffered = buffered[:k], buffered[k:]
            c.trained(got)
            log.update(got)
            last = (roundtrip(c.state_dict()), Counter(log))
    return last  # type: ignore[return-value]


ops_strategy = st.lists(
    st.tuples(st.sampled_from(["take", "land", "fail", "train"]), st.integers(1, 4)),
    max_size=30,
)


@pytest.mark.parametrize("kind", ["seekable", "snapshot"])
@given(runs=st.lists(ops_strategy, min_size=1, max_size=4), bss=st.lists(st.integers(1, 4)))
@settings(max_examples=150, deadline=None)
def test_crashes_at_any_moment_cover_every_ordinal_once(
    kind: str, runs: list[list[tuple[str, int]]], bss: list[int]
) -> None:
    """Crash after each run of ops, resume from the last checkpoint with
    another batch size; finally drain. Every ordinal is trained or dropped
    exactly once in the surviving lineage."""

    def make(i: int) -> StreamCollector:
        bs = bss[i % len(bss)] if bss else 3
        return seekable(bs=bs) if kind == "seekable" else snapshotting(bs=bs)

    state: dict[str, Any] | None = None
    saved_log: Counter[int] = Counter()
    drain = [("take", 4), ("land", 4), ("train", 4)] * 30
    for i, ops in enumerate([*runs, drain]):
        c = make(i)
        if state is not None:
            c.resume(state, load_replay_buffer=i % 2 == 0)
        log = Counter(saved_log)  # the crash threw away what followed it
        saved = drive(c, ops, log)
        if saved is not None:
            state, saved_log = saved
    assert c.drained
    stream_len = N * 2 if kind == "seekable" else 14
    assert sorted(log) == list(range(stream_len))
    assert set(log.values()) == {1}


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize(("nw1", "nw2"), [(0, 0), (0, 2), (2, 0)])
def test_collector_resume_yields_the_uninterrupted_tail(shuffle: bool, nw1: int, nw2: int) -> None:
    full = [pair for pair in seekable(shuffle=shuffle).take(100)]
    c = seekable(bs=4, nw=nw1, shuffle=shuffle)
    got = c.take(6)  # stops inside epoch 0 with a batch half taken
    c.landed([o for o, _ in got])
    c.trained([o for o, _ in got])
    d = seekable(bs=5, nw=nw2, shuffle=shuffle)
    d.resume(roundtrip(c.state_dict()), load_replay_buffer=True)
    assert d.take(100) == full[6:]  # across the epoch boundary at 7


@pytest.mark.parametrize("nw", [0, 2])
def test_snapshot_resume_yields_the_uninterrupted_tail(nw: int) -> None:
    """A shuffled map-style StatefulDataLoader (its own RandomSampler, whose
    generator state is a tensor) bound by snapshots: the resumed stream after
    a save with a restart below the cut is the uninterrupted one's tail."""

    def make() -> StreamCollector:
        torch.manual_seed(3)
        loader = StatefulDataLoader(
            list(range(20)), batch_size=3, shuffle=True, num_workers=nw, collate_fn=list
        )
        return StreamCollector(SnapshotSource(loader, stream_len=20), LedgerConfig(stream_len=20))

    full = make().take(100)
    c = make()
    got = c.take(8)
    assert got == full[:8]
    c.landed([o for o, _ in got])
    c.trained([o for o, _ in got[:7]])  # cut 7: the snapshot base is 6
    state = roundtrip(c.state_dict())
    assert state["stream"]["base"] == 6
    d = make()
    d.resume(state, load_replay_buffer=True)
    assert d.take(100) == full[8:]  # 6 is below the cut, 7 in the restored buffer


def test_the_collector_refuses_an_overlapping_call_from_another_thread() -> None:
    """Not thread-safe, and says so: a call from a second thread while the
    first is inside ``take`` (blocked in the source) raises instead of
    racing; serialised calls from two threads are fine."""
    import threading

    from frontier_adapters import ConcurrentUseError, SequenceSource

    entered, release = threading.Event(), threading.Event()

    class Slow(SequenceSource):
        def pull(self):  # type: ignore[no-untyped-def]
            entered.set()
            release.wait(10)
            return super().pull()

    c = StreamCollector(Slow(list(range(8)), batch_size=4), LedgerConfig(stream_len=8))
    taken: list[object] = []
    worker = threading.Thread(target=lambda: taken.extend(c.take(2)))
    worker.start()
    assert entered.wait(10)
    with pytest.raises(ConcurrentUseError, match="not thread-safe"):
        c.take(1)
    release.set()
    worker.join(10)
    assert [o for o, _ in taken] == [0, 1]
    lock = threading.Lock()
    got: list[int] = []

    def serialised() -> None:
        with lock:
            got.extend(o for o, _ in c.take(1))

    threads = [threading.Thread(target=serialised) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(got) == [2, 3, 4, 5]


def test_a_resume_must_say_whether_the_buffer_came_back() -> None:
    """The default used to be "restored": a trainer that never reloaded its
    buffer then waited forever for groups that would not come back. Now the
    caller must say, and the Stateful path (no options) regenerates them."""
    c = seekable()
    got = c.take(4)
    c.landed([o for o, _ in got])
    c.trained([got[0][0]])
    state = roundtrip(c.state_dict())
    with pytest.raises(TypeError):
        seekable().resume(state)  # type: ignore[call-arg]
    d = seekable()
    d.load_state_dict(state)
    assert [o for o, _ in d.take(3)] == [o for o, _ in got[1:]]
