"""Elastic resume in the torch binding: the sampler's share, the rank
collector, multi-rank all-or-nothing checkpoints, an in-process run across
world-size changes, and the example of docs/elastic.md. The torchrun kill test is
``test_elastic_kill.py``."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

import torch
from frontier_adapters.torch import (
    CheckpointFileError,
    DatasetChangedError,
    DistributedCheckpointer,
    RankCollector,
    RankPart,
    SeekableSampler,
    SeekableSource,
    committed_checkpoints,
    make_seekable_loader,
    owned_groups,
    read_distributed_checkpoint,
)
from frontier_adapters.torch._distributed import WrittenPart

from frontier_core import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    FailurePolicy,
    LedgerConfig,
    ShardMismatchError,
    Share,
    reshard,
)

from ..._docs import ROOT, filename, python_blocks
from ..._threads import on_threads as _on_threads

FP = "rows-v1"

# -- the sampler's share ----------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [True, False])
def test_the_shares_of_a_sampler_tile_the_global_order(shuffle: bool) -> None:
    whole = [index for _, index in SeekableSampler(7, seed=3, shuffle=shuffle, epochs=3)]
    for world in (1, 2, 3, 5, 9):
        for base in (0, 4, 7, 20, 21):
            got: dict[int, int] = {}
            for share in Share.tiling(world, base=base):
                sampler = SeekableSampler(7, seed=3, shuffle=shuffle, epochs=3, share=share)
                assert sampler.stream_len == share.local_len(21)
                items = list(sampler)
                assert [o for o, _ in items] == list(range(len(items)))
                for local, index in items:
                    got[share.global_ordinal(local)] = index
                for k in sorted({0, min(1, len(items)), len(items) // 2, len(items)}):
                    sampler.seek(k)
                    assert list(sampler) == items[k:]
            assert got == {g: whole[g] for g in range(base, 21)}


def test_a_sharded_sampler_state_names_its_share_and_refuses_another() -> None:
    share = Share(4, 3, 1)
    sampler = SeekableSampler(10, seed=1, epochs=2, share=share)
    sampler.seek(2)
    state = sampler.state_dict()
    assert state["share"] == {"base": 4, "world": 3, "rank": 1}
    again = SeekableSampler(10, seed=1, epochs=2, share=share)
    again.load_state_dict(state)
    assert again.position == 2
    with pytest.raises(CheckpointMismatchError, match="reshard"):
        SeekableSampler(10, seed=1, epochs=2, share=Share(4, 3, 2)).load_state_dict(state)
    with pytest.raises(CheckpointMismatchError, match="one rank's share"):
        SeekableSampler(10, seed=1, epochs=2).load_state_dict(state)
    whole = SeekableSampler(10, seed=1, epochs=2).state_dict()
    assert "share" not in whole  # the unsharded state is unchanged
    with pytest.raises(CheckpointMismatchError, match="whole stream"):
        sampler.load_state_dict(whole)
    with pytest.raises(CheckpointCorruptError):
        sampler.load_state_dict({**state, "share": {"base": 4}})
    with pytest.raises(TypeError):
        SeekableSampler(10, share=(0, 1, 0))  # type: ignore[arg-type]


# -- the rank collector ---------------------------------------------------------------------


def _collector(rows: list[Any], share: Share, *, epochs: int = 2, batch: int = 3) -> RankCollector:
    loader = make_seekable_loader(
        rows, batch_size=batch, seed=5, epochs=epochs, share=share, stateful=False
    )
    config = LedgerConfig(
        stream_len=epochs * len(rows),
        on_failure=FailurePolicy.RETRY,
        max_failures=2,
        fingerprint=FP,
    )
    return RankCollector(SeekableSource(loader), config, share)


def test_a_rank_collector_speaks_global_ordinals() -> None:
    rows = list(range(100, 111))
    share = Share(0, 3, 2)
    c = _collector(rows, share)
    taken = c.take(4)
    assert [o for o, _ in taken] == [2, 5, 8, 11]
    order = SeekableSampler(11, seed=5, epochs=2).order
    assert all(row == rows[order.index(o)] for o, row in taken)
    c.landed([2, 5])
    c.trained([2])
    effect = c.failed([8])
    assert effect.requeued == (8,) and c.failures(8) == 1
    assert c.row(5) == rows[order.index(5)]
    with pytest.raises(ValueError, match="not in rank 2 of 3"):
        c.trained([3])
    assert c.ledger.status(1) is not None  # nothing changed: local 1 (global 5) is buffered
    record = c.checkpoint()
    assert record.share == share and record.checkpoint.cut == 1
    assert list(record.checkpoint.retained_ordinals()) == [1]
    # Stateful: the record round-trips through load_state_dict.
    c.step = 6
    state = json.loads(json.dumps(c.state_dict()))
    d = _collector(rows, share)
    d.load_state_dict(state)
    assert d.step == 6
    assert [o for o, _ in d.take(3)] == [5, 8, 11]  # the buffer was not restored
    with pytest.raises(ShardMismatchError, match="reshard"):
        _collector(rows, Share(0, 3, 1)).resume(state, load_replay_buffer=False)
    other = RankCollector(
        SeekableSource(
            make_seekable_loader(rows, batch_size=2, seed=5, epochs=2, share=share, stateful=False)
        ),
        LedgerConfig(stream_len=22, fingerprint="other"),
        share,
    )
    with pytest.raises(CheckpointMismatchError):
        other.resume(state, load_replay_buffer=False)


# -- multi-rank checkpoints -------------------------------------------------------------------


def write_parts(ck: DistributedCheckpointer, step: int) -> list[WrittenPart]:
    """Every rank's part of ``step``, written by one process (rank 0 with a
    tensor part)."""
    return [
        ck.write_part(
            step,
            {"rank": r, "step": step},
            {"w": torch.full((2,), float(step))} if r == 0 else None,
            rank=r,
        )
        for r in range(ck.world)
    ]


def _write(root: str | Path, step: int, world: int, **kw: Any) -> Any:
    """One process writing every rank's part (the commit is the caller's)."""
    ck = DistributedCheckpointer(root, rank=0, world=world, fingerprint=FP, comm=None, **kw)
    return ck, write_parts(ck, step)


def test_a_committed_checkpoint_reads_back_with_every_part(tmp_path: Path) -> None:
    assert read_distributed_checkpoint(tmp_path / "none", fingerprint=FP) is None
    ck, parts = _write(tmp_path, 5, 3)
    assert read_distributed_checkpoint(tmp_path, fingerprint=FP) is None  # written, not committed
    ck.commit(5, parts)
    loaded = read_distributed_checkpoint(tmp_path, fingerprint=FP)
    assert loaded is not None and loaded.step == 5 and loaded.world == 3
    assert [p.json_part for p in loaded.parts] == [{"rank": r, "step": 5} for r in range(3)]
    assert torch.equal(loaded.parts[0].tensor_part["w"], torch.full((2,), 5.0))
    assert loaded.parts[1].tensor_part is None
    assert (
        read_distributed_checkpoint(tmp_path, fingerprint=FP, tensors=False).parts[0].tensor_part
        is None
    )  # type: ignore[union-attr]
    with pytest.raises(DatasetChangedError):
        read_distributed_checkpoint(tmp_path, fingerprint="other")


def test_a_torn_checkpoint_is_never_read_and_the_newest_complete_one_is(tmp_path: Path) -> None:
    ck, parts = _write(tmp_path, 1, 2)
    ck.commit(1, parts)
    ck2, parts2 = _write(tmp_path, 2, 2)
    ck2.commit(2, parts2)
    # Step 3: every rank wrote its part, the commit never happened (a kill).
    _write(tmp_path, 3, 2)
    # Step 4 of another world: one rank of three wrote, then the job died.
    DistributedCheckpointer(tmp_path, rank=0, world=3, fingerprint=FP, comm=None).write_part(
        4, {"x": 1}
    )
    loaded = read_distributed_checkpoint(tmp_path, fingerprint=FP)
    assert loaded is not None and loaded.step == 2
    assert [p.name for p in committed_checkpoints(tmp_path)] == [p.dir for p in parts2[:1]] + [
        parts[0].dir
    ]
    previous = read_distributed_checkpoint(tmp_path, fingerprint=FP, previous=1)
    assert previous is not None and previous.step == 1
    with pytest.raises(CheckpointFileError, match="no checkpoint 2 back"):
        read_distributed_checkpoint(tmp_path, fingerprint=FP, previous=2)
    # The next commit (resumed from step 2, which the read of previous=1
    # would otherwise have replaced as what this process continues) removes
    # the torn directories and keeps two.
    ck5, parts5 = _write(tmp_path, 5, 2, resumed_from=loaded)
    ck5.commit(5, parts5)
    dirs = sorted(n for n in os.listdir(tmp_path) if n.startswith("step-"))
    assert dirs == sorted([parts5[0].dir, parts2[0].dir])


def test_a_resume_from_an_older_checkpoint_abandons_the_newer_ones(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        ck, parts = _write(tmp_path, step, 2, keep=5)
        ck.commit(step, parts)
    ck, parts = _write(tmp_path, 2, 2, keep=5)  # resumed from step 1: step 2 again
    ck.commit(2, parts)
    steps = [read_distributed_checkpoint(tmp_path, fingerprint=FP, previous=k).step for k in (0, 1)]  # type: ignore[union-attr]
    assert steps == [2, 1]
    assert len([n for n in os.listdir(tmp_path) if n.startswith("step-")]) == 2


def test_damage_to_a_committed_checkpoint_is_an_error_naming_the_file(tmp_path: Path) -> None:
    ck, parts = _write(tmp_path, 1, 2)
    ck.commit(1, parts)
    path = committed_checkpoints(tmp_path)[0]
    part = path / "rank-00001-of-00002.json"
    data = part.read_bytes()
    part.write_bytes(data.replace(b"1", b"7"))
    with pytest.raises(CheckpointFileError, match=r"rank-00001-of-00002\.json.*SHA-256"):
        read_distributed_checkpoint(tmp_path, fingerprint=FP)
    part.write_bytes(data[:-1])
    with pytest.raises(CheckpointFileError, match="truncated"):
        read_distributed_checkpoint(tmp_path, fingerprint=FP)
    part.unlink()
    part.symlink_to(path / "rank-00000-of-00002.json")
    with pytest.raises(CheckpointFileError, match="symlink"):
        read_distributed_checkpoint(tmp_path, fingerprint=FP)
    commit = tmp_path / "COMMIT"
    doc = json.loads(commit.read_text())
    doc["lineage"][0]["world"] = 3
    commit.write_text(json.dumps(doc))
    with pytest.raises(CheckpointFileError, match="SHA-256"):
        read_distributed_checkpoint(tmp_path, fingerprint=FP)
    commit.unlink()
    with pytest.raises(CheckpointFileError, match="refusing to treat it as a fresh start"):
        read_distributed_checkpoint(tmp_path, fingerprint=FP)
    with pytest.raises(CheckpointFileError, match="fresh start"):
        DistributedCheckpointer(tmp_path, rank=0, world=1, fingerprint=FP, comm=None)


def test_a_commit_needs_every_rank_of_the_world_at_the_step(tmp_path: Path) -> None:
    ck, parts = _write(tmp_path, 1, 3)
    with pytest.raises(ShardMismatchError, match=r"ranks 0\.\.2"):
        ck.commit(1, parts[:2])
    with pytest.raises(ShardMismatchError, match="not step 2"):
        ck.commit(2, parts)
    (tmp_path / parts[2].dir / "rank-00002-of-00003.json").unlink()
    with pytest.raises(CheckpointFileError, match="missing at commit"):
        ck.commit(1, parts)
    assert read_distributed_checkpoint(tmp_path, fingerprint=FP) is None


def test_save_is_collective_and_all_or_nothing(tmp_path: Path) -> None:
    def good(rank: int, comm: Any) -> Any:
        ck = DistributedCheckpointer(tmp_path, rank=rank, world=3, fingerprint=FP, comm=comm)
        return ck.save(7, {"rank": rank})

    out = _on_threads(3, good)
    assert len(set(out)) == 1 and isinstance(out[0], Path)
    loaded = read_distributed_checkpoint(tmp_path, fingerprint=FP)
    assert loaded is not None and [p.json_part for p in loaded.parts] == [
        {"rank": r} for r in range(3)
    ]

    def one_fails(rank: int, comm: Any) -> Any:
        ck = DistributedCheckpointer(tmp_path, rank=rank, world=3, fingerprint=FP, comm=comm)
        return ck.save(8, {"rank": rank} if rank != 1 else {"bad": float("nan")})

    out = _on_threads(3, one_fails)
    assert all(isinstance(e, CheckpointFileError) and "rank 1" in str(e) for e in out), out
    loaded = read_distributed_checkpoint(tmp_path, fingerprint=FP)
    assert loaded is not None and loaded.step == 7  # step 8 never existed


# -- an in-process elastic run ------------------------------------------------------------------


def test_an_elastic_run_in_one_process_trains_every_ordinal_once(tmp_path: Path) -> None:
    """Ranks as objects of one process: a run that checkpoints each step
    (buffers included), crashes at random and resumes on 3, 1, 4, 2 ranks
    through the multi-rank checkpoint directory, with the saved buffers
    routed to their new owners or not restored at all."""
    rows = [[float(i)] for i in range(23)]
    epochs, n = 2, 46
    rng = random.Random(4)
    root = tmp_path / "ckpt"
    lineage: list[list[int]] = []  # the steps that survived, global ordinals
    worlds = [3, 1, 4, 2, 3]
    crashes = routed = 0
    for life, world in enumerate(worlds):
        loaded = read_distributed_checkpoint(root, fingerprint=FP)
        buffers: list[dict[int, Any]] = [{} for _ in range(world)]
        if loaded is None:
            collectors = [_collector(rows, s, epochs=epochs) for s in Share.tiling(world)]
            step = 0
        else:
            plan = loaded.reshard(world, "collector")
            step = loaded.step
            del lineage[loaded.parts[0].json_part["steps"] :]
            collectors = []
            restore = life % 2 == 1
            for r, record in enumerate(plan):
                c = _collector(rows, record.share, epochs=epochs, batch=1 + r)
                if restore:
                    # Exactly the groups the record retains, checked.
                    buffers[r] = owned_groups(loaded.parts, "buffer", record)
                    routed += len(buffers[r])
                c.resume(record, load_replay_buffer=restore)
                collectors.append(c)
        ck = DistributedCheckpointer(root, rank=0, world=world, fingerprint=FP, comm=None)
        in_flight: list[list[int]] = [[] for _ in range(world)]
        crash_at = step + rng.randint(2, 5) if life < len(worlds) - 1 else None
        while not all(c.drained for c in collectors):
            trained_now = []
            for r, c in enumerate(collectors):
                for o, _row in c.take(3 - len(in_flight[r])):
                    in_flight[r].append(o)
                landed, in_flight[r] = in_flight[r][:2], in_flight[r][2:]
                c.landed(landed)
                for o in landed:
                    buffers[r][o] = c.row(o)
                chosen = sorted(buffers[r])[: 1 + step % 2]  # the buffer fills up
                for o in chosen:
                    del buffers[r][o]
                c.trained(chosen)
                trained_now += chosen
            lineage.append(trained_now)
            step += 1
            parts = []
            for r, c in enumerate(collectors):
                c.step = step
                parts.append(
                    ck.write_part(
                        step,
                        {
                            "collector": c.state_dict(),
                            "buffer": {str(o): g for o, g in buffers[r].items()},
                            "steps": len(lineage),
                        },
                        rank=r,
                    )
                )
            if step == crash_at:
                crashes += 1
                break  # parts written, the commit never happens
            ck.commit(step, parts)
    trained = sorted(o for s in lineage for o in s)
    assert trained == list(range(n))
    assert crashes == len(worlds) - 1 and routed > 0


# -- the example of docs/elastic.md ---------------------------------------------------------------


def test_the_readme_elastic_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = [b for b in python_blocks("elastic.md") if "reshard(" in b]
    assert len(blocks) == 1, "the elastic resume example of docs/elastic.md"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "readme_elastic"}
    exec(compile(blocks[0], filename("elastic.md"), "exec"), namespace)


def test_owned_groups_refuses_junk() -> None:
    share = Share(0, 2, 1)
    parts = [
        RankPart(0, {"buffer": {"1": "a", "2": "b"}}, None),
        RankPart(1, {"buffer": {"3": "c"}}, None),
    ]
    assert owned_groups(parts, "buffer", share) == {1: "a", 3: "c"}
    with pytest.raises(CheckpointCorruptError):
        owned_groups([RankPart(0, {"buffer": {"x": 1}}, None)], "buffer", share)
    with pytest.raises(CheckpointCorruptError):
        owned_groups([RankPart(0, {"buffer": [1]}, None)], "buffer", share)
    assert reshard  # imported for the elastic example's names


def test_a_rollout_loop_per_rank_runs_on_its_rank_collector() -> None:
    """Ranks that generate from their own data: one ``RolloutLoop`` per rank,
    each on its ``RankCollector`` (the loop's collector protocol), together
    cover the global stream exactly once, with request ids in global
    ordinals."""
    import asyncio

    from frontier_adapters.examples.cpu_engine import CpuEngine, CpuSamplingParams, TinyCausalLM
    from frontier_adapters.examples.grpo import make_prompts
    from frontier_adapters.rollout import ReplayBuffer, RolloutLoop

    prompts = make_prompts(12, vocab=16)
    config = LedgerConfig(stream_len=12, fingerprint=FP)
    engine = CpuEngine(TinyCausalLM(vocab=16))
    params = CpuSamplingParams(n=2, max_tokens=2)
    trained: list[int] = []

    async def rank(share: Share) -> None:
        loader = make_seekable_loader(prompts, batch_size=3, seed=0, share=share, stateful=False)
        collector = RankCollector(SeekableSource(loader), config, share)
        buffer = ReplayBuffer(max_trajectory_age_steps=100)
        async with RolloutLoop(
            collector, engine, buffer, prompt_of=list, sampling_params=params, max_in_flight=4
        ) as rollout:
            while not collector.drained:
                await rollout.until(lambda: len(buffer) >= 2 or rollout.idle)
                groups = buffer.take(2)
                assert all(share.owns(g.ordinal) for g in groups)
                collector.trained([g.ordinal for g in groups])
                trained.extend(g.ordinal for g in groups)
                rollout.wake()

    async def main() -> None:
        await asyncio.gather(*(rank(s) for s in Share.tiling(3)))

    asyncio.run(main())
    assert sorted(trained) == list(range(12))


def test_proofs_elastic_names_code_and_tests_that_exist() -> None:
    """proofs/ELASTIC.md and the code must not drift apart: every invariant
    has a statement and a proof sketch, every "enforced by" symbol imports
    and every "checked by" test exists."""
    import importlib

    doc = (ROOT / "proofs" / "ELASTIC.md").read_text()
    sections = dict(re.findall(r"^## ([A-Z][A-Z-]+): .*?\n(.*?)(?=^## |\Z)", doc, re.S | re.M))
    assert len(sections) >= 8
    for name, body in sections.items():
        assert "**Statement.**" in body and "**Proof sketch.**" in body, name
        assert "**Exhaustively checked:**" in body, name
        for label in ("Enforced by", "Checked by"):
            match = re.search(rf"\*\*{label}:\*\*(.*?)(?:\n\n|\Z)", body, re.S)
            assert match, (name, label)
            refs = re.findall(r"`([^`]+)`", match.group(1))
            assert refs, (name, label)
            for ref in refs:
                if label == "Checked by":
                    path, _, attr = ref.partition("::")
                    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
                    assert callable(getattr(module, attr)), ref
                    continue
                parts = ref.split(".")
                for i in range(len(parts), 0, -1):
                    try:
                        obj: object = importlib.import_module(".".join(parts[:i]))
                    except ImportError:
                        continue
                    for a in parts[i:]:
                        obj = getattr(obj, a)
                    break
                else:
                    raise AssertionError(ref)


def test_a_committed_set_of_records_must_match_its_commit(tmp_path: Path) -> None:
    """The parts' records are checked against the committed step and ranks
    before they are merged: a part that holds another step's record (or
    another rank's) is refused."""
    rows = list(range(9))
    collectors = [_collector(rows, s) for s in Share.tiling(2)]
    ck = DistributedCheckpointer(tmp_path, rank=0, world=2, fingerprint=FP, comm=None)
    parts = []
    for r, c in enumerate(collectors):
        c.step = 3 if r == 0 else 2
        parts.append(ck.write_part(3, {"collector": c.state_dict()}, rank=r))
    ck.commit(3, parts)
    loaded = read_distributed_checkpoint(tmp_path, fingerprint=FP)
    assert loaded is not None
    with pytest.raises(ShardMismatchError, match="another step"):
        loaded.reshard(2, "collector")
    with pytest.raises(CheckpointFileError, match="holds no 'nothing' record"):
        loaded.reshard(2, "nothing")
    with pytest.raises(CheckpointFileError, match="already written"):
        ck.write_part(3, {"collector": collectors[0].state_dict()}, rank=1)
    ck = DistributedCheckpointer(tmp_path, rank=0, world=2, fingerprint=FP, comm=None)
    collectors[0].step = 4
    record = collectors[0].state_dict()  # rank 0's record, in both parts
    ck.commit(4, [ck.write_part(4, {"collector": record}, rank=r) for r in range(2)])
    swapped = read_distributed_checkpoint(tmp_path, fingerprint=FP)
    assert swapped is not None
    with pytest.raises(ShardMismatchError, match="do not match their ranks"):
        swapped.reshard(2, "collector")
