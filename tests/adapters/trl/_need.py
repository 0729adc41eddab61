"""Skip the TRL tests cleanly where TRL is absent, unless CI requires them.

``FRONTIER_REQUIRE_TRL=1`` turns the skip into a failure, so a CI job that
installed TRL cannot pass by skipping everything.
"""

from __future__ import annotations

import importlib
import os

import pytest

REQUIRED = os.environ.get("FRONTIER_REQUIRE_TRL") == "1"


def need_trl() -> None:
    """Import TRL's stack or skip the calling module (fail under
    ``FRONTIER_REQUIRE_TRL=1``)."""
    for name in ("torch", "transformers", "datasets", "trl"):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if REQUIRED:
                raise AssertionError(
                    f"FRONTIER_REQUIRE_TRL=1 but {name} does not import: {exc}"
                ) from exc
            pytest.skip(
                f"{name} is not installed ({exc}); pip install 'frontier-core[trl]' "
                "(FRONTIER_REQUIRE_TRL=1 makes this a failure)",
                allow_module_level=True,
            )
