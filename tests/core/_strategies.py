"""Shared Hypothesis strategies."""

from __future__ import annotations

from hypothesis import strategies as st

from frontier_core import FailurePolicy, Granularity, Lease, Ledger, LedgerConfig, Sibling, Status

configs = st.builds(
    LedgerConfig,
    on_failure=st.sampled_from(FailurePolicy),
    max_failures=st.integers(1, 4),
    stream_len=st.one_of(st.none(), st.integers(0, 64)),
    fingerprint=st.sampled_from(["", "ds-v1"]),
)

_MOVES = {
    "dispatch": Status.PENDING,
    "buffer": Status.OUTSTANDING,
    "fail": Status.OUTSTANDING,
    "evict": Status.BUFFERED,
    "train": Status.BUFFERED,
}


@st.composite
def ledgers(draw: st.DrawFn, max_ops: int = 40) -> Ledger:
    """A ledger reached by random legal events, resumes included."""
    ledger = Ledger.start(draw(configs))
    for _ in range(draw(st.integers(0, max_ops))):
        op = draw(st.sampled_from(["stamp", "resume", *_MOVES]))
        if op == "stamp":
            ledger = ledger.stamp(draw(st.integers(0, 9))).ledger
        elif op == "resume":
            checkpoint = ledger.checkpoint(save_buffer=draw(st.booleans()))
            ledger = Ledger.resume(
                ledger.config, checkpoint, load_replay_buffer=draw(st.booleans())
            ).ledger
        else:
            candidates = list(ledger.ordinals(_MOVES[op]))
            if candidates:
                chosen = draw(st.lists(st.sampled_from(candidates), unique=True))
                result = getattr(ledger, op)(chosen)
                ledger = result if isinstance(result, Ledger) else result.ledger
    return ledger


sample_configs = st.builds(
    LedgerConfig,
    on_failure=st.sampled_from(FailurePolicy),
    max_failures=st.integers(1, 4),
    stream_len=st.one_of(st.none(), st.integers(0, 24)),
    fingerprint=st.sampled_from(["", "ds-v1"]),
    samples=st.integers(1, 3),
    granularity=st.sampled_from(Granularity),
)


#: Weighted towards the sample events.
_SAMPLE_OPS = (
    *("stamp", "stamp", "dispatch", "dispatch", "seal", "seal", "seal", "fail_sample"),
    *("restart", "checkpoint", "resume", "train", *_MOVES),
)


@st.composite
def sample_ledgers(draw: st.DrawFn, max_ops: int = 60) -> Ledger:
    """A sample-level ledger reached by random legal events: seals (current
    or stale), failed samples, restarts, whole-group moves, and resumes that
    hold a random subset of every sibling sealed so far."""
    ledger = Ledger.start(draw(sample_configs))
    saved = [ledger.checkpoint()]
    issued: list[Lease] = []
    accepted: set[Lease] = set()
    for _ in range(draw(st.integers(0, max_ops))):
        op = draw(st.sampled_from(_SAMPLE_OPS))
        if op == "stamp":
            ledger = ledger.stamp(draw(st.integers(0, 6))).ledger
        elif op == "dispatch":
            pending = list(ledger.ordinals(Status.PENDING))
            chosen = draw(st.lists(st.sampled_from(pending), unique=True)) if pending else []
            step = ledger.dispatch(chosen)
            issued += step.effect.leases
            ledger = step.ledger
        elif op in ("seal", "fail_sample"):
            # Mostly current attempts, some stale ones from anywhere.
            current = list(ledger.running())
            pool = current if current and draw(st.integers(0, 3)) else issued
            if pool:
                picks = draw(st.lists(st.sampled_from(pool), max_size=4))
                chosen_leases = list({x[:2]: x for x in picks}.values())
                step = getattr(ledger, op)(chosen_leases)
                accepted.update(step.effect.sealed)
                ledger = step.ledger
        elif op == "restart":
            unstarted = [
                (o, s)
                for o in ledger.ordinals(Status.OUTSTANDING)
                for s in range(ledger.config.samples)
                if ledger.sibling(o, s) == (Sibling.UNSTARTED, None)
            ]
            if unstarted:
                step = ledger.restart(draw(st.lists(st.sampled_from(unstarted), unique=True)))
                issued += step.effect.leases
                ledger = step.ledger
        elif op == "checkpoint":
            saved.append(
                ledger.checkpoint(save_buffer=draw(st.booleans()), save_sealed=draw(st.booleans()))
            )
        elif op == "resume":
            # From the last checkpoint or an older one (a newer one was lost).
            checkpoint = draw(st.sampled_from(saved))
            # What a journal made durable: some of the accepted seals, at
            # most one per sibling (the latest attempt wins, as in replay).
            durable = {x[:2]: x for x in sorted(accepted) if draw(st.booleans())}
            ledger = Ledger.resume(
                ledger.config,
                checkpoint,
                load_replay_buffer=draw(st.booleans()),
                sealed=sorted(durable.values()),
                attempt_floor=ledger.next_attempt,
            ).ledger
        else:
            candidates = list(ledger.ordinals(_MOVES[op]))
            if candidates:
                chosen = draw(st.lists(st.sampled_from(candidates), unique=True))
                ledger = getattr(ledger, op)(chosen).ledger
    return ledger
