"""The TRL binding of frontier_core (imports trl, transformers and torch).

Pinned to TRL 1.16 (checked with transformers 5.19 and 5.24). Swap the
trainer class and resume with ``True`` in every life::

    from frontier_adapters.trl import FrontierGRPOTrainer

    trainer = FrontierGRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(...),
                                  train_dataset=dataset, processing_class=tokenizer)
    trainer.train(resume_from_checkpoint=True)

The trainer stands on the one run object, ``frontier_adapters.run.Run``
(``trainer.frontier``): its ledger, its journal of attempt reservations and
its checkpoints, in ``output_dir/frontier`` or, with
``frontier_remote="s3://..."``, in a store that survives the node. Every
training row carries its stream ordinal in ``ORDINAL_COLUMN`` (reward
functions receive it as a keyword argument); each Trainer checkpoint
``checkpoint-N`` is paired with the run's coverage checkpoint of step ``N``,
written after it; a resume seeks the stream to the cut instead of skipping
batches, across epochs and with another batch size.
"""

from __future__ import annotations

from .._errors import CheckpointFileError as CheckpointFileError
from .._errors import CheckpointFileVersionError as CheckpointFileVersionError
from .._errors import StreamMisalignedError as StreamMisalignedError
from ._blocks import ORDINAL_COLUMN as ORDINAL_COLUMN
from ._blocks import GenerationBlocks as GenerationBlocks
from ._blocks import stream_source as stream_source
from ._checkpoints import PART as PART
from ._checkpoints import checkpoint_folders as checkpoint_folders
from ._checkpoints import paired_folder as paired_folder
from ._sampler import FrontierSampler as FrontierSampler
from ._sampler import OrdinalRows as OrdinalRows
from ._stream import Layout as Layout
from ._stream import StreamOrder as StreamOrder
from ._stream import dataset_fingerprint as dataset_fingerprint
from ._stream import stream_fingerprint as stream_fingerprint
from ._trainer import LOG_NAME as LOG_NAME
from ._trainer import RUN_DIR as RUN_DIR
from ._trainer import FrontierCallback as FrontierCallback
from ._trainer import FrontierGRPOMixin as FrontierGRPOMixin
from ._trainer import FrontierGRPOTrainer as FrontierGRPOTrainer

#: The TRL versions this binding was built and tested against.
TRL_VERSIONS = ("1.16.0",)

__all__ = [
    "LOG_NAME",
    "ORDINAL_COLUMN",
    "PART",
    "RUN_DIR",
    "TRL_VERSIONS",
    "CheckpointFileError",
    "CheckpointFileVersionError",
    "FrontierCallback",
    "FrontierGRPOMixin",
    "FrontierGRPOTrainer",
    "FrontierSampler",
    "GenerationBlocks",
    "Layout",
    "OrdinalRows",
    "StreamMisalignedError",
    "StreamOrder",
    "checkpoint_folders",
    "dataset_fingerprint",
    "paired_folder",
    "stream_fingerprint",
]
