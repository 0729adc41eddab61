"""The checkpoint record: round trips, every way a bad record is refused,
and the exact reasons, sizes and codes that pin the mutants of
``_checkpoint.py`` (scripts/mutation.sh)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

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
    FingerprintMismatchError,
    Ledger,
    LedgerConfig,
)
from frontier_core._checkpoint import groups_record

from ._strategies import ledgers

pytestmark = pytest.mark.mutation


def sample_record() -> dict[str, Any]:
    config = LedgerConfig(stream_len=40, fingerprint="ds")
    ledger = Ledger.start(config).stamp(20).ledger.dispatch(range(20)).ledger
    ledger = ledger.buffer(range(2, 20)).ledger.train([2, 3, 7, 8, 9]).ledger
    ledger = ledger.fail([0]).ledger.evict([11]).ledger
    return groups_record(ledger.checkpoint())


@settings(max_examples=150, deadline=None)
@given(ledger=ledgers(), save_buffer=st.booleans())
def test_record_survives_json_and_reads_back_equal(ledger: Ledger, save_buffer: bool) -> None:
    """CKPT-ROUNDTRIP."""
    checkpoint = ledger.checkpoint(save_buffer=save_buffer)
    record = json.loads(json.dumps(checkpoint.state_dict()))
    assert Checkpoint.from_state_dict(record, fingerprint=ledger.config.fingerprint) == checkpoint
    # Resuming from the read-back record yields the same ledger as from the value.
    a = Ledger.resume(ledger.config, checkpoint, load_replay_buffer=True).ledger
    b = Ledger.resume(
        ledger.config, Checkpoint.from_state_dict(record), load_replay_buffer=True
    ).ledger
    assert a == b


@settings(max_examples=100, deadline=None)
@given(ledger=ledgers())
def test_resume_then_checkpoint_is_a_fixed_point(ledger: Ledger) -> None:
    """A kill right after a resume loses nothing: the state it would save
    equals the one it resumed from."""
    checkpoint = ledger.checkpoint()
    resumed = Ledger.resume(ledger.config, checkpoint, load_replay_buffer=True).ledger
    assert resumed.checkpoint() == checkpoint


def test_record_size_follows_the_window_not_the_run() -> None:
    """BOUNDED-SIZE on the wire: the same window after 10**3 and 2 * 10**5
    prompts differs only in the digits of the cut and of the attempt
    counter (one attempt per prompt at n = 1)."""

    def window_at(offset: int) -> int:
        ledger = Ledger.start(LedgerConfig(fingerprint="w"))
        ledger = ledger.stamp(offset).ledger.dispatch(range(offset)).ledger
        ledger = ledger.buffer(range(offset)).ledger.train(range(offset)).ledger
        ledger = ledger.stamp(40).ledger.dispatch(range(offset, offset + 40)).ledger
        ledger = ledger.buffer(range(offset, offset + 40, 3)).ledger
        ledger = ledger.train(range(offset + 3, offset + 40, 6)).ledger
        return len(json.dumps(ledger.checkpoint().state_dict()))

    small, large = window_at(1_000), window_at(200_000)
    assert large - small == 2 * (len(str(200_000)) - len(str(1_000)))


def test_the_record_nests_the_groups_record() -> None:
    """One checkpoint record: the ledger's (format ``frontier_core.samples``)
    around the groups' (``frontier_core.checkpoint``), each checksummed."""
    ledger = Ledger.start(LedgerConfig(stream_len=40, fingerprint="ds"))
    ledger = ledger.stamp(4).ledger.dispatch(range(4)).ledger.buffer([1]).ledger
    checkpoint = ledger.checkpoint()
    record = checkpoint.state_dict()
    assert record["format"] == "frontier_core.samples"
    assert (record["samples"], record["next_attempt"], record["sealed"]) == (1, 4, [])
    assert record["ledger"] == groups_record(checkpoint)
    assert record["ledger"]["format"] == "frontier_core.checkpoint"
    assert Checkpoint.from_state_dict(record, fingerprint="ds") == checkpoint


def test_a_groups_record_alone_reads_as_single_samples_with_no_attempt_dealt() -> None:
    """A record written by the prompt-level ``Ledger.checkpoint`` of before
    issue 22 (the groups' record alone) reads as n = 1, no attempt dealt,
    and a ledger resumes from it."""
    record = sample_record()
    checkpoint = Checkpoint.from_state_dict(record, fingerprint="ds")
    assert (checkpoint.samples, checkpoint.next_attempt, checkpoint.sealed) == (1, 0, ())
    assert checkpoint.cut == 1
    config = LedgerConfig(stream_len=40, fingerprint="ds")
    resumed = Ledger.resume(config, checkpoint, load_replay_buffer=True)
    assert resumed.ledger.cut == 1 and resumed.ledger.next_attempt == 0
    with pytest.raises(CheckpointMismatchError, match="groups of 1 samples, this run 2"):
        Ledger.resume(attrs.evolve(config, samples=2), checkpoint, load_replay_buffer=True)


def test_sample_record_is_json_only_and_ranged() -> None:
    record = sample_record()
    assert json.loads(json.dumps(record)) == record
    assert record["cut"] == 1
    # Delta-coded [gap, length] from the cut: trained {2, 3, 7, 8, 9} (above
    # the cut, so from 2), dropped {11}, retained {4..6, 10, 12..19} (from 1).
    assert record["trained_above_cut"] == [[0, 2], [3, 3]]
    assert record["dropped_above_cut"] == [[9, 1]]
    assert record["retained"] == [[3, 3], [3, 1], [1, 8]]
    assert record["checksum"].startswith("sha256:")


def mutate(record: dict[str, Any], key: str, value: object) -> dict[str, Any]:
    bad = copy.deepcopy(record)
    bad[key] = value
    return bad


def resign(record: dict[str, Any]) -> dict[str, Any]:
    """Recompute the checksum, to reach the structural checks behind it."""
    from frontier_core._checkpoint import _checksum

    body = {k: v for k, v in record.items() if k != "checksum"}
    return {**body, "checksum": _checksum(body)}


@pytest.mark.parametrize(
    ("key", "value"),
    [("cut", 2), ("trained_above_cut", [[2, 5]]), ("fingerprint", "other"), ("attempts", [[5, 1]])],
)
def test_any_altered_field_fails_the_checksum(key: str, value: object) -> None:
    with pytest.raises(CheckpointCorruptError, match="checksum"):
        Checkpoint.from_state_dict(mutate(sample_record(), key, value))


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("cut", -1, "'cut' must be an int >= 0"),
        ("cut", True, "'cut' must be an int >= 0"),
        ("trained_above_cut", [[-1, 2]], "'trained_above_cut' must be an int >= 0"),
        ("trained_above_cut", [[0, 0]], "n must be >= 1"),
        ("trained_above_cut", [[2, 4, 5]], "not a [gap, n] pair"),
        ("trained_above_cut", "2-4", "must be a list"),
        ("dropped_above_cut", [[0, 1]], "in both 'trained_above_cut' and 'dropped_above_cut'"),
        ("retained", [[6, 1]], "in both 'trained_above_cut' and 'retained'"),
        ("attempts", [[2, 1]], "already resolved"),
        ("attempts", [[3, 0]], "n must be >= 1"),
        ("stream_len", 15, "beyond its own stream length 15"),
        ("stream_len", "40", "'stream_len' must be an int"),
        ("fingerprint", 7, "must be a string"),
    ],
)
def test_structurally_broken_records_are_refused_by_name(
    key: str, value: object, words: str
) -> None:
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint.from_state_dict(resign(mutate(sample_record(), key, value)))
    assert words in str(info.value)


def test_missing_and_unknown_keys_are_named() -> None:
    record = sample_record()
    del record["retained"]
    record["extra"] = 1
    with pytest.raises(
        CheckpointCorruptError, match=r"missing keys \['retained'\] and unknown keys \['extra'\]"
    ):
        Checkpoint.from_state_dict(record)


@pytest.mark.parametrize(("key", "value"), [("version", 2), ("version", "1"), ("format", "torch")])
def test_other_versions_and_formats_are_refused(key: str, value: object) -> None:
    with pytest.raises(CheckpointVersionError):
        Checkpoint.from_state_dict(mutate(sample_record(), key, value))


def test_not_a_dict_is_refused() -> None:
    with pytest.raises(CheckpointCorruptError):
        Checkpoint.from_state_dict([1, 2])  # type: ignore[arg-type]


def test_fingerprint_mismatch_is_refused() -> None:
    with pytest.raises(FingerprintMismatchError, match="'ds'"):
        Checkpoint.from_state_dict(sample_record(), fingerprint="changed")


def test_every_refusal_is_a_checkpoint_error_and_a_value_error() -> None:
    for exc in (CheckpointCorruptError, CheckpointVersionError, FingerprintMismatchError):
        assert issubclass(exc, CheckpointError) and issubclass(exc, ValueError)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_random_corruption_never_reads_back_silently(data: st.DataObject) -> None:
    """CKPT-REJECT: flip one character of the serialized record; either
    parsing fails, or the checksum (or the format check) refuses it."""
    text = json.dumps(sample_record())
    i = data.draw(st.integers(0, len(text) - 1))
    c = data.draw(st.characters(codec="ascii").filter(lambda ch: ch != text[i]))
    corrupted = text[:i] + c + text[i + 1 :]
    try:
        record = json.loads(corrupted)
    except json.JSONDecodeError:
        return
    if record == json.loads(text):
        return  # e.g. whitespace changed: the same record
    with pytest.raises(CheckpointError):
        Checkpoint.from_state_dict(record)


# -- the checkpoint record -----------------------------------------------------


def test_record_size_and_resolved_count_are_exact() -> None:
    """``size`` is the number of integers in the record (what BOUNDED-SIZE
    bounds): two per range or attempt pair, plus the cut and the length."""
    saved = Checkpoint(
        cut=0,
        trained_above_cut=((1, 3),),
        dropped_above_cut=((4, 5), (6, 9)),
        retained=((10, 11), (12, 13), (14, 15)),
        failures=((16, 1), (17, 2), (18, 1), (19, 3)),
    )
    assert saved.size() == 2 * (1 + 2 + 3 + 4) + 2
    assert Checkpoint(cut=7).size() == 2
    assert saved.resolved_count == 2 + 1 + 3
    assert Checkpoint(cut=3).resolved_count == 0


def test_a_record_keeping_attempts_of_a_resolved_ordinal_is_refused() -> None:
    """The ordinal at the very start of a resolved range counts as resolved."""
    for field in ("trained_above_cut", "dropped_above_cut"):
        for o in (5, 6):
            with pytest.raises(CheckpointCorruptError) as info:
                Checkpoint(cut=0, **{field: ((5, 7),), "failures": ((o, 1),)})  # type: ignore[arg-type]
            assert str(info.value) == (
                f"checkpoint keeps failures for ordinal {o}, which is already resolved"
            )
    fine = Checkpoint(cut=0, trained_above_cut=((5, 7),), failures=((4, 1), (7, 1)))
    assert Checkpoint.from_state_dict(fine.state_dict()) == fine


def _signed(**fields: object) -> dict[str, object]:
    """A record with these fields, checksummed by an independent writer."""
    body = groups_record(Checkpoint(cut=3, stream_len=20, fingerprint="fp"))
    del body["checksum"]
    body.update(fields)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {**body, "checksum": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()}


def test_the_checksum_is_the_documented_canonical_form() -> None:
    """Records written by one version must read back in the next: the
    checksum is SHA-256 over compact, key-sorted, ASCII-escaped JSON."""
    for fingerprint in ("fp", "données-v2"):
        record = groups_record(Checkpoint(cut=3, stream_len=20, fingerprint=fingerprint))
        assert record == _signed(fingerprint=fingerprint)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"format": "x"}, CheckpointVersionError,
         "not a frontier_core checkpoint: 'format' is 'x', expected 'frontier_core.samples' "
         "(or 'frontier_core.checkpoint')"),
        ({"version": 2}, CheckpointVersionError,
         "checkpoint schema version 2 is not supported (this library reads version 1)"),
        ({"x": 1}, CheckpointCorruptError,
         "checkpoint record has missing keys [] and unknown keys ['x']"),
        ({"trained_above_cut": [[5]]}, CheckpointCorruptError,
         "'trained_above_cut' holds [5], not a [gap, n] pair"),
        ({"trained_above_cut": [[-1, 5]]}, CheckpointCorruptError,
         "'trained_above_cut' must be an int >= 0, got -1"),
        ({"dropped_above_cut": [[5, "6"]]}, CheckpointCorruptError,
         "'dropped_above_cut' must be an int >= 0, got '6'"),
        ({"dropped_above_cut": [[3, 0]]}, CheckpointCorruptError,
         "'dropped_above_cut' holds [3, 0]: n must be >= 1"),
        ({"retained": [[0, 0]]}, CheckpointCorruptError,
         "'retained' holds [0, 0]: n must be >= 1"),
        ({"retained": [[5, 6.0]]}, CheckpointCorruptError,
         "'retained' must be an int >= 0, got 6.0"),
        ({"attempts": {}}, CheckpointCorruptError,
         "'attempts' must be a list of [gap, n] pairs"),
        ({"attempts": [[5, 1, 2]]}, CheckpointCorruptError,
         "'attempts' holds [5, 1, 2], not a [gap, n] pair"),
        ({"attempts": [[-5, 1]]}, CheckpointCorruptError,
         "'attempts' must be an int >= 0, got -5"),
        ({"attempts": [[5, None]]}, CheckpointCorruptError,
         "'attempts' must be an int >= 0, got None"),
        ({"attempts": [[5, 0]]}, CheckpointCorruptError,
         "'attempts' holds [5, 0]: n must be >= 1"),
        ({"trained_above_cut": [[0, 2]], "dropped_above_cut": [[1, 1]]},
         CheckpointCorruptError,
         "checkpoint lists ordinal 5 in both 'trained_above_cut' and 'dropped_above_cut'"),
        ({"trained_above_cut": [[15, 2]]}, CheckpointCorruptError,
         "checkpoint refers to ordinal 20 beyond its own stream length 20"),
    ],
)  # fmt: skip
def test_a_bad_record_is_refused_with_its_exact_reason(
    fields: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        Checkpoint.from_state_dict(_signed(**fields))
    assert type(info.value) is error and str(info.value) == message


def test_the_record_level_refusals_say_what_they_found() -> None:
    cases = [
        ([], "checkpoint record must be a dict, got list"),
        ({k: v for k, v in _signed().items() if k != "attempts"},
         "checkpoint record has missing keys ['attempts'] and unknown keys []"),
    ]  # fmt: skip
    for record, message in cases:
        with pytest.raises(CheckpointCorruptError) as info:
            Checkpoint.from_state_dict(record)  # type: ignore[arg-type]
        assert str(info.value) == message
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint.from_state_dict({**_signed(), "fingerprint": float("nan")})
    assert str(info.value).startswith("checkpoint record is not JSON data: Out of range float")
    altered = {**_signed(), "cut": 4}
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint.from_state_dict(altered)
    assert str(info.value) == (
        "checkpoint checksum mismatch: the record was altered or truncated "
        f"(stored {altered['checksum']!r}, computed {_signed(cut=4)['checksum']!r})"
    )
    with pytest.raises(FingerprintMismatchError) as mismatch:
        Checkpoint.from_state_dict(_signed(), fingerprint="other")
    assert (mismatch.value.expected, mismatch.value.found) == ("other", "fp")


def test_the_highest_ordinal_of_an_empty_record_is_below_the_cut() -> None:
    assert Checkpoint(cut=11).highest_ordinal() == 10
    assert Checkpoint(cut=0).highest_ordinal() == -1
    assert Checkpoint(cut=2, retained=((4, 6),), failures=((3, 1),)).highest_ordinal() == 5
    assert Checkpoint(cut=2, failures=((9, 1),), dropped_above_cut=((3, 4),)).highest_ordinal() == 9


def test_attempts_are_delta_coded_one_ordinal_apart() -> None:
    saved = Checkpoint(cut=3, failures=((5, 2), (9, 1), (10, 3)))
    assert groups_record(saved)["attempts"] == [[2, 2], [3, 1], [0, 3]]
    assert Checkpoint.from_state_dict(saved.state_dict()) == saved


def test_an_overlap_past_a_skipped_range_is_found() -> None:
    """The overlap scan advances one range at a time: here the clash is in
    the second range of each list, after one that overlaps nothing."""
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint(cut=2, trained_above_cut=((4, 5), (7, 8)), dropped_above_cut=((5, 6), (7, 8)))
    assert str(info.value) == (
        "checkpoint lists ordinal 7 in both 'trained_above_cut' and 'dropped_above_cut'"
    )


# -- a hand-built checkpoint is validated like a record --------------------------

_ASCENDING = "ordinals ascending from the cut, counts >= 1"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cut": -1}, "'cut' must be an int >= 0, got -1"),
        ({"cut": True}, "'cut' must be an int >= 0, got True"),
        ({"fingerprint": 7}, "'fingerprint' must be a string"),
        ({"stream_len": -1}, "'stream_len' must be an int >= 0, got -1"),
        ({"trained_above_cut": 5}, "expected a sequence of pairs, got int"),
        ({"retained": "ab"}, "expected a sequence of pairs, got str"),
        ({"failures": [5]}, "expected a pair, got 5"),
        ({"failures": ["ab"]}, "expected a pair, got 'ab'"),
        ({"retained": [(4, 5, 6)]}, "expected a pair, got (4, 5, 6)"),
        ({"trained_above_cut": [("x", 5)]}, "'trained_above_cut' must be an int >= 0, got 'x'"),
        ({"dropped_above_cut": [(4, "y")]}, "'dropped_above_cut' must be an int >= 0, got 'y'"),
        ({"trained_above_cut": [(3, 4)]},
         "'trained_above_cut' holds [3, 4): ordinals must be >= 4"),
        ({"dropped_above_cut": [(3, 4)]},
         "'dropped_above_cut' holds [3, 4): ordinals must be >= 4"),
        ({"retained": [(2, 4)]}, "'retained' holds [2, 4): ordinals must be >= 3"),
        ({"retained": [(5, 5)]}, "'retained' holds [5, 5): empty or reversed"),
        ({"trained_above_cut": [(6, 5)]}, "'trained_above_cut' holds [6, 5): empty or reversed"),
        # Resolved ranges are maximal: touching ones would have merged.
        ({"trained_above_cut": [(4, 5), (5, 6)]},
         "'trained_above_cut' holds [5, 6): ordinals must be >= 6"),
        ({"dropped_above_cut": [(4, 6), (5, 7)]},
         "'dropped_above_cut' holds [5, 7): ordinals must be >= 7"),
        ({"retained": [(4, 6), (5, 7)]}, "'retained' holds [5, 7): ordinals must be >= 6"),
        ({"failures": [("x", 1)]}, "'attempts' must be an int >= 0, got 'x'"),
        ({"failures": [(5, None)]}, "'attempts' must be an int >= 0, got None"),
        ({"failures": [(5, 0)]}, f"'attempts' holds (5, 0): {_ASCENDING}"),
        ({"failures": [(2, 1)]}, f"'attempts' holds (2, 1): {_ASCENDING}"),
        ({"failures": [(5, 1), (5, 2)]}, f"'attempts' holds (5, 2): {_ASCENDING}"),
        ({"failures": [(5, 1), (4, 1)]}, f"'attempts' holds (4, 1): {_ASCENDING}"),
    ],
)  # fmt: skip
def test_a_hand_built_checkpoint_is_refused_with_its_exact_reason(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint(**{"cut": 3, **fields})  # type: ignore[arg-type]
    assert str(info.value) == message


def test_a_hand_built_checkpoint_normalises_its_pairs_and_lets_groups_touch() -> None:
    """Retained groups may touch (one buffered group after another)."""
    built = Checkpoint(cut=3, trained_above_cut=[[7, 8]], retained=[(4, 5), (5, 6)])
    assert built.trained_above_cut == ((7, 8),) and built.retained == ((4, 5), (5, 6))
    assert Checkpoint.from_state_dict(built.state_dict()) == built
    assert Checkpoint(cut=3, failures=[(3, 1), (4, 2)]).failures == ((3, 1), (4, 2))


def test_a_record_that_is_not_json_is_refused_with_the_reason_cut_short() -> None:
    """The reason quotes the encoder's message, cut at 200 characters."""
    unencodable = type("Unencodable" + "X" * 300, (), {})()
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint.from_state_dict({**_signed(), "fingerprint": unencodable})
    reason = f"Object of type {type(unencodable).__name__} is not JSON serializable"
    assert str(info.value) == f"checkpoint record is not JSON data: {reason[:200]}"


# -- every number bounded, every message bounded ---------------------------------


_HUGE = [2**64 + 1, 2**5000]


@pytest.mark.parametrize(
    "fields",
    [
        *({"stream_len": None, "cut": h} for h in _HUGE),
        *({"stream_len": h} for h in _HUGE),
        {"stream_len": None, "cut": 2**64, "trained_above_cut": [[0, 1]]},
        {"stream_len": None, "trained_above_cut": [[2**64, 1]]},
        {"stream_len": None, "retained": [[0, 2**64]]},
        {"stream_len": None, "attempts": [[2**64 - 3, 1]]},
        {"stream_len": None, "attempts": [[0, 2**64 + 1]]},
    ],
    ids=lambda f: ",".join(f"{k}:{len(str(v))}" for k, v in f.items()),
)
def test_a_record_with_a_number_past_2_64_is_refused(fields: dict[str, object]) -> None:
    """A cut of 2**5000 was accepted, and the next stamp built a trie 1000
    levels deep and raised ``RecursionError``: no number in a record may
    pass 2**64 (ordinals stay below it, as in the rollout journal)."""
    with pytest.raises(CheckpointCorruptError, match=r"2\*\*64|above|beyond"):
        Checkpoint.from_state_dict(_signed(**fields))


def test_the_highest_readable_record_resumes_and_stamps() -> None:
    """The bound is exact: a cut of 2**64 - 1 with its last ordinal
    unresolved reads back, resumes and stamps that ordinal."""
    record = _signed(stream_len=None, cut=2**64 - 1)
    checkpoint = Checkpoint.from_state_dict(record)
    config = LedgerConfig(fingerprint="fp")
    ledger = Ledger.resume(config, checkpoint, load_replay_buffer=False).ledger
    assert tuple(ledger.stamp(1).effect.kept) == (2**64 - 1,)
    assert Checkpoint.from_state_dict(_signed(stream_len=2**64)).stream_len == 2**64


@pytest.mark.parametrize(
    "extra",
    [{5: 1, "x": 2}, {None: 1, (1, 2): 2, "y": 3}, {b"k": 1, 2.5: 2}],
    ids=["int-str", "none-tuple-str", "bytes-float"],
)
def test_extra_keys_of_mixed_types_are_named(extra: dict[object, object]) -> None:
    """Sorting keys of mixed types for the message raised ``TypeError``."""
    with pytest.raises(CheckpointCorruptError, match="unknown keys") as info:
        Checkpoint.from_state_dict({**_signed(), **extra})  # type: ignore[dict-item]
    assert all(repr(k)[:10] in str(info.value) for k in extra)


def test_ten_thousand_unknown_keys_make_a_short_message() -> None:
    record = {**_signed(), **{f"k{i}": i for i in range(10_000)}}
    with pytest.raises(CheckpointCorruptError) as info:
        Checkpoint.from_state_dict(record)
    assert "(+9980 more)" in str(info.value) and len(str(info.value)) < 1_000


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"format": 2**20000}, CheckpointVersionError),
        ({"version": -(2**20000)}, CheckpointVersionError),
        ({"format": "f" * 10**6}, CheckpointVersionError),
        ({"checksum": 2**20000}, CheckpointCorruptError),
        ({"checksum": "c" * 10**6}, CheckpointCorruptError),
        ({"trained_above_cut": [[1, 2, 2**20000]]}, CheckpointCorruptError),
    ],
    ids=["format-int", "version-int", "format-long", "checksum-int", "checksum-long", "item"],
)
def test_every_refusal_quotes_its_value_bounded(
    fields: dict[str, object], error: type[Exception]
) -> None:
    """An int of 20,000 bits made the message itself raise ``ValueError``
    (``repr`` refuses past 4300 digits); a long string, a long message."""
    body = {**_signed(), **fields}  # no checksum: a forger's JSON cannot hold them
    with pytest.raises(error) as info:
        Checkpoint.from_state_dict(body)
    assert type(info.value) is error and len(str(info.value)) < 400


@pytest.mark.parametrize("item", [{0: 4, 1: 5}, {4, 5}, 7, None, "ab", b"ab"])
def test_a_hand_built_pair_that_is_not_a_sequence_is_refused(item: object) -> None:
    """A dict of two keys passed the length check and raised ``KeyError``
    on ``item[0]``; a set, ``TypeError``."""
    with pytest.raises(CheckpointCorruptError, match="expected a pair"):
        Checkpoint(cut=3, failures=[item])  # type: ignore[list-item]
