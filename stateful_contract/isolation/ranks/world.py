"""Inside a rank: its place in the world (`World`), the loop of a rank this package started (`rank_main`:
the checker's commands on the rank's own connection) and what runs them (`Handler`).

In a launcher's world no checker talks to each rank: rank 0 runs the engine (`InWorld`) and *leads*, it
broadcasts each command, runs it and gathers every rank's answer (`World.call`); the others *follow* the same
example until told to stop, so collectives (``torch.distributed.checkpoint.save``) find every rank at one step.
"""

from __future__ import annotations

import datetime
import os
import pickle
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import torch.distributed as dist

from ...config import LoaderConfig
from ...repro import progress, status, steps
from ...repro.guard import frozen
from ...spellings import Face, current
from .. import executors
from ..noise import ignore_set_vital
from ..supervised import POLL, command_limit
from .launch import JOINING, STOP, board_path
from .turns import posing_as

__all__ = ["Handler", "RankSpec", "World", "local_pids", "rank_main"]


@dataclass
class World:
    """This rank's place in the run and its link to the other ranks."""

    rank: int
    world_size: int
    run_dir: Path
    #: The gloo group commands and answers travel through (None: the default group, a self-launched world's):
    #: in a launcher's world one of its own, beside the default group of any backend (`in_world._world`).
    group: Any = None
    #: Leader: its own answer to the command in flight (`call`), which the gather may never deliver.
    answer: Any = None
    #: The user's launcher started this world (`in_world.join`): no checker outside can end a rank stuck in a
    #: collective, so the scenarios' own collectives get a group that gives up (`steps_group`).
    launcher_owned: bool = False

    def __post_init__(self) -> None:
        status.install(status.Board(board_path(self.run_dir, self.rank)))  # read if the rank dies or hangs
        # A rank asleep in a collective waits on the others.
        progress.share_with(lambda: list(local_pids(self.run_dir, self.world_size).values()))

    def call(self, command: Any, handler: Handler, wait: Callable[[Callable[[], bool]], None]) -> list[Any]:
        """Leader (`InWorld`): each rank's result of ``command``, by rank. The gather runs in a thread and
        ``wait(answered)`` returns once it has (each ``answered()`` looks up to `POLL` s) or raises."""
        assert self.rank == 0, "only rank 0 leads"
        dist.broadcast_object_list([command], src=0, group=self.group)
        self.answer = mine = handler(command)
        gathered: list[Any] = [None] * self.world_size
        failed: list[BaseException] = []

        def gather() -> None:
            try:
                dist.gather_object(mine, gathered, dst=0, group=self.group)
            except BaseException as e:
                failed.append(e)

        thread = threading.Thread(target=gather, name="stateful-contract-gather", daemon=True)
        thread.start()

        def answered() -> bool:
            thread.join(POLL)
            return not thread.is_alive()

        wait(answered)  # given up: the gather stays blocked, the process exits after the report
        if failed:
            raise failed[0]
        return gathered

    def steps_group(self, timeout: float | None) -> Any:
        """The group the scenarios' own collectives run in (SC30's DCP save and load): None, the default
        group, where the checker ends a stuck rank from outside (`Ranks`); in a launcher's world, a gloo group
        of its own, made on every rank at once (`Handler`), that gives up after a command's limit. A rank that
        leaves an example early (its loader hung in Python, its example timeout) leaves the others waiting
        there; on the default group the leader waited in C for the launcher's group timeout (27 min at the ci
        profile), and a follower's next collective met the leader's pending one instead."""
        if not self.launcher_owned:
            return None
        seconds = command_limit(timeout) or 86400.0
        return dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=seconds))

    def share(self, value: Any = None) -> Any:
        """Rank 0's ``value`` on every rank (the others pass nothing)."""
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def stop(self, value: Any = None) -> None:
        """Leader: release the followers; their `follow` returns ``(STOP, value)``."""
        self.share((STOP, value))

    def follow(self, handler: Handler) -> Any:
        """Follower: run the leader's commands until it stops; returns the stop message."""
        while (command := self.share())[0] != STOP:  # every command is a tuple: ("run", ...), (STOP, value)
            dist.gather_object(handler(command), None, dst=0, group=self.group)
        return command


def local_pids(run_dir: Path, world_size: int) -> dict[int, int]:
    """The process of each rank that runs on this host (its status log's first line), by rank."""
    here = {rank: status.writer(board_path(run_dir, rank)) for rank in range(world_size)}
    return {rank: pid for rank, (pid, host) in here.items() if pid and host == socket.gethostname()}


def rank_main(run_dir: str, phase: str, fd: str) -> int:
    """Every self-launched rank (`launch.Phase.start`): join the group, run the checker's commands, leave."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return int(record(_rank)(Path(run_dir), phase, Connection(int(fd))) or 0)  # an error: torchrun's error file


def _rank(path: Path, phase: str, conn: Connection) -> int:
    ignore_set_vital()  # a rank is a new interpreter: none of the checker's warning filters
    spec = pickle.loads(conn.recv_bytes())  # `launch.Phase.start`'s first message
    world = World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), path)
    status.note(f"{JOINING} ({phase} phase)")
    # No limit of its own: the checker charges the join to the start command's limit on the ranks' progress
    # (`RankExecutor.wait`). A wall-clock one failed a correct loader whose other rank was still importing torch,
    # starved of a CPU (60 s at nice 19 beside a busy core). So did the group's timeout when it was the run's
    # (195 s, every store wait and collective): at a load of 25 a starved 2-rank run took 212 s of wall time for
    # 7 s charged, and a rank gave up waiting for the other's address. Every hang is ended by the checker on
    # charged time (the example timeout, a command's limit, the run's), and a rank dies with the checker
    # (`processes.start_python`): the group's own timeout is a backstop of a day, never a verdict.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=max(float(spec["timeout"]) + 60, 86400)))
    caller = spec["process"]  # `launch.of_caller`: set before any of the user's code, as its launcher's ranks see it
    os.chdir(caller["cwd"])
    sys.path[:], sys.argv[:] = caller["sys_path"], caller["argv"]
    status.note(f"starting the {phase} phase (its gloo group formed): importing the loader's factory")
    try:
        handler = Handler(world, spec["ranks"])
        with steps.references_kept(), frozen():
            status.note("waiting for the first command")
            while (command := pickle.loads(conn.recv_bytes()))[0] != STOP:
                conn.send_bytes(pickle.dumps(handler(command)))  # plain pickle: tensors as data
                status.note("waiting for the next command")
        status.note(f"finished the {phase} phase")
        conn.send_bytes(pickle.dumps(STOP))  # the checker kills this process now (`Phase.stop`)
        return 0
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True)
class RankSpec:
    """What every rank needs to run examples (sent by the checker, `launch.Phase.start`, or by rank 0,
    `World.share`)."""

    target: str
    factory_import: str
    alignment: Any
    timeout: float | None
    #: The declared consumption, ``module:function`` (repro/consumption.py), None: none.
    consume: str | None = None
    #: The face the check runs from (`spellings.current`), whose words the ranks' hints are spelled in.
    face: tuple[str, str] = field(default_factory=current)
    #: The config the first loaders are built and probed from: `executors.PROBE_CONFIG` moved into the check's
    #: declared space, as on one rank (a factory that asks ``persistent_workers=True`` was refused at start on
    #: ``num_workers=0`` by every rank, though the user declared ``num_workers=1,2``).
    probe_config: LoaderConfig = executors.PROBE_CONFIG


class Handler(executors.Handler):
    """Runs the engine's commands on this process's rank (or ranks: `as_ranks`)."""

    def __init__(self, world: World, spec: RankSpec) -> None:
        from ...repro.consumption import drawn_through
        from ..target import load_consume, load_target

        factory = load_target(spec.target)
        if spec.consume is not None:
            factory = drawn_through(factory, load_consume(spec.consume))
        super().__init__(factory, spec.factory_import, spec.alignment, spec.timeout, probe_config=spec.probe_config)
        face, owner = spec.face
        self.face = (cast(Face, face), owner)
        self.place = world
        self.collectives = world.steps_group(spec.timeout)
        self.on(world.rank, world.world_size)

    def on(self, rank: int, world_size: int) -> None:
        """Run the next commands as rank ``rank`` of ``world_size``; its scenarios see (`example.World`) the
        run's directory, shared by every rank, and this process's status log."""
        self.rank, self.world_size = rank, world_size
        self.world = SimpleNamespace(rank=rank, world_size=world_size, workdir=self.place.run_dir,
                                     status=status.note, collectives=self.collectives)
        self.workdir = self.place.run_dir / "scratch" / f"rank{rank}"  # apart from the other ranks' files

    def config(self, config: LoaderConfig) -> LoaderConfig:
        return replace(config, rank=self.rank, world_size=self.world_size)

    def as_ranks(self, size: int, command: tuple[Any, ...]) -> list[Any]:
        """``command`` as ranks ``r, r + W, ...`` of a world of ``size`` run it, one after the other: in a
        world the user's launcher started, a world of another size takes turns on its processes (rank ``r`` on
        process ``r % W``), each posed as its rank (`turns.posing_as`). No collective may run so (SC31's resume reads
        ``torch.save`` files)."""
        mine = []
        try:
            for rank in range(self.place.rank, size, self.place.world_size):
                self.on(rank, size)
                with posing_as(rank, size):  # a loader that asks torch.distributed for its rank gets this one
                    mine.append(self(command))
        finally:
            self.on(self.place.rank, self.place.world_size)
        return mine
