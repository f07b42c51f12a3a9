"""End-to-end scenarios: real training runs under torchrun that checkpoint and resume.

- `stateful_contract.scenarios.trainer`: a tiny per-token-loss trainer shaped like
  MindSpeed-MM's (run it with ``python -m torch.distributed.run ... -m
  stateful_contract.scenarios.trainer``).
- `stateful_contract.scenarios.mindspeed`: MindSpeed-MM's bug report's run 1 / run 2 scenario built on it
  (``python -m stateful_contract.scenarios.mindspeed``, ``nox -s scenario``). See ``docs/scenario.md``.
- `stateful_contract.scenarios.runs`: one torchrun launch of the trainer and its parsed logs.
- `stateful_contract.scenarios.resume`: a resumed pair's data against an uninterrupted run's.
"""
