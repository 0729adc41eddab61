"""The reuse policy and continuation (``_reuse``), against their statements:
the age of a token along the lineage, what each policy keeps of a replayed
journal, and that a continued sample is exactly its prefix then its rest."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier_core.journal import (
    BytesPayload,
    JournalHeader,
    JournalState,
    Mark,
    Progress,
    Reserve,
    Reuse,
    Sealed,
    SiblingState,
    TokenPayload,
    continue_sample,
    decode,
    encode,
    lineage_age,
    lineage_version,
    replay,
    reusable,
)
from frontier_core.journal._reuse import truncated

from ._strategies import budget, token_payloads

pytestmark = pytest.mark.mutation


def test_lineage_age_counts_through_the_fork() -> None:
    # Weights of an ancestor: the plain age.
    assert lineage_age(3, fork=5, step=5) == 2
    assert lineage_age(5, fork=5, step=7) == 2
    # Weights of the dead branch (steps 6, 7 lost): back to the fork, then on.
    assert lineage_age(7, fork=5, step=5) == 2
    assert lineage_age(6, fork=5, step=8) == 4


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
@budget(200)
def test_lineage_age_is_a_tree_distance(version: int, fork: int, extra: int) -> None:
    step = fork + extra
    age = lineage_age(version, fork=fork, step=step)
    assert age >= 0
    # Symmetric in the two branches above the fork, and equal to the plain
    # age whenever the version is on the resumed lineage.
    if version <= fork:
        assert age == step - version
    else:
        assert age == lineage_age(fork + (step - fork), fork=fork, step=fork + (version - fork))


def test_lineage_version_reflects_a_dead_branch_token_through_the_fork() -> None:
    assert lineage_version(3, fork=5) == 3  # an ancestor's: its own
    assert lineage_version(5, fork=5) == 5
    assert lineage_version(7, fork=5) == 3  # two past the fork: as old as two before it
    assert lineage_version(9, fork=2) == -5  # further ahead than the fork is from 0


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
@budget(200)
def test_a_buffer_dating_by_lineage_version_ages_along_the_tree(
    version: int, fork: int, extra: int, later: int
) -> None:
    """A group dated once, at the resume, by ``lineage_version``: at every
    later step of the lineage its plain age ``step - date`` is the number of
    updates between its weights and the step's, counted through the fork
    (``v`` back down to the fork, then up to the step), however far the
    lineage has moved since."""
    date = lineage_version(version, fork=fork)
    step = fork + extra + later
    tree = abs(version - fork) + (step - fork) if version > fork else step - version
    assert step - date == tree == lineage_age(version, fork=fork, step=step)


def _versions_of(payload: TokenPayload) -> list[int]:
    return list(payload.versions())


@st.composite
def states(draw: st.DrawFn) -> JournalState:
    records = []
    for o in range(draw(st.integers(0, 4))):
        for s in range(draw(st.integers(1, 3))):
            payload = draw(
                st.one_of(token_payloads(), st.builds(BytesPayload, st.binary(max_size=8)))
            )
            cls = draw(st.sampled_from([Sealed, Progress]))
            if cls is Progress and isinstance(payload, TokenPayload) and payload.reward is not None:
                payload = TokenPayload(
                    payload.token_data, payload.logprob_data, payload.version_runs
                )
            records.append(cls(o, s, draw(st.integers(0, 9)), payload))
    return replay(records)


@given(states(), st.integers(0, 6), st.integers(0, 6), st.integers(0, 3))
@budget(300)
def test_within_keeps_exactly_the_young_prefix_of_every_token_sample(
    state: JournalState, fork: int, extra: int, max_age: int
) -> None:
    step = fork + extra
    kept = reusable(state, Reuse.within(max_age), fork=fork, step=step)
    for o, s, st_ in state.siblings():
        after = kept.get(o, s)
        if not isinstance(st_.payload, TokenPayload):
            assert after is None  # no versions: not reused under an age limit
            continue
        ages = [lineage_age(v, fork=fork, step=step) for v in _versions_of(st_.payload)]
        young = next((i for i, a in enumerate(ages) if a > max_age), len(ages))
        if young == len(ages):
            assert after == st_  # wholly young (even with no tokens): untouched
            continue
        if young == 0:
            assert after is None
            continue
        assert after is not None and after.attempt == st_.attempt
        assert isinstance(after.payload, TokenPayload)
        assert list(after.payload.tokens()) == list(st_.payload.tokens())[:young]
        assert list(after.payload.logprobs()) == list(st_.payload.logprobs())[:young]
        assert _versions_of(after.payload) == _versions_of(st_.payload)[:young]
        assert not after.sealed and after.payload.reward is None  # a prefix now
    # Nothing appears that the journal did not hold.
    assert {(o, s) for o, s, _ in kept.siblings()} <= {(o, s) for o, s, _ in state.siblings()}


@given(states())
@budget(100)
def test_everything_and_nothing(state: JournalState) -> None:
    assert reusable(state, Reuse.everything(), fork=0, step=3) == state
    assert reusable(state, Reuse.nothing(), fork=0, step=3).groups == {}


def test_reuse_values_are_checked() -> None:
    with pytest.raises(ValueError, match="kind"):
        Reuse("some")
    with pytest.raises(ValueError, match="max_age"):
        Reuse("age")
    with pytest.raises(ValueError, match="max_age"):
        Reuse("all", 3)
    with pytest.raises(TypeError):
        Reuse.within(True)
    with pytest.raises(ValueError, match="before the fork"):
        reusable(JournalState(MappingProxyType({})), Reuse.within(1), fork=4, step=3)


@given(token_payloads(), token_payloads())
@budget(300)
def test_a_continued_sample_is_its_prefix_then_its_rest(
    prefix: TokenPayload, rest: TokenPayload
) -> None:
    prefix = TokenPayload(prefix.token_data, prefix.logprob_data, prefix.version_runs)
    whole = continue_sample(prefix, rest)
    assert list(whole.tokens()) == list(prefix.tokens()) + list(rest.tokens())
    assert list(whole.logprobs()) == list(prefix.logprobs()) + list(rest.logprobs())
    assert _versions_of(whole) == _versions_of(prefix) + _versions_of(rest)
    assert whole.reward == rest.reward
    # It is a valid sample: it encodes and decodes to itself.
    data = encode(JournalHeader("f", "l"), [Sealed(0, 0, 1, whole)])
    assert decode(data).records == (Sealed(0, 0, 1, whole),)


def test_a_sealed_sample_is_not_continued() -> None:
    sealed = TokenPayload.of([1], [-0.5], 0, reward=1.0)
    with pytest.raises(ValueError, match="sealed"):
        continue_sample(sealed, TokenPayload.of([2], [-0.5], 1))


def test_a_partly_stale_seal_becomes_a_prefix_to_continue() -> None:
    """Tokens 0-1 by version 4 (before the fork at 5: 1 update old at step
    5), 2-3 by version 7 (the dead branch: 2 updates away through the fork).
    With max_age 1 the first two are a prefix to continue."""
    sample = TokenPayload.of([10, 11, 12, 13], [-0.1] * 4, [4, 4, 7, 7], reward=0.5)
    state = replay([Sealed(3, 1, 2, sample)])
    kept = reusable(state, Reuse.within(1), fork=5, step=5)
    got = kept.get(3, 1)
    assert got == SiblingState(2, TokenPayload.of([10, 11], [-0.1] * 2, 4), False)
    assert reusable(state, Reuse.within(2), fork=5, step=5).get(3, 1) == state.get(3, 1)
    assert reusable(state, Reuse.within(0), fork=5, step=5).get(3, 1) is None


def test_a_refused_reuse_policy_says_why_by_name() -> None:
    with pytest.raises(ValueError, match=r"^max_age goes with Reuse\.within, and only with it$"):
        Reuse("age")
    with pytest.raises(ValueError, match=r"^max_age must be an int in \[0, 4294967296\], got -1$"):
        Reuse.within(-1)


def test_max_age_is_bounded_at_two_to_the_32() -> None:
    assert Reuse.within(1 << 32).max_age == 1 << 32
    with pytest.raises(ValueError, match=r"^max_age must be an int in \[0, 4294967296\]"):
        Reuse.within((1 << 32) + 1)


def test_reusable_refuses_a_fork_or_step_outside_two_to_the_64_by_name() -> None:
    state = JournalState()
    bound = 1 << 64
    assert reusable(state, Reuse.within(1), fork=bound, step=bound) == state
    for name, bad in [("fork", -1), ("fork", bound + 1), ("step", -1), ("step", bound + 1)]:
        values = {"fork": 0, "step": bound, name: bad}  # the other one valid
        with pytest.raises(
            ValueError, match=rf"^{name} must be an int in \[0, {bound}\], got {bad}$"
        ):
            reusable(state, Reuse.within(1), **values)


def test_a_reused_state_keeps_the_journal_fenced_count_and_reservation() -> None:
    """``fenced`` is a statistic of the journal the state came from, and
    ``reserved`` the attempts its writers may have handed out: whatever the
    policy reuses, both stay (the attempt floor of a resume must not drop)."""
    young = TokenPayload.of([1, 2], [-0.5, -0.5], [5, 9])
    state = replay(
        [
            Sealed(0, 0, 1, young),
            Sealed(0, 0, 0, young),
            Progress(1, 0, 1, young),
            Mark(3),
            Reserve(64),
        ]
    )
    assert (state.fenced, state.reserved) == (1, 64)
    for policy in (Reuse.everything(), Reuse.nothing(), Reuse.within(0), Reuse.within(9)):
        kept = reusable(state, policy, fork=5, step=5)
        assert (kept.fenced, kept.reserved, kept.next_attempt) == (1, 64, 64)


def test_truncated_keeps_the_first_tokens_as_a_prefix_and_refuses_more_than_it_has() -> None:
    sample = TokenPayload.of([10, 11, 12, 13], [-0.1, -0.2, -0.3, -0.4], [4, 4, 7, 8], reward=0.5)
    assert truncated(sample, 0) == TokenPayload.of([], [], 0)
    assert truncated(sample, 3) == TokenPayload.of([10, 11, 12], [-0.1, -0.2, -0.3], [4, 4, 7])
    assert truncated(sample, 4) == TokenPayload.of(
        [10, 11, 12, 13], [-0.1, -0.2, -0.3, -0.4], [4, 4, 7, 8]
    )
    for length in (5, -1):
        with pytest.raises(ValueError, match=rf"^cannot keep {length} of 4 tokens$"):
            truncated(sample, length)


def test_a_sealed_sample_is_not_continued_and_the_refusal_says_so() -> None:
    sealed = TokenPayload.of([1], [-0.5], 0, reward=0.0)
    with pytest.raises(
        ValueError, match=r"^a sealed sample \(it has a reward\) is not a prefix to continue$"
    ):
        continue_sample(sealed, TokenPayload.of([2], [-0.5], 1))
