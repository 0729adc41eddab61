"""Runnable examples, not library API: the CPU engine and toy GRPO model
that let the rollout loop run without a GPU, stand-in rollout workers, and
the jobs behind ``frontier demo`` and the torture commands.

They may import anything in the project; nothing in the bindings imports
them. Their runnable commands share one command-line module
(``__main__.py``): ``python -m frontier_adapters.examples COMMAND``, with
COMMAND one of ``grpo-worker``, ``torch-run``, ``torch-torture``,
``ray-run``, ``ray-torture``. ``local_ray`` starts the Ray cluster of the
examples, the benchmark and the tests on 127.0.0.1 only.
"""
