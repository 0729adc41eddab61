"""The journal's values (``_records``): each refusal by its exact reason, the
bounds of the fields at their edges, and the few behaviours of a payload the
codec tests do not reach (a run that goes on across a join, token ids and
versions above 2**31, JSON text kept as UTF-8).

Mutation testing (scripts/mutation.sh) pinned these; the equivalent
mutants of ``_records`` are in proofs/MUTANTS_JOURNAL.md.
"""

from __future__ import annotations

import math
import re
from array import array

import pytest

from frontier_core.journal import (
    BytesPayload,
    Extend,
    JournalHeader,
    JsonPayload,
    Mark,
    Progress,
    Sealed,
    TokenPayload,
    continue_sample,
)

pytestmark = pytest.mark.mutation

U32 = (1 << 32) - 1
U64 = (1 << 64) - 1


def exactly(message: str) -> str:
    """A ``match`` pattern for exactly ``message``."""
    return f"^{re.escape(message)}$"


def tp(tokens: list[int], versions: int | list[int] = 0) -> TokenPayload:
    return TokenPayload.of(tokens, [-0.5] * len(tokens), versions)


# -- the header's text fields ---------------------------------------------------------


def test_header_text_fields_are_bounded_by_their_length_prefixes_inclusive() -> None:
    """The fingerprint has a u16 length prefix and may be empty; the lineage
    a u8 one and may not. Both limits are byte counts of UTF-8, and each is
    reached, not passed."""
    assert len(JournalHeader("f" * 0xFFFF, "run").fingerprint) == 0xFFFF
    assert JournalHeader("", "l" * 0xFF).lineage == "l" * 0xFF
    assert JournalHeader("", "é" * 127 + "x").lineage.encode() == b"\xc3\xa9" * 127 + b"x"


def test_a_refused_header_says_which_field_and_why() -> None:
    cases: list[tuple[tuple[object, ...], type[Exception], str]] = [
        ((b"fp", "run"), TypeError, "fingerprint must be a str, got bytes"),
        (("fp", 7), TypeError, "lineage must be a str, got int"),
        (("fp", ""), ValueError, "lineage must be 1..255 bytes of UTF-8, got 0"),
        (("fp", "é" * 128), ValueError, "lineage must be 1..255 bytes of UTF-8, got 256"),
        (
            ("f" * 0x10000, "run"),
            ValueError,
            "fingerprint must be 0..65535 bytes of UTF-8, got 65536",
        ),
        (("\ud800", "run"), ValueError, "fingerprint is not UTF-8 (it holds a lone surrogate)"),
        (("fp", "run", U64), ValueError, f"base must be an int in [0, {U64 - 1}], got {U64}"),
        (("fp", "run", -1), ValueError, f"base must be an int in [0, {U64 - 1}], got -1"),
        (("fp", "run", True), TypeError, "base must be an int, got bool"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=exactly(message)):
            JournalHeader(*args)  # type: ignore[arg-type]
    assert JournalHeader("fp", "run", U64 - 1).base == U64 - 1


# -- the records' integer fields --------------------------------------------------------


def test_record_fields_are_refused_by_name_at_their_width() -> None:
    p = BytesPayload(b"")
    cases: list[tuple[object, type[Exception], str]] = [
        (lambda: Sealed(U64 + 1, 0, 0, p), ValueError, f"ordinal must be an int in [0, {U64}]"),
        (lambda: Progress(0, U32 + 1, 0, p), ValueError, f"sibling must be an int in [0, {U32}]"),
        (lambda: Sealed(0, 0, -1, p), ValueError, f"attempt must be an int in [0, {U32}]"),
        (
            lambda: Extend(0, 0, 0, U32 + 1, tp([])),
            ValueError,
            f"start must be an int in [0, {U32}]",
        ),
        (lambda: Mark(U64 + 1), ValueError, f"checkpoint must be an int in [0, {U64}]"),
        (lambda: Mark(False), TypeError, "checkpoint must be an int, got bool"),
    ]
    for build, error, prefix in cases:
        with pytest.raises(error, match=f"^{re.escape(prefix)}"):
            build()  # type: ignore[operator]
    top = Extend(U64, U32, U32, U32, tp([1]))
    assert (top.ordinal, top.sibling, top.attempt, top.start) == (U64, U32, U32, U32)
    assert Mark(U64).checkpoint == U64


def test_an_extend_carries_a_token_prefix_and_says_so() -> None:
    with pytest.raises(
        TypeError, match=exactly("an Extend carries a TokenPayload, got BytesPayload")
    ):
        Extend(0, 0, 0, 0, BytesPayload(b""))  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=exactly("an Extend continues a running sample: it carries no reward")
    ):
        Extend(0, 0, 0, 0, TokenPayload.of([1], [-0.5], 0, reward=0.0))


# -- JSON --------------------------------------------------------------------------------


def test_json_text_is_kept_as_utf8_not_escaped() -> None:
    """The canonical text holds non-ASCII characters as they are (the
    journal stores UTF-8), not as ``\\u`` escapes."""
    assert JsonPayload.of({"é": "ü", "a": ["日本"]}).text == '{"a":["日本"],"é":"ü"}'


def test_json_refuses_nan_when_it_is_encoded() -> None:
    """``JsonPayload.of`` refuses a non-finite float as the JSON encoder
    does (``allow_nan=False``), before any text exists."""
    for value in (math.nan, [1.0, math.inf], {"x": -math.inf}):
        with pytest.raises(ValueError, match=r"^Out of range float values are not JSON compliant"):
            JsonPayload.of(value)


def test_a_refused_json_text_says_why() -> None:
    with pytest.raises(TypeError, match=exactly("text must be a str, got bytes")):
        JsonPayload(b"{}")  # type: ignore[arg-type]
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(
            ValueError, match=exactly(f"text is not strict JSON: {constant} is not JSON")
        ):
            JsonPayload(f"[{constant}]")
    with pytest.raises(ValueError, match=r"^text is not strict JSON: Expecting value"):
        JsonPayload("")


# -- token payloads -----------------------------------------------------------------------


def test_a_refused_token_payload_says_why() -> None:
    one = b"\0" * 4
    cases: list[tuple[object, type[Exception], str]] = [
        (
            lambda: TokenPayload(one, one, 5),
            TypeError,
            "version_runs must be pairs (first token, version), got 5",
        ),
        (
            lambda: TokenPayload(one, one, "ab"),
            TypeError,
            "version_runs must be pairs (first token, version), got 'ab'",
        ),
        (
            lambda: TokenPayload(one, one, ["ab"]),
            TypeError,
            "version_runs holds 'ab', not a (first token, version) pair",
        ),
        (
            lambda: TokenPayload(one, one, [(0, 1, 2)]),
            TypeError,
            "version_runs holds (0, 1, 2), not a (first token, version) pair",
        ),
        (
            lambda: TokenPayload(one, one, [(-1, 0)]),
            ValueError,
            f"a run's first token must be an int in [0, {U32}], got -1",
        ),
        (
            lambda: TokenPayload(one, one, [(0, U32 + 1)]),
            ValueError,
            f"a run's version must be an int in [0, {U32}], got {U32 + 1}",
        ),
        (
            lambda: TokenPayload(one, one, [(0, 0)], reward=True),
            TypeError,
            "reward must be a float or None, got bool",
        ),
        (
            lambda: TokenPayload(one, one, [(0, 0)], reward=-math.inf),
            ValueError,
            "reward must be finite, got -inf",
        ),
    ]
    for build, error, message in cases:
        with pytest.raises(error, match=exactly(message)):
            build()  # type: ignore[operator]


def test_tokens_given_as_an_array_of_another_type_are_checked_as_values() -> None:
    """Only an array of the payload's own type is taken as it is; any other
    array is checked item by item, as a list would be."""
    with pytest.raises(ValueError, match=exactly(f"tokens must hold ints in [0, {U32}]")):
        TokenPayload.of(array("i", [-1]), [-0.5], 0)
    with pytest.raises(TypeError, match=exactly("tokens must hold ints, got a float")):
        TokenPayload.of(array("f", [1.0]), [-0.5], 0)
    wide = TokenPayload.of(array("Q", [U32]), array("d", [-0.5]), array("L", [7]))
    assert wide == TokenPayload.of([U32], [-0.5], 7)


def test_token_ids_and_versions_span_all_32_bits() -> None:
    """Ids and versions are u32: values at and above 2**31 read back as
    themselves, per token and per run."""
    top = [U32, 1 << 31, 0]
    payload = TokenPayload.of(top, [-0.5] * 3, [1 << 31, 1 << 31, U32])
    assert payload.tokens().tolist() == top
    assert payload.versions().tolist() == [1 << 31, 1 << 31, U32]
    assert payload.version_runs == ((0, 1 << 31), (2, U32))
    same = TokenPayload.of([1, 2], [-0.5, -0.5], [U32, U32])
    assert same.version_runs == ((0, U32),)


def test_a_run_that_goes_on_across_the_join_is_one_run_and_the_rest_follows() -> None:
    """Joining ``[3, 3]`` and ``[3, 4, 4]`` gives versions ``[3, 3, 3, 4, 4]``:
    the first run of the rest merges into the last of the prefix, and every
    later run of the rest is kept, shifted by the prefix's length."""
    whole = continue_sample(tp([1, 2], [3, 3]), tp([7, 8, 9], [3, 4, 4]))
    assert whole.versions().tolist() == [3, 3, 3, 4, 4]
    assert whole.version_runs == ((0, 3), (3, 4))
    assert whole.tokens().tolist() == [1, 2, 7, 8, 9]
    # A change of version at the join starts a run there.
    other = continue_sample(tp([1, 2], [3, 3]), tp([7, 8], [5, 6]))
    assert other.version_runs == ((0, 3), (2, 5), (3, 6))


def test_a_refused_payload_argument_says_why() -> None:
    nan = math.nan
    cases: list[tuple[object, type[Exception], str]] = [
        (lambda: BytesPayload(3), TypeError, "data must be bytes, got int"),
        (lambda: TokenPayload("ab", b"", ()), TypeError, "data must be bytes, got str"),
        (
            lambda: Sealed(0, 0, 0, {"tokens": [1]}),
            TypeError,
            "payload must be a BytesPayload, JsonPayload or TokenPayload, got dict "
            "(raw objects are never pickled)",
        ),
        (lambda: TokenPayload.of([1], [1], 0), TypeError, "logprobs must hold floats, got a int"),
        (lambda: TokenPayload.of([1], [-0.5, -0.5], 0), ValueError, "1 tokens but 2 logprobs"),
        (
            lambda: TokenPayload.of([1], [-0.5], True),
            TypeError,
            "versions must be an int, got bool",
        ),
        (
            lambda: TokenPayload.of([1], [-0.5], U32 + 1),
            ValueError,
            f"versions must be an int in [0, {U32}], got {U32 + 1}",
        ),
        (
            lambda: TokenPayload.of([1], [-0.5], [1.0]),
            TypeError,
            "versions must hold ints, got a float",
        ),
        (
            lambda: TokenPayload.of([1], [-0.5], [-1]),
            ValueError,
            f"versions must hold ints in [0, {U32}]",
        ),
        (lambda: TokenPayload.of([1, 2], [-0.5, -0.5], [0]), ValueError, "2 tokens but 1 versions"),
        (
            lambda: TokenPayload(b"\0" * 3, b"\0" * 3, ()),
            ValueError,
            "token_data and logprob_data must hold 4 bytes per token each, got 3 and 3 bytes",
        ),
        (
            lambda: TokenPayload(b"\0" * 4, b"\0" * 8, [(0, 0)]),
            ValueError,
            "token_data and logprob_data must hold 4 bytes per token each, got 4 and 8 bytes",
        ),
        (
            lambda: TokenPayload.of([1, 2], [-0.5, nan], 0),
            ValueError,
            "logprobs must be finite (as float32: no NaN, no inf)",
        ),
        (
            lambda: TokenPayload(b"\0" * 8, b"\0" * 8, ()),
            ValueError,
            "0 version runs for 2 tokens: the first run must start at token 0",
        ),
        (
            lambda: TokenPayload(b"\0" * 8, b"\0" * 8, [(1, 0)]),
            ValueError,
            "1 version runs for 2 tokens: the first run must start at token 0",
        ),
        (
            lambda: TokenPayload(b"\0" * 12, b"\0" * 12, [(0, 1), (3, 2)]),
            ValueError,
            "version run 1 starts at 3: runs ascend below 3",
        ),
        (
            lambda: TokenPayload(b"\0" * 12, b"\0" * 12, [(0, 1), (1, 2), (2, 2)]),
            ValueError,
            "version runs 1 and 2 repeat version 2",
        ),
    ]
    for build, error, message in cases:
        with pytest.raises(error, match=exactly(message)):
            build()  # type: ignore[operator]


def test_a_non_finite_logprob_is_refused_wherever_it_is_and_only_then() -> None:
    """Every log-prob is checked, not only some of them; a finite float32
    whose top byte is that of an inf or a NaN (a huge magnitude) is
    accepted."""
    for bad in (math.nan, math.inf, -math.inf):
        for at in range(6):
            logprobs = [-0.5] * 6
            logprobs[at] = bad
            with pytest.raises(ValueError, match=r"^logprobs must be finite"):
                TokenPayload.of(range(6), logprobs, 0)
    huge = [-3.0e38, 3.0e38, -0.5]  # float32 high bytes 0xFF and 0x7F, finite
    assert TokenPayload.of([1, 2, 3], huge, 0).logprobs().tolist() == array("f", huge).tolist()


def test_the_values_of_a_payload_may_be_any_iterables() -> None:
    """Generators are read once and packed, as lists are."""
    from_generators = TokenPayload.of(
        (t for t in [1, 2, 3]), (x for x in [-0.5, -0.25, -1.0]), (v for v in [3, 3, 4])
    )
    assert from_generators == TokenPayload.of([1, 2, 3], [-0.5, -0.25, -1.0], [3, 3, 4])
    assert from_generators.versions().tolist() == [3, 3, 4]
