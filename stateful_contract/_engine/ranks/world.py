"""Inside a rank: the gloo process group, and rank 0 leading the others in lockstep.

Every rank runs the same commands in the same order, because collectives
(``all_gather``, ``torch.distributed.checkpoint.save``) need all ranks at once. Rank 0
*leads*: it gets the next command, from the engine in the caller's process
(`stateful_contract._engine.ranks.server`) or, in a world the user's launcher started,
from the engine running on rank 0 itself (`stateful_contract._engine.ranks.in_world`),
broadcasts it, runs it itself and gathers every rank's result. The other ranks *follow*: receive, run, send back, until told to
stop. Hypothesis runs in the caller only, never on a rank: it draws each example and
shrinks a failure there, so every rank runs the very same example without drawing
anything itself.
"""

from __future__ import annotations

import datetime
import faulthandler
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ..noise import ignore_set_vital
from .launch import JOIN_TIMEOUT, JOINING, status_path

__all__ = ["STOP", "World", "rank_main"]

#: The command that ends a follower's loop.
STOP = "stop"

Handler = Callable[[Any], Any]


@dataclass
class World:
    """This rank's place in the run and its link to the other ranks."""

    rank: int
    world_size: int
    run_dir: Path
    #: The gloo group commands and answers travel through (None: the default group, gloo too).
    #: Beside an nccl or hccl group a gloo one carries Python objects, as DCP does.
    group: Any = None

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def status(self, doing: str) -> None:
        """Record what this rank is doing, for the message if it dies or hangs."""
        status_path(self.run_dir, self.rank).write_text(doing + "\n", encoding="utf-8")

    def call(self, command: Any, handler: Handler) -> list[Any]:
        """Leader: run ``command`` on every rank; returns each rank's result, by rank."""
        assert self.leads, "only rank 0 leads"
        dist.broadcast_object_list([command], src=0, group=self.group)
        mine = handler(command)
        gathered: list[Any] = [None] * self.world_size
        dist.gather_object(mine, gathered, dst=0, group=self.group)
        return gathered

    def stop(self, last: Any = STOP) -> None:
        """Leader: release the followers; ``last`` (``(STOP, value)``) is what their `follow` returns."""
        dist.broadcast_object_list([last], src=0, group=self.group)

    def share(self, value: Any = None) -> Any:
        """Rank 0's ``value`` on every rank (the others pass nothing)."""
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def follow(self, handler: Handler) -> Any:
        """Follower: run the leader's commands until it stops; returns the stop message."""
        while True:
            box: list[Any] = [None]
            dist.broadcast_object_list(box, src=0, group=self.group)
            if box[0] == STOP or (isinstance(box[0], tuple) and box[0][:1] == (STOP,)):
                return box[0]
            dist.gather_object(handler(box[0]), None, dst=0, group=self.group)


def rank_main(run_dir: str, phase: str) -> Any:
    """The function every rank runs: join the group, run the phase's entry, leave."""
    ignore_set_vital()  # a rank is a new interpreter: none of the checker's warning filters
    path = Path(run_dir)
    spec = json.loads((path / "launch.json").read_text(encoding="utf-8"))
    world = World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), path)
    world.status(f"{JOINING} ({phase} phase), given {JOIN_TIMEOUT:g} s")
    with _join_watchdog():
        # The caller's timeout ends a hang; the group must not give up earlier on its own.
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(spec["timeout"]) + 60))
    world.status(f"starting the {phase} phase (its gloo group formed): importing the loader's factory")
    try:
        module, _, name = spec["entry"].partition(":")
        entry = getattr(importlib.import_module(module), name)
        result = entry(world, phase)
        world.status(f"finished the {phase} phase")
        return result
    finally:
        dist.destroy_process_group()


@contextmanager
def _join_watchdog() -> Iterator[None]:
    """End this rank (exit code 1) if the group is not formed within `JOIN_TIMEOUT`, its stacks in its log.

    faulthandler's watchdog is a thread of C: it fires even when the join is stuck in C code
    holding the interpreter lock, where no Python timer could run. No loader code has run yet,
    so the launcher starts the phase again, once (`stateful_contract._engine.ranks.launcher`).
    """
    faulthandler.dump_traceback_later(JOIN_TIMEOUT, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()  # its thread is gone before the loader forks workers
