"""The async GRPO simulator: kill/resume torture of the ledger with a legacy
A/B, and the measure of the tokens each recovery mode generates again.

Not imported by ``frontier_core`` itself; ``frontier simulate`` runs it.
"""

from ._pipeline import CheckpointStore as CheckpointStore
from ._pipeline import KillWaste as KillWaste
from ._pipeline import Pipeline as Pipeline
from ._pipeline import Sample as Sample
from ._pipeline import SimulationError as SimulationError
from ._pipeline import Stats as Stats
from ._pipeline import simulate as simulate
from ._report import ABResult as ABResult
from ._report import ModeResult as ModeResult
from ._report import random_workload as random_workload
from ._report import run_ab as run_ab
from ._report import run_mode as run_mode
from ._waste import GOAL_PCT as GOAL_PCT
from ._waste import WASTE_MODES as WASTE_MODES
from ._waste import WasteMode as WasteMode
from ._waste import WasteResult as WasteResult
from ._waste import run_waste as run_waste
from ._workload import Kill as Kill
from ._workload import KillKind as KillKind
from ._workload import Workload as Workload

__all__ = [
    "GOAL_PCT",
    "WASTE_MODES",
    "ABResult",
    "CheckpointStore",
    "Kill",
    "KillKind",
    "KillWaste",
    "ModeResult",
    "Pipeline",
    "Sample",
    "SimulationError",
    "Stats",
    "WasteMode",
    "WasteResult",
    "Workload",
    "random_workload",
    "run_ab",
    "run_mode",
    "run_waste",
    "simulate",
]
