"""The checkpoint: a few integers and ranges, and its validated JSON record.

A ``Checkpoint`` is what survives a crash. It says where the stream must
restart (the cut) and which ordinals at or above the cut need no new
generation (trained, dropped, or retained in the saved replay buffer), plus
the failed attempts of the unresolved ordinals so that ``retry`` keeps
counting across restarts; and, for the groups' siblings, the group size, the
attempt counter and the sealed siblings of outstanding groups whose samples
the framework saved with it.

The record (``state_dict``) nests the groups' record (format
``frontier_core.checkpoint``, with its own checksum) in the ledger's
(format ``frontier_core.samples``). ``from_state_dict`` reads both: a
groups' record alone, as the prompt-level ledger of before issue 22 wrote it,
is a checkpoint of single-sample groups with no attempt dealt.

The record is a dict of JSON types only (torchdata's ``state_dict``
convention), with a format tag, a schema version, the stream fingerprint that
the caller supplied and a SHA-256 checksum over everything else. Reading a
record validates all of it and every structural invariant that the resume
relies on; a record that fails any check raises and is never half-used.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from ._errors import (
    CheckpointCorruptError,
    CheckpointVersionError,
    FingerprintMismatchError,
    shown,
    shown_keys,
)
from ._events import Lease
from ._ranges import LIMIT, Range, count, expand

#: The groups' record: the prompt-level ledger's of before issue 22, nested.
GROUPS_FORMAT: Final = "frontier_core.checkpoint"
GROUPS_VERSION: Final = 1
#: The ledger's record around it.
FORMAT: Final = "frontier_core.samples"
VERSION: Final = 1
#: The attempt counter's bound: an attempt is a u32 in the journal.
MAX_ATTEMPT: Final = (1 << 32) - 1
#: An ordinal is a u64 in the journal.
_MAX_ORDINAL: Final = (1 << 64) - 1

# Keys are named constants and read strictly, as in torchdata.
KEY_FORMAT: Final = "format"
KEY_VERSION: Final = "version"
KEY_FINGERPRINT: Final = "fingerprint"
KEY_STREAM_LEN: Final = "stream_len"
KEY_CUT: Final = "cut"
KEY_TRAINED: Final = "trained_above_cut"
KEY_DROPPED: Final = "dropped_above_cut"
KEY_RETAINED: Final = "retained"
KEY_ATTEMPTS: Final = "attempts"
KEY_CHECKSUM: Final = "checksum"
KEY_SAMPLES: Final = "samples"
KEY_NEXT_ATTEMPT: Final = "next_attempt"
KEY_LEDGER: Final = "ledger"
KEY_SEALED: Final = "sealed"

_BODY_KEYS: Final = frozenset(
    {
        KEY_FORMAT,
        KEY_VERSION,
        KEY_FINGERPRINT,
        KEY_STREAM_LEN,
        KEY_CUT,
        KEY_TRAINED,
        KEY_DROPPED,
        KEY_RETAINED,
        KEY_ATTEMPTS,
    }
)
_OUTER_KEYS: Final = frozenset(
    {KEY_FORMAT, KEY_VERSION, KEY_SAMPLES, KEY_NEXT_ATTEMPT, KEY_LEDGER, KEY_SEALED}
)


def _pairs(value: Any) -> tuple[tuple[int, int], ...]:
    """Normalise a sequence of pairs (tuples or lists of two) to a tuple of
    tuples; validation follows."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise CheckpointCorruptError(f"expected a sequence of pairs, got {type(value).__name__}")
    out = []
    for item in value:
        # Only sequences index like pairs: a dict or a set of two has a length
        # of 2 but no item 0.
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise CheckpointCorruptError(f"expected a pair, got {shown(item)}")
        out.append((item[0], item[1]))
    return tuple(out)


def _sealed_leases(value: Any) -> tuple[Lease, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise CheckpointCorruptError(f"sealed must be a sequence of leases, got {shown(value)}")
    out = []
    for item in value:
        if not isinstance(item, tuple | list) or len(item) != 3:
            raise CheckpointCorruptError(
                f"sealed holds {shown(item)}, not (ordinal, sibling, attempt)"
            )
        out.append(Lease(*item))
    return tuple(out)


@attrs.frozen
class Checkpoint:
    """The ledger's durable state at a checkpoint.

    Invariants, checked whenever a ``Checkpoint`` is built (by
    ``Ledger.checkpoint``, by ``from_state_dict`` or by hand), so that no
    value that breaks them exists: the cut, ordinals and counts are ints
    (not bools) >= 0; every range is half-open, non-empty, ascending and
    disjoint from its neighbours; trained and dropped ordinals lie strictly
    above ``cut`` (the cut itself is unresolved by definition); retained
    ordinals lie at or above it and are neither trained nor dropped;
    ``failures`` lists ``(ordinal, count)`` for unresolved ordinals at or
    above the cut with ``count >= 1``, ascending (saved under the key
    ``"attempts"``, its name before attempts came to mean leases); with a ``stream_len``,
    nothing lies beyond it; no ordinal reaches ``LIMIT`` (2**64) and no
    number exceeds it. The checks cost O(ranges + failures + sealed), never
    the number of ordinals the ranges span.

    The siblings' part: ``samples`` is the group size, ``next_attempt`` the
    attempt counter, ``sealed`` the sealed siblings of outstanding groups
    whose samples the framework saved with it (ascending; empty unless
    ``save_sealed``). ``1 <= samples <= 2**32`` and ``0 <= next_attempt <=
    2**32`` (sibling indices and attempts are u32 in the journal, so a record
    the ledger could not deal from is refused here, not at the first
    dispatch); every sealed sibling is an index below ``samples``, of an
    ordinal below ``2**64``, at or above the cut that the record does not
    resolve or retain (its group was outstanding), under an attempt below
    ``next_attempt``, listed once and ascending. A group may have all its
    siblings sealed: a resume keeps them for a group that waits for its
    stamp, and it lands at its dispatch.

    A violation raises ``CheckpointCorruptError`` naming it. The record
    writes the ranges delta-coded from the cut (see ``_encode``), so that its
    size follows the number of ranges and not the run's length.
    """

    cut: int
    trained_above_cut: tuple[Range, ...] = attrs.field(default=(), converter=_pairs)
    dropped_above_cut: tuple[Range, ...] = attrs.field(default=(), converter=_pairs)
    retained: tuple[Range, ...] = attrs.field(default=(), converter=_pairs)
    failures: tuple[tuple[int, int], ...] = attrs.field(default=(), converter=_pairs)
    fingerprint: str = ""
    stream_len: int | None = None
    samples: int = 1
    next_attempt: int = 0
    sealed: tuple[Lease, ...] = attrs.field(default=(), converter=_sealed_leases)

    def __attrs_post_init__(self) -> None:
        _validate(self)
        _validate_siblings(self)

    def trained(self) -> Iterator[int]:
        return expand(self.trained_above_cut)

    def dropped(self) -> Iterator[int]:
        return expand(self.dropped_above_cut)

    def retained_ordinals(self) -> Iterator[int]:
        return expand(self.retained)

    def size(self) -> int:
        """Integers in the record: what the size invariant bounds."""
        return (
            2
            * (
                len(self.trained_above_cut)
                + len(self.dropped_above_cut)
                + len(self.retained)
                + len(self.failures)
            )
            + 2
            + 3 * len(self.sealed)
        )

    def state_dict(self) -> dict[str, Any]:
        """The record: JSON types only, checksummed (the groups' record
        nested, with its own checksum)."""
        sealed: list[list[int]] = []
        floor = self.cut
        for o, s, a in self.sealed:
            sealed.append([o - floor, s, a])
            floor = o
        body: dict[str, Any] = {
            KEY_FORMAT: FORMAT,
            KEY_VERSION: VERSION,
            KEY_SAMPLES: self.samples,
            KEY_NEXT_ATTEMPT: self.next_attempt,
            KEY_LEDGER: groups_record(self),
            KEY_SEALED: sealed,
        }
        body[KEY_CHECKSUM] = _checksum(body)
        return body

    @classmethod
    def from_state_dict(
        cls, record: Mapping[str, Any], *, fingerprint: str | None = None
    ) -> Checkpoint:
        """Validate ``record`` and return its checkpoint.

        Reads the ledger's record and, as a checkpoint of single-sample
        groups with no attempt dealt, a groups' record alone (what the
        prompt-level ledger of before issue 22 wrote). Raises
        ``CheckpointVersionError`` for another format or version,
        ``CheckpointCorruptError`` for a missing or extra key (of any type),
        a bad checksum, a wrong type, a number above ``LIMIT`` or a broken
        structural invariant, and ``FingerprintMismatchError`` when
        ``fingerprint`` is given and differs from the record's. Every
        message quotes the record's values bounded (``shown``).
        """
        if not isinstance(record, Mapping):
            raise CheckpointCorruptError(
                f"checkpoint record must be a dict, got {type(record).__name__}"
            )
        if record.get(KEY_FORMAT) == GROUPS_FORMAT:
            return read_groups_record(record, fingerprint=fingerprint)
        if record.get(KEY_FORMAT) != FORMAT:
            raise CheckpointVersionError(
                f"not a frontier_core checkpoint: {KEY_FORMAT!r} is "
                f"{shown(record.get(KEY_FORMAT))}, expected {FORMAT!r} "
                f"(or {GROUPS_FORMAT!r})"
            )
        version = record.get(KEY_VERSION)
        if version != VERSION or type(version) is not int:
            raise CheckpointVersionError(
                f"checkpoint schema version {shown(version, 20)} is not supported "
                f"(this library reads version {VERSION})"
            )
        keys = set(record)
        missing = sorted((_OUTER_KEYS | {KEY_CHECKSUM}) - keys)
        extra = keys - _OUTER_KEYS - {KEY_CHECKSUM}
        if missing or extra:
            raise CheckpointCorruptError(
                f"checkpoint record has missing keys {missing} and unknown keys {shown_keys(extra)}"
            )
        body = {k: record[k] for k in _OUTER_KEYS}
        try:
            expected = _checksum(body)
        except (TypeError, ValueError, RecursionError) as exc:
            raise CheckpointCorruptError(
                f"checkpoint record is not JSON data: {str(exc)[:200]}"
            ) from None
        if record[KEY_CHECKSUM] != expected:
            raise CheckpointCorruptError(
                "checkpoint checksum mismatch: the record was altered or truncated"
            )
        groups = read_groups_record(record[KEY_LEDGER], fingerprint=fingerprint)
        raw = record[KEY_SEALED]
        if not isinstance(raw, list):
            raise CheckpointCorruptError(
                f"{KEY_SEALED!r} must be a list of [gap, sibling, attempt]"
            )
        sealed = []
        floor = groups.cut
        for item in raw:
            if not (isinstance(item, list) and len(item) == 3):
                raise CheckpointCorruptError(
                    f"{KEY_SEALED!r} holds {shown(item)}, not [gap, sibling, attempt]"
                )
            gap, s, a = (_check_count(KEY_SEALED, x, least=0) for x in item)
            floor += gap
            sealed.append(Lease(floor, s, a))
        return attrs.evolve(
            groups,
            samples=record[KEY_SAMPLES],
            next_attempt=record[KEY_NEXT_ATTEMPT],
            sealed=tuple(sealed),
        )

    def highest_ordinal(self) -> int:
        """The highest ordinal the record refers to (``cut - 1`` if none)."""
        return max(
            [self.cut - 1]
            + [
                r[-1][1] - 1
                for r in (self.trained_above_cut, self.dropped_above_cut, self.retained)
                if r
            ]
            + [o for o, _ in self.failures]
        )

    @property
    def resolved_count(self) -> int:
        return count(self.trained_above_cut) + count(self.dropped_above_cut)


def groups_record(c: Checkpoint) -> dict[str, Any]:
    """The groups' record of ``c`` (its siblings' part left out): JSON types
    only, checksummed. The record the prompt-level ledger wrote before issue
    22, nested in the ledger's."""
    body: dict[str, Any] = {
        KEY_FORMAT: GROUPS_FORMAT,
        KEY_VERSION: GROUPS_VERSION,
        KEY_FINGERPRINT: c.fingerprint,
        KEY_STREAM_LEN: c.stream_len,
        KEY_CUT: c.cut,
        KEY_TRAINED: _encode(c.trained_above_cut, floor=c.cut + 1, span=True),
        KEY_DROPPED: _encode(c.dropped_above_cut, floor=c.cut + 1, span=True),
        KEY_RETAINED: _encode(c.retained, floor=c.cut, span=True),
        KEY_ATTEMPTS: _encode(c.failures, floor=c.cut, span=False),
    }
    body[KEY_CHECKSUM] = _checksum(body)
    return body


def read_groups_record(record: Mapping[str, Any], *, fingerprint: str | None = None) -> Checkpoint:
    """Validate a groups' record and return it as a checkpoint of
    single-sample groups with no attempt dealt; raises as
    ``Checkpoint.from_state_dict`` does."""
    if not isinstance(record, Mapping):
        raise CheckpointCorruptError(
            f"checkpoint record must be a dict, got {type(record).__name__}"
        )
    if record.get(KEY_FORMAT) != GROUPS_FORMAT:
        raise CheckpointVersionError(
            f"not a frontier_core checkpoint: {KEY_FORMAT!r} is "
            f"{shown(record.get(KEY_FORMAT))}, expected {GROUPS_FORMAT!r}"
        )
    version = record.get(KEY_VERSION)
    if version != GROUPS_VERSION or type(version) is not int:
        raise CheckpointVersionError(
            f"checkpoint schema version {shown(version, 40)} is not supported "
            f"(this library reads version {GROUPS_VERSION})"
        )
    keys = set(record)
    missing = sorted((_BODY_KEYS | {KEY_CHECKSUM}) - keys)
    extra = keys - _BODY_KEYS - {KEY_CHECKSUM}
    if missing or extra:
        raise CheckpointCorruptError(
            f"checkpoint record has missing keys {missing} and unknown keys {shown_keys(extra)}"
        )
    body = {k: record[k] for k in _BODY_KEYS}
    try:
        expected_sum = _checksum(body)
    except (TypeError, ValueError, RecursionError) as exc:
        # Nesting too deep, an int past the digit limit, a non-JSON value.
        raise CheckpointCorruptError(
            f"checkpoint record is not JSON data: {str(exc)[:200]}"
        ) from None
    if record[KEY_CHECKSUM] != expected_sum:
        raise CheckpointCorruptError(
            "checkpoint checksum mismatch: the record was altered or "
            f"truncated (stored {shown(record[KEY_CHECKSUM])}, computed {expected_sum!r})"
        )
    found = record[KEY_FINGERPRINT]
    if not isinstance(found, str):
        raise CheckpointCorruptError(f"{KEY_FINGERPRINT!r} must be a string")
    if fingerprint is not None and found != fingerprint:
        raise FingerprintMismatchError(expected=fingerprint, found=found)
    stream_len = record[KEY_STREAM_LEN]
    if stream_len is not None:
        _check_int(KEY_STREAM_LEN, stream_len)
    cut = _check_int(KEY_CUT, record[KEY_CUT])
    trained = _decode(KEY_TRAINED, record[KEY_TRAINED], floor=cut + 1, span=True)
    dropped = _decode(KEY_DROPPED, record[KEY_DROPPED], floor=cut + 1, span=True)
    retained = _decode(KEY_RETAINED, record[KEY_RETAINED], floor=cut, span=True)
    attempts = _decode(KEY_ATTEMPTS, record[KEY_ATTEMPTS], floor=cut, span=False)
    return Checkpoint(
        cut=cut,
        trained_above_cut=trained,
        dropped_above_cut=dropped,
        retained=retained,
        failures=attempts,
        fingerprint=found,
        stream_len=stream_len,
    )


def _validate_siblings(c: Checkpoint) -> None:
    # Bounded to what the ledger and the journal can deal: sibling indices
    # and attempts are u32 there, ordinals u64.
    _check_count(KEY_SAMPLES, c.samples, least=1, most=MAX_ATTEMPT + 1)
    _check_count(KEY_NEXT_ATTEMPT, c.next_attempt, least=0, most=MAX_ATTEMPT + 1)
    if not c.sealed:
        return
    resolved_or_retained = (c.trained_above_cut, c.dropped_above_cut, c.retained)
    previous: tuple[int, int] | None = None
    for lease in c.sealed:
        for name, x in zip(("ordinal", "sibling", "attempt"), lease, strict=True):
            _check_count(f"a sealed sibling's {name}", x, least=0)
        o, s, a = lease
        # (Sibling and attempt are bounded by samples and next_attempt, below.)
        _check_count("a sealed sibling's ordinal", o, least=0, most=_MAX_ORDINAL)
        if previous is not None and (o, s) <= previous:
            raise CheckpointCorruptError(f"sealed siblings must ascend, {lease} follows {previous}")
        previous = (o, s)
        if o < c.cut or s >= c.samples or a >= c.next_attempt:
            raise CheckpointCorruptError(
                f"sealed sibling {lease}: ordinals >= the cut {c.cut}, siblings < "
                f"{c.samples}, attempts < next_attempt {c.next_attempt}"
            )
        if any(_contains(r, o) for r in resolved_or_retained):
            raise CheckpointCorruptError(
                f"sealed sibling {lease} belongs to a group the record resolves or retains"
            )
        if c.stream_len is not None and o >= c.stream_len:
            raise CheckpointCorruptError(f"sealed sibling {lease} lies beyond the stream")


def _check_count(name: str, value: object, *, least: int, most: int | None = None) -> int:
    if type(value) is not int or value < least or (most is not None and value > most):
        upper = "" if most is None else f" and <= {most}"
        raise CheckpointCorruptError(
            f"{name!r} must be an int >= {least}{upper}, got {shown(value)}"
        )
    return value


def _checksum(body: Mapping[str, Any]) -> str:
    canonical = json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    return "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _validate(c: Checkpoint) -> None:
    _check_int(KEY_CUT, c.cut)
    if not isinstance(c.fingerprint, str):
        raise CheckpointCorruptError(f"{KEY_FINGERPRINT!r} must be a string")
    if c.stream_len is not None:
        _check_int(KEY_STREAM_LEN, c.stream_len)
    for name, ranges, floor in (
        (KEY_TRAINED, c.trained_above_cut, c.cut + 1),
        (KEY_DROPPED, c.dropped_above_cut, c.cut + 1),
        (KEY_RETAINED, c.retained, c.cut),
    ):
        for start, stop in ranges:
            _check_int(name, start)
            _check_int(name, stop)
            if start < floor:
                raise CheckpointCorruptError(
                    f"{name!r} holds [{start}, {stop}): ordinals must be >= {floor}"
                )
            if stop <= start:
                raise CheckpointCorruptError(f"{name!r} holds [{start}, {stop}): empty or reversed")
            floor = stop + 1 if name != KEY_RETAINED else stop
        # Retained ranges may touch (one buffered group after another);
        # resolved ranges are maximal, so touching ones would have merged.
    floor = c.cut
    for o, n in c.failures:
        _check_int(KEY_ATTEMPTS, o, top=LIMIT - 1)
        _check_int(KEY_ATTEMPTS, n)
        if o < floor or n < 1:
            raise CheckpointCorruptError(
                f"{KEY_ATTEMPTS!r} holds ({o}, {n}): ordinals ascending from the cut, counts >= 1"
            )
        floor = o + 1
    for a_name, a, b_name, b in (
        (KEY_TRAINED, c.trained_above_cut, KEY_DROPPED, c.dropped_above_cut),
        (KEY_TRAINED, c.trained_above_cut, KEY_RETAINED, c.retained),
        (KEY_DROPPED, c.dropped_above_cut, KEY_RETAINED, c.retained),
    ):
        clash = _first_overlap(a, b)
        if clash is not None:
            raise CheckpointCorruptError(
                f"checkpoint lists ordinal {clash} in both {a_name!r} and {b_name!r}"
            )
    for o, _ in c.failures:
        if _contains(c.trained_above_cut, o) or _contains(c.dropped_above_cut, o):
            raise CheckpointCorruptError(
                f"checkpoint keeps failures for ordinal {o}, which is already resolved"
            )
    if c.stream_len is not None and (c.cut > c.stream_len or c.highest_ordinal() >= c.stream_len):
        raise CheckpointCorruptError(
            f"checkpoint refers to ordinal {max(c.highest_ordinal(), c.cut)} "
            f"beyond its own stream length {c.stream_len}"
        )


def _check_int(name: str, value: object, *, top: int = LIMIT) -> int:
    """``value`` if it is an int (not a bool) in ``[0, top]``: the cut, a
    range's stop, a count and the stream length are at most ``LIMIT``, an
    ordinal below it, so that nothing built from a record is wider than a
    u64 (the trie under the ledger grows a level per 5 bits of a key)."""
    if type(value) is not int or value < 0:
        raise CheckpointCorruptError(f"{name!r} must be an int >= 0, got {shown(value)}")
    if value > top:
        raise CheckpointCorruptError(
            f"{name!r} holds {shown(value)}, above {shown(top)}: no ledger holds an "
            "ordinal at or past 2**64"
        )
    return value


def _encode(pairs: tuple[tuple[int, int], ...], *, floor: int, span: bool) -> list[list[int]]:
    """Delta-code ascending ``pairs`` as ``[gap, n]`` items.

    Each item starts ``gap`` ordinals past the end of the previous one (the
    first, past ``floor``, which is derived from the cut). A range item spans
    ``n`` ordinals (``span``); an attempts item is one ordinal carrying count
    ``n``. Only the cut grows with the run: a record of the same window after
    10**4 or 10**7 prompts differs in the digits of the cut alone.
    """
    out: list[list[int]] = []
    for start, second in pairs:
        n = second - start if span else second
        out.append([start - floor, n])
        floor = start + (n if span else 1)
    return out


def _decode(name: str, value: object, *, floor: int, span: bool) -> tuple[tuple[int, int], ...]:
    """Invert ``_encode``; items are ascending and disjoint by construction,
    so the checks left are the types and the signs."""
    if not isinstance(value, list):
        raise CheckpointCorruptError(f"{name!r} must be a list of [gap, n] pairs")
    out: list[tuple[int, int]] = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2):
            raise CheckpointCorruptError(f"{name!r} holds {shown(item)}, not a [gap, n] pair")
        gap = _check_int(name, item[0])
        n = _check_int(name, item[1])
        if n < 1:
            raise CheckpointCorruptError(f"{name!r} holds {shown(item)}: n must be >= 1")
        start = floor + gap
        out.append((start, start + n) if span else (start, n))
        floor = start + (n if span else 1)
    return tuple(out)


def _first_overlap(a: tuple[Range, ...], b: tuple[Range, ...]) -> int | None:
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        if lo < min(a[i][1], b[j][1]):
            return lo
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return None


def _contains(ranges: tuple[Range, ...], o: int) -> bool:
    i = bisect.bisect_right(ranges, o, key=lambda r: r[0]) - 1
    return i >= 0 and ranges[i][0] <= o < ranges[i][1]
