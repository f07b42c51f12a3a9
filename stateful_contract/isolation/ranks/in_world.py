"""A world the user's launcher started (torchrun, srun, mpirun): joining it, and the executor in it.

Every rank joins through ``env://`` (`join`); the engine runs on rank 0 (`InWorld`), the others `follow`.
What replaces a restart (``mode``, `Handler.as_ranks`): docs/distributed.md, "Inside your launcher's world".
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import stat
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from ...config import LoaderConfig
from ...repro import steps
from ...repro.guard import frozen
from ...search.plans import Alignment
from ...spellings import OF_ITS_OWN_PROCESSES
from ..executors import PROBE_CONFIG
from ..processes import alive
from .executor import RankExecutor, WorldDown, shell_words
from .failures import LaunchOutcome
from .launch import where_ranks_were
from .world import Handler, World, local_pids

__all__ = ["OWN_WORLD", "InWorld", "default_backend", "first_host", "follow", "join", "launch_line", "launcher_env", "private_dir",
           "private_run_dir"]

#: ``MASTER_PORT`` when the launcher gives none (SLURM and Open MPI do not): torchrun's default.
DEFAULT_PORT = "29500"
#: Where SLURM and Open MPI say a task's rank: the variables they set for ``WORLD_SIZE`` and ``LOCAL_RANK``, and
#: the launch line a rerun hint names (`launch_line`).
_LAUNCHERS = {"SLURM_PROCID": ("SLURM_NTASKS", "SLURM_LOCALID", "srun --ntasks {} python"),
              "OMPI_COMM_WORLD_RANK": ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun -np {} python")}


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list, ``node[03-05,7],gpu1`` -> ``node03``: all ``MASTER_ADDR`` needs (a
    rank may not have ``scontrol show hostnames``)."""
    head = re.match(r"([^,\[]+)(?:\[([^]\-,]+))?", nodelist.strip())  # the name, and its first range's start
    return head.group(1) + (head.group(2) or "") if head else nodelist


def launcher_env(env: Mapping[str, str], *, master_addr: str | None = None,
                 master_port: str | None = None) -> dict[str, str]:
    """The ``env://`` variables ``env`` lacks, from SLURM's or Open MPI's own (none where ``RANK`` is set).
    ``MASTER_ADDR``: ``master_addr``, else the user's export, else the first host of ``SLURM_NODELIST``
    (``SLURM_JOB_NODELIST``) or, under mpirun, which says nothing of it, 127.0.0.1."""
    rank = next((name for name in _LAUNCHERS if name in env), None)
    if "RANK" in env or rank is None:
        return {"MASTER_PORT": master_port} if master_port and "MASTER_PORT" not in env else {}
    size, local, _ = _LAUNCHERS[rank]
    nodes = env.get("SLURM_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
    guess = first_host(nodes) if rank == "SLURM_PROCID" else "127.0.0.1"
    return {"RANK": env[rank], "WORLD_SIZE": env.get(size, "1"), "LOCAL_RANK": env.get(local, "0"),
            "MASTER_ADDR": master_addr or env.get("MASTER_ADDR", guess),
            "MASTER_PORT": master_port or env.get("MASTER_PORT", DEFAULT_PORT)}


#: The "launch line" of a world a script made itself (`run_in_world` after its own ``init_process_group``): its
#: rerun hints are that call in the script, not a launcher's command (`InWorld.rerun`).
OWN_WORLD = "your script's own world (run_in_world on every rank)"


def launch_line(env: Mapping[str, str], world_size: int, *, own_world: bool = False) -> str:
    """How the user launched this world, as a rerun hint writes it: ``torchrun --nnodes 2 --nproc-per-node 2 ...``,
    ``srun --ntasks 4 python``; `OWN_WORLD` for a script's own (its variables, if any, are the script's to map)."""
    if own_world:
        return OWN_WORLD
    if "TORCHELASTIC_RUN_ID" in env:
        nodes, per_node = env.get("GROUP_WORLD_SIZE", "1"), env.get("LOCAL_WORLD_SIZE", world_size)
        return f"torchrun --nnodes {nodes} --nproc-per-node {per_node}" + (" ..." if nodes != "1" else "")
    rank = next((name for name in _LAUNCHERS if name in env), None)
    return _LAUNCHERS[rank][2].format(world_size) if rank else f"torchrun --nproc-per-node {world_size}"


def default_backend() -> str:
    """hccl where ``torch_npu`` imports (Ascend NPUs), nccl where CUDA is there, else gloo."""
    try:
        import torch_npu  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return "nccl" if torch.cuda.is_available() else "gloo"
    return "hccl"


def join(run_dir: Path | None, *, backend: str, timeout: float) -> World:
    """Join the launcher's world through ``env://``: this rank's `World`, its gloo group beside, in ``run_dir``
    (None: a private one, `private_run_dir`). ``timeout`` bounds the group's collectives (a rank gone for
    good); `InWorld` ends hangs inside an example. A process that made its world itself (a script's own
    ``init_process_group``: ``file://``, a ``TCPStore``, SLURM's variables mapped by hand) is in it already:
    its default group is the world, as it made it (its backend and timeout, not ``backend``'s)."""
    if dist.is_initialized():  # `init_process_group` again raised "trying to initialize ... twice!"
        limit = datetime.timedelta(seconds=timeout)
        return _world(dist.get_rank(), dist.get_world_size(), run_dir, dist.new_group(backend="gloo", timeout=limit))
    env = os.environ
    rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
    local_rank = int(env.get("LOCAL_RANK", "0"))
    if backend == "nccl":  # nccl and hccl need each rank on its own device before the group is made
        torch.cuda.set_device(local_rank)
    elif backend == "hccl":
        import torch_npu  # noqa: F401

        torch.npu.set_device(local_rank)  # type: ignore[attr-defined]
    limit = datetime.timedelta(seconds=timeout)
    attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and attempt != "0":
        # torchrun's agent keeps one store for every attempt and env:// adds no per-attempt prefix, so gloo's
        # ranks of a restarted job could read the previous attempt's addresses ("Connection refused" at
        # connectFullMesh): each attempt gets keys of its own (both stores exist; torch's stubs omit them).
        store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), size,  # type: ignore[attr-defined]
                              is_master=False, timeout=limit)
        prefixed = dist.PrefixStore(f"/stateful-contract/attempt_{attempt}", store)  # type: ignore[attr-defined]
        dist.init_process_group(backend, store=prefixed, rank=rank, world_size=size, timeout=limit)
    else:
        dist.init_process_group(backend, init_method="env://", timeout=limit)
    return _world(rank, size, run_dir, dist.new_group(backend="gloo", timeout=limit))


def _world(rank: int, size: int, run_dir: Path | None, group: Any) -> World:
    """``group``: the commands' gloo group, apart from the default group even on gloo: a rank that left an
    example early gathers its answer there, where it once met the others' pending collective of the example."""
    run_dir = private_run_dir(rank, group) if run_dir is None else run_dir
    (run_dir / "status").mkdir(parents=True, exist_ok=True)
    return World(rank, size, run_dir, group=group, launcher_owned=True)  # its status log: where it runs (`local_pids`)


def private_run_dir(rank: int, group: Any) -> Path:
    """The run's directory when the user gave none, agreed through the world: rank 0 creates it (`mkdtemp`:
    exclusively, mode 0700, a random name) and broadcasts its path. A name derived from the job and the port
    would let another user of the host create it first, or plant files in it that a resume reads."""
    box = [tempfile.mkdtemp(prefix="stateful-contract-world-") if rank == 0 else ""]
    dist.broadcast_object_list(box, src=0, group=group)
    return private_dir(Path(box[0])) if rank else Path(box[0])


def private_dir(path: Path) -> Path:
    """``path`` on a rank other than 0: rank 0's directory (the same host), or one made as private on another
    host; refused (PermissionError) if it is a link, another user's, or others may write to it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise PermissionError(f"{path} is not this user's private directory (mode "
                              f"{stat.S_IMODE(info.st_mode):o}, owner {info.st_uid}): not used as the run's directory")
    return path


def follow(world: World) -> Any:
    """A rank other than 0: rank 0's commands, run by a handler built from its spec; its last word,
    ``(STOP, exit status)``."""
    spec = world.share()
    if isinstance(spec, tuple):  # rank 0 could not even start (an unusable target): its verdict
        return spec
    # As every executor does: one uninterrupted run per config and rank, and collections that skip the imports.
    with steps.references_kept(), frozen():
        return world.follow(Handler(world, spec))


class InWorld(RankExecutor):
    """Rank 0's executor: every example on every rank of the joined world."""

    where_hint = "torch.distributed, in the world your launcher starts"
    #: ``run`` has no ``--run-dir`` (it refused the flag the crash's hint named): its ``--dir`` is kept.
    keep_logs = (("--dir", "DIR"), "keeps the run's directory: each rank's status log in DIR/status")
    #: The world this rank joined, its mode (``run``, ``save``, ``resume``) and the user's launch line
    #: (``srun --ntasks 4 python``): set by `stateful_contract.distributed` around its check (`rank_executor`).
    joined: ClassVar[tuple[World, str, str] | None] = None
    #: The last one made on this rank: the face reads what it ran (the save manifest) and whether the world broke.
    last: ClassVar[InWorld | None] = None
    #: ``run`` is in the launcher's processes: it takes none of the options of those a check starts.
    not_taken = OF_ITS_OWN_PROCESSES

    def __init__(self, target: str, *, world: World, mode: str, factory_import: str, alignment: Alignment,
                 timeout: float | None, launch: str = "torchrun --nproc-per-node N", consume: str | None = None,
                 probe_config: LoaderConfig = PROBE_CONFIG, carried: Mapping[str, Sequence[str]] | None = None) -> None:
        super().__init__(target, factory_import=factory_import, alignment=alignment, timeout=timeout, consume=consume,
                         probe_config=probe_config, carried=carried)
        self.world, self.run_dir = world, world.run_dir
        self.mode = mode
        self.world_size = self.live_world_size = world.world_size
        self.launch = launch
        if launch == OWN_WORLD:
            self.where_hint = "torch.distributed, in the world your script makes, with run_in_world on every rank"
        #: (clause id, config, plan) of every example run, for the save phase's manifest.
        self.ran: list[tuple[str, Any, Any]] = []
        world.share(self.spec)
        self.handler = Handler(world, self.spec)
        self._kept = contextlib.ExitStack()  # the uninterrupted runs, kept as `follow` keeps them (until close)
        self._kept.enter_context(steps.references_kept())
        #: Why the world broke (a rank died or hung): its collectives can no longer be used.
        self.down: LaunchOutcome | None = None
        # The fresh-process halves: emulated in this world ("run"), the later launch's ("resume"), or left to it.
        self.fresh_processes = mode != "save"
        self.why_not_fresh = (f"they are saved in {world.run_dir}, and a later launch with --phase resume "
                              "judges them in fresh processes")
        InWorld.last = self

    def rerun(self, clause_id: str, arguments: Sequence[str] = ()) -> str:
        argv = [self.target, *self.rerun_arguments(clause_id, arguments)]
        if self.launch == OWN_WORLD:  # the user's script, not a launcher: the same call there, on every rank
            return (f"stateful_contract.distributed.run_in_world({argv!r})  "
                    "# in your script, on every rank, after its init_process_group")
        return f"{self.launch} -m stateful_contract.distributed run{shell_words(argv)}"

    def restart_place(self, worlds: tuple[int | None, ...]) -> str | None:
        """Where the fresh-process half ran, for its note (`stateful_contract.run.clause_loop`)."""
        if self.mode == "resume":
            return f"this launch's {self.world_size} ranks, fresh processes that did not save them"
        return " and ".join(
            "the same processes that saved them (a world cannot restart itself: for fresh processes, run "
            "--phase save, then --phase resume in a new launch)" if size in (None, self.world_size) else
            f"{size} ranks taking turns on this world's {self.world_size} processes (for a real world of {size}, "
            f"run --phase resume in a launch of {size} ranks)" for size in worlds)

    def _call(self, command: tuple[Any, ...]) -> list[Any]:
        if self.down is not None:
            raise WorldDown(self.down)
        size, width = self.live_world_size, self.world_size
        sent = command if size == width else ("as_ranks", size, command)
        if command[0] == "run" and self.mode == "save":
            self.ran.append((command[1].id, command[2], command[3]))
        # The watch counts from the broadcast: a follower's example begun while rank 0 ran its own was counted
        # in full wall time until it began, and a follower slower than its timeout, starved, was called hung
        # before its own alarm (charged) could say it was only slow. Readings begin after rank 0's own run, so
        # the charge errs short there: a hang is named up to a timeout later, never a slow rank sooner.
        began = time.monotonic()
        try:  # the gather in a thread: rank 0 watches the status logs for a hung rank meanwhile
            gathered = self.world.call(sent, self.handler, lambda answered: self.wait(answered, began))
        except WorldDown as e:
            self.down = e.outcome
            raise
        except Exception as e:  # a collective failed: another rank is gone
            self.down = self._outcome(e)
            raise WorldDown(self.down) from None
        if size == width:
            return gathered
        return [gathered[r % width][r // width] for r in range(size)]

    def _broken(self, waited: float) -> LaunchOutcome:
        down = self._outcome(None)
        down.timed_out = True  # `wait` says why: a rank hung, or the command's own limit passed
        down.answered = {0: self.world.answer}
        return down

    def _outcome(self, error: BaseException | None) -> LaunchOutcome:
        """What rank 0 can tell of the others: where each was, and which processes on this host are gone."""
        doing, programs = where_ranks_were(self.run_dir, self.world_size)
        local = local_pids(self.run_dir, self.world_size)
        gone = [rank for rank in range(1, self.world_size) if rank in local and not alive(local[rank])]
        text = "" if error is None else f"{type(error).__name__}: {error}".strip().splitlines()[0][:300]
        return LaunchOutcome(doing=doing, programs=programs, in_world=True, gone=gone, error=text)

    def restart(self, phase: str, world_size: int | None = None) -> None:
        """No new processes in a world the launcher owns: see the module docstring."""
        self.live_world_size = self.world_size if world_size is None else world_size

    def keep_worlds(self, world_sizes: Collection[int]) -> None:
        pass  # the launcher's world is the only one: nothing of this executor's is idle

    def close(self) -> None:
        self._kept.close()
        where = {"run": "in the world your script made (run_in_world)" if self.launch == OWN_WORLD else
                 "in the world its launcher started", "save": "saving into the shared directory",
                 "resume": "resuming from the shared directory"}[self.mode]
        self.notes.append(f"{self.world_size} ranks on torch.distributed, {where} ({self.run_dir})")
