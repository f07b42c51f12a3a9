"""Benchmark: what supervising the loader's process costs, choice by choice: memory readings, the status log,
the fresh interpreter (docs/supervision.md, "What it costs").

    python benchmarks/bench_supervision.py memory [--repeat 5]
    python benchmarks/bench_supervision.py status [--repeat 5]
    python benchmarks/bench_supervision.py interpreter [--repeat 3]

- ``memory``: a loader with 2 fork workers, run in a child forked from a process that
  imported torch (as the supervised child is). For the child and its workers, summed, what
  each memory figure gained since each process was first seen (RssAnon; psutil's
  ``memory_info().rss``; ``memory_full_info().uss``), over an epoch of a correct loader (the
  figure should stay near 0) and of one whose workers allocate 256 MiB each (it should
  reach 512 MiB); and what one reading of each costs per process.
- ``status``: what the loader's process leaves for the supervisor, per call into the loader
  and per recorded step; and whether it is still there after the writer's SIGKILL and SIGSEGV.
- ``interpreter``: SC10 checks one after the other in one process (as a test session runs
  them): seconds per check; the fresh interpreter's cost shows as the difference between
  the first and the later ones, and between two checkouts (``--compare``).

Medians of ``--repeat`` rounds; the machine is shared, so ratios measured in one run count.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _anon(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def _figures() -> dict[str, Any]:
    import psutil

    return {"RssAnon": _anon,
            "rss": lambda pid: psutil.Process(pid).memory_info().rss,
            "rss-shared": lambda pid: (lambda m: m.rss - m.shared)(psutil.Process(pid).memory_info()),
            "uss": lambda pid: psutil.Process(pid).memory_full_info().uss}


class Hoarding:
    """Each worker allocates (and touches) 256 MiB on its first sample."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.kept: list[bytearray] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch

        if not self.kept:
            self.kept.append(bytearray(256 << 20))
            self.kept[0][::4096] = b"x" * (64 << 10)  # touched: resident
        return torch.tensor([i])


def _example(hoard: bool) -> None:
    """In the forked child: one epoch of a 2-worker loader, slowly enough to be watched."""
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    from stateful_contract import LoaderConfig

    torch.set_num_threads(1)
    config = LoaderConfig(dataset_size=16, batch_size=2)
    loader = (StatefulDataLoader(Hoarding(16), batch_size=2, num_workers=2, multiprocessing_context="fork")
              if hoard else config.stateful_dataloader(num_workers=2, multiprocessing_context="fork"))
    for _ in loader:
        time.sleep(0.1)
    time.sleep(0.3)


def memory(repeat: int) -> None:
    import psutil
    import torch  # noqa: F401  (the checker's state a supervised child inherits)
    import torchdata.stateful_dataloader  # noqa: F401

    figures = _figures()
    peaks: dict[tuple[str, bool], list[int]] = {}
    costs: dict[str, list[float]] = {name: [] for name in figures}
    for _ in range(repeat):
        for hoard in (False, True):
            pid = os.fork()
            if pid == 0:
                try:
                    _example(hoard)
                finally:
                    os._exit(0)
            baseline: dict[tuple[str, int], int] = {}
            peak = dict.fromkeys(figures, 0)
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                try:
                    pids = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
                except psutil.Error:
                    break
                for name, read in figures.items():
                    gained = 0
                    for p in pids:
                        try:
                            started = time.perf_counter()
                            value = read(p)
                            costs[name].append(time.perf_counter() - started)
                        except (psutil.Error, OSError):
                            continue
                        gained += max(0, value - baseline.setdefault((name, p), value))
                    peak[name] = max(peak[name], gained)
                time.sleep(0.05)
            for name in figures:
                peaks.setdefault((name, hoard), []).append(peak[name])
    print(f"memory gained during one epoch of a 2-worker loader (child + workers, medians of {repeat}):")
    print("| figure | correct loader | workers allocate 2 x 256 MiB | one reading, per process |")
    print("|---|---|---|---|")
    for name in figures:
        ok, hoarded = (statistics.median(peaks[name, h]) / (1 << 20) for h in (False, True))
        print(f"| {name} | {ok:.0f} MiB | {hoarded:.0f} MiB | {statistics.median(costs[name]) * 1e6:.0f} us |")


# --- status: the board against an append-only log ------------------------------------------


def _writer_cost(make: Any, repeat: int, calls: int = 20000, steps: int = 2000) -> tuple[float, float]:
    """Microseconds per call into the loader (enter + leave) and per recorded step (the program so far)."""
    per_call, per_step = [], []
    program = ""
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d:
            board = make(Path(d) / "status")
            board.command("SC10: example LoaderConfig()")
            started = time.perf_counter()
            for _ in range(calls):
                board.enter("next(iterator)")
                board.leave()
            per_call.append((time.perf_counter() - started) / calls * 1e6)
            started = time.perf_counter()
            for i in range(steps):
                if i % 40 == 0:
                    board.command("SC10: example LoaderConfig()")  # a new example: a new program
                    program = "loader = factory(config)\n"
                program += f"take(loader, {i})\n"
                board.program(program)
            per_step.append((time.perf_counter() - started) / steps * 1e6)
            board.close()
    return statistics.median(per_call), statistics.median(per_step)


def _survives(make: Any, read: Any, sig: signal.Signals) -> bool:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "status"
        pid = os.fork()
        if pid == 0:
            try:
                board = make(path)
                board.command("SC10: example")
                board.program("loader = factory(config)\n")
                board.enter("loader.load_state_dict(state)")
                board.deadline(12.5, 4.0)
                os.kill(os.getpid(), sig)
            finally:
                os._exit(1)
        _, code = os.waitpid(pid, 0)
        view = read(path)
        return bool(os.WIFSIGNALED(code) and view.command == "SC10: example" and view.in_call
                    and view.deadline == (12.5, 4.0) and view.program == "loader = factory(config)\n")


def _status_module(tree: Path) -> Any:
    import importlib.util

    # A checkout compared with this one may predate the package's folders (status.py was in _engine/).
    path = next(p for p in (tree / "stateful_contract" / folder / "status.py" for folder in ("repro", "_engine"))
                if p.is_file())
    found = importlib.util.spec_from_file_location(f"status_of_{len(str(tree))}_{tree.name}", path)
    assert found is not None and found.loader is not None
    module = sys.modules[found.name] = importlib.util.module_from_spec(found)  # dataclasses look it up
    found.loader.exec_module(module)
    return module


def status_cost(repeat: int, compare: Path | None) -> None:
    print("| status.py of | per call into the loader | per recorded step | the supervisor's look | file after "
          "2000 calls | survives SIGKILL, SIGSEGV |")
    print("|---|---|---|---|---|---|")
    for tree in [ROOT] + ([compare] if compare else []):
        status = _status_module(tree)
        per_call, per_step = _writer_cost(status.Board, repeat)
        kept = all(_survives(status.Board, status.read, s) for s in (signal.SIGKILL, signal.SIGSEGV))
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "status"
            board = status.Board(path)
            looks = []
            for i in range(2000):
                board.enter("next(iterator)")
                board.leave()
                if i % 20 == 0:
                    board.program("x\n" * (i // 20))
                    started = time.perf_counter()
                    status.read(path)
                    looks.append(time.perf_counter() - started)
            size = path.stat().st_size
        print(f"| {tree} | {per_call:.2f} us | {per_step:.2f} us | {statistics.median(looks) * 1e6:.0f} us | "
              f"{size} bytes | {kept} |")


# --- interpreter: the fresh half's new interpreter, per check --------------------------------

_CHECKS = r"""
import sys, time, zoo
from stateful_contract import ConfigSpace, check
for i in range(int(sys.argv[1])):
    t = time.perf_counter()
    r = check(zoo.epoch_loader, clauses=["SC10"], space=ConfigSpace(num_workers=(0,)))
    assert r.passed, r
    print(time.perf_counter() - t, flush=True)
"""


def interpreter(repeat: int, compare: Path | None, checks: int = 4) -> None:
    trees = [ROOT] + ([compare] if compare else [])
    seconds: dict[Path, list[list[float]]] = {t: [] for t in trees}
    cpu: dict[Path, list[float]] = {t: [] for t in trees}
    for _ in range(repeat):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "tests")])}
            started = os.times()
            done = subprocess.run([sys.executable, "-c", _CHECKS, str(checks)], capture_output=True, text=True,
                                  env=env, cwd=tree, check=True)
            ended = os.times()
            seconds[tree].append([float(x) for x in done.stdout.split()])
            cpu[tree].append(ended.children_user + ended.children_system
                             - started.children_user - started.children_system)
    print(f"{checks} SC10 checks in one process, seconds each (medians of {repeat}); CPU of the whole process:")
    for tree in trees:
        each = [statistics.median(r[i] for r in seconds[tree]) for i in range(checks)]
        print(f"  {tree}: " + ", ".join(f"{s:.2f}" for s in each)
              + f"; later checks {statistics.median(each[1:]):.2f} s; CPU {statistics.median(cpu[tree]):.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["memory", "status", "interpreter"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compare", type=Path, help="another checkout, measured in the same rounds")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f}")
    if args.what == "memory":
        memory(args.repeat)
    elif args.what == "status":
        status_cost(args.repeat, args.compare)
    else:
        interpreter(args.repeat, args.compare)
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
