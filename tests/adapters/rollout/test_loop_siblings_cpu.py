"""``RolloutLoop(schedule="sibling")`` over the CPU engine (a real torch model sampling real
tokens, with per-token log-probs), with a real journal file: groups land
with their n siblings, one request each; a kill-and-resume continues a
sibling from its durable prefix (``continued_prompt`` with the prefix,
``sibling_params`` with ``max_tokens`` reduced by its length) and reuses the
sealed siblings without a request; a budget lowered below a durable prefix
across the resume stops the loop. The same on real vLLM: test_vllm_samples.py."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from frontier_adapters import SequenceSource, StreamCollector  # noqa: E402
from frontier_adapters.examples.cpu_engine import (  # noqa: E402
    CpuEngine,
    CpuSamplingParams,
    TinyCausalLM,
)
from frontier_adapters.journal import RolloutJournal  # noqa: E402
from frontier_adapters.rollout import (  # noqa: E402
    RolloutLoop,
    SampleProgress,
    continued_prompt,
    remaining_tokens,
    request_id_of,
    sample_seed,
    sibling_params,
)

from frontier_core import Checkpoint, Lease, LedgerConfig, Status  # noqa: E402
from frontier_core.journal import Reuse, TokenPayload, replay  # noqa: E402

from ._deadline import run_within  # noqa: E402
from ._sample_support import Crash, Sink, prompt_of  # noqa: E402

FP = "sample-loop-cpu"
N = 3
PROMPTS = [[2 + o % 7, 3, 4] for o in range(8)]
SEED = 11


def model() -> TinyCausalLM:
    return TinyCausalLM(vocab=16, seed=3)


class Recording(CpuEngine):
    """The CPU engine, noting every request's prompt and parameters."""

    def __init__(self, m: TinyCausalLM) -> None:
        super().__init__(m, seed=1)
        self.calls: list[tuple[str, list[int], CpuSamplingParams]] = []

    def generate(self, prompt: Any, sampling_params: Any, request_id: str) -> Any:
        self.calls.append((request_id, list(prompt["prompt_token_ids"]), sampling_params))
        return super().generate(prompt, sampling_params, request_id)


def collector(n: int) -> StreamCollector:
    return StreamCollector(
        SequenceSource(PROMPTS[:n], batch_size=2),
        LedgerConfig(stream_len=n, samples=N, fingerprint=FP),
    )


def model_logprobs(m: TinyCausalLM, prompt: list[int], sample: list[int]) -> list[float]:
    """The model's log-prob of each sample token after the prompt and the
    tokens before it (temperature 1): what the engine must have reported."""
    with torch.no_grad():
        logits = m(torch.tensor([prompt + sample]))[0]
    lp = torch.log_softmax(logits, -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(sample)]


async def generate_once(engine: CpuEngine, prompt: list[int], p: Any, rid: str) -> Any:
    """The final output of one request."""
    return [out async for out in engine.generate(continued_prompt(prompt), p, rid)][-1]


def budgets(
    short: set[tuple[int, int]], *, long_tokens: int = 12
) -> Callable[[Lease, int], CpuSamplingParams]:
    """4 tokens for the siblings in ``short``, ``long_tokens`` for the
    others, no stop token: fixed lengths, so a test knows which siblings
    seal first."""
    fixed: dict[str, Any] = {"seed": SEED, "stop_token_ids": (), "output_kind": "cumulative"}
    quick = sibling_params(CpuSamplingParams, max_tokens=4, **fixed)
    slow = sibling_params(CpuSamplingParams, max_tokens=long_tokens, **fixed)
    return lambda lease, k: (quick if (lease.ordinal, lease.sibling) in short else slow)(lease, k)


# -- the helpers ----------------------------------------------------------------------


def test_the_sample_params_reduce_the_budget_and_seed_each_attempt() -> None:
    params = sibling_params(CpuSamplingParams, max_tokens=12, seed=SEED, output_kind="cumulative")
    p = params(Lease(3, 1, 5), 0)
    assert (p.n, p.max_tokens, p.seed, p.output_kind) == (
        1,
        12,
        sample_seed(SEED, Lease(3, 1, 5)),
        "cumulative",
    )
    assert params(Lease(3, 1, 5), 7).max_tokens == 5
    seeds = {
        sample_seed(SEED, Lease(o, s, a)) for o in range(4) for s in range(4) for a in range(3)
    }
    assert len(seeds) == 48 and all(0 <= x < 2**31 for x in seeds)
    assert sibling_params(CpuSamplingParams, max_tokens=12)(Lease(0, 0, 0), 0).seed is None
    with pytest.raises(ValueError, match=r"durable prefix of .* has 12 tokens"):
        params(Lease(3, 1, 5), 12)
    assert remaining_tokens(12, 11) == 1
    with pytest.raises(ValueError, match="max_tokens"):
        sibling_params(CpuSamplingParams, max_tokens=0)
    with pytest.raises(TypeError, match="sets n itself"):
        sibling_params(CpuSamplingParams, max_tokens=4, n=2)
    assert continued_prompt([1, 2], (3,)) == {"prompt_token_ids": [1, 2, 3]}
    assert continued_prompt((1,), [], cache_salt="x") == {
        "prompt_token_ids": [1],
        "cache_salt": "x",
    }
    with pytest.raises(ValueError, match="at least one token"):
        continued_prompt([], (3,))


# -- end to end -----------------------------------------------------------------------


def test_groups_land_with_n_siblings_each_from_its_own_request_with_its_logprobs(
    tmp_path: Path,
) -> None:
    m = model()
    engine, sink = Recording(m), Sink()
    c = collector(4)
    journal = RolloutJournal(tmp_path / "journal", fingerprint=FP, lineage="L", progress_every=2)
    params = sibling_params(CpuSamplingParams, max_tokens=10, seed=SEED, output_kind="cumulative")

    async def main() -> None:
        async with RolloutLoop(
            c, engine, sink, schedule="sibling", prompt_of=prompt_of, sampling_params=params,
            journal=journal, max_in_flight=6, version=lambda: 7,
        ) as rollout:  # fmt: skip
            await rollout.until(lambda: len(sink) == 4)

    run_within(main())
    state = replay(journal.writer.read().records)
    journal.close()
    assert sorted(sink.groups) == [0, 1, 2, 3]
    assert all(c.ledger.status(o) is Status.BUFFERED for o in range(4))
    # One request per sibling, none twice, each for one sample of the bare prompt.
    ids = [rid for rid, _, _ in engine.calls]
    assert len(set(ids)) == len(ids) == 4 * N
    assert sorted(rid.split("-a")[0] for rid in ids) == sorted(
        request_id_of(o, 0, sibling=s).split("-a")[0] for o in range(4) for s in range(N)
    )
    for rid, prompt, p in engine.calls:
        o = int(rid[1:].split("-")[0])
        assert prompt == PROMPTS[o] and p.n == 1 and p.max_tokens == 10
    assert len({p.seed for _, _, p in engine.calls}) == 4 * N  # each attempt its own seed
    for o, group in sink.groups.items():
        assert len(group.completions) == len(group.samples) == N
        assert set(group.finish_reasons) <= {"stop", "length"}
        for s, sample in enumerate(group.samples):
            tokens, lps = list(sample.tokens()), list(sample.logprobs())
            assert 0 < len(tokens) <= 10 and tuple(tokens) == group.completions[s]
            assert len(lps) == len(tokens)  # one log-prob per token
            assert all(math.isfinite(x) and x <= 0 for x in lps)
            assert lps == pytest.approx(model_logprobs(m, PROMPTS[o], tokens), abs=1e-5)
            assert list(sample.versions()) == [7] * len(tokens)
            # The journal holds the sealed sample, exactly.
            st = state.get(o, s)
            assert st is not None and st.sealed and st.payload == sample
    # EOS ended some samples early: lengths vary.
    assert len({len(c) for g in sink.groups.values() for c in g.completions}) > 1


# -- a kill and a resume --------------------------------------------------------------


SHORT = {(0, 0), (0, 1), (0, 2), (1, 0)}  # 4 tokens; the others 12


def life1(tmp_path: Path) -> dict[str, Any]:
    """Prompt 0's siblings and prompt 1's sibling 0 seal (4 tokens); prompt
    1's siblings 1 and 2 (12 tokens) are killed at 7, with progress
    journaled every 3 tokens. The kill: the journal file as it is on disk
    at that moment (synced, then copied) is all the next life gets."""
    m = model()
    engine, sink = Recording(m), Sink()
    c = collector(2)
    path, crashed = tmp_path / "journal", tmp_path / "journal.at-kill"
    journal = RolloutJournal(path, fingerprint=FP, lineage="L", progress_every=3)
    position = journal.mark(0)
    state = c.checkpoint_state()  # the checkpoint: before anything was generated
    seen: dict[str, tuple[int, ...]] = {}
    holder: list[RolloutLoop] = []

    def observe(p: SampleProgress) -> None:
        rollout = holder[0]
        partial = rollout.partial(1)
        sealed = {(x.ordinal, x.sibling) for x in c.ledger.held()}
        if (
            0 in sink.groups
            and (1, 0) in sealed
            and all(len(partial.get(s, ())) >= 7 for s in (1, 2))
        ):
            journal.writer.sync()
            shutil.copyfile(path, crashed)
            seen.update({f"s{s}": partial[s] for s in (1, 2)})
            raise Crash

    async def main() -> None:
        rollout = RolloutLoop(
            c, engine, sink, schedule="sibling", prompt_of=prompt_of,
            sampling_params=budgets(SHORT), journal=journal, max_in_flight=6, version=lambda: 0,
            on_progress=observe,
        )  # fmt: skip
        holder.append(rollout)
        with pytest.raises(Crash):
            async with rollout:
                await rollout.until(lambda: False)

    run_within(main())
    journal.close()
    return {"state": state, "position": position, "journal": crashed, "sink": sink,
            "partial": seen, "model": m}  # fmt: skip


def resume(
    life: dict[str, Any], params: Callable[[Lease, int], Any], parts: dict[str, Any] | None = None
) -> tuple[Any, ...]:
    c = collector(2)
    journal = RolloutJournal(life["journal"], fingerprint=FP, lineage="L", progress_every=3)
    checkpoint = Checkpoint.from_state_dict(life["state"]["ledger"])
    got = journal.recover(
        checkpoint, position=life["position"], checkpoint_id=0, reuse=Reuse.everything(),
        fork=0, step=0,
    )  # fmt: skip
    c.resume(
        life["state"], load_replay_buffer=True, sealed=got.sealed, attempt_floor=got.attempt_floor
    )
    engine, sink = Recording(life["model"]), Sink()
    if parts is not None:
        parts.update(collector=c, engine=engine, sink=sink)

    async def main() -> None:
        # The next policy version generates after the resume (its weights were
        # updated, say): the continued tokens must carry it, the prefix not.
        async with RolloutLoop(
            c, engine, sink, schedule="sibling", prompt_of=prompt_of, sampling_params=params,
            journal=journal, recovered=got, max_in_flight=6, version=lambda: 1,
        ) as rollout:  # fmt: skip
            await rollout.until(lambda: len(sink) == 2)

    try:
        run_within(main())
    finally:
        journal.close()
    return c, engine, sink, got


def test_a_resume_continues_a_sibling_from_its_durable_prefix_on_the_cpu_engine(
    tmp_path: Path,
) -> None:
    life = life1(tmp_path)
    before: Sink = life["sink"]
    c, engine, sink, got = resume(life, budgets(SHORT))
    m = life["model"]
    # Only the two killed siblings were requested again; the sealed ones
    # (all of prompt 0, prompt 1's sibling 0) came from the journal.
    assert sorted(rid.split("-a")[0] for rid, _, _ in engine.calls) == ["o1-s1", "o1-s2"]
    assert before.groups[0].samples == sink.groups[0].samples
    group = sink.groups[1]
    reused = group.samples[0]
    assert len(reused) == 4 and list(reused.versions()) == [0] * 4
    for rid, prompt, p in engine.calls:
        s = int(rid.split("-s")[1].split("-")[0])
        st = got.prefix(1, s)
        assert st is not None and isinstance(st.payload, TokenPayload)
        prefix = list(st.payload.tokens())
        assert len(prefix) == 6  # the progress record at 6 tokens; the 7th was lost
        assert tuple(prefix) == life["partial"][f"s{s}"][:6]  # what life 1 generated
        # The engine got exactly the prompt then the prefix, and the rest of the budget.
        assert prompt == PROMPTS[1] + prefix
        lease = Lease(1, s, int(rid.split("-a")[1]))
        assert lease.attempt >= got.attempt_floor
        assert (p.n, p.max_tokens, p.seed) == (1, 12 - 6, sample_seed(SEED, lease))
        sample = group.samples[s]
        tokens = list(sample.tokens())
        # The prefix, then the new tokens: 12 in all, the budget.
        assert tokens[:6] == prefix and len(tokens) == 12
        assert group.finish_reasons[s] == "length"
        assert list(sample.logprobs())[:6] == list(st.payload.logprobs())
        assert list(sample.versions()) == [0] * 6 + [1] * 6
        # The new tokens are what the engine generates for that request (the
        # CPU engine is deterministic: ask a fresh one the same again).
        out = run_within(generate_once(CpuEngine(m, seed=1), prompt, p, rid)).outputs[0]
        assert list(out.token_ids) == tokens[6:]
        assert list(sample.logprobs())[6:] == pytest.approx(list(out.logprobs), abs=1e-6)
        # And every log-prob is the model's given everything before the token:
        # the continuation was conditioned on the prefix.
        assert list(sample.logprobs()) == pytest.approx(
            model_logprobs(m, PROMPTS[1], tokens), abs=1e-5
        )
    assert all(c.ledger.status(o) is Status.BUFFERED for o in (0, 1))


def test_a_budget_lowered_below_a_durable_prefix_stops_the_loop(tmp_path: Path) -> None:
    """Prompt 1's killed siblings hold 6 durable tokens; the resume asks for
    samples of at most 6: ``sibling_params`` refuses before any request is
    sent, which stops the loop (not a failed sample: no attempt is burned,
    nothing is dropped), and prompt 1 stays outstanding for a resume with a
    budget that fits. Prompt 0 (every sibling sealed) lands regardless."""
    life = life1(tmp_path)
    parts: dict[str, Any] = {}
    with pytest.raises(ValueError, match="has 6 tokens, not fewer than max_tokens=6"):
        resume(life, budgets(SHORT, long_tokens=6), parts)
    c, engine, sink = parts["collector"], parts["engine"], parts["sink"]
    assert engine.calls == []
    assert sorted(sink.groups) == [0]
    assert c.ledger.status(1) is Status.OUTSTANDING and c.ledger.failures(1) == 0
