"""Skip the verifiers binding's tests where verifiers is absent, unless CI
requires them: ``FRONTIER_REQUIRE_VERIFIERS=1`` (scripts/test.sh, in
.venv-agents) turns the skip into a failure."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

import pytest

REQUIRED = os.environ.get("FRONTIER_REQUIRE_VERIFIERS") == "1"


def need_verifiers() -> None:
    """Import verifiers 0.4.0's stack and find ``uv`` beside the
    interpreter (its harness program needs it), or skip the calling module
    (fail under ``FRONTIER_REQUIRE_VERIFIERS=1``)."""
    problem = None
    for name in ("torch", "verifiers.v1"):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            problem = f"{name} does not import: {exc}"
            break
    bin_dir = str(Path(sys.executable).parent)
    if problem is None and shutil.which("uv", path=bin_dir) is None:
        problem = f"uv is not in {bin_dir}"
    if problem is None:
        return
    if REQUIRED:
        raise AssertionError(f"FRONTIER_REQUIRE_VERIFIERS=1 but {problem}")
    pytest.skip(
        f"{problem}; bash scripts/setup-agents.sh makes .venv-agents "
        "(FRONTIER_REQUIRE_VERIFIERS=1 makes this a failure)",
        allow_module_level=True,
    )
