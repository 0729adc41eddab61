"""proofs/JOURNAL.md and the code must not drift apart: every invariant the
journal promises is documented with its statement, proof sketch, the code
that enforces it (which must import) and the tests that check it (which must
exist)."""

from __future__ import annotations

import pytest

from ..._proofs import check_section, sections

SECTIONS = sections("JOURNAL.md")
REQUIRED = {
    "JOURNAL-PREFIX",
    "TORN-TAIL-ONLY",
    "FENCING",
    "COMPACTION-PRESERVES-WINDOW",
    "BOUNDED-PARSE",
    "CONTINUATION-EXACT",
    "FRAME-OF-ITS-JOURNAL",
    "TURN-CONTINUATION-EXACT",
    "TOOL-AT-MOST-ONCE",
    "FENCED-ANSWER-NEVER-TRAINED",
    "LOST-JOURNAL-FENCED",
    "ZOMBIE-FENCED",
    "FAILURE-SURVIVES-CRASH",
}


def test_the_required_invariants_are_documented() -> None:
    assert set(SECTIONS) == REQUIRED


@pytest.mark.parametrize("invariant", sorted(REQUIRED))
def test_each_invariant_has_statement_proof_code_and_tests(invariant: str) -> None:
    check_section(invariant, SECTIONS[invariant], enforced_required=True)
