"""Shared Hypothesis strategies."""

from __future__ import annotations

from hypothesis import strategies as st

from frontier_core import FailurePolicy, Ledger, LedgerConfig, Status

configs = st.builds(
    LedgerConfig,
    on_failure=st.sampled_from(FailurePolicy),
    max_attempts=st.integers(1, 4),
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
