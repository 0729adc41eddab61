"""Reading the invariant documents of proofs/: their sections and the code
and tests each section names. Shared by the tests that keep each document
in step with the code (tests/core/test_proofs.py and
tests/core/journal/test_proofs.py)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sections(name: str, ids: str = "A-Z-") -> dict[str, str]:
    """``proofs/<name>``'s invariant sections, by ID: each ``## ID: title``
    heading (IDs of the characters ``ids``) and the text up to the next."""
    doc = (ROOT / "proofs" / name).read_text()
    return dict(re.findall(rf"^## ([A-Z][{ids}]+): .*?\n(.*?)(?=^## |\Z)", doc, re.S | re.M))


def refs(body: str, label: str) -> list[str]:
    """The backquoted references of a section's ``**label:**`` paragraph."""
    match = re.search(rf"\*\*{label}:\*\*(.*?)(?:\n\n|\Z)", body, re.S)
    assert match, f"no {label!r} line"
    return re.findall(r"`([^`]+)`", match.group(1))


def resolve(dotted: str) -> object:
    """The object a dotted name (module path, then attributes) names."""
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


def check_section(invariant: str, body: str, *, enforced_required: bool) -> None:
    """A section has its statement, proof sketch and exhaustiveness line;
    every symbol it says enforces it imports (and there is one, when
    ``enforced_required``); every test it says checks it exists."""
    assert "**Statement.**" in body and "**Proof sketch.**" in body
    assert "**Exhaustively checked:**" in body
    enforced = refs(body, "Enforced by")
    if enforced_required:
        assert enforced, invariant
    for symbol in enforced:
        resolve(symbol)
    checked = refs(body, "Checked by")
    assert checked, invariant
    for ref in checked:
        path, _, name = ref.partition("::")
        obj: object = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        for attr in name.split("."):
            obj = getattr(obj, attr)
        assert callable(obj), ref
