"""Not API: the project's verification rig. Names and flags may change
without notice.

The tortures under real SIGKILLs (torch, elastic, TRL, Ray: ``torch_job``,
``elastic_job``, ``trl_job``, ``ray_job``), the kill points
(``_killpoints``), the audits (``_sample_audit``: the per-sample one), the
stand-in workers (``ray_workers``, the stand-in engines of the jobs), the lives under
deadlines (``_lives``), the loopback Ray cluster (``local_ray``) and the CPU
demo behind ``frontier demo`` (``demo``, its worker ``grpo_worker``).

The rig may import anything in the project; nothing in the bindings or the
examples imports it. Its runnable commands share one command-line module
(``__main__.py``): ``python -m frontier_adapters.verify COMMAND``, with
COMMAND one of ``grpo-worker``, ``torch-run``, ``torch-torture``,
``ray-run``, ``ray-torture``,
``elastic-rank``, ``torchrun-loopback``, ``elastic-torture``,
``trl-life``, ``trl-torture``,
``trl-ab`` (``python -m frontier_adapters.verify`` lists them).
"""
