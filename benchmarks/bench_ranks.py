"""Benchmark: the default check on 2 ranks, this checkout against another in the same rounds.

    python benchmarks/bench_ranks.py --compare PATH [--repeat 3] [--world-size 2] [--target T] [--profile P]
    python benchmarks/bench_ranks.py --sizes 1,2 [--repeat 3] [--target T] [--profile P]

Each round runs ``python -m stateful_contract check T --world-size N --quiet`` (the ci profile, every default
clause, the reference wrapper unless ``--target``) once per checkout in fresh processes, alternating which goes
first (``PYTHONPATH`` set to the checkout, run from it). Prints each run's wall time, its CPU time (user + system,
of the check and every process it reaped: ranks, their DataLoader workers) and verdict with the load average
(1 min), then the medians and their ratios (the machine is shared: the ratio is what counts; CPU time depends
less on the load than wall time does, and on 2 cores bounds the wall time from below: CPU / 2). With
``--sizes``, this checkout alone at each world size in the same rounds (issue 32: 2 ranks within 2x of 1).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
#: What a check spends outside its clauses: the checker's and the ranks' start-up, each phase's stop.
OUTSIDE = "(outside clauses)"


class Run(NamedTuple):
    seconds: float
    cpu: float
    verdict: str
    spent: dict[str, float]


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def one(tree: Path, target: str, world_size: int, profile: str | None = None) -> Run:
    """Wall and CPU seconds of one check from ``tree``, its verdict (with each clause that did not pass, and
    why), and each judged clause's seconds (`OUTSIDE`: the rest, the checker's and the ranks' start-up)."""
    with tempfile.TemporaryDirectory() as d:
        command = [sys.executable, "-m", "stateful_contract", "check", target, "--world-size", str(world_size),
                   "--quiet", "--json", f"{d}/r.json", *(["--profile", profile] if profile else [])]
        started, cpu = time.perf_counter(), _cpu()
        subprocess.run(command, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        seconds, cpu = time.perf_counter() - started, _cpu() - cpu
        report = Path(f"{d}/r.json")
        if not report.is_file():
            return Run(seconds, cpu, "no report", {})
        data = json.loads(report.read_text())
        failed = [f"{c['id']} {c['status']}: {(c.get('message') or '').splitlines()[:2]}" for c in data["clauses"]
                  if c["status"] not in ("passed", "skipped")]
        spent = {c["id"]: float(c.get("seconds") or 0.0) for c in data["clauses"]
                 if c["status"] not in ("not-judged", "skipped")}  # what judged nothing counts as outside
        spent[OUTSIDE] = seconds - sum(spent.values())
        return Run(seconds, cpu, "; ".join([data["verdict"], *failed]), spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", metavar="PATH", type=Path, help="the other checkout (before)")
    parser.add_argument("--sizes", help="world sizes to compare on this checkout, e.g. 1,2 (instead of --compare)")
    parser.add_argument("--profile", help="the check's profile (default: the CLI's, ci)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--target", default="stateful_contract.reference.factories:reference_wrapper")
    args = parser.parse_args()
    if args.sizes:
        return by_size(args)
    if args.compare is None:
        parser.error("give --compare PATH or --sizes")
    trees = {"after": ROOT, "before": args.compare.resolve()}
    runs: dict[str, list[Run]] = {name: [] for name in trees}
    for round_ in range(args.repeat):
        for name in (("after", "before") if round_ % 2 == 0 else ("before", "after")):
            load = os.getloadavg()[0]
            run = one(trees[name], args.target, args.world_size, args.profile)
            runs[name].append(run)
            print(f"round {round_} {name:6}: {run.seconds:6.1f} s, cpu {run.cpu:6.1f} s, {run.verdict}, "
                  f"load {load:.1f}", flush=True)
    for what in ("seconds", "cpu"):
        after, before = (statistics.median(getattr(r, what) for r in runs[name]) for name in ("after", "before"))
        print(f"medians ({'wall' if what == 'seconds' else 'CPU'}): after {after:.1f} s, before {before:.1f} s, "
              f"after/before {after / before:.2f}x")



def by_size(args: argparse.Namespace) -> None:
    sizes = [int(n) for n in args.sizes.split(",")]
    walls: dict[int, list[float]] = {n: [] for n in sizes}
    cpus: dict[int, list[float]] = {n: [] for n in sizes}
    spent: dict[int, dict[str, list[float]]] = {n: {} for n in sizes}
    for round_ in range(args.repeat):
        for n in (sizes if round_ % 2 == 0 else sizes[::-1]):
            load = os.getloadavg()[0]
            run = one(ROOT, args.target, n, args.profile)
            walls[n].append(run.seconds)
            cpus[n].append(run.cpu)
            for name, s in run.spent.items():
                spent[n].setdefault(name, []).append(s)
            print(f"round {round_} world size {n}: {run.seconds:6.1f} s, cpu {run.cpu:6.1f} s, {run.verdict}, "
                  f"load {load:.1f}", flush=True)
    medians = {n: statistics.median(w) for n, w in walls.items()}
    print("medians: " + ", ".join(f"world size {n} {m:.1f} s ({m / medians[sizes[0]]:.2f}x)"
                                  for n, m in medians.items()))
    cpu = {n: statistics.median(c) for n, c in cpus.items()}
    print("CPU medians: " + ", ".join(f"world size {n} {m:.1f} s ({m / cpu[sizes[0]]:.2f}x)" for n, m in cpu.items()))
    # Where the time goes: each clause's median seconds at each size, the largest difference first.
    names = sorted({name for by in spent.values() for name in by},
                   key=lambda name: -(_median(spent[sizes[-1]], name) - _median(spent[sizes[0]], name)))
    print("clause              " + "".join(f"  ws{n:<6}" for n in sizes))
    for name in names:
        print(f"{name:20}" + "".join(f"  {_median(spent[n], name):6.1f}s" for n in sizes))
    # The floor (docs/performance.md, "Two ranks against one"): the clauses every size judges, summed, against
    # the smallest size's wall, where two parallel jobs share the cores; the rest is what only more ranks judge.
    judged = [name for name in names if name != OUTSIDE and all(name in spent[n] for n in sizes)]
    print(f"clauses every size judges ({len(judged)}), summed: " + ", ".join(
        f"ws{n} {sum(_median(spent[n], name) for name in judged):.1f} s" for n in sizes)
        + f"; ws{sizes[0]}'s wall {medians[sizes[0]]:.1f} s")


def _median(by: dict[str, list[float]], name: str) -> float:
    return statistics.median(by[name]) if by.get(name) else 0.0


if __name__ == "__main__":
    main()
