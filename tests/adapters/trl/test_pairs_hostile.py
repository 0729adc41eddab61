"""The TRL binding's inputs under hostile or damaged content: the Trainer's
``trainer_state.json`` in the folder a coverage checkpoint pairs with, the
checkpoint folders of ``output_dir`` and the rows' ordinals. Whatever is in
their place, the binding raises its typed error naming the file, in bounded
time and memory, or pairs exactly what was written: never a bare
``OSError``/``TypeError``, never a read without end, never a damaged folder
taken for a sound one. (The coverage checkpoints themselves are the run's,
read by ``frontier_adapters.checkpoints``, whose own hostile tests cover
them.)"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._need import need_trl

need_trl()

from frontier_adapters.trl import (  # noqa: E402
    ORDINAL_COLUMN,
    CheckpointFileError,
    StreamMisalignedError,
    checkpoint_folders,
    paired_folder,
)
from frontier_adapters.trl import _blocks as blocks_module  # noqa: E402
from frontier_adapters.trl import _checkpoints as checkpoints_module  # noqa: E402

from frontier_core import CheckpointError, CheckpointMismatchError  # noqa: E402

#: The child's own deadline (SIGALRM ends it) and the parent's, which also
#: covers the child's imports of torch and TRL on a busy machine.
CHILD_SECONDS = 60
PARENT_SECONDS = 240
STATE = "trainer_state.json"


def saved(folder: Path, step: int = 4) -> Path:
    """A sound Trainer folder of ``step`` (created); returns its state file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STATE
    path.write_text(json.dumps({"global_step": step, "log_history": []}))
    return path


def refused(out: Path, match: str, error: type[Exception] = CheckpointFileError) -> None:
    with pytest.raises(error, match=match) as info:
        paired_folder(out, 4)
    if error is CheckpointFileError:
        assert getattr(info.value, "path", None) == str(out / "checkpoint-4" / STATE)


def test_a_sound_folder_pairs(tmp_path: Path) -> None:
    saved(tmp_path / "checkpoint-4")
    assert paired_folder(tmp_path, 4) == tmp_path / "checkpoint-4"


# -- not a regular file -------------------------------------------------------------


def test_a_directory_in_the_state_files_place_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-4" / STATE).mkdir(parents=True)
    refused(tmp_path, "not a regular file")


@pytest.mark.parametrize("writer", [False, True])
def test_a_fifo_in_the_state_files_place_is_refused_without_waiting(
    tmp_path: Path, writer: bool
) -> None:
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    fifo = folder / STATE
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK) if writer else -1
    try:
        refused(tmp_path, "not a regular file")
    finally:
        if fd >= 0:
            os.close(fd)


def test_a_symlink_in_the_state_files_place_or_the_folders_is_refused(tmp_path: Path) -> None:
    good = saved(tmp_path / "elsewhere")
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    link = folder / STATE
    link.symlink_to(good)
    refused(tmp_path, "symlink")
    link.unlink()
    link.symlink_to(tmp_path / "absent")
    refused(tmp_path, "symlink")  # dangling: damage, not a missing file
    shutil.rmtree(folder)
    folder.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CheckpointFileError, match="missing") as info:
        paired_folder(tmp_path, 4)  # a symlinked folder is no Trainer folder
    assert info.value.path == str(folder)


def test_a_state_file_larger_than_the_bound_is_refused_before_reading(tmp_path: Path) -> None:
    path = saved(tmp_path / "checkpoint-4")
    with open(path, "r+b") as f:
        f.truncate(checkpoints_module.MAX_TRAINER_STATE_BYTES + 1)  # sparse: costs no disk
    refused(tmp_path, "more than")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can traverse (pytest's are private to us)."""
    path = Path(tempfile.mkdtemp(prefix="frontier-trl-pairs-"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path)


_CHILD = r"""
import json, signal, sys
signal.alarm(int(sys.argv[2]))  # the child's own deadline
from frontier_adapters import trl
from frontier_core import CheckpointError
out = {}
for name, arg in json.loads(sys.argv[1]):
    try:
        if name == "paired_folder":
            trl.paired_folder(arg, 4)
        else:
            getattr(trl, name)(arg)
        out[arg] = {"accepted": True}
    except Exception as exc:
        out[arg] = {
            "type": type(exc).__name__,
            "typed": isinstance(exc, CheckpointError),
            "path": getattr(exc, "path", None),
            "message": str(exc)[:300],
        }
print(json.dumps(out))
"""


def test_a_device_or_what_cannot_be_read_is_a_typed_error_in_bounded_time(
    shared_dir: Path,
) -> None:
    """``/dev/zero`` (a character device node in the state file's place),
    a state file and an ``output_dir`` this process may not read: typed
    errors naming them (an unlistable ``output_dir`` is not "no
    checkpoint"). Run in a child with a deadline: a reader without a bound
    would read the device for ever."""
    # (function, argument, the path the error names, what it says)
    cases: list[tuple[str, Path, Path, str]] = []
    zero = shared_dir / "zero"
    (zero / "checkpoint-4").mkdir(mode=0o755, parents=True)
    zero.chmod(0o755)
    try:
        os.mknod(zero / "checkpoint-4" / STATE, stat.S_IFCHR | 0o666, os.makedev(1, 5))
        cases.append(("paired_folder", zero, zero / "checkpoint-4" / STATE, "not a regular file"))
    except PermissionError:
        pass  # no mknod here: the unreadable cases still run
    # As root a file is readable whatever its mode: the child reads as
    # nobody, through setpriv (it drops the capabilities only at exec, so
    # the interpreter under /root still starts).
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is not None:
        locked = shared_dir / "locked"
        path = saved(locked / "checkpoint-4")
        locked.chmod(0o755)
        (locked / "checkpoint-4").chmod(0o755)
        path.chmod(0o600 if os.geteuid() == 0 else 0o000)
        cases.append(("paired_folder", locked, path, "cannot be opened"))
        out = shared_dir / "out"
        saved(out / "checkpoint-2", step=2)
        out.chmod(0o300)  # traversable, not listable
        cases.append(("checkpoint_folders", out, out, "cannot be listed"))
    if not cases:
        pytest.skip("neither mknod nor another user is available here")
    prefix = []
    if os.geteuid() == 0 and setpriv is not None:
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    calls = [[name, str(arg)] for name, arg, _, _ in cases]
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", _CHILD, json.dumps(calls), str(CHILD_SECONDS)],
            capture_output=True,
            text=True,
            timeout=PARENT_SECONDS,
            cwd=shared_dir,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the reads did not return within {PARENT_SECONDS} s")
    finally:
        if (shared_dir / "out").exists():
            (shared_dir / "out").chmod(0o755)  # for the fixture to remove it
    assert done.returncode == 0, (
        f"the child ended with {done.returncode} (-14: its {CHILD_SECONDS} s deadline "
        f"passed inside a read): {done.stderr[-800:]}"
    )
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name, arg, named, match in cases:
        got = results[str(arg)]
        assert got.get("typed") and got["type"] == "CheckpointFileError", (name, arg, got)
        assert got["path"] == str(named) and match in got["message"], (name, got)


# -- malformed or mismatched content --------------------------------------------------


@pytest.mark.parametrize(
    ("content", "match", "error"),
    [
        (b"", "not JSON", CheckpointFileError),
        (b"\xff\xfe{}", "not JSON", CheckpointFileError),
        (b"[" * 100_000, "not JSON", CheckpointFileError),
        (b"9" * 5000, "not JSON", CheckpointFileError),
        (b"[1, 2]", "global_step None", CheckpointMismatchError),
        (b'{"global_step": "4"}', "global_step '4'", CheckpointMismatchError),
        (b'{"global_step": 4.0}', "global_step 4.0", CheckpointMismatchError),
        (b'{"global_step": true}', "global_step True", CheckpointMismatchError),
        (b'{"global_step": 6}', "global_step 6", CheckpointMismatchError),
        (b'{"global_step": "' + b"x" * 100_000 + b'"}', "global_step", CheckpointMismatchError),
    ],
)
def test_malformed_or_mismatched_state_files_are_typed_errors_with_bounded_messages(
    tmp_path: Path, content: bytes, match: str, error: type[CheckpointError]
) -> None:
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    (folder / STATE).write_bytes(content)
    with pytest.raises(error, match=match) as info:
        paired_folder(tmp_path, 4)
    assert len(str(info.value)) < 1000


# -- the checkpoint folders ---------------------------------------------------------


@pytest.mark.parametrize("name", ["checkpoint-04", "checkpoint-4\n", "checkpoint-\u0664"])
def test_only_the_trainers_folder_names_are_checkpoint_folders(tmp_path: Path, name: str) -> None:
    """The Trainer writes ``checkpoint-{global_step}``: a leading zero, a
    trailing newline or a non-ASCII digit is another folder, not a second
    name for step 4."""
    saved(tmp_path / "checkpoint-2", step=2)
    saved(tmp_path / name, step=4)
    assert checkpoint_folders(tmp_path) == [(2, tmp_path / "checkpoint-2")]
    with pytest.raises(CheckpointFileError, match="missing"):
        paired_folder(tmp_path, 4)


# -- the rows' ordinals ---------------------------------------------------------------


@pytest.mark.parametrize("value", [3.7, "3", None, True, [3], b"3"])
def test_a_row_whose_ordinal_is_not_an_int_is_misaligned(value: object) -> None:
    with pytest.raises(StreamMisalignedError, match=ORDINAL_COLUMN):
        blocks_module.ordinals_of([{ORDINAL_COLUMN: 1}, {ORDINAL_COLUMN: value}])


def test_rows_that_are_not_mappings_are_misaligned() -> None:
    for rows in (["a row"], [3], [None]):
        with pytest.raises(StreamMisalignedError):
            blocks_module.ordinals_of(rows)  # type: ignore[arg-type]
