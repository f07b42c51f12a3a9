"""Benchmark: ``pytest -n 2`` against plain ``pytest`` on the quickstart's contract class.

    python benchmarks/bench_xdist.py [--repeat 3]

The class of docs/quickstart.md ("The test mixin, in ten lines"), with the reference
``PrefetchGradAccDataLoader`` as the user's wrapper, in a fresh directory; each round runs
``pytest -q`` and ``pytest -q -n 2`` once, alternating which goes first, in fresh processes,
so a machine loaded by others slows both alike. Prints each time, the medians, their ratio
(``-n 2`` over plain: at most 1.0 is the target) and the load average before and after.
Under xdist the class is one work unit, so the other worker is idle: the class takes the
cores it leaves (`stateful_contract.pytest_plugin.xdist_jobs`); before, it took one job.
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


def timed(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    plain = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_loader_contract.py"]
    runs = {"plain": plain, "-n 2": [*plain, "-n", "2"]}
    times: dict[str, list[float]] = {name: [] for name in runs}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        (cwd / "test_loader_contract.py").write_text(CLASS, encoding="utf-8")
        for i in range(args.repeat):
            order = list(runs) if i % 2 == 0 else list(reversed(runs))
            for name in order:
                times[name].append(timed(runs[name], cwd))
                print(f"round {i + 1}: {name:>5} {times[name][-1]:6.1f} s", flush=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"medians: plain {medians['plain']:.1f} s, -n 2 {medians['-n 2']:.1f} s; "
          f"ratio -n 2 / plain {medians['-n 2'] / medians['plain']:.2f}")
    print(f"load average (1, 5, 15 min): before {load_before[0]:.1f} {load_before[1]:.1f} {load_before[2]:.1f}, "
          f"after {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
