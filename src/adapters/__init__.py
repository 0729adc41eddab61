"""frontier_adapters: thin bindings of frontier_core to torch data loaders
and to async rollout engines.

Installed as ``frontier_adapters`` (the directory is ``src/adapters``).
Adapters hold handles and translate events; every coverage decision is the
ledger's. Importing this package imports nothing heavy; each binding imports
its framework when it is itself imported.
"""

__all__: list[str] = []
