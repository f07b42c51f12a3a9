"""Inside the ranks: rank 0 relays the engine's commands to every rank, in lockstep.

The engine (in the caller's process) connects to rank 0 and sends one command at a
time: build a loader, probe the load form, take the uninterrupted run, run one
example. Rank 0 broadcasts it (`World.call`), every rank runs it on its own loader
with its own ``rank`` in the config, and rank 0 sends the gathered answers back, one
per rank. Collectives inside an example (``torch.distributed.checkpoint``) therefore
find every rank at the same step. ``stop`` ends the phase; its arguments name the next
one (a fresh set of processes), if any, and its world size when it differs from this
phase's (an elastic restart on more or fewer ranks).
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
from dataclasses import dataclass, replace
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any

from ...config import LoaderConfig
from .. import status, steps
from ..example import probe_load_form, recorded_program, run_example
from ..executors import PROBE_CONFIG, factory_problem, reference_lengths
from ..plans import RankLengths
from ..recording import recording
from .launch import board_path
from .world import World

__all__ = ["ADDRESS_FILE", "SPEC_FILE", "Handler", "RankSpec", "serve"]

SPEC_FILE = "ranks.pkl"
#: Where rank 0 says where it listens, per phase (written atomically).
ADDRESS_FILE = "address-{phase}.json"


@dataclass(frozen=True)
class RankSpec:
    """What every rank needs to run examples (pickled into the run directory)."""

    target: str
    factory_import: str
    alignment: Any
    timeout: float | None
    authkey: str


class Handler:
    """Runs the engine's commands on this process's rank (or ranks: `as_ranks`), its status log installed.

    It is also the `stateful_contract._engine.example.World` a scenario sees on this rank:
    ``rank``, ``world_size``, ``workdir`` (the run's directory, shared by every rank) and `status`.
    """

    def __init__(self, world: World, spec: RankSpec) -> None:
        from ..._target import load_target

        status.install(status.Board(board_path(world.run_dir, world.rank)))
        self.world, self.workdir = world, world.run_dir
        self.spec = spec
        self.factory = load_target(spec.target)
        self.rank, self.world_size = world.rank, world.world_size

    def status(self, doing: str) -> None:
        self.world.status(doing)

    @property
    def scratch(self) -> Path:
        """Each rank's own files (a clause's checkpoints), apart from the other ranks'."""
        path = self.world.run_dir / "scratch" / f"rank{self.rank}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def config(self, config: LoaderConfig) -> LoaderConfig:
        return replace(config, rank=self.rank, world_size=self.world_size)

    def doing(self, text: str) -> None:
        """What this rank now does, in its status file and its status log."""
        self.status(text)
        status.command(text)

    def as_ranks(self, size: int, command: tuple[Any, ...]) -> list[Any]:
        """``command`` as ranks ``r, r + W, ...`` of a world of ``size`` would run it, one after the other.

        In a world the user's launcher started, a world of another size cannot be started:
        its ranks take turns on this world's processes (rank ``r`` on process ``r % W``).
        Only for commands that need no collective: SC31's resume reads ``torch.save`` files.
        """
        mine = []
        try:
            for rank in range(self.world.rank, size, self.world.world_size):
                self.rank, self.world_size = rank, size
                mine.append(self(command))
        finally:
            self.rank, self.world_size = self.world.rank, self.world.world_size
        return mine

    def __call__(self, command: tuple[Any, ...]) -> Any:
        kind = command[0]
        if kind == "as":
            return self.as_ranks(command[1], command[2])
        if kind == "start":
            self.doing("building a loader")
            config = self.config(PROBE_CONFIG)
            with recording(recorded_program(self.spec.factory_import, self.factory, config)):
                return factory_problem(self.factory, config, self.spec.timeout, self.rank, self.world_size)
        if kind == "probe":
            self.doing("probing how load_state_dict takes a state")
            return probe_load_form(self.factory, self.config(PROBE_CONFIG), self.spec.timeout,
                                   factory_import=self.spec.factory_import, rank=self.rank,
                                   world_size=self.world_size)
        if kind == "lengths":
            _, clause, config = command
            config = self.config(config)
            self.doing(f"{clause.id}: running the uninterrupted {config.as_code()}")
            return reference_lengths(clause.id, clause.heading, self.factory, config, self.spec.timeout,
                                     self.rank, self.world_size, self.spec.factory_import)
        if kind == "run":
            _, clause, config, plan, load_form, by_rank = command
            # The lengths the plan was drawn from (the shortest over ranks) and this rank's own.
            lengths = None if by_rank is None else RankLengths.of_rank(by_rank, self.rank)
            config = self.config(config)
            self.doing(f"{clause.id}: example {config.as_code()}, plan {plan!r}")
            return run_example(clause, self.factory, config, plan, factory_import=self.spec.factory_import,
                               load_form=load_form, alignment=self.spec.alignment, timeout=self.spec.timeout,
                               world=self, workdir=self.scratch, rank_lengths=lengths)
        raise ValueError(f"unknown command {kind!r}")


def serve(world: World, phase: str) -> str | tuple[str, int] | None:
    """Every rank's entry (see `stateful_contract._engine.ranks.launch`); returns the next phase.

    The next phase is a name, or ``(name, world_size)`` to start it on another number of ranks.
    """
    spec: RankSpec = pickle.loads((world.run_dir / SPEC_FILE).read_bytes())
    handler = Handler(world, spec)
    with steps.references_kept():
        if not world.leads:
            world.status("waiting for rank 0's first command")
            world.follow(handler)
            return None
        return _lead(world, handler, spec, phase)


def _lead(world: World, handler: Handler, spec: RankSpec, phase: str) -> str | tuple[str, int] | None:
    with Listener(("127.0.0.1", 0), authkey=bytes.fromhex(spec.authkey)) as listener:
        path = world.run_dir / ADDRESS_FILE.format(phase=phase)
        partial = path.with_suffix(f".{secrets.token_hex(4)}.tmp")
        host, port = listener.address
        partial.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid()}), encoding="utf-8")
        partial.replace(path)
        world.status("waiting for the engine to connect")
        with listener.accept() as conn:
            try:
                while True:
                    command = pickle.loads(conn.recv_bytes())
                    if command[0] == "stop":
                        conn.send_bytes(pickle.dumps("stopping"))
                        _, following, *size = command
                        return (following, size[0]) if following and size and size[0] else following
                    # Plain pickle, not multiprocessing's: tensors travel as data, not as
                    # shared-memory handles the other process may not open.
                    conn.send_bytes(pickle.dumps(world.call(command, handler)))
                    world.status("waiting for the next command")
            finally:
                world.stop()
