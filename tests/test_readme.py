"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_integration_example_runs_and_its_assertions_hold() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks, "the README lost its integration example"
    example = blocks[0]
    assert len(example.strip().splitlines()) <= 25
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert "assert" in example
