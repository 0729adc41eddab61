"""Shares, merge and split (frontier_core._shards): the share mapping, the
records, consistency refusals, property tests against a naive per-ordinal
model, random sharded runs with reshards, and an exhaustive small-scope
check that resharding at every reachable state keeps exactly-once.

The exhaustive bounds are raised outside CI with
``FRONTIER_SHARDS_LEN=5 FRONTIER_SHARDS_WORLDS=1,2,3,4 \\
.venv/bin/python -m pytest tests/core/test_shards.py -k exhaustive`` (proofs/ELASTIC.md).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from collections import deque
from collections.abc import Iterator

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FailurePolicy,
    FingerprintMismatchError,
    IllegalTransitionError,
    Ledger,
    LedgerConfig,
    ShardCheckpoint,
    ShardMismatchError,
    Share,
    Status,
    merge_shards,
    reshard,
    split_checkpoint,
)
from frontier_core._ranges import to_ranges
from frontier_core._shards import deal, interleave

FP = "stream-v1"

# -- the share ------------------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 7])
@pytest.mark.parametrize("base", [0, 1, 5])
def test_the_shares_of_a_world_tile_the_stream_above_the_base(world: int, base: int) -> None:
    stream_len = 23
    owners: dict[int, int] = {}
    for share in Share.tiling(world, base=base):
        n = share.local_len(stream_len)
        assert n is not None
        ordinals = share.global_ordinals(range(n))
        # Rank r reads base + r, base + r + world, ... in that order.
        assert ordinals == list(range(base + share.rank, stream_len, world))
        assert share.local_ordinals(ordinals) == list(range(n))
        for g in ordinals:
            assert g not in owners
            owners[g] = share.rank
            assert share.owns(g)
    assert sorted(owners) == list(range(base, stream_len))
    assert sum(s.local_len(stream_len) or 0 for s in Share.tiling(world, base=base)) == max(
        0, stream_len - base
    )


def test_a_share_refuses_what_it_does_not_own_and_bad_values() -> None:
    share = Share(4, 3, 1)
    assert str(share) == "rank 1 of 3 from ordinal 4"
    assert share.global_ordinal(0) == 5 and share.local_ordinal(11) == 2
    for g in (3, 4, 6, 7):
        assert not share.owns(g)
        with pytest.raises(ValueError, match="not in rank 1 of 3"):
            share.local_ordinal(g)
    assert share.local_len(None) is None and share.local_len(2) == 0
    for bad in [(-1, 1, 0), (0, 0, 0), (0, 2, 2), (0, 2, -1), (True, 2, 0), (0, 2.0, 0)]:
        with pytest.raises(ValueError):
            Share(*bad)  # type: ignore[arg-type]
    assert Share.from_json(share.to_json()) == share
    for junk in [None, [], {"base": 0, "world": 1}, {"base": 0, "world": 0, "rank": 0}]:
        with pytest.raises(CheckpointCorruptError):
            Share.from_json(junk)


def test_a_shares_config_is_the_local_stream_of_the_global_one() -> None:
    config = LedgerConfig(
        on_failure=FailurePolicy.RETRY, max_failures=4, stream_len=10, fingerprint=FP
    )
    local = Share(0, 3, 2).config(config)
    assert local.stream_len == 3 and local.max_failures == 4
    assert local.on_failure is FailurePolicy.RETRY
    assert local.fingerprint == f"{FP}#share=0/3/2" != Share(0, 3, 1).config(config).fingerprint


# -- the record -----------------------------------------------------------------------


def _shard(
    share: Share, stream_len: int | None = 12, step: int = 3, **kw: object
) -> ShardCheckpoint:
    c = Checkpoint(
        fingerprint=share.fingerprint(FP),
        stream_len=share.local_len(stream_len),
        **kw,  # type: ignore[arg-type]
    )
    return ShardCheckpoint(share, step, c)


def test_a_shard_record_round_trips_and_is_validated() -> None:
    s = _shard(Share(0, 3, 1), cut=1, trained_above_cut=[(2, 3)], failures=[(1, 1)])
    record = s.state_dict()
    assert ShardCheckpoint.from_state_dict(record, fingerprint=FP) == s
    assert s.fingerprint == FP
    with pytest.raises(FingerprintMismatchError):
        ShardCheckpoint.from_state_dict(record, fingerprint="other")
    with pytest.raises(CheckpointCorruptError, match="checksum"):
        ShardCheckpoint.from_state_dict({**record, "step": 4})
    with pytest.raises(CheckpointVersionError):
        ShardCheckpoint.from_state_dict({**record, "version": 2})
    with pytest.raises(CheckpointVersionError):
        ShardCheckpoint.from_state_dict({**record, "format": "x"})
    with pytest.raises(CheckpointCorruptError, match="missing keys"):
        ShardCheckpoint.from_state_dict({k: v for k, v in record.items() if k != "step"})
    with pytest.raises(CheckpointCorruptError):
        ShardCheckpoint.from_state_dict("not a dict")  # type: ignore[arg-type]
    # A ledger record of another share (or of the whole stream) is refused.
    with pytest.raises(ShardMismatchError, match="not one of this share"):
        ShardCheckpoint(Share(0, 3, 2), 3, s.checkpoint)
    with pytest.raises(ShardMismatchError):
        ShardCheckpoint(Share(0, 1, 0), 0, Checkpoint(cut=0, fingerprint=FP))
    with pytest.raises(ValueError):
        ShardCheckpoint(Share(0, 3, 1), -1, s.checkpoint)


# -- consistency ------------------------------------------------------------------------


def _tiling(
    world: int = 3, base: int = 0, step: int = 3, stream_len: int = 12
) -> list[ShardCheckpoint]:
    return [_shard(s, stream_len, step, cut=0) for s in Share.tiling(world, base=base)]


def test_merge_refuses_a_set_that_is_not_one_checkpoint() -> None:
    ok = _tiling()
    assert merge_shards(ok).cut == 0
    cases = {
        "missing": (ok[:2], "1 of 3 ranks' records are missing", (2,)),
        "twice": ([*ok, ok[1]], "given twice", (1,)),
        "steps": ([ok[0], ok[1], _tiling(step=4)[2]], "different steps", (2,)),
        "world": ([*ok[:2], _tiling(world=4)[2]], "do not tile one stream", (2,)),
        "base": ([*ok[:2], _tiling(base=3)[2]], "do not tile one stream", (2,)),
        "length": ([*ok[:2], _tiling(stream_len=20)[2]], "do not add up", ()),
        "empty": ([], "no records", ()),
    }
    for name, (shards, reason, ranks) in cases.items():
        with pytest.raises(ShardMismatchError, match=reason) as info:
            merge_shards(shards)
        assert isinstance(info.value, CheckpointMismatchError), name
        assert set(ranks) <= set(info.value.ranks), name
    other = ShardCheckpoint(
        Share(0, 3, 2),
        3,
        Checkpoint(cut=0, fingerprint=Share(0, 3, 2).fingerprint("x"), stream_len=3),
    )
    with pytest.raises(ShardMismatchError, match="different streams"):
        merge_shards([*ok[:2], other])
    with pytest.raises(FingerprintMismatchError):
        merge_shards(ok, fingerprint="x")
    unbounded = _shard(Share(0, 3, 2), None, cut=0)
    with pytest.raises(ShardMismatchError, match="unbounded"):
        merge_shards([*ok[:2], unbounded])
    with pytest.raises(TypeError):
        merge_shards([ok[0].checkpoint])  # type: ignore[list-item]


def test_split_refuses_a_base_above_the_cut() -> None:
    merged = Checkpoint(cut=4, fingerprint=FP, stream_len=10)
    with pytest.raises(ValueError, match="above the cut"):
        split_checkpoint(merged, 2, step=0, base=5)
    assert [s.share for s in split_checkpoint(merged, 2, step=0, base=2)] == list(
        Share.tiling(2, base=2)
    )


# -- a naive model: one ordinal at a time -------------------------------------------------


def naive_merge(shards: list[ShardCheckpoint], stream_len: int | None) -> dict[str, object]:
    base = shards[0].share.base
    resolved, dropped, retained, attempts = set(range(base)), set(), set(), {}
    for s in shards:
        c, g = s.checkpoint, s.share.global_ordinal
        resolved |= {g(o) for o in range(c.cut)}
        resolved |= {g(o) for o in c.trained()} | {g(o) for o in c.dropped()}
        dropped |= {g(o) for o in c.dropped()}
        retained |= {g(o) for o in c.retained_ordinals()}
        attempts.update({g(o): n for o, n in c.failures})
    top = stream_len if stream_len is not None else max(resolved | retained | {0}) + 2
    cut = next(g for g in range(top + 1) if g not in resolved or g == top)
    return {
        "cut": cut,
        "resolved": {g for g in resolved if g > cut},
        "dropped": {g for g in dropped if g > cut},
        "retained": retained,
        "attempts": attempts,
    }


def summary(c: Checkpoint) -> dict[str, object]:
    return {
        "cut": c.cut,
        "resolved": set(c.trained()) | set(c.dropped()),
        "dropped": set(c.dropped()),
        "retained": set(c.retained_ordinals()),
        "attempts": dict(c.failures),
    }


@st.composite
def shard_sets(draw: st.DrawFn) -> tuple[list[ShardCheckpoint], int | None]:
    """A consistent set of per-rank records: random statuses per local
    ordinal above each rank's own cut."""
    world = draw(st.integers(1, 6))
    base = draw(st.integers(0, 8))
    bounded = draw(st.booleans())
    stream_len = base + draw(st.integers(0, 40)) if bounded else None
    shards = []
    for share in Share.tiling(world, base=base):
        n = share.local_len(stream_len)
        top = n if n is not None else draw(st.integers(0, 12))
        cut = draw(st.integers(0, top))
        kinds = draw(st.lists(st.sampled_from("TDRAU"), min_size=top - cut, max_size=top - cut))
        above = list(range(cut, top))
        trained = [o for o, k in zip(above, kinds, strict=True) if k == "T" and o > cut]
        dropped = [o for o, k in zip(above, kinds, strict=True) if k == "D" and o > cut]
        unresolved = [o for o in above if o not in trained and o not in dropped]
        retained = [
            o for o, k in zip(above, kinds, strict=True) if k == "R" or (o == cut and k != "U")
        ]
        retained = [o for o in retained if o in unresolved]
        attempts = [
            (o, 1 + o % 3)
            for o, k in zip(above, kinds, strict=True)
            if k == "A" and o in unresolved
        ]
        shards.append(
            ShardCheckpoint(
                share,
                5,
                Checkpoint(
                    cut=cut,
                    trained_above_cut=to_ranges(trained),
                    dropped_above_cut=to_ranges(dropped),
                    retained=to_ranges(retained),
                    failures=attempts,
                    fingerprint=share.fingerprint(FP),
                    stream_len=n,
                ),
            )
        )
    return draw(st.permutations(shards)), stream_len


@settings(max_examples=300, deadline=None)
@given(shard_sets())
def test_merge_is_the_naive_union_of_the_ranks(
    data: tuple[list[ShardCheckpoint], int | None],
) -> None:
    shards, stream_len = data
    merged = merge_shards(shards, fingerprint=FP)
    assert merged.fingerprint == FP and merged.stream_len == stream_len
    assert summary(merged) == naive_merge(list(shards), stream_len)


@settings(max_examples=300, deadline=None)
@given(shard_sets(), st.integers(1, 7), st.integers(0, 6))
def test_split_then_merge_is_the_identity_up_to_the_forgotten_prefixes(
    data: tuple[list[ShardCheckpoint], int | None], world: int, below: int
) -> None:
    """merge(split(g, M)) == g: the same cut, resolved set, retained set and
    attempts; what split put below a rank's cut is listed as trained."""
    shards, _ = data
    merged = merge_shards(shards)
    base = max(0, merged.cut - below)
    split = split_checkpoint(merged, world, step=7, base=base)
    assert [s.share for s in split] == list(Share.tiling(world, base=base))
    assert all(s.step == 7 for s in split)
    again = merge_shards(split)
    got, want = summary(again), summary(merged)
    assert got["dropped"] <= want["dropped"]  # type: ignore[operator]
    del got["dropped"], want["dropped"]
    assert got == want
    # Each rank's cut is its lowest unresolved local ordinal.
    resolved = set(range(merged.cut)) | set(merged.trained()) | set(merged.dropped())
    for s in split:
        c = s.checkpoint
        assert all(s.share.global_ordinal(o) in resolved for o in range(c.cut))
        if c.stream_len is None or c.cut < c.stream_len:
            assert s.share.global_ordinal(c.cut) not in resolved


@settings(max_examples=200, deadline=None)
@given(shard_sets())
def test_reshard_to_the_same_world_gives_back_the_records_written(
    data: tuple[list[ShardCheckpoint], int | None],
) -> None:
    shards, _ = data
    world = shards[0].share.world
    assert list(reshard(shards, world)) == sorted(shards, key=lambda s: s.share.rank)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(0, 5),
    st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12)), max_size=12),
)
def test_deal_and_interleave_are_inverse(world: int, base: int, raw: list[tuple[int, int]]) -> None:
    ordinals = sorted({base + a + k for a, n in raw for k in range(n)})
    ranges = to_ranges(ordinals)
    columns = deal(ranges, base, world)
    for r, local in enumerate(columns):
        share = Share(base, world, r)
        got = {share.global_ordinal(o) for a, b in local for o in range(a, b)}
        assert got == {g for g in ordinals if share.owns(g)}
        assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(local))
    assert interleave(columns, base, world) == list(ranges)


def test_merge_and_split_cost_the_ranges_not_the_ordinals_they_span() -> None:
    """A rank far ahead, a range of 10^12 ordinals, a cut at 10^15: range
    arithmetic, never one step per ordinal of a range (under a window that
    lets the ranks hold that much)."""
    world, base = 64, 10**15
    shards = []
    for share in Share.tiling(world, base=base):
        lead = 10**12 if share.rank == 5 else 0
        shards.append(
            ShardCheckpoint(
                share,
                1,
                Checkpoint(
                    cut=10 + share.rank % 3,
                    trained_above_cut=[(20, 40), (50 + lead, 60 + lead)],
                    retained=[(15, 17)],
                    failures=[(18, 1)],
                    fingerprint=share.fingerprint(FP),
                ),
            )
        )
    start = time.process_time()
    merged = merge_shards(shards, max_window=10**13)
    for m in (1, 7, 64, 100):
        split_checkpoint(merged, m, step=1)
    assert reshard(shards, world, max_window=10**13) == tuple(shards)
    assert time.process_time() - start < 5.0
    assert merged.cut == base + 10 * world
    # The record lists what the ranks' windows hold, a few hundred ranges.
    assert len(merged.trained_above_cut) < 1_000


def _forged_set(**rank0: object) -> list[ShardCheckpoint]:
    """Two ranks of an unbounded stream: rank 1 honest at cut 0, rank 0's
    record of a few hundred bytes as given."""
    shares = Share.tiling(2)
    return [_shard(shares[0], None, **{"cut": 0, **rank0}), _shard(shares[1], None, cut=0)]


@pytest.mark.parametrize(
    "rank0",
    [
        # Just past 2 * max_window global ordinals: the old merge took
        # seconds here (and 49 s at 10**7), one range per row.
        {"trained_above_cut": [(1, 1_100_000)]},  # a huge range in one column
        {"cut": 1_100_000},  # a cut far past the other rank's
        {"retained": [(0, 1_100_000)]},
        {"failures": [(10**12, 1)]},
    ],
    ids=["range", "cut", "retained", "attempt"],
)
def test_a_forged_rank_record_is_refused_before_the_merge(rank0: dict[str, object]) -> None:
    """A range of 10**7 ordinals in one column of two made the merge emit a
    range per row (49 s, 2.9 GB): the ranks' window (default 2**20) is
    checked first, from the records' end points alone."""
    shards = _forged_set(**rank0)
    for record in shards:
        assert len(json.dumps(record.state_dict())) < 1_000
    start = time.process_time()
    with pytest.raises(CheckpointMismatchError, match="max_window"):
        merge_shards(shards)
    with pytest.raises(CheckpointMismatchError, match="max_window"):
        reshard(shards, 3)
    assert time.process_time() - start < 1.0


def test_the_merge_window_is_the_ranks_window_times_the_world() -> None:
    """Exactly ``world * max_window`` ordinals above the merged cut pass,
    and no more: rank 0 trained local 1..4 (global 2, 4, 6, 8), rank 1
    keeps failures for local 4 (global 9), so the set spans [0, 10)."""
    shares = Share.tiling(2)
    shards = [
        _shard(shares[0], None, cut=0, trained_above_cut=[(1, 5)]),
        _shard(shares[1], None, cut=0, failures=[(4, 1)]),
    ]
    merged = merge_shards(shards, max_window=5)
    assert merged.trained_above_cut == ((2, 3), (4, 5), (6, 7), (8, 9))
    assert reshard(shards, 2, max_window=5) == tuple(shards)
    assert merge_shards(shards) == merged
    with pytest.raises(CheckpointMismatchError, match="span 10 global ordinals"):
        merge_shards(shards, max_window=4)
    with pytest.raises(CheckpointMismatchError, match="span 10 global ordinals"):
        reshard(shards, 2, max_window=4)
    with pytest.raises(ValueError, match="max_window"):
        merge_shards(shards, max_window=0)


@pytest.mark.parametrize(
    "share",
    [
        {"base": 2**20000, "world": 1, "rank": 0},
        {"base": 2**64 + 1, "world": 1, "rank": 0},
        {"base": 0, "world": -(2**20000), "rank": 0},
        {"base": 0, "world": 2, "rank": [0]},
        {"base": 0, "world": 1, 5: 0},
    ],
    ids=["base-huge", "base-2^64", "world-huge", "rank-list", "int-key"],
)
def test_a_share_of_foreign_numbers_is_refused_with_a_bounded_message(
    share: dict[object, object],
) -> None:
    """An int of 20,000 bits made the message raise ``ValueError``; a base
    past 2**64 was accepted."""
    with pytest.raises(CheckpointCorruptError) as info:
        Share.from_json(share)
    assert len(str(info.value)) < 400


def test_a_shard_record_with_keys_of_mixed_types_is_refused() -> None:
    record: dict[object, object] = {**_shard(Share(0, 1, 0), cut=0).state_dict(), 5: 1, None: 2}
    with pytest.raises(CheckpointCorruptError, match="unknown keys"):
        ShardCheckpoint.from_state_dict(record)  # type: ignore[arg-type]
    for key, value in (("format", 2**20000), ("version", 2**20000), ("step", 2**20000)):
        with pytest.raises(CheckpointError) as info:
            record = {**_shard(Share(0, 1, 0), cut=0).state_dict(), key: value}
            ShardCheckpoint.from_state_dict(record)
        assert len(str(info.value)) < 400


# -- runs of several ranks, on real ledgers --------------------------------------------------


class Violation(AssertionError):
    pass


@attrs.frozen
class Run:
    """A sharded run: the tiling, each rank's ledger, and the lineage (the
    global ordinals resolved by the surviving history, with how)."""

    config: LedgerConfig
    base: int
    world: int
    ledgers: tuple[Ledger, ...]
    resolved: frozenset[int]

    @classmethod
    def start(cls, config: LedgerConfig, world: int) -> Run:
        shares = Share.tiling(world)
        return cls(
            config, 0, world, tuple(Ledger.start(s.config(config)) for s in shares), frozenset()
        )

    @property
    def shares(self) -> tuple[Share, ...]:
        return Share.tiling(self.world, base=self.base)

    def key(self) -> tuple[object, ...]:
        """The state up to the attempt numbering: a resume carries the
        ranks' highest attempt counter, so every crash raises it and the
        numbers alone would make the state space infinite; coverage depends
        on each group's status and failure count, not on which number its
        attempt got."""
        return (
            self.base,
            self.world,
            tuple(
                (
                    ledger.cut,
                    ledger.next_ordinal,
                    ledger.exhausted,
                    tuple(
                        (ledger.status(o), ledger.failures(o))
                        for o in range(ledger.cut, ledger.next_ordinal)
                    ),
                )
                for ledger in self.ledgers
            ),
            self.resolved,
        )

    def _resolve(self, ordinals: list[int], how: str) -> frozenset[int]:
        twice = [g for g in ordinals if g in self.resolved]
        if twice:
            raise Violation(f"NO-DUP: {how} resolves {twice} a second time")
        return self.resolved | frozenset(ordinals)

    def apply(self, rank: int, op: str, local: list[int]) -> Run:
        ledger, share = self.ledgers[rank], self.shares[rank]
        if op == "stamp":
            new, resolved = ledger.stamp(local[0]).ledger, self.resolved
        else:
            applied = getattr(ledger, op)(local)
            new = applied.ledger
            done = list(local) if op == "train" else list(applied.effect.dropped)
            resolved = self._resolve(share.global_ordinals(done), op)
        ledgers = (*self.ledgers[:rank], new, *self.ledgers[rank + 1 :])
        return attrs.evolve(self, ledgers=ledgers, resolved=resolved)

    def records(self, *, save_buffer: bool, step: int = 0) -> list[ShardCheckpoint]:
        return [
            ShardCheckpoint(s, step, ledger.checkpoint(save_buffer=save_buffer))
            for s, ledger in zip(self.shares, self.ledgers, strict=True)
        ]

    def resume(
        self,
        shards: list[ShardCheckpoint],
        world: int,
        *,
        load: bool,
        evict: bool,
        cache: dict[object, tuple[int, tuple[Ledger, ...]]] | None = None,
    ) -> Run:
        """A crash after the checkpoint ``shards``, resumed on ``world``
        ranks: the lineage is the checkpoint's (nothing after it survives),
        buffers travel to the new owners of their ordinals. The resumed
        ledgers depend on the records alone (``cache``)."""
        key = (tuple(shards), world, load, evict)
        value = None if cache is None else cache.get(key)
        if value is None:
            plan = reshard(shards, world, fingerprint=self.config.fingerprint)
            ledgers = []
            for record in plan:
                retained = list(record.checkpoint.retained_ordinals())
                ledgers.append(
                    Ledger.resume(
                        record.share.config(self.config),
                        record.checkpoint,
                        load_replay_buffer=load,
                        evicted_on_restore=retained if load and evict else (),
                    ).ledger
                )
            value = (plan[0].share.base, tuple(ledgers))
            if cache is not None:
                cache[key] = value
        return Run(self.config, value[0], world, value[1], self.resolved)

    def drained(self) -> bool:
        return all(ledger.drained for ledger in self.ledgers)

    def drain(self) -> Run:
        """Everything to the end, without failures."""
        run = self
        for r in range(run.world):
            while not run.ledgers[r].drained:
                ledger = run.ledgers[r]
                if not ledger.exhausted:
                    run = run.apply(r, "stamp", [10**6])
                for status, op in (
                    (Status.PENDING, "dispatch"),
                    (Status.OUTSTANDING, "buffer"),
                    (Status.BUFFERED, "train"),
                ):
                    todo = list(run.ledgers[r].ordinals(status))
                    if todo:
                        run = run.apply(r, op, todo)
                if (
                    run.ledgers[r].exhausted
                    and not run.ledgers[r].in_flight()
                    and not run.ledgers[r].drained
                ):
                    raise Violation(f"rank {r} cannot drain: {run.ledgers[r]!r}")
        return run


def moves(run: Run) -> Iterator[tuple[str, Run]]:
    """Every single-ordinal move of every rank."""
    for r, ledger in enumerate(run.ledgers):
        if not ledger.exhausted:
            yield f"r{r} stamp", run.apply(r, "stamp", [1])
        for status, ops in (
            (Status.PENDING, ("dispatch",)),
            (Status.OUTSTANDING, ("buffer", "fail")),
            (Status.BUFFERED, ("train", "evict")),
        ):
            for o in ledger.ordinals(status):
                for op in ops:
                    yield f"r{r} {op} {o}", run.apply(r, op, [o])


def check(run: Run, worlds: tuple[int, ...], cache: dict[object, object] | None = None) -> None:
    """The invariants of a state: the ranks' ledgers agree with the lineage,
    the merged record is the lineage's, split and merge agree for every
    world size, and the state drains exactly once. ``cache`` keeps merges
    and splits per record set (they depend on it alone)."""
    n = run.config.stream_len
    assert n is not None
    if not set(range(run.base)) <= run.resolved:
        raise Violation(f"BASE-RESOLVED: an ordinal below the base {run.base} is unresolved")
    for share, ledger in zip(run.shares, run.ledgers, strict=True):
        resolved = {share.global_ordinal(o) for o in range(ledger.cut)} | set(
            share.global_ordinals(
                [*ledger.ordinals(Status.TRAINED), *ledger.ordinals(Status.DROPPED)]
            )
        )
        owned = {g for g in run.resolved if share.owns(g)}
        if resolved != owned:
            raise Violation(f"{share}: the ledger resolved {resolved}, the lineage {owned}")
    records = tuple(run.records(save_buffer=True))
    if cache is not None and records in cache:
        merged, splits = cache[records]  # type: ignore[misc]
    else:
        merged = merge_shards(records)
        splits = {}
        for world in worlds:
            again = summary(merge_shards(split_checkpoint(merged, world, step=0)))
            del again["dropped"]
            splits[world] = again
        if cache is not None:
            cache[records] = (merged, splits)
    cut = min(set(range(n + 1)) - run.resolved)
    buffered = {
        share.global_ordinal(o)
        for share, ledger in zip(run.shares, run.ledgers, strict=True)
        for o in ledger.ordinals(Status.BUFFERED)
    }
    attempts = {
        share.global_ordinal(o): ledger.failures(o)
        for share, ledger in zip(run.shares, run.ledgers, strict=True)
        for o in range(ledger.cut, ledger.next_ordinal + 4)
        if ledger.failures(o) and ledger.status(o) not in (Status.TRAINED, Status.DROPPED)
    }
    want = {
        "cut": cut,
        "resolved": {g for g in run.resolved if g > cut},
        "retained": buffered,
        "attempts": attempts,
    }
    got = summary(merged)
    del got["dropped"]
    if got != want:
        raise Violation(f"MERGE-EXACT: merged {got}, lineage {want}")
    for world, again in splits.items():
        if again != want:
            raise Violation(f"SPLIT-MERGE: split on {world} then merged gives {again}")
    end = run.drain()
    if end.resolved != frozenset(range(n)):
        raise Violation(f"NO-SKIP: a drain resolved {sorted(end.resolved)} of {n}")


@attrs.frozen
class Explored:
    states: int
    transitions: int
    reshards: int
    drained: int


def explore(
    stream_len: int,
    worlds: tuple[int, ...],
    policy: FailurePolicy,
    *,
    start_worlds: tuple[int, ...] | None = None,
) -> Explored:
    """Every state reachable from a fresh start on each of ``start_worlds``
    ranks by single-ordinal moves of any rank, and from every state a
    checkpoint (buffer saved or not) and a crash resumed on every world
    size of ``worlds`` (buffer restored or not, all restored groups evicted
    or none). Crashes are unbounded: a resumed state is explored like any
    other."""
    config = LedgerConfig(on_failure=policy, max_failures=2, stream_len=stream_len, fingerprint=FP)
    queue: deque[Run] = deque()
    seen: set[tuple[object, ...]] = set()
    for world in start_worlds or worlds:
        run = Run.start(config, world)
        seen.add(run.key())
        queue.append(run)
    transitions = reshards = drained = 0
    resumes: dict[object, tuple[int, tuple[Ledger, ...]]] = {}
    merges: dict[object, object] = {}

    def push(nxt: Run) -> None:
        key = nxt.key()
        if key not in seen:
            seen.add(key)
            queue.append(nxt)

    while queue:
        run = queue.popleft()
        check(run, worlds, merges)
        drained += run.drained()
        for _, nxt in moves(run):
            transitions += 1
            push(nxt)
        for save in (True, False):
            shards = run.records(save_buffer=save)
            retains = any(s.checkpoint.retained for s in shards)
            for world in worlds:
                for load in (True, False) if retains else (False,):
                    for evict in (False, True) if load else (False,):
                        reshards += 1
                        transitions += 1
                        push(run.resume(shards, world, load=load, evict=evict, cache=resumes))
    return Explored(len(seen), transitions, reshards, drained)


#: CI bounds (drop, retry); FRONTIER_SHARDS_LEN raises both.
EXPLORE_LEN = {
    FailurePolicy.DROP: int(os.environ.get("FRONTIER_SHARDS_LEN", "4")),
    FailurePolicy.RETRY: int(os.environ.get("FRONTIER_SHARDS_LEN", "3")),
}
EXPLORE_WORLDS = tuple(int(w) for w in os.environ.get("FRONTIER_SHARDS_WORLDS", "1,2,3").split(","))


@pytest.mark.parametrize("policy", list(FailurePolicy))
def test_exhaustive_resharding_at_every_reachable_state_keeps_exactly_once(
    policy: FailurePolicy,
) -> None:
    report = explore(EXPLORE_LEN[policy], EXPLORE_WORLDS, policy, start_worlds=(2, 3))
    print(f"\n{policy.value}: {report}")
    assert report.states > 1_000 and report.reshards > report.states
    assert report.drained >= 1


def _buggy_merge(shards: list[ShardCheckpoint], **kw: object) -> Checkpoint:
    """The cut from the rank that is furthest ahead: skips the laggards."""
    merged = _real_merge(shards, **kw)  # type: ignore[arg-type]
    top = max(s.share.global_ordinal(s.checkpoint.cut) for s in shards)
    top = min(top, merged.stream_len if merged.stream_len is not None else top)
    return attrs.evolve(
        merged, cut=top, trained_above_cut=(), dropped_above_cut=(), retained=(), failures=()
    )


def _buggy_split(checkpoint: Checkpoint, world: int, **kw: object) -> tuple[ShardCheckpoint, ...]:
    """A split that forgets the failed attempts."""
    return tuple(
        attrs.evolve(s, checkpoint=attrs.evolve(s.checkpoint, failures=()))
        for s in _real_split(checkpoint, world, **kw)  # type: ignore[arg-type]
    )


def _buggy_deal(ranges: object, base: int, world: int) -> list[list[tuple[int, int]]]:
    """A range's last row rounded away."""
    columns: list[list[tuple[int, int]]] = []
    for column in _real_deal(ranges, base, world):  # type: ignore[arg-type]
        columns.append([(a, b - 1) for a, b in column if b - 1 > a])
    return columns


_real_merge, _real_split, _real_deal = merge_shards, split_checkpoint, deal


@pytest.mark.parametrize(
    ("name", "replacement", "policy"),
    [
        ("merge_shards", _buggy_merge, FailurePolicy.DROP),
        ("split_checkpoint", _buggy_split, FailurePolicy.RETRY),
        ("deal", _buggy_deal, FailurePolicy.DROP),
    ],
)
def test_the_exhaustive_checker_catches_seeded_bugs(
    monkeypatch: pytest.MonkeyPatch, name: str, replacement: object, policy: FailurePolicy
) -> None:
    import sys

    import frontier_core._shards as shards_module

    monkeypatch.setattr(shards_module, name, replacement)
    if hasattr(sys.modules[__name__], name):
        monkeypatch.setattr(sys.modules[__name__], name, replacement)
    with pytest.raises(Violation):
        explore(3, (1, 2), policy, start_worlds=(2,))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32),
    st.sampled_from(FailurePolicy),
    st.integers(1, 30),
    st.integers(1, 5),
)
def test_random_runs_with_reshards_train_every_ordinal_exactly_once(
    seed: int, policy: FailurePolicy, stream_len: int, world: int
) -> None:
    """Random moves on every rank, checkpoints, crashes that resume from the
    last checkpoint on a random world size (buffer restored or not), until
    the stream is drained: every ordinal resolved exactly once."""
    rng = random.Random(seed)
    config = LedgerConfig(on_failure=policy, max_failures=2, stream_len=stream_len, fingerprint=FP)
    run = Run.start(config, world)
    saved = run.records(save_buffer=True)
    saved_run = run
    for _ in range(400):
        if run.drained():
            break
        choice = rng.random()
        if choice < 0.08:
            save = rng.random() < 0.7
            saved, saved_run = run.records(save_buffer=save), run
        elif choice < 0.13:
            load = rng.random() < 0.6 and any(s.checkpoint.retained for s in saved)
            run = saved_run.resume(saved, rng.randint(1, 5), load=load, evict=rng.random() < 0.2)
            saved, saved_run = run.records(save_buffer=True), run
        else:
            options = list(moves(run))
            if options:
                run = rng.choice(options)[1]
    run = run.drain()
    assert run.resolved == frozenset(range(stream_len))


def test_a_resume_refuses_a_record_of_another_share() -> None:
    config = LedgerConfig(stream_len=9, fingerprint=FP)
    run = Run.start(config, 3).apply(0, "stamp", [2])
    record = run.records(save_buffer=True)[0]
    with pytest.raises(FingerprintMismatchError):
        Ledger.resume(Share(0, 3, 1).config(config), record.checkpoint, load_replay_buffer=False)
    with pytest.raises(IllegalTransitionError):
        run.apply(1, "train", [0])


@pytest.mark.parametrize("world", [1, 2, 3])
def test_groups_of_n_keep_their_size_counter_and_held_siblings_across_a_reshard(
    world: int,
) -> None:
    """A rank's ledger keeps the run's group size, and a reshard carries the
    group size, an attempt counter above every rank's attempts, and the
    sealed siblings saved with the records, each to the rank that now owns
    its group, where a dispatch reuses it instead of generating it again."""
    config = LedgerConfig(
        stream_len=12, samples=2, fingerprint=FP, on_failure=FailurePolicy.RETRY
    )
    shares = Share.tiling(2)
    shards = []
    for share in shares:
        local = share.config(config)
        assert (local.samples, local.granularity) == (2, config.granularity)
        ledger = Ledger.start(local).stamp(3).ledger.dispatch([0, 1]).ledger
        # Rank 1 dealt more attempts than rank 0 (a restart).
        first = sorted(ledger.running())[0]
        ledger = ledger.seal([first]).ledger
        if share.rank:
            ledger = ledger.fail_sample([sorted(ledger.running())[-1]]).ledger
            ledger = ledger.restart([(1, 1)]).ledger
        shards.append(ShardCheckpoint(share, 7, ledger.checkpoint()))
    top = max(s.checkpoint.next_attempt for s in shards)
    held = {
        (s.share.global_ordinal(o), sib, a) for s in shards for o, sib, a in s.checkpoint.sealed
    }
    assert len(held) == 2
    merged = merge_shards(shards)
    assert (merged.samples, merged.next_attempt, set(merged.sealed)) == (2, top, held)
    plan = reshard(shards, world)
    assert {r.checkpoint.samples for r in plan} == {2}
    assert {r.checkpoint.next_attempt for r in plan} == {top}
    back = {(r.share.global_ordinal(o), s, a) for r in plan for o, s, a in r.checkpoint.sealed}
    assert back == held
    for r in plan:
        resumed = Ledger.resume(
            r.share.config(config),
            r.checkpoint,
            load_replay_buffer=True,
            sealed=r.checkpoint.sealed,
        )
        ledger = resumed.ledger.stamp(6).ledger
        pending = list(ledger.ordinals(Status.PENDING))
        step = ledger.dispatch(pending)
        reused = {(r.share.global_ordinal(o), s, a) for o, s, a in step.effect.reused}
        assert reused == {x for x in held if r.share.owns(x[0])}
        assert all(x.attempt >= top for x in step.effect.leases)


def test_a_merge_refuses_ranks_with_groups_of_different_sizes() -> None:
    shares = Share.tiling(2)
    shards = [
        ShardCheckpoint(
            share, 0, Checkpoint(cut=0, fingerprint=share.fingerprint(FP), samples=1 + share.rank)
        )
        for share in shares
    ]
    with pytest.raises(ShardMismatchError, match="sizes"):
        merge_shards(shards)
