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

The report is a frozen value computed by a pure function, so the simulator
uses the same code to check its own runs that a user runs on a real log.
The command line (``frontier_core._cli``) prints the report and exits 0
clean, 1 on any skip, duplicate, out-of-range ordinal or window mismatch, 2
on unreadable input.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import attrs

from ._trainlog import Lineage, fold_lineage, read_train_log


@attrs.frozen
class AuditReport:
    """The coverage of one log's surviving lineage over ``[0, stream_len)``.

    Ordinal tuples are ascending; ``window_mismatch`` lists the steps that
    did not train their window (empty unless a window was given).
    """

    stream_len: int
    steps: int
    discarded_steps: int
    trained_once: int
    skipped: tuple[int, ...]
    duplicated: tuple[int, ...]
    dropped: tuple[int, ...]
    out_of_range: tuple[int, ...]
    window: int | None = None
    window_mismatch: tuple[int, ...] = ()

    @property
    def clean(self) -> bool:
        """No skip, no duplicate, nothing out of range, every window right."""
        return not (self.skipped or self.duplicated or self.out_of_range or self.window_mismatch)

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_len": self.stream_len,
            "steps": self.steps,
            "discarded_steps": self.discarded_steps,
            "trained_once": self.trained_once,
            "skipped": len(self.skipped),
            "duplicated": len(self.duplicated),
            "dropped": len(self.dropped),
            "out_of_range": len(self.out_of_range),
            "window": self.window,
            "window_mismatch": list(self.window_mismatch),
            "skipped_ordinals": list(self.skipped),
            "duplicated_ordinals": list(self.duplicated),
            "dropped_ordinals": list(self.dropped),
            "out_of_range_ordinals": list(self.out_of_range),
            "clean": self.clean,
        }


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
    """
    if stream_len < 0:
        raise ValueError(f"stream_len must be >= 0, got {stream_len}")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    trained, dropped = coverage_counts(lineage)
    seen = set(trained) | set(dropped)
    duplicated = sorted(o for o in seen if trained[o] + dropped[o] > 1)
    once = sum(1 for o, n in trained.items() if n == 1 and not dropped[o] and o < stream_len)
    mismatch: list[int] = []
    if window is not None:
        # Every step of the stream must be present with exactly its window;
        # a step beyond the stream, or a missing one, is a mismatch too.
        # The expected steps are bounded by the stream; a logged step past
        # them is a mismatch as it stands, so the work is O(stream / window
        # + steps), never proportional to a step number written in the log.
        expected_steps = (stream_len + window - 1) // window
        for s in range(expected_steps):
            expected = range(s * window, min((s + 1) * window, stream_len))
            got = lineage.steps.get(s)
            if got is None or sorted(got) != list(expected):
                mismatch.append(s)
        mismatch.extend(s for s in lineage.steps if s >= expected_steps)
        mismatch.sort()
    return AuditReport(
        stream_len=stream_len,
        steps=len(lineage.steps),
        discarded_steps=lineage.discarded_steps,
        trained_once=once,
        skipped=tuple(o for o in range(stream_len) if o not in seen),
        duplicated=tuple(duplicated),
        dropped=tuple(sorted(o for o, n in dropped.items() if n == 1 and not trained[o])),
        out_of_range=tuple(sorted(o for o in seen if o >= stream_len)),
        window=window,
        window_mismatch=tuple(mismatch),
    )


def audit_log(
    path: str | os.PathLike[str], stream_len: int, *, window: int | None = None
) -> AuditReport:
    """Read, fold and audit the log at ``path``.

    Raises ``TrainLogError`` (with the line number) for bad input and
    ``OSError`` when the file cannot be read."""
    name = str(path)
    lineage = fold_lineage(read_train_log(path), path=name)
    return audit_lineage(lineage, stream_len, window=window)


def _shown(ordinals: tuple[int, ...], limit: int = 20) -> str:
    head = ", ".join(str(o) for o in ordinals[:limit])
    more = f", ... (+{len(ordinals) - limit} more)" if len(ordinals) > limit else ""
    return f"[{head}{more}]"


def format_report(report: AuditReport, name: str) -> str:
    lines = [
        f"{name}: {report.steps} steps in the surviving lineage "
        f"({report.discarded_steps} executions discarded), stream of {report.stream_len}",
        f"  trained once  {report.trained_once:>8}",
        f"  skipped       {len(report.skipped):>8}  {_shown(report.skipped)}",
        f"  duplicated    {len(report.duplicated):>8}  {_shown(report.duplicated)}",
        f"  dropped       {len(report.dropped):>8}  {_shown(report.dropped)}",
    ]
    if report.out_of_range:
        lines.append(
            f"  out of range  {len(report.out_of_range):>8}  {_shown(report.out_of_range)}"
        )
    if report.window is not None:
        lines.append(
            f"  window {report.window}: {len(report.window_mismatch)} steps off "
            f"{_shown(report.window_mismatch)}"
        )
    lines.append("  OK" if report.clean else "  FAILED")
    return "\n".join(lines)
