"""The checkpoint record: round trips, and every way a bad record is refused."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontier_core import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointVersionError,
    FingerprintMismatchError,
    Ledger,
    LedgerConfig,
)

from ._strategies import ledgers


def sample_record() -> dict[str, Any]:
    config = LedgerConfig(stream_len=40, fingerprint="ds")
    ledger = Ledger.start(config).stamp(20).ledger.dispatch(range(20))
    ledger = ledger.buffer(range(2, 20)).train([2, 3, 7, 8, 9])
    ledger = ledger.fail([0]).ledger.evict([11]).ledger
    return ledger.checkpoint().state_dict()


@settings(max_examples=150, deadline=None)
@given(ledger=ledgers(), save_buffer=st.booleans())
def test_record_survives_json_and_reads_back_equal(ledger: Ledger, save_buffer: bool) -> None:
    """CKPT-ROUNDTRIP."""
    checkpoint = ledger.checkpoint(save_buffer=save_buffer)
    record = json.loads(json.dumps(checkpoint.state_dict()))
    assert Checkpoint.from_state_dict(record, fingerprint=ledger.config.fingerprint) == checkpoint
    # Resuming from the read-back record yields the same ledger as from the value.
    a = Ledger.resume(ledger.config, checkpoint).ledger
    b = Ledger.resume(ledger.config, Checkpoint.from_state_dict(record)).ledger
    assert a == b


@settings(max_examples=100, deadline=None)
@given(ledger=ledgers())
def test_resume_then_checkpoint_is_a_fixed_point(ledger: Ledger) -> None:
    """A kill right after a resume loses nothing: the state it would save
    equals the one it resumed from."""
    checkpoint = ledger.checkpoint()
    resumed = Ledger.resume(ledger.config, checkpoint).ledger
    assert resumed.checkpoint() == checkpoint


def test_sample_record_is_json_only_and_ranged() -> None:
    record = sample_record()
    assert json.loads(json.dumps(record)) == record
    assert record["cut"] == 1
    assert record["trained_above_cut"] == [[2, 4], [7, 10]]
    assert record["dropped_above_cut"] == [[11, 12]]
    assert record["retained"] == [[4, 7], [10, 11], [12, 20]]
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
        ("cut", 3, "below 4"),  # trained [2, 4) would sit at or under the cut
        ("trained_above_cut", [[7, 10], [2, 4]], "unsorted"),
        ("trained_above_cut", [[2, 2]], "empty range"),
        ("trained_above_cut", [[2, 4, 5]], "not a [start, stop] pair"),
        ("trained_above_cut", "2-4", "must be a list"),
        ("dropped_above_cut", [[3, 5]], "in both 'trained_above_cut' and 'dropped_above_cut'"),
        ("retained", [[8, 9]], "in both 'trained_above_cut' and 'retained'"),
        ("attempts", [[3, 1]], "already resolved"),
        ("attempts", [[12, 0]], "zero"),
        ("attempts", [[0, 1]], "below the cut"),
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
