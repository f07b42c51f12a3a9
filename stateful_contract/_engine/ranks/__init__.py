"""The multi-rank executor: every example on every rank of a torch.distributed run at once.

`Ranks` starts ``world_size`` processes the way ``torchrun`` does (torch's elastic
launcher, gloo, see `stateful_contract._engine.ranks.launch`), connects to rank 0 and
sends it the engine's commands one at a time (`stateful_contract._engine.ranks.server`).
The engine itself (the search, the judgement, the report) stays in the caller's
process, exactly as with the in-process executor.

A rank that dies or hangs cannot take the run down: the caller waits for each answer
only so long, then kills every process of the run and says which rank failed first
and what each rank was doing. The next command starts a fresh set of processes.

`Ranks.restart` goes on in a fresh set of processes, on the same number of ranks or,
as an elastic restart does, on another (``restart("world-1", world_size=1)``): the
clauses that resume a state saved by another world (SC31) run there.
"""

from __future__ import annotations

import json
import pickle
import secrets
import shutil
import subprocess
import tempfile
import time
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

from ...profiles import Profile
from .. import status
from ..plans import Alignment
from ..processes import gained
from ..supervised import DEFAULT_MEMORY_LIMIT, MEMORY_EVERY, POLL, grace
from .executor import RankExecutor, absolute_target
from .executor import WorldDown as _WorldDown
from .launch import JOIN_TIMEOUT, LaunchOutcome, board_path, finish_world, start_world
from .server import ADDRESS_FILE, SPEC_FILE, RankSpec

__all__ = ["RankExecutor", "Ranks", "absolute_target", "default_run_timeout", "rank_executor"]

#: The rank-side entry of every phase.
ENTRY = "stateful_contract._engine.ranks.server:serve"
#: Seconds a command may take beyond the example timeout (process start-up, DCP, gathering).
COMMAND_GRACE = 60.0
#: Seconds a fresh set of processes may take to start and listen.
START_TIMEOUT = 120.0


def default_run_timeout(profile: Profile, clauses: int) -> float:
    """Seconds a whole multi-rank run may take before it is killed as hung.

    Generous on purpose (it only ends real hangs; single examples have their own
    ``timeout``): a start-up allowance plus, per clause, 0.25 s per in-process example and
    2 s per worker-process example, doubled.
    """
    return 120.0 + 2 * clauses * (0.25 * profile.examples + 2.0 * profile.worker_examples)


def rank_executor(target: str, *, world_size: int, factory_import: str, alignment: Alignment,
                  timeout: float | None, profile: Profile, clauses: int, run_dir: str | Path | None = None,
                  run_timeout: float | None = None,
                  memory_limit: int | None = DEFAULT_MEMORY_LIMIT) -> RankExecutor:
    """The multi-rank executor: the world this process joined (`in_world.joined`), else a `Ranks` of its own."""
    from .in_world import InWorld, joined

    found = joined()
    if found is not None:
        world, mode = found
        return InWorld(target, world=world, mode=mode, factory_import=factory_import, alignment=alignment,
                       timeout=timeout)
    return Ranks(target, world_size=world_size, factory_import=factory_import, alignment=alignment, timeout=timeout,
                 profile=profile, clauses=clauses, run_dir=run_dir, run_timeout=run_timeout,
                 memory_limit=memory_limit)


class Ranks(RankExecutor):
    """Runs every example on ``world_size`` ranks at once (torch.distributed, gloo), started by this package."""

    def __init__(self, target: str, *, world_size: int, factory_import: str, alignment: Alignment,
                 timeout: float | None, profile: Profile, clauses: int, run_dir: str | Path | None = None,
                 run_timeout: float | None = None, memory_limit: int | None = DEFAULT_MEMORY_LIMIT) -> None:
        from ..._target import TargetError, load_target

        if "<locals>" in target or "<lambda>" in target:
            raise TargetError(f"{target!r}: with world_size > 1 every rank imports the factory by name, so it "
                              "must be a module-level function (package.module:factory or path/to/file.py:factory)")
        self.target = absolute_target(target)
        load_target(self.target)  # fail fast, with the user's error, before starting any process
        self.world_size = world_size
        #: The ranks of the running phase: `world_size`, or another number after an elastic restart.
        self.live_world_size = world_size
        self.timeout = timeout
        self.memory_limit = memory_limit or None
        self.run_timeout = run_timeout if run_timeout is not None else default_run_timeout(profile, clauses)
        self.keep = run_dir is not None
        self.run_dir = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="stateful-contract-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.spec = RankSpec(self.target, factory_import, alignment, timeout, secrets.token_hex(16))
        (self.run_dir / SPEC_FILE).write_bytes(pickle.dumps(self.spec))
        self.notes: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        #: Every rank's epoch lengths of each config (`lengths`; plans are drawn from their
        #: shortest), by config and world size.
        self._lengths: dict[tuple[str, int], list[list[int]]] = {}
        self._conn: Connection | None = None
        self._phase = ""
        self._phases = 0
        self._phase_names: set[str] = set()
        self._deadline = 0.0
        self._started = 0.0

    # -- the world's life -------------------------------------------------------------

    def _name(self, phase: str) -> str:
        """A phase name not used before in this run (each phase has its own address file and logs)."""
        name, n = phase, 1
        while name in self._phase_names:
            n += 1
            name = f"{phase}{n}"
        self._phase_names.add(name)
        return name

    def _launch(self, phase: str) -> None:
        phase = self._name(phase)
        self._phase = phase
        self._phases += 1
        self._started = time.monotonic()
        if self._deadline == 0.0:
            self._deadline = self._started + self.run_timeout
        if self._proc is None:
            self._proc = start_world(self.run_dir, world_size=self.live_world_size, first_phase=phase, entry=ENTRY,
                                     timeout=self.run_timeout)
        self._connect(phase)

    def _connect(self, phase: str) -> None:
        address = self.run_dir / ADDRESS_FILE.format(phase=phase)
        limit = min(self._deadline, time.monotonic() + START_TIMEOUT)
        while not address.is_file():
            assert self._proc is not None
            if self._proc.poll() is not None or time.monotonic() > limit:
                raise _WorldDown(self._down(timed_out=time.monotonic() > limit))
            time.sleep(0.02)
        where = json.loads(address.read_text(encoding="utf-8"))
        self._conn = Client((where["host"], where["port"]), authkey=bytes.fromhex(self.spec.authkey))

    def _down(self, *, timed_out: bool) -> LaunchOutcome:
        """Kill what is left of the run and say what happened to it."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        assert self._proc is not None
        outcome = finish_world(self._proc, self.run_dir, self.live_world_size, wait=0 if timed_out else 15,
                               timed_out=timed_out, timeout=self.run_timeout)
        outcome.seconds = time.monotonic() - self._started
        for rank in range(self.world_size):  # read into the outcome; a stale board would look hung later
            board_path(self.run_dir, rank).unlink(missing_ok=True)
        self._proc = None
        # The next command starts a fresh set of processes, with a deadline of its own.
        self._deadline = 0.0
        return outcome

    def _call(self, command: tuple[Any, ...]) -> list[Any]:
        try:
            if self._conn is None:
                self._launch(f"phase{self._phases + 1}" if self._phases else "search")
            return self._await(command)
        except _WorldDown:
            raise
        except BaseException:  # Ctrl-C: nothing of the run outlives the check
            if self._proc is not None:
                self._down(timed_out=True)
            raise

    def _await(self, command: tuple[Any, ...]) -> list[Any]:
        """Rank 0's answer; the run is killed when a rank dies, hangs past its timeout or eats memory."""
        assert self._conn is not None
        sent = time.monotonic()
        limit = min(self._deadline, sent + (self.timeout or 0) * 2 + COMMAND_GRACE)
        baseline: dict[int, int] = {}
        next_memory = sent + MEMORY_EVERY
        try:
            self._conn.send_bytes(pickle.dumps(command))
            while not self._conn.poll(POLL):
                now = time.monotonic()
                if now > limit:
                    raise _WorldDown(self._down(timed_out=True))
                hung = self._hung_rank(now)
                if hung is not None:
                    down = self._down(timed_out=True)
                    down.hung = hung
                    raise _WorldDown(down)
                if self.memory_limit and now >= next_memory:
                    next_memory = now + MEMORY_EVERY
                    grown = self._grown(baseline)
                    if grown is not None:
                        down = self._down(timed_out=True)
                        down.memory = (*grown, self.memory_limit)
                        raise _WorldDown(down)
            return pickle.loads(self._conn.recv_bytes())  # type: ignore[no-any-return]
        except (EOFError, OSError):
            raise _WorldDown(self._down(timed_out=False)) from None

    def _hung_rank(self, now: float) -> tuple[int, float, float] | None:
        """A rank whose example timeout passed by the grace and which still has not come back from it."""
        if not self.timeout:
            return None
        for rank in range(self.world_size):
            deadline = status.read(board_path(self.run_dir, rank)).deadline
            if deadline is not None and now > deadline[0] + deadline[1] + grace(deadline[1]):
                return rank, deadline[1], now - deadline[0]
        return None

    def _grown(self, baseline: dict[int, int]) -> tuple[int, int] | None:
        """(rank, bytes) when a rank's processes grew past the memory limit since the command was sent."""
        assert self.memory_limit is not None
        total, by_rank = 0, {}
        for rank in range(self.world_size):
            pid = status.read(board_path(self.run_dir, rank)).pid
            if not pid:
                continue
            by_rank[rank] = gained(pid, baseline)
            total += by_rank[rank]
        if total <= self.memory_limit:
            return None
        rank = max(by_rank, key=lambda r: by_rank[r])
        return rank, total

    def restart(self, phase: str, world_size: int | None = None) -> None:
        """Go on in a fresh set of processes: ``world_size`` of them (None: the check's world size).

        The running phase's ranks stop, and rank 0 tells the launcher which phase comes next
        and on how many ranks. With no phase running, the next command starts it there.
        """
        size = self.world_size if world_size is None else world_size
        if size < 1:
            raise ValueError(f"a world has at least one rank, not {size}")
        if self._conn is None:
            self.live_world_size = size
            return
        phase = self._name(phase)
        try:
            self._conn.send_bytes(pickle.dumps(("stop", phase, size if size != self.live_world_size else None)))
            self._conn.recv_bytes()
        except (EOFError, OSError):
            self._down(timed_out=False)
            self.live_world_size = size
            return
        self._conn.close()
        self._conn = None
        self._phases += 1
        self._phase = phase
        self.live_world_size = size
        self._started = time.monotonic()
        self._connect(phase)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send_bytes(pickle.dumps(("stop", None)))
                self._conn.recv_bytes()
            except (EOFError, OSError):
                pass
        if self._proc is not None:
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
