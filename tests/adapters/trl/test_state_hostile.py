"""The TRL binding's inputs under hostile or damaged content: the state
file in ``checkpoint-N``, the checkpoint folders of ``output_dir`` and the
rows' ordinals. Whatever is in their place, the binding raises its typed
error naming the file, in bounded time and memory, or reads exactly what
was written: never a bare ``OSError``/``TypeError``, never a read without
end, never a damaged or foreign state taken for a sound one or for a torn
save."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._need import need_trl

need_trl()

from frontier_adapters.trl import (  # noqa: E402
    ORDINAL_COLUMN,
    STATE_FILE,
    CheckpointFileError,
    FrontierRun,
    Layout,
    StreamMisalignedError,
    StreamOrder,
    checkpoint_folders,
    latest_checkpoint,
    read_state,
    torn_checkpoints,
    write_state,
)
from frontier_adapters.trl import _run as run_module  # noqa: E402

from frontier_core import CheckpointError, CheckpointVersionError  # noqa: E402

#: The child's own deadline (SIGALRM ends it) and the parent's, which also
#: covers the child's imports of torch and TRL on a busy machine.
CHILD_SECONDS = 60
PARENT_SECONDS = 240


def make_run(epochs: int = 2) -> FrontierRun:
    return FrontierRun(
        StreamOrder(8, seed=3, shuffle=True),
        epochs=epochs,
        layout=Layout(prompts=2, num_generations=2, repeat=1, grad_accum=1),
        fingerprint="fp",
        log_path=None,
    )


def saved(folder: Path, step: int = 4) -> dict[str, Any]:
    """A sound state file in ``folder`` (created); returns its content."""
    folder.mkdir(parents=True, exist_ok=True)
    run = make_run()
    run.start()
    state = run.state_dict(step)
    write_state(folder, state)
    return state


def reseal(state: dict[str, Any]) -> dict[str, Any]:
    """What a forger writes: ``state`` with its checksum recomputed (the
    documented SHA-256 of the canonical JSON of every other key)."""
    body = {k: v for k, v in state.items() if k != "checksum"}
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return {**body, "checksum": hashlib.sha256(data).hexdigest()}


def refused(folder: Path, match: str, error: type[Exception] = CheckpointFileError) -> None:
    with pytest.raises(error, match=match) as info:
        read_state(folder)
    assert getattr(info.value, "path", None) == str(folder / STATE_FILE)


# -- not a regular file -------------------------------------------------------------


def test_a_directory_in_the_state_files_place_is_a_typed_error(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-4"
    (folder / STATE_FILE).mkdir(parents=True)
    refused(folder, "not a regular file")
    # Nor is it passed over as a torn save (a fresh start would delete it).
    with pytest.raises(CheckpointFileError):
        latest_checkpoint(tmp_path)
    with pytest.raises(CheckpointFileError):
        torn_checkpoints(tmp_path)


@pytest.mark.parametrize("writer", [False, True])
def test_a_fifo_in_the_state_files_place_is_refused_without_waiting(
    tmp_path: Path, writer: bool
) -> None:
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    fifo = folder / STATE_FILE
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK) if writer else -1
    try:
        refused(folder, "not a regular file")
    finally:
        if fd >= 0:
            os.close(fd)


def test_a_symlink_in_the_state_files_place_is_refused_even_dangling(tmp_path: Path) -> None:
    good = tmp_path / "elsewhere"
    saved(good)
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    link = folder / STATE_FILE
    link.symlink_to(good / STATE_FILE)
    refused(folder, "symlink")
    link.unlink()
    link.symlink_to(tmp_path / "absent")
    refused(folder, "symlink")
    # A dangling link is damage to report, not the absence of a state file.
    with pytest.raises(CheckpointFileError, match="symlink"):
        latest_checkpoint(tmp_path)


def test_a_state_file_larger_than_the_bound_is_refused_before_reading(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-4"
    saved(folder)
    with open(folder / STATE_FILE, "r+b") as f:
        f.truncate(run_module.MAX_STATE_BYTES + 1)  # sparse: costs no disk
    refused(folder, "more than")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can traverse (pytest's are private to us)."""
    path = Path(tempfile.mkdtemp(prefix="frontier-trl-state-"))
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
    checkpoint": that would start afresh). Run in a child with a deadline: a
    reader without a bound would read the device for ever."""
    # (function, argument, the path the error names, what it says)
    cases: list[tuple[str, Path, Path, str]] = []
    zero = shared_dir / "checkpoint-2"
    zero.mkdir(mode=0o755)
    try:
        os.mknod(zero / STATE_FILE, stat.S_IFCHR | 0o666, os.makedev(1, 5))
        cases.append(("read_state", zero, zero / STATE_FILE, "not a regular file"))
    except PermissionError:
        pass  # no mknod here: the unreadable cases still run
    # As root a file is readable whatever its mode: the child reads as
    # nobody, through setpriv (it drops the capabilities only at exec, so
    # the interpreter under /root still starts).
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is not None:
        locked = shared_dir / "checkpoint-4"
        saved(locked)
        locked.chmod(0o755)
        (locked / STATE_FILE).chmod(0o600 if os.geteuid() == 0 else 0o000)
        cases.append(("read_state", locked, locked / STATE_FILE, "cannot be opened"))
        out = shared_dir / "out"
        saved(out / "checkpoint-2", step=2)
        out.chmod(0o300)  # traversable, not listable
        cases.append(("checkpoint_folders", out, out, "cannot be listed"))
        cases.append(("latest_checkpoint", out, out, "cannot be listed"))
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


# -- malformed or forged content ------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000, "nested too deeply"),
        (b"9" * 5000, "not JSON"),
        (b"[1, 2]", "must be a dict"),
        (b'{"format": "' + b"x" * 100_000 + b'"}', "format"),
    ],
)
def test_malformed_state_files_are_typed_errors_with_bounded_messages(
    tmp_path: Path, content: bytes, match: str
) -> None:
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    (folder / STATE_FILE).write_bytes(content)
    with pytest.raises(CheckpointError, match=match) as info:
        read_state(folder)
    assert getattr(info.value, "path", None) == str(folder / STATE_FILE)
    assert len(str(info.value)) < 1000


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"stream": {"dataset_len": 8, "seed": 3, "shuffle": True, "epochs": "2"}}, "stream"),
        ({"stream": {"dataset_len": 8, "seed": 3, "shuffle": 1, "epochs": 2}}, "stream"),
        ({"stream": {"dataset_len": 8.0, "seed": 3, "shuffle": True, "epochs": 2}}, "stream"),
        ({"stream": {"dataset_len": 8, "seed": -3, "shuffle": True, "epochs": 2}}, "stream"),
        ({"stream": {"dataset_len": 8, "seed": 3, "shuffle": True, "epochs": 0}}, "stream"),
        ({"global_step": True}, "global_step"),
        ({"log_records": -1}, "log_records"),
        ({"ledger": {}}, "ledger record"),
        ({"ledger": []}, "ledger record"),
        ({"extra": 1}, "keys"),
    ],
)
def test_a_resealed_foreign_state_is_refused_by_read_state(
    tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    """The checksum is no signature: what a forger (or another program)
    re-seals must still be a state this run can resume from, or be
    refused, typed, before ``resume`` compares a value."""
    folder = tmp_path / "checkpoint-4"
    state = saved(folder)
    (folder / STATE_FILE).write_text(json.dumps(reseal({**state, **change})))
    refused(folder, match, CheckpointError)


def test_a_resealed_ledger_record_of_another_version_is_a_version_error(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "checkpoint-4"
    state = saved(folder)
    ledger = {**state["ledger"], "version": 99}
    (folder / STATE_FILE).write_text(json.dumps(reseal({**state, "ledger": ledger})))
    refused(folder, "ledger record", CheckpointVersionError)
    with pytest.raises(CheckpointVersionError):
        latest_checkpoint(tmp_path)


# -- the checkpoint folders ---------------------------------------------------------


@pytest.mark.parametrize("name", ["checkpoint-04", "checkpoint-4\n", "checkpoint-\u0664"])
def test_only_the_trainers_folder_names_are_checkpoint_folders(tmp_path: Path, name: str) -> None:
    """The Trainer writes ``checkpoint-{global_step}``: a leading zero, a
    trailing newline or a non-ASCII digit is another folder, not a second
    name for step 4."""
    saved(tmp_path / "checkpoint-2", step=2)
    saved(tmp_path / name, step=4)
    assert checkpoint_folders(tmp_path) == [(2, tmp_path / "checkpoint-2")]
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert torn_checkpoints(tmp_path) == []


# -- writing ------------------------------------------------------------------------


def test_a_state_the_reader_would_refuse_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "checkpoint-4"
    before = saved(folder)
    run = make_run()
    run.start()
    state = run.state_dict(4)
    size = len(json.dumps(state, sort_keys=True, separators=(",", ":"))) + 1
    monkeypatch.setattr(run_module, "MAX_STATE_BYTES", size - 1)
    with pytest.raises(CheckpointError, match="more than"):
        write_state(folder, state)
    assert [p.name for p in folder.iterdir()] == [STATE_FILE]  # no temporary left
    monkeypatch.setattr(run_module, "MAX_STATE_BYTES", size)
    assert read_state(folder) == before  # the previous state intact, and readable


# -- the rows' ordinals ---------------------------------------------------------------


@pytest.mark.parametrize("value", [3.7, "3", None, True, [3], b"3"])
def test_a_row_whose_ordinal_is_not_an_int_is_misaligned(value: object) -> None:
    with pytest.raises(StreamMisalignedError, match=ORDINAL_COLUMN):
        run_module.ordinals_of([{ORDINAL_COLUMN: 1}, {ORDINAL_COLUMN: value}])


def test_rows_that_are_not_mappings_are_misaligned() -> None:
    for rows in (["a row"], [3], [None]):
        with pytest.raises(StreamMisalignedError):
            run_module.ordinals_of(rows)  # type: ignore[arg-type]
