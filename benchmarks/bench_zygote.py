"""Benchmark: what SC10's zygote (the new interpreter its fresh half resumes in) costs a one-shot check.

    python benchmarks/bench_zygote.py [--repeat 5] [--compare PATH]

Each round runs, in fresh processes, ``stateful-contract check`` with ``--clause SC10`` on the zoo's
``OffByOneResume`` (a broken loader: the search fails in its first examples and has no fresh half) and on its
``epoch_loader`` (a correct one: the search passes and its examples resume again in the new interpreter). For
each it takes the wall time and the CPU (user+sys) of the command and every process it reaped (the zygote
included: the checker kills and waits for it at exit), and counts the zygotes started: a ``sitecustomize``
put first on the path appends a line to a file (``STATEFUL_CONTRACT_BENCH_ZYGOTES``) in every interpreter whose
arguments name ``zygote_main``. With ``--compare PATH`` another checkout (main before a change, say) runs
the same commands in the same rounds, alternating; medians and the after/before ratios are printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "broken (OffByOneResume)": ("zoo:OffByOneResume", 1),
    "correct (epoch_loader)": ("zoo:epoch_loader", 0),
}
#: Run in every interpreter the command starts (``sitecustomize``): a zygote says so in the file.
HOOK = ("import os, sys\n"
        "if 'zygote_main' in ' '.join(sys.argv) and (f := os.environ.get('STATEFUL_CONTRACT_BENCH_ZYGOTES')):\n"
        "    open(f, 'a').write('z\\n')\n")


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(tree: Path, target: str, expected: int, hook_dir: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and zygotes of one ``check --clause SC10`` in ``tree``."""
    with tempfile.NamedTemporaryFile("r", suffix=".zygotes") as zygotes:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook_dir), str(tree), str(tree / "tests")]),
               "STATEFUL_CONTRACT_BENCH_ZYGOTES": zygotes.name}
        cpu, started = cpu_of_children(), time.monotonic()
        done = subprocess.run([sys.executable, "-m", "stateful_contract", "check", target, "--clause", "SC10",
                               "--quiet"], env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, check=False)
        wall, cpu = time.monotonic() - started, cpu_of_children() - cpu
        if done.returncode != expected:
            sys.exit(f"{tree}: {target} exited {done.returncode}, not {expected}:\n{done.stderr}")
        return wall, cpu, len(Path(zygotes.name).read_text().splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compare", type=Path, help="another checkout, run in the same rounds (before)")
    args = parser.parse_args()
    trees = {"after": ROOT, **({"before": args.compare.resolve()} if args.compare else {})}
    seen: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    with tempfile.TemporaryDirectory() as hook_dir:
        (Path(hook_dir) / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
        for round_ in range(args.repeat):
            for name, (target, expected) in COMMANDS.items():
                for side, tree in trees.items():
                    wall, cpu, zygotes = run(tree, target, expected, Path(hook_dir))
                    seen.setdefault((name, side), []).append((wall, cpu, zygotes))
                    print(f"round {round_ + 1} {name} {side}: {wall:.2f} s wall, {cpu:.2f} s CPU, {zygotes} zygotes, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\nmedians of {args.repeat}:")
    print("| command | side | wall | CPU (user+sys) | zygotes |")
    print("|---|---|---:|---:|---:|")
    for (name, side), runs in seen.items():
        wall, cpu, zyg = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"| {name} | {side} | {wall:.2f} s | {cpu:.2f} s | {zyg:g} |")
    if args.compare:
        for name in COMMANDS:
            after, before = seen[(name, "after")], seen[(name, "before")]
            print(f"{name}: after/before wall {statistics.median(r[0] for r in after) / statistics.median(r[0] for r in before):.2f}x, "
                  f"CPU {statistics.median(r[1] for r in after) / statistics.median(r[1] for r in before):.2f}x")


if __name__ == "__main__":
    main()
