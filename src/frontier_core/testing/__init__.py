"""Verification tools for frontier_core and for frameworks that embed it.

``explore`` checks the real ledger exhaustively within small bounds. Nothing
here is imported by ``import frontier_core``.
"""

from ._explore import Bounds as Bounds
from ._explore import InvariantViolation as InvariantViolation
from ._explore import Report as Report
from ._explore import explore as explore

__all__ = ["Bounds", "InvariantViolation", "Report", "explore"]
