"""frontier_adapters: thin bindings of frontier_core to torch data loaders
and to async rollout engines.

Installed as ``frontier_adapters`` (the directory is ``src/adapters``).
Adapters hold handles and translate events; every coverage decision is the
ledger's. Importing this package imports nothing heavy; each binding imports
its framework when it is itself imported.
"""

from ._collector import Pull as Pull
from ._collector import StreamCollector as StreamCollector
from ._collector import StreamSource as StreamSource
from ._memory import SequenceSource as SequenceSource

__all__ = ["Pull", "SequenceSource", "StreamCollector", "StreamSource"]
