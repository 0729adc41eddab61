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
the Trainer was saving) and is never resumed from.
"""

from __future__ import annotations

import hashlib
import json
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

from .._errors import StreamMisalignedError
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
_CHECKPOINT_DIR: Final = re.compile(r"^checkpoint-(\d+)$")
_MAX_STATE_BYTES: Final = 64 * 2**20


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
        """A fresh run: the ledger at 0, a fresh log."""
        self._begin(Ledger.start(self.config), self.stream_len, resume_records=None)

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
    temporary file, ``fsync``, ``rename``, ``fsync`` of the folder)."""
    root = Path(folder)
    data = (json.dumps(state, sort_keys=True, separators=(",", ":")) + "\n").encode()
    tmp = root / f".{STATE_FILE}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    final = root / STATE_FILE
    os.replace(tmp, final)
    _fsync_dir(root)
    return final


def read_state(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate ``folder/STATE_FILE``. Raises
    ``CheckpointCorruptError`` (missing, truncated, malformed, checksum,
    step against the folder's name) or ``CheckpointVersionError``."""
    path = Path(folder) / STATE_FILE
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CheckpointCorruptError(
            f"{path}: missing: the checkpoint was not written by frontier_adapters.trl, "
            "or the process died while the Trainer was saving it"
        ) from None
    except OSError as exc:
        raise CheckpointCorruptError(f"{path}: cannot open: {exc}") from None
    try:
        size = os.fstat(fd).st_size
        if size > _MAX_STATE_BYTES:
            raise CheckpointCorruptError(f"{path}: {size} bytes, more than a state file holds")
        raw = b""
        while chunk := os.read(fd, 1 << 20):
            raw += chunk
    finally:
        os.close(fd)
    try:
        state = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CheckpointCorruptError(f"{path}: not JSON ({exc})") from None
    if not isinstance(state, dict):
        raise CheckpointCorruptError(f"{path}: not a JSON object")
    if state.get("format") != FORMAT or state.get("version") != VERSION:
        raise CheckpointVersionError(
            f"{path}: format {state.get('format')!r} version {state.get('version')!r}, "
            f"expected {FORMAT!r} version {VERSION}"
        )
    if set(state) != _KEYS:
        raise CheckpointCorruptError(
            f"{path}: missing keys {sorted(_KEYS - set(state))}, "
            f"unknown keys {sorted(set(state) - _KEYS)}"
        )
    body = {k: v for k, v in state.items() if k != "checksum"}
    if state["checksum"] != _checksum(body):
        raise CheckpointCorruptError(f"{path}: checksum mismatch")
    for key in ("global_step", "log_records"):
        if type(state[key]) is not int or state[key] < 0:
            raise CheckpointCorruptError(f"{path}: {key} {state[key]!r:.40} is not an int >= 0")
    stream = state["stream"]
    if not isinstance(stream, dict) or set(stream) != _STREAM_KEYS:
        raise CheckpointCorruptError(f"{path}: malformed stream {stream!r:.80}")
    match = _CHECKPOINT_DIR.match(Path(folder).resolve().name)
    if match is not None and int(match.group(1)) != state["global_step"]:
        raise CheckpointCorruptError(
            f"{path}: saved at step {state['global_step']} but the folder is {Path(folder).name}"
        )
    return state


def checkpoint_folders(output_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-N`` folder, by step."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        match = _CHECKPOINT_DIR.match(entry.name)
        if match is not None and entry.is_dir() and not entry.is_symlink():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def latest_checkpoint(output_dir: str | os.PathLike[str]) -> Path | None:
    """The newest checkpoint folder of ``output_dir`` that holds a state
    file (written last, so the Trainer's files in it are complete), or
    ``None`` when there is none. Folders without a state file are torn
    saves (the process died while the Trainer wrote them) and are passed
    over: their weights are never loaded, so starting afresh when every
    folder is torn is consistent (``torn_checkpoints`` lists them). Raises
    ``CheckpointCorruptError`` or ``CheckpointVersionError`` when the newest
    state file is damaged: it was written atomically, so that is real
    damage, not a torn save, and it is never papered over."""
    for _step, folder in reversed(checkpoint_folders(output_dir)):
        if (folder / STATE_FILE).exists():
            read_state(folder)
            return folder
    return None


def torn_checkpoints(output_dir: str | os.PathLike[str]) -> list[Path]:
    """Checkpoint folders newer than ``latest_checkpoint`` (all of them when
    there is none): torn saves, or a dead branch."""
    latest = latest_checkpoint(output_dir)
    floor = -1 if latest is None else int(latest.name.rpartition("-")[2])
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
    a row without it (the dataset was not wrapped by the trainer)."""
    out = []
    for row in rows:
        try:
            out.append(int(row[ORDINAL_COLUMN]))
        except (KeyError, TypeError):
            raise StreamMisalignedError(
                f"a training row has no {ORDINAL_COLUMN!r}: the batch did not come from "
                "FrontierGRPOTrainer's dataloader"
            ) from None
    return out
