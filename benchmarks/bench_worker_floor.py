"""Benchmark: the least a check's worker examples can cost, whatever the harness does.

    python benchmarks/bench_worker_floor.py [--repeat 15] [--worker-examples 16] [--json]

The unit of cost of a worker example is the *worker-pool start*: every ``iter()`` of a
loader without persistent workers, and the first ``iter()`` of one with them, forks its
workers, waits for their start-up and, at the end of the pass, for their exit. No harness
can avoid one: the contract resumes the loader under test as it runs, for at least two
further epochs (SC10's statement). This measures, in one process with torch, torchdata,
Hypothesis and stateful_contract imported (the state a check forks its workers from):

- the bare import, in fresh processes (the unit of issue 13's targets);
- one pass of a tiny `StatefulDataLoader` (6 samples) without persistent workers, with 1 and
  2 workers: the cost of one pool start with almost nothing else (medians of ``--repeat``);
- how many pool starts, loaders with workers and worker examples the ci check of the
  reference wrapper makes, counted by wrapping torchdata's multi-process iterator and the
  factory, at the shipped budget and at ``--worker-examples`` per clause (issue 13's 4x).

starts x the cheaper pass is a lower bound on the worker part of a ci check, compared with
5x the import. ``--json`` prints the rows as JSON (`bench_check.py --floor` reads them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def import_seconds(repeat: int) -> float:
    cmd = [sys.executable, "-c", "import torch, torchdata.stateful_dataloader, hypothesis"]
    subprocess.run(cmd, check=True)  # warm the file cache
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def pool_start_seconds(workers: int, repeat: int) -> float:
    """Median seconds of one pass of 6 samples over ``workers`` workers started for it (and stopped after it)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(list(range(6)), batch_size=1, num_workers=workers)
    times = []
    for i in range(repeat + 2):
        t = time.perf_counter()
        for _ in loader:
            pass
        if i >= 2:  # the first passes warm what the process has not touched yet
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def counts_of_a_ci_check(worker_examples: int | None) -> dict[str, int]:
    """Pool starts, loaders with workers and worker examples of the in-process ci check of the reference wrapper."""
    from torchdata.stateful_dataloader import stateful_dataloader as sdl

    from stateful_contract import check, profiles
    from stateful_contract.reference.factories import reference_wrapper

    counts = {"starts": 0, "loaders": 0}
    iterator = sdl._StatefulMultiProcessingDataLoaderIter
    init = iterator.__init__

    def starting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        counts["starts"] += 1  # each new multi-process iterator forks its workers
        init(self, *args, **kwargs)

    def counting(config):  # type: ignore[no-untyped-def]
        counts["loaders"] += config.num_workers > 0
        return reference_wrapper(config)

    shipped = profiles.PROFILES["ci"]
    if worker_examples is not None:
        profiles.PROFILES["ci"] = dataclasses.replace(shipped, worker_examples=worker_examples)
    iterator.__init__ = starting  # type: ignore[method-assign]
    try:
        report = check(counting, isolation="in-process", jobs=1)
    finally:
        profiles.PROFILES["ci"] = shipped
        iterator.__init__ = init  # type: ignore[method-assign]
    counts["examples"] = sum(r.coverage.get("with-workers", 0) for r in report.results)
    return counts


def measure(repeat: int, worker_examples: int) -> list[tuple[str, str, str]]:
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    base = import_seconds(max(3, repeat // 3))
    import hypothesis  # noqa: F401  (the state a check forks from)

    import stateful_contract  # noqa: F401

    passes = {w: pool_start_seconds(w, repeat) for w in (1, 2)}
    floor = min(passes.values())
    rows = [("import torch, torchdata, hypothesis (baseline)", f"{base:.2f} s", "1.0x")]
    rows += [(f"one pool start: a pass of 6 samples on {w} worker{'s' if w > 1 else ''} started for it",
              f"{1000 * s:.0f} ms", "") for w, s in passes.items()]
    for label, budget in (("shipped ci", None), (f"{worker_examples} worker examples per clause", worker_examples)):
        n = counts_of_a_ci_check(budget)
        bound = n["starts"] * floor
        rows.append((f"{label}: {n['examples']} worker examples, {n['loaders']} loaders with workers, "
                     f"{n['starts']} pool starts", f">= {bound:.1f} s",
                     f">= {bound / base:.1f}x the import, in pool starts alone"))
    rows.append(("5x the import (issue 13's target for the whole ci check)", f"{5 * base:.1f} s", "5.0x"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--worker-examples", type=int, default=16, help="per clause, the budget issue 13 asks for")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows = measure(args.repeat, args.worker_examples)
    if args.json:
        print(json.dumps(rows))
        return
    print("| measurement | median / bound | ratio |\n|---|---|---|")
    print("\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows))
    print(f"(repeat={args.repeat}, python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M')})")


if __name__ == "__main__":
    main()
