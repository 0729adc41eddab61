"""Benchmarks of the core alone, and the conventions every benchmark of the
project follows (``frontier bench`` runs these sections beside the adapters').

Imports the standard library and ``frontier_core`` only.
"""

from ._harness import Row as Row
from ._harness import format_table as format_table
from ._harness import machine as machine
from ._harness import ratios_of as ratios_of
from ._harness import row as row
from ._harness import summarize as summarize
from ._harness import timed as timed
from ._sections import bench_checkpoint as bench_checkpoint
from ._sections import bench_ledger as bench_ledger
from ._sections import bench_memory as bench_memory
from ._sections import bench_simulator as bench_simulator

__all__ = [
    "Row",
    "bench_checkpoint",
    "bench_ledger",
    "bench_memory",
    "bench_simulator",
    "format_table",
    "machine",
    "ratios_of",
    "row",
    "summarize",
    "timed",
]
