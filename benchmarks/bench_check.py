"""Benchmark: how long the contract takes, against the import it cannot avoid.

    python benchmarks/bench_check.py [--repeat 3] [--write docs/performance.md]

Measures, as medians over ``--repeat`` rounds of runs in fresh processes, each round running
every command once (the machines are shared and noisy, so ratios to a baseline measured in
the same rounds are what count):

- the baseline: ``python -c "import torch, torchdata.stateful_dataloader, hypothesis"``;
- the verdict on the seed's signature bug alone (``check ... --clause SC02``), target 1.5x,
  supervised (the default) and ``--in-process``;
- the full ci profile on a correct loader (the reference wrapper, worker configs
  included), target 20x, supervised and ``--in-process``;
- examples per second, and the harness's overhead over the loader work it performs
  (time inside the factory and the loader's own methods, measured by a timing proxy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable
BASELINE = [PY, "-c", "import torch, torchdata.stateful_dataloader, hypothesis"]
SC02 = [PY, "-m", "stateful_contract", "check", "stateful_contract.reference.factories:mindspeed_wrapper",
        "--clause", "SC02", "--quiet"]
FULL = [PY, "-m", "stateful_contract", "check", "stateful_contract.reference.factories:reference_wrapper",
        "--quiet"]
IN_PROCESS = ["--in-process"]

#: Runs in-process with a timing proxy around the loader, to split harness from loader time.
OVERHEAD = r"""
import json, time
from stateful_contract import check
from stateful_contract.reference.factories import reference_wrapper

spent = [0.0]

class Timed:
    def __init__(self, inner): self.inner = inner
    def _t(self, fn, *a):
        t = time.perf_counter()
        try: return fn(*a)
        finally: spent[0] += time.perf_counter() - t
    def __iter__(self): return TimedIter(self._t(iter, self.inner), self)
    def state_dict(self): return self._t(self.inner.state_dict)
    def load_state_dict(self, s): return self._t(self.inner.load_state_dict, s)

class TimedIter:
    def __init__(self, it, owner): self.it, self.owner = it, owner
    def __iter__(self): return self
    def __next__(self): return self.owner._t(next, self.it)

def factory(config):
    t = time.perf_counter()
    try: return Timed(reference_wrapper(config))
    finally: spent[0] += time.perf_counter() - t

t = time.perf_counter()
report = check(factory, isolation="in-process")  # the timing proxy must live in this process
total = time.perf_counter() - t
examples = sum(r.examples for r in report.results)
print(json.dumps({"total": total, "loader": spent[0], "examples": examples, "passed": report.passed}))
"""


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", metavar="PATH", help="append the results as a Markdown table")
    args = parser.parse_args()

    timed(BASELINE)  # warm the file cache
    # In rounds, every command once per round: the load of a shared machine drifts, and a
    # drift must not land on one command's runs only.
    commands = {"base": BASELINE, "sc02": SC02, "sc02_in": SC02 + IN_PROCESS, "full": FULL,
                "full_in": FULL + IN_PROCESS}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            times[name].append(timed(cmd))
    base, sc02, sc02_in, full, full_in = (statistics.median(times[name]) for name in commands)
    runs = [json.loads(subprocess.run([PY, "-c", OVERHEAD], capture_output=True, text=True, check=True)
                       .stdout.strip().splitlines()[-1]) for _ in range(args.repeat)]
    total = statistics.median(r["total"] for r in runs)
    loader = statistics.median(r["loader"] for r in runs)
    examples = statistics.median(r["examples"] for r in runs)
    rows = [
        ("import torch, torchdata, hypothesis (baseline)", f"{base:.2f} s", "1.0x", ""),
        ("`check mindspeed_wrapper --clause SC02` (supervised)", f"{sc02:.2f} s", f"{sc02 / base:.2f}x",
         "target <= 1.5x"),
        ("the same, `--in-process`", f"{sc02_in:.2f} s", f"{sc02_in / base:.2f}x",
         f"supervised / in-process: {sc02 / sc02_in:.2f}x"),
        ("`check reference_wrapper` (ci, workers included, supervised)", f"{full:.2f} s", f"{full / base:.1f}x",
         "target <= 20x"),
        ("the same, `--in-process`", f"{full_in:.2f} s", f"{full_in / base:.1f}x",
         f"supervised / in-process: {full / full_in:.2f}x"),
        ("examples per second (ci, in-process check)", f"{examples / total:.0f}/s",
         f"{examples:.0f} examples in {total:.1f} s", ""),
        ("time inside the loader (factory, iter, next, state methods)", f"{loader:.1f} s",
         f"{100 * loader / total:.0f}% of the check", "the rest is the harness"),
    ]
    table = ["| measurement | median | ratio / detail | note |", "|---|---|---|---|"]
    table += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    print("\n".join(table))
    print(f"(repeat={args.repeat}, python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d')})")
    if args.write:
        with Path(args.write).open("a", encoding="utf-8") as f:
            f.write("\n" + "\n".join(table) + f"\n\nMeasured {time.strftime('%Y-%m-%d')}, "
                    f"median of {args.repeat} runs each.\n")


if __name__ == "__main__":
    main()
