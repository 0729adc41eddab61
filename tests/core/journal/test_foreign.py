"""FRAME-OF-ITS-JOURNAL: a frame copied from another journal is never
replayed, and a checkpoint's mark is proven against its journal even after a
compaction folded it into the base.

Issue 21 item 1: a ``Sealed`` frame of another run, spliced in at the same
sequence number, used to pass every check (a frame's checks covered only its
own head and body) and its sample was trained. Every record frame's check is
now seeded with its journal's key (``JournalHeader.key``: fingerprint,
lineage and the random journal id), so the copy fails its check wherever it
lands: an error at its offset in the middle, a torn tail (discarded, never
replayed) as the last frame.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontier_core.journal import (
    MAX_MARKS,
    JournalBehindError,
    JournalCorruptError,
    JournalHeader,
    Mark,
    Record,
    compact,
    decode,
    encode,
    encode_records,
)

from ._strategies import budget, frame_offsets, headers, records

pytestmark = pytest.mark.mutation

#: What makes a journal another one: each field of its identity alone.
OTHER = st.sampled_from(["journal_id", "lineage", "fingerprint"])


def _other(header: JournalHeader, field: str) -> JournalHeader:
    if field == "journal_id":
        return attrs.evolve(header, journal_id=bytes(b ^ 0x5A for b in header.journal_id))
    value = getattr(header, field)
    return attrs.evolve(header, **{field: value[:-1] + ("x" if value[-1:] != "x" else "y")})


@budget(200)
@given(headers, st.lists(records, min_size=1, max_size=6), OTHER, st.data())
def test_a_frame_of_another_journal_is_never_replayed(
    header: JournalHeader, recs: list[Record], field: str, data: st.DataObject
) -> None:
    ours = encode(header, recs)
    theirs = encode(_other(header, field), recs)  # the same records, frame for frame
    o, t = frame_offsets(ours), frame_offsets(theirs)
    # Frame i + 1 (record i) is taken from the other journal; the records
    # differ only in their frame check, the strongest case.
    i = data.draw(st.integers(0, len(recs) - 1), label="spliced record")
    head = len(o) - len(t)  # the headers may differ in size (fingerprint, lineage)
    assert head == 0 or field != "journal_id"
    spliced = ours[: o[i + 1]] + theirs[t[i + 1] : t[i + 2]] + ours[o[i + 2] :]
    if i == len(recs) - 1:
        decoded = decode(spliced)
        assert decoded.records == tuple(recs[:-1])
        assert decoded.torn is not None and decoded.torn.offset == o[i + 1]
        assert decoded.torn.reason == "the last frame fails its check"
    else:
        with pytest.raises(JournalCorruptError) as info:
            decode(spliced)
        assert info.value.offset == o[i + 1]
        assert "a frame of another journal" in info.value.reason


@budget(50)
@given(headers, st.lists(records, max_size=4), OTHER)
def test_a_journal_glued_to_another_is_refused_at_the_second_header(
    header: JournalHeader, recs: list[Record], field: str
) -> None:
    ours = encode(header, recs)
    with pytest.raises(JournalCorruptError, match="second header") as info:
        decode(ours + encode(_other(header, field), recs))
    assert info.value.offset == len(ours)


def test_the_key_depends_on_every_part_of_the_identity_and_nothing_else() -> None:
    header = JournalHeader("fp", "run", base=3, journal_id=bytes(16))
    keys = {_other(header, f).key for f in ("journal_id", "lineage", "fingerprint")}
    assert header.key not in keys and len(keys) == 3
    # The base and the marks are where the journal is, not whose: a
    # compaction keeps the key.
    assert attrs.evolve(header, base=9, marks=((2, 0), (9, 1))).key == header.key
    # A new value draws a new journal id.
    assert JournalHeader("fp", "run").journal_id != JournalHeader("fp", "run").journal_id


def test_compaction_remembers_the_marks_it_folds_in_and_check_mark_proves_them() -> None:
    first = [Mark(1), *[Mark(c) for c in range(2, 5)]]
    j1 = decode(encode(JournalHeader("fp", "run"), first))
    assert j1.marks() == ((1, 1), (2, 2), (3, 3), (4, 4))
    # Compacted at its end: the new journal's base is 4, its header
    # remembers every mark, and each still proves its checkpoint.
    header = JournalHeader("fp", "run", j1.last_seq, j1.header.journal_id, j1.marks())
    j2 = decode(encode(header, [*compact(j1.records, range(10)), Mark(5)]))
    for position, checkpoint in j1.marks():
        j2.check_mark(position, checkpoint)
    j2.check_mark(5, 5)
    assert j2.marks()[-1] == (5, 5)
    with pytest.raises(JournalBehindError, match="another branch"):
        j2.check_mark(3, 2)  # checkpoint 2's mark was at 2
    with pytest.raises(JournalBehindError, match="another branch"):
        j2.check_mark(1, 9)


def test_a_checkpoint_older_than_the_remembered_marks_is_refused_by_name() -> None:
    marks = tuple((p, p) for p in range(10, 10 + MAX_MARKS))
    base = marks[-1][0]
    decoded = decode(encode(JournalHeader("fp", "run", base, bytes(16), marks), []))
    decoded.check_mark(10, 10)
    with pytest.raises(JournalBehindError, match="too old to be proven"):
        decoded.check_mark(9, 9)
    # The history a compaction carries is bounded: the newest MAX_MARKS.
    more = decode(encode(JournalHeader("fp", "run", base, bytes(16), marks), [Mark(1)]))
    assert len(more.marks()) == MAX_MARKS and more.marks()[-1] == (base + 1, 1)
    assert more.marks()[0] == (11, 11)


def test_a_header_s_identity_and_marks_are_validated_by_name() -> None:
    """What a hand-built header may hold (a decoded one is checked the same
    way, as ``JournalCorruptError``: test_refusals)."""
    refused: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"journal_id": bytearray(16)}, TypeError, "journal_id must be 16 bytes, got bytearray"),
        ({"journal_id": bytes(15)}, TypeError, "journal_id must be 16 bytes, got b'"),
        ({"marks": 5}, TypeError, "marks must be a sequence of (position, checkpoint), got 5"),
        ({"marks": [(1, 0)] * 257}, ValueError, "marks holds 257 marks, more than 256"),
        ({"marks": [(1, 0, 0)]}, TypeError, "a mark must be (position, checkpoint), got (1, 0, 0)"),
        ({"marks": [7]}, TypeError, "a mark must be (position, checkpoint), got 7"),
        ({"marks": [(-1, 0)]}, ValueError, "a mark's position must be an int in [0, "),
        ({"marks": [(1, "c")]}, TypeError, "a mark's checkpoint must be an int, got str"),
    ]
    for kwargs, error, message in refused:
        with pytest.raises(error) as info:
            JournalHeader("fp", "run", base=9, **kwargs)  # type: ignore[arg-type]
        assert str(info.value).startswith(message), (kwargs, str(info.value))
    assert JournalHeader("fp", "run", base=9, marks=[[1, 0], (9, 1)]).marks == ((1, 0), (9, 1))
    with pytest.raises(TypeError, match="header must be a JournalHeader, got str"):
        encode_records([Mark(1)], first_seq=1, header="fp")  # type: ignore[arg-type]


def test_check_mark_below_the_base_names_why_and_where() -> None:
    # Marks whose checkpoint ids differ from their positions, so that a
    # mark's fields cannot stand in for each other.
    marks = tuple((p, p + 1000) for p in range(10, 10 + 2 * MAX_MARKS, 2))
    base = marks[-1][0]
    decoded = decode(encode(JournalHeader("fp", "run", base, bytes(16), marks), [Mark(5)]))
    decoded.check_mark(10, 1010)
    cases = {
        (10, 1011): "another branch",  # the oldest remembered position, another id
        (11, 1011): "another branch",  # between the two oldest: never a mark here
        (9, 1009): "too old to be proven",  # below every remembered mark
    }
    for (position, checkpoint), why in cases.items():
        with pytest.raises(JournalBehindError) as info:
            decoded.check_mark(position, checkpoint)
        assert why in str(info.value), (position, str(info.value))
        assert (info.value.position, info.value.last) == (position, base + 1)
        assert f"the checkpoint {checkpoint} saved journal position {position}" in str(info.value)
