"""Benchmark: ``pytest -n 2`` against plain ``pytest`` on the quickstart's contract class.

    python benchmarks/bench_xdist.py [--repeat 3] [--no-floor]

The class of docs/quickstart.md ("The test mixin, in ten lines"), with the reference
``PrefetchGradAccDataLoader`` as the user's wrapper, in a fresh directory; each round runs
``pytest -q`` and ``pytest -q -n 2`` once, alternating which goes first, in fresh processes,
so a machine loaded by others slows both alike. Prints each time, the medians, their ratio
(``-n 2`` over plain: at most 1.0 is the target) and the load average before and after.
Under xdist the class is one work unit, so the other worker is idle: the class takes the
cores it leaves (`stateful_contract.faces.pytest_plugin.xdist_jobs`); before, it took one job.

Each run is split in three (a conftest.py logs the times): the start (until the class's first
clause test is set up: pytest's start, xdist's workers, collection), the check (until its last
test ends) and the end (the summary, the reports, the exit), which says where ``-n 2`` pays more.

xdist's floor: the same pair of runs on an empty suite of the same shape, in the same rounds (unless
``--no-floor``): a class of as many tests as the contract class has, each doing nothing, in a module with
the same imports (torch, the engine, the reference wrapper), so collection costs what it costs the
contract, run as one work unit (``--dist loadscope``, xdist's own scheduler). Its ``-n 2`` minus plain
is what xdist itself adds to a one-unit suite on this machine; the contract's difference is compared to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLASS = '''
from stateful_contract import ConfigSpace
from stateful_contract.reference.prefetch import PrefetchGradAccDataLoader
from stateful_contract.testing import StatefulLoaderContract


class TestPrefetchGradAccDataLoader(StatefulLoaderContract):
    config_space = ConfigSpace(num_workers=(0, 2), grad_acc_step=(1, 8))

    def make_loader(self, config):
        return PrefetchGradAccDataLoader(config.stateful_dataloader(), grad_acc_step=config.grad_acc_step)
'''

# xdist's floor: the contract module's imports, and as many do-nothing tests as its class has, in one class.
EMPTY = '''
import pytest
import torch  # noqa: F401
from stateful_contract import ConfigSpace  # noqa: F401
from stateful_contract.reference.prefetch import PrefetchGradAccDataLoader  # noqa: F401
from stateful_contract.testing import StatefulLoaderContract  # noqa: F401


class TestEmptyOfTheSameShape:
    @pytest.mark.parametrize("i", range({count}))
    def test_nothing(self, i):
        pass
'''

# Logs, in every process of the run, when the class's first clause test is set up and its last one ends.
PHASES = '''
import os, time
def _log(what):
    with open(os.environ["BENCH_XDIST_PHASES"], "a") as f:
        f.write(f"{time.time()} {what}\\n")
def pytest_runtest_setup(item):
    _log("setup")
def pytest_runtest_teardown(item):
    _log("teardown")
'''


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    """The run's wall time, and its start, check and end in seconds."""
    phases = cwd / "phases.txt"
    phases.unlink(missing_ok=True)
    started, wall_start = time.perf_counter(), time.time()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, "BENCH_XDIST_PHASES": str(phases)})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    stamps = [float(line.split()[0]) - wall_start for line in phases.read_text(encoding="utf-8").splitlines()]
    start, end = min(stamps), max(stamps)
    return seconds, f"start {start:.1f} s, check {end - start:.1f} s, end {seconds - end:.1f} s"


def clause_tests(cwd: Path) -> int:
    """How many tests the contract class has (pytest's own count, so the empty suite matches it)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                           "test_loader_contract.py"], cwd=cwd, capture_output=True, text=True, check=True)
    return sum(1 for line in done.stdout.splitlines() if "::" in line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-floor", action="store_true", help="skip the empty suite of the same shape")
    args = parser.parse_args()
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    runs = {"plain": [*pytest, "test_loader_contract.py"], "-n 2": [*pytest, "test_loader_contract.py", "-n", "2"]}
    if not args.no_floor:
        runs |= {"empty plain": [*pytest, "test_empty_shape.py"],
                 "empty -n 2": [*pytest, "test_empty_shape.py", "-n", "2", "--dist", "loadscope"]}
    times: dict[str, list[float]] = {name: [] for name in runs}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        (cwd / "test_loader_contract.py").write_text(CLASS, encoding="utf-8")
        (cwd / "conftest.py").write_text(PHASES, encoding="utf-8")
        if not args.no_floor:
            count = clause_tests(cwd)
            (cwd / "test_empty_shape.py").write_text(EMPTY.format(count=count), encoding="utf-8")
            print(f"the contract class has {count} tests; the empty suite as many", flush=True)
        for i in range(args.repeat):
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            for name in order:
                seconds, split = timed(runs[name], cwd)
                times[name].append(seconds)
                print(f"round {i + 1}: {name:>11} {seconds:6.1f} s ({split})", flush=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"medians: plain {medians['plain']:.1f} s, -n 2 {medians['-n 2']:.1f} s; "
          f"ratio -n 2 / plain {medians['-n 2'] / medians['plain']:.2f}; "
          f"-n 2 adds {medians['-n 2'] - medians['plain']:+.1f} s")
    if not args.no_floor:
        floor = medians["empty -n 2"] - medians["empty plain"]
        print(f"xdist's floor (the empty suite of the same shape): plain {medians['empty plain']:.1f} s, "
              f"-n 2 {medians['empty -n 2']:.1f} s; -n 2 adds {floor:+.1f} s; the contract's -n 2 adds "
              f"{medians['-n 2'] - medians['plain'] - floor:+.1f} s beyond it")
    print(f"load average (1, 5, 15 min): before {load_before[0]:.1f} {load_before[1]:.1f} {load_before[2]:.1f}, "
          f"after {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
