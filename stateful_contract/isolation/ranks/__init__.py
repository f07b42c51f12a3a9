"""The multi-rank executor `Ranks`: every example at once on every rank of a set of processes it starts as
torchrun starts them (`launch.Phase`), each command sent to every rank directly. The engine stays in the
caller's process, so a rank that dies or hangs cannot take the check down (docs/distributed.md, "How a
multi-rank check runs" and "Ranks that raise, die or hang").
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ...config import LoaderConfig
from ...profiles import Profile
from ...search.plans import Alignment
from ..executors import PROBE_CONFIG
from ..supervised import DEFAULT_MEMORY_LIMIT, RunLimit
from ..workspace import loaders_tmpdir, new_dir
from .executor import RankExecutor, WorldDown
from .failures import LaunchOutcome
from .in_world import InWorld
from .launch import Phase, board_path

__all__ = ["RankExecutor", "Ranks", "default_run_timeout", "rank_executor"]

def default_run_timeout(profile: Profile, clauses: int) -> float:
    """Seconds a whole multi-rank run may be charged (`supervised.RunLimit`: time its processes waited for a CPU
    is not counted) before it is killed as hung: generous on purpose, it only ends real hangs (single examples
    have their own ``timeout``)."""
    return 120.0 + 2 * clauses * (0.25 * profile.examples + 2.0 * profile.worker_examples)


def rank_executor(target: str, **options: Any) -> Ranks | InWorld:
    """The multi-rank executor: the world this process joined (`InWorld.joined`), which takes the example's
    options alone, else a `Ranks` of its own (``options``: its keywords)."""
    if InWorld.joined is None:
        ranks = Ranks(target, **options)
        if dist.is_available() and dist.is_initialized():  # a script's world: every rank calling this starts one
            ranks.notes.append(
                f"this process is rank {dist.get_rank()} of a torch.distributed world of {dist.get_world_size()} "
                f"already, and the check ran in a world of {ranks.world_size} ranks of its own, as it does from "
                "every rank that calls it; to check in your world, call "
                "stateful_contract.distributed.run_in_world([TARGET, ...]) on every rank")
        return ranks
    world, mode, launch = InWorld.joined
    return InWorld(target, world=world, mode=mode, launch=launch,
                   **{name: options[name] for name in ("factory_import", "alignment", "timeout", "consume",
                                                       "probe_config", "carried")})


class Ranks(RankExecutor):
    """Runs every example on ``world_size`` ranks at once (torch.distributed, gloo), started by this package."""

    def __init__(self, target: str, *, world_size: int, factory_import: str, alignment: Alignment,
                 timeout: float | None, profile: Profile, clauses: int, run_dir: str | Path | None = None,
                 run_timeout: float | None = None, memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
                 consume: str | None = None, probe_config: LoaderConfig = PROBE_CONFIG,
                 carried: Mapping[str, Sequence[str]] | None = None) -> None:
        from ..target import TargetError

        if "<locals>" in target or "<lambda>" in target:
            raise TargetError(f"{target!r}: with world_size > 1 every rank imports the factory by name, so it "
                              "must be a module-level function (package.module:factory or path/to/file.py:factory)")
        super().__init__(target, factory_import=factory_import, alignment=alignment, timeout=timeout, consume=consume,
                         probe_config=probe_config, carried=carried)
        self.world_size = self.live_world_size = world_size
        self.memory_limit = memory_limit or None
        self.run_timeout = run_timeout if run_timeout is not None else default_run_timeout(profile, clauses)
        self.keep = run_dir is not None
        self.run_dir = Path(run_dir) if run_dir is not None else new_dir("ranks-")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        #: The ranks' TMPDIR, removed by `close` with what killed ranks and workers left there (`leftovers`).
        self.tmp_dir = loaders_tmpdir()
        self._phase: Phase | None = None
        #: Idle phases by world size (`restart`): the check's own while another size runs, and each other size's
        #: last one, which saved no state a later clause resumes (only the check's own ranks search).
        self._idle: dict[int, Phase] = {}
        #: Every phase started (its kind: `restart`'s ``phase``), and by name, in order, whether it ended cleanly.
        self._phases: list[str] = []
        self._done: dict[str, bool] = {}
        #: The next phase's name (`restart`); None: the search's.
        self._next: str | None = None
        #: The run's limit, charged on its processes' progress from its first command or the first after a failure.
        self._run_limit: RunLimit | None = None
        #: A command was interrupted (Ctrl-C): `close` must not keep the user waiting.
        self._interrupted = False

    def _start(self) -> Phase:
        """The next phase's ranks, started now, under a name not used before in this run (its own logs)."""
        self._phases.append(phase := self._next or "search")
        name = phase if (n := self._phases.count(phase)) == 1 else f"{phase}{n}"
        self._done[name] = False
        self._phase = Phase.start(self.run_dir, name, self.live_world_size,
                                  {"ranks": self.spec, "timeout": self.run_timeout},
                                  tmp_dir=self.tmp_dir)
        return self._phase

    def _spared(self, phase: Phase) -> Phase:
        """``phase``, its `Phase.kill` told to spare every other phase alive (idle ones go on later)."""
        phase.beside = tuple(p for p in (self._phase, *self._idle.values()) if p is not None and p is not phase)
        return phase

    def _down(self, *, timed_out: bool) -> LaunchOutcome:
        """Kill what is left of the phase and say what happened to it."""
        assert self._phase is not None
        answered = dict(self._phase.answers)
        outcome = self._spared(self._phase).down(timed_out=timed_out, timeout=self.run_timeout)
        outcome.answered = answered
        for rank in range(len(self._phase.procs)):  # read; a stale one would look hung later
            board_path(self.run_dir, rank).unlink(missing_ok=True)
        self._phase, self._run_limit = None, None  # the next command starts the phase again, with a new run limit
        return outcome

    def _call(self, command: tuple[Any, ...]) -> list[Any]:
        """Every rank's answer; the phase is killed when a rank dies, hangs past its timeout or eats memory."""
        try:
            phase = self._phase or self._start()
            if self._run_limit is None:  # a parked phase taken back after a failed one has none either
                self._run_limit = RunLimit(self.run_timeout)
            phase.send(command)
            self.wait(phase.collect, time.monotonic(), self._run_limit)
            if phase.failed:
                raise WorldDown(self._down(timed_out=False))
            return [phase.answers[rank] for rank in range(len(phase.procs))]
        except WorldDown:
            raise
        except BaseException:
            self._abandon()
            raise

    def _processes(self) -> list[int]:
        return [proc.pid for proc in self._phase.procs] if self._phase is not None else []

    def _broken(self, waited: float) -> LaunchOutcome:
        return self._down(timed_out=True)

    def restart(self, phase: str, world_size: int | None = None) -> None:
        """Go on in ``world_size`` processes (None: the check's) fresh to the states they resume, started by the
        next command. Another size's phase stays idle: the check's own go on once ``phase`` is the search's
        again, another size's take a later clause's resumes on that size (they saved none of its states): 5 of
        13 rank start-ups at 2 ranks (docs/performance.md, "Two ranks against one"), until no later clause
        resumes on that size (`keep_worlds`)."""
        size = self.world_size if world_size is None else world_size
        if self._phase is not None and size != self.live_world_size and self.live_world_size not in self._idle:
            self._idle[self.live_world_size], self._phase = self._phase, None
            self._idle[self.live_world_size].park()
        self._stop()
        if size in self._idle and (phase == "search" or size != self.world_size):
            self._phase = self._idle.pop(size)
            self._phase.park(back=True)
        self._next = phase
        self.live_world_size = size

    def keep_worlds(self, world_sizes: Collection[int]) -> None:
        """Stop each idle phase of another world size than ``world_sizes`` (those later clauses resume on) and of
        the check's own: parked, its ranks held 230 MB each to the end of the check for nothing (a default check
        at 2 ranks kept 4 of them, docs/performance.md, "Idle worlds"). Its clean end counts in the note."""
        for size in [s for s in self._idle if s not in world_sizes and s != self.world_size]:
            self._stop(self._idle.pop(size))

    def _stop(self, phase: Phase | None = None) -> None:
        if phase is None:
            phase, self._phase = self._phase, None
        if phase is None:
            return
        try:
            if self._spared(phase).stop():
                self._done[phase.name] = True
        except BaseException:  # Ctrl-C while the ranks leave
            self._abandon(phase)
            raise

    def _abandon(self, *stopping: Phase) -> None:
        """Ctrl-C: every phase killed (``stopping`` too, taken out of the others), nothing more asked of them or
        of the user's patience (`close`)."""
        for phase in {*stopping, *filter(None, (self._phase, *self._idle.values()))}:
            phase.beside = ()
            phase.kill()
        self._phase, self._idle, self._interrupted = None, {}, True

    def close(self) -> None:
        started = bool(self._phases)
        self._stop()
        while self._idle:
            self._stop(self._idle.popitem()[1])
        if started:
            self.notes.append(f"{self.world_size} ranks on torch.distributed (gloo), each started as torchrun starts "
                              f"a rank; phases {' + '.join(n for n, clean in self._done.items() if clean) or 'none'}")
        if self.keep:
            self.notes.append(f"run files kept in {self.run_dir}")
        elif self._interrupted:  # deleting a search's saved examples took 4 s at load 28: not on a Ctrl-C's clock
            with contextlib.suppress(OSError):  # out of the workspace, which the interrupted check removes at once
                self.run_dir = self.run_dir.rename(self.run_dir.parent.parent / self.run_dir.name)
            subprocess.Popen(["rm", "-rf", "--", str(self.run_dir)], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)
