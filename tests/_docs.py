"""Reading the documentation the tests hold to its word: README.md,
CHANGELOG.md and the pages of docs/. Shared by every test that runs a
page's examples or checks what a page says, so none of them restates where
a document lives."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The documents at the repository root; any other name is a page of docs/.
_AT_ROOT = ("README.md", "CHANGELOG.md")

_HEADING = re.compile(r"(#{1,6}) (.*)")


def path(name: str) -> Path:
    """The file of a document: ``"README.md"`` or ``"CHANGELOG.md"`` at the
    root, else a page of docs/ (``"rollout.md"``, ``"guides/verl-fully-async.md"``)."""
    if not name.endswith(".md"):
        name += ".md"
    return ROOT / name if name in _AT_ROOT else ROOT / "docs" / name


def doc(name: str) -> str:
    """The text of a document (see :func:`path`)."""
    return path(name).read_text()


def filename(name: str) -> str:
    """The document's path from the repository root, for ``compile``: a
    failing example's traceback names the page it is on."""
    return path(name).relative_to(ROOT).as_posix()


def python_blocks(name: str) -> list[str]:
    """The bodies of the document's ```` ```python ```` blocks, in order."""
    return re.findall(r"```python\n(.*?)```", doc(name), re.S)


def section(name: str, title: str) -> str:
    """The section of a document whose heading starts with ``title`` (any
    level): its heading line and everything up to the next heading of the
    same or a higher level, outside code blocks."""
    lines = doc(name).splitlines(keepends=True)
    start: int | None = None
    level = 0
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading is None:
            continue
        depth = len(heading.group(1))
        if start is None:
            if heading.group(2).startswith(title):
                start, level = i, depth
        elif depth <= level:
            return "".join(lines[start:i])
    if start is None:
        raise AssertionError(f"{filename(name)} has no section {title!r}")
    return "".join(lines[start:])
