"""TRL's GRPOTrainer under SIGKILL: one life, the torture, the A/B against TRL alone.

``life`` is one process of a real GRPO run on CPU: the tiny random-weight
Llama of ``tiny_llm`` (built offline), prompts ``"Q17: 3 + 4 ="``, a
verifiable reward that varies (1 for a completion that starts with the sum,
else a fraction for its digit characters), generation by transformers, a
checkpoint every ``save_steps``. Mode ``frontier`` trains with
``FrontierGRPOTrainer``; mode ``trl`` with TRL's own ``GRPOTrainer`` and its
own resume (``resume_from_checkpoint=True``). The same script serves both:
only the trainer class differs.

Both modes carry a *probe*, the measuring instrument: it decodes the prompt
of every completion the loss is computed on (``compute_loss``, a public
override) and logs, per optimizer step, which prompts were trained, so the
verdict comes from what TRL trained on, not from either side's bookkeeping.
In mode ``trl`` a prompt's ordinal is ``epoch * rows + row`` (``epoch`` the
Trainer's); in mode ``frontier`` the probe's rows are checked against the
library's own training log, which ``frontier_core``'s audit reads.

A life dies where its *kill plan* says: ``STEP:PHASE`` with PHASE one of
``step`` (after the optimizer step), ``generate`` (in the step's first
micro-step, after the rows arrived), ``save-model``, ``save-optimizer``,
``save-state`` (the Trainer wrote its checkpoint; the run's coverage
checkpoint not yet), ``save-frontier`` (inside the coverage checkpoint's
write: its first part written, nothing published).
A save phase at a step with no save dies after the step instead. The
process kills itself with SIGKILL: real, and at the same point in both
modes. ``torture`` also SIGKILLs lives from outside at random times.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from frontier_core import TrainLogWriter, fold_lineage, read_train_log
from frontier_core._audit import audit_lineage, audit_log

from ..examples.tiny_llm import OFFLINE_ENV
from ._lives import Life
from ._lives import life_deadline as _life_deadline

MODES: Final = ("frontier", "trl")
PHASES: Final = (
    "step",
    "generate",
    "save-model",
    "save-optimizer",
    "save-state",
    "save-frontier",
)
PROBE_LOG: Final = "probe.jsonl"
_ROW = re.compile(r"Q(\d+):")


@attrs.frozen
class JobConfig:
    """One life's training configuration (a later life may change the batch
    layout: ``per_device``, ``steps_per_generation``, ``grad_accum``)."""

    rows: int = 24
    epochs: int = 2
    per_device: int = 8
    num_generations: int = 4
    steps_per_generation: int = 1
    grad_accum: int = 1
    save_steps: int = 2
    shuffle: bool = True
    seed: int = 0
    max_completion_length: int = 4
    lr: float = 1e-3
    #: Generate with vLLM's CPU build colocated in the process (TRL's
    #: ``vllm_mode="colocate"``) instead of transformers' ``generate``.
    use_vllm: bool = False

    @property
    def prompts_per_block(self) -> int:
        return self.per_device * self.steps_per_generation // self.num_generations


@attrs.frozen
class Kill:
    step: int
    phase: str

    @classmethod
    def parse(cls, text: str) -> Kill:
        step, _, phase = text.partition(":")
        if phase not in PHASES:
            raise ValueError(f"unknown kill phase {phase!r}: one of {', '.join(PHASES)}")
        return cls(int(step), phase)

    def __str__(self) -> str:
        return f"{self.step}:{self.phase}"


def make_rows(n: int) -> list[dict[str, Any]]:
    rng = random.Random(f"trl-job:{n}")
    rows = []
    for i in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"prompt": f"Q{i}: {a} + {b} =", "answer": str(a + b)})
    return rows


def reward(completions: Sequence[str], answer: Sequence[str], **_: Any) -> list[float]:
    """1.0 for a completion that starts with the sum; otherwise half the
    share of its characters that are digits (so the reward varies)."""
    out = []
    for text, want in zip(completions, answer, strict=True):
        s = text.strip()
        if s.startswith(want):
            out.append(1.0)
        else:
            out.append(0.5 * sum(c.isdigit() for c in s) / max(1, len(s)))
    return out


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


# -- one life -------------------------------------------------------------------------


def life(
    workdir: str | os.PathLike[str],
    mode: str,
    config: JobConfig,
    kill: Kill | None = None,
) -> int:
    """Resume (or start) the run in ``workdir`` and train until the stream
    is done, or die as ``kill`` says. Returns 0 when training finished."""
    os.environ.update(OFFLINE_ENV)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import datasets  # type: ignore[import-not-found]
    import torch
    import transformers  # type: ignore[import-not-found]
    from transformers.trainer_utils import get_last_checkpoint  # type: ignore[import-not-found]
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[import-not-found]

    from ..examples.tiny_llm import tiny_llm
    from ..trl import FrontierGRPOTrainer

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    work = Path(workdir)
    out = work / "out"
    out.mkdir(parents=True, exist_ok=True)
    model_dir = tiny_llm()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    dataset = datasets.Dataset.from_list(make_rows(config.rows))

    resume: bool | str | None
    if mode == "frontier":
        resume = True  # the run knows where it is: its newest coverage checkpoint
        base: Any = FrontierGRPOTrainer
    elif mode == "trl":
        found = get_last_checkpoint(str(out)) if out.is_dir() else None
        resume = found
        base = GRPOTrainer
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    probe = Probe(work / PROBE_LOG, tokenizer, rows=config.rows, mode=mode)

    class Trainer(base):  # type: ignore[misc]
        """The job's trainer: the probe in ``compute_loss``, the kill plan
        in the save path."""

        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if model.training:
                probe.micro(inputs["prompt_ids"], inputs["prompt_mask"])
            return super().compute_loss(model, inputs, *args, **kwargs)

        def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            if (
                kill is not None
                and kill.phase == "generate"
                and self.state.global_step == kill.step
            ):
                _die()
            return super().training_step(model, inputs, *args, **kwargs)

        def save_model(self, *args: Any, **kwargs: Any) -> Any:
            result = super().save_model(*args, **kwargs)
            _armed("save-model")
            return result

        def _save_optimizer_and_scheduler(self, *args: Any, **kwargs: Any) -> Any:
            result = super()._save_optimizer_and_scheduler(*args, **kwargs)
            _armed("save-optimizer")
            return result

        def _save_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
            # The Trainer's files are all written (and rotated); the
            # callbacks' on_save, the coverage checkpoint among them, not yet.
            result = super()._save_checkpoint(*args, **kwargs)
            _armed("save-state")
            if mode == "trl":
                _armed("save-frontier")  # no coverage checkpoint of its own: the same moment
            return result

    armed: set[str] = set()

    def _armed(phase: str) -> None:
        if phase in armed:
            _die()

    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        report_to=[],
        disable_tqdm=True,
        gradient_checkpointing=False,
        per_device_train_batch_size=config.per_device,
        gradient_accumulation_steps=config.grad_accum,
        steps_per_generation=config.steps_per_generation,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        num_train_epochs=config.epochs,
        save_steps=config.save_steps,
        save_total_limit=None,
        logging_steps=10_000,
        shuffle_dataset=config.shuffle,
        seed=config.seed,
        learning_rate=config.lr,
        dataloader_num_workers=0,
        **_vllm_options(config),
    )
    trainer = Trainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
    )
    trainer.add_callback(probe)
    if kill is not None:
        trainer.add_callback(Killer(kill, armed))
        if mode == "frontier" and kill.phase == "save-frontier":
            # A real kill inside the real write: the run writes its
            # checkpoints through this module's ``write_checkpoint``, whose
            # crash-test hook runs after each part (and before publishing).
            from ..run import _run as run_module

            name = "write_checkpoint"
            write = getattr(run_module, name)

            def torn_write(*args: Any, **kwargs: Any) -> Path:
                if "save-frontier" in armed:
                    kwargs["between_parts"] = lambda _name: _die()
                written: Path = write(*args, **kwargs)
                return written

            setattr(run_module, name, torn_write)
    (work / "started").write_text(str(os.getpid()))
    trainer.train(resume_from_checkpoint=resume)
    probe.close()
    return 0


def _vllm_options(config: JobConfig) -> dict[str, Any]:
    """TRL's colocate mode on vLLM's CPU build: one process, the engine in it
    (``external_launcher``), a 1 GiB KV cache, a short context."""
    if not config.use_vllm:
        return {}
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
    return {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_max_model_length": 128,
        "vllm_gpu_memory_utilization": 0.1,
    }


def _step_of(folder: Path) -> int:
    return int(folder.name.rpartition("-")[2])


def _callback_base() -> Any:
    from transformers import TrainerCallback

    return TrainerCallback


class Probe(_callback_base()):  # type: ignore[misc]
    """Logs, per optimizer step, the prompts of every completion the loss
    was computed on (one entry per completion). Records are numbered by the
    lineage (one per optimizer step), not by the Trainer's ``global_step``:
    a resume that restarts the Trainer's count keeps the weights it loaded,
    and the probe keeps their history."""

    def __init__(self, path: Path, tokenizer: Any, *, rows: int, mode: str) -> None:
        self.path = path
        self.log: TrainLogWriter | None = None
        self.tokenizer = tokenizer
        self.rows = rows
        self.mode = mode
        self.epoch = 0
        self._pending: list[int] = []

    def micro(self, prompt_ids: Any, prompt_mask: Any) -> None:
        texts = self.tokenizer.batch_decode(
            [ids[mask.bool()] for ids, mask in zip(prompt_ids, prompt_mask, strict=True)],
            skip_special_tokens=True,
        )
        for text in texts:
            match = _ROW.search(text)
            if match is None:
                raise AssertionError(f"the probe cannot read a row id from {text!r}")
            row = int(match.group(1))
            self._pending.append(row if self.mode == "frontier" else self.epoch * self.rows + row)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # The step the Trainer resumed at (0 on a fresh start): the lineage
        # keeps that many records, one per step.
        resume_records: int | None = state.global_step or None
        if resume_records is None and self.path.exists() and self.path.stat().st_size:
            resume_records = 0  # a fresh start: earlier records are a dead branch
        self.log = TrainLogWriter(self.path, resume_records=resume_records)
        return control

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.epoch = math.floor((state.epoch or 0.0) + 1e-6)
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        assert self.log is not None  # opened in on_train_begin
        self.log.step(self.log.records, self._pending)
        self._pending = []
        if self.mode == "trl":
            # The Trainer's epoch after this step (it sets it before the callbacks).
            self.epoch = math.floor((state.epoch or 0.0) + 1e-6)
        return control

    def close(self) -> None:
        if self.log is not None:
            self.log.sync()
            self.log.close()


class Killer(_callback_base()):  # type: ignore[misc]
    """Dies at the kill plan's step and phase (added after every other
    callback, so ``control.should_save`` is final when it looks)."""

    def __init__(self, kill: Kill, armed: set[str]) -> None:
        self.kill = kill
        self.armed = armed

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step != self.kill.step or self.kill.phase == "generate":
            return control
        if self.kill.phase == "step" or not control.should_save:
            _die()
        self.armed.add(self.kill.phase)
        return control


# -- the parent: lives, kills, verdict ------------------------------------------------


@attrs.frozen
class LifePlan:
    """A life: its configuration, and the kill that ends it (``None``: the
    last life, run to completion; ``random_after`` kills it from outside
    that many seconds after its first new training step)."""

    config: JobConfig
    kill: Kill | None = None
    random_after: float | None = None


def _env() -> dict[str, str]:
    env = {**os.environ, **OFFLINE_ENV, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return env


def run_lives(
    workdir: str | os.PathLike[str],
    mode: str,
    plans: Sequence[LifePlan],
    *,
    verbose: bool = False,
    max_extra_lives: int = 6,
    life_deadline: float | None = None,
) -> dict[str, Any]:
    """Run the lives of ``plans`` in subprocesses; after the last plan,
    resume until a life finishes. A life that fails (not killed) is
    counted as a failed resume; in mode ``trl`` the harness then does what
    a user would do, deleting the newest checkpoint folder, and retries.
    Each life runs in a process group of its own with ``life_deadline``
    seconds (``_lives.life_deadline``): past it the group is killed and
    ``LifeDeadlineError`` names the life."""
    per_life = _life_deadline(life_deadline)
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    kills = failed = 0
    notes: list[str] = []
    plans = list(plans)
    extra = 0
    i = 0
    started = time.monotonic()
    while True:
        plan = plans[i] if i < len(plans) else attrs.evolve(plans[-1], kill=None, random_after=None)
        cmd = [
            sys.executable,
            "-m",
            "frontier_adapters.verify",
            "trl-life",
            "--workdir",
            str(work),
            "--mode",
            mode,
            "--config",
            json.dumps(attrs.asdict(plan.config)),
        ]
        if plan.kill is not None:
            cmd += ["--kill", str(plan.kill)]
        marker = work / "started"
        marker.unlink(missing_ok=True)
        with (
            open(work / "life.err", "ab") as err,
            Life(
                cmd,
                name=f"trl-life {mode} {i}",
                deadline=per_life,
                stdout=err,
                stderr=err,
                env=_env(),
            ) as life,
        ):
            if plan.random_after is not None:
                # From outside, a random moment after this life's first new
                # training step (the probe logs one line per step), so the
                # kill lands in training and the life cannot run away.
                probe = work / PROBE_LOG
                size = probe.stat().st_size if probe.exists() else 0

                def stepped(p: Path = probe, n: int = size, m: Path = marker) -> bool:
                    return p.exists() and p.stat().st_size > n + 16 and m.exists()

                if life.wait_until(stepped, "its first new training step", interval=0.01):
                    # The moment is counted from the step just seen.
                    def due(t: float = time.monotonic() + plan.random_after) -> bool:
                        return time.monotonic() >= t

                    life.wait_until(due, "its moment to die", interval=0.005)
                if life.poll() is None:
                    life.kill()
            code = life.wait()
        if verbose:
            print(f"[{mode}] life {i}: exit {code} ({plan.kill or plan.random_after})", flush=True)
        if code == -signal.SIGKILL:
            kills += 1
        elif code != 0:
            failed += 1
            tail = (work / "life.err").read_bytes()[-600:].decode(errors="replace")
            last = tail.strip().splitlines()[-1] if tail.strip() else "?"
            notes.append(f"life {i} failed: {last[:200]}")
            if mode == "trl":
                folders = sorted((work / "out").glob("checkpoint-*"), key=lambda p: _step_of(p))
                if folders:
                    import shutil

                    shutil.rmtree(folders[-1])
                    notes.append(f"removed {folders[-1].name} by hand to resume")
            else:
                raise RuntimeError(f"a frontier life failed: {last}")
        if code == 0:
            break
        i += 1
        if i >= len(plans):
            extra += 1
            if extra > max_extra_lives:
                raise RuntimeError(f"{mode}: no life finished after {extra} extra lives")
    return {
        "mode": mode,
        "lives": i + 1,
        "kills": kills,
        "failed_resumes": failed,
        "notes": notes,
        "seconds": round(time.monotonic() - started, 1),
    }


def verdict(workdir: str | os.PathLike[str], mode: str, config: JobConfig) -> dict[str, Any]:
    """The coverage verdict of a finished run, from the probe (and, in mode
    ``frontier``, from the library's training log through the audit, with
    the probe checked against it)."""
    work = Path(workdir)
    g = config.num_generations
    stream_len = config.rows * config.epochs
    lineage = fold_lineage(read_train_log(work / PROBE_LOG), path=str(work / PROBE_LOG))
    completions: Counter[int] = Counter()
    for step in sorted(lineage.steps):
        completions.update(lineage.steps[step])
    out: dict[str, Any] = {"mode": mode}
    per_prompt: Counter[int] = completions  # mode frontier: from the library's log, below
    if mode == "trl":
        # One ordinal per full set of num_generations completions, at the
        # step that completed it; leftovers are partial trainings.
        derived = work / "probe_ordinals.jsonl"
        derived.unlink(missing_ok=True)
        seen: Counter[int] = Counter()
        with TrainLogWriter(derived) as w:
            for step in sorted(lineage.steps):
                done = []
                for o in lineage.steps[step]:
                    seen[o] += 1
                    if seen[o] % g == 0:
                        done.append(o)
                w.step(step, done)
        report = audit_log(derived, stream_len)
        partial = sorted(o for o, c in seen.items() if c % g)
        out.update(report.to_json())
        out["partial"] = len(partial)
        out["partial_ordinals"] = partial
    else:
        from ..trl import LOG_NAME, StreamOrder

        log = work / "out" / LOG_NAME
        frontier = fold_lineage(read_train_log(log), path=str(log))
        report = audit_lineage(frontier, stream_len)
        out.update(report.to_json())
        order = StreamOrder(config.rows, seed=config.seed, shuffle=config.shuffle)
        expected: Counter[int] = Counter()
        for ordinals in frontier.steps.values():
            expected.update(order.index(o) for o in ordinals for _ in range(g))
        out["probe_agrees"] = expected == completions
        out["partial"] = sum(1 for c in completions.values() if c % g)
        # Per ordinal: what the library logged (the probe agrees on the rows).
        per_prompt = Counter(o for ordinals in frontier.steps.values() for o in ordinals)
        per_prompt = Counter({o: c * g for o, c in per_prompt.items()})
    # Completions the loss saw, against num_generations per prompt of the stream.
    out["completions_missing"] = sum(max(0, g - per_prompt[o]) for o in range(stream_len))
    out["completions_extra"] = sum(max(0, c - g) for c in per_prompt.values())
    return out


def _random_plans(
    config: JobConfig, rng: random.Random, kills: int, *, total_steps: int
) -> list[LifePlan]:
    """Kill plans spread over the run: in-save phases at save steps, the
    other phases anywhere, and some random-time kills from outside."""
    plans = []
    for k in range(kills):
        if k % 3 == 2:
            plans.append(LifePlan(config, random_after=rng.uniform(0.0, 0.3)))
            continue
        phase = rng.choice(PHASES)
        if phase.startswith("save"):
            saves = [s for s in range(1, total_steps) if s % config.save_steps == 0]
            step = rng.choice(saves)
        else:
            step = rng.randrange(1, total_steps)
        plans.append(LifePlan(config, kill=Kill(step, phase)))
    plans.append(LifePlan(config))
    return plans


def torture(
    workdir: str | os.PathLike[str],
    *,
    kills: int = 6,
    seed: int = 0,
    config: JobConfig | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """SIGKILL frontier lives ``kills`` times (in-save and mid-step phases,
    and random times from outside), resume until done, and audit."""
    config = config or JobConfig()
    rng = random.Random(f"trl-torture:{seed}")
    total = config.rows * config.epochs // config.prompts_per_block
    plans = _random_plans(config, rng, kills, total_steps=total)
    # The kills come in order of the steps they name, so each life gets
    # further; the kills from outside come last (each lets a life train a
    # step or so first).
    ordered = sorted(plans[:-1], key=lambda p: p.kill.step if p.kill else total)
    runs = run_lives(workdir, "frontier", [*ordered, plans[-1]], verbose=verbose)
    result = {**runs, **verdict(workdir, "frontier", config)}
    result["plan"] = [str(p.kill) if p.kill else f"random {p.random_after:.2f}s" for p in ordered]
    return result


# -- the A/B ------------------------------------------------------------------------------


@attrs.frozen
class Scenario:
    name: str
    what: str
    config: JobConfig
    kills: tuple[Kill, ...]
    #: The configuration of the lives after the first kill (a changed layout).
    after: JobConfig | None = None


def scenarios() -> list[Scenario]:
    base = JobConfig()
    spg = attrs.evolve(base, per_device=4, steps_per_generation=2, save_steps=3)
    return [
        Scenario(
            "epoch0",
            "kill in epoch 0, right after a checkpoint",
            base,
            (Kill(5, "step"),),
        ),
        Scenario(
            "epoch1",
            "kill after the epoch boundary (epoch 1)",
            base,
            (Kill(17, "step"),),
        ),
        Scenario(
            "both",
            "kills in epoch 0 and in epoch 1",
            base,
            (Kill(3, "step"), Kill(15, "step")),
        ),
        Scenario(
            "spg2",
            "steps_per_generation=2, kill inside a generation block (epoch 0)",
            spg,
            (Kill(4, "step"),),
        ),
        Scenario(
            "batch",
            "resume with another batch size (8 prompts a step instead of 2)",
            base,
            (Kill(5, "step"),),
            after=attrs.evolve(base, per_device=32),
        ),
        Scenario(
            "torn",
            "kill inside a checkpoint save (after the model file)",
            base,
            (Kill(6, "save-model"),),
        ),
        Scenario(
            "noshuffle",
            "shuffle off, kills in both epochs",
            attrs.evolve(base, shuffle=False),
            (Kill(5, "step"), Kill(17, "step")),
        ),
    ]


def ab(
    workdir: str | os.PathLike[str],
    *,
    only: Sequence[str] = (),
    verbose: bool = False,
) -> list[dict[str, Any]]:
    """Run each scenario under TRL alone and under frontier, same kills."""
    results = []
    for sc in scenarios():
        if only and sc.name not in only:
            continue
        row: dict[str, Any] = {"scenario": sc.name, "what": sc.what}
        for mode in MODES:
            work = Path(workdir) / sc.name / mode
            if work.exists():
                import shutil

                shutil.rmtree(work)
            plans = [LifePlan(sc.config, kill=k) for k in sc.kills]
            plans.append(LifePlan(sc.after or sc.config))
            if sc.after is not None:
                plans = [plans[0], *(attrs.evolve(p, config=sc.after) for p in plans[1:])]
            runs = run_lives(work, mode, plans, verbose=verbose)
            row[mode] = {**runs, **verdict(work, mode, sc.config)}
        results.append(row)
    return results


def format_ab(results: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| scenario | TRL alone: prompts once / skipped / twice | completions missing / extra"
        " | frontier: prompts once / skipped / twice | completions missing / extra |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        t, f = r["trl"], r["frontier"]
        extra = f"; {t['failed_resumes']} failed resume(s)" if t["failed_resumes"] else ""
        lines.append(
            f"| {r['what']} | {t['trained_once']} / {t['skipped']} / {t['duplicated']}{extra} | "
            f"{t['completions_missing']} / {t['completions_extra']} | "
            f"{f['trained_once']} / {f['skipped']} / {f['duplicated']} | "
            f"{f['completions_missing']} / {f['completions_extra']} |"
        )
    return "\n".join(lines)
