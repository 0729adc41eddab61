"""The documentation's examples run as written: README's quick start and
the examples of the rollout, testing and durable rollouts pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._docs import filename, python_blocks, section


def test_integration_example_runs_and_its_assertions_hold() -> None:
    """README's quick start: a ``Run``, a crash after three of four samples,
    the resume reusing them, in at most 25 lines and public names only."""
    blocks = python_blocks("README.md")
    assert blocks, "the README lost its integration example"
    example = blocks[0]
    assert example in section("README.md", "Quick start")
    assert len(example.strip().splitlines()) <= 25
    assert "Run.open" in example and example.count("assert ") >= 2
    assert "._" not in example and "import _" not in example
    namespace: dict[str, object] = {}
    exec(compile(example, filename("README.md"), "exec"), namespace)


def test_the_ledger_by_hand_example_runs_and_its_assertions_hold() -> None:
    """docs/ledger.md opens with the ledger driven event by event."""
    example = python_blocks("ledger.md")[0]
    assert "Ledger.start" in example and "assert" in example
    exec(compile(example, filename("ledger.md"), "exec"), {"__name__": "ledger_by_hand"})


def test_rollout_example_runs_and_audits_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vLLM-binding page's example, with the CPU engine, as written."""
    pytest.importorskip("torch")
    from frontier_core import fold_lineage, read_train_log

    (block,) = [b for b in python_blocks("rollout.md") if "RolloutLoop" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, filename("rollout.md"), "exec"), {"__name__": "readme_example"})
    lineage = fold_lineage(read_train_log(tmp_path / "log.jsonl"))
    trained = sorted(o for ordinals in lineage.steps.values() for o in ordinals)
    dropped = sorted(o for ordinals in lineage.dropped for o in ordinals)
    assert sorted(trained + dropped) == list(range(64))


def test_durable_rollouts_example_runs_and_its_assertions_hold() -> None:
    """The durable rollouts example, as written: a crash after three of
    four samples sealed; the resume reuses them and generates only one."""
    (block,) = [b for b in python_blocks("durable.md") if "RolloutJournal(" in b and "Ledger" in b]
    assert block.count("assert ") >= 3
    exec(compile(block, filename("durable.md"), "exec"), {"__name__": "readme_durable"})


def test_the_durable_example_resumes_after_its_node_took_the_journal() -> None:
    """The issue's new user: the durable rollouts example, its journal file
    deleted at the crash (a preempted node's local disk) while the
    checkpoint survives. The resume proceeds, says what was lost, generates
    all four samples again and fences the dead life's attempts."""
    (block,) = [b for b in python_blocks("durable.md") if "RolloutJournal(" in b and "Ledger" in b]
    crash = "journal.close()                                   # ... and the process dies here\n"
    assert block.count(crash) == 1
    before = block[: block.index(crash) + len(crash)]
    after = """
(run / "journal").unlink()                        # the node went, with its disk
record, position = json.loads((run / "ckpt.json").read_text())
checkpoint = Checkpoint.from_state_dict(record, fingerprint="my-dataset-v1")
journal = RolloutJournal(run / "journal", fingerprint="my-dataset-v1", lineage="run-42")
got = journal.recover(checkpoint, position=position, checkpoint_id=0,
                      reuse=Reuse.everything(), fork=0, step=0)
assert got.lost is not None and got.lost.position == position and got.lost.last == 0
ledger = Ledger.resume(config, checkpoint, load_replay_buffer=True, sealed=got.sealed,
                       attempt_floor=got.attempt_floor, attempt_limit=got.attempt_limit).ledger
step = ledger.stamp(2)
applied = step.ledger.dispatch(step.effect.kept)
assert applied.effect.landed == () and applied.effect.reused == ()
assert len(applied.effect.leases) == 4
assert min(x.attempt for x in applied.effect.leases) > running.attempt
assert applied.ledger.seal([running]).effect.fenced == (running,)
journal.close()
"""
    exec(compile(before + after, filename("durable.md"), "exec"), {"__name__": "node_lost"})


def test_the_run_page_example_runs_and_its_assertions_hold() -> None:
    """docs/run.md's loop, as written: public names only."""
    example = python_blocks("run.md")[0]
    assert "._" not in example and "assert" in example
    exec(compile(example, filename("run.md"), "exec"), {"__name__": "run_page"})


def test_the_headline_table_is_what_the_command_prints() -> None:
    """README's "Two commands" table holds, mode by mode and in the command's
    order, the tokens redone and the lost prompts that ``frontier simulate
    --waste`` (its defaults, a fixed seed) prints, and its percentages."""
    import json
    import subprocess
    import sys

    run = subprocess.run(
        [str(Path(sys.executable).with_name("frontier")), "simulate", "--waste", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    modes = json.loads(run.stdout)["modes"]
    text = section("README.md", "Two commands")
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.strip().startswith("|") and not set(line.strip()) <= set("|-: ")
    ][1:]  # the header row
    assert len(rows) == len(modes), (rows, list(modes))
    for (_label, redone, share, lost), (name, mode) in zip(rows, modes.items(), strict=True):
        assert int(redone.replace(",", "")) == mode["tokens_redone"], name
        assert share.startswith(f"{mode['redone_vs_coverage_pct']:.1f}%"), name
        assert int(lost) == mode["prompts_skipped"], name


def test_the_agents_page_examples_run_and_their_assertions_hold() -> None:
    """docs/agents.md's episode loop and its trainer's transcript, as
    written: public names only. (The verifiers example and its vLLM
    decoding, which need verifiers and a tokenizer, are what the lives of
    tests/adapters/agents/test_verifiers_kill.py and
    test_verifiers_vllm_kill.py run.)"""
    examples = [
        b
        for b in python_blocks("agents.md")
        if "run_task" not in b and "class HermesDecoding" not in b
    ]
    assert len(examples) == 2
    for example in examples:
        assert "._" not in example and "assert" in example
        exec(compile(example, filename("agents.md"), "exec"), {"__name__": "agents_page"})
