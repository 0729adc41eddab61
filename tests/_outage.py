"""A directory store's outage, for tests: its directory swapped for a file
(every upload then fails), and back."""

from __future__ import annotations

import shutil
from pathlib import Path


def store_down(remote: Path, parked: Path) -> None:
    """Move the store's directory to ``parked`` and put a file in its place.
    The shipper's thread may create the directory again between the two
    (its next upload makes its parents), so the swap is retried, a bounded
    number of times."""
    try:
        remote.rename(parked)
    except FileNotFoundError:  # nothing uploaded yet: the store made no directory
        parked.mkdir()
    blocker = remote.with_name(remote.name + ".blocker")
    blocker.write_bytes(b"")
    for _ in range(100):
        try:
            blocker.rename(remote)  # a file never replaces a directory
            return
        except IsADirectoryError:
            shutil.rmtree(remote, ignore_errors=True)
    raise AssertionError(f"{remote} kept coming back as a directory")


def store_up(remote: Path, parked: Path) -> None:
    """End the outage: the parked directory back in place."""
    remote.unlink()
    parked.rename(remote)
