"""Benchmark: how many worker pools each clause of a ci check starts, the unit of a worker example's cost.

    python benchmarks/bench_pools.py [--repeat 3] [--factory reference_wrapper] [--json PATH]

The unit of a worker example's cost is the *pool start* (`bench_worker_floor.py`, 40 to 47 ms
each on 2 cores): every ``iter()`` of a loader without persistent workers, and the first of
one with them, forks its workers. This runs the ci check (``CI=true``, profile ``ci``,
derandomized, so the counts are the same on every run) of a correct window wrapper as a
user runs it (supervised, one job) and counts, per clause, the pools started, split by what
started them:

- ``reference``: inside `steps.uninterrupted` (the uninterrupted runs, shared per check);
- ``example``: everything else a clause's examples do (checkpoint, resume, compare);
- ``start``/``probe``: building the first loader and probing its load form (before any clause).

How it counts, and why it is exact: a pool start *is* the construction of torch's or
torchdata's multi-process iterator (``_MultiProcessingDataLoaderIter.__init__``,
``_StatefulMultiProcessingDataLoaderIter.__init__``: the constructor forks the workers), so
this wraps both constructors, in every process a loader runs in, and appends one line per
start to a log file (``O_APPEND``: lines of several processes do not interleave). Polling the
process tree with psutil for new children would miss workers that start and exit between two
polls, and would count processes the loader forks for other reasons. The wrapping is done
where the loader runs: the factory is `counted` in this module, so the supervised child
(forked from this process) inherits it, and the new interpreter that resumes SC10's fresh
half imports this module to unpickle the factory, which installs it there too. The clause an
iterator belongs to is the one of the command the child is answering (`executors.Handler`).

Clause times (the check's own, per clause) are medians over ``--repeat`` runs; the load
average is recorded with them (the machine is shared).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
LOG_ENV = "BENCH_POOLS_LOG"
FACTORY_ENV = "BENCH_POOLS_FACTORY"

_current = ["", "start"]  # the clause and the kind of command the loader's process is answering
_in_reference = [0]


def _log(kind: str) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = f"{_current[0] or '-'}\t{'reference' if _in_reference[0] else kind}\t{os.getpid()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def install() -> None:
    """Wrap the pool-starting constructors, the child's command loop and the uninterrupted run, once per process."""
    from torch.utils.data import dataloader
    from torchdata.stateful_dataloader import stateful_dataloader as sdl

    from stateful_contract.isolation import executors
    from stateful_contract.repro import steps

    if getattr(executors, "_bench_pools_installed", False):
        return
    executors._bench_pools_installed = True  # type: ignore[attr-defined]
    for cls in (dataloader._MultiProcessingDataLoaderIter, sdl._StatefulMultiProcessingDataLoaderIter):
        init = cls.__init__

        def counted_init(self: Any, *args: Any, __init: Any = init, __cls: Any = cls, **kwargs: Any) -> None:
            if type(self) is __cls:  # a subclass's own constructor calls ours: count the pool once
                _log(_current[1])
            __init(self, *args, **kwargs)

        cls.__init__ = counted_init  # type: ignore[method-assign]

    answer = executors.Handler.__call__

    def answering(self: Any, command: tuple[Any, ...]) -> Any:
        kind = command[0]
        _current[:] = [getattr(command[1], "id", "") if kind in ("lengths", "run") else "", kind]
        if kind in ("lengths", "run"):
            _current[1] = "example"
        return answer(self, command)

    executors.Handler.__call__ = answering  # type: ignore[method-assign]
    # `uninterrupted` calls `epoch_lengths` by its module's global: every uninterrupted run goes through it.
    lengths = steps.epoch_lengths

    def reference_lengths(*args: Any, **kwargs: Any) -> Any:
        # `uninterrupted` built the loader of this config just before
        config = (steps._NEWEST.get() or (None,))[0]
        if config is not None and config.num_workers > 0 and not _in_reference[0]:
            digest = hashlib.sha1(repr(config).encode()).hexdigest()[:10]
            _log(f"run:{digest}")  # one uninterrupted run with workers: a second one of a config is a recomputation
        _in_reference[0] += 1
        try:
            return lengths(*args, **kwargs)
        finally:
            _in_reference[0] -= 1

    steps.epoch_lengths = reference_lengths  # type: ignore[assignment]


def counted(config: Any) -> Any:
    """The factory under test (``BENCH_POOLS_FACTORY`` of `stateful_contract.reference.factories`)."""
    from stateful_contract.reference import factories

    return getattr(factories, os.environ.get(FACTORY_ENV, "reference_wrapper"))(config)


if os.environ.get(LOG_ENV):  # imported by the new interpreter that unpickles `counted`: count there too
    install()


def one_run(factory: str, jobs: int) -> tuple[dict[str, collections.Counter[str]], dict[str, float], dict[str, Any]]:
    """Pool starts per clause and kind, seconds per clause, and facts of one supervised ci check."""
    import bench_pools  # this file as a module of its name: the new interpreter unpickles `counted` by it

    from stateful_contract import check

    # One log for every run of this process: the new interpreter SC10 resumes in is a child of a
    # zygote started once per process, with the environment of the first run.
    log = Path(os.environ.setdefault(LOG_ENV, str(Path(tempfile.mkdtemp(prefix="bench-pools-")) / "starts.tsv")))
    log.unlink(missing_ok=True)
    os.environ[FACTORY_ENV] = factory
    bench_pools.install()
    load = os.getloadavg()[0]
    started = time.perf_counter()
    report = check(bench_pools.counted, profile="ci", jobs=jobs,
                   factory_import=f"from stateful_contract.reference.factories import {factory} as factory")
    total = time.perf_counter() - started
    per: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    runs: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in log.read_text().splitlines() if log.exists() else []:
        clause, kind, pid = line.split("\t")
        if kind.startswith("run:"):
            runs[(pid, kind)] += 1
        else:
            per[clause][kind] += 1
    seconds = {r.id: r.seconds for r in report.results}
    workers = {r.id: r.outcome.coverage.get("with-workers", 0) for r in report.results}
    facts = {"total": total, "load": load, "passed": report.passed, "workers": workers, "jobs": jobs,
             "runs": sum(runs.values()), "recomputed": sum(n - 1 for n in runs.values()),
             "processes": len({pid for pid, _ in runs}),
             "statuses": {r.id: r.status for r in report.results}}
    return dict(per), seconds, facts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--factory", default="reference_wrapper", help="a factory of stateful_contract.reference.factories")
    parser.add_argument("--jobs", type=int, default=1, help="check(jobs=N): each job's child keeps runs of its own")
    parser.add_argument("--json", metavar="PATH", help="also write the counts and times as JSON")
    args = parser.parse_args()
    os.environ["CI"] = "true"  # Hypothesis' CI settings, as a downstream CI runs the check
    sys.path[:0] = [str(HERE), str(ROOT)]
    import warnings

    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    runs = [one_run(args.factory, args.jobs) for _ in range(args.repeat)]
    counts = [r[0] for r in runs]
    stable = all(c == counts[0] for c in counts)
    first, _, facts = runs[0]
    order = list(facts["statuses"])
    rows = ["| clause | verdict | worker examples | pool starts | of which uninterrupted runs | median time |",
            "|---|---|---|---|---|---|"]
    for name in ["-", *order]:
        c = first.get(name, collections.Counter())
        if name == "-":
            if not c:
                continue
            label, verdict, workers, t = "before the clauses (build, probe)", "", "", ""
        else:
            label, verdict, workers = name, facts["statuses"][name], str(facts["workers"][name])
            t = f"{statistics.median(r[1][name] for r in runs):.1f} s"
        rows.append(f"| {label} | {verdict} | {workers} | {sum(c.values())} | {c['reference']} | {t} |")
    total = sum(sum(c.values()) for c in first.values())
    reference = sum(c["reference"] for c in first.values())
    rows.append(f"| **all** | | {sum(facts['workers'].values())} | **{total}** | {reference} | "
                f"{statistics.median(r[2]['total'] for r in runs):.1f} s |")
    print("\n".join(rows))
    print(f"\nuninterrupted runs with workers: {facts['runs']} in {facts['processes']} loader processes, "
          f"{facts['recomputed']} of them a second run of a config in the same process")
    loads = [r[2]["load"] for r in runs]
    print(f"\n(`python benchmarks/bench_pools.py --repeat {args.repeat} --jobs {args.jobs}`: {args.factory}, ci profile, CI=true, "
          f"supervised, {args.jobs} job{'s' if args.jobs > 1 else ''}; counts {'the same in every run' if stable else 'DIFFERED between runs'}; "
          f"load average (1 min) {min(loads):.1f} to {max(loads):.1f}; python {sys.version.split()[0]}, "
          f"{time.strftime('%Y-%m-%d %H:%M')})")
    if not stable:
        for i, c in enumerate(counts):
            print(f"run {i}: " + ", ".join(f"{k} {sum(v.values())}" for k, v in sorted(c.items())))
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": [{k: dict(v) for k, v in c.items()} for c in counts],
                                               "seconds": [r[1] for r in runs], "facts": [r[2] for r in runs]},
                                              indent=1))


if __name__ == "__main__":
    main()
