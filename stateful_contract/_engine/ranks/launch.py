"""Starting the ranks the way ``torchrun`` starts them, and making sure none outlives the run.

A *launcher* process (`launcher`) runs ``elastic_launch`` once per phase, its ranks (`world.rank_main`)
forked from a forkserver; one that ended its run cleanly serves the next check (`give_back`). Why each, and
how a hang is ended from outside: docs/distributed.md, "Ranks that raise, die or hang".
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import status
from ..processes import MARKER_ENV, fault_excerpt, kill_marked, kill_session, processes_of
from .as_torchrun import of_caller
from .failures import LaunchOutcome, RankFailure, order_failures

__all__ = ["JOIN_TIMEOUT", "KEPT_FILE", "Launcher", "board_path", "close_kept", "finish_world", "left_behind",
           "start_launcher", "start_world", "where_ranks_were"]

#: How often the elastic agent polls its ranks: a failure is noticed within this.
MONITOR_INTERVAL = 0.05
#: Seconds a fresh set of ranks may take to form its gloo group. It takes well under 5 s, even
#: with 3 ranks on 2 loaded cores; a join that has not finished by then never will.
JOIN_TIMEOUT = 60.0
#: How a rank's status starts until it has joined: a phase that failed then is started again.
JOINING = "joining the gloo process group"

SPEC_FILE = "launch.json"
#: Runs one launcher serves before it is replaced: torch's rendezvous leaves a thread or a
#: socket behind now and then, and a fresh launcher every so often keeps that bounded.
MAX_RUNS = 50
#: Where a kept launcher lists its own processes (forkserver, resource tracker), before its first run.
KEPT_FILE = "kept.json"
#: The file a run's outcome is written to; while it is missing, the run goes on.
OUTCOME_FILE = "launch-outcome.json"
#: Environment variables that change from check to check and not what a rank sees: pytest's current
#: test, and Hypothesis' home (each check's own; a kept launcher's is its own).
_HYPOTHESIS_HOME = "HYPOTHESIS_STORAGE_DIRECTORY"
_VOLATILE = frozenset({"PYTEST_CURRENT_TEST", _HYPOTHESIS_HOME})
_FRESH_ENV = "STATEFUL_CONTRACT_FRESH_LAUNCHER"

#: The folder this copy of the package is imported from: the ranks run the checker's code, where ``python -m``
#: would put the working directory (another checkout, say) first on ``sys.path``, an editable install next.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
_LAUNCHER = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
             "from stateful_contract._engine.ranks.launcher import serve; sys.exit(serve(sys.argv[1]))")


def board_path(run_dir: Path, rank: int) -> Path:
    """``rank``'s status log (`stateful_contract._engine.status`): its call into the loader, its program."""
    return run_dir / "status" / f"rank{rank}.board"


@dataclass(eq=False)
class Launcher:
    """One launcher process (`launcher.serve`): it reads the run directories it runs from its stdin."""

    proc: subprocess.Popen[bytes]
    #: Its own directory: the `MARKER_ENV` value its processes (ranks, their workers) carry.
    marker: Path
    #: What a check must share with it to reuse it (`_key`); None: it serves one run only.
    key: tuple[object, ...] | None
    runs: int = 0
    owner: int = field(default_factory=os.getpid)
    #: Where the running run's output begins in its log (`finish_world` keeps that part with the run).
    log_from: int = 0

    def running(self, run_dir: Path) -> bool:
        """The launcher is alive and has not written ``run_dir``'s outcome yet."""
        return self.proc.poll() is None and not (run_dir / OUTCOME_FILE).is_file()

    def own_processes(self) -> set[int]:
        """The launcher and what it keeps between runs (empty before it has listed them)."""
        try:
            return {self.proc.pid, *json.loads((self.marker / KEPT_FILE).read_text(encoding="utf-8"))}
        except (OSError, ValueError):
            return set()

    def clear(self) -> bool:
        """Kill every process of the run that is not the launcher's own; whether the launcher can serve again."""
        own = self.own_processes()
        if not own or self.proc.poll() is not None:
            return False
        kill_marked(self.marker, spare=frozenset(own))
        return True

    def close_pipe(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def kill(self) -> None:
        """End the launcher and everything carrying its marker."""
        self.close_pipe()
        kill_session(self.proc.pid, marker=self.marker)  # before reaping: the pid stays the group's until then
        self.proc.wait()
        shutil.rmtree(self.marker, ignore_errors=True)


_lock = threading.Lock()
_idle: list[Launcher] = []
#: Every kept launcher's marker this process started, for `left_behind`.
_markers: list[Path] = []


def _key() -> tuple[object, ...]:
    environ = {k: v for k, v in os.environ.items() if k not in _VOLATILE}
    return sys.executable, os.getcwd(), tuple(sorted(environ.items()))


def start_launcher(run_dir: Path, *, reusable: bool) -> Launcher:
    """A launcher running ``run_dir``'s spec: an idle one that fits when ``reusable``, else a fresh one."""
    key = _key() if reusable and os.environ.get(_FRESH_ENV, "") in ("", "0") else None
    with _lock:
        found = next((launcher for launcher in _idle if key is not None and launcher.key == key), None)
        if found is not None:
            _idle.remove(found)
    if found is None or found.proc.poll() is not None:
        if found is not None:
            found.kill()
        marker = Path(tempfile.mkdtemp(prefix="stateful-contract-launcher-"))
        env = {**os.environ, _HYPOTHESIS_HOME: str(marker / ".hypothesis"), MARKER_ENV: str(marker)}
        with open(marker / "launcher.log", "wb") as out:  # in a session of its own, carrying the marker
            proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, PACKAGE_ROOT, str(marker)], env=env,
                                    stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        with _lock:
            _markers.append(marker)
        found = Launcher(proc, marker, key)
    else:
        found.log_from = (found.marker / "launcher.log").stat().st_size
    assert found.proc.stdin is not None
    found.runs += 1
    found.proc.stdin.write(f"{run_dir}\n".encode())
    found.proc.stdin.flush()
    return found


def give_back(launcher: Launcher) -> None:
    """A run ended cleanly: clear what it left and keep the launcher for the next check, or end it."""
    if launcher.key is not None and launcher.owner == os.getpid() and launcher.runs < MAX_RUNS and launcher.clear():
        with _lock:
            spare, _idle[:] = _idle[:], [launcher]  # one idle launcher is enough: checks run one at a time
    else:
        spare = [launcher]
    for other in spare:
        other.kill()


def left_behind() -> list[int]:
    """Processes of this process's kept launchers that are not a launcher's own: none, between checks."""
    with _lock:
        own = set().union(*(launcher.own_processes() for launcher in _idle))
        markers = list(_markers)
    return sorted(pid for marker in markers for pid in processes_of(marker) if pid not in own)


def close_kept() -> None:
    """End every launcher this process keeps (at exit, and when a check is interrupted)."""
    with _lock:
        idle, _idle[:] = _idle[:], []
    for launcher in idle:
        if launcher.owner == os.getpid():
            launcher.kill()


def _forget_in_child() -> None:
    """A forked child (a DataLoader worker, a supervised child) must not use or end its parent's launchers."""
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    for launcher in _idle:
        launcher.close_pipe()
    _idle.clear()
    _markers.clear()


def start_world(run_dir: Path, *, world_size: int, first_phase: str, timeout: float,
                ranks: dict[str, Any]) -> Launcher:
    """`world.serve` (``ranks``: a `world.RankSpec`) on ``world_size`` fresh ranks, phase after phase, in a
    launcher (a kept one that fits, on Linux); ``timeout`` bounds the gloo collectives; hangs are killed."""
    (run_dir / "status").mkdir(parents=True, exist_ok=True)
    linux = sys.platform.startswith("linux")
    # Not "fork": see `stateful_contract._engine.ranks.launcher._start_forkserver`.
    spec = {"world_size": world_size, "first_phase": first_phase, "start_method": "forkserver" if linux else "spawn",
            "timeout": timeout, "ranks": ranks, "process": of_caller()}
    (run_dir / SPEC_FILE).write_text(json.dumps(spec), encoding="utf-8")
    (run_dir / OUTCOME_FILE).unlink(missing_ok=True)  # a previous launcher's, in a restarted run
    return start_launcher(run_dir, reusable=linux)


def finish_world(launcher: Launcher, run_dir: Path, world_size: int, *, wait: float,
                 timed_out: bool = False, timeout: float = 0.0) -> LaunchOutcome:
    """Wait up to ``wait`` s for the run to end, kill whatever is left of it, and say what happened."""
    limit = time.monotonic() + wait
    while not timed_out and launcher.running(run_dir) and time.monotonic() < limit:
        time.sleep(0.01)
    ended = not timed_out and not launcher.running(run_dir)  # its outcome written, or the launcher dead
    log = b""  # this run's part of the launcher's log (why it failed, say), kept with the run's files
    with contextlib.suppress(OSError), open(launcher.marker / "launcher.log", "rb") as whole:
        whole.seek(launcher.log_from)
        log = whole.read()
    (run_dir / "launcher.log").write_bytes(log)
    if ended:
        give_back(launcher)  # kills what the run left, keeps the launcher if it may
    else:
        launcher.kill()
    outcome = _read_outcome(run_dir, world_size)
    outcome.timed_out = not ended and outcome.failed_phase is None
    outcome.timeout = timeout
    outcome.launcher_log = log.decode(errors="replace")
    return outcome


def _tail(path: Path | None, lines: int = 25) -> str:
    """The last ``lines`` of a dead rank's stderr that say something."""
    if path is None or not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    if fault := fault_excerpt(text):  # a fatal signal: the loader's frames, not the launcher's below them
        return fault
    kept = [line for line in text.splitlines() if line.strip() and "Warning" not in line
            and "torch.set_vital" not in line]
    return "\n".join(kept[-lines:])


def where_ranks_were(run_dir: Path, world_size: int) -> tuple[dict[int, str], dict[int, str]]:
    """By rank, from its status log: what each was doing (and its call into the loader), and its reproduction
    up to where it stopped."""
    doing, programs = {}, {}
    for rank in range(world_size):
        board = status.read(board_path(run_dir, rank))
        doing[rank] = board.command + (f", {board.during}" if board.call else "")
        if board.program:
            programs[rank] = board.program + ("  # <- this rank stopped here" if board.in_call else "")
    return doing, programs


def _read_outcome(run_dir: Path, world_size: int) -> LaunchOutcome:
    doing, programs = where_ranks_were(run_dir, world_size)
    path = run_dir / OUTCOME_FILE
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    failures = order_failures([
        RankFailure(rank=int(f["rank"]), phase=data["failed_phase"], exitcode=f["exitcode"], error=f["error"],
                    doing=doing.get(int(f["rank"]), ""),
                    stderr_tail=_tail(Path(f["stderr"]) if f.get("stderr") else None),
                    exited_at=f.get("exited_at"))
        for f in data.get("failures", [])
    ])
    return LaunchOutcome(phases_done=data.get("phases_done", []), failed_phase=data.get("failed_phase"),
                         failures=failures, doing=doing, programs=programs, joins_retried=data.get("joins_retried", []))


atexit.register(close_kept)
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)
