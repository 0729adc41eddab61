"""The async GRPO simulator: kill/resume torture of the ledger with a legacy A/B.

Not imported by ``frontier_core`` itself; ``frontier simulate`` runs it.
"""

from ._pipeline import CheckpointStore as CheckpointStore
from ._pipeline import Pipeline as Pipeline
from ._pipeline import SimulationError as SimulationError
from ._pipeline import Stats as Stats
from ._pipeline import simulate as simulate
from ._report import ABResult as ABResult
from ._report import ModeResult as ModeResult
from ._report import random_workload as random_workload
from ._report import run_ab as run_ab
from ._report import run_mode as run_mode
from ._workload import Kill as Kill
from ._workload import KillKind as KillKind
from ._workload import Workload as Workload

__all__ = [
    "ABResult",
    "CheckpointStore",
    "Kill",
    "KillKind",
    "ModeResult",
    "Pipeline",
    "SimulationError",
    "Stats",
    "Workload",
    "random_workload",
    "run_ab",
    "run_mode",
    "simulate",
]
