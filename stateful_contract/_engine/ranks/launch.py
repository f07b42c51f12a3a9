"""Starting the ranks the way ``torchrun`` starts them, and making sure none outlives the run.

`start_world` starts one *launcher* process, which runs torch's own launcher,
``torch.distributed.launcher.api.elastic_launch`` (what ``torchrun`` runs inside), once per
phase (rank 0's return value names the next phase): each phase is a fresh set of
``world_size`` processes with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR=127.0.0.1`` and a ``MASTER_PORT`` picked by the c10d rendezvous, and the
elastic agent stops the whole set as soon as one rank fails (``max_restarts=0``). Each
rank then joins a gloo process group and calls the phase's entry function
(`stateful_contract._engine.ranks.world.rank_main`).

Why a launcher process rather than launching from the caller:

- a hang is ended from outside: after ``timeout`` seconds the caller kills the
  launcher's whole process group (launcher, ranks, their DataLoader workers), then
  looks for any process still carrying the run's marker in its environment and kills
  it too. Nothing is left behind, whatever the ranks were blocked in;
- the ranks are forked from the launcher's forkserver, which has torch imported and
  never imported the code under test, so every phase starts from clean interpreters (a
  phase-2 rank cannot see what phase 1 left in a module-level registry), yet a phase
  costs well under a second instead of the 3 s per rank that importing torch again takes
  on 2 CPU cores (``spawn``, or the subprocesses ``torchrun script.py`` starts). Not
  forked from the launcher itself: it has threads by then (``_start_forkserver`` in
  `stateful_contract._engine.ranks.launcher` says what that did);
- the caller's own threads and signal handlers (pytest, Hypothesis) are not inherited.

The launcher writes ``launch-outcome.json``; `LaunchOutcome` reads it together with
the ranks' status files and logs, so a failure names the rank and what it was doing.

Which rank is named as the cause when several fail: `stateful_contract._engine.ranks.failures`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path

from .. import status
from ..processes import MARKER_ENV, fault_excerpt, processes_of
from .failures import LaunchOutcome, RankFailure, order_failures
from .pool import OUTCOME_FILE, Launcher, give_back, start_launcher

__all__ = [
    "MARKER_ENV",
    "LaunchOutcome",
    "RankFailure",
    "board_path",
    "finish_world",
    "processes_of",
    "start_world",
    "status_path",
    "where_ranks_were",
]

#: How often the elastic agent polls its ranks: a failure is noticed within this.
MONITOR_INTERVAL = 0.05
#: Lines of a dead rank's stderr quoted in the failure message.
STDERR_TAIL_LINES = 25

#: Seconds a fresh set of ranks may take to form its gloo group. It takes well under 5 s, even
#: with 3 ranks on 2 loaded cores; a join that has not finished by then never will.
JOIN_TIMEOUT = 60.0
#: How a rank's status starts until it has joined: a phase that failed then is started again.
JOINING = "joining the gloo process group"

SPEC_FILE = "launch.json"


def status_path(run_dir: Path, rank: int) -> Path:
    """The file where ``rank`` writes what it is doing (read when it dies or hangs)."""
    return run_dir / "status" / f"rank{rank}.txt"


def board_path(run_dir: Path, rank: int) -> Path:
    """``rank``'s status log (`stateful_contract._engine.status`): the call into the loader, the program."""
    return run_dir / "status" / f"rank{rank}.board"


def start_world(run_dir: Path, *, world_size: int, first_phase: str, entry: str, timeout: float,
                start_method: str | None = None, env: dict[str, str] | None = None) -> Launcher:
    """Start ``entry(world, phase)`` on ``world_size`` fresh ranks, phase after phase, in a launcher.

    ``entry`` is a ``"module:function"`` string, imported inside each rank; the value rank 0
    returns names the next phase (a fresh set of processes), or ends the run when falsy.
    ``timeout`` bounds the gloo collectives; the caller ends hangs by killing the run. With the
    default start method the launcher is one kept from an earlier run when one fits
    (`stateful_contract._engine.ranks.pool`).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "status").mkdir(exist_ok=True)
    reusable = start_method is None and sys.platform.startswith("linux")
    if start_method is None:
        # Not "fork": see `stateful_contract._engine.ranks.launcher._start_forkserver`.
        start_method = "forkserver" if sys.platform.startswith("linux") else "spawn"
    spec = {"world_size": world_size, "first_phase": first_phase, "entry": entry, "start_method": start_method,
            "timeout": timeout}
    (run_dir / SPEC_FILE).write_text(json.dumps(spec), encoding="utf-8")
    (run_dir / OUTCOME_FILE).unlink(missing_ok=True)  # a previous launcher's, in a restarted run
    return start_launcher(run_dir, reusable=reusable, env=env)


def finish_world(launcher: Launcher, run_dir: Path, world_size: int, *, wait: float,
                 timed_out: bool = False, timeout: float = 0.0) -> LaunchOutcome:
    """Wait up to ``wait`` s for the run to end, kill whatever is left of it, and say what happened."""
    ended = not timed_out and launcher.finish(run_dir, wait)
    timed_out = timed_out or not ended
    log = run_dir / "launcher.log"
    if launcher.kept and not log.is_file():  # it died before this run began: its own log says why
        with contextlib.suppress(OSError):
            shutil.copyfile(launcher.marker / "launcher.log", log)
    if launcher.kept and ended:
        give_back(launcher)  # kills what the run left, keeps the launcher
    else:
        launcher.kill()
    outcome = _read_outcome(run_dir, world_size)
    outcome.timed_out = timed_out and outcome.failed_phase is None
    outcome.timeout = timeout
    outcome.launcher_log = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    return outcome


def _tail(path: Path | None, lines: int = STDERR_TAIL_LINES) -> str:
    if path is None or not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    fault = fault_excerpt(text)  # a fatal signal: the loader's frames, not the launcher's below them
    if fault:
        return fault
    kept = [line for line in text.splitlines() if line.strip() and "Warning" not in line
            and "torch.set_vital" not in line]
    return "\n".join(kept[-lines:])


def where_ranks_were(run_dir: Path, world_size: int) -> tuple[dict[int, str], dict[int, str]]:
    """What each rank was doing (its status file, and its call into the loader), and its reproduction
    up to where it stopped, the call it was in marked (its status log), by rank."""
    doing, programs = {}, {}
    for rank in range(world_size):
        path, board = status_path(run_dir, rank), status.read(board_path(run_dir, rank))
        doing[rank] = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
        if board.call:
            doing[rank] += f", {board.during}"
        if board.program:
            programs[rank] = board.program + ("  # <- this rank stopped here" if board.in_call else "")
    return doing, programs


def _read_outcome(run_dir: Path, world_size: int) -> LaunchOutcome:
    doing, programs = where_ranks_were(run_dir, world_size)
    path = run_dir / OUTCOME_FILE
    if not path.is_file():
        return LaunchOutcome(phases_done=[], doing=doing, programs=programs)
    data = json.loads(path.read_text(encoding="utf-8"))
    failures = order_failures([
        RankFailure(rank=int(f["rank"]), phase=data["failed_phase"], exitcode=f["exitcode"], error=f["error"],
                    doing=doing.get(int(f["rank"]), ""),
                    stderr_tail=_tail(Path(f["stderr"]) if f.get("stderr") else None),
                    exited_at=f.get("exited_at"))
        for f in data.get("failures", [])
    ])
    return LaunchOutcome(phases_done=data["phases_done"], failed_phase=data.get("failed_phase"),
                         failures=failures, doing=doing, programs=programs, joins_retried=data.get("joins_retried", []))

