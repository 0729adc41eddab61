"""Verification tools for frontier_core and for frameworks that embed it.

``explore`` checks the real ledger exhaustively within small bounds, and
``explore_samples`` the real sample-level ledger. Nothing here is imported
by ``import frontier_core``.
"""

from ._explore import Bounds as Bounds
from ._explore import InvariantViolation as InvariantViolation
from ._explore import Report as Report
from ._explore import explore as explore
from ._explore_samples import SampleBounds as SampleBounds
from ._explore_samples import SampleReport as SampleReport
from ._explore_samples import explore_samples as explore_samples
from ._harness import DEFAULT_SETTINGS as DEFAULT_SETTINGS
from ._harness import CoverageViolation as CoverageViolation
from ._harness import Integration as Integration
from ._harness import IntegrationMachine as IntegrationMachine
from ._harness import integration_machine as integration_machine
from ._harness import run_integration_test as run_integration_test

__all__ = [
    "DEFAULT_SETTINGS",
    "Bounds",
    "CoverageViolation",
    "Integration",
    "IntegrationMachine",
    "InvariantViolation",
    "Report",
    "SampleBounds",
    "SampleReport",
    "explore",
    "explore_samples",
    "integration_machine",
    "run_integration_test",
]
