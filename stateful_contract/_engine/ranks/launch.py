"""Starting the ranks the way ``torchrun`` starts them, and making sure none outlives the run.

`start_world` starts one *launcher* process, which runs torch's own launcher,
``torch.distributed.launcher.api.elastic_launch`` (what ``torchrun`` runs inside), once per
phase (rank 0's return value names the next phase): each phase is a fresh set of ``world_size`` processes with ``RANK``,
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

Which rank to blame. When one rank dies the others fail too, a moment later, on their
broken gloo connections ("Connection reset by peer"), and torch's launcher reports only
the rank its monitor happened to notice first: for function entrypoints
``ChildFailedError.failures`` holds a single rank, and when several are dead by the
monitor's next poll it is the lowest local rank, usually one that failed *because*
another had died. So the launcher keeps hold of the rank processes itself
(`_ExitWatch`): every rank's exit code and the moment it exited. `order_failures` then
names as the cause the failure that is not a consequence of another (a rank that died on
its own, or raised an error of its own, comes before a rank whose communication broke,
which comes before a rank the launcher stopped), the earliest among those, and lists
the rest after it as what followed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MARKER_ENV",
    "LaunchOutcome",
    "RankFailure",
    "finish_world",
    "kill_stragglers",
    "order_failures",
    "processes_of",
    "run_isolated",
    "start_world",
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

#: What a rank's error says when it failed because another rank went away (its gloo
#: connection broke, a collective timed out waiting for it, the store was gone): lower case.
COMMUNICATION_ERRORS = ("connection reset by peer", "connection closed by peer", "broken pipe",
                        "connection refused", "timed out", "gloo/transport", "distbackenderror",
                        "distnetworkerror", "diststoreerror")
#: Signals a rank is stopped with from outside: by the launcher once another rank failed
#: (SIGTERM, then SIGKILL after `SHUTDOWN_GRACE`), or when the launcher dies (SIGINT, the
#: ranks' parent-death signal).
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP})

#: How a failure relates to the others (`order_failures`), from most to least likely the cause.
OWN, KILLED, COMMUNICATION, STOPPED = "own", "killed", "communication", "stopped"
_KIND_ORDER = {OWN: 0, KILLED: 1, COMMUNICATION: 2, STOPPED: 3}

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
    #: When it exited (``time.time()``), as the launcher saw it; None when not known.
    exited_at: float | None = None
    #: `OWN`, `KILLED`, `COMMUNICATION` or `STOPPED`: set by `order_failures`, judged against the others.
    kind: str = OWN

    @property
    def how(self) -> str:
        if self.exitcode is not None and self.exitcode < 0 and -self.exitcode in signal.valid_signals():
            return "was killed by signal " + signal.Signals(-self.exitcode).name
        return f"exited with code {self.exitcode}"

    def describe(self) -> str:
        text = f"rank {self.rank} {self.how} in the {self.phase} phase, while {self.doing or 'starting up'}"
        if self.error:
            text += f": {self.error}"
        if self.stderr_tail:
            text += "\n  last lines of its stderr:\n    " + "\n    ".join(self.stderr_tail.splitlines())
        return text

    def describe_consequence(self) -> str:
        """One line for a failure that followed the cause."""
        if self.kind == OWN:
            return "then " + self.describe()
        if self.kind == STOPPED:
            return f"then rank {self.rank} {self.how} (stopped by the launcher once a rank had failed)"
        if self.kind == KILLED:
            return f"then rank {self.rank} {self.how} (stopped by a signal)"
        first = next((line.strip() for line in self.error.splitlines() if line.strip()), "")
        short = first if len(first) <= 160 else first[:157] + "..."
        return f"then rank {self.rank} {self.how} (its communication with the other ranks failed: {short})"


def _kind(failure: RankFailure, others: Sequence[RankFailure]) -> str:
    """Whether ``failure`` is its rank's own, or a consequence of another rank's (see `order_failures`)."""
    text = failure.error.lower()
    signalled = "got signal" in text or (failure.exitcode is not None and failure.exitcode < 0
                                         and -failure.exitcode in STOP_SIGNALS)
    if signalled:
        # The launcher stops ranks only after it saw another exit: one killed no later than
        # every other (the OOM killer, a user's kill) was not stopped by it.
        when = failure.exited_at
        later = when is not None and any(o.exited_at is not None and o.exited_at < when for o in others)
        return STOPPED if later else KILLED
    if any(pattern in text for pattern in COMMUNICATION_ERRORS):
        return COMMUNICATION
    return OWN


def order_failures(failures: Sequence[RankFailure]) -> list[RankFailure]:
    """The failures with the cause first, then the others in the order they exited.

    Exit times alone do not settle it: a rank that raised may exit after the rank it
    failed because of or in the same poll of the launcher, or times may be unknown or
    whole seconds. So each failure is first judged against the others (its ``kind``), and
    the cause is, in this order: a rank that died or raised on its own (`OWN`:
    ``os._exit``, a crash signal, an error that is not about communication); a rank
    killed by a stop signal (SIGTERM, SIGKILL...) no later than the others exited
    (`KILLED`: the OOM killer, say); a rank whose communication with the others broke
    (`COMMUNICATION`: "Connection reset by peer", a timeout); a rank stopped by a signal
    after another had exited (`STOPPED`: the launcher shutting the run down). Among
    failures of the same kind the earliest exit is the cause; equal or unknown times go
    to the lowest rank, so the verdict never depends on the order the failures arrived in.
    """
    failures = list(failures)
    for f in failures:
        f.kind = _kind(f, [o for o in failures if o is not f])

    def when(f: RankFailure) -> float:
        return math.inf if f.exited_at is None else f.exited_at

    if not failures:
        return []
    cause = min(failures, key=lambda f: (_KIND_ORDER[f.kind], when(f), f.rank))
    return [cause, *sorted((f for f in failures if f is not cause), key=lambda f: (when(f), f.rank))]


@dataclass
class LaunchOutcome:
    """What happened to the launched phases."""

    phases_done: list[str]
    failed_phase: str | None = None
    #: The ranks that failed, the cause first (`order_failures`).
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
            cause, *after = order_failures(self.failures)
            return "\n".join([cause.describe(), *(f.describe_consequence() for f in after)])
        return f"the launcher failed: {self.launcher_error}"


def start_world(run_dir: Path, *, world_size: int, first_phase: str, entry: str, timeout: float,
                start_method: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the launcher: ``entry(world, phase)`` on ``world_size`` fresh ranks, phase after phase.

    ``entry`` is a ``"module:function"`` string, imported inside each rank; the value rank 0
    returns names the next phase (a fresh set of processes), or ends the run when falsy.
    ``timeout`` bounds the gloo collectives; the caller ends hangs by killing the run.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "status").mkdir(exist_ok=True)
    if start_method is None:
        start_method = "fork" if sys.platform.startswith("linux") else "spawn"
    spec = {"world_size": world_size, "first_phase": first_phase, "entry": entry, "start_method": start_method,
            "timeout": timeout}
    (run_dir / _SPEC).write_text(json.dumps(spec), encoding="utf-8")
    (run_dir / _OUTCOME).unlink(missing_ok=True)  # a previous launcher's, in a restarted run
    child_env = {**os.environ, **(env or {}), MARKER_ENV: str(run_dir)}
    with open(run_dir / "launcher.log", "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "stateful_contract._engine.ranks.launch", str(run_dir)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=child_env,
                                start_new_session=True)


def finish_world(proc: subprocess.Popen[bytes], run_dir: Path, world_size: int, *, wait: float,
                 timed_out: bool = False, timeout: float = 0.0) -> LaunchOutcome:
    """Wait up to ``wait`` s for the launcher, kill whatever is left of the run, and say what happened."""
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill_group(proc.pid)
    proc.wait()
    kill_stragglers(run_dir)
    outcome = _read_outcome(run_dir, world_size)
    outcome.timed_out = timed_out and outcome.failed_phase is None
    outcome.timeout = timeout
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
    failures = order_failures([
        RankFailure(rank=int(f["rank"]), phase=data["failed_phase"], exitcode=f["exitcode"], error=f["error"],
                    doing=doing.get(int(f["rank"]), ""),
                    stderr_tail=_tail(Path(f["stderr"]) if f.get("stderr") else None),
                    exited_at=f.get("exited_at"))
        for f in data.get("failures", [])
    ])
    return LaunchOutcome(phases_done=data["phases_done"], failed_phase=data.get("failed_phase"),
                         failures=failures, doing=doing)


# --- the launcher process ---------------------------------------------------------------


class _ExitWatch:
    """Every rank's exit code, and when it exited, for one ``elastic_launch`` call.

    torch reports only the rank its monitor noticed first (see the module docstring), so
    while active this keeps the rank processes torch's launcher starts: it wraps
    ``torch.multiprocessing.start_processes``, which the launcher calls for function
    entrypoints, and a thread records the moment each process exits. The time comes from
    a pidfd (Linux), which is ready when that process ends, even if DataLoader workers it
    forked still hold its multiprocessing sentinel open; elsewhere from the sentinel.
    """

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir  # the phase's logs: each rank's error file, if its Python wrote one
        self.processes: list[Any] = []  # multiprocessing.Process, by local rank
        self.exited_at: dict[int, float] = {}
        self._thread: threading.Thread | None = None

    @contextmanager
    def active(self) -> Iterator[_ExitWatch]:
        import torch.multiprocessing as torch_mp

        original: Callable[..., Any] = torch_mp.start_processes  # type: ignore[attr-defined]

        def start_processes(*args: Any, **kwargs: Any) -> Any:
            context = original(*args, **kwargs)
            if not self.processes:  # max_restarts=0: one set of ranks per launch
                self._watch(list(getattr(context, "processes", None) or []))
            return context

        torch_mp.start_processes = start_processes  # type: ignore[attr-defined]
        try:
            yield self
        finally:
            torch_mp.start_processes = original  # type: ignore[attr-defined]
            if self._thread is not None:
                self._thread.join(timeout=SHUTDOWN_GRACE)  # the ranks are gone: returns at once

    def _watch(self, processes: list[Any]) -> None:
        import multiprocessing.connection

        self.processes = processes
        handles: dict[int, int] = {}
        owned: list[int] = []
        for local_rank, process in enumerate(processes):
            try:
                fd = os.pidfd_open(process.pid)
                owned.append(fd)
            except (AttributeError, OSError):  # no pidfds here: the sentinel
                fd = process.sentinel
            handles[fd] = local_rank

        def run() -> None:
            try:
                while handles:
                    ready = multiprocessing.connection.wait(list(handles))
                    now = time.time()
                    for fd in ready:
                        if isinstance(fd, int):
                            self.exited_at[handles.pop(fd)] = now
            except OSError:  # a sentinel closed under us: the times it had are kept
                pass
            finally:
                for fd in owned:
                    os.close(fd)

        self._thread = threading.Thread(target=run, name="stateful-contract-exit-watch", daemon=True)
        self._thread.start()

    def failures(self, reported: dict[int, Any]) -> dict[int, tuple[Any, float | None]]:
        """Every failed rank: torch's ``ProcessFailure`` and when it exited.

        ``reported`` is ``ChildFailedError.failures``; the ranks it leaves out that exited
        with a non-zero code are added (with their error file, if their Python wrote one).
        One node, so a global rank is its local rank.
        """
        from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

        found: dict[int, tuple[Any, float | None]] = {
            rank: (f, self.exited_at.get(f.local_rank, float(f.timestamp))) for rank, f in reported.items()}
        for local_rank, process in enumerate(self.processes):
            if local_rank in found or process.exitcode in (None, 0):
                continue
            error_file = next(iter(sorted(self.log_dir.glob(f"*/attempt_*/{local_rank}/error.json"))), None)
            failure = ProcessFailure(local_rank=local_rank, pid=process.pid, exitcode=process.exitcode,
                                     error_file=str(error_file) if error_file else "")
            found[local_rank] = (failure, self.exited_at.get(local_rank))
        return found


def _failure_record(rank: int, failure: Any, log_dir: Path, exited_at: float | None = None) -> dict[str, Any]:
    message = failure.message
    if isinstance(message, dict):  # error file written by the elastic @record wrapper
        message = message.get("message", "")
    if not isinstance(message, str) or message.startswith("To enable traceback"):
        message = ""
    stderr = next(iter(sorted(log_dir.glob(f"*/attempt_*/{failure.local_rank}/stderr.log"))), None)
    return {"rank": rank, "exitcode": failure.exitcode, "error": message,
            "stderr": str(stderr) if stderr else None, "exited_at": exited_at}


def _launch_phases(run_dir: Path) -> dict[str, Any]:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from .world import rank_main

    spec = json.loads((run_dir / _SPEC).read_text(encoding="utf-8"))
    outcome: dict[str, Any] = {"phases_done": [], "failed_phase": None, "failures": []}
    phase = spec["first_phase"]
    while phase:
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
        watch = _ExitWatch(log_dir)
        try:
            with watch.active():
                returns = elastic_launch(config, rank_main)(str(run_dir), phase)
        except ChildFailedError as e:
            outcome["failed_phase"] = phase
            outcome["failures"] = [_failure_record(rank, f, log_dir, at)
                                   for rank, (f, at) in sorted(watch.failures(e.failures).items())]
            break
        outcome["phases_done"].append(phase)
        phase = returns.get(0) or ""
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stateful_contract._engine.ranks.launch RUN_DIR``: run the phases in RUN_DIR/launch.json."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m stateful_contract._engine.ranks.launch RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0])
    outcome = _launch_phases(run_dir)
    (run_dir / _OUTCOME).write_text(json.dumps(outcome), encoding="utf-8")
    print("LAUNCHER-OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
