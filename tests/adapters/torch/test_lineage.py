"""Checkpoint lineages follow ancestry, not step numbers: ``LATEST`` of a
checkpoint root and ``COMMIT`` of a multi-rank one.

A stateful test runs random programs of saves, resumes from
``previous=k``, damage to listed checkpoints and kills inside a save
against a naive model that keeps every checkpoint's true parent (what the
life that wrote it had resumed from, or its own previous save); the
regressions of the issue are spelled out on their own. The long run is

    FRONTIER_LINEAGE_EXAMPLES=2000 .venv/bin/python -m pytest \
        tests/adapters/torch/test_lineage.py
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

torch = pytest.importorskip("torch")

from frontier_adapters.checkpoints import CheckpointConflictError  # noqa: E402
from frontier_adapters.torch import (  # noqa: E402
    CheckpointFileError,
    CheckpointFileVersionError,
    DistributedCheckpointer,
    RankPart,
    committed_checkpoints,
    owned_groups,
    published_checkpoints,
    read_checkpoint,
    read_distributed_checkpoint,
    write_checkpoint,
)

from frontier_core import (  # noqa: E402
    Checkpoint,
    CheckpointCorruptError,
    CheckpointError,
    ShardCheckpoint,
    Share,
)

FP = "rows-v1"
KEEP = 3
_IDS = itertools.count(1)  # payloads unique across examples: no two manifests alike


class Crash(Exception):
    pass


def crash_at(point: str) -> Any:
    def hook(name: str) -> None:
        if name == point:
            raise Crash

    return hook


def digest(obj: dict[str, Any]) -> str:
    body = {k: v for k, v in obj.items() if k != "sha256"}
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def rewrite(path: Path, change: Any) -> None:
    """Apply ``change`` to a lineage file's document and re-seal it, as a
    forger (or an older version of the library) would."""
    doc = json.loads(path.read_text())
    change(doc)
    doc["sha256"] = digest(doc)
    path.write_text(json.dumps(doc))


# -- the two kinds of root, behind one interface -------------------------------------------


class Single:
    """A checkpoint root (``LATEST``): one process, ``write_checkpoint``."""

    lineage_file = "LATEST"
    files = ("state.json", "model.pt", "manifest.json")
    kills = ("state.json", "LATEST")  # before the rename; between the rename and LATEST

    def __init__(self, root: Path, explicit: bool) -> None:
        self.root, self.explicit = root, explicit
        self.parent: Path | None = None

    def resume(self, previous: int) -> tuple[str, int, int] | None:
        loaded = read_checkpoint(
            self.root, fingerprint=FP, require=["state", "model"], previous=previous
        )
        if loaded is None:
            self.parent = None
            return None
        payload = loaded.json_parts["state"]["id"]
        assert torch.equal(loaded.tensor_parts["model"]["w"], torch.tensor([float(payload)]))
        self.parent = loaded.path
        return loaded.path.name, loaded.step, payload

    def inspect(self) -> None:
        """A read of the newest that is not a resume: the life keeps its parent."""
        read_checkpoint(self.root, fingerprint=FP)

    def begin_life(self) -> None:
        pass

    def save(self, step: int, payload: int, kill: str | None) -> str:
        path = write_checkpoint(
            self.root,
            step,
            fingerprint=FP,
            json_parts={"state": {"id": payload}},
            tensor_parts={"model": {"w": torch.tensor([float(payload)])}},
            keep=KEEP,
            between_parts=None if kill is None else crash_at(kill),
            **({"parent": self.parent} if self.explicit else {}),
        )
        self.parent = path
        return path.name

    def lineage(self) -> list[str]:
        return [p.name for p in published_checkpoints(self.root)]

    def dirs(self) -> set[str]:
        return {p.name for p in self.root.glob("ckpt-*")}


class Multi:
    """A multi-rank root (``COMMIT``): two ranks' parts written by one
    process, a ``DistributedCheckpointer`` per life."""

    lineage_file = "COMMIT"
    files = ("rank-00000-of-00002.json", "rank-00000-of-00002.pt", "rank-00001-of-00002.json")
    kills = ("part", "commit")  # a torn checkpoint; every part written, no commit

    def __init__(self, root: Path, explicit: bool) -> None:
        self.root, self.explicit = root, explicit
        self.loaded: Any = None
        self.ck: DistributedCheckpointer | None = None

    def resume(self, previous: int) -> tuple[str, int, int] | None:
        self.ck = None
        loaded = read_distributed_checkpoint(self.root, fingerprint=FP, previous=previous)
        self.loaded = loaded
        if loaded is None:
            return None
        payload = loaded.parts[0].json_part["id"]
        assert [p.json_part for p in loaded.parts] == [{"id": payload, "rank": r} for r in (0, 1)]
        assert torch.equal(loaded.parts[0].tensor_part["w"], torch.tensor([float(payload)]))
        return loaded.path.name, loaded.step, payload

    def inspect(self) -> None:
        read_distributed_checkpoint(self.root, fingerprint=FP)

    def begin_life(self) -> None:
        self.ck = DistributedCheckpointer(
            self.root,
            rank=0,
            world=2,
            fingerprint=FP,
            comm=None,
            keep=KEEP,
            **({"resumed_from": self.loaded} if self.explicit else {}),
        )

    def save(self, step: int, payload: int, kill: str | None) -> str:
        ck = self.ck
        assert ck is not None
        ck.hook = None if kill is None else crash_at(kill)
        parts = [
            ck.write_part(
                step,
                {"id": payload, "rank": r},
                {"w": torch.tensor([float(payload)])} if r == 0 else None,
                rank=r,
            )
            for r in (0, 1)
        ]
        return ck.commit(step, parts).name

    def lineage(self) -> list[str]:
        return [p.name for p in committed_checkpoints(self.root)]

    def dirs(self) -> set[str]:
        return {p.name for p in self.root.glob("step-*")}


# -- the naive model and the machine -----------------------------------------------------------


class LineageMachine(RuleBasedStateMachine):
    """Random saves, resumes, damage and kills; after every step the
    published lineage is the model's and a chain of true ancestry.

    The model names a checkpoint by its payload (unique for ever: a
    directory name can come back once the directory was pruned) and keeps
    its true parent: what the life that wrote it continued."""

    backend_cls: type[Single] | type[Multi] = Single
    explicit = False

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="frontier-lineage-"))
        self.backend = self.backend_cls(self.tmp / "root", self.explicit)
        self.name: dict[int, str] = {}  # node -> its directory
        self.step_of: dict[int, int] = {}
        self.true_parent: dict[int, int | None] = {}
        self.chain: list[int] = []  # the nodes the root must list, newest first
        self.damaged: set[int] = set()
        self.removed: set[int] = set()  # damaged by removing the directory
        # The life: alive after a resume that returned; head is what it continues.
        self.alive = False
        self.head: int | None = None
        self.step = 0
        self.saved_this_life: set[int] = set()

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _ancestors(self, node: int) -> list[int]:
        out, parent = [], self.true_parent[node]
        while parent is not None:
            out.append(parent)
            parent = self.true_parent[parent]
        return out

    # Named to sort first: Hypothesis draws the first rule (by name) most.
    @precondition(lambda self: self.alive)
    @rule(gap=st.sampled_from([1, 0, 2, 5]), kill=st.sampled_from([None] * 5 + [0, 1]))
    def checkpoint(self, gap: int, kill: int | None) -> None:
        step = self.step + gap
        while self.backend_cls is Multi and step in self.saved_this_life:
            step += 1  # a session writes each step once
        point = None if kill is None else self.backend.kills[kill]
        node = next(_IDS)
        note(f"save(step={step}, kill={point!r})")
        if point is not None:
            with pytest.raises(Crash):
                self.backend.save(step, node, point)
            self.alive = False  # the process died; the lineage is unchanged
            return
        name = self.backend.save(step, node, None)
        assert name not in {self.name[c] for c in self.chain}, "a listed name reused"
        # The parent: the newest of lower step on the ancestry of the head.
        start = self.chain.index(self.head) if self.head is not None else len(self.chain)
        below = [i for i in range(start, len(self.chain)) if self.step_of[self.chain[i]] < step]
        self.chain = [node, *(self.chain[below[0] :] if below else [])][:KEEP]
        self.name[node], self.step_of[node], self.true_parent[node] = name, step, self.head
        self.head, self.step = node, step
        self.saved_this_life.add(step)
        kept = {self.name[c] for c in self.chain if c not in self.removed}
        assert self.backend.dirs() == kept, "pruning kept or lost a directory"

    @initialize()
    def first_life(self) -> None:
        self.resume(0)

    @rule(previous=st.sampled_from([0, 1, 0, 1, 2, KEEP]))  # rollbacks often, one too far
    def resume(self, previous: int) -> None:
        """A new life, as a trainer resumes: read the checkpoint ``previous``
        back, and on damage the one before it, and so on. Every read is
        checked against the model: a sound listed checkpoint reads back as
        saved, a damaged one raises naming a file, one past the end of the
        lineage raises, a root with a lineage never reads as empty."""
        note(f"resume(previous={previous})")
        self.alive, self.saved_this_life = False, set()
        for k in itertools.count(previous):
            want = self.chain[k] if k < len(self.chain) else None
            try:
                got = self.backend.resume(k)
            except CheckpointError as exc:
                assert str(self.backend.root) in str(exc)
                assert self.chain, f"no checkpoint, yet {exc}"
                if want is None:
                    assert f"no checkpoint {k} back" in str(exc)
                    return  # nothing sound to resume: the life never starts
                assert want in self.damaged, f"{self.name[want]} is sound, yet {exc}"
                continue
            break
        if got is None:
            assert not self.chain, "a root with a lineage read as a fresh start"
            self.head, self.step = None, 0
        else:
            assert want is not None and want not in self.damaged
            assert got == (self.name[want], self.step_of[want], want)
            self.head, self.step = want, self.step_of[want]
            if self.explicit and self.chain[0] not in self.damaged:
                self.backend.inspect()  # the explicit parent must still win
        self.backend.begin_life()
        self.alive = True

    # Keep one listed checkpoint sound, so that a life can always resume.
    @precondition(lambda self: len(set(self.chain) - self.damaged) >= 2)
    @rule(index=st.integers(0, KEEP - 1), how=st.sampled_from(["rm", "truncate", "flip", "unlink"]))
    def damage(self, index: int, how: str) -> None:
        node = self.chain[index % len(self.chain)]
        directory = self.backend.root / self.name[node]
        note(f"damage({self.name[node]}, {how})")
        if not directory.is_dir():
            return
        file = directory / self.backend.files[index % len(self.backend.files)]
        if how == "rm":
            shutil.rmtree(directory)
            self.removed.add(node)
        elif not file.exists():
            return
        elif how == "truncate":
            file.write_bytes(file.read_bytes()[:-1])
        elif how == "flip":
            data = bytearray(file.read_bytes())
            data[len(data) // 2] ^= 0x10
            file.write_bytes(bytes(data))
        else:
            file.unlink()
        self.damaged.add(node)

    @invariant()
    def the_lineage_is_the_models_and_a_chain_of_ancestry(self) -> None:
        listed = self.backend.lineage()
        assert listed == [self.name[c] for c in self.chain], (listed, self.chain)
        for child, parent in itertools.pairwise(self.chain):
            assert parent in self._ancestors(child), f"{parent} is not an ancestor of {child}"


STATEFUL = settings(
    max_examples=int(os.environ.get("FRONTIER_LINEAGE_EXAMPLES", "40")),
    stateful_step_count=14,
    deadline=None,
    derandomize="FRONTIER_LINEAGE_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class SingleNoted(LineageMachine):
    backend_cls = Single
    explicit = False


class SingleExplicit(LineageMachine):
    backend_cls = Single
    explicit = True


class MultiNoted(LineageMachine):
    backend_cls = Multi
    explicit = False


class MultiExplicit(LineageMachine):
    backend_cls = Multi
    explicit = True


@pytest.mark.parametrize(
    "machine",
    [SingleNoted, SingleExplicit, MultiNoted, MultiExplicit],
    ids=lambda m: m.__name__,
)
def test_random_programs_keep_the_lineage_a_chain_of_ancestry(machine: type) -> None:
    machine.TestCase.settings = STATEFUL
    machine.TestCase().runTest()


# -- the regressions --------------------------------------------------------------------


def _save(root: Path, step: int, **kw: Any) -> Path:
    return write_checkpoint(
        root,
        step,
        fingerprint=FP,
        json_parts={"state": {"step": step}},
        tensor_parts={"model": {"w": torch.full((2,), float(step))}},
        keep=3,
        **kw,
    )


def _names(root: Path) -> list[str]:
    return [p.name for p in published_checkpoints(root)]


@pytest.mark.parametrize("explicit", [False, True])
def test_a_rollback_then_a_damaged_newest_falls_back_along_its_own_ancestry(
    tmp_path: Path, explicit: bool
) -> None:
    """[12, 9] -> resume previous=1 (step 9) -> save 13 -> damage 13: the
    fall-back is 9, never 12 of the abandoned branch."""
    _save(tmp_path, 9)
    _save(tmp_path, 12)
    loaded = read_checkpoint(tmp_path, fingerprint=FP, previous=1)
    assert loaded is not None and loaded.step == 9
    if explicit:
        read_checkpoint(tmp_path, fingerprint=FP)  # an inspection read between
    _save(tmp_path, 13, **({"parent": loaded} if explicit else {}))
    assert _names(tmp_path) == ["ckpt-000013", "ckpt-000009"]
    assert not (tmp_path / "ckpt-000012").exists()
    (tmp_path / "ckpt-000013" / "model.pt").write_bytes(b"damaged")
    with pytest.raises(CheckpointFileError, match=r"model\.pt"):
        read_checkpoint(tmp_path, fingerprint=FP)
    back = read_checkpoint(tmp_path, fingerprint=FP, previous=1)
    assert back is not None and back.step == 9
    latest = json.loads((tmp_path / "LATEST").read_text())
    assert [(e["name"], e["parent"]) for e in latest["lineage"]] == [
        ("ckpt-000013", "ckpt-000009"),
        ("ckpt-000009", None),
    ]


def test_a_damaged_newest_is_dropped_from_the_lineage_at_the_next_save(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        _save(tmp_path, step)
    (tmp_path / "ckpt-000003" / "state.json").write_text("{}")
    with pytest.raises(CheckpointFileError):
        read_checkpoint(tmp_path, fingerprint=FP)
    older = read_checkpoint(tmp_path, fingerprint=FP, previous=1)
    assert older is not None and older.step == 2
    _save(tmp_path, 4)  # the next step of the life resumed from 2
    assert _names(tmp_path) == ["ckpt-000004", "ckpt-000002", "ckpt-000001"]
    assert not (tmp_path / "ckpt-000003").exists()


def _commit(root: Path, step: int, **kw: Any) -> Path:
    ck = DistributedCheckpointer(root, rank=0, world=2, fingerprint=FP, comm=None, keep=3, **kw)
    return ck.commit(step, [ck.write_part(step, {"step": step}, rank=r) for r in (0, 1)])


@pytest.mark.parametrize("explicit", [False, True])
def test_a_multi_rank_rollback_falls_back_along_its_own_ancestry(
    tmp_path: Path, explicit: bool
) -> None:
    nine = _commit(tmp_path, 9)
    _commit(tmp_path, 12)
    loaded = read_distributed_checkpoint(tmp_path, fingerprint=FP, previous=1)
    assert loaded is not None and loaded.step == 9
    if explicit:
        read_distributed_checkpoint(tmp_path, fingerprint=FP)
    thirteen = _commit(tmp_path, 13, **({"resumed_from": loaded} if explicit else {}))
    assert [p.name for p in committed_checkpoints(tmp_path)] == [thirteen.name, nine.name]
    (thirteen / "rank-00001-of-00002.json").write_text("{}")
    with pytest.raises(CheckpointFileError, match="rank-00001"):
        read_distributed_checkpoint(tmp_path, fingerprint=FP)
    back = read_distributed_checkpoint(tmp_path, fingerprint=FP, previous=1)
    assert back is not None and back.step == 9
    doc = json.loads((tmp_path / "COMMIT").read_text())
    assert [e["parent"] for e in doc["lineage"]] == [nine.name, None]


# -- what a write is told it continues ------------------------------------------------------------


def test_a_parent_must_be_a_published_checkpoint_of_the_root(tmp_path: Path) -> None:
    root, other = tmp_path / "root", tmp_path / "other"
    _save(root, 1)
    _save(root, 2)
    _save(other, 1)
    before = sorted(p.name for p in root.iterdir()), (root / "LATEST").read_bytes()
    with pytest.raises(ValueError, match="is not a checkpoint of"):
        _save(root, 3, parent=other / "ckpt-000001")
    with pytest.raises(TypeError, match="loaded checkpoint or a path"):
        _save(root, 3, parent=1)  # type: ignore[arg-type]
    with pytest.raises(CheckpointFileError, match="ckpt-000007 is not on the published") as info:
        _save(root, 3, parent="ckpt-000007")
    assert info.value.path == str(root / "LATEST")
    assert (sorted(p.name for p in root.iterdir()), (root / "LATEST").read_bytes()) == before
    # The same checkpoint by its path, by its name, or as loaded.
    loaded = read_checkpoint(root, fingerprint=FP)
    assert loaded is not None
    read_checkpoint(root, fingerprint=FP, previous=1)
    assert _save(root, 3, parent=loaded).name == "ckpt-000003"
    assert _names(root) == ["ckpt-000003", "ckpt-000002", "ckpt-000001"]
    _save(root, 4, parent="ckpt-000002")
    assert _names(root) == ["ckpt-000004", "ckpt-000002", "ckpt-000001"]
    with pytest.raises(CheckpointFileError, match="rank 0 could not prepare"):
        DistributedCheckpointer(
            tmp_path / "multi", rank=0, world=1, fingerprint=FP, comm=None, resumed_from="x"
        )


def test_a_step_written_again_continues_the_ancestry_below_it(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        _save(tmp_path, step)
    read_checkpoint(tmp_path, fingerprint=FP)  # resumed from 3, which writes 2 again
    assert _save(tmp_path, 2).name == "ckpt-000002-1"
    assert _names(tmp_path) == ["ckpt-000002-1", "ckpt-000001"]


def test_a_process_that_read_nothing_continues_the_newest(tmp_path: Path) -> None:
    """In a new process (nothing read or written there), a write continues
    the newest published checkpoint, as before the lineage held parents."""
    for step in (1, 2):
        _save(tmp_path, step)
    read_checkpoint(tmp_path, fingerprint=FP, previous=1)  # this process only
    code = (
        "import sys, torch\n"
        "from frontier_adapters.torch import write_checkpoint\n"
        f"write_checkpoint(sys.argv[1], 3, fingerprint={FP!r}, json_parts={{'s': 3}}, keep=3)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=120)
    assert _names(tmp_path) == ["ckpt-000003", "ckpt-000002", "ckpt-000001"]


# -- the lineage file: old versions, forged chains, an empty lineage ------------------------------


def _to_version_1(doc: dict[str, Any]) -> None:
    doc["version"] = 1
    doc.pop("owner", None)  # COMMIT's, since version 3
    doc.pop("epoch", None)  # LATEST's, since version 3
    for entry in doc["lineage"]:
        del entry["parent"]


def test_a_version_1_latest_is_read_as_the_chain_it_lists(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        _save(tmp_path, step)
    rewrite(tmp_path / "LATEST", _to_version_1)
    assert _names(tmp_path) == ["ckpt-000003", "ckpt-000002", "ckpt-000001"]
    older = read_checkpoint(tmp_path, fingerprint=FP, previous=1)
    assert older is not None and older.step == 2
    _save(tmp_path, 4)  # continues 2: the next write is version 3, with parents
    doc = json.loads((tmp_path / "LATEST").read_text())
    assert doc["version"] == 3
    assert [(e["name"], e["parent"]) for e in doc["lineage"]] == [
        ("ckpt-000004", "ckpt-000002"),
        ("ckpt-000002", "ckpt-000001"),
        ("ckpt-000001", None),
    ]
    rewrite(tmp_path / "LATEST", lambda d: d.update(version=4))
    with pytest.raises(CheckpointFileVersionError, match="version 3"):
        read_checkpoint(tmp_path, fingerprint=FP)


def test_a_version_1_commit_is_read_as_the_chain_it_lists(tmp_path: Path) -> None:
    dirs = [_commit(tmp_path, step).name for step in (1, 2)]
    rewrite(tmp_path / "COMMIT", _to_version_1)
    assert [p.name for p in committed_checkpoints(tmp_path)] == dirs[::-1]
    loaded = read_distributed_checkpoint(tmp_path, fingerprint=FP)
    assert loaded is not None and loaded.step == 2
    three = _commit(tmp_path, 3)
    doc = json.loads((tmp_path / "COMMIT").read_text())
    assert doc["version"] == 3
    assert [(e["dir"], e["parent"]) for e in doc["lineage"]] == [
        (three.name, dirs[1]),
        (dirs[1], dirs[0]),
        (dirs[0], None),
    ]


def test_a_version_2_commit_is_read_and_its_writer_fenced_by_a_new_build(
    tmp_path: Path,
) -> None:
    dirs = [_commit(tmp_path, step).name for step in (1, 2)]
    old = DistributedCheckpointer(tmp_path, rank=0, world=1, fingerprint=FP, comm=None)
    rewrite(tmp_path / "COMMIT", lambda d: (d.update(version=2), d.pop("owner")))
    assert [p.name for p in committed_checkpoints(tmp_path)] == dirs[::-1]
    DistributedCheckpointer(tmp_path, rank=0, world=1, fingerprint=FP, comm=None)
    doc = json.loads((tmp_path / "COMMIT").read_text())
    assert doc["version"] == 3 and [e["dir"] for e in doc["lineage"]] == dirs[::-1]
    with pytest.raises(CheckpointConflictError):
        old.save(3, {})


@pytest.mark.parametrize("owner", [None, 7, "../x", "0" * 15])
def test_a_forged_commit_owner_is_refused(tmp_path: Path, owner: Any) -> None:
    _commit(tmp_path, 1)
    rewrite(tmp_path / "COMMIT", lambda d: d.update(owner=owner))
    with pytest.raises(CheckpointFileError, match="bad owner"):
        committed_checkpoints(tmp_path)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda d: d["lineage"][0].update(parent="ckpt-000001"), "must be a chain of ancestry"),
        (lambda d: d["lineage"][0].update(parent=None), "must be a chain of ancestry"),
        (lambda d: d["lineage"][-1].update(parent="ckpt-000009"), "not of a lower step"),
        (lambda d: d["lineage"][-1].update(parent="../x"), "bad parent"),
        (lambda d: d["lineage"][1].update(parent=7), "bad parent"),
        (lambda d: d["lineage"][0].pop("parent"), "bad lineage entry"),
    ],
)
def test_a_forged_chain_of_parents_is_refused(tmp_path: Path, change: Any, match: str) -> None:
    for step in (1, 2, 3):
        _save(tmp_path, step)
    rewrite(tmp_path / "LATEST", change)
    with pytest.raises(CheckpointFileError, match=match) as info:
        read_checkpoint(tmp_path, fingerprint=FP)
    assert info.value.path == str(tmp_path / "LATEST")
    with pytest.raises(CheckpointFileError, match=match):
        _save(tmp_path, 4)


def test_an_empty_lineage_beside_more_than_a_kill_leaves_is_refused(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    rewrite(tmp_path / "LATEST", lambda d: d.update(lineage=[]))
    with pytest.raises(CheckpointFileError, match="lists no checkpoint, but the root holds 2"):
        read_checkpoint(tmp_path, fingerprint=FP)
    with pytest.raises(CheckpointFileError, match="fresh start"):
        _save(tmp_path, 3)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-000001", "ckpt-000002"]
    # One directory beside it is what a kill leaves: no checkpoint yet.
    shutil.rmtree(tmp_path / "ckpt-000002")
    assert read_checkpoint(tmp_path, fingerprint=FP) is None


def test_kills_before_the_first_publish_leave_at_most_one_directory(tmp_path: Path) -> None:
    """Two lives killed between the rename and LATEST at different first
    steps: the second removed the first's dead directory before renaming
    its own, so the root still reads as empty, and a third life writes."""
    for step in (5, 3):
        with pytest.raises(Crash):
            _save(tmp_path, step, between_parts=crash_at("LATEST"))
        assert read_checkpoint(tmp_path, fingerprint=FP) is None
    assert [p.name for p in tmp_path.glob("ckpt-*")] == ["ckpt-000003"]
    _save(tmp_path, 1)
    assert _names(tmp_path) == ["ckpt-000001"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".store-lock", "LATEST", "ckpt-000001"]


# -- owned_groups checks the parts' buffers against the record -------------------------------------


def _record(share: Share, retained: tuple[tuple[int, int], ...]) -> ShardCheckpoint:
    checkpoint = Checkpoint(cut=0, retained=retained, fingerprint=share.fingerprint(FP))
    return ShardCheckpoint(share, 4, checkpoint)


def test_owned_groups_of_a_record_are_exactly_its_retained_ones() -> None:
    share = Share(0, 2, 1)  # global ordinals 1, 3, 5, 7, ...
    record = _record(share, ((0, 2),))  # retains global 1 and 3
    parts = [
        RankPart(0, {"buffer": {"1": "a", "2": "b"}}, None),
        RankPart(1, {"buffer": {"3": "c", "4": "d"}}, None),
    ]
    assert owned_groups(parts, "buffer", record) == {1: "a", 3: "c"}
    assert owned_groups(parts, "buffer", share) == {1: "a", 3: "c"}  # a bare share: unchecked
    removed = [parts[0], RankPart(1, {"buffer": {"4": "d"}}, None)]
    with pytest.raises(CheckpointCorruptError, match=r"1 retained without a saved group \[3\]"):
        owned_groups(removed, "buffer", record)
    extra = [*parts, RankPart(2, {"buffer": {"5": "e"}}, None)]
    with pytest.raises(CheckpointCorruptError, match=r"1 saved but not retained \[5\]"):
        owned_groups(extra, "buffer", record)
    twice = [*parts, RankPart(2, {"buffer": {"3": "c"}}, None)]
    with pytest.raises(CheckpointCorruptError, match="saved by another part too"):
        owned_groups(twice, "buffer", record)
    for key in ("01", "-1", " 3", "1_0", "9" * 30):
        with pytest.raises(CheckpointCorruptError, match="not an ordinal"):
            owned_groups([RankPart(0, {"buffer": {key: 1}}, None)], "buffer", share)


def test_owned_groups_cost_the_ranges_not_the_ordinals_they_span() -> None:
    """A record retaining 10^12 ordinals and one saved group: refused at
    once (a check that expanded the range would run for days)."""
    share = Share(0, 1, 0)
    record = _record(share, ((5, 10**12),))
    with pytest.raises(
        CheckpointCorruptError, match=r"999999999994 retained .* \[6, 7, 8, 9, 10\]"
    ):
        owned_groups([RankPart(0, {"buffer": {"5": "g"}}, None)], "buffer", record)
