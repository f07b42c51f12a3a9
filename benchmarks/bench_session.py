"""Benchmark: a pytest session of several contract classes, and the new interpreters it starts.

    python benchmarks/bench_session.py [--classes 3] [--repeat 2] [--compare PATH]

Writes a test file of ``--classes`` `StatefulLoaderContract` classes (torchdata's `StatefulDataLoader`, no
workers, profile dev, the default jobs: every core) and runs ``pytest`` on it in a fresh process, as medians
over ``--repeat`` rounds; with ``--compare PATH`` another checkout (a copy of main, say) runs in the same rounds,
alternating. Besides the wall time it counts the zygotes the session started (`isolation/interpreter.py`:
each imports torch once), found by a variable only this run's processes carry, polled every 50 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
TAG = "STATEFUL_CONTRACT_BENCH_SESSION"

CLASS = '''
class TestLoader{n}(StatefulLoaderContract):
    profile = "dev"
    config_space = ConfigSpace(num_workers=(0,))

    def make_loader(self, config):
        return config.stateful_dataloader()
'''


def session(tree: Path, classes: int, workdir: Path) -> tuple[float, int, bool]:
    """Wall seconds, zygotes started, and whether pytest passed, for one session run on ``tree``."""
    test = workdir / "test_contract_classes.py"
    test.write_text("from stateful_contract import ConfigSpace\nfrom stateful_contract.testing import "
                    "StatefulLoaderContract\n" + "".join(CLASS.format(n=n) for n in range(classes)), encoding="utf-8")
    tag = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(tree), TAG: tag}
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)], cwd=workdir,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    zygotes: set[int] = set()
    while proc.poll() is None:
        for p in psutil.process_iter(["cmdline"]):
            try:
                if any("zygote_main" in part for part in p.info["cmdline"] or ()) and p.environ().get(TAG) == tag:
                    zygotes.add(p.pid)
            except psutil.Error:
                continue
        time.sleep(0.05)
    return time.perf_counter() - started, len(zygotes), proc.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--compare", type=Path, metavar="PATH", help="another checkout, measured in the same rounds")
    args = parser.parse_args()
    trees = {"this checkout": ROOT, **({f"compare ({args.compare})": args.compare} if args.compare else {})}
    seen: dict[str, list[tuple[float, int, bool]]] = {name: [] for name in trees}
    loads = []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.repeat):
            for name, tree in trees.items():
                loads.append(os.getloadavg()[0])
                seen[name].append(session(tree, args.classes, Path(d)))
    for name, runs in seen.items():
        print(f"{name}: {args.classes} classes, wall {statistics.median(r[0] for r in runs):.1f} s (median of "
              f"{len(runs)}: {', '.join(f'{r[0]:.1f}' for r in runs)}), zygotes started {[r[1] for r in runs]}, "
              f"pytest passed {[r[2] for r in runs]}")
    print(f"load average (1 min) {min(loads):.1f} to {max(loads):.1f}, {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
