"""The multi-rank executor inside a world the user's launcher started (torchrun, srun, mpirun).

`Ranks` starts its own world and drives it from the caller's process through a relay
to rank 0. Here the world exists already, and the engine runs on its rank 0: `InWorld`
sends each command through the world's own collectives (`World.call`: broadcast it,
run it, gather every rank's answer) while the other ranks `follow`. The rank side is
`Ranks`'s own (`stateful_contract._engine.ranks.server.Handler`, `World`); what differs
is only where the engine lives and how a command reaches rank 0.

What cannot happen inside one world, and what is done instead:

- *a fresh set of processes* (SC30's second half): ``mode="run"`` resumes in the same
  processes and says so; ``mode="save"`` leaves the examples in the shared directory and
  ``mode="resume"``, a later launch, resumes them there (`stateful_contract.distributed`);
- *a world of another size* (SC31): in ``mode="run"`` its ranks take turns on this
  world's processes (`Handler.as_ranks`); a later launch on another number of ranks
  (``mode="resume"``) is the real elastic restart.

A rank that hangs where its example alarm cannot reach it is found, as by `Ranks`, on
its status log; rank 0 then stops waiting, reports, and exits, and the launcher stops
the rest. A rank that dies breaks the collective rank 0 waits in.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from .. import steps
from ..plans import Alignment
from ..supervised import POLL
from .executor import RankExecutor, WorldDown
from .failures import LaunchOutcome, RankFailure
from .joining import alive, local_pids
from .launch import where_ranks_were
from .server import Handler
from .world import World

__all__ = ["InWorld", "InWorldDown", "follow", "joined", "last_executor", "set_joined"]

_JOINED: tuple[World, str] | None = None
#: The last `InWorld` made on this rank: the face reads what it ran (the save manifest) and whether the world broke.
_LAST: list[InWorld] = []


def set_joined(world: World | None, mode: str = "run") -> None:
    """Make ``check(..., world_size=N)`` on this rank run in ``world`` (None: start its own again)."""
    global _JOINED
    _JOINED = None if world is None else (world, mode)


def joined() -> tuple[World, str] | None:
    """The world this process joined and its mode (``run``, ``save``, ``resume``), or None."""
    return _JOINED


def last_executor() -> InWorld | None:
    return _LAST[-1] if _LAST else None


def follow(world: World) -> Any:
    """A rank other than 0: build the handler from rank 0's spec, run its commands until it stops.

    Returns rank 0's last word, ``(STOP, exit status)``.
    """
    spec = world.share()
    if isinstance(spec, tuple):  # rank 0 could not even start (an unusable target): its verdict
        return spec
    with steps.references_kept():  # as every executor does: one uninterrupted run per config and rank
        return world.follow(Handler(world, spec))


class InWorldDown(LaunchOutcome):
    """`LaunchOutcome` as rank 0 of a world it does not own sees it: no launcher's record, its own error."""

    def __init__(self, *, error: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    @property
    def killed_by(self) -> str:
        return "timeout" if self.hung is not None or self.timed_out else ""

    def describe(self) -> str:
        if self.hung is not None:
            return self.hung_rank("; after {waited:.1f} s rank 0 stopped waiting, reported, and exits, and the "
                                  "launcher stops the other ranks.")
        if self.timed_out:
            return self.where_each_rank_was(f"the ranks did not answer within {self.timeout:.0f} s; rank 0 stopped "
                                            "waiting.")
        gone = [f.rank for f in self.failures]
        cause = (f"rank {', '.join(map(str, gone))}'s process ended (found on this host)" if gone else
                 "another rank went away (its process ended or lost its connection; the launcher's error summary "
                 "names it)")
        return self.where_each_rank_was(f"{cause}, and rank 0's collective with it failed ({self.error}).")


class InWorld(RankExecutor):
    """Rank 0's executor: every example on every rank of the joined world."""

    where_hint = "torch.distributed, in the world your launcher starts"

    def __init__(self, target: str, *, world: World, mode: str, factory_import: str, alignment: Alignment,
                 timeout: float | None, launch: str = "torchrun --nproc-per-node N") -> None:
        super().__init__(target, factory_import=factory_import, alignment=alignment, timeout=timeout)
        self.world, self.run_dir = world, world.run_dir
        self.mode = mode
        self.world_size = self.live_world_size = world.world_size
        self.launch = launch
        #: (clause id, config, plan) of every example run, for the save phase's manifest.
        self.ran: list[tuple[str, Any, Any]] = []
        world.share(self.spec)
        self.handler = Handler(world, self.spec)
        self._kept = contextlib.ExitStack()  # the uninterrupted runs, kept as `follow` keeps them (until close)
        self._kept.enter_context(steps.references_kept())
        self._down: LaunchOutcome | None = None
        # The fresh-process halves: emulated in this world ("run"), the later launch's ("resume"), or left to it.
        self.fresh_processes = mode != "save"
        self.why_not_fresh = (f"they are saved in {world.run_dir}, and a later launch with --phase resume "
                              "judges them in fresh processes")
        _LAST[:] = [self]

    @property
    def down(self) -> bool:
        """The world broke (a rank died or hung): its collectives can no longer be used."""
        return self._down is not None

    def rerun(self, clause_id: str) -> str:
        return f"{self.launch} -m stateful_contract.distributed run {self.target} --clause {clause_id}"

    def restart_place(self, worlds: tuple[int | None, ...]) -> str | None:
        """Where the fresh-process half ran, for its note (`stateful_contract._run`)."""
        if self.mode == "resume":
            return f"this launch's {self.world_size} ranks, fresh processes that did not save them"
        parts = []
        for size in worlds:
            if size is None or size == self.world_size:
                parts.append("the same processes that saved them (a world cannot restart itself: for fresh "
                             "processes, run --phase save, then --phase resume in a new launch)")
            else:
                parts.append(f"{size} ranks taking turns on this world's {self.world_size} processes (for a real "
                             f"world of {size}, run --phase resume in a launch of {size} ranks)")
        return " and ".join(parts)

    # -- one command on every rank ----------------------------------------------------

    def _call(self, command: tuple[Any, ...]) -> list[Any]:
        if self._down is not None:
            raise WorldDown(self._down)
        size, width = self.live_world_size, self.world_size
        sent = command if size == width else ("as", size, command)
        if command[0] == "run" and self.mode == "save":
            self.ran.append((command[1].id, command[2], command[3]))
        try:
            gathered = self._exchange(sent)
        except WorldDown as e:
            self._down = e.outcome
            raise
        if size == width:
            return gathered
        return [gathered[r % width][r // width] for r in range(size)]

    def _exchange(self, command: tuple[Any, ...]) -> list[Any]:
        """`World.call`, its gather in a thread: rank 0 keeps watching the status logs for a hung rank."""
        import torch.distributed as dist

        world = self.world
        try:
            dist.broadcast_object_list([command], src=0, group=world.group)
            mine = self.handler(command)
        except Exception as e:  # a collective failed: another rank is gone
            raise WorldDown(self._outcome(e)) from None
        gathered: list[Any] = [None] * self.world_size
        failed: list[BaseException] = []

        def gather() -> None:
            try:
                dist.gather_object(mine, gathered, dst=0, group=world.group)
            except BaseException as e:
                failed.append(e)

        thread = threading.Thread(target=gather, name="stateful-contract-gather", daemon=True)
        thread.start()

        def answered() -> bool:
            thread.join(POLL)
            return not thread.is_alive()

        self.wait(answered, time.monotonic())  # given up: the gather stays blocked, the process exits after the report
        if failed:
            raise WorldDown(self._outcome(failed[0]))
        return gathered

    def _broken(self, waited: float) -> LaunchOutcome:
        down = self._outcome(None)
        down.timed_out, down.timeout = True, waited
        return down

    def _outcome(self, error: BaseException | None) -> InWorldDown:
        """What rank 0 can tell of the others: where each was, and which processes on this host are gone."""
        doing, programs = where_ranks_were(self.run_dir, self.world_size)
        local = local_pids(self.run_dir, self.world_size)
        gone = [rank for rank in range(1, self.world_size) if rank in local and not alive(local[rank])]
        text = "" if error is None else f"{type(error).__name__}: {error}".strip().splitlines()[0][:300]
        failures = [RankFailure(r, "in-world", None, "its process ended", doing[r]) for r in gone]
        return InWorldDown(phases_done=[], failed_phase="in-world" if error is not None else None,
                           failures=failures, doing=doing, programs=programs, error=text)

    # -- what cannot be done inside one world ---------------------------------------

    def restart(self, phase: str, world_size: int | None = None) -> None:
        """No new processes in a world the launcher owns: see the module docstring."""
        self.live_world_size = self.world_size if world_size is None else world_size

    def close(self) -> None:
        self._kept.close()
        where = {"run": "in the world its launcher started", "save": "saving into the shared directory",
                 "resume": "resuming from the shared directory"}[self.mode]
        self.notes.append(f"{self.world_size} ranks on torch.distributed, {where} ({self.world.run_dir})")
