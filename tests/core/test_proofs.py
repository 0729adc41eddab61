"""proofs/INVARIANTS.md and proofs/SAMPLES.md must not drift apart from the
code and the tests."""

from __future__ import annotations

import pytest

from .._proofs import check_section, refs, sections
from ._model import INVARIANT_CHECKS
from ._sample_model import SAMPLE_INVARIANT_CHECKS

SECTIONS = sections("INVARIANTS.md")


def test_every_registered_invariant_check_is_documented() -> None:
    assert set(INVARIANT_CHECKS) <= set(SECTIONS)


@pytest.mark.parametrize("invariant", sorted(SECTIONS))
def test_each_invariant_has_statement_proof_and_resolvable_references(invariant: str) -> None:
    check_section(invariant, SECTIONS[invariant], enforced_required=False)


@pytest.mark.parametrize("invariant", sorted(INVARIANT_CHECKS))
def test_registered_checks_are_the_ones_the_doc_names(invariant: str) -> None:
    name = INVARIANT_CHECKS[invariant].__name__
    assert f"tests/core/_model.py::{name}" in refs(SECTIONS[invariant], "Checked by")


# -- proofs/SAMPLES.md: the sample-level ledger ---------------------------------------

SAMPLE_SECTIONS = sections("SAMPLES.md", "A-Z0-9-")
#: The invariants issue 13 asks for; others may be added beside them.
SAMPLE_REQUIRED = {
    "SAMPLE-EXACTLY-ONCE",
    "ATTEMPT-FENCING",
    "ATTEMPT-MONOTONE",
    "SIBLING-DETAIL-BOUNDED",
    "REUSE-SOUND",
    "N1-EQUIVALENCE",
}


def test_the_sample_invariants_are_documented() -> None:
    assert SAMPLE_REQUIRED <= set(SAMPLE_SECTIONS)
    assert set(SAMPLE_INVARIANT_CHECKS) <= set(SAMPLE_SECTIONS)
    # One ID, one document.
    assert not set(SAMPLE_SECTIONS) & set(SECTIONS)


@pytest.mark.parametrize("invariant", sorted(SAMPLE_SECTIONS))
def test_each_sample_invariant_has_statement_proof_code_and_tests(invariant: str) -> None:
    check_section(invariant, SAMPLE_SECTIONS[invariant], enforced_required=True)


@pytest.mark.parametrize("invariant", sorted(SAMPLE_INVARIANT_CHECKS))
def test_registered_sample_checks_are_the_ones_the_doc_names(invariant: str) -> None:
    name = SAMPLE_INVARIANT_CHECKS[invariant].__name__
    assert f"tests/core/_sample_model.py::{name}" in refs(SAMPLE_SECTIONS[invariant], "Checked by")
