"""proofs/JOURNAL.md and the code must not drift apart: every invariant the
journal promises is documented with its statement, proof sketch, the code
that enforces it (which must import) and the tests that check it (which must
exist)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "proofs" / "JOURNAL.md").read_text()
SECTIONS = dict(re.findall(r"^## ([A-Z][A-Z-]+): .*?\n(.*?)(?=^## |\Z)", DOC, re.S | re.M))
REQUIRED = {
    "JOURNAL-PREFIX",
    "TORN-TAIL-ONLY",
    "FENCING",
    "COMPACTION-PRESERVES-WINDOW",
    "BOUNDED-PARSE",
    "CONTINUATION-EXACT",
}


def refs(body: str, label: str) -> list[str]:
    match = re.search(rf"\*\*{label}:\*\*(.*?)(?:\n\n|\Z)", body, re.S)
    assert match, f"no {label!r} line"
    return re.findall(r"`([^`]+)`", match.group(1))


def resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_the_required_invariants_are_documented() -> None:
    assert set(SECTIONS) == REQUIRED


@pytest.mark.parametrize("invariant", sorted(REQUIRED))
def test_each_invariant_has_statement_proof_code_and_tests(invariant: str) -> None:
    body = SECTIONS[invariant]
    assert "**Statement.**" in body and "**Proof sketch.**" in body
    assert "**Exhaustively checked:**" in body
    enforced = refs(body, "Enforced by")
    assert enforced, invariant
    for symbol in enforced:
        resolve(symbol)
    checked = refs(body, "Checked by")
    assert checked, invariant
    for ref in checked:
        path, _, name = ref.partition("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        obj: object = module
        for attr in name.split("."):
            obj = getattr(obj, attr)
        assert callable(obj), ref
