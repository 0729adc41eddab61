"""The prompt stream of a TRL run: order, layout and fingerprint.

The stream is ``epochs * len(dataset)`` ordinals; ordinal ``o`` is position
``o % n`` of epoch ``o // n`` through that epoch's permutation, drawn from a
``torch.Generator`` seeded from ``(seed, epoch)``: the torch binding's
``StreamOrder``, which this binding builds on (ARCHITECTURE.md). Nothing
depends on what was yielded before, so the stream position after a resume
is the ledger's cut and nothing else.

``Layout`` is ``RepeatSampler``'s: a *block* of ``prompts`` distinct
ordinals (``generation_batch_size // num_generations``), each repeated
``num_generations`` times, the whole block repeated ``repeat``
(``num_iterations * steps_per_generation``) times: one copy per micro-step.
The layout may change between the lives of a run (another batch size):
ordinals do not depend on it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, Final

import attrs

from ..torch import StreamOrder as StreamOrder

FINGERPRINT_FORMAT: Final = "frontier_adapters.trl.stream/1"


@attrs.frozen
class Layout:
    """How blocks are laid out for one life of the run (see the module's
    docstring). ``grad_accum`` micro-steps make one optimizer step."""

    prompts: int
    num_generations: int
    repeat: int
    grad_accum: int

    def __attrs_post_init__(self) -> None:
        for name in ("prompts", "num_generations", "repeat", "grad_accum"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")

    @property
    def rows_per_copy(self) -> int:
        """Dataloader rows of one copy of a block: one micro-step's batch."""
        return self.prompts * self.num_generations

    def updates(self, blocks: int) -> int:
        """Optimizer steps that ``blocks`` whole blocks take (the last
        update of a run may hold fewer micro-steps)."""
        micro = blocks * self.repeat
        return -(-micro // self.grad_accum)

    def to_json(self) -> dict[str, int]:
        return attrs.asdict(self)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def stream_fingerprint(rows: Iterable[Any], *, dataset_len: int, seed: int, shuffle: bool) -> str:
    """A SHA-256 over every row (in index order, as canonical JSON) and the
    order's parameters: a changed dataset, seed or shuffle flag changes it;
    the batch layout does not (a resume may change it)."""
    h = hashlib.sha256()
    h.update(_canonical([FINGERPRINT_FORMAT, dataset_len, seed, shuffle]).encode())
    for row in rows:
        h.update(b"\n")
        h.update(_canonical(row).encode())
    return f"{FINGERPRINT_FORMAT}:{h.hexdigest()}"


def dataset_fingerprint(dataset: Any, *, seed: int, shuffle: bool, batch_size: int = 1024) -> str:
    """``stream_fingerprint`` of a Hugging Face ``datasets.Dataset`` (read in
    batches of ``batch_size`` rows, unformatted) or of any sequence of
    JSON-like rows."""
    n = len(dataset)

    def rows() -> Iterable[Any]:
        plain = dataset.with_format(None) if hasattr(dataset, "with_format") else dataset
        if hasattr(plain, "iter"):
            for batch in plain.iter(batch_size=batch_size):
                keys = sorted(batch)
                yield from (
                    {k: batch[k][i] for k in keys}
                    for i in range(len(batch[keys[0]]) if keys else 0)
                )
        else:
            yield from (plain[i] for i in range(n))

    return stream_fingerprint(rows(), dataset_len=n, seed=seed, shuffle=shuffle)
