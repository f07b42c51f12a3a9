"""A self-launched rank, made to look to the loader like a rank ``torchrun`` starts on this machine.

The ranks are forked from the launcher's forkserver (`launcher._start_forkserver` says why), which marks them
as its children: multiprocessing's start method set to ``forkserver`` (a loader's workers, with no
``multiprocessing_context``, then each start from a new forkserver and import torch again), the process named
``ForkServerProcess-1`` with a parent, none of the variables ``torchrun`` itself adds, and the launcher's
``sys.path`` and ``sys.argv``. `as_under_torchrun` undoes each in the rank before any of the user's code runs;
docs/distributed.md, "What a rank sees", lists what was measured under both. In-world mode (the user's own
launcher) never calls it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.process
import os
import sys
from typing import Any

__all__ = ["as_under_torchrun", "of_caller"]


def of_caller() -> dict[str, Any]:
    """What the process that runs the check gives the user's code, for its ranks to give it too."""
    return {"cwd": os.getcwd(), "sys_path": list(sys.path), "argv": list(sys.argv)}


def as_under_torchrun(caller: dict[str, Any] | None) -> None:
    """Make this rank's process what a rank of ``torchrun`` is on this machine; ``caller``: `of_caller`'s."""
    import torch

    # No start method chosen, as in a new interpreter: get_start_method() is the platform's default
    # (fork on Linux before Python 3.14), and a factory may still choose one without force=True.
    multiprocessing.set_start_method(None, force=True)
    # The main process, with no parent: code that asks `current_process().name == "MainProcess"` to tell a
    # trainer from a worker takes the trainer's path, as under torchrun.
    me: Any = multiprocessing.current_process()
    me.name, me._identity, me._parent_pid = "MainProcess", (), None  # what CPython's own main process has
    multiprocessing.process._parent_process = None  # type: ignore[attr-defined]
    # What torchrun's own main adds to every rank's environment (torch/distributed/run.py): OMP_NUM_THREADS=1
    # unless set, with more than one rank per node (torch reads it at import, so its threads are set here too).
    if (signals := _signals_to_handle()) is not None:
        os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = signals
    if "OMP_NUM_THREADS" not in os.environ and int(os.environ.get("LOCAL_WORLD_SIZE", "1")) > 1:
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    if caller is not None:  # the user's command's view: its directory, import path and arguments
        os.chdir(caller["cwd"])
        sys.path[:] = caller["sys_path"]
        sys.argv[:] = caller["argv"]


def _signals_to_handle() -> str | None:
    """What ``elastic_launch`` writes into its own environment, which the ranks torchrun starts as commands
    inherit and ranks forked from a forkserver do not: ``LaunchConfig.signals_to_handle``'s default
    (torch/distributed/launcher/api.py; None in a torch without it)."""
    from torch.distributed.launcher.api import LaunchConfig

    field = {f.name: f for f in dataclasses.fields(LaunchConfig)}.get("signals_to_handle")
    return None if field is None else str(field.default)
