"""``frontier bench``: the benchmark suite. The core's sections and the
measuring conventions live in ``frontier_core.bench``; the sections here
measure the bindings (torch loaders, the Ray ledger actor)."""
