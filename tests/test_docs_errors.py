"""Every error the docs name can be caught by that name: it is exported by
a public module of the project (or is Python's own, or a named third
party's). A user who writes ``except TraceError`` from docs/bad-input.md
must find it without reaching into a private module."""

from __future__ import annotations

import builtins
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Public modules importable in the main venv (the TRL binding's errors are
#: checked where transformers is installed: tests/adapters/trl).
PUBLIC = (
    "frontier_core",
    "frontier_core.journal",
    "frontier_core.testing",
    "frontier_adapters",
    "frontier_adapters.agents",
    "frontier_adapters.checkpoints",
    "frontier_adapters.journal",
    "frontier_adapters.ray",
    "frontier_adapters.rollout",
    "frontier_adapters.run",
    "frontier_adapters.store",
    "frontier_adapters.torch",
)

#: Errors of the libraries the bindings drive, named in the docs as theirs.
THIRD_PARTY = {"EngineDeadError"}  # vLLM's: vllm.v1.engine.exceptions


def named_errors() -> set[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found: set[str] = set()
    for page in pages:
        found |= set(re.findall(r"`([A-Z][A-Za-z]*Error)`", page.read_text()))
    return found


def test_every_error_the_docs_name_is_public() -> None:
    exported: set[str] = set()
    for name in PUBLIC:
        exported |= set(dir(importlib.import_module(name)))
    names = named_errors()
    assert {"TraceError", "JournalFencedError", "CheckpointFencedError"} <= names
    missing = sorted(
        n for n in names - THIRD_PARTY if n not in exported and not hasattr(builtins, n)
    )
    assert missing == [], f"named in the docs, exported by no public module: {missing}"
