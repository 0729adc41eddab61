"""``frontier replay`` of sample-level traces: the sibling ops, the per-sample
report, hostile input, and the report catching a broken ledger."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import frontier_core._ledger as ledger_module
from frontier_core import Ledger, Sibling, Status
from frontier_core._replay import MAX_SAMPLES, Replayer, TraceError

from .._docs import section
from .test_replay import replay

Op = dict[str, Any]


def run(ops: list[Op]) -> list[Op]:
    """Feed ``ops`` to a fresh replayer; every output line, in order."""
    replayer = Replayer()
    out: list[Op] = []
    for line, op in enumerate(ops, start=1):
        out += replayer.feed(op, line)
    return out


def by_event(out: list[Op], event: str) -> list[Op]:
    return [x for x in out if x["event"] == event]


def clean(report: Op) -> bool:
    return not any(
        report[k] for k in ("lost", "duplicated", "incomplete", "fenced", "duplicated_attempts")
    )


cli = replay  # the CLI run of tests/core/test_replay.py: exit status, output lines, stderr


def group_of(n: int, **config: Any) -> list[Op]:
    """A one-group stream, stamped and dispatched."""
    return [
        {"op": "config", "stream_len": 1, "samples": n, **config},
        {"op": "stamp", "count": 1},
        {"op": "dispatch", "ordinals": [0]},
    ]


# -- each op ---------------------------------------------------------------------------


def test_config_selects_sample_mode_and_the_report_gains_the_per_sample_keys() -> None:
    prompt = run([{"op": "config", "stream_len": 0}, {"op": "finish"}])[-1]
    for config in ({"samples": 1}, {"granularity": "group"}, {"samples": 3}):
        report = run([{"op": "config", "stream_len": 0, **config}, {"op": "finish"}])[-1]
        assert set(report) - set(prompt) == {
            "samples",
            "incomplete",
            "fenced",
            "duplicated_attempts",
            "turns_redone",
            "tokens_redone",
            "calls_repeated",
            "fenced_answers",
            "at_most_once",
            "inexact",
        }
        assert clean(report) and report["samples"] == 0


@pytest.mark.parametrize("n", [1, 2, 5])
def test_dispatch_prints_one_fresh_lease_per_sibling(n: int) -> None:
    out = run(
        [
            {"op": "config", "stream_len": 3, "samples": n},
            {"op": "stamp", "count": 3},
            {"op": "dispatch", "ordinals": [2, 0]},
            {"op": "dispatch", "ordinals": [1]},
        ]
    )
    first, second = by_event(out, "dispatch")
    leases = first["leases"] + second["leases"]
    assert sorted((o, s) for o, s, _ in first["leases"]) == [
        (o, s) for o in (0, 2) for s in range(n)
    ]
    assert sorted((o, s) for o, s, _ in second["leases"]) == [(1, s) for s in range(n)]
    # Attempts are distinct across dispatches, and the output is ascending.
    assert len({a for _, _, a in leases}) == 3 * n
    assert first["leases"] == sorted(first["leases"])
    assert first["reused"] == first["landed"] == second["reused"] == second["landed"] == []


def test_seal_lands_a_group_at_its_last_sibling_and_fences_a_second_answer() -> None:
    ops = group_of(3)
    replayer = Replayer()
    for line, op in enumerate(ops, start=1):
        out = replayer.feed(op, line)
    leases = out[-1]["leases"]
    first = replayer.feed({"op": "seal", "leases": leases[:2]}, 4)[0]
    assert first == {"event": "seal", "sealed": leases[:2], "fenced": [], "landed": []}
    last = replayer.feed({"op": "seal", "leases": [leases[2], leases[0]]}, 5)[0]
    assert last == {"event": "seal", "sealed": [leases[2]], "fenced": [leases[0]], "landed": [0]}
    again = replayer.feed({"op": "seal", "leases": [leases[1]]}, 6)[0]
    assert again == {"event": "seal", "sealed": [], "fenced": [leases[1]], "landed": []}
    replayer.feed({"op": "train", "ordinals": [0]}, 7)
    report = replayer.feed({"op": "finish"}, 8)[0]
    assert clean(report) and report["trained"] == 1 and report["samples"] == 3


def test_fail_sample_under_sibling_granularity_restarts_only_that_sibling() -> None:
    out = run(
        [
            *group_of(2, on_failure="retry", max_failures=3),
            {"op": "fail_sample", "leases": [[0, 1, 1]]},
            {"op": "seal", "leases": [[0, 1, 1]]},  # late: the attempt failed
            {"op": "restart", "siblings": [[0, 1]]},
            {"op": "seal", "leases": [[0, 0, 0]]},
            {"op": "finish"},
        ]
    )
    failed, late, restarted, sealed, report = out[2:]
    assert failed == {
        "event": "fail_sample",
        "fenced": [],
        "restart": [[0, 1]],
        "requeued": [],
        "unstamped": [],
        "dropped": [],
    }
    assert late["sealed"] == [] and late["fenced"] == [[0, 1, 1]]
    [(o, s, a)] = restarted["leases"]
    assert (o, s) == (0, 1) and a >= 2  # a new attempt, above the dispatch's
    assert sealed["sealed"] == [[0, 0, 0]] and sealed["landed"] == []
    assert clean(report)


def test_fail_sample_under_group_granularity_requeues_the_group() -> None:
    out = run(
        [
            *group_of(2, on_failure="retry", granularity="group"),
            {"op": "seal", "leases": [[0, 0, 0]]},
            {"op": "fail_sample", "leases": [[0, 1, 1]]},
            {"op": "seal", "leases": [[0, 0, 0]]},
            {"op": "dispatch", "ordinals": [0]},
        ]
    )
    failed, late, again = out[3:]
    assert failed["requeued"] == [0] and failed["restart"] == []
    assert late["fenced"] == [[0, 0, 0]]
    # The whole group is generated again: the sealed sibling too.
    assert sorted((o, s) for o, s, _ in again["leases"]) == [(0, 0), (0, 1)]
    assert min(a for _, _, a in again["leases"]) >= 2


def test_a_failed_sample_under_drop_drops_its_group_on_record() -> None:
    out = run([*group_of(2), {"op": "fail_sample", "leases": [[0, 0, 0]]}, {"op": "finish"}])
    assert out[2]["dropped"] == [0]
    assert out[-1]["dropped"] == [0] and clean(out[-1])


def test_checkpoint_saves_the_counter_and_the_sealed_siblings_if_asked() -> None:
    base = [*group_of(2), {"op": "seal", "leases": [[0, 0, 0]]}]
    saved = run([*base, {"op": "checkpoint"}])[-1]
    unsaved = run([*base, {"op": "checkpoint", "save_sealed": False}])[-1]
    assert saved["next_attempt"] == unsaved["next_attempt"] == 2
    assert saved["sealed"] == [[0, 0, 0]] and unsaved["sealed"] == []
    assert saved["cut"] == 0 and saved["retained"] == []


def test_resume_reuses_what_the_checkpoint_and_the_journal_hold() -> None:
    base = [
        *group_of(3),
        {"op": "seal", "leases": [[0, 0, 0]]},
        {"op": "checkpoint"},
        {"op": "seal", "leases": [[0, 1, 1]]},  # after the checkpoint: journal only
        {"op": "kill"},
    ]
    cases = {
        "checkpoint and journal": ({"sealed": [[0, 1, 1]]}, [[0, 0, 0], [0, 1, 1]]),
        "checkpoint only": ({}, [[0, 0, 0]]),
        "journal only": ({"load_sealed": False, "sealed": [[0, 1, 1]]}, [[0, 1, 1]]),
        "both hold one sample": ({"sealed": [[0, 0, 0]]}, [[0, 0, 0]]),
        "nothing": ({"load_sealed": False}, []),
    }
    for name, (keys, held) in cases.items():
        out = run(
            [
                *base,
                {"op": "resume", "attempt_floor": 3, **keys},
                {"op": "stamp", "count": 1},
                {"op": "dispatch", "ordinals": [0]},
            ]
        )
        resume, _, dispatch = out[-3:]
        assert resume["reused"] == held and resume["ignored"] == [], name
        assert resume["next_attempt"] >= 3, name
        assert dispatch["reused"] == held, name
        started = {(o, s) for o, s, _ in dispatch["leases"]}
        assert started == {(0, s) for s in range(3)} - {(o, s) for o, s, _ in held}, name
        assert all(a >= 3 for _, _, a in dispatch["leases"]), name


def test_a_group_with_every_sibling_held_lands_at_its_dispatch() -> None:
    out = run(
        [
            *group_of(2),
            {"op": "checkpoint"},
            {"op": "seal", "leases": [[0, 0, 0], [0, 1, 1]]},
            {"op": "kill"},
            {"op": "resume", "sealed": [[0, 0, 0], [0, 1, 1]], "attempt_floor": 2},
            {"op": "stamp", "count": 1},
            {"op": "dispatch", "ordinals": [0]},
            {"op": "train", "ordinals": [0]},
            {"op": "finish"},
        ]
    )
    dispatch, report = out[-2:]
    assert dispatch["leases"] == [] and dispatch["landed"] == [0]
    assert clean(report) and report["trained"] == 1 and report["samples"] == 2


def test_a_restored_buffer_trains_the_samples_saved_with_it() -> None:
    out = run(
        [
            *group_of(2),
            {"op": "seal", "leases": [[0, 0, 0], [0, 1, 1]]},
            {"op": "checkpoint"},
            {"op": "kill"},
            {"op": "resume"},
            {"op": "train", "ordinals": [0]},
            {"op": "finish"},
        ]
    )
    assert out[-3]["retained"] == [0]
    assert clean(out[-1]) and out[-1]["samples"] == 2


def test_kill_loses_the_training_after_the_checkpoint_and_its_samples() -> None:
    out = run(
        [
            *group_of(1),
            {"op": "seal", "leases": [[0, 0, 0]]},
            {"op": "checkpoint", "save_buffer": False},
            {"op": "train", "ordinals": [0]},
            {"op": "kill"},
            {"op": "finish"},
            {"op": "resume", "load_replay_buffer": False, "attempt_floor": 1},
            {"op": "stamp", "count": 1},
            {"op": "dispatch", "ordinals": [0]},
            {"op": "seal", "leases": [[0, 0, 0]]},  # the pre-crash attempt: fenced
            {"op": "finish"},
        ]
    )
    dead, resume, _, dispatch, late, live = out[-6:]
    assert dead["trained"] == 0 and dead["samples"] == 0 and clean(dead)
    assert resume["rewind_to"] == 0
    assert [a for _, _, a in dispatch["leases"]] == [1]
    assert late["fenced"] == [[0, 0, 0]]
    assert clean(live) and live["samples"] == 0


# -- wrong traces are reported or refused --------------------------------------------


def test_a_group_buffered_whole_before_its_seals_is_reported_incomplete() -> None:
    out = run(
        [
            *group_of(3),
            {"op": "seal", "leases": [[0, 0, 0]]},
            {"op": "buffer", "ordinals": [0]},
            {"op": "train", "ordinals": [0]},
            {"op": "finish"},
        ]
    )
    report = out[-1]
    assert report["incomplete"] == [0] and report["samples"] == 1
    assert report["lost"] == report["duplicated"] == []


@pytest.mark.parametrize(
    ("ops", "words"),
    [
        ([{"op": "seal", "leases": [[0, 0, 0], [0, 0, 0]]}], "listed more than once"),
        ([{"op": "seal", "leases": [[0, 0, 7]]}], "never started"),
        ([{"op": "fail_sample", "leases": [[0, 1, 99]]}], "never started"),
        ([{"op": "restart", "siblings": [[0, 0]]}], "restart needs unstarted siblings"),
        ([{"op": "dispatch", "ordinals": [0]}], "illegal dispatch"),
        (
            [{"op": "checkpoint"}, {"op": "kill"}, {"op": "resume", "sealed": [[0, 0, 0]]}],
            "no seal accepted",
        ),
    ],
)
def test_illegal_sibling_ops_are_refused_and_change_nothing(ops: list[Op], words: str) -> None:
    replayer = Replayer()
    for line, op in enumerate(group_of(2), start=1):
        replayer.feed(op, line)
    *prefix, last = ops
    for line, op in enumerate(prefix, start=4):
        replayer.feed(op, line)
    before = (replayer.ledger, replayer.feed({"op": "finish"}, 90))
    line = 4 + len(prefix)
    with pytest.raises(TraceError, match=words) as info:
        replayer.feed(last, line)
    assert info.value.line == line
    assert (replayer.ledger, replayer.feed({"op": "finish"}, 91)) == before


# The report checks the replayer's own record, so a ledger that breaks its
# rules is caught even though it agrees with itself.


def test_a_ledger_that_accepts_a_stale_attempt_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        ledger_module, "current_attempt", lambda status, attempt, result: status is Sibling.RUNNING
    )
    out = run(
        [
            *group_of(2, on_failure="retry"),
            {"op": "fail_sample", "leases": [[0, 0, 0]]},
            {"op": "restart", "siblings": [[0, 0]]},
            {"op": "seal", "leases": [[0, 0, 0], [0, 1, 1]]},  # 0 is stale, 2 is current
            {"op": "train", "ordinals": [0]},
            {"op": "finish"},
        ]
    )
    assert out[-1]["fenced"] == [[0, 0, 0]] and not clean(out[-1])


@pytest.mark.parametrize("how", ["fail", "evict", "fail_sample"])
def test_a_resume_that_holds_a_seal_its_group_failed_with_trains_a_fenced_sample(
    how: str,
) -> None:
    # The group's seal (0, 0, 0) is abandoned by the failure: a journal voids
    # it, so a framework that still holds it after a kill trains a sample no
    # current attempt made. The checkpoint's saved copy is voided too.
    failure: list[Op] = {
        "fail": [{"op": "fail", "ordinals": [0]}],
        "evict": [
            {"op": "seal", "leases": [[0, 1, 1]]},
            {"op": "evict", "ordinals": [0]},
        ],
        "fail_sample": [{"op": "fail_sample", "leases": [[0, 1, 1]]}],
    }[how]
    life_1 = [
        *group_of(2, on_failure="retry", granularity="group"),
        {"op": "seal", "leases": [[0, 0, 0]]},
        {"op": "checkpoint", "save_sealed": True},
        *failure,
        {"op": "kill"},
    ]
    rest: list[Op] = [
        {"op": "stamp", "count": 1},
        {"op": "dispatch", "ordinals": [0]},
    ]
    held = run([*life_1, {"op": "resume", "sealed": [[0, 0, 0]], "attempt_floor": 2}, *rest])
    assert held[-1]["reused"] == [[0, 0, 0]]
    (fresh,) = held[-1]["leases"]
    report = run(
        [
            *life_1,
            {"op": "resume", "sealed": [[0, 0, 0]], "attempt_floor": 2},
            *rest,
            {"op": "seal", "leases": [fresh]},
            {"op": "train", "ordinals": [0]},
            {"op": "finish"},
        ]
    )[-1]
    assert report["fenced"] == [[0, 0, 0]] and not clean(report)
    # Without the journal's copy, the saved one is not held either.
    out = run([*life_1, {"op": "resume", "attempt_floor": 2}, *rest])
    assert out[-1]["reused"] == [] and len(out[-1]["leases"]) == 2


@pytest.mark.parametrize("held_by", ["journal", "checkpoint"])
def test_a_stale_sample_a_ledger_accepted_stays_fenced_across_a_kill(
    monkeypatch: pytest.MonkeyPatch, held_by: str
) -> None:
    # Life 1 accepts a stale seal and dies before training; life 2 holds the
    # sample (from the journal, or saved with the checkpoint) and trains it.
    monkeypatch.setattr(
        ledger_module, "current_attempt", lambda status, attempt, result: status is Sibling.RUNNING
    )
    stale = [
        *group_of(2, on_failure="retry"),
        {"op": "fail_sample", "leases": [[0, 0, 0]]},
        {"op": "restart", "siblings": [[0, 0]]},
        {"op": "seal", "leases": [[0, 0, 0]]},  # stale: attempt 2 is current
    ]
    if held_by == "journal":
        life_1 = [stale[0], {"op": "checkpoint"}, *stale[1:]]
        resume: Op = {"op": "resume", "sealed": [[0, 0, 0]], "attempt_floor": 3}
    else:
        life_1 = [*stale, {"op": "checkpoint"}]
        resume = {"op": "resume"}
    out = run(
        [
            *life_1,
            {"op": "kill"},
            resume,
            {"op": "stamp", "count": 1},
            {"op": "dispatch", "ordinals": [0]},
        ]
    )
    assert by_event(out, "seal")[-1]["sealed"] == [[0, 0, 0]]  # the broken ledger took it
    assert out[-3]["reused"] == [[0, 0, 0]]
    (fresh,) = out[-1]["leases"]
    report = run(
        [
            *life_1,
            {"op": "kill"},
            resume,
            {"op": "stamp", "count": 1},
            {"op": "dispatch", "ordinals": [0]},
            {"op": "seal", "leases": [fresh]},
            {"op": "train", "ordinals": [0]},
            {"op": "finish"},
        ]
    )[-1]
    assert report["samples"] == 2 and report["incomplete"] == []
    assert report["fenced"] == [[0, 0, 0]]


def test_a_checkpoint_holding_a_sample_no_seal_accepted_is_refused_at_the_resume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checkpoint = Ledger.checkpoint

    def inventive(self: Ledger, **kwargs: Any) -> Any:
        saved = checkpoint(self, **kwargs)
        if not saved.sealed:
            return saved
        # Saves sibling 1's handed-out attempt as sealed, though nothing sealed it.
        return attrs.evolve(saved, sealed=(*saved.sealed, (0, 1, 1)))

    monkeypatch.setattr(Ledger, "checkpoint", inventive)
    ops = [
        *group_of(2),
        {"op": "seal", "leases": [[0, 0, 0]]},
        {"op": "checkpoint"},
        {"op": "kill"},
    ]
    assert run(ops)[-1]["sealed"] == [[0, 0, 0], [0, 1, 1]]
    replayer = Replayer()
    for line, op in enumerate(ops, start=1):
        replayer.feed(op, line)
    with pytest.raises(TraceError, match=r"checkpoint's sealed holds .*no seal accepted") as info:
        replayer.feed({"op": "resume"}, 9)
    assert info.value.line == 9 and replayer.ledger is None
    # Without the checkpoint's siblings the resume holds only what was accepted.
    resumed = replayer.feed({"op": "resume", "load_sealed": False, "sealed": [[0, 0, 0]]}, 10)
    assert resumed[0]["reused"] == [[0, 0, 0]]


def test_a_ledger_that_lands_a_group_early_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    masks = ledger_module._masks

    def first_sibling_only(n: int) -> tuple[int, int, int]:
        _, _, absent = masks(n)
        return 0b11, int(Sibling.SEALED), absent

    monkeypatch.setattr(ledger_module, "_masks", first_sibling_only)
    out = run(
        [
            *group_of(2),
            {"op": "seal", "leases": [[0, 0, 0]]},
            {"op": "train", "ordinals": [0]},
            {"op": "finish"},
        ]
    )
    assert out[-2]["landed"] == [0]  # the broken ledger landed it
    assert out[-1]["incomplete"] == [0]


def test_a_ledger_that_reissues_attempts_after_a_resume_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resume = Ledger.resume

    def forgetful(*args: Any, **kwargs: Any) -> Any:
        resumed = resume(*args, **kwargs)
        checkpoint = args[1]
        ledger = resumed.ledger
        # Counts on from the checkpoint, ignoring the floor and what it holds.
        broken = Ledger(
            groups=ledger._groups,
            next_attempt=checkpoint.next_attempt,
            siblings=ledger._siblings,
        )
        return attrs.evolve(resumed, ledger=broken)

    monkeypatch.setattr(Ledger, "resume", classmethod(lambda cls, *a, **k: forgetful(*a, **k)))
    out = run(
        [
            {"op": "config", "stream_len": 2, "samples": 1},
            {"op": "checkpoint"},
            {"op": "stamp", "count": 2},
            {"op": "dispatch", "ordinals": [0]},
            {"op": "seal", "leases": [[0, 0, 0]]},
            {"op": "kill"},
            {"op": "resume", "sealed": [[0, 0, 0]], "attempt_floor": 1},
            {"op": "stamp", "count": 2},
            {"op": "dispatch", "ordinals": [1, 0]},
            {"op": "seal", "leases": [[1, 0, 0]]},
            {"op": "train", "ordinals": [0, 1]},
            {"op": "finish"},
        ]
    )
    assert out[-1]["duplicated_attempts"] == [[0, 0, 0], [1, 0, 0]]


# -- a random legal program reports clean -------------------------------------------


class Driver:
    """Plays a framework against the replayer: every op it sends is legal,
    results are drawn from every lease ever handed out (late, second and
    pre-crash answers included), and a crash holds what a journal would."""

    def __init__(self, data: st.DataObject, config: Op) -> None:
        self.data = data
        self.replayer = Replayer()
        self.line = 0
        self.handed: list[list[int]] = []
        self.accepted: dict[tuple[int, int], list[int]] = {}
        self.saved_sealed: list[list[int]] = []
        self.floor = 0
        self.send(config)

    def send(self, op: Op) -> list[Op]:
        self.line += 1
        note(json.dumps(op))
        out = self.replayer.feed(op, self.line)
        if op["op"] in ("fail", "evict"):
            self.void(op["ordinals"])  # a journal voids the groups a failure sent back
        for obj in out:
            self.handed += obj.get("leases", [])
            if obj["event"] == "fail_sample":
                self.void([*obj["requeued"], *obj["unstamped"], *obj["dropped"]])
            if obj["event"] == "seal":
                for o, s, a in obj["sealed"]:
                    self.accepted[(o, s)] = [o, s, a]
            if obj["event"] == "checkpoint":
                self.saved_sealed = obj["sealed"]
        return out

    def void(self, ordinals: list[int]) -> None:
        for key in [k for k in self.accepted if k[0] in ordinals]:
            del self.accepted[key]

    @property
    def ledger(self) -> Ledger:
        ledger = self.replayer.ledger
        assert isinstance(ledger, Ledger)
        return ledger

    def some(self, items: list[Any], most: int = 4) -> list[Any]:
        if not items:
            return []
        return self.data.draw(
            st.lists(st.sampled_from(items), unique_by=repr, min_size=1, max_size=max(1, most))
        )

    def step(self) -> None:
        if self.replayer.ledger is None:
            self.resume()
            return
        groups = self.ledger
        kind = self.data.draw(
            st.sampled_from(
                [
                    "stamp",
                    "dispatch",
                    "seal",
                    "seal",
                    "fail_sample",
                    "restart",
                    "restart",
                    "fail",
                    "evict",
                    "train",
                    "checkpoint",
                    "kill",
                ]
            )
        )
        status = {"dispatch": Status.PENDING, "fail": Status.OUTSTANDING}.get(kind, Status.BUFFERED)
        if kind == "stamp":
            self.send({"op": "stamp", "count": self.data.draw(st.integers(0, 3))})
        elif kind in ("dispatch", "fail", "evict", "train"):
            chosen = self.some(list(groups.ordinals(status)))
            if chosen:
                self.send({"op": kind, "ordinals": chosen})
        elif kind in ("seal", "fail_sample"):
            # Mostly current attempts, so that the run moves; sometimes stale
            # ones (late, second and pre-crash answers).
            pool = self.data.draw(st.sampled_from(["current", "current", "outstanding", "any"]))
            if pool == "current":
                leases = self.some([list(x) for x in self.ledger.running()])
            elif pool == "outstanding":
                # Stale attempts of groups that run again: the races.
                outstanding = set(groups.ordinals(Status.OUTSTANDING))
                leases = self.some([x for x in self.handed if x[0] in outstanding])
            else:
                leases = self.some(self.handed)
            if len({(o, s) for o, s, _ in leases}) == len(leases):
                self.send({"op": kind, "leases": leases})
        elif kind == "restart":
            n = self.ledger.config.samples
            unstarted = [
                [o, s]
                for o in groups.ordinals(Status.OUTSTANDING)
                for s in range(n)
                if (self.ledger.sibling(o, s) or (None,))[0] is Sibling.UNSTARTED
            ]
            chosen = self.some(unstarted)
            if chosen:
                self.send({"op": "restart", "siblings": chosen})
        elif kind == "checkpoint":
            self.send(
                {
                    "op": "checkpoint",
                    "save_buffer": self.data.draw(st.booleans()),
                    "save_sealed": self.data.draw(st.booleans()),
                }
            )
        else:
            self.floor = self.ledger.next_attempt
            self.send({"op": "kill"})

    def resume(self) -> None:
        # A journal replays the latest accepted attempt of each sibling; it
        # may have lost the tail, so hold any subset of them.
        journal = self.some(list(self.accepted.values()), most=len(self.accepted))
        if self.data.draw(st.booleans()):
            journal = []  # or no journal at all
        load_sealed = self.data.draw(st.booleans())
        saved_siblings = {(o, s) for o, s, _ in self.saved_sealed} if load_sealed else set()
        # One sample per sibling: a journal's copy of a saved one is the same.
        journal = [x for x in journal if (x[0], x[1]) not in saved_siblings]
        self.send(
            {
                "op": "resume",
                "load_replay_buffer": self.data.draw(st.booleans()),
                "load_sealed": load_sealed,
                "sealed": journal,
                "attempt_floor": self.floor,
            }
        )

    def drain(self) -> Op:
        """Run to the end of the stream, generating every sample."""
        if self.replayer.ledger is None:
            self.resume()
        n = self.ledger.config.samples
        for _ in range(200):
            groups = self.ledger
            if groups.drained:
                break
            self.send({"op": "stamp", "count": 4})
            pending = list(self.ledger.ordinals(Status.PENDING))
            if pending:
                self.send({"op": "dispatch", "ordinals": pending})
            unstarted = [
                [o, s]
                for o in self.ledger.ordinals(Status.OUTSTANDING)
                for s in range(n)
                if (self.ledger.sibling(o, s) or (None,))[0] is Sibling.UNSTARTED
            ]
            if unstarted:
                self.send({"op": "restart", "siblings": unstarted})
            running = [list(x) for x in self.ledger.running()]
            if running:
                self.send({"op": "seal", "leases": running})
            buffered = list(self.ledger.ordinals(Status.BUFFERED))
            if buffered:
                self.send({"op": "train", "ordinals": buffered})
        assert self.ledger.drained
        return self.send({"op": "finish"})[0]


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 3),
    retry=st.booleans(),
    granularity=st.sampled_from(["sibling", "group"]),
    steps=st.integers(0, 60),
)
def test_a_random_legal_program_drains_with_a_clean_report(
    data: st.DataObject, n: int, retry: bool, granularity: str, steps: int
) -> None:
    stream_len = 6
    driver = Driver(
        data,
        {
            "op": "config",
            "stream_len": stream_len,
            "samples": n,
            "granularity": granularity,
            "on_failure": "retry" if retry else "drop",
            "max_failures": 3,
        },
    )
    for _ in range(steps):
        driver.step()
        if data.draw(st.integers(0, 9)) == 0:
            report = driver.send({"op": "finish"})[0]
            assert clean(report), report
    report = driver.drain()
    assert clean(report), report
    assert report["trained"] + len(report["dropped"]) == stream_len
    assert report["samples"] == n * report["trained"]


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n=st.integers(1, 3), steps=st.integers(1, 40))
def test_a_seeded_wrong_result_is_fenced_or_refused(
    data: st.DataObject, n: int, steps: int
) -> None:
    """In a random legal program, a result under an attempt the sibling was
    never handed (another sibling's, an attempt not handed out yet) is
    fenced or refused, and the run still reports clean."""
    driver = Driver(data, {"op": "config", "stream_len": 6, "samples": n, "on_failure": "retry"})
    for _ in range(steps):
        driver.step()
    if driver.replayer.ledger is None or not driver.handed:
        return
    o, s, a = data.draw(st.sampled_from(driver.handed))
    wrong = data.draw(
        st.sampled_from(
            [
                [o, s, a + driver.ledger.next_attempt + 1],  # not handed out yet
                [o + 1, s, a],  # another group's attempt
                [o, (s + 1) % n, a] if n > 1 else [o, s, a],  # another sibling's
            ]
        )
    )
    if wrong not in driver.handed:
        name = data.draw(st.sampled_from(["seal", "fail_sample"]))
        try:
            out = driver.send({"op": name, "leases": [wrong]})
        except TraceError:
            pass
        else:
            assert out[0]["fenced"] == [wrong]
    assert clean(driver.drain())


# -- hostile input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "words"),
    [
        ({"op": "config", "samples": 0}, "samples must be in [1, 1024]"),
        ({"op": "config", "samples": 10**18}, f"samples must be in [1, {MAX_SAMPLES}]"),
        ({"op": "config", "samples": True}, "'samples' must be an int"),
        ({"op": "config", "samples": 2.0}, "'samples' must be an int"),
        ({"op": "config", "granularity": "prompt"}, "granularity must be 'sibling' or 'group'"),
        ({"op": "config", "granularity": ["sibling"]}, "granularity must be"),
        ({"op": "config", "samples": 2, "window": 3}, "unknown keys ['window']"),
    ],
)
def test_a_bad_config_is_refused_at_line_1(op: Op, words: str) -> None:
    with pytest.raises(TraceError) as info:
        Replayer().feed(op, 1)
    assert info.value.line == 1 and words in info.value.reason


@pytest.mark.parametrize(
    ("op", "words"),
    [
        ({"op": "seal"}, "missing ['leases']"),
        ({"op": "seal", "leases": [[0, 0, 0]], "extra": 1}, "unknown keys ['extra']"),
        ({"op": "seal", "leases": "0,0,0"}, "'leases' must be a list"),
        ({"op": "seal", "leases": [[0, 0]]}, "[ordinal, sibling, attempt]"),
        ({"op": "seal", "leases": [[0, 0, 0, 0]]}, "[ordinal, sibling, attempt]"),
        ({"op": "seal", "leases": [{"o": 0}]}, "[ordinal, sibling, attempt]"),
        ({"op": "seal", "leases": [[0, True, 0]]}, "must be an int"),
        ({"op": "seal", "leases": [[0, 0, -1]]}, "must be an int >= 0"),
        ({"op": "seal", "leases": [[0, 0, 1.0]]}, "must be an int"),
        ({"op": "seal", "leases": [[0, 2, 0]]}, "sibling 2 is not below samples=2"),
        ({"op": "seal", "leases": [[0, 10**18, 0]]}, "is not below samples=2"),
        ({"op": "seal", "leases": [[0, 0, 10**18]]}, "above 2**32 - 1"),
        ({"op": "seal", "leases": [[0, 0, 2**32 - 1]]}, "never started"),
        ({"op": "fail_sample", "leases": [[0, 0, 10**18]]}, "above 2**32 - 1"),
        ({"op": "restart", "siblings": [[0, 0, 0]]}, "[ordinal, sibling]"),
        ({"op": "restart", "siblings": [[0, 9]]}, "not below samples=2"),
        ({"op": "dispatch", "ordinals": list(range(1, 600_000))}, "split it"),
        ({"op": "checkpoint", "save_sealed": "yes"}, "'save_sealed' must be true or false"),
        ({"op": "resume"}, "resume without a kill"),
    ],
)
def test_a_bad_sibling_op_is_refused_naming_its_line(op: Op, words: str) -> None:
    replayer = Replayer()
    for line, good in enumerate(group_of(2), start=1):
        replayer.feed(good, line)
    with pytest.raises(TraceError) as info:
        replayer.feed(op, 4)
    assert info.value.line == 4 and words in info.value.reason, info.value.reason


@pytest.mark.parametrize(
    ("op", "words"),
    [
        ({"op": "resume", "sealed": [[0, 0, 10**18]]}, "above 2**32 - 1"),
        ({"op": "resume", "sealed": [[10**18, 0, 0]]}, "no seal accepted"),
        ({"op": "resume", "sealed": [[0, 5, 0]]}, "not below samples=2"),
        ({"op": "resume", "sealed": 7}, "'sealed' must be a list"),
        ({"op": "resume", "attempt_floor": 10**18}, "above 2**32"),
        ({"op": "resume", "attempt_floor": -1}, "'attempt_floor' must be an int >= 0"),
        ({"op": "resume", "load_sealed": 0}, "'load_sealed' must be true or false"),
        ({"op": "resume", "journal": []}, "unknown keys ['journal']"),
    ],
)
def test_a_bad_resume_is_refused_naming_its_line(op: Op, words: str) -> None:
    replayer = Replayer()
    for line, good in enumerate([*group_of(2), {"op": "kill"}], start=1):
        replayer.feed(good, line)
    with pytest.raises(TraceError) as info:
        replayer.feed(op, 5)
    assert info.value.line == 5 and words in info.value.reason, info.value.reason
    assert replayer.ledger is None  # still dead: nothing was applied


@pytest.mark.parametrize(
    "op",
    [
        {"op": "seal", "leases": []},
        {"op": "fail_sample", "leases": []},
        {"op": "restart", "siblings": []},
    ],
)
def test_a_sibling_op_without_a_sample_config_is_refused(op: Op) -> None:
    for prefix in ([], [{"op": "config", "stream_len": 4}], [{"op": "stamp", "count": 1}]):
        replayer = Replayer()
        for line, good in enumerate(prefix, start=1):
            replayer.feed(good, line)
        with pytest.raises(TraceError, match="sample-level op") as info:
            replayer.feed(op, len(prefix) + 1)
        assert info.value.line == len(prefix) + 1


def test_a_sample_config_after_the_first_op_is_refused() -> None:
    replayer = Replayer()
    replayer.feed({"op": "stamp", "count": 1}, 1)
    with pytest.raises(TraceError, match="config must be the first op"):
        replayer.feed({"op": "config", "samples": 2}, 2)


def hostile_lines() -> Iterator[bytes]:
    yield b'{"op": "seal", "leases": [[0, 0, ' + b"9" * 4000 + b"]]}"
    yield b'{"op": "resume", "attempt_floor": ' + b"9" * 4000 + b"}"
    yield b'{"op": "dispatch", "ordinals": [' + b"9" * 4000 + b"]}"


@pytest.mark.parametrize("bad", list(hostile_lines()))
def test_huge_numbers_are_refused_at_once_exit_2_after_the_good_lines(
    tmp_path: Path, bad: bytes
) -> None:
    trace = tmp_path / "trace.jsonl"
    good = [json.dumps(op).encode() for op in group_of(2)]
    if b"resume" in bad:
        good.append(b'{"op": "kill"}')
    trace.write_bytes(b"\n".join([*good, bad, b'{"op": "finish"}']) + b"\n")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", "replay", str(trace)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{trace}:{len(good) + 1}:" in proc.stderr and "Traceback" not in proc.stderr
    # The message may quote the line, no more: its size follows the input's.
    assert len(proc.stderr) < 3 * len(bad) + 500
    assert [json.loads(x)["event"] for x in proc.stdout.splitlines()] == ["stamp", "dispatch"]
    assert time.monotonic() - started < 60


def test_the_attempts_a_trace_starts_are_bounded_across_ops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bound per op held (1,000,000 attempts a dispatch), none across
    ops: a 28 KB trace of ``dispatch`` and ``fail`` of a thousand groups of
    1024 took 55 s and 830 MB. Now every attempt started comes from one
    budget for the trace: the base (lowered here to keep the run small)
    plus ``WORK_PER_BYTE`` a byte. Refused where the budget runs out, with
    every line before it replayed."""
    import io

    import frontier_core._replay as replay_module

    monkeypatch.setattr(replay_module, "MAX_STAMP", 50_000)
    groups = list(range(40))  # 40 groups of 1024: 40,960 attempts a dispatch
    lines = [
        json.dumps(op)
        for op in [
            {"op": "config", "samples": MAX_SAMPLES, "on_failure": "retry", "max_failures": 99},
            {"op": "stamp", "count": len(groups)},
            *[{"op": name, "ordinals": groups} for _ in range(20) for name in ("dispatch", "fail")],
        ]
    ]
    out = io.StringIO()
    with pytest.raises(TraceError, match="units of work") as info:
        replay_module.replay([x + "\n" for x in lines], out)
    assert info.value.line == 5  # the second dispatch
    started = sum(len(json.loads(x).get("leases", [])) for x in out.getvalue().splitlines())
    assert started == 40 * MAX_SAMPLES
    budget = 50_000 + replay_module.WORK_PER_BYTE * sum(len(x) + 1 for x in lines[:5])
    assert started + 40 * MAX_SAMPLES > budget  # the refused dispatch would pass it


# -- the command line ----------------------------------------------------------------


def test_the_cli_exits_0_on_a_clean_trace_and_on_a_reported_violation(tmp_path: Path) -> None:
    # Like the prompt-level replay, a coverage finding is printed, not an
    # exit status: ``replay`` answers 0 or 2.
    clean_trace: list[Op | str] = [
        *group_of(2),
        {"op": "seal", "leases": [[0, 0, 0], [0, 1, 1]]},
        {"op": "train", "ordinals": [0]},
        {"op": "finish"},
    ]
    code, out, err = cli(tmp_path, clean_trace)
    assert code == 0, err
    assert clean(out[-1]) and out[-1]["samples"] == 2
    violating: list[Op | str] = [
        *group_of(2),
        {"op": "buffer", "ordinals": [0]},
        {"op": "train", "ordinals": [0]},
        {"op": "finish"},
    ]
    code, out, err = cli(tmp_path, violating)
    assert code == 0, err
    assert out[-1]["incomplete"] == [0]


def test_the_cli_exits_2_naming_the_line_and_prints_nothing_after(tmp_path: Path) -> None:
    code, out, err = cli(
        tmp_path,
        [
            *group_of(2),
            {"op": "seal", "leases": [[0, 0, 0]]},
            {"op": "seal", "leases": [[0, 1, 5]]},
            {"op": "seal", "leases": [[0, 1, 1]]},
            {"op": "finish"},
        ],
    )
    assert code == 2
    assert [x["event"] for x in out] == ["stamp", "dispatch", "seal"]
    assert "trace.jsonl:5: " in err and "never started" in err and "Traceback" not in err


# -- docs/cli.md documents the format exactly ---------------------------------------


def readme_section() -> str:
    return section("cli.md", "`frontier replay`")


def test_the_readme_names_every_op_key_and_printed_key() -> None:
    from frontier_core._replay import _CONFIG_KEYS, _SAMPLE_SCHEMA

    section = readme_section()
    for name, (required, optional) in _SAMPLE_SCHEMA.items():
        assert f'"{name}"' in section, name
        for key in required | optional | (_CONFIG_KEYS if name == "config" else set()):
            assert f'"{key}":' in section, (name, key)
    out = run(
        [
            *group_of(2, on_failure="retry"),
            {"op": "fail_sample", "leases": [[0, 0, 0]]},
            {"op": "restart", "siblings": [[0, 0]]},
            {"op": "seal", "leases": [[0, 0, 2]]},
            {"op": "checkpoint"},
            {"op": "kill"},
            {"op": "resume"},
            {"op": "finish"},
        ]
    )
    for line in out:
        assert f'"event":"{line["event"]}"' in section
        for key in line:
            assert f'"{key}":' in section, (line["event"], key)
