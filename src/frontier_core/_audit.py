"""``frontier audit``: check a training-data log against the expected stream.

The log (see ``_trainlog``) says what a run actually trained, crash after
crash; ``fold_lineage`` reduces it to the surviving lineage, and this module
compares that lineage with the stream ``[0, stream_len)``:

* *trained once*: trained in exactly one lineage step and never dropped;
* *skipped*: in the stream, neither trained nor dropped (silently lost);
* *duplicated*: trained in two lineage steps (or twice in one), trained and
  also dropped, or dropped twice: resolved more than once;
* *dropped*: dropped once and never trained (lost on purpose, recorded);
* *out of range*: an ordinal at or above ``stream_len``: the log does not
  belong to this stream.

With ``window=P`` (a deterministic, in-order run) each step ``s`` must have
trained exactly the ordinals ``[s*P, (s+1)*P)`` of the stream.

The skipped ordinals and the steps off their window are kept as ranges, so
the audit's time and memory follow the log, never ``stream_len`` (a
``--stream-len`` of 10**9 over a short log once raised ``MemoryError``).

The report is a frozen value computed by a pure function, so the simulator
uses the same code to check its own runs that a user runs on a real log.
The command line (``frontier_core._cli``) prints the report and exits 0
clean, 1 on any skip, duplicate, out-of-range ordinal or window mismatch, 2
on unreadable input.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, Final

import attrs

from ._errors import shown
from ._ranges import Range, count, expand
from ._trainlog import Lineage, Record, TornTail, TrainLogError, fold_lineage, read_train_log

#: The most ordinals (or steps) one list of ``AuditReport.to_json`` holds;
#: the ``..._ranges`` lists beside them hold every one.
MAX_LISTED: Final = 1_000_000


@attrs.frozen
class AuditReport:
    """The coverage of one log's surviving lineage over ``[0, stream_len)``.

    Ordinal tuples are ascending. The skipped ordinals are kept as
    ``skipped_ranges`` and the steps that did not train their window
    (empty unless a window was given) as ``window_mismatch_ranges``:
    ascending, disjoint ``[start, stop)`` pairs, as many as the log has
    holes, however long the stream. ``skipped`` and ``window_mismatch``
    expand them (for short streams: the simulator's).
    """

    stream_len: int
    steps: int
    discarded_steps: int
    trained_once: int
    skipped_ranges: tuple[Range, ...]
    duplicated: tuple[int, ...]
    dropped: tuple[int, ...]
    out_of_range: tuple[int, ...]
    window: int | None = None
    window_mismatch_ranges: tuple[Range, ...] = ()

    @property
    def skipped(self) -> tuple[int, ...]:
        """The skipped ordinals, expanded: O(skipped)."""
        return tuple(expand(self.skipped_ranges))

    @property
    def window_mismatch(self) -> tuple[int, ...]:
        """The steps off their window, expanded: O(steps off)."""
        return tuple(expand(self.window_mismatch_ranges))

    @property
    def clean(self) -> bool:
        """No skip, no duplicate, nothing out of range, every window right."""
        return not (
            self.skipped_ranges
            or self.duplicated
            or self.out_of_range
            or self.window_mismatch_ranges
        )

    def to_json(self) -> dict[str, Any]:
        """The report as JSON types. Each list holds at most ``MAX_LISTED``
        items (the first ones); the counts and the ``..._ranges`` are whole."""
        return {
            "stream_len": self.stream_len,
            "steps": self.steps,
            "discarded_steps": self.discarded_steps,
            "trained_once": self.trained_once,
            "skipped": count(self.skipped_ranges),
            "duplicated": len(self.duplicated),
            "dropped": len(self.dropped),
            "out_of_range": len(self.out_of_range),
            "window": self.window,
            "window_mismatch": _first(self.window_mismatch_ranges, MAX_LISTED),
            "window_mismatch_ranges": [list(r) for r in self.window_mismatch_ranges],
            "skipped_ordinals": _first(self.skipped_ranges, MAX_LISTED),
            "skipped_ranges": [list(r) for r in self.skipped_ranges],
            "duplicated_ordinals": list(self.duplicated[:MAX_LISTED]),
            "dropped_ordinals": list(self.dropped[:MAX_LISTED]),
            "out_of_range_ordinals": list(self.out_of_range[:MAX_LISTED]),
            "clean": self.clean,
        }


def _first(ranges: Iterable[Range], limit: int) -> list[int]:
    return list(itertools.islice(expand(ranges), limit))


def _holes(present: Iterable[int], stop: int) -> tuple[Range, ...]:
    """The ranges of ``[0, stop)`` that hold none of ``present``: O(present
    log present), whatever ``stop``."""
    out: list[Range] = []
    start = 0
    for o in sorted(o for o in set(present) if o < stop):
        if o > start:
            out.append((start, o))
        start = o + 1
    if start < stop:
        out.append((start, stop))
    return tuple(out)


def _union(singles: Iterable[int], ranges: Iterable[Range]) -> tuple[Range, ...]:
    """Ascending, coalesced ranges of ``singles`` and ``ranges`` together."""
    items = sorted([*((o, o + 1) for o in set(singles)), *ranges])
    out: list[Range] = []
    for start, stop in items:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return tuple(out)


def coverage_counts(lineage: Lineage) -> tuple[Counter[int], Counter[int]]:
    """How many times each ordinal was trained, and dropped, in the lineage."""
    trained: Counter[int] = Counter()
    for ordinals in lineage.steps.values():
        trained.update(ordinals)
    dropped: Counter[int] = Counter()
    for ordinals in lineage.dropped:
        dropped.update(ordinals)
    return trained, dropped


def audit_lineage(lineage: Lineage, stream_len: int, *, window: int | None = None) -> AuditReport:
    """Compare a surviving lineage with the stream ``[0, stream_len)``.

    Raises ``ValueError`` for a negative ``stream_len`` or a ``window`` < 1.
    Time and memory follow the lineage, never ``stream_len`` or ``window``.
    """
    if type(stream_len) is not int or stream_len < 0:
        raise ValueError(f"stream_len must be an int >= 0, got {shown(stream_len, 40)}")
    if window is not None and (type(window) is not int or window < 1):
        raise ValueError(f"window must be an int >= 1, got {shown(window, 40)}")
    trained, dropped = coverage_counts(lineage)
    seen = set(trained) | set(dropped)
    duplicated = sorted(o for o in seen if trained[o] + dropped[o] > 1)
    once = sum(1 for o, n in trained.items() if n == 1 and not dropped[o] and o < stream_len)
    mismatch: tuple[Range, ...] = ()
    if window is not None:
        # Every step of the stream must be present with exactly its window;
        # a step beyond the stream, or a missing one, is a mismatch too. The
        # logged steps are checked one by one (O(their ordinals): a window
        # is compared by length first, never built); the missing ones are
        # the holes between them, as ranges: O(steps), never proportional to
        # the stream, the window or a step number written in the log.
        expected_steps = (stream_len + window - 1) // window
        wrong = []
        for s, got in lineage.steps.items():
            if s >= expected_steps:
                wrong.append(s)
                continue
            expected = range(s * window, min((s + 1) * window, stream_len))
            if len(got) != len(expected) or sorted(got) != list(expected):
                wrong.append(s)
        mismatch = _union(wrong, _holes(lineage.steps, expected_steps))
    return AuditReport(
        stream_len=stream_len,
        steps=len(lineage.steps),
        discarded_steps=lineage.discarded_steps,
        trained_once=once,
        skipped_ranges=_holes(seen, stream_len),
        duplicated=tuple(duplicated),
        dropped=tuple(sorted(o for o, n in dropped.items() if n == 1 and not trained[o])),
        out_of_range=tuple(sorted(o for o in seen if o >= stream_len)),
        window=window,
        window_mismatch_ranges=mismatch,
    )


def audit_log(
    path: str | os.PathLike[str], stream_len: int, *, window: int | None = None
) -> AuditReport:
    """Read, fold and audit the log at ``path``.

    Raises ``TrainLogError`` (with the line number) for bad input, a last
    line without its newline included (a torn record, or a whole one whose
    write never finished: the audit of a run refuses to guess which), and
    ``OSError`` when the file cannot be read."""
    name = str(path)
    lineage = fold_lineage(_whole(read_train_log(path), name), path=name)
    return audit_lineage(lineage, stream_len, window=window)


def _whole(records: Iterable[Record], name: str) -> Iterator[Record]:
    """``records``, refusing a torn tail: ``fold_lineage`` discards one (a
    resuming writer cuts it), but an audit that did would prove the
    coverage of a log it did not read whole."""
    for record in records:
        if isinstance(record, TornTail):
            raise TrainLogError(
                name,
                record.line,
                f"truncated: the last line ({record.size} bytes) has no newline, so its "
                "write never finished (a run killed mid-write; the writer reopened for a "
                "resume cuts it)",
            )
        yield record


def _shown(ordinals: Iterable[int], total: int, limit: int = 20) -> str:
    head = ", ".join(str(o) for o in itertools.islice(ordinals, limit))
    more = f", ... (+{total - limit} more)" if total > limit else ""
    return f"[{head}{more}]"


def format_report(report: AuditReport, name: str) -> str:
    skipped = count(report.skipped_ranges)
    lines = [
        f"{name}: {report.steps} steps in the surviving lineage "
        f"({report.discarded_steps} executions discarded), stream of {report.stream_len}",
        f"  trained once  {report.trained_once:>8}",
        f"  skipped       {skipped:>8}  {_shown(expand(report.skipped_ranges), skipped)}",
        f"  duplicated    {len(report.duplicated):>8}  "
        f"{_shown(report.duplicated, len(report.duplicated))}",
        f"  dropped       {len(report.dropped):>8}  {_shown(report.dropped, len(report.dropped))}",
    ]
    if report.out_of_range:
        n = len(report.out_of_range)
        lines.append(f"  out of range  {n:>8}  {_shown(report.out_of_range, n)}")
    if report.window is not None:
        off = count(report.window_mismatch_ranges)
        lines.append(
            f"  window {report.window}: {off} steps off "
            f"{_shown(expand(report.window_mismatch_ranges), off)}"
        )
    lines.append("  OK" if report.clean else "  FAILED")
    return "\n".join(lines)
