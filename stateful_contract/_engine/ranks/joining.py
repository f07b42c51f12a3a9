"""Joining a world that the user's launcher started: torchrun, ``srun``, ``mpirun``.

Every rank joins through ``env://``, so the launcher only has to say where the world is
(``MASTER_ADDR``, ``MASTER_PORT``) and which rank this is (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``). torchrun sets them; `launcher_env` maps SLURM's and Open MPI's own onto
them where ``RANK`` is unset. The backend is the user's (`default_backend`); commands
and answers travel through a gloo group beside it (`join`), as
``torch.distributed.checkpoint`` does, because nccl and hccl move tensors on devices,
not pickled Python objects through host memory.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from .world import World

__all__ = ["DEFAULT_PORT", "alive", "default_backend", "first_host", "join", "launcher_env", "local_pids"]

#: ``MASTER_PORT`` when the launcher gives none (SLURM and Open MPI do not): torchrun's default.
DEFAULT_PORT = "29500"


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``node[03-05,7],gpu1`` -> ``node03``.

    ``scontrol show hostnames`` does this on a cluster; a rank may not have ``scontrol``,
    and the first host is all ``MASTER_ADDR`` needs.
    """
    head = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if head is None:
        return nodelist
    prefix, _, ranges = head.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def launcher_env(env: Mapping[str, str], *, master_addr: str | None = None,
                 master_port: str | None = None) -> dict[str, str]:
    """The ``env://`` variables ``env`` lacks, taken from SLURM's or Open MPI's own.

    Nothing is changed where ``RANK`` is set (torchrun, or a user who set it). SLURM:
    ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, ``MASTER_ADDR`` from
    ``--master-addr`` or the first host of ``SLURM_NODELIST`` (``SLURM_JOB_NODELIST``).
    Open MPI: ``OMPI_COMM_WORLD_RANK``, ``..._SIZE``, ``..._LOCAL_RANK``, ``MASTER_ADDR``
    from ``--master-addr`` (mpirun says nothing of the first host; 127.0.0.1 on one machine).
    """
    if "RANK" in env:
        found: dict[str, str] = {}
    elif "SLURM_PROCID" in env:
        nodes = env.get("SLURM_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        found = {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env.get("SLURM_NTASKS", "1"),
                 "LOCAL_RANK": env.get("SLURM_LOCALID", "0"), "MASTER_ADDR": first_host(nodes)}
    elif "OMPI_COMM_WORLD_RANK" in env:
        found = {"RANK": env["OMPI_COMM_WORLD_RANK"], "WORLD_SIZE": env.get("OMPI_COMM_WORLD_SIZE", "1"),
                 "LOCAL_RANK": env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"), "MASTER_ADDR": "127.0.0.1"}
    else:
        found = {}
    if found:
        if master_addr:
            found["MASTER_ADDR"] = master_addr
        if "MASTER_ADDR" in env and not master_addr:
            found["MASTER_ADDR"] = env["MASTER_ADDR"]  # the user's export wins over a guess
        found["MASTER_PORT"] = master_port or env.get("MASTER_PORT", DEFAULT_PORT)
    elif master_port and "MASTER_PORT" not in env:
        found["MASTER_PORT"] = master_port
    return found


def default_backend() -> str:
    """hccl where ``torch_npu`` imports (Ascend NPUs), nccl where CUDA is there, else gloo."""
    try:
        import torch_npu  # type: ignore[import-not-found]  # noqa: F401

        return "hccl"
    except ImportError:
        pass
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def _set_device(backend: str, local_rank: int) -> None:
    """nccl and hccl need each rank on its own device before the group is made."""
    if backend == "nccl":
        import torch

        torch.cuda.set_device(local_rank)
    elif backend == "hccl":
        import torch
        import torch_npu  # noqa: F401

        torch.npu.set_device(local_rank)  # type: ignore[attr-defined]


def join(run_dir: Path, *, backend: str, timeout: float,
         environ: MutableMapping[str, str] | None = None) -> World:
    """Join the launcher's world through ``env://``; returns this rank's `World`, its gloo group beside.

    ``timeout`` bounds the group's collectives (a rank gone for good); hangs inside an example
    are the engine's to end (`stateful_contract._engine.ranks.in_world`).
    """
    import torch.distributed as dist

    env = os.environ if environ is None else environ
    rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
    _set_device(backend, int(env.get("LOCAL_RANK", "0")))
    limit = datetime.timedelta(seconds=timeout)
    attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and attempt != "0":
        # torchrun's agent keeps one store for every attempt, and env:// adds no prefix per attempt:
        # gloo's ranks of a restarted job could read the addresses the previous attempt's ranks left
        # there ("Connection refused" at connectFullMesh). Each attempt gets keys of its own.
        # (torch.distributed exports both stores; its stubs do not say so.)
        store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), size,  # type: ignore[attr-defined]
                              is_master=False, timeout=limit)
        prefixed = dist.PrefixStore(f"/stateful-contract/attempt_{attempt}", store)  # type: ignore[attr-defined]
        dist.init_process_group(backend, store=prefixed,
                                rank=rank, world_size=size, timeout=limit)
    else:
        dist.init_process_group(backend, init_method="env://", timeout=limit)
    # A gloo group for Python objects; the default group already is one on gloo.
    group: Any = None if backend == "gloo" else dist.new_group(backend="gloo", timeout=limit)
    world = World(rank, size, run_dir, group=group)
    (run_dir / "status").mkdir(parents=True, exist_ok=True)
    # Where each rank runs, for the message when one goes away (a pid means something on its host only).
    _host_file(run_dir, rank).write_text(f"{socket.gethostname()} {os.getpid()}\n",
                                                         encoding="utf-8")
    return world


def _host_file(run_dir: Path, rank: int) -> Path:
    return run_dir / "status" / f"rank{rank}.host"


def local_pids(run_dir: Path, world_size: int) -> dict[int, int]:
    """The process of each rank that runs on this host (as each wrote when it joined), by rank."""
    found = {}
    for rank in range(world_size):
        try:
            host, pid = _host_file(run_dir, rank).read_text(encoding="utf-8").split()
        except (OSError, ValueError):
            continue
        if host == socket.gethostname():
            found[rank] = int(pid)
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited and not yet reaped by its launcher, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return sys.platform.startswith("linux") is False
