"""A self-launched rank, the process a rank ``torchrun`` starts on this machine would be.

A rank is a new interpreter started as torchrun starts one (`launch.Phase.start`), so multiprocessing's start
method is nobody's choice, the process is ``MainProcess`` with no parent, and torch reads ``OMP_NUM_THREADS``
at import. What is left: the variables torchrun gives a rank (`torchrun_env`), and the user's command's view,
its directory, import path and arguments (`as_under_torchrun`, before any of the user's code runs).
docs/distributed.md, "What a rank sees", lists what was measured under both. In-world mode (the user's own
launcher) never calls either.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["as_under_torchrun", "of_caller", "torchrun_env"]


def of_caller() -> dict[str, Any]:
    """What the process that runs the check gives the user's code, for its ranks to give it too."""
    return {"cwd": os.getcwd(), "sys_path": list(sys.path), "argv": list(sys.argv)}


def torchrun_env(rank: int, world_size: int, port: int, run_id: str, error_file: Path) -> dict[str, str]:
    """What ``torchrun --nproc-per-node world_size`` adds to rank ``rank``'s environment on one node (torch
    v2.13.0: ``LocalElasticAgent._start_workers`` and ``_set_local_rank_env``, torch/distributed/run.py's
    ``OMP_NUM_THREADS``, ``elastic_launch``'s ``TORCHELASTIC_SIGNALS_TO_HANDLE``). Not yet
    ``TORCHELASTIC_USE_AGENT_STORE``: there is no agent's store, rank 0 hosts it (`world.rank_main` sets it
    once the group is formed, before the user's code)."""
    env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
           "ROLE_NAME": "default", "LOCAL_WORLD_SIZE": str(world_size), "WORLD_SIZE": str(world_size),
           "GROUP_WORLD_SIZE": "1", "ROLE_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
           "TORCHELASTIC_RUN_ID": run_id, "TORCH_NCCL_ASYNC_ERROR_HANDLING":
               os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
           "TORCHELASTIC_ERROR_FILE": str(error_file)}
    if (signals := _signals_to_handle()) is not None:
        env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = signals
    if "OMP_NUM_THREADS" not in os.environ and world_size > 1:
        env["OMP_NUM_THREADS"] = "1"
    return env


def as_under_torchrun(caller: dict[str, Any] | None) -> None:
    """The user's command's view in this rank; ``caller``: `of_caller`'s."""
    if caller is not None:
        os.chdir(caller["cwd"])
        sys.path[:] = caller["sys_path"]
        sys.argv[:] = caller["argv"]


def _signals_to_handle() -> str | None:
    """What ``elastic_launch`` writes into its own environment, which torchrun's ranks inherit:
    ``LaunchConfig.signals_to_handle``'s default (torch/distributed/launcher/api.py; None in a torch without it)."""
    from torch.distributed.launcher.api import LaunchConfig

    found = {f.name: f for f in dataclasses.fields(LaunchConfig)}.get("signals_to_handle")
    return None if found is None else str(found.default)
