"""Small examples and reusable example parts, not library API: the CPU
engine (``cpu_engine``: vLLM's ``AsyncLLM`` contract over a tiny torch
model) and the toy GRPO trainer (``grpo``: a task, its reward, one update)
that let the rollout loop run without a GPU, and the tiny Llama built
offline for vLLM and transformers (``tiny_llm``).

They import public names only (``tests/test_architecture.py`` enforces it):
no private module or name of the project or of a framework, nothing of
``frontier_adapters.verify`` or ``frontier_adapters.bench``. Nothing in the
bindings imports them. The torture jobs, kill points, audits, stand-in
workers and the demo are the verification rig, ``frontier_adapters.verify``.
"""
