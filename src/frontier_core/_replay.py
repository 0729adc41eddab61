"""``frontier replay``: run an event trace through the ledger, offline.

The trace is the contract between a real run and the model: a framework that
logs its ledger events can replay a production incident here and see where
the cut was, what a resume re-yielded and whether anything was lost. The
replayer also plays the crash: ``kill`` throws away everything after the last
checkpoint (ledger and training steps alike), exactly as a real process
death does, and ``resume`` restarts from that checkpoint through its JSON
record, so the codec is exercised on every replayed crash.

A trace whose ``config`` names ``samples`` or ``granularity`` is replayed
sample by sample: ``seal``, ``fail_sample`` and
``restart`` name attempts, and the replayer plays the framework's part too.
It keeps the samples the ledger accepted (as a rollout journal would: a
``resume`` may hold only those), files each under its group, and trains a
group's samples with it; a checkpoint saves the samples of the buffered
groups with it.

In sample mode a trace may also carry agentic episodes (``turn`` and
``answer`` ops, ``_Episodes``): the replayer journals them through the
journal's own fold and continues each after a resume from what that fold
gives back, as a framework would; its episode report (turns redone, calls
sent again, fenced answers trained, keys called twice) is computed from its
own record of what was durable, so it checks the journal's continuation.
A failure (``fail_sample``, ``fail``, ``evict``) is journaled as a
framework's ``Run`` journals it: every sibling it sends back gets an empty
progress of the ledger's next attempt, which voids what the journal held of
it, so a resumed life starts it afresh as the life without the kill does.

The coverage report at ``finish`` is computed from the replayer's own record
of the surviving lineage (which steps trained what, which drops happened,
and in sample mode which samples each trained group had, and whether each
was accepted from its sibling's current attempt by the replayer's own
account of the attempts handed out), not from the ledger's sets, so it
checks the ledger rather than echoing it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

import attrs

from ._audit import coverage_counts
from ._checkpoint import Checkpoint
from ._errors import FrontierError, TraceError, shown, shown_keys
from ._events import (
    Buffer,
    Dispatch,
    Effect,
    Evict,
    Fail,
    FailSample,
    FailurePolicy,
    Granularity,
    Lease,
    Restart,
    Seal,
    Status,
    Train,
)
from ._groups import LedgerConfig
from ._ledger import MAX_ATTEMPT, Ledger
from ._ranges import LIMIT, count
from ._trainlog import DuplicateKeyError, Lineage, parse_line
from ._transitions import current_attempt
from .journal import (
    NO_TOKENS,
    Answer,
    JournalEpisodeError,
    JsonPayload,
    Progress,
    Sealed,
    SiblingState,
    TokenPayload,
    ToolCall,
    Turn,
    TurnState,
    advance,
    call_key,
)

#: The most ordinals one ``stamp`` op may stamp, and the most attempts one
#: sample-level ``dispatch`` may start.
MAX_STAMP: Final = 1_000_000
#: The largest group a sample-level trace may configure: every dispatched
#: group costs n leases, so n is bounded like a stamp's count.
MAX_SAMPLES: Final = 1024
#: The work a replay may do, across all its ops: ``MAX_STAMP`` units, plus
#: this many per byte of trace read. A unit is one ordinal stamped, one
#: attempt started, one ordinal a ``checkpoint`` line or a ``resume``
#: expands, one ordinal or sample a ``finish`` counts. Each op is bounded on
#: its own too, but a bound per op is not one per trace: a 28 KB
#: sample-level trace of ``dispatch`` and ``fail`` ops, each starting
#: 10**6 attempts, took 55 s and 830 MB; so did a trace of a thousand
#: ``finish`` lines, each counting the whole lineage again.
WORK_PER_BYTE: Final = 16

class Output(Protocol):
    """Where ``replay`` writes: a text stream's ``write`` and ``flush``."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


_LIVE: Final = (Status.PENDING, Status.OUTSTANDING, Status.BUFFERED)


_MOVES: dict[str, type[Dispatch | Buffer | Fail | Evict | Train]] = {
    "dispatch": Dispatch,
    "buffer": Buffer,
    "fail": Fail,
    "evict": Evict,
    "train": Train,
}

# op -> (required keys, optional keys), "op" itself aside.
_SCHEMA: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "config": (frozenset(), frozenset({"stream_len", "on_failure", "max_failures"})),
    "stamp": (frozenset({"count"}), frozenset()),
    "checkpoint": (frozenset(), frozenset({"save_buffer"})),
    "kill": (frozenset(), frozenset()),
    "resume": (frozenset(), frozenset({"load_replay_buffer", "evicted_on_restore"})),
    "finish": (frozenset(), frozenset()),
    **{name: (frozenset({"ordinals"}), frozenset()) for name in _MOVES},
}
#: A sample-level trace: the prompt-level ops, some with more keys, and the
#: sibling ops.
_SAMPLE_SCHEMA: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    **_SCHEMA,
    "checkpoint": (frozenset(), frozenset({"save_buffer", "save_sealed"})),
    "resume": (
        frozenset(),
        _SCHEMA["resume"][1] | {"load_sealed", "sealed", "attempt_floor"},
    ),
    Seal.name: (frozenset({"leases"}), frozenset()),
    FailSample.name: (frozenset({"leases"}), frozenset()),
    Restart.name: (frozenset({"siblings"}), frozenset()),
    "turn": (frozenset({"lease", "turn", "tokens", "call"}), frozenset()),
    "answer": (frozenset({"lease", "key"}), frozenset()),
}
# Either of these selects the sample-level replay.
_SAMPLE_KEYS: Final = frozenset({"samples", "granularity"})
_CONFIG_KEYS: Final = _SCHEMA["config"][1] | _SAMPLE_KEYS | {"namespace"}

#: A sample as the replayer files it: its lease, and whether the replayer's
#: own account had its attempt current when the ledger accepted it.
_Sample = tuple[Lease, bool]


@attrs.frozen
class _Saved:
    """A committed checkpoint and the lineage length it covers; in sample
    mode, the samples of the buffered groups it saved."""

    record: dict[str, Any]
    cut: int
    trained_events: int
    dropped_events: int
    buffered: Mapping[int, tuple[_Sample, ...]] = attrs.field(factory=dict)


class Replayer:
    """Feeds trace ops to a ledger, one at a time, and returns the output
    lines each produces. Raises ``TraceError`` on a bad op, or on one that
    would pass the replay's work budget (``WORK_PER_BYTE``), and leaves the
    run as it was (``replay`` stops there, as a real run would)."""

    def __init__(self) -> None:
        self.config = LedgerConfig()
        self.ledger: Ledger | None = Ledger.start(self.config)
        self._saved = _Saved(self.ledger.checkpoint().state_dict(), 0, 0, 0)
        self._trained: list[tuple[int, ...]] = []
        self._dropped: list[tuple[int, ...]] = []
        self._highest_yielded = -1
        self._ops = 0
        # The work this replay may still do: MAX_STAMP, plus WORK_PER_BYTE
        # for every byte of trace fed (``_spend``).
        self._budget = MAX_STAMP
        self._sample_mode = False
        # Sample mode only. ``_trained_samples`` runs beside ``_trained``:
        # each step's groups with the samples trained for each.
        self._trained_samples: list[tuple[tuple[int, tuple[_Sample, ...]], ...]] = []
        # Every sample a seal had accepted, in any life (what a journal
        # holds), and whether the replayer's account had its attempt current
        # then: a resume that holds it brings that back, not a new verdict.
        self._accepted: dict[Lease, bool] = {}
        # This life: ordinal -> sibling -> the attempt the replayer counts
        # current (handed out, no result accepted yet, group outstanding).
        self._running: dict[int, dict[int, int]] = {}
        # This life: ordinal -> the samples filed for the group since its
        # dispatch (or restored with the buffer).
        self._samples: dict[int, list[_Sample]] = {}
        # This life: the samples the resume held (as the trace named them,
        # never as the ledger echoed them), not reused yet, each with its
        # ``_accepted`` verdict.
        self._held: dict[Lease, bool] = {}
        # The samples a failure of their group abandoned (``_void``), in
        # any life: the journal holds them voided.
        self._abandoned: set[Lease] = set()
        # Sample mode only: the episodes (turns and tool answers).
        self._episodes = _Episodes(NAMESPACE)

    def feed(self, op: Mapping[str, Any], line: int, *, size: int = 0) -> list[dict[str, Any]]:
        """The output lines of ``op``, read from trace line ``line`` of
        ``size`` bytes (each byte adds ``WORK_PER_BYTE`` to the budget; an
        op fed without its size spends from the base budget alone)."""
        self._budget += WORK_PER_BYTE * max(size, 0)
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
        schema = _SAMPLE_SCHEMA if self._sample_mode else _SCHEMA
        # Any JSON value may stand where the op's name belongs: a list or an
        # object is unhashable, so it is refused before any lookup.
        if not isinstance(name, str) or name not in schema:
            if isinstance(name, str) and name in _SAMPLE_SCHEMA:
                raise TraceError(
                    line, f"{name} is a sample-level op: the config must set 'samples' first"
                )
            raise TraceError(
                line, f"unknown op {shown(name, 40)}; expected one of {sorted(schema)}"
            )
        required, optional = schema[name]
        if name == "config":
            optional = _CONFIG_KEYS
        keys = set(op) - {"op"}
        if required - keys:
            raise TraceError(line, f"{name}: missing {sorted(required - keys)}")
        if keys - required - optional:
            raise TraceError(line, f"{name}: unknown keys {shown_keys(keys - required - optional)}")

        if name == "config":
            return self._configure(op, line)
        if name == "finish":
            return [self._coverage(line)]
        if name == "resume":
            if self._sample_mode:
                return [self._resume_samples(op, line)]
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
            self._spend(line, len(step.effect.stamped), "stamp")
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
        if self._sample_mode:
            return self._feed_samples(ledger, name, op, line)
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
            self._spend(line, _listed(checkpoint), "checkpoint")
            # Commit through the wire form, as a real run would.
            record = json.loads(json.dumps(checkpoint.state_dict()))
            self._saved = _Saved(record, checkpoint.cut, len(self._trained), len(self._dropped))
            return [_checkpoint_line(checkpoint)]
        assert name == "kill"
        self._kill()
        return []

    def _kill(self) -> None:
        # Everything after the last checkpoint dies with the process,
        # training steps included: the resumed run re-executes them. So do
        # the samples it held in memory; the journal (``_accepted``) stays.
        self.ledger = None
        del self._trained[self._saved.trained_events :]
        del self._trained_samples[self._saved.trained_events :]
        del self._dropped[self._saved.dropped_events :]
        self._running = {}
        self._samples = {}
        self._held = {}
        self._episodes.kill()

    def _configure(self, op: Mapping[str, Any], line: int) -> list[dict[str, Any]]:
        if self._ops:
            raise TraceError(line, "config must be the first op of the trace")
        stream_len = op.get("stream_len")
        if stream_len is not None:
            stream_len = _int(stream_len, "stream_len", line)
        on_failure = op.get("on_failure", "drop")
        if on_failure not in ("drop", "retry"):
            raise TraceError(
                line, f"on_failure must be 'drop' or 'retry', got {shown(on_failure, 40)}"
            )
        max_failures = _int(op.get("max_failures", 3), "max_failures", line)
        if max_failures < 1:
            raise TraceError(line, f"max_failures must be >= 1, got {max_failures}")
        samples = _int(op.get("samples", 1), "samples", line)
        if not 1 <= samples <= MAX_SAMPLES:
            raise TraceError(
                line, f"samples must be in [1, {MAX_SAMPLES}], got {str(samples)[:40]}"
            )
        granularity = op.get("granularity", "sibling")
        if granularity not in ("sibling", "group"):
            raise TraceError(
                line, f"granularity must be 'sibling' or 'group', got {shown(granularity, 40)}"
            )
        self.config = LedgerConfig(
            on_failure=FailurePolicy(on_failure),
            max_failures=max_failures,
            stream_len=stream_len,
            samples=samples,
            granularity=Granularity(granularity),
        )
        self._sample_mode = bool(_SAMPLE_KEYS & set(op))
        namespace = op.get("namespace", NAMESPACE)
        try:
            call_key(namespace, 0, 0, 0, 0)
        except (TypeError, ValueError) as exc:
            raise TraceError(line, f"namespace: {exc}") from None
        self._episodes = _Episodes(namespace)
        ledger = Ledger.start(self.config)
        self.ledger = ledger
        self._saved = _Saved(ledger.checkpoint().state_dict(), 0, 0, 0)
        return []

    def _resume(self, op: Mapping[str, Any], line: int) -> dict[str, Any]:
        if self.ledger is not None:
            raise TraceError(line, "resume without a kill: the process is still alive")
        load = _bool(op.get("load_replay_buffer", True), "load_replay_buffer", line)
        evicted = _ordinal_list(op.get("evicted_on_restore", []), "evicted_on_restore", line)
        checkpoint = Checkpoint.from_state_dict(
            self._saved.record, fingerprint=self.config.fingerprint
        )
        self._spend(line, _span(checkpoint), "resume")
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

    # -- sample mode ------------------------------------------------------

    def _feed_samples(
        self, ledger: Ledger, name: str, op: Mapping[str, Any], line: int
    ) -> list[dict[str, Any]]:
        n = self.config.samples
        if name == "checkpoint":
            save_buffer = _bool(op.get("save_buffer", True), "save_buffer", line)
            save_sealed = _bool(op.get("save_sealed", True), "save_sealed", line)
            checkpoint = ledger.checkpoint(save_buffer=save_buffer, save_sealed=save_sealed)
            self._spend(line, _listed(checkpoint) + len(checkpoint.sealed), "checkpoint")
            record = json.loads(json.dumps(checkpoint.state_dict()))
            # The framework saves the buffered groups' samples with it.
            buffered = {o: tuple(self._samples.get(o, ())) for o in checkpoint.retained_ordinals()}
            self._saved = _Saved(
                record, checkpoint.cut, len(self._trained), len(self._dropped), buffered
            )
            return [
                {
                    **_checkpoint_line(checkpoint),
                    "next_attempt": checkpoint.next_attempt,
                    "sealed": _leases(checkpoint.sealed),
                }
            ]
        if name == "kill":
            self._kill()
            return []
        if name in ("turn", "answer"):
            lease = _lease(op["lease"], line, n)
            current = self._running.get(lease.ordinal, {}).get(lease.sibling) == lease.attempt
            play = self._episodes.turn if name == "turn" else self._episodes.answer
            return play(op, line, ledger, current, self._spend)
        if name == Restart.name:
            pairs = _sibling_list(op["siblings"], "siblings", line, n, width=2)
            result = ledger.apply(Restart(pairs))
            self._spend(line, len(result.effect.leases), Restart.name)
            self.ledger = result.ledger
            self._start(result.effect.leases)
            self._episodes.restarted(result.effect.leases)
            return [{"event": Restart.name, "leases": _leases(result.effect.leases)}]
        if name in (Seal.name, FailSample.name):
            leases = [Lease(*x) for x in _sibling_list(op["leases"], "leases", line, n, width=3)]
            if name == Seal.name:
                result = ledger.apply(Seal(leases))
                self.ledger = result.ledger
                self._seal(result.effect)
                return [
                    {
                        "event": Seal.name,
                        "sealed": _leases(result.effect.sealed),
                        "fenced": _leases(result.effect.fenced),
                        "landed": sorted(result.effect.landed),
                    }
                ]
            result = ledger.apply(FailSample(leases))
            self.ledger = result.ledger
            self._fail_sample(leases, result.effect)
            effect = result.effect
            return [
                {
                    "event": FailSample.name,
                    "fenced": _leases(effect.fenced),
                    "restart": sorted(map(list, effect.restart)),
                    "requeued": sorted(effect.requeued),
                    "unstamped": sorted(effect.unstamped),
                    "dropped": sorted(effect.dropped),
                }
            ]
        ordinals = _ordinal_list(op["ordinals"], "ordinals", line)
        if name == "dispatch" and len(ordinals) * n > MAX_STAMP:
            raise TraceError(
                line,
                f"dispatch would start up to {len(ordinals) * n} attempts, more than "
                f"{MAX_STAMP}; split it",
            )
        result = ledger.apply(_MOVES[name](ordinals))
        effect = result.effect
        # A continued episode is read back turn by turn: each costs a unit.
        continuing = self._episodes.cost(ordinals, effect.leases) if name == "dispatch" else 0
        self._spend(line, len(effect.leases) + continuing, name)
        self.ledger = result.ledger
        if effect.dropped:
            self._dropped.append(effect.dropped)
        if name in ("fail", "evict"):
            self._void((), {*ordinals, *effect.requeued, *effect.unstamped, *effect.dropped})
        if name == "dispatch":
            self._dispatch(ordinals, effect)
            continued, repeated = self._episodes.dispatched(ordinals, effect.leases)
            return [
                {
                    "event": "dispatch",
                    "leases": _leases(effect.leases),
                    "reused": _leases(effect.reused),
                    "landed": sorted(effect.landed),
                    "continued": continued,
                    "repeated": repeated,
                }
            ]
        if name == "train":
            self._trained.append(tuple(ordinals))
            self._trained_samples.append(
                tuple((o, tuple(self._samples.pop(o, ()))) for o in ordinals)
            )
        # A group that leaves outstanding whole (buffer, fail) takes its
        # attempts with it; a dropped group takes its samples.
        for o in ordinals:
            self._running.pop(o, None)
        for o in effect.dropped:
            self._samples.pop(o, None)
        return []

    # The replayer's own account of the attempts, from what the ledger
    # handed out and accepted: an attempt is current from its hand-out to
    # its first accepted result, or until its group leaves outstanding or
    # the process dies. The ledger decides; this only records, so that
    # ``finish`` can tell a sample accepted from a stale attempt.

    def _start(self, leases: Iterable[Lease]) -> None:
        for o, s, a in leases:
            self._running.setdefault(o, {})[s] = a

    def _dispatch(self, ordinals: Iterable[int], effect: Effect) -> None:
        for o in ordinals:
            self._samples[o] = []
            self._running.pop(o, None)
        for lease in effect.reused:
            # Reused: current only if this life's resume held it and its
            # attempt was current when a seal accepted it.
            self._samples.setdefault(lease.ordinal, []).append(
                (lease, self._held.pop(lease, False))
            )
        self._start(effect.leases)
        for o in effect.landed:
            self._running.pop(o, None)

    def _seal(self, effect: Effect) -> None:
        for lease in effect.sealed:
            o, s, a = lease
            running = self._running.get(o, {})
            current = running.get(s) == a
            if current:
                del running[s]
            self._samples.setdefault(o, []).append((lease, current))
            # A second acceptance (a broken ledger's) cannot make a stale
            # one current.
            self._accepted[lease] = self._accepted.get(lease, True) and current
        self._episodes.sealed(effect.sealed)
        for o in effect.landed:
            self._running.pop(o, None)

    def _fail_sample(self, leases: Iterable[Lease], effect: Effect) -> None:
        self._void(effect.restart, {*effect.requeued, *effect.unstamped, *effect.dropped})
        fenced = set(effect.fenced)
        for o, s, a in leases:
            running = self._running.get(o, {})
            if (o, s, a) not in fenced and running.get(s) == a:
                del running[s]
        for o in (*effect.requeued, *effect.unstamped, *effect.dropped):
            self._running.pop(o, None)
        for o in effect.dropped:
            self._samples.pop(o, None)
        if effect.dropped:
            self._dropped.append(effect.dropped)

    def _void(self, siblings: Iterable[tuple[int, int]], groups: Iterable[int]) -> None:
        """Journal a failure as ``Run`` does (the module doc): these
        siblings, and every sibling of these groups, start afresh from the
        ledger's next attempt. The samples their groups had sealed are
        abandoned: a resume that holds one trains a sample no current
        attempt made (reported as ``fenced``)."""
        assert self.ledger is not None
        attempt = min(self.ledger.next_attempt, MAX_ATTEMPT)
        n = self.config.samples
        groups = set(groups)
        voided = [*siblings, *((o, s) for o in sorted(groups) for s in range(n))]
        for o in groups:
            for lease, _ in self._samples.get(o, ()):
                self._accepted[lease] = False
                self._abandoned.add(lease)
        self._episodes.voided(voided, attempt)

    def _resume_samples(self, op: Mapping[str, Any], line: int) -> dict[str, Any]:
        if self.ledger is not None:
            raise TraceError(line, "resume without a kill: the process is still alive")
        n = self.config.samples
        load = _bool(op.get("load_replay_buffer", True), "load_replay_buffer", line)
        load_sealed = _bool(op.get("load_sealed", True), "load_sealed", line)
        evicted = _ordinal_list(op.get("evicted_on_restore", []), "evicted_on_restore", line)
        journal = [Lease(*x) for x in _sibling_list(op.get("sealed", []), "sealed", line, n, 3)]
        floor = _int(op.get("attempt_floor", 0), "attempt_floor", line)
        if floor > MAX_ATTEMPT + 1:
            raise TraceError(
                line, f"'attempt_floor' {str(floor)[:40]} is above 2**32, the attempts' bound"
            )
        checkpoint = Checkpoint.from_state_dict(
            self._saved.record, fingerprint=self.config.fingerprint
        )
        buffered = sum(len(samples) for samples in self._saved.buffered.values())
        self._spend(line, _span(checkpoint) + len(checkpoint.sealed) + buffered, "resume")
        # The framework's journal voided the saved seals a later failure
        # sent back (``_void``): they are not held.
        saved = tuple(
            lease
            for lease in (checkpoint.sealed if load_sealed else ())
            if lease not in self._abandoned
        )
        # The checkpoint's sealed siblings are the ledger's word, not the
        # replayer's, so they are checked like the journal's: a framework
        # holds no sample that no seal accepted.
        for source, leases in (("'sealed'", journal), ("the checkpoint's sealed", saved)):
            unknown = [lease for lease in leases if lease not in self._accepted]
            if unknown:
                raise TraceError(
                    line,
                    f"{source} holds samples no seal accepted, which no framework can hold: "
                    f"{_leases(unknown[:5])}",
                )
        # The checkpoint's samples and the journal's are one sample each.
        held = {lease: self._accepted[lease] for lease in (*saved, *journal)}
        resumed = Ledger.resume(
            self.config,
            checkpoint,
            load_replay_buffer=load,
            sealed=held,
            evicted_on_restore=evicted,
            attempt_floor=floor,
        )
        ledger = resumed.ledger
        self.ledger = ledger
        self._held = held
        self._samples = {
            o: list(samples)
            for o, samples in self._saved.buffered.items()
            if ledger.status(o) is Status.BUFFERED
        }
        return {
            "event": "resume",
            "rewind_to": resumed.rewind_to,
            "cut": ledger.cut,
            "covered": list(resumed.covered),
            "next_attempt": ledger.next_attempt,
            "reused": _leases(resumed.reused),
            "ignored": _leases(resumed.ignored),
        }

    # -- the report -------------------------------------------------------

    def _spend(self, line: int, units: int, what: str) -> None:
        """Take ``units`` of work from the budget, or refuse the op (before
        it is committed or its output built) with ``TraceError``."""
        if units > self._budget:
            raise TraceError(
                line,
                f"{what} would take {units} units of work (ordinals or attempts), and the "
                f"trace has {self._budget} left: a replay does at most {MAX_STAMP} plus "
                f"{WORK_PER_BYTE} per byte of trace",
            )
        self._budget -= units

    def _coverage(self, line: int) -> dict[str, Any]:
        # What the report walks: the stream up to the source's position, the
        # lineage, and in sample mode every trained sample.
        ledger = self.ledger
        position = self._saved.cut if ledger is None else ledger.next_ordinal
        units = position + sum(map(len, self._trained)) + sum(map(len, self._dropped))
        units += sum(len(samples) for step in self._trained_samples for _, samples in step)
        units += self._episodes.units(self._trained_leases())
        if ledger is not None:
            units += ledger.size()
        self._spend(line, units, "finish")
        # Counted by the audit's one function, over the replayer's own
        # lineage (never the ledger's sets).
        lineage = Lineage(
            steps=dict(enumerate(self._trained)),
            dropped=tuple(self._dropped),
            discarded_steps=0,
        )
        trained, dropped_counts = coverage_counts(lineage)
        dropped = set(dropped_counts)
        ledger = self.ledger
        if ledger is not None:
            live = {o for status in _LIVE for o in ledger.ordinals(status)}
            position = ledger.next_ordinal
        else:
            # Dead: the next resume restarts the source at the saved cut.
            live = set()
            position = self._saved.cut
        stream_len = self.config.stream_len
        upper = stream_len if stream_len is not None else self._highest_yielded + 1
        lost = [
            o
            for o in range(min(upper, position))
            if trained[o] == 0 and o not in dropped and o not in live
        ]
        report: dict[str, Any] = {
            "event": "coverage",
            "trained": sum(1 for n in trained.values() if n == 1),
            "dropped": sorted(dropped),
            "lost": lost,
            "duplicated": sorted(o for o, n in trained.items() if n > 1),
        }
        if self._sample_mode:
            report.update(self._sample_coverage())
        return report

    def _sample_coverage(self) -> dict[str, Any]:
        n = self.config.samples
        incomplete: set[int] = set()
        fenced: set[Lease] = set()
        by_attempt: Counter[int] = Counter()
        trained: list[Lease] = []
        for step in self._trained_samples:
            for o, samples in step:
                siblings = {lease.sibling for lease, _ in samples}
                # One sample per sibling 0..n-1, each of this group.
                if (
                    len(samples) != n
                    or len(siblings) != n
                    or any(not 0 <= s < n for s in siblings)
                    or any(lease.ordinal != o for lease, _ in samples)
                ):
                    incomplete.add(o)
                for lease, current in samples:
                    if not current:
                        fenced.add(lease)
                    by_attempt[lease.attempt] += 1
                    trained.append(lease)
        twice = sorted({lease for lease in trained if by_attempt[lease.attempt] > 1})
        return {
            "samples": len(trained),
            "incomplete": sorted(incomplete),
            "fenced": _leases(fenced),
            "duplicated_attempts": _leases(twice),
            **self._episodes.report(trained),
        }

    def _trained_leases(self) -> list[Lease]:
        return [lease for step in self._trained_samples for _, s in step for lease, _ in s]


# -- episodes: the turn and answer ops ----------------------------------------------


#: The namespace of the idempotency keys of a trace whose ``config`` names
#: none (a real run's is its lineage and journal id: ``Run.namespace``).
NAMESPACE: Final = "trace"
#: The widest turn index and token count a ``turn`` op may name (the
#: journal's u32).
MAX_TURN: Final = MAX_ATTEMPT


#: ``Replayer._spend``: take units of work for an op at a line, or refuse it.
_Spend = Callable[[int, int, str], None]


@attrs.frozen
class _TurnOp:
    """A turn op the replayer accepted: the lease that made it durable,
    its index, its token count and its call's key (``None``: no call)."""

    lease: Lease
    turn: int
    tokens: int
    key: str | None


@attrs.frozen
class _AnswerOp:
    """An answer op the replayer journaled: the lease that received it,
    the key it answers, and whether the replayer's own account had that
    lease current then."""

    lease: Lease
    turn: int
    key: str
    current: bool


@attrs.define
class _Episode:
    """An episode as a list of ``[turn op, answer op or None]`` indices:
    the replayer's own record of a sibling's durable episode (``attempt``
    the attempt that made its latest record), or a running lease's episode
    in this life."""

    attempt: int
    turns: list[list[int | None]]
    sealed: bool = False


class _Episodes:
    """The episode part of a sample-level replay. The replayer plays the
    framework of ``docs/agents.md``: it journals each accepted turn and
    answer through the journal's own fold (``frontier_core.journal.advance``,
    one sibling's ``SiblingState``, kept across kills as a journal is), and
    a resumed life continues each episode from that state, re-issuing a
    pending call under its stored key (``Pending.RETRY``). Each journal
    record carries the index of the op it came from (a turn's one token
    id, an answer's JSON payload), so the episode the journal gives back is
    read as ops, and the report checks it against the replayer's own
    record of what was durable (``durable``), never against the journal."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.turn_ops: list[_TurnOp] = []
        self.answer_ops: list[_AnswerOp] = []
        # Every key a turn issued: the turn op that issued it first.
        self.calls: dict[str, int] = {}
        # The journal's state of each sibling (the core's fold).
        self.journal: dict[tuple[int, int], SiblingState] = {}
        # The replayer's own record of each sibling's durable episode, and
        # the most turns it ever held.
        self.durable: dict[tuple[int, int], _Episode] = {}
        self.high: dict[tuple[int, int], int] = {}
        # This life: each running sibling's episode, and the ordinals
        # dispatched (only an ordinal's first dispatch of a life continues).
        self.live: dict[tuple[int, int], _Episode] = {}
        self.offered: set[int] = set()
        # Every accepted seal's transcript, in any life (a journal keeps it).
        self.transcripts: dict[Lease, tuple[tuple[int, int | None], ...]] = {}
        # Per sibling, the attempt of its latest failure: a turn of an
        # older attempt was abandoned by it, and is never trained.
        self.abandoned: dict[tuple[int, int], int] = {}
        self.turns_redone = 0
        self.tokens_redone = 0
        self.reissued: Counter[str] = Counter()
        self.violations: set[str] = set()

    def kill(self) -> None:
        self.live = {}
        self.offered = set()

    # -- the ledger's events ---------------------------------------------------

    def dispatched(
        self, ordinals: Iterable[int], leases: Iterable[Lease]
    ) -> tuple[list[list[int]], list[str]]:
        """Start the episodes of ``leases``; those of an ordinal's first
        dispatch in this life continue the journal's episode. Returns the
        continued ``[o, s, a, next turn]`` and the keys re-issued."""
        first = set(ordinals) - self.offered
        self.offered |= first
        continued: list[list[int]] = []
        repeated: list[str] = []
        for lease in leases:
            o, s, a = lease
            state = self.journal.get((o, s)) if o in first else None
            if state is None or state.sealed or not state.turns:
                self.live[(o, s)] = _Episode(a, [])
                continue
            self.live[(o, s)] = _Episode(a, [self._ops_of(t) for t in state.turns])
            continued.append([o, s, a, len(state.turns)])
            pending = state.pending
            if pending is not None:
                self._reissue(o, s, pending.key)
                repeated.append(pending.key)
        return sorted(continued), sorted(repeated)

    def cost(self, ordinals: Iterable[int], leases: Iterable[Lease]) -> int:
        """The turns ``dispatched`` would read back for these leases."""
        first = set(ordinals) - self.offered
        return sum(
            len(state.turns)
            for o, s, _ in leases
            if o in first and (state := self.journal.get((o, s))) is not None
        )

    def _ops_of(self, turn: TurnState) -> list[int | None]:
        """The op indices a journaled turn carries (see the class doc)."""
        tokens = turn.tokens.tokens()
        tid = tokens[0] if len(tokens) == 1 else -1
        answer = turn.answer.value() if isinstance(turn.answer, JsonPayload) else None
        aid = answer if type(answer) is int else None
        return [tid, aid]

    def _reissue(self, o: int, s: int, key: str) -> None:
        """A life sends ``key`` again: legal only for the call the
        replayer's own record holds pending for this sibling."""
        self.reissued[key] += 1
        own = self.durable.get((o, s))
        last = own.turns[-1] if own is not None and own.turns else None
        if (
            own is None
            or own.sealed
            or last is None
            or last[1] is not None
            or self.turn_ops[int(last[0] or 0)].key != key
        ):
            self.violations.add(key)

    def voided(self, siblings: Iterable[tuple[int, int]], attempt: int) -> None:
        """A failure sent these siblings back: their journal state is voided
        (an empty ``Progress`` of ``attempt``, at or below the next attempt
        dealt) and so is the replayer's own record of their episodes; a turn
        made before it (by an attempt below ``attempt``) is abandoned."""
        for o, s in siblings:
            self.abandoned[(o, s)] = attempt
            state = self.journal.get((o, s))
            if state is not None:
                after = advance(state, Progress(o, s, attempt, NO_TOKENS))
                if after is not None:
                    self.journal[(o, s)] = after
            if (o, s) in self.durable:
                self.durable[(o, s)] = _Episode(attempt, [])

    def restarted(self, leases: Iterable[Lease]) -> None:
        for o, s, a in leases:
            self.live[(o, s)] = _Episode(a, [])

    def sealed(self, leases: Iterable[Lease]) -> None:
        for lease in leases:
            o, s, a = lease
            live = self.live.pop((o, s), None)
            turns = live.turns if live is not None and live.attempt == a else []
            self.transcripts[lease] = tuple((int(t or 0), x) for t, x in turns)
            state = self.journal.get((o, s))
            if state is not None:
                after = advance(state, Sealed(o, s, a, _NULL))
                if after is not None:
                    self.journal[(o, s)] = after
            own = self.durable.get((o, s))
            if own is not None and turns:
                own.attempt, own.sealed = a, True

    # -- the ops ---------------------------------------------------------------

    def turn(
        self, op: Mapping[str, Any], line: int, ledger: Ledger, current: bool, spend: _Spend
    ) -> list[dict[str, Any]]:
        lease = _lease(op["lease"], line, ledger.config.samples)
        o, s, a = lease
        t = _int(op["turn"], "turn", line)
        tokens = _int(op["tokens"], "tokens", line)
        for key, value in (("turn", t), ("tokens", tokens)):
            if value > MAX_TURN:
                raise TraceError(line, f"{key!r} {str(value)[:40]} is above 2**32 - 1")
        call = op["call"]
        if call is not None and not isinstance(call, str):
            raise TraceError(line, f"'call' must be a key or null, got {shown(call, 40)}")
        live = self.live.get((o, s))
        if not current or not _current(ledger, lease) or live is None:
            raise TraceError(
                line,
                f"turn for lease {list(lease)}, which is not running (never started, fenced, "
                "sealed or failed): only a running attempt makes a turn durable",
            )
        held = len(live.turns)
        last = live.turns[-1] if live.turns else None
        if last is not None and last[1] is None and self._key(last) is not None:
            raise TraceError(
                line,
                f"turn {t} of {list(lease)} while turn {held - 1}'s call "
                f"{self._key(last)!r:.80} is pending: answer it first",
            )
        if last is not None and self._key(last) is None:
            raise TraceError(
                line, f"turn {t} of {list(lease)} after turn {held - 1}, which made no call"
            )
        if t != held:
            raise TraceError(
                line,
                f"turn {t} of {list(lease)} {'skips' if t > held else 'repeats'} a turn: "
                f"its episode holds {held} turns",
            )
        if call is not None:
            derived = call_key(self.namespace, o, s, a, t)
            if call != derived:
                raise TraceError(
                    line,
                    f"turn {t} of {list(lease)} calls {shown(call, 80)}, but its key is "
                    f"{derived!r}",
                )
        tid = len(self.turn_ops)
        if tid > MAX_TURN:
            raise TraceError(line, "more than 2**32 turns in one trace")
        spend(line, held + 1, "turn")
        record = Turn(
            o,
            s,
            a,
            t,
            TokenPayload.of([tid], [0.0], 0),
            None if call is None else ToolCall("tool", _NULL, call),
        )
        self.journal[(o, s)] = self._journaled(record, line)
        # Applied: the op is legal and the journal took it.
        self.turn_ops.append(_TurnOp(lease, t, tokens, call))
        live.turns.append([tid, None])
        if call is not None:
            if call in self.calls:
                self.violations.add(call)  # another call under the same key
            self.calls.setdefault(call, tid)
        own = self.durable.get((o, s))
        if own is not None and own.attempt == a and not own.sealed:
            own.turns.append([tid, None])
        else:
            kept = own.turns[:t] if own is not None else []
            own = self.durable[(o, s)] = _Episode(a, [*kept, [tid, None]])
        if t < self.high.get((o, s), 0):
            self.turns_redone += 1
            self.tokens_redone += tokens
        self.high[(o, s)] = max(self.high.get((o, s), 0), len(own.turns))
        return []

    def answer(
        self, op: Mapping[str, Any], line: int, ledger: Ledger, current: bool, spend: _Spend
    ) -> list[dict[str, Any]]:
        lease = _lease(op["lease"], line, ledger.config.samples)
        o, s, a = lease
        key = op["key"]
        if not isinstance(key, str) or key not in self.calls:
            raise TraceError(line, f"answer for an unknown key {shown(key, 80)}: no turn called it")
        site = self.turn_ops[self.calls[key]]
        if site.lease[:2] != (o, s):
            raise TraceError(
                line,
                f"answer for key {key!r:.80} by {list(lease)}: that key is a call of "
                f"sibling {list(site.lease[:2])}",
            )
        if a >= ledger.next_attempt:
            raise TraceError(line, f"answer by {list(lease)}: that attempt was never started")
        out = {"event": "answer", "lease": list(lease), "turn": site.turn, "fenced": True}
        if not _current(ledger, lease):
            # A late answer (a fenced attempt, a dead life's): never journaled.
            return [out]
        # The ledger's word decides, as it does for a framework's
        # ``Run.answer``; the replayer's own account (``current``) only
        # records, so that a ledger that lets a stale answer through shows
        # in the report.
        live = self.live.get((o, s))
        last = live.turns[-1] if live is not None and live.turns else None
        if live is None or last is None or last[1] is not None or (self._key(last) != key):
            raise TraceError(
                line,
                f"answer for key {key!r:.80} by {list(lease)}, whose episode has no call "
                "pending under it (answered already, or never asked by this episode)",
            )
        turn = len(live.turns) - 1
        spend(line, turn + 1, "answer")
        aid = len(self.answer_ops)
        record = Answer(o, s, a, turn, key, JsonPayload.of(aid))
        self.journal[(o, s)] = self._journaled(record, line)
        self.answer_ops.append(_AnswerOp(lease, turn, key, current))
        last[1] = aid
        own = self.durable.get((o, s))
        if own is not None:
            for item in own.turns:
                if self._key(item) == key and item[1] is None:
                    item[1] = aid
                    own.attempt = a
        return [{**out, "turn": turn, "fenced": False}]

    def _key(self, item: list[int | None]) -> str | None:
        tid = item[0]
        if tid is None or not 0 <= tid < len(self.turn_ops):
            return None
        return self.turn_ops[tid].key

    def _journaled(self, record: Turn | Answer, line: int) -> SiblingState:
        """The journal's state of the record's sibling after it, or the op
        refused (the journal refusing what the replayer found legal is
        reported, not hidden)."""
        state = self.journal.get((record.ordinal, record.sibling))
        try:
            after = advance(state, record)
        except JournalEpisodeError as exc:
            raise TraceError(line, f"the journal refused it: {exc.reason}") from None
        if after is None:
            raise TraceError(line, "the journal fenced a record of a running attempt")
        return after

    # -- the report ------------------------------------------------------------

    def units(self, trained: Iterable[Lease]) -> int:
        return sum(len(self.transcripts.get(lease, ())) for lease in trained)

    def report(self, trained: Iterable[Lease]) -> dict[str, Any]:
        fenced: set[tuple[int, ...]] = set()
        inexact: set[Lease] = set()
        for lease in trained:
            for i, (tid, aid) in enumerate(self.transcripts.get(lease, ())):
                made = self.turn_ops[tid] if 0 <= tid < len(self.turn_ops) else None
                got = (
                    self.answer_ops[aid]
                    if aid is not None and 0 <= aid < len(self.answer_ops)
                    else None
                )
                if (
                    made is None
                    or made.turn != i
                    or made.lease[:2] != lease[:2]
                    or made.lease.attempt < self.abandoned.get(lease[:2], 0)
                    or (aid is not None and (got is None or got.key != made.key))
                ):
                    inexact.add(lease)
                if got is not None and not got.current:
                    fenced.add((*got.lease, got.turn))
        return {
            "turns_redone": self.turns_redone,
            "tokens_redone": self.tokens_redone,
            "calls_repeated": sorted(self.reissued),
            "fenced_answers": sorted(map(list, fenced)),
            "at_most_once": sorted(self.violations),
            "inexact": _leases(inexact),
        }


_NULL: Final = JsonPayload("null")


def _current(ledger: Ledger, lease: Lease) -> bool:
    """Whether the ledger counts ``lease`` its sibling's current attempt
    (the fencing rule a seal is judged by)."""
    detail = ledger.sibling(lease.ordinal, lease.sibling)
    return detail is not None and current_attempt(detail[0], detail[1], lease.attempt)


def _lease(value: object, line: int, n: int) -> Lease:
    (xs,) = _sibling_list([value], "lease", line, n, 3)
    return Lease(*xs)


def _listed(checkpoint: Checkpoint) -> int:
    """The ordinals ``_checkpoint_line`` lists, counted from the ranges."""
    return checkpoint.resolved_count + count(checkpoint.retained)


def _span(checkpoint: Checkpoint) -> int:
    """The ordinals a resume from ``checkpoint`` visits, from its ranges."""
    return checkpoint.highest_ordinal() + 1 - checkpoint.cut


def _checkpoint_line(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "event": "checkpoint",
        "cut": checkpoint.cut,
        "trained_above_cut": list(checkpoint.trained()),
        "dropped_above_cut": list(checkpoint.dropped()),
        "retained": list(checkpoint.retained_ordinals()),
    }


def _leases(leases: Iterable[Lease]) -> list[list[int]]:
    return [list(x) for x in sorted(leases)]


def _int(value: object, key: str, line: int) -> int:
    if type(value) is not int or value < 0:
        raise TraceError(line, f"{key!r} must be an int >= 0, got {shown(value, 40)}")
    if value > LIMIT:
        # No ledger holds a number past 2**64 (nor would its record).
        raise TraceError(line, f"{key!r} must be at most 2**64, got {shown(value, 40)}")
    return value


def _bool(value: object, key: str, line: int) -> bool:
    if type(value) is not bool:
        raise TraceError(line, f"{key!r} must be true or false, got {shown(value, 40)}")
    return value


def _ordinal_list(value: object, key: str, line: int) -> list[int]:
    if not isinstance(value, list):
        raise TraceError(line, f"{key!r} must be a list of ordinals, got {shown(value, 40)}")
    return [_int(o, key, line) for o in value]


def _sibling_list(value: object, key: str, line: int, n: int, width: int) -> list[tuple[int, ...]]:
    """``value`` as ``[ordinal, sibling]`` pairs (``width`` 2) or
    ``[ordinal, sibling, attempt]`` leases (3): sibling below ``n``, attempt
    at most ``MAX_ATTEMPT``. Whether they are legal now is the ledger's
    decision."""
    shape = "[ordinal, sibling]" if width == 2 else "[ordinal, sibling, attempt]"
    if not isinstance(value, list):
        raise TraceError(line, f"{key!r} must be a list of {shape}, got {shown(value, 40)}")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != width:
            raise TraceError(line, f"{key!r} must be a list of {shape}, holds {shown(item, 40)}")
        xs = tuple(_int(x, key, line) for x in item)
        if xs[1] >= n:
            raise TraceError(line, f"{key!r}: sibling {str(xs[1])[:40]} is not below samples={n}")
        if width == 3 and xs[2] > MAX_ATTEMPT:
            raise TraceError(line, f"{key!r}: attempt {str(xs[2])[:40]} is above 2**32 - 1")
        out.append(xs)
    return out


def replay(lines: Iterable[str | bytes], out: Output) -> None:
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
            op = parse_line(text)
        except RecursionError:
            out.flush()
            raise TraceError(number, "not JSON: nested too deeply") from None
        except DuplicateKeyError as exc:
            out.flush()
            raise TraceError(number, str(exc)) from None
        except ValueError as exc:  # JSONDecodeError, and ints past the digit limit
            out.flush()
            raise TraceError(number, f"not JSON: {str(exc)[:200]}") from None
        try:
            outputs = replayer.feed(op, number, size=len(raw))
        finally:
            out.flush()
        for obj in outputs:
            out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    out.flush()
