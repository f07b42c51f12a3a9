"""The launcher process: torch's elastic launcher, once per phase, watching every rank's exit.

`serve` `run`s each run directory its stdin names: ``elastic_launch`` (what ``torchrun`` runs inside) with
``RUN_DIR/launch.json``, phase after phase while rank 0 names a next one (and its world size), then
``launch-outcome.json`` with every failed rank's exit code, error and exit time (`failures`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import status
from .failures import SHUTDOWN_GRACE
from .launch import JOINING, KEPT_FILE, MONITOR_INTERVAL, OUTCOME_FILE, SPEC_FILE, board_path

__all__ = ["run", "serve"]


class _ExitWatch:
    """Every rank's exit code and time, for one ``elastic_launch`` call: torch reports only the rank its
    monitor noticed first (`failures`). While active, it wraps ``torch.multiprocessing.start_processes``
    (what the launcher calls for function entrypoints) to keep the rank processes, and a thread records
    when each exits: from a pidfd (Linux), ready when the process ends even if DataLoader workers it forked
    still hold its multiprocessing sentinel open; elsewhere from the sentinel."""

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
                self.processes = list(getattr(context, "processes", None) or [])
                self._thread = threading.Thread(target=self._watch, name="stateful-contract-exit-watch", daemon=True)
                self._thread.start()
            return context

        torch_mp.start_processes = start_processes  # type: ignore[attr-defined]
        try:
            yield self
        finally:
            torch_mp.start_processes = original  # type: ignore[attr-defined]
            if self._thread is not None:
                self._thread.join(timeout=SHUTDOWN_GRACE)  # the ranks are gone: returns at once

    def _watch(self) -> None:
        import multiprocessing.connection

        handles: dict[int, int] = {}
        owned: list[int] = []
        for local_rank, process in enumerate(self.processes):
            try:
                fd = os.pidfd_open(process.pid)
                owned.append(fd)
            except (AttributeError, OSError):  # no pidfds here: the sentinel
                fd = process.sentinel
            handles[fd] = local_rank
        try:
            while handles:
                ready = multiprocessing.connection.wait(list(handles))
                now = time.time()
                for handle in ready:
                    if isinstance(handle, int):
                        self.exited_at[handles.pop(handle)] = now
        except OSError:  # a sentinel closed under us: the times it had are kept
            pass
        finally:
            for fd in owned:
                os.close(fd)

    def failures(self, reported: dict[int, Any]) -> list[dict[str, Any]]:
        """Every failed rank, by rank: its exit code, error, stderr log and exit time. ``reported`` is
        ``ChildFailedError.failures``, to which the ranks it leaves out that exited non-zero are added (with
        their error file, if their Python wrote one). One node: a global rank is its local rank."""
        from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

        found: dict[int, tuple[Any, float | None]] = {
            rank: (f, self.exited_at.get(f.local_rank, float(f.timestamp))) for rank, f in reported.items()}
        for local_rank, process in enumerate(self.processes):
            if local_rank in found or process.exitcode in (None, 0):
                continue
            error_file = str(min(self.log_dir.glob(f"*/attempt_*/{local_rank}/error.json"), default=""))
            made = functools.partial(ProcessFailure, local_rank=local_rank, pid=process.pid, exitcode=process.exitcode)
            try:
                failure = made(error_file=error_file)
            except ValueError:  # its error file cut short: the agent killed it while it wrote the file
                failure = made(error_file="")
            found[local_rank] = (failure, self.exited_at.get(local_rank))
        records = []
        for rank, (failure, exited_at) in sorted(found.items()):
            message = failure.message
            if isinstance(message, dict):  # error file written by the elastic @record wrapper
                message = message.get("message", "")
            if not isinstance(message, str) or message.startswith("To enable traceback"):
                message = ""
            stderr = min(self.log_dir.glob(f"*/attempt_*/{failure.local_rank}/stderr.log"), default=None)
            records.append({"rank": rank, "exitcode": failure.exitcode, "error": message,
                            "stderr": str(stderr) if stderr else None, "exited_at": exited_at})
        return records


def _start_forkserver() -> None:
    """Start the process the ranks are forked from, importing torch while this process does too. Not ``fork``
    from here: this process has threads by then (the rendezvous stores' servers), and a rank forked while one
    held a lock in C keeps it held forever (glibc's resolver lock once stopped a rank in ``getnameinfo``:
    docs/distributed.md). The forkserver has one thread."""
    import multiprocessing
    import multiprocessing.forkserver

    # What a rank needs before its first line: the elastic wrapper it is started through, `world.rank_main`,
    # and DCP, which SC30's saves import on first use.
    multiprocessing.set_forkserver_preload(["torch.distributed.elastic.multiprocessing.api", "torch.multiprocessing.spawn",
                                            "stateful_contract._engine.ranks.world", "torch.distributed.checkpoint"])
    multiprocessing.forkserver.ensure_running()


def _launch_phases(run_dir: Path) -> dict[str, Any]:
    spec = json.loads((run_dir / SPEC_FILE).read_text(encoding="utf-8"))
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from .world import rank_main

    outcome: dict[str, Any] = {"phases_done": [], "failed_phase": None, "failures": [], "joins_retried": []}
    phase, world_size, attempt = spec["first_phase"], int(spec["world_size"]), 0
    while phase:
        # A retried phase keeps the failed attempt's logs beside its own.
        log_dir = run_dir / "logs" / (phase if not attempt else f"{phase}.retry{attempt}")
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=world_size,
            # As `torchrun --standalone`: a c10d rendezvous on a free local port.
            rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", local_addr="127.0.0.1",
            run_id=f"stateful-contract-{run_dir.name}-{phase}-{attempt}", max_restarts=0,
            role="default",  # torchrun's (its --role): each rank's ROLE_NAME
            monitor_interval=MONITOR_INTERVAL, start_method=spec["start_method"],
            logs_specs=DefaultLogsSpecs(log_dir=str(log_dir), redirects=Std.ALL),
            shutdown_timeout=SHUTDOWN_GRACE,
        )
        watch = _ExitWatch(log_dir)
        try:
            with watch.active():
                returns = elastic_launch(config, rank_main)(str(run_dir), phase)
        except ChildFailedError as e:
            if not attempt and not _all_joined(run_dir, world_size):
                # The ranks never formed their group, so no loader code ran: start them again, once
                # (`stateful_contract._engine.ranks.launch.JOIN_TIMEOUT`).
                outcome["joins_retried"].append(phase)
                attempt += 1
                continue
            outcome["failed_phase"] = phase
            outcome["failures"] = watch.failures(e.failures)
            break
        outcome["phases_done"].append(phase)
        name, size = returns.get(0) or (None, None)  # rank 0 names the next phase and its world size
        phase, world_size = str(name or ""), int(size or world_size)
        attempt = 0
    return outcome


def _all_joined(run_dir: Path, world_size: int) -> bool:
    """Whether every rank of the phase got past ``init_process_group`` (its status log says so)."""
    boards = [status.read(board_path(run_dir, rank)) for rank in range(world_size)]
    return all(board.pid and not board.command.startswith(JOINING) for board in boards)  # pid 0: not started


def run(run_dir: Path) -> None:
    outcome = _launch_phases(run_dir)
    written = run_dir / f"{OUTCOME_FILE}.tmp"  # renamed into place: the caller polls for it
    written.write_text(json.dumps(outcome), encoding="utf-8")
    written.replace(run_dir / OUTCOME_FILE)
    print("LAUNCHER-OK", flush=True)


def serve(marker: str) -> int:
    """The forkserver, then each run whose directory comes on stdin; ``marker``: the launcher's directory."""
    import psutil

    if sys.platform.startswith("linux"):  # elsewhere the ranks are spawned (`launch.start_world`)
        _start_forkserver()
    own = [p.pid for p in psutil.Process().children(recursive=True)]  # forkserver, resource tracker
    (Path(marker) / KEPT_FILE).write_text(json.dumps(own), encoding="utf-8")
    while line := sys.stdin.readline():
        try:
            run(Path(line.strip()))
        except BaseException:  # into its log, where the caller reads why the launcher failed
            traceback.print_exc()
            return 1
    # stdin closed: the caller is gone (even killed, with no chance to clean up), so is its directory.
    shutil.rmtree(marker, ignore_errors=True)
    return 0

