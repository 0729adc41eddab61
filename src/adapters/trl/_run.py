"""The ledger side of a TRL run: stamping blocks, marking them trained, and
the state file inside the Trainer's checkpoint folder.

Rules of the house: every coverage decision is the ledger's. ``FrontierRun``
stamps what the sampler yields, one block at a time (``next_block``),
checks every micro-step's batch against the blocks it handed out
(``consume``: the ordinals travel with the rows, in ``ORDINAL_COLUMN``),
and marks a block trained at the optimizer step that ends its last copy
(``step_end``). A checkpoint is only exact between blocks: TRL regenerates
a block after a restart, so the trainer defers a save that falls inside
one (``mid_block``).

The state file (``frontier_state.json``) is written last, after every file
of the Trainer's checkpoint, through a temporary file, ``fsync`` and
``rename``: a checkpoint folder without it is torn (the process died while
the Trainer was saving) and is never resumed from. It is read as what it
claims to be or not at all: a regular file (no symlink, FIFO, device or
directory) of at most ``MAX_STATE_BYTES``, checked before a byte is read, so
a reader never blocks or reads without bound; every field is type-checked,
the ledger record included, and every error is a ``CheckpointError``
subclass naming the file (``CheckpointFileError``,
``CheckpointFileVersionError``).

The training log is a lineage: every life appends a ``resume`` marker
saying how many of the records before it survive, the saved count on a
resume and 0 on a fresh start, so whatever an earlier life wrote without
reaching a checkpoint is a dead branch the audit leaves out.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import re
import secrets
import shutil
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from frontier_core import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointVersionError,
    FailurePolicy,
    Ledger,
    LedgerConfig,
    TrainLogWriter,
)

from .._errors import CheckpointFileError, CheckpointFileVersionError, StreamMisalignedError
from .._state import check_state
from ..checkpoints._fs import read_file
from ..store._posix import write_synced
from ._stream import Layout, StreamOrder

#: The column every training row carries: its stream ordinal.
ORDINAL_COLUMN: Final = "frontier_ordinal"
STATE_FILE: Final = "frontier_state.json"
FORMAT: Final = "frontier_adapters.trl"
VERSION: Final = 1
_KEYS: Final = frozenset(
    {"format", "version", "global_step", "log_records", "ledger", "stream", "checksum"}
)
_STREAM_KEYS: Final = frozenset({"dataset_len", "seed", "shuffle", "epochs"})
# The names the Trainer writes (``checkpoint-{global_step}``): ASCII digits
# without leading zeros, matched whole (``$`` would let a trailing newline
# in, ``\d`` any Unicode digit), so one step has one folder name.
_CHECKPOINT_DIR: Final = re.compile(r"checkpoint-(0|[1-9][0-9]*)", re.ASCII)
#: The largest state file read (and written): the ledger record of a TRL
#: run holds the cut and the few blocks in flight, kilobytes in practice.
MAX_STATE_BYTES: Final = 64 * 2**20


def _checksum(body: Mapping[str, Any]) -> str:
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()


class FrontierRun:
    """The mutable façade over the ledger for one TRL run (one process).

    ``start()`` or ``resume(state)`` begins a life; the sampler calls
    ``next_block``, the trainer ``consume`` for every micro-step's rows and
    ``step_end`` after every optimizer step, the callback ``state_dict`` in
    ``on_save``."""

    def __init__(
        self,
        order: StreamOrder,
        *,
        epochs: int,
        layout: Layout,
        fingerprint: str,
        log_path: str | os.PathLike[str] | None,
    ) -> None:
        if type(epochs) is not int or epochs < 1:
            raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
        self.order = order
        self.epochs = epochs
        self.layout = layout
        self.stream_len = epochs * order.dataset_len
        self.config = LedgerConfig(
            stream_len=self.stream_len, fingerprint=fingerprint, on_failure=FailurePolicy.DROP
        )
        self.log_path = None if log_path is None else Path(log_path)
        self.log: TrainLogWriter | None = None
        self.ledger = Ledger.start(self.config)
        #: Ordinals this life will yield (set by ``start``/``resume``).
        self.remaining = self.stream_len
        self._handed: deque[tuple[int, ...]] = deque()  # yielded, not yet consumed
        self._current: tuple[int, ...] | None = None
        self._copies = 0
        self._completed: list[int] = []
        self._dropped_unlogged: list[int] = []
        self.started = False

    # -- lives ------------------------------------------------------------

    def start(self) -> None:
        """A fresh run: the ledger at 0, and a log lineage of 0 records. The
        log gets a ``resume`` marker keeping nothing before it: the records
        of an earlier life that died before its first checkpoint (or of a
        run whose checkpoints were removed) are a dead branch, and a later
        resume's marker counts this life's records only."""
        self._begin(Ledger.start(self.config), self.stream_len, resume_records=0)

    def resume(self, state: Mapping[str, Any]) -> int:
        """Resume from a state file's content (validated by ``read_state``);
        returns the global step it was saved at."""
        stream = state["stream"]
        mine = self.stream_json()
        for key in ("dataset_len", "seed", "shuffle"):
            if stream[key] != mine[key]:
                raise CheckpointMismatchError(
                    f"the checkpoint's stream has {key}={stream[key]!r} but this run has "
                    f"{key}={mine[key]!r}: resuming would put the cut on the wrong prompts"
                )
        if stream["epochs"] > self.epochs:
            raise CheckpointMismatchError(
                f"the checkpoint's stream has {stream['epochs']} epochs, this run "
                f"{self.epochs}: a resume may lengthen the stream, never shorten it"
            )
        record = Checkpoint.from_state_dict(state["ledger"], fingerprint=self.config.fingerprint)
        resumed = Ledger.resume(self.config, record, load_replay_buffer=False)
        remaining = self.stream_len - resumed.rewind_to - len(resumed.covered)
        self._begin(resumed.ledger, remaining, resume_records=state["log_records"])
        return int(state["global_step"])

    def _begin(self, ledger: Ledger, remaining: int, *, resume_records: int | None) -> None:
        self.ledger = ledger
        self.remaining = remaining
        self._handed.clear()
        self._current, self._copies = None, 0
        self._completed, self._dropped_unlogged = [], []
        if self.log is not None:
            self.log.close()
        if self.log_path is not None:
            self.log = TrainLogWriter(self.log_path, resume_records=resume_records)
        self.started = True

    def planned_updates(self) -> int:
        """Optimizer steps this life will take to drain the stream."""
        return self.layout.updates(self.remaining // self.layout.prompts)

    def planned_rows(self) -> int:
        """Dataloader rows this life's sampler yields (its length)."""
        blocks = self.remaining // self.layout.prompts
        return blocks * self.layout.repeat * self.layout.rows_per_copy

    # -- the sampler's side -----------------------------------------------

    def next_block(self) -> tuple[int, ...] | None:
        """Stamp the next block of ``layout.prompts`` kept ordinals and
        hand it out, or ``None`` at the end of the stream, where a partial
        block (``RepeatSampler`` drops it too) is dropped on record."""
        block: list[int] = []
        need = self.layout.prompts
        while len(block) < need:
            applied = self.ledger.stamp(need - len(block))
            self.ledger = applied.ledger
            block.extend(applied.effect.kept)
            if not applied.effect.stamped:
                break
        if len(block) < need:
            if block:
                self.ledger = self.ledger.dispatch(block).ledger
                applied = self.ledger.fail(block)
                self.ledger = applied.ledger
                self._dropped_unlogged.extend(applied.effect.dropped)
                self._flush_drops()
            return None
        self.ledger = self.ledger.dispatch(block).ledger
        out = tuple(block)
        self._handed.append(out)
        return out

    def _flush_drops(self) -> None:
        if self.log is not None and self._dropped_unlogged:
            self.log.dropped(self._dropped_unlogged)
        self._dropped_unlogged = []

    # -- the trainer's side -----------------------------------------------

    def consume(self, ordinals: Sequence[int]) -> None:
        """One micro-step's rows (their ``ORDINAL_COLUMN``, in order): one
        copy of a block, each ordinal ``num_generations`` times. Raises
        ``StreamMisalignedError`` for rows that are not the next copy of
        the blocks handed out (training on would skip or duplicate)."""
        g = self.layout.num_generations
        block = tuple(ordinals[::g])
        if len(ordinals) != len(block) * g or any(
            ordinals[i] != block[i // g] for i in range(len(ordinals))
        ):
            raise StreamMisalignedError(
                f"a micro-step's rows are not grouped by {g} generations: {list(ordinals)[:24]}"
            )
        if self._current is not None and self._copies < self.layout.repeat:
            if block != self._current:
                raise StreamMisalignedError(
                    f"block {self._current[:8]}... has {self._copies} of {self.layout.repeat} "
                    f"copies but the next micro-step holds {block[:8]}..."
                )
            self._copies += 1
        else:
            if not self._handed or self._handed[0] != block:
                expected = self._handed[0][:8] if self._handed else "nothing"
                raise StreamMisalignedError(
                    f"the micro-step holds block {block[:8]}..., the sampler handed out "
                    f"{expected} next"
                )
            self._handed.popleft()
            # Generation happens in this micro-step: the group lands now.
            self.ledger = self.ledger.buffer(block).ledger
            self._current, self._copies = block, 1
        if self._copies == self.layout.repeat:
            self._completed.extend(self._current)

    @property
    def mid_block(self) -> bool:
        """Whether a block has been consumed in part: a checkpoint now
        could not be exact (TRL regenerates the block on resume)."""
        return self._current is not None and 0 < self._copies < self.layout.repeat

    def step_end(self, step: int) -> tuple[int, ...]:
        """Optimizer step ``step`` (0-based) finished: the blocks whose
        last copy it consumed are trained. Logs one record per step (empty
        when the step ended no block). Returns the ordinals trained."""
        done = tuple(self._completed)
        self._completed = []
        if done:
            self.ledger = self.ledger.train(done).ledger
        if self.log is not None:
            self.log.step(step, done)
        return done

    @property
    def drained(self) -> bool:
        return self.ledger.drained

    # -- checkpoints ------------------------------------------------------

    def stream_json(self) -> dict[str, Any]:
        return {
            "dataset_len": self.order.dataset_len,
            "seed": self.order.seed,
            "shuffle": self.order.shuffle,
            "epochs": self.epochs,
        }

    def state_dict(self, global_step: int) -> dict[str, Any]:
        """The state file's content: JSON types only, checksummed."""
        if self.mid_block:
            raise CheckpointError(
                "a checkpoint inside a generation block cannot be exact; the trainer defers it"
            )
        if self.log is not None:
            self.log.sync()
        body: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "global_step": global_step,
            "log_records": 0 if self.log is None else self.log.records,
            "ledger": self.ledger.checkpoint(save_buffer=False).state_dict(),
            "stream": self.stream_json(),
        }
        return {**body, "checksum": _checksum(body)}

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


# -- the state file ---------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str | os.PathLike[str]) -> None:
    """``fsync`` every regular file under ``folder`` and the folders: the
    Trainer writes its checkpoint without syncing, and the state file must
    not become durable before what it vouches for."""
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


def write_state(folder: str | os.PathLike[str], state: Mapping[str, Any]) -> Path:
    """Write ``state`` as ``folder/STATE_FILE`` atomically (a fresh
    temporary file, ``fsync``, ``rename``, ``fsync`` of the folder). Raises
    ``CheckpointError``, writing nothing, for a state larger than
    ``MAX_STATE_BYTES``: ``read_state`` would refuse it on every resume."""
    root = Path(folder)
    data = (json.dumps(state, sort_keys=True, separators=(",", ":")) + "\n").encode()
    if len(data) > MAX_STATE_BYTES:
        raise CheckpointError(
            f"{root / STATE_FILE}: a state of {len(data)} bytes, more than the "
            f"{MAX_STATE_BYTES} a state file may hold"
        )
    tmp = root / f".{STATE_FILE}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_synced(fd, data)
    finally:
        os.close(fd)
    final = root / STATE_FILE
    os.replace(tmp, final)
    _fsync_dir(root)
    return final


def _read_state_bytes(path: Path) -> bytes:
    """The bytes of the state file ``path``: a regular file of at most
    ``MAX_STATE_BYTES``, checked with ``fstat`` before a byte is read (a
    FIFO, a device such as ``/dev/zero`` or a directory is refused, never
    read), and never more than one byte past its size read even if it
    grows meanwhile (the checkpoint readers' ``read_file``). Raises
    ``CheckpointFileError`` naming ``path``."""
    try:
        return read_file(path, dir_fd=None, shown=path, limit=MAX_STATE_BYTES)
    except FileNotFoundError:
        raise CheckpointFileError(
            path,
            "missing: the checkpoint was not written by frontier_adapters.trl, "
            "or the process died while the Trainer was saving it",
        ) from None


def _is_count(value: object, least: int = 0) -> bool:
    return type(value) is int and value >= least


def read_state(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate ``folder/STATE_FILE`` (see the module's docstring
    for what is accepted). Raises ``CheckpointFileError`` (a
    ``CheckpointCorruptError``: missing, not a regular file, too large,
    unreadable, truncated, malformed, checksum, a field of the wrong type,
    a damaged ledger record, step against the folder's name) or
    ``CheckpointFileVersionError`` (another format or version); ``.path``
    names the file."""
    path = Path(folder) / STATE_FILE
    raw = _read_state_bytes(path)
    try:
        state = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CheckpointFileError(path, "not UTF-8 text") from None
    except RecursionError:
        raise CheckpointFileError(path, "not JSON (nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, and ints past the digit limit
        raise CheckpointFileError(path, f"not JSON ({str(exc)[:200]})") from None
    try:
        check_state(state, what="the frontier state", fmt=FORMAT, version=VERSION, keys=_KEYS)
    except CheckpointVersionError as exc:
        raise CheckpointFileVersionError(path, str(exc)) from None
    except CheckpointCorruptError as exc:
        raise CheckpointFileError(path, str(exc)) from None
    body = {k: v for k, v in state.items() if k != "checksum"}
    if state["checksum"] != _checksum(body):
        raise CheckpointFileError(path, "checksum mismatch")
    for key in ("global_step", "log_records"):
        if not _is_count(state[key]):
            raise CheckpointFileError(path, f"{key} {state[key]!r:.40} is not an int >= 0")
    stream = state["stream"]
    if not isinstance(stream, dict) or set(stream) != _STREAM_KEYS:
        raise CheckpointFileError(path, f"malformed stream {stream!r:.80}")
    # The checksum is no signature: a foreign file can carry a right one,
    # so each value is checked for what ``resume`` compares it with.
    if not (
        _is_count(stream["dataset_len"], 1)
        and _is_count(stream["seed"])
        and type(stream["shuffle"]) is bool
        and _is_count(stream["epochs"], 1)
    ):
        raise CheckpointFileError(path, f"malformed stream {stream!r:.120}")
    try:
        Checkpoint.from_state_dict(state["ledger"])
    except CheckpointVersionError as exc:
        raise CheckpointFileVersionError(path, f"the ledger record: {exc}"[:300]) from None
    except CheckpointCorruptError as exc:
        raise CheckpointFileError(path, f"the ledger record: {exc}"[:300]) from None
    match = _CHECKPOINT_DIR.fullmatch(Path(folder).resolve().name)
    if match is not None and int(match.group(1)) != state["global_step"]:
        raise CheckpointFileError(
            path, f"saved at step {state['global_step']} but the folder is {Path(folder).name}"
        )
    checked: dict[str, Any] = state  # a dict: check_state passed and JSON objects are dicts
    return checked


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


def latest_checkpoint(output_dir: str | os.PathLike[str]) -> Path | None:
    """The newest checkpoint folder of ``output_dir`` that holds a state
    file (written last, so the Trainer's files in it are complete), or
    ``None`` when there is none. Folders without a state file are torn
    saves (the process died while the Trainer wrote them) and are passed
    over: their weights are never loaded, so starting afresh when every
    folder is torn is consistent (``torn_checkpoints`` lists them). Raises
    ``CheckpointFileError`` or ``CheckpointFileVersionError`` when the
    newest state file is damaged, or is anything but a regular file (a
    symlink, dangling or not, a directory): it was written atomically, so
    that is real damage, not a torn save, and it is never papered over."""
    for _step, folder in reversed(checkpoint_folders(output_dir)):
        # lexists: a dangling symlink in the state file's place is damage
        # to report, not the absence of a state file.
        if os.path.lexists(folder / STATE_FILE):
            read_state(folder)
            return folder
    return None


def torn_checkpoints(output_dir: str | os.PathLike[str]) -> list[Path]:
    """Checkpoint folders newer than ``latest_checkpoint`` (all of them when
    there is none): torn saves, or a dead branch."""
    latest = latest_checkpoint(output_dir)
    floor = -1
    if latest is not None and (match := _CHECKPOINT_DIR.fullmatch(latest.name)) is not None:
        floor = int(match.group(1))
    return [folder for step, folder in checkpoint_folders(output_dir) if step > floor]


def remove_dead_branches(output_dir: str | os.PathLike[str], resumed_step: int) -> list[Path]:
    """Remove the checkpoint folders of steps above ``resumed_step``: after
    a resume from that step they belong to a dead branch (torn saves, or
    saves after the chosen checkpoint), and the resumed run writes its
    own."""
    removed = []
    for step, folder in checkpoint_folders(output_dir):
        if step > resumed_step:
            shutil.rmtree(folder)
            removed.append(folder)
    return removed


def ordinals_of(rows: Iterable[Mapping[str, Any]]) -> list[int]:
    """``ORDINAL_COLUMN`` of each row; raises ``StreamMisalignedError`` for
    a row without it (the dataset was not wrapped by the trainer) or with
    something else than an integer in it (a float or a string is not
    rounded or parsed into an ordinal)."""
    out = []
    for row in rows:
        try:
            value = row[ORDINAL_COLUMN]
            if isinstance(value, bool):
                raise TypeError("a bool is not an ordinal")
            out.append(operator.index(value))
        except (KeyError, TypeError, IndexError):
            raise StreamMisalignedError(
                f"a training row has no integer {ORDINAL_COLUMN!r}: the batch did not come "
                "from FrontierGRPOTrainer's dataloader"
            ) from None
    return out
