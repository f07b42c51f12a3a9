"""End-to-end scenarios: real training runs under torchrun that checkpoint and resume.

The project's own evidence, not part of the package: run from the repository's root,
where ``tests`` is importable (``python -m tests.scenarios.mindspeed``).

- `tests.scenarios.trainer`: a tiny per-token-loss trainer shaped like
  MindSpeed-MM's (run it with ``python -m torch.distributed.run ... -m
  tests.scenarios.trainer``).
- `tests.scenarios.mindspeed`: MindSpeed-MM's bug report's run 1 / run 2 scenario built on it
  (``python -m tests.scenarios.mindspeed``, ``nox -s scenario``). See ``docs/scenario.md``.
- `tests.scenarios.runs`: one torchrun launch of the trainer and its parsed logs.
- `tests.scenarios.resume`: a resumed pair's data against an uninterrupted run's.
"""
