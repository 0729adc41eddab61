"""A tiny causal LM and its tokenizer, built offline and cached on disk.

``tiny_llm()`` returns a Hugging Face model directory (``config.json``,
``model.safetensors``, ``tokenizer.json``, ...) that loads in transformers
(``AutoModelForCausalLM`` / ``AutoTokenizer``, for training) and in vLLM
(``AsyncLLM``/``LLM`` with ``model=`` that directory, for generation), with
nothing downloaded, ever:

* the model is a random-weight ``LlamaForCausalLM`` (hidden 64, 2 layers,
  2 query heads and 1 key/value head of size 32: vLLM's CPU attention
  supports head sizes 32, 64, 80, ... only; 16 fails at engine start),
  float32, weights drawn from N(0, 0.2) so that sampled outputs are diverse;
* the tokenizer is a byte-level BPE trained with the ``tokenizers`` library
  on a small generated corpus (256 byte tokens, the specials ``<pad>`` 0,
  ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3, then merges), which prepends ``<s>``
  like Llama's, wrapped in ``PreTrainedTokenizerFast``.

The directory is built once per specification (and per transformers and
tokenizers version) under ``cache_root()`` (``$FRONTIER_TINY_LLM_CACHE``,
else ``$XDG_CACHE_HOME/frontier/tiny-llm``, else ``~/.cache/frontier/tiny-llm``)
and reused by every later test, demo or benchmark: building takes a couple
of seconds, and a fresh directory is renamed into place atomically, so
processes racing to build it never see a half-written one.
``save_weights(model, directory)`` writes a model's weights as the
``model.safetensors`` that vLLM's ``reload_weights`` reads.

Needs torch, transformers and tokenizers (all installed with vLLM); imported
inside the functions, so importing this module is light.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

#: Bump when the builder's output changes for the same specification.
BUILDER_VERSION: Final = 1
SPECIALS: Final = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID: Final = 0
BOS_ID: Final = 1
EOS_ID: Final = 2
_WORDS: Final = (
    "the a cat dog runs jumps over under blue red green tree house river stone light dark "
    "quick slow one two three four five six seven eight nine ten and or not is was will be "
    "alpha beta gamma delta sum of plus minus equals answer question"
).split()

#: What a process that loads the tiny model should have in its environment:
#: no hub, no telemetry, no tokenizer threads.
OFFLINE_ENV: Final[Mapping[str, str]] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@attrs.frozen
class TinyLlmSpec:
    """The shape of the tiny model; the cache key."""

    vocab_size: int = 384
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 32
    max_position_embeddings: int = 512
    init_std: float = 0.2
    seed: int = 0
    corpus_lines: int = 2000


def cache_root() -> Path:
    """Where built models are kept between runs."""
    if explicit := os.environ.get("FRONTIER_TINY_LLM_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "frontier" / "tiny-llm"


def offline_environ() -> dict[str, str]:
    """``OFFLINE_ENV`` as a fresh dict (merge it into ``os.environ`` or a
    subprocess's environment before transformers or vLLM is imported)."""
    return dict(OFFLINE_ENV)


def _versions() -> dict[str, str]:
    return {
        name: str(importlib.import_module(name).__version__)
        for name in ("transformers", "tokenizers")
    }


def cache_key(spec: TinyLlmSpec) -> str:
    doc = {"builder": BUILDER_VERSION, "spec": attrs.asdict(spec), **_versions()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def tiny_llm(
    spec: TinyLlmSpec | None = None, *, root: str | os.PathLike[str] | None = None
) -> Path:
    """The model directory for ``spec`` (default ``TinyLlmSpec()``), built
    on first use and cached under ``root`` (default ``cache_root()``)."""
    spec = spec or TinyLlmSpec()
    base = Path(root) if root is not None else cache_root()
    target = base / f"llama-{cache_key(spec)}"
    if (target / "config.json").is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=base))
    try:
        build(tmp, spec)
        try:
            os.rename(tmp, target)  # atomic; fails if another process won the race
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def corpus(lines: int, seed: int) -> Iterator[str]:
    """The tokenizer's training text: short generated sentences and sums."""
    rng = random.Random(f"tiny-llm-corpus:{seed}")
    for _ in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 14))]
        if rng.random() < 0.3:
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            words += [str(a), "+", str(b), "=", str(a + b)]
        yield " ".join(words) + "."


def build_tokenizer(spec: TinyLlmSpec) -> Any:
    """A ``PreTrainedTokenizerFast`` over a byte-level BPE trained locally."""
    tk = importlib.import_module("tokenizers")
    transformers = importlib.import_module("transformers")
    tok = tk.Tokenizer(tk.models.BPE(unk_token=None))
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus(spec.corpus_lines, spec.seed)), trainer=trainer)
    if [tok.token_to_id(s) for s in SPECIALS] != [PAD_ID, BOS_ID, EOS_ID, 3]:
        raise AssertionError("the special tokens did not get ids 0..3")
    # Prepend <s> on encode, as Llama tokenizers do.
    tok.post_processor = tk.processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )


def build_model(spec: TinyLlmSpec, vocab_size: int) -> Any:
    """A random-weight float32 ``LlamaForCausalLM`` of shape ``spec``."""
    import torch

    transformers = importlib.import_module("transformers")
    torch.manual_seed(spec.seed)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = transformers.LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=generator) * spec.init_std)
    model.generation_config.pad_token_id = PAD_ID
    return model


def build(directory: str | os.PathLike[str], spec: TinyLlmSpec | None = None) -> Path:
    """Build the model and tokenizer into ``directory`` (no cache)."""
    spec = spec or TinyLlmSpec()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec)
    model = build_model(spec, len(tokenizer))
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "frontier-tiny-llm.json").write_text(
        json.dumps({"builder": BUILDER_VERSION, "spec": attrs.asdict(spec), **_versions()})
    )
    return out


def save_weights(model: Any, directory: str | os.PathLike[str]) -> Path:
    """Write ``model``'s weights to ``directory/model.safetensors`` (atomically
    replaced): the weights-only directory that
    ``collective_rpc("reload_weights", kwargs={"weights_path": directory})``
    loads into a running vLLM engine."""
    safetensors_torch = importlib.import_module("safetensors.torch")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tmp = out / "model.safetensors.tmp"
    safetensors_torch.save_file(tensors, str(tmp))
    os.replace(tmp, out / "model.safetensors")
    return out


def vllm_engine_args(directory: str | os.PathLike[str], **overrides: Any) -> dict[str, Any]:
    """``AsyncEngineArgs`` keyword arguments that run the tiny model on vLLM's
    CPU build in little memory: float32 (vLLM would convert to bfloat16, and
    then its greedy outputs would not match transformers'), eager mode, a
    short context, and a 64 MiB KV cache (``kv_cache_memory_bytes``; the
    environment variable ``VLLM_CPU_KVCACHE_SPACE``, whole GiB, would win
    over it, so ``tiny_vllm_engine`` unsets it). ``max_num_batched_tokens``
    must be at least ``max_model_len``."""
    path = os.fspath(directory)
    args: dict[str, Any] = {
        "model": path,
        "tokenizer": path,
        "dtype": "float32",
        "max_model_len": 512,
        "max_num_seqs": 32,
        "max_num_batched_tokens": 512,
        "enforce_eager": True,
        "seed": 0,
        "disable_log_stats": True,
        "kv_cache_memory_bytes": 64 * 2**20,
    }
    args.update(overrides)
    return args


def tiny_vllm_engine(
    rpc_base_path: str | os.PathLike[str],
    *,
    spec: TinyLlmSpec | None = None,
    **overrides: Any,
) -> Any:
    """A ``VllmEngine`` over the tiny model (built or taken from the cache),
    offline, its sockets on loopback and its unix sockets in
    ``rpc_base_path`` (``loopback_environ``). Call it in the process's main
    module under ``if __name__ == "__main__":`` or from a test: vLLM starts
    engine-core processes of its own."""
    from ..rollout import VllmEngine, loopback_environ

    os.environ.update(OFFLINE_ENV)
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    directory = tiny_llm(spec)
    return VllmEngine.from_engine_args(
        environ=loopback_environ(rpc_base_path), **vllm_engine_args(directory, **overrides)
    )
