"""A CPU engine with vLLM's ``AsyncLLM`` contract, over a tiny causal LM.

``TinyCausalLM`` is a one-block transformer in plain torch, randomly
initialised from a seed (nothing is downloaded). ``CpuEngine.generate``
samples real tokens from it, one decoding step at a time, and yields to the
event loop between steps, so concurrent requests interleave the way they do
in a serving engine; ``end-of-sequence`` (``EOS``) ends a sample early, so
completion lengths vary. It honours the contract of ``rollout.AsyncEngine``:

* ``n`` samples per request, one final ``RequestOutput`` with all of them
  (``output_kind="final_only"``) or a cumulative output after every step;
* ``abort(request_id)`` ends a running request with ``finish_reason
  "abort"`` on every unfinished sample;
* cancelling the consumer or ``aclose()``-ing the generator aborts the
  request (it is counted in ``aborted``), as vLLM does.

Sampling is deterministic given the engine seed, the request id and the
sampling seed. The engine samples from the model's *current* weights: a
trainer that steps the same module between awaits makes it an on-line
policy, as a weight sync does in a real async GRPO run.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from ..rollout import ABORT, LENGTH, STOP, Completion, RequestOutput

PAD: Final = 0
EOS: Final = 1
FINAL_ONLY: Final = "final_only"
CUMULATIVE: Final = "cumulative"


class TinyCausalLM(nn.Module):
    """Token and position embeddings, one pre-norm causal self-attention
    block with an MLP, and a tied-free output head. ``forward(tokens)`` maps
    ``[batch, time]`` token ids to ``[batch, time, vocab]`` logits."""

    def __init__(
        self,
        *,
        vocab: int = 16,
        dim: int = 32,
        heads: int = 2,
        max_len: int = 32,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not a multiple of heads {heads}")
        self.vocab, self.dim, self.heads, self.max_len = vocab, dim, heads, max_len
        g = torch.Generator().manual_seed(seed)
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm3 = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(p.shape[-1])))
                else:
                    p.zero_()
            for norm in (self.norm1, self.norm2, self.norm3):
                norm.weight.fill_(1.0)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, t = tokens.shape
        if t > self.max_len:
            raise ValueError(f"sequence of {t} tokens exceeds max_len {self.max_len}")
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        h = self.norm1(x)
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, self.dim // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, self.dim))
        x = x + self.mlp(self.norm2(x))
        out: torch.Tensor = self.head(self.norm3(x))
        return out


@attrs.frozen
class CpuSamplingParams:
    """The subset of vLLM's ``SamplingParams`` the CPU engine honours.

    ``stop_token_ids`` end a sample (the stop token is part of its
    ``token_ids``: it is a sampled action, and the trainer scores it);
    ``max_tokens`` bounds it (``finish_reason "length"``)."""

    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = (EOS,)
    output_kind: str = FINAL_ONLY

    def __attrs_post_init__(self) -> None:
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError(f"n and max_tokens must be >= 1, got {self.n}, {self.max_tokens}")
        if self.output_kind not in (FINAL_ONLY, CUMULATIVE):
            raise ValueError(f"output_kind must be {FINAL_ONLY!r} or {CUMULATIVE!r}")


def _request_seed(*parts: object) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class CpuEngine:
    """``AsyncEngine`` over a ``TinyCausalLM``. ``token_latency`` seconds
    are awaited after each decoding step (0 still yields to the loop)."""

    def __init__(self, model: TinyCausalLM, *, seed: int = 0, token_latency: float = 0.0) -> None:
        self.model = model
        self.seed = seed
        self.token_latency = token_latency
        #: request id -> aborted flag, for the requests running now.
        self._running: dict[str, bool] = {}
        #: Every request id submitted, in order.
        self.submitted: list[str] = []
        #: Request ids that ended by an abort (explicit, cancelled or closed).
        self.aborted: list[str] = []
        #: The most requests that were running at once.
        self.peak_running = 0

    @property
    def running(self) -> tuple[str, ...]:
        return tuple(self._running)

    async def abort(self, request_id: str) -> None:
        """Abort a running request; a finished or unknown id is ignored."""
        if request_id in self._running:
            self._running[request_id] = True

    async def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[RequestOutput]:
        """Sample ``sampling_params.n`` completions of ``prompt`` (a list of
        token ids, or a dict with ``"prompt_token_ids"`` like vLLM's
        ``TokensPrompt``)."""
        params: CpuSamplingParams = sampling_params
        if isinstance(prompt, dict):
            prompt = prompt["prompt_token_ids"]
        prompt_ids = [int(t) for t in prompt]
        if not prompt_ids or len(prompt_ids) + params.max_tokens > self.model.max_len:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens plus max_tokens {params.max_tokens} "
                f"does not fit max_len {self.model.max_len}"
            )
        if request_id in self._running:
            raise ValueError(f"request {request_id!r} is already running")
        self._running[request_id] = False
        self.submitted.append(request_id)
        self.peak_running = max(self.peak_running, len(self._running))
        g = torch.Generator().manual_seed(_request_seed(self.seed, request_id, params.seed))
        n = params.n
        seqs = torch.tensor([prompt_ids] * n, dtype=torch.long)
        samples: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        reasons: list[str | None] = [None] * n
        stops = set(params.stop_token_ids)
        final_sent = False
        try:
            for step in range(params.max_tokens):
                await asyncio.sleep(self.token_latency)
                if self._running[request_id]:
                    reasons = [r if r is not None else ABORT for r in reasons]
                    self.aborted.append(request_id)
                    break
                with torch.no_grad():
                    logits = self.model(seqs)[:, -1, :]
                    if params.temperature <= 0:
                        nxt = logits.argmax(-1)
                        scaled = logits
                    else:
                        scaled = logits / params.temperature
                        probs = torch.softmax(scaled, -1)
                        nxt = torch.multinomial(probs, 1, generator=g).squeeze(1)
                    # The behaviour policy's log-prob of each sampled token.
                    chosen = torch.log_softmax(scaled, -1).gather(1, nxt.unsqueeze(1)).squeeze(1)
                seqs = torch.cat([seqs, nxt.unsqueeze(1)], 1)
                for i, (tok, lp) in enumerate(zip(nxt.tolist(), chosen.tolist(), strict=True)):
                    if reasons[i] is None:
                        samples[i].append(int(tok))
                        logprobs[i].append(float(lp))
                        if tok in stops:
                            reasons[i] = STOP
                if all(r is not None for r in reasons) or step == params.max_tokens - 1:
                    break
                if params.output_kind == CUMULATIVE:
                    yield _output(request_id, samples, logprobs, reasons, finished=False)
            reasons = [r if r is not None else LENGTH for r in reasons]
            final_sent = True
            yield _output(request_id, samples, logprobs, reasons, finished=True)
        except (asyncio.CancelledError, GeneratorExit):
            if not final_sent:
                self.aborted.append(request_id)
            raise
        finally:
            del self._running[request_id]


def _output(
    request_id: str,
    samples: Sequence[list[int]],
    logprobs: Sequence[list[float]],
    reasons: Sequence[str | None],
    *,
    finished: bool,
) -> RequestOutput:
    return RequestOutput(
        request_id=request_id,
        outputs=tuple(
            Completion(index=i, token_ids=tuple(s), finish_reason=r, logprobs=tuple(lp))
            for i, (s, lp, r) in enumerate(zip(samples, logprobs, reasons, strict=True))
        ),
        finished=finished,
    )
