"""The TRL binding of frontier_core (imports trl, transformers and torch).

Pinned to TRL 1.16 (checked with transformers 5.19 and 5.24). Swap the
trainer class and resume with ``True``::

    from frontier_adapters.trl import FrontierGRPOTrainer

    trainer = FrontierGRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(...),
                                  train_dataset=dataset, processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=latest_checkpoint(args.output_dir) is not None)

Every training row carries its stream ordinal in ``ORDINAL_COLUMN`` (reward
functions receive it as a keyword argument); each checkpoint folder gets a
``frontier_state.json`` written last; a resume seeks the stream to the cut
instead of skipping batches, across epochs and with another batch size.
"""

from __future__ import annotations

from .._errors import CheckpointFileError as CheckpointFileError
from .._errors import CheckpointFileVersionError as CheckpointFileVersionError
from .._errors import StreamMisalignedError as StreamMisalignedError
from ._run import MAX_STATE_BYTES as MAX_STATE_BYTES
from ._run import ORDINAL_COLUMN as ORDINAL_COLUMN
from ._run import STATE_FILE as STATE_FILE
from ._run import FrontierRun as FrontierRun
from ._run import checkpoint_folders as checkpoint_folders
from ._run import latest_checkpoint as latest_checkpoint
from ._run import read_state as read_state
from ._run import torn_checkpoints as torn_checkpoints
from ._run import write_state as write_state
from ._sampler import FrontierSampler as FrontierSampler
from ._sampler import OrdinalRows as OrdinalRows
from ._stream import Layout as Layout
from ._stream import StreamOrder as StreamOrder
from ._stream import dataset_fingerprint as dataset_fingerprint
from ._stream import stream_fingerprint as stream_fingerprint
from ._trainer import LOG_NAME as LOG_NAME
from ._trainer import FrontierCallback as FrontierCallback
from ._trainer import FrontierGRPOMixin as FrontierGRPOMixin
from ._trainer import FrontierGRPOTrainer as FrontierGRPOTrainer

#: The TRL versions this binding was built and tested against.
TRL_VERSIONS = ("1.16.0",)

__all__ = [
    "LOG_NAME",
    "MAX_STATE_BYTES",
    "ORDINAL_COLUMN",
    "STATE_FILE",
    "TRL_VERSIONS",
    "CheckpointFileError",
    "CheckpointFileVersionError",
    "FrontierCallback",
    "FrontierGRPOMixin",
    "FrontierGRPOTrainer",
    "FrontierRun",
    "FrontierSampler",
    "Layout",
    "OrdinalRows",
    "StreamMisalignedError",
    "StreamOrder",
    "checkpoint_folders",
    "dataset_fingerprint",
    "latest_checkpoint",
    "read_state",
    "stream_fingerprint",
    "torn_checkpoints",
    "write_state",
]
