"""The pairing of a Trainer checkpoint folder with the run's coverage
checkpoint.

Two writers, two places. The Trainer writes ``output_dir/checkpoint-N``
(the weights, the optimizer, ``trainer_state.json``: TRL's business). The
run writes its coverage checkpoint at step ``N`` where the run keeps its
checkpoints (``frontier_adapters.run.Run``: ``root/checkpoints``, or a
store URL's ``checkpoints``, which survives the node): the ledger record,
the stream position, and this binding's part (``PART``: the training log's
record count). The pairing rule:

* The coverage checkpoint of step ``N`` is written in ``on_save``, after
  every file of ``checkpoint-N`` is written and synced, so it vouches for
  that folder; it names the step (the checkpoint's ``step`` is the
  Trainer's ``global_step``).
* A resume takes the run's newest coverage checkpoint (``Run.open``) and
  the folder of its step: ``checkpoint-N`` must be a directory whose
  ``trainer_state.json`` says ``global_step`` ``N``. A missing folder or
  state file is a torn pair (``CheckpointFileError``), another step a
  mismatched one (``CheckpointMismatchError``): never resumed around.
* Folders above ``N`` are a dead branch (a save the process died in, or
  one whose coverage checkpoint was never published) and are removed. A
  coverage checkpoint of step 0 is the run's first (``Run.open`` writes it
  before anything is dealt) and pairs with no folder: a fresh start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from frontier_core import CheckpointCorruptError, CheckpointMismatchError

from .._errors import CheckpointFileError
from .._state import check_state
from ..checkpoints import LoadedCheckpoint
from ..checkpoints._fs import read_file

#: The part of the run's checkpoint that this binding writes (``trl.json``).
PART: Final = "trl"
FORMAT: Final = "frontier_adapters.trl"
VERSION: Final = 2
_KEY_LOG: Final = "log_records"
_KEYS: Final = frozenset({"format", "version", _KEY_LOG})
#: The Trainer's own state file in each checkpoint folder.
TRAINER_STATE: Final = "trainer_state.json"
#: The largest ``trainer_state.json`` read (it holds the log history).
MAX_TRAINER_STATE_BYTES: Final = 256 * 2**20
# The names the Trainer writes (``checkpoint-{global_step}``): ASCII digits
# without leading zeros, matched whole (``$`` would let a trailing newline
# in, ``\d`` any Unicode digit), so one step has one folder name.
_CHECKPOINT_DIR: Final = re.compile(r"checkpoint-(0|[1-9][0-9]*)", re.ASCII)


def part(log_records: int) -> dict[str, Any]:
    """This binding's part of a coverage checkpoint."""
    return {"format": FORMAT, "version": VERSION, _KEY_LOG: log_records}


def log_records(resumed: LoadedCheckpoint | None) -> int:
    """The training log's record count saved with ``resumed``: 0 for a
    fresh start (``None``) and for the run's first checkpoint, which has no
    part of ours. Raises ``CheckpointCorruptError`` for a later checkpoint
    without a valid part of ours (not written by this binding)."""
    if resumed is None:
        return 0
    saved = resumed.json_parts.get(PART)
    if saved is None:
        if resumed.step == 0:
            return 0
        raise CheckpointCorruptError(
            f"the run's checkpoint of step {resumed.step} ({resumed.path}) has no {PART!r} "
            "part: it was not written by frontier_adapters.trl"
        )
    state = check_state(saved, what="the TRL part", fmt=FORMAT, version=VERSION, keys=_KEYS)
    count = state[_KEY_LOG]
    if type(count) is not int or count < 0:
        raise CheckpointCorruptError(f"the TRL part's {_KEY_LOG} {count!r:.40} is not an int >= 0")
    return count


def checkpoint_folders(output_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-N`` folder, by step: ``N``
    as the Trainer writes it (ASCII digits, no leading zero); symlinks and
    other names are not checkpoint folders. An ``output_dir`` that is
    absent or not a directory holds none; one that cannot be listed raises
    ``CheckpointFileError`` naming it."""
    root = Path(output_dir)
    found = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                match = _CHECKPOINT_DIR.fullmatch(entry.name)
                if match is not None and entry.is_dir(follow_symlinks=False):
                    found.append((int(match.group(1)), Path(entry.path)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        # Not "no checkpoint": an unreadable output_dir must not start afresh.
        raise CheckpointFileError(root, f"cannot be listed: {exc.strerror}") from None
    return sorted(found)


def paired_folder(output_dir: str | os.PathLike[str], step: int) -> Path:
    """The Trainer folder the coverage checkpoint of ``step`` (> 0) pairs
    with, checked (see the module doc): ``CheckpointFileError`` for a torn
    pair (no such folder, or no regular ``trainer_state.json`` in it, or one
    that is not JSON), ``CheckpointMismatchError`` for a folder of another
    step."""
    folder = Path(output_dir) / f"checkpoint-{step}"
    if not folder.is_dir() or folder.is_symlink():
        raise CheckpointFileError(
            folder,
            f"missing: the run's coverage checkpoint is at step {step} and pairs with this "
            "Trainer folder (restore output_dir with it, or resume an older coverage "
            "checkpoint whose folder you have)",
        )
    path = folder / TRAINER_STATE
    try:
        raw = read_file(path, dir_fd=None, shown=path, limit=MAX_TRAINER_STATE_BYTES)
    except FileNotFoundError:
        raise CheckpointFileError(
            path, "missing: the Trainer's checkpoint is torn, and the run's is not"
        ) from None
    try:
        state = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, ValueError):
        raise CheckpointFileError(path, "not JSON text") from None
    saved = state.get("global_step") if isinstance(state, Mapping) else None
    if saved != step or type(saved) is not int:
        raise CheckpointMismatchError(
            f"{path}: global_step {saved!r:.40}, but the run's coverage checkpoint pairs it "
            f"with step {step}"
        )
    return folder


def remove_dead_branches(output_dir: str | os.PathLike[str], resumed_step: int) -> list[Path]:
    """Remove the checkpoint folders of steps above ``resumed_step``: after
    a resume from that step they belong to a dead branch (torn saves, or
    saves whose coverage checkpoint was never published), and the resumed
    run writes its own."""
    removed = []
    for step, folder in checkpoint_folders(output_dir):
        if step > resumed_step:
            shutil.rmtree(folder)
            removed.append(folder)
    return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str | os.PathLike[str]) -> None:
    """``fsync`` every regular file under ``folder`` and the folders: the
    Trainer writes its checkpoint without syncing, and the coverage
    checkpoint must not become durable before what it vouches for."""
    root = Path(folder)
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))
