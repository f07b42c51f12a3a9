"""Benchmark: the least a check's worker examples can cost, whatever the harness does.

    python benchmarks/bench_worker_floor.py [--repeat 15] [--worker-examples 16]

A worker example resumes a loader with worker processes, so it builds at least two such
loaders (the one checkpointed and the one resumed), and every loader with workers starts
them (a fork each, then the worker's start-up, then its shutdown) before its first batch.
This measures, in one process with torch, torchdata, Hypothesis and stateful_contract
imported (the state a check forks its workers from):

- the bare import, in fresh processes (the unit of issue 13's targets);
- the cost of one `StatefulDataLoader` with 1 and 2 persistent workers from construction to
  its first batch and shutdown: the floor of every worker loader (medians of ``--repeat``);
- how many loaders with workers the ci check of the reference wrapper builds, counted by
  wrapping its factory, at the shipped budget and at ``--worker-examples`` per clause.

The product of the last two is a lower bound on the worker part of a ci check, before any
batch beyond the first is fetched, compared with 5x the import.
"""

from __future__ import annotations

import argparse
import dataclasses
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


def loader_floor(workers: int, repeat: int) -> float:
    """Median seconds from building a loader with ``workers`` persistent workers to its first batch and shutdown."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def once() -> float:
        t = time.perf_counter()
        loader = StatefulDataLoader(list(range(4)), batch_size=2, num_workers=workers, persistent_workers=True)
        it = iter(loader)
        next(it)
        del it, loader  # shuts the workers down
        return time.perf_counter() - t

    once()
    return statistics.median(once() for _ in range(repeat))


def worker_loaders_of_a_ci_check(worker_examples: int | None) -> tuple[int, int]:
    """(loaders built with workers, worker examples) in the in-process ci check of the reference wrapper."""
    from stateful_contract import check, profiles
    from stateful_contract.reference.factories import reference_wrapper

    built = [0]

    def counting(config):  # type: ignore[no-untyped-def]
        built[0] += config.num_workers > 0
        return reference_wrapper(config)

    shipped = profiles.PROFILES["ci"]
    if worker_examples is not None:
        profiles.PROFILES["ci"] = dataclasses.replace(shipped, worker_examples=worker_examples)
    try:
        report = check(counting, isolation="in-process", jobs=1)
    finally:
        profiles.PROFILES["ci"] = shipped
    examples = sum(r.coverage.get("with-workers", 0) for r in report.results)
    return built[0], examples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--worker-examples", type=int, default=16, help="per clause, the budget issue 13 asks for")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")

    base = import_seconds(max(3, args.repeat // 3))
    import hypothesis  # noqa: F401  (the state a check forks from)

    import stateful_contract  # noqa: F401

    floors = {w: loader_floor(w, args.repeat) for w in (1, 2)}
    floor = statistics.mean(floors.values())  # the pool draws 1 and 2 workers equally often
    rows = [("import torch, torchdata, hypothesis (baseline)", f"{base:.2f} s", "1.0x")]
    rows += [(f"one loader with {w} persistent worker{'s' if w > 1 else ''}: built, first batch, shut down",
              f"{1000 * s:.0f} ms", "") for w, s in floors.items()]
    for label, budget in (("shipped ci", None), (f"{args.worker_examples} worker examples per clause",
                                                  args.worker_examples)):
        loaders, examples = worker_loaders_of_a_ci_check(budget)
        bound = loaders * floor
        rows.append((f"{label}: {examples} worker examples build {loaders} loaders with workers",
                     f">= {bound:.1f} s", f">= {bound / base:.1f}x the import, before any further batch"))
    rows.append(("5x the import (issue 13's target for the whole ci check)", f"{5 * base:.1f} s", "5.0x"))
    print("| measurement | median / bound | ratio |\n|---|---|---|")
    print("\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows))
    print(f"(repeat={args.repeat}, python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M')})")


if __name__ == "__main__":
    main()
