"""``RolloutLoop(schedule="sibling")`` on real vLLM: one request per sibling, streamed
(``DELTA``) with vLLM's per-token log-probs (``SamplingParams(logprobs=0)``),
samples and progress journaled to a real journal file; then a kill and a
resume on which a sibling continues from its durable prefix through a
``TokensPrompt`` of the prompt then the prefix with ``max_tokens`` reduced
by the prefix's length (``continued_prompt``, ``vllm_sibling_params``).

Runs where ``test_vllm.py`` runs (``scripts/test.sh``: ``.venv-vllm`` with
FRONTIER_REQUIRE_VLLM=1). One engine for the module (its start is most of
the time), on one module-scoped ``asyncio.Runner``: an ``AsyncLLM`` serves
only the first event loop that used it. The "kill" stops the loop from its
progress observer at a chosen moment and takes the journal file as it is on
disk then; the resume runs on the same engine process, which holds nothing
of the killed requests (they were aborted), so everything the resumed
sibling knows of its past comes from the journal. Loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._vllm_support import descendants, inet_sockets, require_vllm, tiny_engine

require_vllm()

import torch  # noqa: E402
from frontier_adapters import SequenceSource, StreamCollector  # noqa: E402
from frontier_adapters.examples import tiny_llm  # noqa: E402
from frontier_adapters.journal import RolloutJournal  # noqa: E402
from frontier_adapters.rollout import (  # noqa: E402
    RolloutLoop,
    SampleProgress,
    VllmEngine,
    request_id_of,
    sample_seed,
    vllm_sibling_params,
)

from frontier_core import Checkpoint, Lease, LedgerConfig, Status  # noqa: E402
from frontier_core.journal import Extend, Progress, Reuse, TokenPayload, replay  # noqa: E402

from ._sample_support import Crash, Sink, prompt_of  # noqa: E402

FP = "vllm-samples"
N = 3
SEED = 5
PROMPTS = [[tiny_llm.BOS_ID, 70 + o % 16, 71, 72 + o % 5] for o in range(16)]
#: vLLM (float32 on CPU) against transformers (float32) on the same weights:
#: the largest difference measured was about 1e-5.
LOGPROB_TOL = 1e-3


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    r = asyncio.Runner()
    yield r
    r.close()


@pytest.fixture(scope="module")
def engine() -> Iterator[VllmEngine]:
    with tiny_engine() as e:
        yield e


@pytest.fixture(scope="module")
def hf_model() -> Any:
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(
        tiny_llm.tiny_llm(), dtype=torch.float32
    )


def hf_logprobs(model: Any, prompt: list[int], sample: list[int]) -> list[float]:
    """transformers' log-prob of each sample token given the prompt and the
    sample before it: what vLLM reports (raw log-probs, temperature 1)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sample])).logits[0]
    lp = torch.log_softmax(logits.float(), -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(sample)]


class Recording:
    """A ``VllmEngine`` that notes each request's prompt and parameters and
    the tokens and log-probs vLLM reported for it (``DELTA`` outputs)."""

    def __init__(self, engine: VllmEngine) -> None:
        self.engine = engine
        self.calls: list[tuple[str, list[int], Any]] = []
        self.reported: dict[str, tuple[list[int], list[float]]] = {}
        self.logprob_types: set[str] = set()

    @property
    def fatal_errors(self) -> tuple[type[BaseException], ...]:
        return self.engine.fatal_errors

    def check_event_loop(self) -> None:
        self.engine.check_event_loop()

    def generate(self, prompt: Any, sampling_params: Any, request_id: str) -> AsyncIterator[Any]:
        self.calls.append((request_id, list(prompt["prompt_token_ids"]), sampling_params))
        return self._outputs(prompt, sampling_params, request_id)

    async def _outputs(self, prompt: Any, params: Any, rid: str) -> AsyncIterator[Any]:
        tokens, lps = self.reported.setdefault(rid, ([], []))
        cumulative = params.output_kind.name == "CUMULATIVE"
        async with contextlib.aclosing(self.engine.generate(prompt, params, rid)) as gen:
            async for out in gen:
                for c in out.outputs:
                    if cumulative:  # every token so far: start again
                        del tokens[:], lps[:]
                    if c.logprobs is not None:
                        self.logprob_types.add(type(c.logprobs).__name__)
                        pairs = zip(c.token_ids, c.logprobs, strict=True)
                        lps.extend(d[t].logprob for t, d in pairs)
                    tokens.extend(c.token_ids)
                yield out

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)


def collector(n: int) -> StreamCollector:
    return StreamCollector(
        SequenceSource(PROMPTS[:n], batch_size=2),
        LedgerConfig(stream_len=n, samples=N, fingerprint=FP),
    )


def lease_of(rid: str) -> Lease:
    o, s, a = (int(part[1:]) for part in rid.split("-"))
    return Lease(o, s, a)


async def settle(engine: VllmEngine) -> None:
    for _ in range(300):
        if engine.llm.get_num_unfinished_requests() == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("vLLM still runs requests")


# -- one request per sibling --------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "flat"),
    [("delta", False), ("delta", True), ("cumulative", False)],
    ids=["delta", "delta-flat-logprobs", "cumulative"],
)
def test_each_sibling_is_its_own_request_with_vllms_logprobs_journaled(
    runner: asyncio.Runner,
    engine: VllmEngine,
    hf_model: Any,
    tmp_path: Path,
    kind: str,
    flat: bool,
) -> None:
    rec, sink, c = Recording(engine), Sink(), collector(4)
    journal = RolloutJournal(tmp_path / "journal", fingerprint=FP, lineage="L", progress_every=4)
    params = vllm_sibling_params(max_tokens=16, seed=SEED, output_kind=kind, flat_logprobs=flat)

    async def main() -> None:
        async with RolloutLoop(
            c, rec, sink, schedule="sibling", prompt_of=prompt_of, sampling_params=params,
            journal=journal, max_in_flight=12, timeout=120, version=lambda: 3,
        ) as rollout:  # fmt: skip
            await rollout.until(lambda: len(sink) == 4)

    t0 = time.perf_counter()
    runner.run(main())
    print(f"\n4 groups of {N} samples, one request each: {time.perf_counter() - t0:.2f} s")
    records = journal.writer.read().records
    journal.close()
    state = replay(records)
    assert all(c.ledger.status(o) is Status.BUFFERED for o in range(4))
    # One request per sibling, n=1, the bare prompt, the full budget, a seed per attempt.
    assert sorted(rid.split("-a")[0] for rid, _, _ in rec.calls) == sorted(
        f"o{o}-s{s}" for o in range(4) for s in range(N)
    )
    for rid, prompt, p in rec.calls:
        lease = lease_of(rid)
        assert rid == request_id_of(lease.ordinal, lease.attempt, sibling=lease.sibling)
        assert prompt == PROMPTS[lease.ordinal]
        assert (p.n, p.max_tokens, p.logprobs, p.seed) == (1, 16, 0, sample_seed(SEED, lease))
        assert p.output_kind.name == kind.upper()
    assert rec.logprob_types == {"FlatLogprobs" if flat else "list"}
    worst = 0.0
    for o, group in sink.groups.items():
        assert len(group.samples) == len(group.completions) == N
        assert len(set(group.completions)) > 1  # seeded per sibling: not n copies of one sample
        for s, sample in enumerate(group.samples):
            rid = next(r for r, _, _ in rec.calls if r.startswith(f"o{o}-s{s}-"))
            tokens, lps = list(sample.tokens()), list(sample.logprobs())
            assert 0 < len(tokens) <= 16 and len(lps) == len(tokens)
            assert all(math.isfinite(x) and x <= 0 for x in lps)
            # The log-probs vLLM reported, as journaled (float32), per token.
            assert (tokens, lps) == (rec.reported[rid][0], pytest.approx(rec.reported[rid][1]))
            want = hf_logprobs(hf_model, PROMPTS[o], tokens)
            worst = max(worst, max(abs(a - b) for a, b in zip(lps, want, strict=True)))
            assert list(sample.versions()) == [3] * len(tokens)
            st = state.get(o, s)
            assert st is not None and st.sealed and st.payload == sample
    print(f"largest |vLLM - transformers| log-prob difference: {worst:.2e}")
    assert worst < LOGPROB_TOL
    # Running samples were journaled as they streamed: a snapshot once 4
    # tokens were in (more when vLLM merged the deltas of a lagging
    # consumer), then the tokens after it.
    progress = [r for r in records if isinstance(r, Progress)]
    assert progress and all(4 <= len(r.payload) < 16 for r in progress)
    assert any(isinstance(r, Extend) for r in records)


# -- a kill and a resume --------------------------------------------------------------

SHORT = {(0, 0), (0, 1), (0, 2), (1, 0)}
SHORT_TOKENS, LONG_TOKENS, EVERY = 6, 40, 4


def budgets() -> Callable[[Lease, int], Any]:
    """6 tokens for the siblings in ``SHORT``, 40 for prompt 1's siblings 1
    and 2; ``ignore_eos`` so that the lengths are the budgets."""
    quick = vllm_sibling_params(max_tokens=SHORT_TOKENS, seed=SEED, ignore_eos=True)
    slow = vllm_sibling_params(max_tokens=LONG_TOKENS, seed=SEED, ignore_eos=True)
    return lambda lease, k: (quick if (lease.ordinal, lease.sibling) in SHORT else slow)(lease, k)


def test_a_killed_sibling_continues_from_its_durable_prefix_on_vllm(
    runner: asyncio.Runner, engine: VllmEngine, hf_model: Any, tmp_path: Path
) -> None:
    """Life 1: prompt 0's siblings and prompt 1's sibling 0 seal (6 tokens);
    prompt 1's siblings 1 and 2 (40 tokens) are killed past 13, progress
    journaled every 4. Life 2, on the journal as the kill left it: the
    sealed siblings come back without a request; siblings 1 and 2 continue
    from their durable prefixes, with prompt + prefix as vLLM's prompt and
    40 - len(prefix) as its max_tokens."""
    path, crashed = tmp_path / "journal", tmp_path / "journal.at-kill"
    c1, rec1, sink1 = collector(2), Recording(engine), Sink()
    journal = RolloutJournal(path, fingerprint=FP, lineage="L", progress_every=EVERY)
    position = journal.mark(0)
    state = c1.checkpoint_state()  # the checkpoint, before anything was generated
    at_kill: dict[int, tuple[int, ...]] = {}
    holder: list[RolloutLoop] = []

    def observe(p: SampleProgress) -> None:
        partial = holder[0].partial(1)
        sealed = {(x.ordinal, x.sibling) for x in c1.ledger.held()}
        if (
            0 in sink1.groups
            and (1, 0) in sealed
            and all(len(partial.get(s, ())) > 13 for s in (1, 2))
        ):
            journal.writer.sync()
            shutil.copyfile(path, crashed)  # what a SIGKILL now would leave
            at_kill.update({s: partial[s] for s in (1, 2)})
            raise Crash

    async def life1() -> None:
        rollout = RolloutLoop(
            c1, rec1, sink1, schedule="sibling", prompt_of=prompt_of, sampling_params=budgets(),
            journal=journal, max_in_flight=6, timeout=120, version=lambda: 0,
            on_progress=observe,
        )  # fmt: skip
        holder.append(rollout)
        with pytest.raises(Crash):  # not both groups landed: the kill came first
            async with rollout:
                await asyncio.wait_for(rollout.until(lambda: len(sink1) == 2), 120)
        await settle(engine)  # the killed requests are gone from vLLM

    t0 = time.perf_counter()
    runner.run(life1())
    journal.close()
    t1 = time.perf_counter()

    c2, rec2, sink2 = collector(2), Recording(engine), Sink()
    journal2 = RolloutJournal(crashed, fingerprint=FP, lineage="L", progress_every=EVERY)
    checkpoint = Checkpoint.from_state_dict(state["ledger"])
    got = journal2.recover(
        checkpoint, position=position, checkpoint_id=0, reuse=Reuse.everything(), fork=0, step=0
    )
    c2.resume(state, load_replay_buffer=True, sealed=got.sealed, attempt_floor=got.attempt_floor)

    async def life2() -> None:
        # The next policy version generates after the resume: the continued
        # tokens carry it, the prefix keeps its own.
        async with RolloutLoop(
            c2, rec2, sink2, schedule="sibling", prompt_of=prompt_of, sampling_params=budgets(),
            journal=journal2, recovered=got, max_in_flight=6, timeout=120,
            version=lambda: 1,
        ) as rollout:  # fmt: skip
            await rollout.until(lambda: len(sink2) == 2)

    runner.run(life2())
    records = journal2.writer.read().records
    journal2.close()
    t2 = time.perf_counter()
    print(f"\nlife 1 (to the kill) {t1 - t0:.2f} s, life 2 {t2 - t1:.2f} s")

    # Nothing sealed was requested again: only the two killed siblings.
    assert sorted(rid.split("-a")[0] for rid, _, _ in rec2.calls) == ["o1-s1", "o1-s2"]
    assert sink2.groups[0].samples == sink1.groups[0].samples
    group = sink2.groups[1]
    # Prompt 1's sibling 0 is life 1's sample, from the journal, at version 0.
    sealed0, old0 = got.state.get(1, 0), next(r for r in rec1.reported if r.startswith("o1-s0-"))
    assert sealed0 is not None and sealed0.sealed and group.samples[0] == sealed0.payload
    assert list(group.samples[0].tokens()) == rec1.reported[old0][0]
    assert list(group.samples[0].versions()) == [0] * SHORT_TOKENS
    final = replay(records)
    for rid, prompt, p in rec2.calls:
        lease = lease_of(rid)
        s = lease.sibling
        st = got.prefix(1, s)
        assert st is not None and isinstance(st.payload, TokenPayload)
        prefix, prefix_lps = list(st.payload.tokens()), list(st.payload.logprobs())
        k = len(prefix)
        print(
            f"o1-s{s}: {len(at_kill[s])} tokens at the kill, {k} durable, {LONG_TOKENS - k} asked"
        )
        assert 13 - EVERY < k < len(at_kill[s]) + 1
        # The durable prefix is what life 1 generated, with the log-probs vLLM
        # reported then.
        old = next(r for r in rec1.reported if r.startswith(f"o1-s{s}-"))
        assert prefix == list(at_kill[s][:k]) == rec1.reported[old][0][:k]
        assert prefix_lps == pytest.approx(rec1.reported[old][1][:k])
        # vLLM got a TokensPrompt of the prompt then the prefix, and the rest of the budget.
        assert prompt == PROMPTS[1] + prefix
        assert (p.n, p.max_tokens, p.logprobs) == (1, LONG_TOKENS - k, 0)
        assert lease.attempt >= got.attempt_floor and p.seed == sample_seed(SEED, lease)
        # The sealed sample: exactly the prefix, then what vLLM generated now;
        # the budget in all; each token at its own version.
        sample = group.samples[s]
        tokens, lps = list(sample.tokens()), list(sample.logprobs())
        assert tokens[:k] == prefix and tokens[k:] == rec2.reported[rid][0]
        assert len(tokens) == LONG_TOKENS and group.finish_reasons[s] == "length"
        assert lps[:k] == prefix_lps and lps[k:] == pytest.approx(rec2.reported[rid][1])
        assert list(sample.versions()) == [0] * k + [1] * (LONG_TOKENS - k)
        # Every log-prob is transformers' given all before it: vLLM's
        # continuation was conditioned on the prefix.
        want = hf_logprobs(hf_model, PROMPTS[1], tokens)
        assert max(abs(a - b) for a, b in zip(lps, want, strict=True)) < LOGPROB_TOL
        # And the journal of life 2 holds that sample, sealed.
        st2 = final.get(1, s)
        assert st2 is not None and st2.sealed and st2.payload == sample
    assert all(c2.ledger.status(o) is Status.BUFFERED for o in (0, 1))


def test_the_engine_listens_on_loopback_only(engine: VllmEngine) -> None:
    import psutil

    sockets = inet_sockets([psutil.Process(), *descendants()])
    assert sockets and {addr for _, _, addr, _ in sockets} == {"127.0.0.1"}, sockets
