"""``frontier replay``: run an event trace through the ledger, offline.

The trace is the contract between a real run and the model: a framework that
logs its ledger events can replay a production incident here and see where
the cut was, what a resume re-yielded and whether anything was lost. The
replayer also plays the crash: ``kill`` throws away everything after the last
checkpoint (ledger and training steps alike), exactly as a real process
death does, and ``resume`` restarts from that checkpoint through its JSON
record, so the codec is exercised on every replayed crash.

The coverage report at ``finish`` is computed from the replayer's own record
of the surviving lineage (which steps trained what, which drops happened),
not from the ledger's sets, so it checks the ledger rather than echoing it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import IO, Any, Final

import attrs

from ._audit import coverage_counts
from ._checkpoint import Checkpoint
from ._errors import FrontierError
from ._events import Buffer, Dispatch, Evict, Fail, FailurePolicy, Status, Train
from ._ledger import Ledger, LedgerConfig
from ._trainlog import Lineage

#: The most ordinals one ``stamp`` op may stamp.
MAX_STAMP: Final = 1_000_000


class TraceError(FrontierError, ValueError):
    """A trace line is malformed or names an illegal op."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


_MOVES: dict[str, type[Dispatch | Buffer | Fail | Evict | Train]] = {
    "dispatch": Dispatch,
    "buffer": Buffer,
    "fail": Fail,
    "evict": Evict,
    "train": Train,
}

# op -> (required keys, optional keys), "op" itself aside.
_SCHEMA: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "config": (frozenset(), frozenset({"stream_len", "on_failure", "max_attempts"})),
    "stamp": (frozenset({"count"}), frozenset()),
    "checkpoint": (frozenset(), frozenset({"save_buffer"})),
    "kill": (frozenset(), frozenset()),
    "resume": (frozenset(), frozenset({"load_replay_buffer", "evicted_on_restore"})),
    "finish": (frozenset(), frozenset()),
    **{name: (frozenset({"ordinals"}), frozenset()) for name in _MOVES},
}


@attrs.frozen
class _Saved:
    """A committed checkpoint and the lineage length it covers."""

    record: dict[str, Any]
    trained_events: int
    dropped_events: int


class Replayer:
    """Feeds trace ops to a ledger, one at a time, and returns the output
    lines each produces. Raises ``TraceError`` on a bad op and is then
    unusable (as a real run would be)."""

    def __init__(self) -> None:
        self.config = LedgerConfig()
        self.ledger: Ledger | None = Ledger.start(self.config)
        self._saved = _Saved(self.ledger.checkpoint().state_dict(), 0, 0)
        self._trained: list[tuple[int, ...]] = []
        self._dropped: list[tuple[int, ...]] = []
        self._highest_yielded = -1
        self._ops = 0

    def feed(self, op: Mapping[str, Any], line: int) -> list[dict[str, Any]]:
        try:
            return self._feed(op, line)
        except FrontierError as exc:
            if isinstance(exc, TraceError):
                raise
            raise TraceError(line, str(exc)) from exc
        finally:
            self._ops += 1

    def _feed(self, op: Mapping[str, Any], line: int) -> list[dict[str, Any]]:
        if not isinstance(op, Mapping):
            raise TraceError(line, "an op must be a JSON object")
        name = op.get("op")
        if name not in _SCHEMA:
            raise TraceError(line, f"unknown op {name!r}; expected one of {sorted(_SCHEMA)}")
        required, optional = _SCHEMA[name]
        keys = set(op) - {"op"}
        if required - keys:
            raise TraceError(line, f"{name}: missing {sorted(required - keys)}")
        if keys - required - optional:
            raise TraceError(line, f"{name}: unknown keys {sorted(keys - required - optional)}")

        if name == "config":
            return self._configure(op, line)
        if name == "finish":
            return [self._coverage()]
        if name == "resume":
            return [self._resume(op, line)]
        ledger = self.ledger
        if ledger is None:
            raise TraceError(line, f"{name} after kill: the process is dead; resume first")
        if name == "stamp":
            count = _int(op["count"], "count", line)
            if count > MAX_STAMP:
                # The output lists every stamped ordinal: the work must follow
                # the trace's size, not a number written in it.
                raise TraceError(
                    line, f"'count' {count} is more than {MAX_STAMP} a stamp; split it"
                )
            step = ledger.stamp(count)
            if step.effect.stamped:
                self._highest_yielded = max(self._highest_yielded, step.effect.stamped[-1])
            self.ledger = step.ledger
            return [
                {
                    "event": "stamp",
                    "ordinals": list(step.effect.stamped),
                    "kept": list(step.effect.kept),
                }
            ]
        if name in _MOVES:
            ordinals = _ordinal_list(op["ordinals"], "ordinals", line)
            result = ledger.apply(_MOVES[name](ordinals))
            self.ledger = result.ledger
            if name == "train":
                self._trained.append(tuple(ordinals))
            if result.effect.dropped:
                self._dropped.append(result.effect.dropped)
            return []
        if name == "checkpoint":
            save_buffer = _bool(op.get("save_buffer", True), "save_buffer", line)
            checkpoint = ledger.checkpoint(save_buffer=save_buffer)
            # Commit through the wire form, as a real run would.
            record = json.loads(json.dumps(checkpoint.state_dict()))
            self._saved = _Saved(record, len(self._trained), len(self._dropped))
            return [
                {
                    "event": "checkpoint",
                    "cut": checkpoint.cut,
                    "trained_above_cut": list(checkpoint.trained()),
                    "dropped_above_cut": list(checkpoint.dropped()),
                    "retained": list(checkpoint.retained_ordinals()),
                }
            ]
        assert name == "kill"
        # Everything after the last checkpoint dies with the process,
        # training steps included: the resumed run re-executes them.
        self.ledger = None
        del self._trained[self._saved.trained_events :]
        del self._dropped[self._saved.dropped_events :]
        return []

    def _configure(self, op: Mapping[str, Any], line: int) -> list[dict[str, Any]]:
        if self._ops:
            raise TraceError(line, "config must be the first op of the trace")
        stream_len = op.get("stream_len")
        if stream_len is not None:
            stream_len = _int(stream_len, "stream_len", line)
        on_failure = op.get("on_failure", "drop")
        if on_failure not in ("drop", "retry"):
            raise TraceError(line, f"on_failure must be 'drop' or 'retry', got {on_failure!r}")
        max_attempts = _int(op.get("max_attempts", 3), "max_attempts", line)
        if max_attempts < 1:
            raise TraceError(line, f"max_attempts must be >= 1, got {max_attempts}")
        self.config = LedgerConfig(
            on_failure=FailurePolicy(on_failure), max_attempts=max_attempts, stream_len=stream_len
        )
        self.ledger = Ledger.start(self.config)
        self._saved = _Saved(self.ledger.checkpoint().state_dict(), 0, 0)
        return []

    def _resume(self, op: Mapping[str, Any], line: int) -> dict[str, Any]:
        if self.ledger is not None:
            raise TraceError(line, "resume without a kill: the process is still alive")
        load = _bool(op.get("load_replay_buffer", True), "load_replay_buffer", line)
        evicted = _ordinal_list(op.get("evicted_on_restore", []), "evicted_on_restore", line)
        checkpoint = Checkpoint.from_state_dict(
            self._saved.record, fingerprint=self.config.fingerprint
        )
        resumed = Ledger.resume(
            self.config, checkpoint, load_replay_buffer=load, evicted_on_restore=evicted
        )
        self.ledger = resumed.ledger
        return {
            "event": "resume",
            "rewind_to": resumed.rewind_to,
            "cut": resumed.ledger.cut,
            "covered": list(resumed.covered),
        }

    def _coverage(self) -> dict[str, Any]:
        # Counted by the audit's one function, over the replayer's own
        # lineage (never the ledger's sets).
        lineage = Lineage(
            steps=dict(enumerate(self._trained)),
            dropped=tuple(self._dropped),
            discarded_steps=0,
        )
        trained, dropped_counts = coverage_counts(lineage)
        dropped = set(dropped_counts)
        if self.ledger is not None:
            live = {
                o
                for status in (Status.PENDING, Status.OUTSTANDING, Status.BUFFERED)
                for o in self.ledger.ordinals(status)
            }
            position = self.ledger.next_ordinal
        else:
            # Dead: the next resume restarts the source at the saved cut.
            live = set()
            position = int(self._saved.record["cut"])
        stream_len = self.config.stream_len
        upper = stream_len if stream_len is not None else self._highest_yielded + 1
        lost = [
            o
            for o in range(min(upper, position))
            if trained[o] == 0 and o not in dropped and o not in live
        ]
        return {
            "event": "coverage",
            "trained": sum(1 for n in trained.values() if n == 1),
            "dropped": sorted(dropped),
            "lost": lost,
            "duplicated": sorted(o for o, n in trained.items() if n > 1),
        }


def _int(value: object, key: str, line: int) -> int:
    if type(value) is not int or value < 0:
        raise TraceError(line, f"{key!r} must be an int >= 0, got {value!r:.40}")
    return value


def _bool(value: object, key: str, line: int) -> bool:
    if type(value) is not bool:
        raise TraceError(line, f"{key!r} must be true or false, got {value!r:.40}")
    return value


def _ordinal_list(value: object, key: str, line: int) -> list[int]:
    if not isinstance(value, list):
        raise TraceError(line, f"{key!r} must be a list of ordinals, got {value!r:.40}")
    return [_int(o, key, line) for o in value]


def replay(lines: Iterable[str | bytes], out: IO[str]) -> None:
    """Replay trace ``lines`` and write the output lines to ``out``.

    Lines given as bytes must be UTF-8 without a byte-order mark. Raises
    ``TraceError`` at the first bad line; everything before it has been
    written and flushed, nothing after it."""
    replayer = Replayer()
    for number, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as exc:
            out.flush()
            raise TraceError(number, f"not UTF-8: {exc}") from None
        if text.startswith("\ufeff"):
            out.flush()
            raise TraceError(number, "starts with a byte-order mark: write plain UTF-8")
        if not text.strip():
            continue
        try:
            op = json.loads(text)
        except RecursionError:
            out.flush()
            raise TraceError(number, "not JSON: nested too deeply") from None
        except ValueError as exc:  # JSONDecodeError, and ints past the digit limit
            out.flush()
            raise TraceError(number, f"not JSON: {str(exc)[:200]}") from None
        try:
            outputs = replayer.feed(op, number)
        finally:
            out.flush()
        for obj in outputs:
            out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    out.flush()
