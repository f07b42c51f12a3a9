"""Benchmark: multi-rank checks one after another, with the launcher kept between them and without.

    python benchmarks/bench_launcher_pool.py [--repeat 3] [--checks 4] [--world-size 2]

Each round runs two fresh interpreters, one per mode, in alternating order: each makes
``--checks`` 2-rank checks of the reference wrapper, one replayed SC10 example each (the
smallest multi-rank check, so what is measured is what a check costs before its first
example), and prints the wall time of each check. ``kept`` is the default
(`stateful_contract._engine.ranks.launch`); ``fresh`` sets ``STATEFUL_CONTRACT_FRESH_LAUNCHER=1``,
a launcher per check. The first check of an interpreter starts a launcher either way; the
later ones are the comparison. Medians over rounds; the load average is printed with each
round (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ONE_RUN = r"""
import json, sys, time
from stateful_contract import LoaderConfig
from stateful_contract.distributed import check_world
from stateful_contract.repro import Position
walls = []
for _ in range(int(sys.argv[1])):
    started = time.monotonic()
    report = check_world("stateful_contract.reference.factories:reference_wrapper", world_size=int(sys.argv[2]),
                         clauses=["SC10"], replay=(LoaderConfig(dataset_size=4, batch_size=1), Position(epoch=0, batches=1)))
    walls.append(time.monotonic() - started)
    assert report["SC10"].status == "passed", report["SC10"].message
print(json.dumps(walls))
"""


def one(mode: str, checks: int, world_size: int) -> tuple[list[float], float]:
    env = {**os.environ, "STATEFUL_CONTRACT_FRESH_LAUNCHER": "1" if mode == "fresh" else "0"}
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", ONE_RUN, str(checks), str(world_size)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1]), time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--checks", type=int, default=4)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    later: dict[str, list[float]] = {"kept": [], "fresh": []}
    first: dict[str, list[float]] = {"kept": [], "fresh": []}
    for round_ in range(args.repeat):
        for mode in (("kept", "fresh") if round_ % 2 == 0 else ("fresh", "kept")):
            walls, total = one(mode, args.checks, args.world_size)
            first[mode].append(walls[0])
            later[mode].extend(walls[1:])
            print(f"round {round_} {mode:5}: checks {' '.join(f'{w:.2f}' for w in walls)} s, interpreter {total:.1f} s, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
    kept, fresh = statistics.median(later["kept"]), statistics.median(later["fresh"])
    print(f"first check: kept {statistics.median(first['kept']):.2f} s, fresh {statistics.median(first['fresh']):.2f} s")
    print(f"each later check (median): kept {kept:.2f} s, fresh {fresh:.2f} s, fresh/kept {fresh / kept:.1f}x")


if __name__ == "__main__":
    main()
