"""The sample-level checkpoint record (``Checkpoint``): round trips
over ledgers reached by random runs, and every way a hostile or damaged
record is refused, each by a typed ``CheckpointError`` naming the problem,
with work that follows the record's size and never a number inside it."""

from __future__ import annotations

import copy
import hashlib
import json
import tracemalloc
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frontier_core import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FingerprintMismatchError,
    IllegalTransitionError,
    Lease,
    Ledger,
    LedgerConfig,
    Status,
)
from frontier_core._checkpoint import groups_record

from ._strategies import sample_ledgers

pytestmark = pytest.mark.mutation

CONFIG = LedgerConfig(stream_len=20, fingerprint="fp", samples=3)


def sample_run() -> tuple[Ledger, dict[tuple[int, int], Lease]]:
    """Groups 0..5 dispatched: 0 and 4 trained (the cut stays at 1), 2
    buffered, 1, 3 and 5 outstanding with siblings (1, 2), (3, 0) and
    (3, 1) sealed; and the lease of every sibling."""
    ledger = Ledger.start(CONFIG).stamp(6).ledger
    step = ledger.dispatch(range(6))
    leases = {x[:2]: x for x in step.effect.leases}
    ledger = step.ledger.seal([leases[(o, s)] for o in (0, 2, 4) for s in range(3)]).ledger
    ledger = ledger.seal([leases[(1, 2)], leases[(3, 0)], leases[(3, 1)]]).ledger
    return ledger.train([0, 4]).ledger, leases


def sample_ledger() -> Ledger:
    return sample_run()[0]


def body(checkpoint: Checkpoint | None = None) -> dict[str, Any]:
    record = (checkpoint or sample_ledger().checkpoint()).state_dict()
    del record["checksum"]
    return record


def signed(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` checksummed by an independent writer: SHA-256 over the
    compact, key-sorted, ASCII-escaped JSON of every other key, as the
    prompt-level record is."""
    record = {k: v for k, v in record.items() if k != "checksum"}
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {**record, "checksum": "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()}


def read(record: Any, fingerprint: str | None = "fp") -> Checkpoint:
    return Checkpoint.from_state_dict(record, fingerprint=fingerprint)


# -- round trip ---------------------------------------------------------------------


def test_the_record_of_a_known_ledger() -> None:
    """The layout: the inner record whole, the sealed siblings as [gap from
    the previous ordinal (the cut for the first), sibling, attempt]."""
    ledger, leases = sample_run()
    saved = ledger.checkpoint()
    assert saved.cut == 1
    assert saved.next_attempt == 18  # six groups of three, one attempt each
    record = saved.state_dict()
    assert record["format"] == "frontier_core.samples" and record["version"] == 1
    assert record["samples"] == 3 and record["next_attempt"] == 18
    assert record["ledger"] == groups_record(saved) == groups_record(ledger._groups.checkpoint())
    x, y, z = leases[(1, 2)], leases[(3, 0)], leases[(3, 1)]
    assert saved.sealed == (x, y, z)
    # Gaps: 1 - cut 1, 3 - 1, 3 - 3.
    assert record["sealed"] == [[0, 2, x.attempt], [2, 0, y.attempt], [0, 1, z.attempt]]
    assert record == signed(record)
    assert set(record) == {
        "format",
        "version",
        "samples",
        "next_attempt",
        "ledger",
        "sealed",
        "checksum",
    }


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    ledger=sample_ledgers(),
    save_buffer=st.booleans(),
    save_sealed=st.booleans(),
    load=st.booleans(),
)
def test_a_record_survives_json_and_resumes_the_same(
    ledger: Ledger, save_buffer: bool, save_sealed: bool, load: bool
) -> None:
    checkpoint = ledger.checkpoint(save_buffer=save_buffer, save_sealed=save_sealed)
    text = json.dumps(checkpoint.state_dict(), allow_nan=False)
    back = Checkpoint.from_state_dict(json.loads(text), fingerprint=ledger.config.fingerprint)
    assert back == checkpoint
    assert back.state_dict() == checkpoint.state_dict()
    # What it records: the inner record, the counter, the sealed siblings.
    assert groups_record(back) == groups_record(ledger._groups.checkpoint(save_buffer=save_buffer))
    assert back.next_attempt == ledger.next_attempt
    assert back.sealed == (tuple(ledger.held()) if save_sealed else ())
    a = Ledger.resume(ledger.config, checkpoint, load_replay_buffer=load, sealed=back.sealed)
    b = Ledger.resume(ledger.config, back, load_replay_buffer=load, sealed=back.sealed)
    assert a.ledger == b.ledger and (a.reused, a.ignored) == (b.reused, b.ignored)
    # A crash right after the resume loses nothing.
    if load and save_buffer:
        again = a.ledger.checkpoint(save_buffer=True, save_sealed=save_sealed)
        assert groups_record(again) == groups_record(back)
        assert again.next_attempt == back.next_attempt
        assert again.sealed == (a.reused if save_sealed else ())


def test_a_group_with_every_sibling_held_is_a_valid_record() -> None:
    """A resume keeps every sibling of a group whose samples a journal
    holds until its dispatch lands it, so a checkpoint taken in between
    lists all n: the record reads back and resumes the same."""
    ledger = Ledger.start(CONFIG).stamp(1).ledger
    saved = ledger.checkpoint()
    leases = ledger.dispatch([0]).effect.leases
    resumed = Ledger.resume(CONFIG, saved, load_replay_buffer=True, sealed=leases, attempt_floor=3)
    record = resumed.ledger.checkpoint()
    assert record.sealed == leases
    back = read(json.loads(json.dumps(record.state_dict())))
    assert back == record
    again = Ledger.resume(CONFIG, back, load_replay_buffer=True, sealed=back.sealed)
    assert again.ledger == resumed.ledger
    assert again.ledger.stamp(1).ledger.dispatch([0]).effect.landed == (0,)


# -- refusals at the record level ---------------------------------------------------


@pytest.mark.parametrize("value", [[1, 2], "record", None, 3])
def test_a_record_that_is_not_a_dict_is_refused(value: object) -> None:
    with pytest.raises(CheckpointCorruptError) as info:
        read(value)
    assert str(info.value) == f"checkpoint record must be a dict, got {type(value).__name__}"


@pytest.mark.parametrize("value", ["x", None, 1])
def test_another_format_is_a_version_error(value: object) -> None:
    record = signed({**body(), "format": value})
    with pytest.raises(CheckpointVersionError) as info:
        read(record)
    assert str(info.value) == (
        f"not a frontier_core checkpoint: 'format' is {value!r}, "
        "expected 'frontier_core.samples' (or 'frontier_core.checkpoint')"
    )


def test_the_groups_record_in_its_place_reads_as_single_samples() -> None:
    """The groups' record alone (what the prompt-level ledger of before
    issue 22 wrote) reads as n = 1 with no attempt dealt, so this n = 3 run
    refuses to resume from it; the groups' format around a ledger record is
    read as a groups' record, and refused by its keys."""
    back = read(groups_record(sample_ledger().checkpoint()))
    assert (back.samples, back.next_attempt, back.sealed) == (1, 0, ())
    assert back.cut == 1
    with pytest.raises(CheckpointMismatchError, match="groups of 1 samples, this run 3"):
        Ledger.resume(CONFIG, back, load_replay_buffer=True)
    with pytest.raises(CheckpointCorruptError, match="missing keys"):
        read(signed({**body(), "format": "frontier_core.checkpoint"}))


def test_a_missing_format_is_a_version_error() -> None:
    record = body()
    del record["format"]
    with pytest.raises(CheckpointVersionError, match="'format' is None"):
        read(signed(record))


@pytest.mark.parametrize("value", [2, 0, "1", True, 1.0, None])
def test_another_version_is_a_version_error(value: object) -> None:
    record = signed({**body(), "version": value})
    with pytest.raises(CheckpointVersionError) as info:
        read(record)
    assert str(info.value) == (
        f"checkpoint schema version {value!r} is not supported (this library reads version 1)"
    )


@pytest.mark.parametrize(
    ("drop", "add", "missing", "extra"),
    [
        (["sealed"], {}, ["sealed"], []),
        (["checksum"], {}, ["checksum"], []),
        (["samples", "ledger"], {}, ["ledger", "samples"], []),
        ([], {"zeta": 1, "alpha": 2}, [], ["alpha", "zeta"]),
        (["next_attempt"], {"next": 1}, ["next_attempt"], ["next"]),
    ],
)
def test_missing_and_unknown_keys_are_named(
    drop: list[str], add: dict[str, int], missing: list[str], extra: list[str]
) -> None:
    record = {**signed(body()), **add}
    for key in drop:
        del record[key]
    with pytest.raises(CheckpointCorruptError) as info:
        read(record)
    assert str(info.value) == (
        f"checkpoint record has missing keys {missing} and unknown keys {extra}"
    )


def test_a_non_string_key_is_named_not_a_crash() -> None:
    record: dict[Any, Any] = {**signed(body()), 7: "x"}
    with pytest.raises(CheckpointCorruptError, match=r"unknown keys \[7\]"):
        read(record)


@pytest.mark.parametrize(
    ("key", "value"),
    [("next_attempt", 19), ("samples", 2), ("sealed", [[0, 2, 5]]), ("ledger", {})],
)
def test_a_changed_field_fails_the_checksum(key: str, value: object) -> None:
    record = {**sample_ledger().checkpoint().state_dict(), key: value}
    with pytest.raises(CheckpointCorruptError) as info:
        read(record)
    assert str(info.value) == ("checkpoint checksum mismatch: the record was altered or truncated")


def test_a_changed_checksum_is_refused() -> None:
    record = sample_ledger().checkpoint().state_dict()
    record["checksum"] = "sha256:" + "0" * 64
    with pytest.raises(CheckpointCorruptError, match="checksum mismatch"):
        read(record)


@pytest.mark.parametrize("value", [float("nan"), {1, 2}, b"x", object()])
def test_a_value_that_is_not_json_is_refused(value: object) -> None:
    record = {**sample_ledger().checkpoint().state_dict(), "sealed": value}
    with pytest.raises(CheckpointCorruptError) as info:
        read(record)
    assert str(info.value).startswith("checkpoint record is not JSON data: ")
    assert len(str(info.value)) <= len("checkpoint record is not JSON data: ") + 200


def test_a_deeply_nested_value_is_refused_as_not_json() -> None:
    nested: Any = []
    for _ in range(100_000):
        nested = [nested]
    record = {**sample_ledger().checkpoint().state_dict(), "sealed": nested}
    with pytest.raises(CheckpointCorruptError, match="not JSON data"):
        read(record)


def test_the_inner_record_is_read_strictly_and_its_fingerprint_checked() -> None:
    record = body()
    inner = record["ledger"]
    with pytest.raises(FingerprintMismatchError) as info:
        read(signed(record), fingerprint="other")
    assert isinstance(info.value, CheckpointMismatchError)
    assert (info.value.expected, info.value.found) == ("other", "fp")
    # Without a fingerprint to check, the record's own is taken.
    assert read(signed(record), fingerprint=None).fingerprint == "fp"
    # The inner record's own checksum guards it too.
    broken = {**inner, "cut": 0}
    with pytest.raises(CheckpointCorruptError, match=r"^checkpoint checksum mismatch"):
        read(signed({**record, "ledger": broken}))
    with pytest.raises(CheckpointCorruptError, match="checkpoint record must be a dict"):
        read(signed({**record, "ledger": [1]}))


# -- refusals of the fields ---------------------------------------------------------


def _message(record: dict[str, Any]) -> str:
    with pytest.raises(CheckpointCorruptError) as info:
        read(signed(record))
    return str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "least"),
    [
        ("samples", 0, 1),
        ("samples", -3, 1),
        ("samples", True, 1),
        ("samples", 3.0, 1),
        ("samples", "3", 1),
        ("samples", None, 1),
        ("next_attempt", -1, 0),
        ("next_attempt", False, 0),
        ("next_attempt", 18.5, 0),
        ("samples", 2**32 + 1, 1),
        ("next_attempt", 2**32 + 1, 0),
        ("next_attempt", 2**64, 0),
    ],
)
def test_counts_must_be_ints_not_bools_within_what_the_ledger_deals(
    key: str, value: object, least: int
) -> None:
    """Sibling indices and attempts are u32 in the journal: a group of more
    than 2**32 siblings, or a counter past 2**32, is refused when the record
    is read, not at the first dispatch."""
    message = _message({**body(), key: value})
    assert message == f"{key!r} must be an int >= {least} and <= {2**32}, got {value!r}"


@pytest.mark.parametrize("value", [{"0": [0, 2, 5]}, "sealed", 5, None])
def test_sealed_must_be_a_list(value: object) -> None:
    message = _message({**body(), "sealed": value})
    assert message == "'sealed' must be a list of [gap, sibling, attempt]"


@pytest.mark.parametrize("item", [[0, 2], [0, 2, 5, 0], "abc", {"gap": 0}, 5, None])
def test_each_sealed_item_must_be_a_triple(item: object) -> None:
    message = _message({**body(), "sealed": [[0, 2, 5], item]})
    assert message == f"'sealed' holds {item!r}, not [gap, sibling, attempt]"


@pytest.mark.parametrize(
    "item",
    [[-1, 2, 5], [0, -1, 5], [0, 2, -1], [True, 2, 5], [0, False, 5], [0, 2, 5.0], [0, "2", 5]],
)
def test_each_sealed_number_must_be_an_int_not_a_bool(item: list[object]) -> None:
    message = _message({**body(), "sealed": [item]})
    bad = next(x for x in item if type(x) is not int or x < 0)  # type: ignore[operator]
    assert message == f"'sealed' must be an int >= 0, got {bad!r}"


@pytest.mark.parametrize(
    ("sealed", "lease"),
    [
        # The same sibling twice, then a lower sibling of the same group.
        ([[0, 2, 5], [0, 2, 6]], "Lease(ordinal=1, sibling=2, attempt=6)"),
        ([[0, 2, 5], [0, 1, 6]], "Lease(ordinal=1, sibling=1, attempt=6)"),
    ],
)
def test_sealed_siblings_must_ascend(sealed: list[list[int]], lease: str) -> None:
    message = _message({**body(), "sealed": sealed})
    assert message == f"sealed siblings must ascend, {lease} follows (1, 2)"


@pytest.mark.parametrize(
    "item",
    [
        [0, 3, 5],  # sibling >= samples
        [0, 2, 18],  # attempt == next_attempt: never handed out
        [0, 2, 1000],
    ],
)
def test_a_sealed_sibling_must_lie_in_a_group_under_a_handed_out_attempt(
    item: list[int],
) -> None:
    message = _message({**body(), "sealed": [item]})
    assert message == (
        f"sealed sibling {Lease(1 + item[0], item[1], item[2])}: ordinals >= the cut 1, "
        "siblings < 3, attempts < next_attempt 18"
    )


@pytest.mark.parametrize(
    ("gap", "why"),
    [(1, "retained"), (3, "trained"), (0, None), (2, None), (4, None)],
)
def test_a_sealed_sibling_of_a_resolved_or_retained_group_is_refused(
    gap: int, why: str | None
) -> None:
    """Group 2 is retained (buffered, saved with the buffer), 4 trained
    above the cut; 1, 3 and 5 were outstanding."""
    record = {**body(), "sealed": [[gap, 0, 0]]}
    if why is None:
        assert read(signed(record)).sealed == (Lease(1 + gap, 0, 0),)
        return
    lease = Lease(1 + gap, 0, 0)
    assert _message(record) == (
        f"sealed sibling {lease} belongs to a group the record resolves or retains"
    )


def test_a_sealed_sibling_of_a_dropped_group_is_refused() -> None:
    config = LedgerConfig(stream_len=8, fingerprint="fp", samples=2)
    ledger = Ledger.start(config).stamp(3).ledger
    step = ledger.dispatch([0, 1, 2])
    ledger = step.ledger.fail([1]).ledger  # dropped above the cut 0
    record = body(ledger.checkpoint())
    assert list(ledger.checkpoint().dropped()) == [1]
    assert _message({**record, "sealed": [[1, 0, 0]]}) == (
        f"sealed sibling {Lease(1, 0, 0)} belongs to a group the record resolves or retains"
    )
    # Its neighbours, outstanding, may have sealed siblings.
    assert read(signed({**record, "sealed": [[0, 0, 0], [2, 1, 5]]})).sealed == (
        Lease(0, 0, 0),
        Lease(2, 1, 5),
    )


def test_a_sealed_sibling_beyond_the_stream_is_refused() -> None:
    # Stream of 20: ordinal 19 is the last.
    assert read(signed({**body(), "sealed": [[18, 0, 0]]})).sealed == (Lease(19, 0, 0),)
    for gap in (19, 2**64 - 2):
        lease = Lease(1 + gap, 0, 0)
        assert _message({**body(), "sealed": [[gap, 0, 0]]}) == (
            f"sealed sibling {lease} lies beyond the stream"
        )
    # Past what the journal can name (a u64), whatever the stream.
    assert _message({**body(), "sealed": [[10**30, 0, 0]]}) == (
        f'"a sealed sibling\'s ordinal" must be an int >= 0 and <= {2**64 - 1}, got {1 + 10**30}'
    )


def test_a_huge_gap_costs_nothing_and_a_resume_refuses_it() -> None:
    """A few bytes asking for an ordinal 2**64 - 1 above the cut: read in
    constant memory, and refused by the resume before it builds anything;
    one asking for 10**30 is refused by the read itself."""
    config = LedgerConfig(fingerprint="fp", samples=2)
    saved = Ledger.start(config).checkpoint()
    far = 2**64 - 1
    record = signed({**body(saved), "next_attempt": 2**32, "sealed": [[far, 1, 2**32 - 1]]})
    tracemalloc.start()
    try:
        back = read(record)
        with pytest.raises(IllegalTransitionError) as info:
            Ledger.resume(config, back, load_replay_buffer=True, sealed=back.sealed)
        with pytest.raises(CheckpointCorruptError, match="ordinal"):
            read(signed({**body(saved), "next_attempt": 2**32, "sealed": [[10**30, 1, 0]]}))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert back.sealed == (Lease(far, 1, 2**32 - 1),)
    assert info.value.event == "resume" and info.value.ordinals == (far,)
    assert peak < 1 << 20


# -- hand-built values ---------------------------------------------------------------


def test_a_hand_built_checkpoint_is_validated_too() -> None:
    inner: dict[str, Any] = {"cut": 4, "trained_above_cut": ((6, 7),), "stream_len": 10}
    ok = Checkpoint(**inner, samples=2, next_attempt=9, sealed=[(4, 0, 1), [5, 1, 8]])
    assert ok.sealed == (Lease(4, 0, 1), Lease(5, 1, 8))
    assert Checkpoint(**inner).samples == 1 and Checkpoint(**inner).next_attempt == 0
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"sealed": [(3, 0, 1)]},
            f"sealed sibling {Lease(3, 0, 1)}: ordinals >= the cut 4, siblings < 2, "
            "attempts < next_attempt 9",
        ),
        (
            {"sealed": [(6, 0, 1)]},
            f"sealed sibling {Lease(6, 0, 1)} belongs to a group the record resolves or retains",
        ),
        ({"sealed": [(10, 0, 1)]}, f"sealed sibling {Lease(10, 0, 1)} lies beyond the stream"),
        (
            {"sealed": [(5, 0, 1), (4, 1, 1)]},
            f"sealed siblings must ascend, {Lease(4, 1, 1)} follows (5, 0)",
        ),
        ({"sealed": [(4, True, 1)]}, '"a sealed sibling\'s sibling" must be an int >= 0, got True'),
        ({"sealed": [(4, 0, -1)]}, '"a sealed sibling\'s attempt" must be an int >= 0, got -1'),
        ({"sealed": [("4", 0, 1)]}, "\"a sealed sibling's ordinal\" must be an int >= 0, got '4'"),
        ({"sealed": "abc"}, "sealed must be a sequence of leases, got 'abc'"),
        ({"sealed": 5}, "sealed must be a sequence of leases, got 5"),
        ({"sealed": [(4, 0)]}, "sealed holds (4, 0), not (ordinal, sibling, attempt)"),
        ({"sealed": ["abc"]}, "sealed holds 'abc', not (ordinal, sibling, attempt)"),
        ({"samples": 0}, f"'samples' must be an int >= 1 and <= {2**32}, got 0"),
        ({"next_attempt": -1}, f"'next_attempt' must be an int >= 0 and <= {2**32}, got -1"),
        (
            {"next_attempt": 2**32 + 1},
            f"'next_attempt' must be an int >= 0 and <= {2**32}, got {2**32 + 1}",
        ),
    ]
    for fields, message in cases:
        args: dict[str, Any] = {**inner, "samples": 2, "next_attempt": 9, **fields}
        with pytest.raises(CheckpointCorruptError) as info:
            Checkpoint(**args)
        assert str(info.value) == message, fields


def test_a_sealed_sibling_after_the_first_is_checked_in_full() -> None:
    """Every rule applies to every sealed sibling, not only to the first."""
    inner: dict[str, Any] = {"cut": 0, "retained": ((3, 4),), "stream_len": 10}
    for bad, words in [
        ((1, 2, 0), "siblings < 2"),
        ((1, 1, 9), "attempts < next_attempt 9"),
        ((3, 0, 0), "resolves or retains"),
        ((10, 0, 0), "beyond the stream"),
    ]:
        with pytest.raises(CheckpointCorruptError, match=words):
            Checkpoint(**inner, samples=2, next_attempt=9, sealed=[(0, 0, 0), bad])


# -- at resume ------------------------------------------------------------------------


def test_a_record_of_another_group_size_is_refused_at_resume() -> None:
    saved = read(json.loads(json.dumps(sample_ledger().checkpoint().state_dict())))
    for n in (1, 2, 4):
        config = LedgerConfig(stream_len=20, fingerprint="fp", samples=n)
        with pytest.raises(CheckpointMismatchError) as info:
            Ledger.resume(config, saved, load_replay_buffer=True, sealed=())
        assert str(info.value) == f"checkpoint has groups of 3 samples, this run {n}"


def test_a_record_of_another_stream_is_refused_at_resume() -> None:
    saved = sample_ledger().checkpoint()
    config = LedgerConfig(stream_len=20, fingerprint="other", samples=3)
    with pytest.raises(FingerprintMismatchError):
        Ledger.resume(config, saved, load_replay_buffer=True, sealed=())
    shorter = LedgerConfig(stream_len=4, fingerprint="fp", samples=3)
    with pytest.raises(CheckpointMismatchError, match="beyond this stream's length 4"):
        Ledger.resume(shorter, saved, load_replay_buffer=True, sealed=())


def test_every_refusal_is_a_checkpoint_error() -> None:
    for exc in (CheckpointCorruptError, CheckpointVersionError, CheckpointMismatchError):
        assert issubclass(exc, CheckpointError) and issubclass(exc, ValueError)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_changed_leaf_is_refused_or_reads_back_a_valid_value(data: st.DataObject) -> None:
    """CKPT-REJECT, sample level: change one value anywhere in the record.
    Without a new checksum it is refused; re-signed (a forger), it is
    refused by a ``CheckpointError`` or read back as a value that passes
    every rule and resumes."""
    record = sample_ledger().checkpoint().state_dict()
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))
        else:
            paths.append(path)

    walk(record, ())
    path = data.draw(st.sampled_from(paths))
    value = data.draw(
        st.one_of(
            st.integers(-3, 40),
            st.booleans(),
            st.none(),
            st.text(max_size=3),
            st.lists(st.integers(0, 3), max_size=3),
        )
    )
    changed = copy.deepcopy(record)
    node = changed
    for step in path[:-1]:
        node = node[step]
    if node[path[-1]] == value and type(node[path[-1]]) is type(value):
        return
    node[path[-1]] = value
    with pytest.raises(CheckpointError):
        read(changed)
    forged = copy.deepcopy(changed)
    if path[0] == "ledger" and isinstance(forged["ledger"], dict):
        forged["ledger"] = signed(forged["ledger"])
    forged = signed(forged)
    try:
        back = read(forged, fingerprint=None)
    except CheckpointError:
        return
    # Accepted: every rule holds, and it resumes or is refused by type.
    assert back == attrs.evolve(back)
    config = LedgerConfig(
        stream_len=back.stream_len, fingerprint=back.fingerprint, samples=back.samples
    )
    try:
        resumed = Ledger.resume(config, back, load_replay_buffer=True, sealed=back.sealed)
    except (CheckpointError, IllegalTransitionError):
        return
    assert resumed.ledger.next_attempt >= back.next_attempt
    for lease in resumed.reused:
        assert resumed.ledger.status(lease.ordinal) is Status.UNSTAMPED


def test_the_not_json_reason_is_the_encoders_cut_at_200_characters() -> None:
    for value in ({1, 2}, type("L" * 300, (), {})()):
        try:
            json.dumps(value)
        except TypeError as exc:
            reason = str(exc)
        assert len(reason) > 30
        record = {**sample_ledger().checkpoint().state_dict(), "sealed": value}
        with pytest.raises(CheckpointCorruptError) as info:
            read(record)
        assert str(info.value) == "checkpoint record is not JSON data: " + reason[:200]


def test_the_bounds_are_exactly_what_the_ledger_deals() -> None:
    """The largest counter a ledger can reach (2**32: attempt 2**32 - 1
    dealt) is read back, and a ledger resumed from it refuses a dispatch
    with a typed error; one more is refused when the record is read. A
    sealed sibling's ordinal, sibling and attempt are bounded too."""
    cfg = LedgerConfig(stream_len=4, fingerprint="fp", samples=1)
    saved = read(signed({**body(Ledger.start(cfg).checkpoint()), "next_attempt": 2**32}))
    assert saved.next_attempt == 2**32
    ledger = Ledger.resume(cfg, saved, load_replay_buffer=True, sealed=()).ledger
    with pytest.raises(IllegalTransitionError, match="2\\*\\*32 - 1"):
        ledger.stamp(1).ledger.dispatch([0])
    last = Checkpoint(cut=0, samples=2, next_attempt=2**32, sealed=[(0, 1, 2**32 - 1)])
    assert last.sealed == (Lease(0, 1, 2**32 - 1),)
    assert read(signed(body(last)), fingerprint=None) == last
    with pytest.raises(CheckpointCorruptError, match="ordinal"):
        Checkpoint(cut=2**64, samples=2, next_attempt=1, sealed=[(2**64, 0, 0)])
