"""Benchmark: how long the contract takes, against the import it cannot avoid.

    python benchmarks/bench_check.py [--repeat 3] [--long-repeat 2] [--compare PATH] [--write docs/performance.md]

Measures, as medians over ``--repeat`` rounds of runs in fresh processes, each round running
every command once (the machines are shared and noisy, so ratios to a baseline measured in
the same rounds are what count). Every subprocess runs this checkout (``PYTHONPATH`` is set
to it), or with ``--compare PATH`` also another one (a copy of main, say) in the same rounds:

- the baseline: ``python -c "import torch, torchdata.stateful_dataloader, hypothesis"``;
- SC02 alone on the seed's wrapper (``check ... --clause SC02``), target 1.5x the import;
- the full ci profile (every version-2 clause) on the reference wrapper, supervised, target
  5x the import; its worker examples and the share of the checkpoint space it visited, from
  its JSON report; the same with ``--jobs 2``;
- the thorough profile on a few clauses, on one core (``--jobs 1``) and on every core (the
  default): the measured speed-up, and the one the run reports;
- the harness's overhead: time outside the loader's own methods (factory, ``iter``, ``next``,
  ``state_dict``, ``load_state_dict``, timed by a proxy) over time inside them, in one
  in-process ci check; target 2x (these targets were issue 13's);
- with ``--floor``, in the same invocation, the least the worker examples can cost
  (`bench_worker_floor.py`: worker-pool starts counted in the ci check, times the cost of one).

``--issue21`` measures instead what issue 21's done-when asks, in one run, each figure with the
load average (1 min) it was taken at, as a ratio to "the import" as the issue means it: the stack,
``import torch, torchdata.stateful_dataloader, hypothesis`` (``import stateful_contract`` is lazy,
0.04 s, and is shown as a time only): (a) the full ci check of the reference wrapper with the
default options (whatever ``--jobs`` defaults to), (b) SC02 alone, (c) ``--exitfirst`` on
MindSpeed-MM's wrapper, if the CLI accepts it, and whether it printed the failing clause's
reproduction. Targets: (a) <= 10x, (b) <= 1.5x, (c) <= 3x. With ``--compare PATH`` the other
checkout's (a), (b), (c) run in the same rounds, alternating, and the after/before ratios are shown.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BASELINE = [PY, "-c", "import torch, torchdata.stateful_dataloader, hypothesis"]
CHECK = [PY, "-m", "stateful_contract", "check"]
SC02 = [*CHECK, "stateful_contract.reference.factories:mindspeed_wrapper", "--clause", "SC02", "--quiet"]
FULL = [*CHECK, "stateful_contract.reference.factories:reference_wrapper", "--quiet"]
#: Clauses of the thorough measurement (SC01 and SC18, which they need, run first, on one core).
THOROUGH_CLAUSES = ("SC10", "SC13", "SC14", "SC15")

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
report = check(factory, isolation="in-process", jobs=1)  # the timing proxy must live in this process
total = time.perf_counter() - t
examples = sum(r.examples for r in report.results)
print(json.dumps({"total": total, "loader": spent[0], "examples": examples, "passed": report.passed}))
"""


def run(cmd: list[str], tree: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False, env=env,
                          cwd=tree)
    return time.perf_counter() - started, done.stdout


def said(round_: int, name: str, seconds: float, detail: str = "") -> None:
    """One measurement, printed as it ends (a run cut short keeps every round it finished)."""
    print(f"round {round_} {name:14}: {seconds:7.2f} s, load {os.getloadavg()[0]:.1f}" + (f", {detail}" if detail else ""),
          flush=True)


def report_of(cmd: list[str], tree: Path) -> tuple[float, dict]:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        seconds, _ = run([*cmd, "--json", f"{d}/r.json"], tree)
        return seconds, json.loads(Path(f"{d}/r.json").read_text())


def facts(report: dict) -> dict[str, float]:  # type: ignore[type-arg]
    """Worker examples, the share of the checkpoint space, and the speed-up a report notes."""
    coverage: dict[str, int] = {}
    for c in report["clauses"]:
        for k, v in c.get("coverage", {}).items():
            coverage[k] = coverage.get(k, 0) + v
    out = {"workers": float(coverage.get("with-workers", 0)), "verdict_pass": float(report["verdict"] == "pass")}
    if report.get("num_workers"):
        sys.path.insert(0, str(ROOT))
        from stateful_contract.search.coverage import space_points

        space = space_points(report["num_workers"], report.get("checkpoint_alignment") is not None)
        out["space"] = len({k for k in coverage if k in space}) / len(space)
    noted = [float(m.group(1)) for n in report.get("notes", []) if (m := re.search(r"([\d.]+)x one core", n))]
    if noted:
        out["noted_speedup"] = noted[0]
    return out


IMPORT = [PY, "-c", "import stateful_contract"]
FULL_DEFAULT = [*CHECK, "stateful_contract.reference.factories:reference_wrapper", "--quiet"]
EXITFIRST = [*CHECK, "stateful_contract.reference.factories:mindspeed_wrapper", "--exitfirst"]


def accepts_exitfirst(tree: Path) -> bool:
    """Whether this checkout's ``check`` has ``--exitfirst`` (issue 21; another branch adds it)."""
    return "--exitfirst" in run([*CHECK, "--help"], tree)[1]


def issue21(repeat: int, tree: Path, compare: Path | None = None) -> list[tuple[str, str, str, str]]:
    """The rows of issue 21's done-when: measurement, median, ratio to the stack's import, load averages.

    "The import" is the issue's: ``import torch, torchdata.stateful_dataloader, hypothesis``, the cost no
    user avoids. ``import stateful_contract`` is lazy (torch is imported on first use), so a ratio to it
    says nothing; it is shown as a time only. Medians of ``repeat`` rounds, every command once a round;
    with ``compare``, that checkout's commands run in the same rounds, alternating with this one's, so
    the load both meet is the same and the after/before ratio is the figure to read."""
    trees = {"": tree, "before ": compare} if compare else {"": tree}
    commands: dict[str, tuple[list[str], Path]] = {"import": (IMPORT, tree), "stack": (BASELINE, tree)}
    for prefix, where in trees.items():
        commands[f"{prefix}full"] = (FULL_DEFAULT, where)
        commands[f"{prefix}sc02"] = (SC02, where)
        if accepts_exitfirst(where):
            commands[f"{prefix}x"] = (EXITFIRST, where)
    run(IMPORT, tree)  # warm the file cache
    times: dict[str, list[float]] = {k: [] for k in commands}
    loads: dict[str, list[float]] = {k: [] for k in commands}
    printed: dict[str, list[bool]] = {}
    for round_ in range(repeat):
        for name, (cmd, where) in commands.items():
            loads[name].append(os.getloadavg()[0])
            seconds, out = run(cmd, where)
            times[name].append(seconds)
            if name.endswith("x"):
                printed.setdefault(name, []).append("Reproduce" in out or "reproduc" in out.lower())
            said(round_, name, seconds, "" if not name.endswith("x") else
                 "reproduction printed" if printed[name][-1] else "reproduction NOT printed")
    med = {k: statistics.median(v) for k, v in times.items()}

    def row(label: str, name: str, target: str) -> tuple[str, str, str, str]:
        load = f"{min(loads[name]):.1f} to {max(loads[name]):.1f}"
        ratio = "1.00x" if name == "stack" else "" if name == "import" else f"{med[name] / med['stack']:.2f}x"
        return (label, f"{med[name]:.2f} s", ratio, f"{load}; {target}" if target else load)

    rows = [row('`python -c "import torch, torchdata.stateful_dataloader, hypothesis"` (the import)', "stack", ""),
            row('`python -c "import stateful_contract"` (lazy: no baseline)', "import", "")]
    for prefix in trees:
        rows += [row(f"{prefix}(a) `check reference_wrapper`, default options (ci)", f"{prefix}full",
                     "target <= 10x"),
                 row(f"{prefix}(b) `check mindspeed_wrapper --clause SC02`", f"{prefix}sc02", "target <= 1.5x")]
        if f"{prefix}x" in med:
            shown = "reproduction printed" if all(printed[f"{prefix}x"]) else "reproduction NOT printed"
            rows.append(row(f"{prefix}(c) `check mindspeed_wrapper --exitfirst`", f"{prefix}x",
                            f"target <= 3x; {shown}"))
        else:
            rows.append((f"{prefix}(c) `check mindspeed_wrapper --exitfirst`", "not available", "",
                         "this checkout's CLI has no --exitfirst"))
    if compare:
        rows += [(f"after / before, {label}", "", f"{med[name] / med[f'before {name}']:.2f}x", "same rounds")
                 for label, name in (("(a)", "full"), ("(b)", "sc02"), ("(c)", "x"))
                 if name in med and f"before {name}" in med]
    return rows


def main_issue21(repeat: int, write: str | None, compare: Path | None) -> None:
    rows = issue21(repeat, ROOT, compare)
    table = ["| measurement | median | vs. the import (torch, torchdata, hypothesis) | load average (1 min); note |",
             "|---|---|---|---|"]
    table += [f"| {' | '.join(r)} |" for r in rows]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    against = f" --compare {compare}" if compare else ""
    footer = (f"`python benchmarks/bench_check.py --issue21 --repeat {repeat}{against}`: medians of {repeat}, "
              f"{cores} cores, python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M')}")
    print("\n".join(table))
    print(f"({footer})")
    if write:
        with Path(write).open("a", encoding="utf-8") as f:
            f.write("\n" + "\n".join(table) + f"\n\n({footer}.)\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compare", metavar="PATH", type=Path, help="another checkout, measured in the same rounds")
    parser.add_argument("--write", metavar="PATH", help="append the results as a Markdown table")
    parser.add_argument("--long-repeat", type=int, default=None, metavar="N",
                        help="rounds that also run the full checks (default: every round); the import and SC02 "
                             "run in every round")
    parser.add_argument("--no-thorough", action="store_true", help="skip the thorough measurement (minutes)")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the floor of the worker examples (bench_worker_floor.py, 2 minutes)")
    parser.add_argument("--issue21", action="store_true",
                        help="measure issue 21's done-when instead: the import, the default ci check, SC02, -x")
    args = parser.parse_args()
    if args.issue21:
        main_issue21(args.repeat, args.write, args.compare)
        return

    thorough = [*CHECK, "stateful_contract.reference.factories:reference_wrapper", "--quiet", "--profile", "thorough",
                *[a for c in THOROUGH_CLAUSES for a in ("--clause", c)]]
    run(BASELINE, ROOT)  # warm the file cache
    times: dict[str, list[float]] = {}
    found: dict[str, list[dict[str, float]]] = {}
    loads: list[float] = []

    def note(name: str, seconds: float, report: dict | None = None) -> None:  # type: ignore[type-arg]
        times.setdefault(name, []).append(seconds)
        if report is not None:
            found.setdefault(name, []).append(facts(report))
        said(round_, name, seconds, "" if report is None else
             f"verdict {report['verdict']}, "
             + ", ".join(f"{k} {v:g}" for k, v in found[name][-1].items() if k != "verdict_pass"))

    overhead = []
    round_ = 0
    long_rounds = args.repeat if args.long_repeat is None else max(1, min(args.long_repeat, args.repeat))  # the table needs one
    for round_ in range(args.repeat):
        loads.append(os.getloadavg()[0])
        note("base", run(BASELINE, ROOT)[0])
        note("sc02", run(SC02, ROOT)[0])
        if args.compare:
            note("before_sc02", run(SC02, args.compare)[0])
        if round_ >= long_rounds:
            continue
        note("full", *report_of(FULL, ROOT))
        note("full_j2", *report_of([*FULL, "--jobs", "2"], ROOT))
        if args.compare:
            note("before_full", *report_of(FULL, args.compare))
        if not args.no_thorough:
            note("thorough_1", *report_of([*thorough, "--jobs", "1"], ROOT))
            note("thorough_n", *report_of(thorough, ROOT))
        overhead.append(json.loads(run([PY, "-c", OVERHEAD], ROOT)[1].strip().splitlines()[-1]))
        inside = overhead[-1]
        said(round_, "overhead", inside["total"], f"{inside['loader']:.2f} s inside the loader's methods, "
             f"{(inside['total'] - inside['loader']) / inside['loader']:.2f}x outside / inside")
        loads.append(os.getloadavg()[0])

    med = {name: statistics.median(ts) for name, ts in times.items()}
    fact = {name: {k: statistics.median(f[k] for f in fs if k in f) for k in fs[0]} for name, fs in found.items()}
    base = med["base"]
    total = statistics.median(r["total"] for r in overhead)
    loader = statistics.median(r["loader"] for r in overhead)
    rows = [
        ("import torch, torchdata, hypothesis (baseline)", f"{base:.2f} s", "1.0x", ""),
        ("`check mindspeed_wrapper --clause SC02` (supervised)", f"{med['sc02']:.2f} s", f"{med['sc02'] / base:.2f}x",
         "target <= 1.5x"),
        ("`check reference_wrapper` (ci, every v2 clause, supervised, one job)", f"{med['full']:.1f} s",
         f"{med['full'] / base:.1f}x", "target <= 5x"),
        ("the same, `--jobs 2`", f"{med['full_j2']:.1f} s", f"{med['full_j2'] / base:.1f}x",
         f"one job / two: {med['full'] / med['full_j2']:.2f}x"),
        ("worker examples (num_workers > 0) in the ci check", f"{fact['full']['workers']:.0f}", "",
         "target >= 4x before" + (f": before {fact['before_full']['workers']:.0f}, "
                                  f"{fact['full']['workers'] / fact['before_full']['workers']:.1f}x"
                                  if "before_full" in fact else "")),
        ("share of the checkpoint space the ci check visited", f"{100 * fact['full'].get('space', 0):.0f}%", "",
         "epochs x positions x window phases x worker counts x hops"),
    ]
    if "before_full" in med:
        rows += [
            ("before: `check reference_wrapper` (ci)", f"{med['before_full']:.1f} s",
             f"{med['before_full'] / base:.1f}x", f"after / before: {med['full'] / med['before_full']:.2f}x"),
            ("before: `--clause SC02`", f"{med['before_sc02']:.2f} s", f"{med['before_sc02'] / base:.2f}x", ""),
        ]
    if "thorough_1" in med:
        rows += [
            (f"thorough, {', '.join(THOROUGH_CLAUSES)}, `--jobs 1`", f"{med['thorough_1']:.1f} s",
             f"{med['thorough_1'] / base:.1f}x", ""),
            ("the same on every core (the default)", f"{med['thorough_n']:.1f} s", f"{med['thorough_n'] / base:.1f}x",
             f"speed-up {med['thorough_1'] / med['thorough_n']:.2f}x measured, "
             f"{fact['thorough_n'].get('noted_speedup', 1.0):.2f}x as the report notes it"),
        ]
    rows += [
        ("harness overhead: time outside the loader / inside it (in-process ci check)",
         f"{(total - loader) / loader:.2f}x", f"{loader:.1f} s inside of {total:.1f} s", "target <= 2x"),
    ]
    if args.floor:
        floor = run([PY, str(ROOT / "benchmarks" / "bench_worker_floor.py"), "--json"], ROOT)[1]
        rows += [(f"floor: {a}", b, c, "") for a, b, c in json.loads(floor.strip().splitlines()[-1])]
    table = ["| measurement | median | ratio / detail | note |", "|---|---|---|---|"]
    table += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    footer = (f"repeat={args.repeat} (the full checks {long_rounds}), {cores} cores, load average (1 min) {min(loads):.1f} to {max(loads):.1f} "
              f"during the rounds, python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M')}")
    print("\n".join(table))
    print(f"({footer})")
    print(json.dumps({"times": times, "facts": found}), file=sys.stderr)
    if args.write:
        with Path(args.write).open("a", encoding="utf-8") as f:
            f.write("\n" + "\n".join(table) + f"\n\n{footer}.\n")


if __name__ == "__main__":
    main()
