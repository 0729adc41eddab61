"""Episodes in the journal: the turn and answer records, byte for byte
against the documented layout, their refusals, and replay's episode rules
against a model written from ``_replay``'s docstring alone, across lives
that crash at any record, with a tool that counts its executions.

The stateful machine is the proof-test of the three episode invariants
(proofs/JOURNAL.md): TURN-CONTINUATION-EXACT (a resumed episode holds
exactly its durable turns, and continues from them), TOOL-AT-MOST-ONCE (a
call is executed at most once per key, across any crash, under the retry
policy: a pending call is re-issued under its stored key) and
FENCED-ANSWER-NEVER-TRAINED (no answer received by a fenced attempt is in
a sealed episode).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from frontier_core.journal import (
    DEFAULT_MAX_FRAME,
    NO_TOKENS,
    Answer,
    BytesPayload,
    Extend,
    JournalCorruptError,
    JournalEpisodeError,
    JournalError,
    JournalHeader,
    JsonPayload,
    Progress,
    Record,
    Reuse,
    Sealed,
    SiblingState,
    TokenPayload,
    ToolCall,
    Turn,
    TurnState,
    advance,
    call_key,
    compact,
    decode,
    encode,
    encode_records,
    replay,
    reusable,
)
from frontier_core.journal._format import append_frames

from ._strategies import (
    FORGED_ID,
    U32,
    U64,
    budget,
    forge_frame,
    forge_header_body,
    json_values,
    payloads,
    token_payloads,
)

# Fast and deterministic (every property seeded): the selection mutmut runs
# against the episode code (scripts/mutation.sh, proofs/MUTANTS_JOURNAL.md).
pytestmark = pytest.mark.mutation

HEADER = JournalHeader("fp", "run", journal_id=FORGED_ID)


def tp(tokens: list[int], version: int = 0) -> TokenPayload:
    return TokenPayload.of(tokens, [-0.5] * len(tokens), version)


def call(key: str, name: str = "kv.put") -> ToolCall:
    return ToolCall(name, JsonPayload.of({"k": "a", "v": 1}), key)


# -- the layout -------------------------------------------------------------------


def _payload_layout(p: TokenPayload | BytesPayload | JsonPayload) -> tuple[int, bytes]:
    if isinstance(p, BytesPayload):
        return 0, p.data
    if isinstance(p, JsonPayload):
        return 1, p.text.encode()
    r = p.reward
    return 2, (
        struct.pack("<IIBd", len(p), len(p.version_runs), r is not None, 0.0 if r is None else r)
        + p.token_data
        + p.logprob_data
        + b"".join(struct.pack("<II", *run) for run in p.version_runs)
    )


def _short(text: str) -> bytes:
    return bytes([len(text.encode())]) + text.encode()


def layout(record: Turn | Answer) -> tuple[int, bytes]:
    """A turn's or an answer's frame kind and body, from ``_format``'s
    docstring."""
    head = struct.pack("<QIII", record.ordinal, record.sibling, record.attempt, record.turn)
    if isinstance(record, Turn):
        c = record.call
        if c is None:
            called = b"\0"
        else:
            args = c.args.text.encode()
            called = b"\1" + _short(c.name) + _short(c.key) + struct.pack("<I", len(args)) + args
        return 6, head + called + _payload_layout(record.payload)[1]
    kind, answer = _payload_layout(record.payload)
    if record.state is None:
        state = b"\xff"
    else:
        skind, sbytes = _payload_layout(record.state)
        state = bytes([skind]) + sbytes
    return 7, (
        head + _short(record.key) + bytes([kind]) + struct.pack("<I", len(answer)) + answer + state
    )


names = st.text(min_size=1, max_size=20)
calls = st.builds(ToolCall, names, st.builds(JsonPayload.of, json_values), names)
turn_tokens = token_payloads().map(
    lambda p: TokenPayload(p.token_data, p.logprob_data, p.version_runs)
)
wide = (st.integers(0, U64), st.integers(0, U32), st.integers(0, U32), st.integers(0, U32))
episode_records: st.SearchStrategy[Turn | Answer] = st.one_of(
    st.builds(Turn, *wide, turn_tokens, st.one_of(st.none(), calls)),
    st.builds(Answer, *wide, names, payloads, st.one_of(st.none(), payloads)),
)


@budget(60)
@given(st.lists(episode_records, max_size=6), st.integers(0, 1000))
def test_turns_and_answers_are_encoded_as_the_layout_says_and_decode_back(
    recs: list[Turn | Answer], first_seq: int
) -> None:
    forged = b"".join(
        forge_frame(layout(r)[0], seq, layout(r)[1]) for seq, r in enumerate(recs, start=first_seq)
    )
    assert encode_records(recs, first_seq=first_seq, header=HEADER) == forged
    # The writer counts its bytes by what the encoder returns.
    parts: list[bytes] = []
    assert append_frames(parts, recs, first_seq, DEFAULT_MAX_FRAME, HEADER.key) == len(forged)
    assert b"".join(parts) == forged
    whole = encode(HEADER, recs)
    assert decode(whole).records == tuple(recs)


def _body(record: Turn | Answer) -> bytes:
    return layout(record)[1]


TURN = Turn(3, 1, 2, 0, tp([4, 5]), call("k"))
ANSWER = Answer(3, 1, 2, 0, "k", JsonPayload.of(1), BytesPayload(b"s"))
_TURN_HEAD = struct.pack("<QIII", 3, 1, 2, 0)


@pytest.mark.parametrize(
    ("kind", "body", "reason"),
    [
        (6, _TURN_HEAD + b"\2", "has_call is 2"),
        (6, _TURN_HEAD + b"\1\0", "the tool name is empty"),
        (6, _TURN_HEAD + b"\1\1x\0", "the idempotency key is empty"),
        (6, _TURN_HEAD + b"\1\1x\1k" + struct.pack("<I", 3) + b"{x}", "not strict JSON"),
        (6, _TURN_HEAD + b"\1\1\xff\1k", "the tool name is not UTF-8"),
        (6, _body(Turn(3, 1, 2, 0, tp([4]))) + b"\0", "needs 16 bytes, the body has 17"),
        (
            6,
            _TURN_HEAD + b"\0" + _payload_layout(TokenPayload.of([1], [-1.0], 0, reward=1.0))[1],
            "carry no reward",
        ),
        (7, _TURN_HEAD + b"\0", "the idempotency key is empty"),
        (7, _TURN_HEAD + b"\1k\0" + struct.pack("<I", 9) + b"ab", "needs 9 bytes"),
        (7, _TURN_HEAD + b"\1k\5" + struct.pack("<I", 0) + b"\xff", "unknown payload kind 5"),
        (7, _TURN_HEAD + b"\1k\0" + struct.pack("<I", 0) + b"\7", "unknown payload kind 7"),
        (7, _TURN_HEAD + b"\1k\0" + struct.pack("<I", 0) + b"\xff\0", "unexpected bytes"),
    ],
)
def test_a_malformed_turn_or_answer_is_refused_naming_its_offset(
    kind: int, body: bytes, reason: str
) -> None:
    head = encode(HEADER, [])
    with pytest.raises(JournalCorruptError, match=reason) as info:
        decode(head + forge_frame(kind, 1, body))
    assert info.value.offset == len(head)


def test_a_turn_frame_of_another_journal_is_refused() -> None:
    other = JournalHeader("fp", "run")  # another journal id: another key
    frame = encode_records([TURN], first_seq=1, header=other)
    with pytest.raises(JournalCorruptError, match="another journal"):
        decode(encode(HEADER, []) + frame + encode_records([ANSWER], first_seq=2, header=HEADER))


def _segments(record: Turn | Answer) -> list[tuple[str, bytes]]:
    """A turn's or an answer's body cut into the fields the decoder reads
    one at a time, each named as the decoder names it when the body ends
    inside it (``_format``'s docstring, the layout): ``("", b)`` a field
    whose truncation the layout alone does not name (an answer's state
    payload of bytes or JSON, read to the end of the body); ``("tokens",
    b)`` a token payload's ids, log-probs and runs, whose counts say how
    long they are."""
    head = struct.pack("<QIII", record.ordinal, record.sibling, record.attempt, record.turn)

    def tokens(p: TokenPayload) -> list[tuple[str, bytes]]:
        raw = _payload_layout(p)[1]
        return [("a token payload's counts", raw[:17]), ("tokens", raw[17:])]

    def text(what: str, value: str) -> list[tuple[str, bytes]]:
        data = value.encode()
        return [(f"{what}'s length", bytes([len(data)])), (what, data)]

    if isinstance(record, Turn):
        out = [("a turn", head)]
        c = record.call
        out.append(("a turn's call flag", b"\0" if c is None else b"\1"))
        if c is not None:
            args = c.args.text.encode()
            out += text("the tool name", c.name) + text("the idempotency key", c.key)
            out += [("the args' length", struct.pack("<I", len(args))), ("the args", args)]
        return out + tokens(record.payload)
    kind, answer = _payload_layout(record.payload)
    out = [("an answer", head), *text("the idempotency key", record.key)]
    out += [("the answer's payload kind", bytes([kind]))]
    out += [("the answer's length", struct.pack("<I", len(answer))), ("the answer", answer)]
    state = record.state
    if state is None:
        return [*out, ("the state's payload kind", b"\xff")]
    skind, sbytes = _payload_layout(state)
    out.append(("the state's payload kind", bytes([skind])))
    return out + (tokens(state) if isinstance(state, TokenPayload) else [("", sbytes)])


def _cut_reason(segments: list[tuple[str, bytes]], cut: int) -> str | None:
    """What the decoder says of the body cut to its first ``cut`` bytes
    (``None``: not named by the layout alone)."""
    at = 0
    for i, (what, data) in enumerate(segments):
        if cut < at + len(data):
            left = cut - at
            if what == "tokens":
                n, r = struct.unpack_from("<II", segments[i - 1][1])
                return (
                    f"a token payload of {n} tokens and {r} version runs needs "
                    f"{len(data)} bytes, the body has {left}"
                )
            if not what:
                return None
            return f"{what} needs {len(data)} bytes, the body has {left} left"
        at += len(data)
    raise AssertionError("a cut inside the body")


@budget(40)
@given(episode_records)
def test_a_turn_or_answer_cut_short_is_refused_naming_the_field_it_ends_in(
    record: Turn | Answer,
) -> None:
    """Every body shorter than its record's, cut at every byte: the refusal
    names the field the body ends in, how many bytes it needs and how many
    were left (a body that ends between two fields: the next one, with 0
    left)."""
    kind, body = layout(record)
    segments = _segments(record)
    assert b"".join(d for _, d in segments) == body
    head = encode(HEADER, [])
    for cut in range(len(body)):
        reason = _cut_reason(segments, cut)
        if reason is None:
            continue  # the state's bytes or JSON, read to the end: another value, or bad JSON
        with pytest.raises(JournalCorruptError) as info:
            decode(head + forge_frame(kind, 1, body[:cut]))
        assert (info.value.offset, info.value.reason) == (len(head), reason), cut


_ARGS_HEAD = _TURN_HEAD + b"\1\1n\1k"


@pytest.mark.parametrize(
    ("kind", "body", "reason"),
    [
        (6, _TURN_HEAD + b"\1\1\xff\1k", "the tool name is not UTF-8"),
        (6, _TURN_HEAD + b"\1\1n\1\xff", "the idempotency key is not UTF-8"),
        (6, _ARGS_HEAD + struct.pack("<I", 1) + b"\xff", "the args is not UTF-8"),
        (7, _TURN_HEAD + b"\1\xff", "the idempotency key is not UTF-8"),
        (
            7,
            _TURN_HEAD + b"\1k\1" + struct.pack("<I", 1) + b"\xff",
            "the JSON payload is not UTF-8",
        ),
        (
            7,
            _TURN_HEAD + b"\1k\0" + struct.pack("<I", 0) + b"\1\xff",
            "the JSON payload is not UTF-8",
        ),
        (6, _TURN_HEAD + b"\1\0", "the tool name is empty"),
        (6, _TURN_HEAD + b"\1\1n\0", "the idempotency key is empty"),
        (7, _TURN_HEAD + b"\0", "the idempotency key is empty"),
        (6, _TURN_HEAD + b"\2", "has_call is 2, not 0 or 1"),
        (6, _TURN_HEAD + b"\xff", "has_call is 255, not 0 or 1"),
        (
            6,
            _TURN_HEAD + b"\0" + _payload_layout(TokenPayload.of([1], [-1.0], 0, reward=1.0))[1],
            "a turn's tokens carry no reward",
        ),
        (7, _TURN_HEAD + b"\1k\5" + struct.pack("<I", 0) + b"\xff", "unknown payload kind 5"),
        (7, _TURN_HEAD + b"\1k\0" + struct.pack("<I", 0) + b"\7", "unknown payload kind 7"),
        (
            7,
            _TURN_HEAD + b"\1k\0" + struct.pack("<I", 1) + b"a" + b"\xff\0",
            "1 unexpected bytes after the answer",
        ),
        (
            7,
            _TURN_HEAD + b"\1k\2" + struct.pack("<I", 18) + bytes(18) + b"\xff",
            "a token payload of 0 tokens and 0 version runs needs 0 bytes, the body has 1",
        ),
        (
            6,
            _body(Turn(3, 1, 2, 0, tp([4]))) + b"\0",
            "a token payload of 1 tokens and 1 version runs needs 16 bytes, the body has 17",
        ),
    ],
)
def test_a_bad_turn_or_answer_is_refused_with_its_exact_reason(
    kind: int, body: bytes, reason: str
) -> None:
    head = encode(HEADER, [])
    with pytest.raises(JournalCorruptError) as info:
        decode(head + forge_frame(kind, 1, body))
    assert (info.value.offset, info.value.reason) == (len(head), reason)


@budget(60)
@given(episode_records)
def test_a_turn_or_answer_with_a_byte_more_is_refused(record: Turn | Answer) -> None:
    """One byte after a whole record's body is never read as part of it:
    refused, or (an answer's state of bytes or JSON, read to the end of the
    body) a different value."""
    kind, body = layout(record)
    head = encode(HEADER, [])
    try:
        got = decode(head + forge_frame(kind, 1, body + b"\0")).records
    except JournalCorruptError as exc:
        assert exc.offset == len(head)
        return
    assert isinstance(record, Answer) and got != (record,)
    assert isinstance(record.state, BytesPayload | JsonPayload)


# -- the values --------------------------------------------------------------------


def test_values_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match="no reward"):
        Turn(0, 0, 0, 0, TokenPayload.of([1], [-1.0], 0, reward=1.0))
    with pytest.raises(TypeError, match="TokenPayload"):
        Turn(0, 0, 0, 0, BytesPayload(b""))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ToolCall"):
        Turn(0, 0, 0, 0, tp([1]), "call")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"1\.\.255"):
        ToolCall("", JsonPayload.of(1), "k")
    with pytest.raises(ValueError, match=r"1\.\.255"):
        ToolCall("n", JsonPayload.of(1), "k" * 256)
    with pytest.raises(TypeError, match="JsonPayload"):
        ToolCall("n", {"a": 1}, "k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="never pickled"):
        Answer(0, 0, 0, 0, "k", JsonPayload.of(1), {"state": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: ToolCall("n", {"a": 1}, "k"),
            TypeError,
            "a call's args are a JsonPayload, got dict",
        ),
        (
            lambda: Turn(0, 0, 0, 0, BytesPayload(b"")),
            TypeError,
            "a turn carries a TokenPayload, got BytesPayload",
        ),
        (
            lambda: Turn(0, 0, 0, 0, TokenPayload.of([1], [-1.0], 0, reward=1.0)),
            ValueError,
            "a turn's tokens carry no reward (the sealed episode does)",
        ),
        (
            lambda: Turn(0, 0, 0, 0, tp([1]), "call"),
            TypeError,
            "call must be a ToolCall or None, got str",
        ),
        (
            lambda: Answer(0, 0, 0, 0, "k", JsonPayload.of(1), {"state": 1}),
            TypeError,
            "state must be a BytesPayload, JsonPayload, TokenPayload or None, got dict "
            "(raw objects are never pickled)",
        ),
        (lambda: call_key(1, 0, 0, 0, 0), TypeError, "namespace must be a str, got int"),
        (
            lambda: call_key("\ud800", 0, 0, 0, 0),
            ValueError,
            "namespace is not UTF-8 (it holds a lone surrogate)",
        ),
        (
            lambda: call_key("run", -1, 0, 0, 0),
            ValueError,
            f"ordinal must be an int in [0, {U64}], got -1",
        ),
        (
            lambda: call_key("run", 0, U32 + 1, 0, 0),
            ValueError,
            f"sibling must be an int in [0, {U32}], got {U32 + 1}",
        ),
        (
            lambda: call_key("run", 0, 0, -1, 0),
            ValueError,
            f"attempt must be an int in [0, {U32}], got -1",
        ),
        (
            lambda: call_key("run", 0, 0, 0, -1),
            ValueError,
            f"turn must be an int in [0, {U32}], got -1",
        ),
    ],
)
def test_an_episode_value_is_refused_by_its_exact_message(
    build: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        build()  # type: ignore[operator]
    assert str(info.value) == message


@budget(100)
@given(
    st.text(min_size=1, max_size=40).filter(lambda s: "/" not in s),
    st.tuples(st.integers(0, U64), st.integers(0, U32), st.integers(0, U32), st.integers(0, U32)),
    st.tuples(st.integers(0, U64), st.integers(0, U32), st.integers(0, U32), st.integers(0, U32)),
)
def test_call_keys_are_deterministic_and_distinct_per_call(
    namespace: str, a: tuple[int, int, int, int], b: tuple[int, int, int, int]
) -> None:
    ka, kb = call_key(namespace, *a), call_key(namespace, *b)
    assert ka == call_key(namespace, *a)
    assert (ka == kb) == (a == b)
    ToolCall("tool", JsonPayload.of(None), ka)  # every key fits a call
    assert call_key(namespace + "x", *a) != ka


def test_call_key_refuses_what_would_make_keys_collide_or_overflow() -> None:
    with pytest.raises(ValueError, match="without '/'"):
        call_key("a/b", 0, 0, 0, 0)
    with pytest.raises(ValueError, match="without '/'"):
        call_key("x" * 193, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="attempt"):
        call_key("run", 0, 0, -1, 0)
    with pytest.raises(TypeError, match="turn"):
        call_key("run", 0, 0, 0, True)
    assert len(call_key("x" * 192, U64, U32, U32, U32).encode()) <= 255


# -- replay's episode rules --------------------------------------------------------


def test_an_episode_replays_to_its_turns_and_its_pending_call() -> None:
    recs: list[Record] = [
        Turn(0, 0, 1, 0, tp([1]), call("k0")),
        Answer(0, 0, 1, 0, "k0", JsonPayload.of("a0"), JsonPayload.of({"kv": 1})),
        Turn(0, 0, 1, 1, tp([2]), call("k1")),
    ]
    st_ = replay(recs).get(0, 0)
    assert st_ is not None
    assert st_.turns == (
        TurnState(tp([1]), call("k0"), JsonPayload.of("a0"), JsonPayload.of({"kv": 1})),
        TurnState(tp([2]), call("k1")),
    )
    assert st_.pending == call("k1") and st_.answered == 1 and st_.payload == NO_TOKENS


def test_a_new_attempt_continues_the_episode_and_fences_the_old_one() -> None:
    recs: list[Record] = [
        Turn(0, 0, 1, 0, tp([1]), call("k0")),
        Answer(0, 0, 1, 0, "k0", JsonPayload.of("a0")),
        Turn(0, 0, 1, 1, tp([2]), call("k1")),
        # A new life retries the pending call under its key.
        Answer(0, 0, 5, 1, "k1", JsonPayload.of("a1")),
        # A late answer of the old attempt: fenced, never part of the episode.
        Answer(0, 0, 1, 1, "k1", JsonPayload.of("late")),
        Turn(0, 0, 5, 2, tp([3])),
    ]
    state = replay(recs)
    got = state.get(0, 0)
    assert got is not None and got.attempt == 5 and state.fenced == 1
    assert [t.answer for t in got.turns] == [JsonPayload.of("a0"), JsonPayload.of("a1"), None]
    assert got.pending is None


def test_a_restart_keeps_nothing_and_a_seal_keeps_the_transcript() -> None:
    recs: list[Record] = [
        Turn(0, 0, 1, 0, tp([1]), call("k0")),
        Turn(0, 0, 2, 0, tp([9]), call("k0'")),
    ]
    got = replay(recs).get(0, 0)
    assert got is not None and got.turns == (TurnState(tp([9]), call("k0'")),)
    done = [
        *recs,
        Answer(0, 0, 2, 0, "k0'", JsonPayload.of("a"), JsonPayload.of({"s": 1})),
        Turn(0, 0, 2, 1, tp([4])),
        Sealed(0, 0, 2, tp([9, 4])),
    ]
    sealed = replay(done)
    # The seal holds the sample and the episode's transcript: each turn's
    # tokens, call, answer and state (what a trainer masks), across a crash.
    transcript = (
        TurnState(tp([9]), call("k0'"), JsonPayload.of("a"), JsonPayload.of({"s": 1})),
        TurnState(tp([4])),
    )
    assert sealed.get(0, 0) == SiblingState(2, tp([9, 4]), True, transcript)
    assert replay(compact(done, range(1))) == sealed
    assert reusable(sealed, Reuse.within(0), fork=0, step=0) == sealed
    # A newer attempt's seal (a group generated again) is a sample of its own.
    again = replay([*done, Sealed(0, 0, 3, tp([5]))])
    assert again.get(0, 0) == SiblingState(3, tp([5]), True)


def test_nothing_follows_a_turn_without_a_call() -> None:
    """A turn without a call is the episode's last: neither its attempt nor
    a continuation may append a turn after it (a crash between it and the
    seal leaves an episode to seal, not to continue)."""
    done: list[Record] = [
        Turn(0, 0, 1, 0, tp([1]), call("k")),
        Answer(0, 0, 1, 0, "k", JsonPayload.of(0)),
        Turn(0, 0, 1, 1, tp([2])),
    ]
    for after in (Turn(0, 0, 1, 2, tp([3]), call("k2")), Turn(0, 0, 2, 2, tp([3]))):
        with pytest.raises(JournalEpisodeError, match="without a call"):
            replay([*done, after])
    # A continuation may still replace the last turn, or restart.
    assert len(replay([*done, Turn(0, 0, 2, 1, tp([7]))]).get(0, 0).turns) == 2  # type: ignore[union-attr]
    assert len(replay([*done, Turn(0, 0, 2, 0, tp([7]))]).get(0, 0).turns) == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("recs", "reason"),
    [
        ([Answer(0, 0, 0, 0, "k", BytesPayload(b""))], "no call is pending"),
        (
            [Turn(0, 0, 0, 0, tp([1]), call("k")), Answer(0, 0, 0, 0, "other", BytesPayload(b""))],
            "an answer for key 'other'",
        ),
        (
            [Turn(0, 0, 0, 0, tp([1]), call("k")), Answer(0, 0, 0, 1, "k", BytesPayload(b""))],
            "at turn 1",
        ),
        ([Turn(0, 0, 0, 1, tp([1]))], "holds only 0 answered turns"),
        ([Turn(0, 0, 0, 0, tp([1])), Turn(0, 0, 0, 2, tp([1]))], "turn 2 of attempt 0"),
        (
            [Turn(0, 0, 0, 0, tp([1]), call("k")), Turn(0, 0, 0, 1, tp([1]))],
            "a call pending",
        ),
        (
            [Turn(0, 0, 0, 0, tp([1]), call("k")), Turn(0, 0, 1, 1, tp([1]))],
            "continues the episode at turn 1",
        ),
    ],
)
def test_a_turn_out_of_order_or_an_answer_for_an_unknown_key_is_a_typed_error(
    recs: list[Record], reason: str
) -> None:
    with pytest.raises(JournalEpisodeError, match=reason) as info:
        replay([Progress(9, 9, 0, BytesPayload(b"other")), *recs])
    assert info.value.index == len(recs) and (info.value.ordinal, info.value.sibling) == (0, 0)
    assert isinstance(info.value, JournalError)


_K = call("k")
_ANSWERED: list[Record] = [
    Turn(0, 0, 0, 0, tp([1]), _K),
    Answer(0, 0, 0, 0, "k", JsonPayload.of(0)),
]


@pytest.mark.parametrize(
    ("recs", "reason"),
    [
        (
            [*_ANSWERED, Turn(0, 0, 0, 2, tp([2]))],
            "turn 2 of attempt 0, but the episode holds 1 turns",
        ),
        (
            [Turn(0, 0, 0, 0, tp([1]), _K), Turn(0, 0, 0, 1, tp([2]))],
            "turn 1 of attempt 0, but the episode holds 1 turns and a call pending",
        ),
        (
            [Turn(0, 0, 0, 0, tp([1])), Turn(0, 0, 0, 1, tp([2]))],
            "turn 1 of attempt 0, but the episode holds 1 turns, the last without a call",
        ),
        (
            [Turn(0, 0, 0, 0, tp([1]), _K), Turn(0, 0, 1, 1, tp([2]))],
            "attempt 1 continues the episode at turn 1, but it holds only 0 answered turns",
        ),
        (
            [*_ANSWERED, Turn(0, 0, 0, 1, tp([2])), Turn(0, 0, 2, 2, tp([3]))],
            "attempt 2 continues the episode at turn 2, but it holds only 2 answered turns, "
            "turn 1 without a call",
        ),
        (
            [Answer(0, 0, 0, 0, "k", JsonPayload.of(0))],
            "an answer for key 'k' at turn 0, but no call is pending",
        ),
        (
            [Turn(0, 0, 0, 0, tp([1]), _K), Answer(0, 0, 0, 0, "other", JsonPayload.of(0))],
            "an answer for key 'other' at turn 0, but the pending call is turn 0's, key 'k'",
        ),
    ],
)
def test_an_episode_refusal_says_exactly_what_the_episode_holds(
    recs: list[Record], reason: str
) -> None:
    """The reason names the turn, the attempt and what the episode holds,
    and adds a clause only for the case it names (a call pending, a last
    turn without a call)."""
    with pytest.raises(JournalEpisodeError) as info:
        replay(recs)
    assert info.value.reason == reason
    assert str(info.value) == f"record {len(recs) - 1}: episode of ordinal 0 sibling 0: {reason}"


def test_advance_refuses_one_record_on_its_own_with_no_index() -> None:
    """``advance`` checks one record, outside any journal: its refusal names
    the episode and the reason, and no record index."""
    with pytest.raises(JournalEpisodeError) as info:
        advance(None, Answer(0, 1, 0, 0, "k", JsonPayload.of(0)))
    reason = "an answer for key 'k' at turn 0, but no call is pending"
    assert info.value.index is None and info.value.reason == reason
    assert str(info.value) == f"episode of ordinal 0 sibling 1: {reason}"


def test_a_turn_leaves_its_sibling_unsealed_with_no_tokens_of_the_next_turn() -> None:
    """A turn (the first after a sample's progress of its attempt, or the
    episode's next) and an answer leave the sibling unsealed under the
    record's attempt, with the turns so far and no tokens of the next
    turn."""
    first = TurnState(tp([1]), _K)
    state = replay([Progress(0, 0, 3, tp([9])), Turn(0, 0, 3, 0, tp([1]), _K)])
    assert state.get(0, 0) == SiblingState(3, NO_TOKENS, False, (first,))
    answered = TurnState(tp([1]), _K, JsonPayload.of(0))
    state = replay([*_ANSWERED, Turn(0, 0, 0, 1, tp([2]))])
    assert state.get(0, 0) == SiblingState(0, NO_TOKENS, False, (answered, TurnState(tp([2]))))
    state = replay(_ANSWERED)
    assert state.get(0, 0) == SiblingState(0, NO_TOKENS, False, (answered,))


def test_extends_of_the_current_attempt_add_the_next_turns_tokens_and_keep_the_turns() -> None:
    """An ``Extend`` after an answer adds the tokens of the turn being
    generated to the payload; the episode's turns stay as they were."""
    recs: list[Record] = [*_ANSWERED, Extend(0, 0, 0, 0, tp([7])), Extend(0, 0, 0, 1, tp([8]))]
    answered = TurnState(tp([1]), _K, JsonPayload.of(0))
    assert replay(recs).get(0, 0) == SiblingState(0, tp([7, 8]), False, (answered,))


def test_fenced_turns_and_answers_are_ignored_not_refused() -> None:
    recs: list[Record] = [
        Turn(0, 0, 3, 0, tp([1]), call("k")),
        Turn(0, 0, 2, 7, tp([1])),  # an older attempt: fenced, whatever it says
        Answer(0, 0, 2, 9, "zz", BytesPayload(b"")),
        Answer(0, 0, 3, 0, "k", BytesPayload(b"")),
        Sealed(0, 0, 3, tp([1])),
        Turn(0, 0, 3, 1, tp([1])),  # after the seal
        Answer(0, 0, 3, 0, "k", BytesPayload(b"")),
    ]
    state = replay(recs)
    episode = (TurnState(tp([1]), call("k"), BytesPayload(b"")),)
    assert state.fenced == 4 and state.get(0, 0) == SiblingState(3, tp([1]), True, episode)


def test_progress_of_the_current_attempt_keeps_the_turns_and_compaction_keeps_it() -> None:
    recs: list[Record] = [
        Turn(0, 0, 1, 0, tp([1]), call("k")),
        Answer(0, 0, 1, 0, "k", JsonPayload.of(1)),
        Progress(0, 0, 1, tp([7, 8])),  # tokens of turn 1 so far
    ]
    state = replay(recs)
    got = state.get(0, 0)
    assert got is not None and got.payload == tp([7, 8]) and len(got.turns) == 1
    assert replay(compact(recs, range(1))) == state
    # A newer attempt's progress restarts the sibling: the turns go.
    again = replay([*recs, Progress(0, 0, 2, tp([1]))]).get(0, 0)
    assert again == SiblingState(2, tp([1]), False)


def test_reuse_within_keeps_the_young_leading_turns_whole() -> None:
    recs: list[Record] = [
        Turn(0, 0, 1, 0, tp([1, 2], version=5), call("k0")),
        Answer(0, 0, 1, 0, "k0", JsonPayload.of(0)),
        Turn(0, 0, 1, 1, tp([3], version=1), call("k1")),
    ]
    state = replay(recs)
    young = reusable(state, Reuse.within(2), fork=5, step=6)
    got = young.get(0, 0)
    assert got is not None and [t.tokens for t in got.turns] == [tp([1, 2], version=5)]
    assert got.pending is None
    assert reusable(state, Reuse.within(0), fork=5, step=6).get(0, 0) is None
    assert reusable(state, Reuse.everything(), fork=5, step=6) == state


def test_reuse_within_keeps_every_young_leading_turn_and_the_young_prefix_after_them() -> None:
    """``Reuse.within`` keeps all the leading turns whose every token is
    young, however many, and stops at the first old one; when every turn
    is young, the tokens of the turn being generated are kept up to their
    first old token."""
    young = [tp([1], version=5), tp([2, 3], version=6)]
    recs: list[Record] = []
    for i, tokens in enumerate(young):
        recs += [
            Turn(0, 0, 1, i, tokens, call(f"k{i}")),
            Answer(0, 0, 1, i, f"k{i}", BytesPayload(b"")),
        ]
    turns = tuple(TurnState(t, call(f"k{i}"), BytesPayload(b"")) for i, t in enumerate(young))
    old_turn = Turn(0, 0, 1, 2, tp([4], version=1), call("k2"))
    got = reusable(replay([*recs, old_turn]), Reuse.within(2), fork=6, step=7)
    assert got.get(0, 0) == SiblingState(1, NO_TOKENS, False, turns)
    partial = Progress(0, 0, 1, TokenPayload.of([7, 8, 9], [-0.5] * 3, [6, 6, 1]))
    got = reusable(replay([*recs, partial]), Reuse.within(2), fork=6, step=7)
    assert got.get(0, 0) == SiblingState(1, tp([7, 8], version=6), False, turns)


def test_reuse_continues_young_turns_without_a_payload_it_cannot_age() -> None:
    """Every turn young, but a seal whose sample is not young whole, or an
    opaque progress (no versions to age): the turns are continued, with no
    tokens of the next turn."""
    recs: list[Record] = [
        Turn(0, 0, 1, 0, tp([1], version=6), call("k")),
        Answer(0, 0, 1, 0, "k", BytesPayload(b"")),
    ]
    turns = (TurnState(tp([1], version=6), call("k"), BytesPayload(b"")),)
    for last in (Sealed(0, 0, 1, tp([1, 2], version=1)), Progress(0, 0, 1, BytesPayload(b"x"))):
        got = reusable(replay([*recs, last]), Reuse.within(2), fork=6, step=7)
        assert got.get(0, 0) == SiblingState(1, NO_TOKENS, False, turns)


def test_a_sealed_episode_is_reused_whole_only_if_every_turn_is_young() -> None:
    """Found by the exhaustive explorer: a sealed episode whose sample is
    young but whose first turn is old was kept whole, the old turn in the
    transcript a trainer masks; it is an episode whose leading young turns
    are none (``Reuse``: a turn is kept whole or not at all)."""
    old_turn = tp([1], version=0)
    recs: list[Record] = [
        Turn(0, 0, 1, 0, old_turn, call("k0")),
        Answer(0, 0, 1, 0, "k0", JsonPayload.of(0)),
        Sealed(0, 0, 1, tp([1], version=5)),
    ]
    state = replay(recs)
    assert reusable(state, Reuse.within(1), fork=5, step=5).get(0, 0) is None
    # Young throughout (the sample and every turn): kept sealed, as it is.
    assert reusable(state, Reuse.within(5), fork=5, step=5) == state


# -- the model and the machine -------------------------------------------------------


class EpisodeMachine(RuleBasedStateMachine):
    """Lives of one run writing episodes of a few siblings into one journal.

    A life recovers (replay of the durable records), continues every
    unfinished episode by the retry policy under a new attempt, and writes
    turns and answers as the driver does: the call's intent durable before
    the tool runs, the answer after. A crash loses what was not durable
    (any suffix of the records since the last sync) and can strike between
    the tool's execution and the answer's record. A stale attempt's answer
    can reach the journal after a newer attempt's record. The tool executes
    a key at most once and replays its recorded answer."""

    SIBLINGS = ((0, 0), (0, 1), (1, 0))

    def __init__(self) -> None:
        super().__init__()
        self.durable: list[Record] = []
        self.unsynced: list[Record] = []
        self.attempt = 0
        self.life: dict[tuple[int, int], SiblingState | None] = {}
        self.attempts: dict[tuple[int, int], int] = {}
        self.executed: dict[str, int] = {}  # key -> executions
        self.requests: dict[str, int] = {}  # key -> calls sent to the tool
        self.retries: dict[str, int] = {}  # key -> lives that found it pending
        self.abandoned: set[str] = set()  # keys of episodes a failed group dropped
        self.answers: dict[str, JsonPayload] = {}
        self.stale: list[Answer] = []
        self.trained: list[tuple[TurnState, ...]] = []
        self._start_life()

    def _start_life(self) -> None:
        state = replay(self.durable)
        self.life = {}
        for key in self.SIBLINGS:
            got = state.get(*key)
            if got is not None and got.sealed:
                continue
            if got is not None and got.pending is not None:
                self.retries[got.pending.key] = self.retries.get(got.pending.key, 0) + 1
            self.attempt += 1
            self.attempts[key] = self.attempt
            self.life[key] = got

    def _write(self, key: tuple[int, int], record: Turn | Answer | Sealed) -> SiblingState:
        new = advance(self.life[key], record)
        assert new is not None, "the writer's own record was fenced"
        self.life[key] = new
        self.unsynced.append(record)
        return new

    def _tool(self, key: str) -> JsonPayload:
        """The tool: every request counted, a key executed once (its
        contract). A request is sent only for a call whose intent is durable
        and pending (write-ahead; a retry only after a crash found it so)."""
        durable = replay(self.durable)
        assert any(
            sib.pending is not None and sib.pending.key == key for _o, _s, sib in durable.siblings()
        ), f"call {key} sent before its intent was durable"
        self.requests[key] = self.requests.get(key, 0) + 1
        if key not in self.answers:
            self.executed[key] = self.executed.get(key, 0) + 1
            self.answers[key] = JsonPayload.of([key, len(self.answers)])
        return self.answers[key]

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        if not self.life:
            return
        key = data.draw(st.sampled_from(sorted(self.life)))
        a = self.attempts[key]
        cur = self.life[key]
        turns = () if cur is None else cur.turns
        if cur is not None and cur.pending is not None:
            # The retry policy: the pending call again, under its stored key.
            pending = cur.pending
            self._write(key, Answer(*key, a, len(turns) - 1, pending.key, self._tool(pending.key)))
            return
        t = len(turns)
        if cur is not None and turns and turns[-1].call is None:
            # The last turn is durable, its seal was lost: sealed as it
            # stands, that turn journaled again under this attempt (as the
            # driver does) so the seal keeps the transcript.
            done = self._write(key, Turn(*key, a, t - 1, turns[-1].tokens))
            assert done.turns == turns
            self.trained.append(turns)
            self._write(key, Sealed(*key, a, tp([x.tokens.tokens()[0] for x in turns])))
            del self.life[key]
            return
        if t >= 3 or data.draw(st.integers(0, 4)) == 0:
            done = self._write(key, Turn(*key, a, t, tp([t])))
            self.trained.append(done.turns)
            self._write(key, Sealed(*key, a, tp([x.tokens.tokens()[0] for x in done.turns])))
            del self.life[key]
            return
        k = call_key("run", key[0], key[1], a, t)
        self._write(key, Turn(*key, a, t, tp([t]), ToolCall("kv", JsonPayload.of(t), k)))
        self.sync()  # write-ahead: the intent is durable before the call
        answer = self._tool(k)
        self.stale.append(Answer(*key, a, t, k, JsonPayload.of("stale")))
        if data.draw(st.integers(0, 5)) == 0:
            self.crash(0)  # between the tool's answer and its record
            return
        self._write(key, Answer(*key, a, t, k, answer))

    @precondition(lambda self: bool(self.life))
    @rule(data=st.data())
    def group_fails(self, data: st.DataObject) -> None:
        """A sibling's group fails whole and is dealt again: its new attempt
        starts the episode afresh (turn 0), whatever the journal holds (the
        run hands a re-dealt lease no episode). Its calls made so far keep
        their effects, in no trained episode."""
        key = data.draw(st.sampled_from(sorted(self.life)))
        cur = self.life[key]
        if cur is not None:
            self.abandoned.update(t.call.key for t in cur.turns if t.call is not None)
        self.attempt += 1
        self.attempts[key] = self.attempt
        self.life[key] = None

    @rule()
    def sync(self) -> None:
        self.durable += self.unsynced
        self.unsynced = []

    @rule(keep=st.integers(0, 8))
    def crash(self, keep: int) -> None:
        self.durable += self.unsynced[:keep]
        self.unsynced = []
        self._start_life()

    @precondition(lambda self: bool(self.stale))
    @rule()
    def a_stale_answer_lands(self) -> None:
        """An answer of an attempt a newer one superseded reaches the
        journal late: replay ignores it (and so never trains it)."""
        record = self.stale.pop()
        self.sync()
        current = replay(self.durable).get(record.ordinal, record.sibling)
        if current is None or current.attempt <= record.attempt:
            return  # not superseded yet: its writer would not be stale
        before = replay(self.durable)
        self.durable.append(record)
        after = replay(self.durable)
        assert after == before and after.fenced == before.fenced + 1

    @precondition(lambda self: bool(self.life))
    @rule(data=st.data())
    def a_bad_turn_or_answer_is_refused(self, data: st.DataObject) -> None:
        """A turn past the next (a gap), an answer under a key no call has,
        or one for the turn after the last, by the sibling's current
        attempt: the writer's check (``advance``) refuses it, and a journal
        it was appended to (damage, a foreign writer) is refused at replay
        naming its index, whatever the lives wrote before."""
        key = data.draw(st.sampled_from(sorted(self.life)))
        a = self.attempts[key]
        journal = [*self.durable, *self.unsynced]
        held = replay(journal).get(*key)
        if held is not None and (held.attempt > a or held.sealed):
            return  # not this life's sibling to write
        turns = () if held is None else held.turns
        last = turns[-1].call if turns else None
        bad = data.draw(
            st.sampled_from(
                [
                    Turn(*key, a, len(turns) + 1, tp([9]), call("gap")),
                    Answer(*key, a, max(len(turns) - 1, 0), "unknown", JsonPayload.of("x")),
                    Answer(*key, a, len(turns), "k" if last is None else last.key, tp([9])),
                ]
            )
        )
        with pytest.raises(JournalEpisodeError):
            advance(held, bad)
        with pytest.raises(JournalEpisodeError) as info:
            replay([*journal, bad])
        assert info.value.index == len(journal) and (info.value.ordinal, info.value.sibling) == key

    @rule(window=st.integers(0, 2))
    def compact_journal(self, window: int) -> None:
        self.sync()
        kept = compact(self.durable, range(window, 2))
        assert replay(kept) == replay(self.durable).restrict(range(window, 2))
        if window == 0:
            self.durable = list(kept)  # what a run does after a checkpoint at cut 0

    @invariant()
    def continuation_is_exact(self) -> None:
        """What a new life would recover is exactly what this one wrote
        durably: every live episode's turns, answers and pending call."""
        if self.unsynced:
            return
        state = replay(self.durable)
        for key, mine in self.life.items():
            if mine is not None and mine.attempt == self.attempts[key]:
                assert state.get(*key) == mine

    @invariant()
    def side_effects_at_most_once_per_key(self) -> None:
        assert all(n == 1 for n in self.executed.values())
        # Per logical call: sent once, and again once per life that found
        # it pending (the retry policy), never more.
        for key, n in self.requests.items():
            assert n <= 1 + self.retries.get(key, 0), f"call {key} sent {n} times"

    @invariant()
    def no_execution_is_orphaned(self) -> None:
        """Every executed call is in a trained episode or in the durable
        journal (answered, or pending: to be retried under its key): none
        was made under an intent a crash lost."""
        keys = {t.call.key for turns in self.trained for t in turns if t.call is not None}
        keys |= self.abandoned
        for _o, _s, sib in replay(self.durable).siblings():
            keys.update(t.call.key for t in sib.turns if t.call is not None)
        assert set(self.executed) <= keys, sorted(set(self.executed) - keys)

    @invariant()
    def no_stale_answer_is_trained(self) -> None:
        episodes = [*self.trained, *(sib.turns for _o, _s, sib in replay(self.durable).siblings())]
        for turns in episodes:
            for t in turns:
                if t.call is not None and t.answer is not None:
                    assert t.answer == self.answers[t.call.key]


TestEpisodeMachine = EpisodeMachine.TestCase
TestEpisodeMachine.settings = budget(60)


def test_a_version_2_journal_continued_by_this_release_reads_with_its_turns() -> None:
    """A journal created before version 3 keeps its header when this release
    continues it: its turn and answer frames are read (the module doc)."""
    head = forge_frame(0, 0, forge_header_body(version=2))
    frames = encode_records([TURN, ANSWER], first_seq=1, header=HEADER)
    assert decode(head + frames).records == (TURN, ANSWER)
