"""Starting the ranks the way ``torchrun`` starts them, and making sure none outlives the run.

`run_world` starts one *launcher* process, which runs torch's own launcher,
``torch.distributed.launcher.api.elastic_launch`` (what ``torchrun`` runs inside), once per
phase: each phase is a fresh set of ``world_size`` processes with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1`` and a ``MASTER_PORT`` picked by
the c10d rendezvous, and the elastic agent stops the whole set as soon as one rank
fails (``max_restarts=0``). Each rank then joins a gloo process group and calls the
phase's entry function (`stateful_contract.distributed.world.rank_main`).

Why a launcher process rather than launching from the caller:

- a hang is ended from outside: after ``timeout`` seconds the caller kills the
  launcher's whole process group (launcher, ranks, their DataLoader workers), then
  looks for any process still carrying the run's marker in its environment and kills
  it too. Nothing is left behind, whatever the ranks were blocked in;
- the ranks are forked from a process that never imported the code under test, so
  every phase starts from clean interpreters (a phase-2 rank cannot see what phase 1
  left in a module-level registry), yet a phase costs about 0.3 s instead of the
  3 s per rank that importing torch again takes on 2 CPU cores (``spawn``, or the
  subprocesses ``torchrun script.py`` starts);
- the caller's own threads and signal handlers (pytest, Hypothesis) are not inherited.

The launcher writes ``launch-outcome.json``; `LaunchOutcome` reads it together with
the ranks' status files and logs, so a failure names the rank and what it was doing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MARKER_ENV",
    "LaunchOutcome",
    "RankFailure",
    "kill_stragglers",
    "processes_of",
    "run_isolated",
    "run_world",
    "status_path",
]

#: Environment variable every process of a run carries (value: the run directory), so
#: that stragglers can be found and killed even if they left the process group.
MARKER_ENV = "STATEFUL_CONTRACT_RUN"
#: Seconds the agent gives a rank to exit after SIGTERM before SIGKILL, once another failed.
SHUTDOWN_GRACE = 5
#: How often the elastic agent polls its ranks: a failure is noticed within this.
MONITOR_INTERVAL = 0.05
#: Lines of a dead rank's stderr quoted in the failure message.
STDERR_TAIL_LINES = 25

_SPEC = "launch.json"
_OUTCOME = "launch-outcome.json"


def status_path(run_dir: Path, rank: int) -> Path:
    """The file where ``rank`` writes what it is doing (read when it dies or hangs)."""
    return run_dir / "status" / f"rank{rank}.txt"


@dataclass
class RankFailure:
    """One rank that did not finish its phase."""

    rank: int
    phase: str
    exitcode: int | None
    error: str
    doing: str
    stderr_tail: str = ""

    def describe(self) -> str:
        how = ("was killed by signal " + signal.Signals(-self.exitcode).name
               if self.exitcode is not None and self.exitcode < 0 and -self.exitcode in signal.valid_signals()
               else f"exited with code {self.exitcode}")
        text = f"rank {self.rank} {how} in the {self.phase} phase, while {self.doing or 'starting up'}"
        if self.error:
            text += f": {self.error}"
        if self.stderr_tail:
            text += "\n  last lines of its stderr:\n    " + "\n    ".join(self.stderr_tail.splitlines())
        return text


@dataclass
class LaunchOutcome:
    """What happened to the launched phases."""

    phases_done: list[str]
    failed_phase: str | None = None
    failures: list[RankFailure] = field(default_factory=list)
    timed_out: bool = False
    timeout: float = 0.0
    seconds: float = 0.0
    #: Rank statuses at the end (what each was doing when the run ended or was killed).
    doing: dict[int, str] = field(default_factory=dict)
    launcher_log: str = ""

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.failed_phase is None and not self.launcher_error

    @property
    def launcher_error(self) -> str:
        return "" if self.failed_phase or self.timed_out or "LAUNCHER-OK" in self.launcher_log else (
            self.launcher_log.strip()[-2000:] or "the launcher exited without a word")

    def describe(self) -> str:
        """Why the run did not finish, one rank per line."""
        if self.timed_out:
            lines = [f"the {len(self.doing)}-rank run did not finish within {self.timeout:g} s and was killed "
                     "(with all its processes). Where each rank was:"]
            lines += [f"  rank {r}: {d or 'starting up'}" for r, d in sorted(self.doing.items())]
            return "\n".join(lines)
        if self.failures:
            return "\n".join(f.describe() for f in self.failures)
        return f"the launcher failed: {self.launcher_error}"


def run_world(run_dir: Path, *, world_size: int, phases: Sequence[str], entry: str, timeout: float,
              start_method: str | None = None, env: dict[str, str] | None = None) -> LaunchOutcome:
    """Run ``entry(world, phase)`` on ``world_size`` fresh ranks for each phase, in order.

    ``entry`` is a ``"module:function"`` string, imported inside each rank. A phase
    runs only if rank 0 returned a truthy value from the previous one. The whole run
    gets ``timeout`` seconds; then every process of it is killed.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "status").mkdir(exist_ok=True)
    if start_method is None:
        start_method = "fork" if sys.platform.startswith("linux") else "spawn"
    spec = {"world_size": world_size, "phases": list(phases), "entry": entry, "start_method": start_method,
            "timeout": timeout}
    (run_dir / _SPEC).write_text(json.dumps(spec), encoding="utf-8")
    started = time.monotonic()
    returncode = run_isolated([sys.executable, "-m", "stateful_contract.distributed.launch", str(run_dir)],
                              marker=run_dir, output=run_dir / "launcher.log", timeout=timeout, env=env)
    outcome = _read_outcome(run_dir, world_size)
    outcome.timed_out = returncode is None
    outcome.timeout = timeout
    outcome.seconds = time.monotonic() - started
    outcome.launcher_log = (run_dir / "launcher.log").read_text(encoding="utf-8", errors="replace")
    return outcome


def run_isolated(command: Sequence[str], *, marker: Path, output: Path, timeout: float, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> int | None:
    """Run ``command`` in a session of its own and leave nothing of it running.

    Output (stdout and stderr) goes to ``output``. After ``timeout`` seconds the command's
    process group is killed (returns None). Either way, what is left of the group and any
    process carrying ``marker`` in its environment (`MARKER_ENV`: processes that started
    sessions of their own, as torchrun's ranks do) is killed before returning.
    """
    child_env = {**os.environ, **(env or {}), MARKER_ENV: str(marker)}
    with open(output, "wb") as out:
        proc = subprocess.Popen(list(command), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=child_env, start_new_session=True)
        returncode: int | None = None
        try:
            returncode = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        except BaseException:  # KeyboardInterrupt in the caller: take the run down with it
            _kill_group(proc.pid)
            proc.wait()
            kill_stragglers(marker)
            raise
        _kill_group(proc.pid)  # what the command left in its group (orphaned workers), or all of it
        proc.wait()
    kill_stragglers(marker)
    return returncode


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def processes_of(run_dir: Path) -> list[int]:
    """Live processes carrying ``run_dir``'s marker in their environment (Linux only)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    needle = f"{MARKER_ENV}={run_dir}".encode() + b"\0"
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Zombies (state Z) are already dead; they only wait for their parent to reap them.
        if needle in environ + b"\0" and stat.rpartition(")")[2].split()[0] != "Z":
            found.append(int(entry.name))
    return found


def kill_stragglers(run_dir: Path) -> list[int]:
    """Kill the run's processes that escaped its process group; returns their pids."""
    stragglers = processes_of(run_dir)
    for pid in stragglers:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return stragglers


def _tail(path: Path | None, lines: int = STDERR_TAIL_LINES) -> str:
    if path is None or not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    kept = [line for line in text.splitlines() if line.strip() and "Warning" not in line
            and "torch.set_vital" not in line]
    return "\n".join(kept[-lines:])


def _read_outcome(run_dir: Path, world_size: int) -> LaunchOutcome:
    doing = {}
    for rank in range(world_size):
        path = status_path(run_dir, rank)
        doing[rank] = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    path = run_dir / _OUTCOME
    if not path.is_file():
        return LaunchOutcome(phases_done=[], doing=doing)
    data = json.loads(path.read_text(encoding="utf-8"))
    failures = [
        RankFailure(rank=int(f["rank"]), phase=data["failed_phase"], exitcode=f["exitcode"], error=f["error"],
                    doing=doing.get(int(f["rank"]), ""),
                    stderr_tail=_tail(Path(f["stderr"]) if f.get("stderr") else None))
        for f in data.get("failures", [])
    ]
    return LaunchOutcome(phases_done=data["phases_done"], failed_phase=data.get("failed_phase"),
                         failures=failures, doing=doing)


# --- the launcher process ---------------------------------------------------------------


def _failure_record(rank: int, failure: Any, log_dir: Path) -> dict[str, Any]:
    message = failure.message
    if isinstance(message, dict):  # error file written by the elastic @record wrapper
        message = message.get("message", "")
    if not isinstance(message, str) or message.startswith("To enable traceback"):
        message = ""
    stderr = next(iter(sorted(log_dir.glob(f"*/attempt_*/{failure.local_rank}/stderr.log"))), None)
    return {"rank": rank, "exitcode": failure.exitcode, "error": message,
            "stderr": str(stderr) if stderr else None}


def _launch_phases(run_dir: Path) -> dict[str, Any]:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from .world import rank_main

    spec = json.loads((run_dir / _SPEC).read_text(encoding="utf-8"))
    outcome: dict[str, Any] = {"phases_done": [], "failed_phase": None, "failures": []}
    for phase in spec["phases"]:
        log_dir = run_dir / "logs" / phase
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=spec["world_size"],
            # As `torchrun --standalone`: a c10d rendezvous on a free local port.
            rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", local_addr="127.0.0.1",
            run_id=f"stateful-contract-{phase}", max_restarts=0,
            monitor_interval=MONITOR_INTERVAL, start_method=spec["start_method"],
            logs_specs=DefaultLogsSpecs(log_dir=str(log_dir), redirects=Std.ALL),
            shutdown_timeout=SHUTDOWN_GRACE,
        )
        try:
            returns = elastic_launch(config, rank_main)(str(run_dir), phase)
        except ChildFailedError as e:
            outcome["failed_phase"] = phase
            outcome["failures"] = [_failure_record(rank, f, log_dir) for rank, f in sorted(e.failures.items())]
            break
        outcome["phases_done"].append(phase)
        if not returns.get(0):
            break
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stateful_contract.distributed.launch RUN_DIR``: run the phases in RUN_DIR/launch.json."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m stateful_contract.distributed.launch RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    outcome = _launch_phases(run_dir)
    (run_dir / _OUTCOME).write_text(json.dumps(outcome), encoding="utf-8")
    print("LAUNCHER-OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
