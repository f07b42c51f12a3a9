"""End-to-end scenarios: real training runs under torchrun that checkpoint and resume.

- `stateful_contract.scenarios.trainer`: a tiny per-token-loss trainer shaped like
  MindSpeed-MM's (run it with ``python -m torch.distributed.run ... -m
  stateful_contract.scenarios.trainer``).
- `stateful_contract.scenarios.mindspeed`: MindSpeed-MM's bug report's run 1 / run 2 scenario built on it
  (``python -m stateful_contract.scenarios.mindspeed``). See ``docs/distributed.md``.
"""
