"""The multi-rank executor `Ranks`: every example at once on every rank of a run it starts (`launch`), rank
0 relaying (`world.serve`). The engine stays in the caller's process, so a rank that dies or hangs cannot
take the check down (docs/distributed.md, "How a multi-rank check runs" and "Ranks that raise, die or hang").
"""

from __future__ import annotations

import dataclasses
import pickle
import secrets
import shutil
import tempfile
import time
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

from ...profiles import Profile
from ..plans import Alignment
from ..supervised import DEFAULT_MEMORY_LIMIT, POLL
from .executor import RankExecutor, WorldDown
from .failures import LaunchOutcome
from .in_world import InWorld
from .launch import JOIN_TIMEOUT, Launcher, board_path, finish_world, start_world
from .world import PORT_FILE

__all__ = ["RankExecutor", "Ranks", "default_run_timeout", "rank_executor"]

#: Seconds a fresh set of processes may take to start and listen.
START_TIMEOUT = 120.0


def default_run_timeout(profile: Profile, clauses: int) -> float:
    """Seconds a whole multi-rank run may take before it is killed as hung: generous on purpose, it only
    ends real hangs (single examples have their own ``timeout``)."""
    return 120.0 + 2 * clauses * (0.25 * profile.examples + 2.0 * profile.worker_examples)


def rank_executor(target: str, *, world_size: int, factory_import: str, alignment: Alignment,
                  timeout: float | None, profile: Profile, clauses: int, run_dir: str | Path | None = None,
                  run_timeout: float | None = None,
                  memory_limit: int | None = DEFAULT_MEMORY_LIMIT, consume: str | None = None) -> Ranks | InWorld:
    """The multi-rank executor: the world this process joined (`InWorld.joined`), else a `Ranks` of its own."""
    if InWorld.joined is not None:
        world, mode, launch = InWorld.joined
        return InWorld(target, world=world, mode=mode, factory_import=factory_import, alignment=alignment,
                       timeout=timeout, launch=launch, consume=consume)
    return Ranks(target, world_size=world_size, factory_import=factory_import, alignment=alignment, timeout=timeout,
                 profile=profile, clauses=clauses, run_dir=run_dir, run_timeout=run_timeout,
                 memory_limit=memory_limit, consume=consume)


class Ranks(RankExecutor):
    """Runs every example on ``world_size`` ranks at once (torch.distributed, gloo), started by this package."""

    def __init__(self, target: str, *, world_size: int, factory_import: str, alignment: Alignment,
                 timeout: float | None, profile: Profile, clauses: int, run_dir: str | Path | None = None,
                 run_timeout: float | None = None, memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
                 consume: str | None = None) -> None:
        from ..._target import TargetError

        if "<locals>" in target or "<lambda>" in target:
            raise TargetError(f"{target!r}: with world_size > 1 every rank imports the factory by name, so it "
                              "must be a module-level function (package.module:factory or path/to/file.py:factory)")
        super().__init__(target, factory_import=factory_import, alignment=alignment, timeout=timeout,
                         authkey=secrets.token_hex(16), consume=consume)
        self.world_size = self.live_world_size = world_size
        self.memory_limit = memory_limit or None
        self.run_timeout = run_timeout if run_timeout is not None else default_run_timeout(profile, clauses)
        self.keep = run_dir is not None
        self.run_dir = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="stateful-contract-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._launcher: Launcher | None = None
        self._conn: Connection | None = None
        self._phases: list[str] = []
        self._deadline = 0.0
        #: Why a restarted phase never came up (`restart`): the next command fails with it.
        self._restart_failed: LaunchOutcome | None = None

    def _name(self, phase: str) -> str:
        """A phase name not used before in this run (each phase has its own port file and logs)."""
        self._phases.append(phase)
        n = self._phases.count(phase)
        return phase if n == 1 else f"{phase}{n}"

    def _launch(self) -> Connection:
        """A fresh launcher, with a deadline of its own, and its first phase's rank 0 connected."""
        phase = self._name("phase" if self._phases else "search")
        self._deadline = time.monotonic() + self.run_timeout
        self._launcher = start_world(self.run_dir, world_size=self.live_world_size, first_phase=phase,
                                     timeout=self.run_timeout, ranks=dataclasses.asdict(self.spec))
        return self._connect(phase)

    def _connect(self, phase: str) -> Connection:
        port = self.run_dir / PORT_FILE.format(phase=phase)
        limit = min(self._deadline, time.monotonic() + START_TIMEOUT)
        while not port.is_file():
            assert self._launcher is not None
            if not self._launcher.running(self.run_dir) or time.monotonic() > limit:
                raise WorldDown(self._down(timed_out=time.monotonic() > limit))
            time.sleep(0.02)
        self._conn = Client(("127.0.0.1", int(port.read_text())), authkey=bytes.fromhex(self.spec.authkey))
        return self._conn

    def _down(self, *, timed_out: bool) -> LaunchOutcome:
        """Kill what is left of the run and say what happened to it."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        assert self._launcher is not None
        outcome = finish_world(self._launcher, self.run_dir, self.live_world_size, wait=15, timed_out=timed_out,
                               timeout=self.run_timeout)
        for rank in range(max(self.world_size, self.live_world_size)):  # read; a stale one would look hung later
            board_path(self.run_dir, rank).unlink(missing_ok=True)
        self._launcher = None  # the next command starts the run again (`_launch`)
        return outcome

    def _call(self, command: tuple[Any, ...]) -> list[Any]:
        """Rank 0's answer; the run is killed when a rank dies, hangs past its timeout or eats memory (`wait`)."""
        if self._restart_failed is not None:
            down, self._restart_failed = self._restart_failed, None
            raise WorldDown(down)
        try:
            conn = self._conn or self._launch()
            try:
                conn.send_bytes(pickle.dumps(command))
                self.wait(lambda: conn.poll(POLL), time.monotonic(), self._deadline)
                return pickle.loads(conn.recv_bytes())  # type: ignore[no-any-return]
            except (EOFError, OSError):
                raise WorldDown(self._down(timed_out=False)) from None
        except WorldDown:
            raise
        except BaseException:  # Ctrl-C: nothing of the run outlives the check
            if self._launcher is not None:
                self._down(timed_out=True)
            raise

    def _broken(self, waited: float) -> LaunchOutcome:
        return self._down(timed_out=True)

    def restart(self, phase: str, world_size: int | None = None) -> None:
        """Go on in ``world_size`` fresh processes (None: the check's): rank 0 tells the launcher the next
        phase and its size as its ranks stop; with no phase running, the next command starts it."""
        size = self.world_size if world_size is None else world_size
        if self._conn is not None:
            phase = self._name(phase)
            if self._stop(phase, size):
                self.live_world_size = size
                try:
                    self._connect(phase)
                except WorldDown as e:  # its ranks never listened: the example that needed them fails with why
                    self._restart_failed = e.outcome
                return
            self._down(timed_out=False)
        self.live_world_size = size

    def _stop(self, following: str | None, size: int) -> bool:
        """Rank 0 ends the phase (``following``: the next phase, on ``size`` ranks, if any); it answered?"""
        assert self._conn is not None
        try:
            self._conn.send_bytes(pickle.dumps(("stop", following, size)))
            self._conn.recv_bytes()
            return True
        except (EOFError, OSError):
            return False
        finally:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        if self._conn is not None:
            self._stop(None, self.world_size)
        if self._launcher is not None:
            down = self._down(timed_out=False)
            self.notes.append(f"{self.world_size} ranks on torch.distributed (gloo), started by torch's elastic "
                              f"launcher; phases {' + '.join(down.phases_done) or 'none'}")
            if down.joins_retried:
                self.notes.append(f"phase {', '.join(down.joins_retried)} started again: its ranks could not form "
                                  f"their gloo group within {JOIN_TIMEOUT:g} s, before any loader code ran")
        if self.keep:
            self.notes.append(f"run files kept in {self.run_dir}")
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)
