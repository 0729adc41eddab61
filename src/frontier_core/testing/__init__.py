"""Verification tools for frontier_core and for frameworks that embed it.

``explore`` checks the real ledger exhaustively within small bounds
(groups of n samples, n = 1 by default); ``explore_journal``
checks the rollout journal's core (encoder, decoder, replay, compaction),
torn tails included. ``run_integration_test``
drives a framework's wiring of the ledger (an ``Integration``: whole groups,
or sibling by sibling) through random runs with stale results and crashes.
Nothing here is imported by ``import frontier_core``.
"""

from ._explore import Bounds as Bounds
from ._explore import InvariantViolation as InvariantViolation
from ._explore import Report as Report
from ._explore import explore as explore
from ._explore_journal import JournalBounds as JournalBounds
from ._explore_journal import JournalReport as JournalReport
from ._explore_journal import explore_journal as explore_journal
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
    "JournalBounds",
    "JournalReport",
    "Report",
    "explore",
    "explore_journal",
    "integration_machine",
    "run_integration_test",
]
