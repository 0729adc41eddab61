"""Runnable examples, not library API: the CPU engine and toy GRPO model
that let the rollout loop run without a GPU, stand-in rollout workers, and
the jobs behind ``frontier demo`` and the torture commands.

They may import anything in the project; nothing in the bindings imports
them. Run one with ``python -m frontier_adapters.examples.<name>``.
"""
