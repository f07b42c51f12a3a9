"""The launcher processes, and the one kept between checks so that torch is imported once.

Before its first rank starts, a launcher (`stateful_contract._engine.ranks.launcher`) costs
two interpreters importing torch: itself, and the forkserver the ranks are forked from.
That is about 4 s of CPU on 2 cores, most of what a 2-rank check of a few examples costs.
So a run that ends cleanly gives its launcher back, and the next multi-rank check in this
process sends that launcher its run directory instead of starting another.

Nothing of one check reaches the next:

- every phase's ranks are fresh processes, forked from the forkserver, which never imports
  the code under test;
- after each run, every process carrying the launcher's marker (`MARKER_ENV`) is killed,
  except the launcher's own (its forkserver and resource tracker, listed before its first
  run): a DataLoader worker a rank left behind does not outlive the check;
- a run that timed out, hung, did not finish or was interrupted takes its launcher down with
  it, as before: the next check starts a fresh one;
- a launcher is reused only by the process that started it, with the environment, working
  directory and interpreter it was started with (a test that sets an environment variable
  for its ranks gets a launcher that has it), and for at most `MAX_RUNS` runs.

``STATEFUL_CONTRACT_FRESH_LAUNCHER=1`` turns the reuse off: a launcher per check, as before.
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

from ..processes import MARKER_ENV, kill_marked, kill_session, processes_of

__all__ = ["KEPT_FILE", "Launcher", "left_behind", "start_launcher"]

#: Runs one launcher serves before it is replaced: torch's rendezvous leaves a thread or a
#: socket behind now and then, and a fresh launcher every so often keeps that bounded.
MAX_RUNS = 50
#: Where a kept launcher lists its own processes (forkserver, resource tracker), before its first run.
KEPT_FILE = "kept.json"
#: The file a run's outcome is written to; while it is missing, the run goes on.
OUTCOME_FILE = "launch-outcome.json"
#: Environment variables that change from check to check without changing what a rank sees: pytest's
#: current test, and Hypothesis' home, which every check points at a temporary directory of its own
#: (`stateful_contract._storage`) and which a kept launcher points into its own directory instead.
_HYPOTHESIS_HOME = "HYPOTHESIS_STORAGE_DIRECTORY"
_VOLATILE = frozenset({"PYTEST_CURRENT_TEST", _HYPOTHESIS_HOME})
_FRESH_ENV = "STATEFUL_CONTRACT_FRESH_LAUNCHER"

#: The folder this copy of the package is imported from. The ranks must run the same code as
#: the checker that drives them: ``python -m`` would put the working directory first on
#: ``sys.path`` (another checkout, say), and an editable install elsewhere could come next.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
_LAUNCHER = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
             "from stateful_contract._engine.ranks.launcher import main; sys.exit(main())")


@dataclass(eq=False)
class Launcher:
    """One launcher process: either a single run's (``kept=False``) or one kept for run after run."""

    proc: subprocess.Popen[bytes]
    #: The `MARKER_ENV` value its processes (ranks, their workers) carry.
    marker: Path
    kept: bool
    #: The pipe a kept launcher reads run directories from.
    stdin: int | None = None
    runs: int = 0
    key: tuple[object, ...] = ()
    owner: int = field(default_factory=os.getpid)

    def send(self, run_dir: Path) -> None:
        assert self.stdin is not None
        self.runs += 1
        os.write(self.stdin, f"{run_dir}\n".encode())

    def running(self, run_dir: Path) -> bool:
        """The launcher is alive and has not written ``run_dir``'s outcome yet."""
        return self.proc.poll() is None and not (self.kept and (run_dir / OUTCOME_FILE).is_file())

    def finish(self, run_dir: Path, wait: float) -> bool:
        """Wait up to ``wait`` s for the run to end; whether it did (a one-run launcher: exited)."""
        if not self.kept:
            try:
                self.proc.wait(wait)
                return True
            except subprocess.TimeoutExpired:
                return False
        limit = time.monotonic() + wait
        while self.running(run_dir) and time.monotonic() < limit:
            time.sleep(0.01)
        return not self.running(run_dir)  # its outcome written, or the launcher dead (its log says why)

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

    def kill(self) -> None:
        """End the launcher and everything carrying its marker."""
        if self.stdin is not None:
            with contextlib.suppress(OSError):
                os.close(self.stdin)
            self.stdin = None
        kill_session(self.proc.pid, marker=self.marker)  # before reaping: the pid stays the group's until then
        self.proc.wait()
        if self.kept:
            shutil.rmtree(self.marker, ignore_errors=True)


_lock = threading.Lock()
_idle: list[Launcher] = []
#: Every kept launcher's marker this process started, for `left_behind`.
_markers: list[Path] = []


def _key(env: dict[str, str] | None) -> tuple[object, ...]:
    environ = {k: v for k, v in os.environ.items() if k not in _VOLATILE}
    return (sys.executable, os.getcwd(), tuple(sorted(environ.items())), tuple(sorted((env or {}).items())))


def start_launcher(run_dir: Path, *, reusable: bool, env: dict[str, str] | None = None) -> Launcher:
    """A launcher running ``run_dir``'s spec: an idle kept one when ``reusable`` and one fits, else a fresh one."""
    reusable = reusable and os.environ.get(_FRESH_ENV, "") in ("", "0")
    if not reusable:
        return Launcher(_popen(run_dir, [str(run_dir)], subprocess.DEVNULL, env), marker=run_dir, kept=False)
    key = _key(env)
    with _lock:
        found = next((launcher for launcher in _idle if launcher.key == key), None)
        if found is not None:
            _idle.remove(found)
    if found is None or found.proc.poll() is not None:
        if found is not None:
            found.kill()
        found = _start_kept(key, env)
    found.send(run_dir)
    return found


def _start_kept(key: tuple[object, ...], env: dict[str, str] | None) -> Launcher:
    marker = Path(tempfile.mkdtemp(prefix="stateful-contract-launcher-"))
    read, write = os.pipe()
    proc = _popen(marker, ["--serve", str(marker)], read, {**(env or {}), _HYPOTHESIS_HOME: str(marker / ".hypothesis")})
    os.close(read)
    with _lock:
        _markers.append(marker)
    return Launcher(proc, marker=marker, kept=True, stdin=write, key=key)


def _popen(marker: Path, args: list[str], stdin: int, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    """The launcher process, in a session of its own, carrying ``marker``; its output in ``marker``'s launcher.log."""
    child_env = {**os.environ, **(env or {}), MARKER_ENV: str(marker)}
    with open(marker / "launcher.log", "wb") as out:
        return subprocess.Popen([sys.executable, "-c", _LAUNCHER, PACKAGE_ROOT, *args], stdin=stdin, stdout=out,
                                stderr=subprocess.STDOUT, env=child_env, start_new_session=True)


def give_back(launcher: Launcher) -> None:
    """A run ended cleanly: clear what it left and keep the launcher for the next check, or end it."""
    if launcher.owner == os.getpid() and launcher.runs < MAX_RUNS and launcher.clear():
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


def _close_all() -> None:
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
        if launcher.stdin is not None:
            with contextlib.suppress(OSError):
                os.close(launcher.stdin)
            launcher.stdin = None
    _idle.clear()
    _markers.clear()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)
