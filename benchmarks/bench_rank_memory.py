"""Benchmark: the memory a multi-rank check's processes hold, this checkout against another in the same rounds.

    python benchmarks/bench_rank_memory.py [--compare PATH] [--repeat 1] [--world-size 2] [--target T]

Each round runs ``python -m stateful_contract check T --world-size N --quiet`` (every default clause, the
reference wrapper unless ``--target``) in each checkout (``PYTHONPATH`` set to it, run from it), and samples the
check's process tree with psutil every 0.2 s: the sum of every process's resident set (RSS, shared pages counted
in each process, as ``ps -eo rss`` shows them), and how many rank processes are alive. Prints the peak of that
sum, its mean over the check's life (what a CI runner's other jobs feel), the mean of the ranks' own (without
their DataLoader workers), the most ranks alive at once and
the seconds during which more ranks were alive than the check's own world (idle worlds of other sizes: SC31's
and SC32's), with the load average (1 min). The rank processes are told by their command line (`RANK_MAIN`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import psutil

ROOT = Path(__file__).resolve().parents[1]
#: What a rank process runs (``isolation/ranks/launch.py``, ``Phase.start``).
RANK_MAIN = "stateful_contract.isolation.ranks.world:rank_main"
EVERY = 0.2


class Sampled(NamedTuple):
    seconds: float
    verdict: str
    peak_mb: float
    mean_mb: float
    ranks_mean_mb: float
    most_ranks: int
    beyond_own_s: float


def _tree(root: psutil.Process) -> tuple[int, int, int]:
    """The RSS sum of ``root`` and its descendants, in bytes; that of the ranks alone (the checker's children
    that run `RANK_MAIN`: their DataLoader workers, forked, carry the same command line), and how many."""
    rss = ranks_rss = ranks = 0
    with contextlib.suppress(psutil.Error):
        children = set(root.children())
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                size = process.memory_info().rss
                rss += size
                if process in children and RANK_MAIN in process.cmdline():
                    ranks, ranks_rss = ranks + 1, ranks_rss + size
    return rss, ranks_rss, ranks


def measure(checkout: Path, target: str, world_size: int) -> Sampled:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, "-m", "stateful_contract", "check", target, "--world-size", str(world_size), "--quiet"]
    began = time.monotonic()
    proc = subprocess.Popen(command, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    peak = total = ranks_total = samples = most = 0
    beyond = 0.0
    while proc.poll() is None:
        rss, ranks_rss, ranks = _tree(root)
        peak, most = max(peak, rss), max(most, ranks)
        total, ranks_total, samples = total + rss, ranks_total + ranks_rss, samples + 1
        if ranks > world_size:
            beyond += EVERY
        time.sleep(EVERY)
    return Sampled(time.monotonic() - began, "pass" if proc.returncode == 0 else f"exit {proc.returncode}",
                   peak / 2**20, total / max(samples, 1) / 2**20, ranks_total / max(samples, 1) / 2**20, most, beyond)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", type=Path, help="another checkout (a worktree of an earlier commit)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--target", default="stateful_contract.reference.factories:reference_wrapper")
    args = parser.parse_args()
    checkouts = {"this": ROOT, **({"other": args.compare.resolve()} if args.compare else {})}
    for round_ in range(args.repeat):
        order = list(checkouts.items())
        for name, checkout in order if round_ % 2 == 0 else order[::-1]:
            load = os.getloadavg()[0]
            s = measure(checkout, args.target, args.world_size)
            print(f"round {round_} {name}: {s.seconds:.1f} s, {s.verdict}, RSS sum peak {s.peak_mb:.0f} MB, mean "
                  f"{s.mean_mb:.0f} MB (the ranks alone {s.ranks_mean_mb:.0f} MB), at most {s.most_ranks} ranks alive, {s.beyond_own_s:.0f} s with more than "
                  f"{args.world_size} (load {load:.1f})", flush=True)


if __name__ == "__main__":
    main()
