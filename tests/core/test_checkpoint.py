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
    ledger = Ledger.start(config).stamp(20).ledger.dispatch(range(20)).ledger
    ledger = ledger.buffer(range(2, 20)).ledger.train([2, 3, 7, 8, 9]).ledger
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


def test_record_size_follows_the_window_not_the_run() -> None:
    """BOUNDED-SIZE on the wire: the same window after 10**3 and 2 * 10**5
    prompts differs only in the digits of the cut."""

    def window_at(offset: int) -> int:
        ledger = Ledger.start(LedgerConfig(fingerprint="w"))
        ledger = ledger.stamp(offset).ledger.dispatch(range(offset)).ledger
        ledger = ledger.buffer(range(offset)).ledger.train(range(offset)).ledger
        ledger = ledger.stamp(40).ledger.dispatch(range(offset, offset + 40)).ledger
        ledger = ledger.buffer(range(offset, offset + 40, 3)).ledger
        ledger = ledger.train(range(offset + 3, offset + 40, 6)).ledger
        return len(json.dumps(ledger.checkpoint().state_dict()))

    small, large = window_at(1_000), window_at(200_000)
    assert large - small == len(str(200_000)) - len(str(1_000))


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
