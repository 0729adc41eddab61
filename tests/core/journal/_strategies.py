"""Strategies and settings shared by the journal's tests.

Every property test is seeded (``derandomize``) and small in CI; the long
run is

    FRONTIER_JOURNAL_EXAMPLES=5000 .venv/bin/python -m pytest tests/core/journal

which also randomizes the seeds.
"""

from __future__ import annotations

import os
import struct
import zlib

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from frontier_core.journal import (
    BytesPayload,
    Extend,
    JournalHeader,
    JsonPayload,
    Mark,
    Payload,
    Progress,
    Record,
    Reserve,
    Sealed,
    TokenPayload,
)

_LONG = "FRONTIER_JOURNAL_EXAMPLES" in os.environ


def budget(ci: int) -> settings:
    """``ci`` examples, seeded, unless the long run sets the budget."""
    return settings(
        max_examples=int(os.environ["FRONTIER_JOURNAL_EXAMPLES"]) if _LONG else ci,
        deadline=None,
        derandomize=not _LONG,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


U32 = (1 << 32) - 1
U64 = (1 << 64) - 1

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def token_payloads(draw: st.DrawFn, max_tokens: int = 40) -> TokenPayload:
    n = draw(st.integers(0, max_tokens))
    tokens = draw(st.lists(st.integers(0, U32), min_size=n, max_size=n))
    logprobs = draw(
        st.lists(st.floats(-(2.0**100), 0.0, allow_nan=False, width=32), min_size=n, max_size=n)
    )
    if draw(st.booleans()):
        versions: int | list[int] = draw(st.integers(0, U32))
    else:
        # Few distinct versions, as across a handful of weight updates.
        pool = draw(st.lists(st.integers(0, 9), min_size=1, max_size=3))
        versions = sorted(draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)))
    reward = draw(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)))
    return TokenPayload.of(tokens, logprobs, versions, reward)


payloads: st.SearchStrategy[Payload] = st.one_of(
    st.builds(BytesPayload, st.binary(max_size=48)),
    st.builds(JsonPayload.of, json_values),
    token_payloads(),
)


_FEW_ORDINALS = st.integers(0, 5)
_FEW = st.integers(0, 3)


def sibling_records(
    ordinals: st.SearchStrategy[int] = _FEW_ORDINALS,
    siblings: st.SearchStrategy[int] = _FEW,
    attempts: st.SearchStrategy[int] = _FEW,
) -> st.SearchStrategy[Sealed | Progress]:
    return st.one_of(
        st.builds(Sealed, ordinals, siblings, attempts, payloads),
        st.builds(Progress, ordinals, siblings, attempts, payloads),
    )


_STARTS = st.integers(0, 50)


@st.composite
def extends(
    draw: st.DrawFn,
    ordinals: st.SearchStrategy[int] = _FEW_ORDINALS,
    siblings: st.SearchStrategy[int] = _FEW,
    attempts: st.SearchStrategy[int] = _FEW,
    starts: st.SearchStrategy[int] = _STARTS,
) -> Extend:
    p = draw(token_payloads())
    return Extend(
        draw(ordinals),
        draw(siblings),
        draw(attempts),
        draw(starts),
        TokenPayload(p.token_data, p.logprob_data, p.version_runs),
    )


#: Records over a few keys and attempts, so that fencing happens often.
records: st.SearchStrategy[Record] = st.one_of(
    sibling_records(),
    sibling_records(),
    sibling_records(),
    extends(),
    st.builds(Mark, st.integers(0, 50)),
    st.builds(Reserve, st.integers(0, 50)),
)

#: A few fixed payloads, for the tests of replay and compaction, where a
#: payload only needs an identity: cheap to draw, so more journals per second.
_FIXED = st.sampled_from(
    [
        BytesPayload(b""),
        BytesPayload(b"a"),
        BytesPayload(b"b"),
        JsonPayload.of({"turn": 1}),
        TokenPayload.of([1, 2], [-0.5, -0.25], [3, 4]),
        TokenPayload.of([1, 2, 3], [-0.5, -0.25, -1.0], 3, reward=1.0),
    ]
)
fold_records: st.SearchStrategy[Record] = st.one_of(
    st.builds(Sealed, _FEW_ORDINALS, _FEW, _FEW, _FIXED),
    st.builds(Progress, _FEW_ORDINALS, _FEW, _FEW, _FIXED),
    st.builds(Progress, _FEW_ORDINALS, _FEW, _FEW, _FIXED),
    st.builds(Mark, st.integers(0, 50)),
)

#: Records with extreme field values, for the codec.
wide_records: st.SearchStrategy[Record] = st.one_of(
    records,
    sibling_records(st.integers(0, U64), st.integers(0, U32), st.integers(0, U32)),
    extends(st.integers(0, U64), st.integers(0, U32), st.integers(0, U32), st.integers(0, U32)),
    st.builds(Mark, st.integers(0, U64)),
    st.builds(Reserve, st.integers(0, U64)),
)

headers = st.builds(
    JournalHeader,
    fingerprint=st.text(max_size=12),
    lineage=st.text(min_size=1, max_size=12),
    base=st.one_of(st.just(0), st.integers(0, 1000), st.just(U64 - 1000)),
)

windows = st.one_of(
    st.frozensets(st.integers(0, 6)),
    st.builds(range, st.integers(0, 6), st.integers(0, 7)),
)


# -- a forger: the frame layout written down independently of _format --------


def forge_frame(
    kind: int, seq: int, body: bytes, *, key: int | None = None, reserved: bytes = bytes(3)
) -> bytes:
    """A frame with valid checks around any body, as proofs/JOURNAL.md and
    ``_format``'s docstring lay it out: what a buggy or hostile writer could
    produce. ``key`` seeds the frame check; by default a header's is 0 and a
    record's the key of the forged journal (``forge_journal``'s header). The
    checks are not the security boundary; validation is."""
    if key is None:
        key = 0 if kind == 0 else forge_key()
    head = struct.pack("<IQB", len(body), seq, kind) + reserved
    head += struct.pack("<I", zlib.crc32(head))
    return head + body + struct.pack("<I", zlib.crc32(head + body, key))


#: The journal id of the forged journals.
FORGED_ID = bytes(range(100, 116))


def forge_key(
    fingerprint: bytes = b"fp", lineage: bytes = b"run", journal_id: bytes = FORGED_ID
) -> int:
    """A journal's key, from the layout: the CRC-32 of its identity."""
    return zlib.crc32(fingerprint + b"\0" + lineage + b"\0" + journal_id)


def forge_header_body(
    fingerprint: bytes = b"fp",
    lineage: bytes = b"run",
    *,
    tag: bytes = b"frontier_core.journal",
    version: int = 3,
    journal_id: bytes = FORGED_ID,
    marks: tuple[tuple[int, int], ...] = (),
) -> bytes:
    return (
        struct.pack("<B", len(tag))
        + tag
        + struct.pack("<HH", version, len(fingerprint))
        + fingerprint
        + struct.pack("<B", len(lineage))
        + lineage
        + journal_id
        + struct.pack("<I", len(marks))
        + b"".join(struct.pack("<QQ", *mark) for mark in marks)
    )


def forge_journal(*bodies: tuple[int, bytes], base: int = 0, key: int | None = None) -> bytes:
    """A header (fingerprint ``fp``, lineage ``run``, journal id
    ``FORGED_ID``) and frames of the given (kind, body), numbered from
    ``base``, keyed to that header (or to ``key``)."""
    out = [forge_frame(0, base, forge_header_body())]
    for i, (kind, body) in enumerate(bodies, start=base + 1):
        out.append(forge_frame(kind, i, body, key=key))
    return b"".join(out)


def frame_offsets(data: bytes) -> list[int]:
    """The byte offset of every frame of a sound journal, and its end."""
    offsets = [0]
    while offsets[-1] < len(data):
        (length,) = struct.unpack_from("<I", data, offsets[-1])
        offsets.append(offsets[-1] + 24 + length)
    return offsets
